"""Human baselines: the study page (built from a tiny Common-O split and tiny chains, answered by clicking in the real
headless Chromium the report tests use), its answers file scored by `eval score` and compared with `random`, the
agreement figures against a hand computation, and the refusal of corrupt or foreign answers files."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from commonlink.cli import app
from commonlink.errors import InputError
from commonlink.human.agreement import agreement_of_files, fleiss_kappa
from commonlink.human.answers import read_answers, score_answers
from commonlink.human.items import study_spec, study_units
from commonlink.human.study import annotator_plans, write_study
from commonlink.kinds.association.task import AssociationSettings
from tests.fixtures.tiny_chains import write_tiny_chain_files
from tests.fixtures.tiny_models import common_o_rows, write_common_o_split
from tests.test_html_report import _open, browser  # noqa: F401 - the headless Chromium fixture (skips when absent)

ROWS = 5


def _cli(*args: str) -> str:
    result = CliRunner().invoke(app, list(map(str, args)))
    assert result.exit_code == 0, result.output
    return result.output


def _study_data(page: Path) -> dict:
    text = page.read_text(encoding="utf-8")
    return json.loads(re.search(r'<script type="application/json" id="study-data">(.*?)</script>', text, re.S)[1])


def _images(study: dict) -> list[str]:
    return [p["image"] for u in study["units"] for q in u["questions"] for p in q["parts"] if "image" in p]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("human-data")
    write_common_o_split(root / "co", common_o_rows(ROWS, seed=4, image_size=(96, 72)))
    # 9 steps a chain: the paper protocol scores steps 6-8 (its warm-up takes 0, 2, 4), strict 3-8
    chains = write_tiny_chain_files(root / "ch", image_size=(48, 36), max_steps=6)
    return {"co": root / "co", "chains": chains, "root": root}


def _answers_file(path: Path, page: Path, annotator: str, picks: dict[str, list[int]], units) -> Path:
    """An answers file as the page exports it (header from the page's data), for tests without a browser."""
    d = _study_data(page)
    header = {
        "format": d["answers_format"],
        "version": d["version"],
        "study": d["study"],
        "source": d["source"],
        "fingerprint": d["fingerprint"],
        "split": d["spec"]["split"],
        "spec": d["spec"],
        "annotator": annotator,
    }
    unit_of = {q.id: u.id for u in units for q in u.questions}
    lines = [json.dumps(header)] + [
        json.dumps({"unit": unit_of[i], "item": i, "answer": a, "ms": 900 + n})
        for n, (i, a) in enumerate(picks.items())
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


# ----------------------------------------------------------------------------------------------- the page itself
def test_study_folder_is_self_contained_and_safe(data, tmp_path):
    spec = study_spec("main")
    summary = write_study(data["co"], spec, tmp_path / "s", annotators=["alice", "bob"], seed=3, sample=3)
    d = _study_data(summary.path)
    plans = annotator_plans(ROWS, ["alice", "bob"], seed=3, sample=3)
    asked = sorted({r for p in plans for r in p["units"]})
    assert summary.units == len(asked) == len(d["units"]) < ROWS  # only the rows someone is asked are in the page
    images = _images(d)
    assert images and all((tmp_path / "s" / i).is_file() for i in images)
    _, units = study_units(data["co"], spec)
    assert [len(p["units"]) for p in d["plans"]] == [3, 3]
    for shown, plan in zip(d["plans"], plans):
        assert [d["units"][k]["id"] for k in shown["units"]] == [units[r].id for r in plan["units"]]
    assert d["plans"][0]["units"] != d["plans"][1]["units"]  # each annotator their own seeded order
    assert "gold" not in d["units"][0]["questions"][0]  # Common-O answers are not in the page
    # the page shows what the model is sent: the protocol-sized images (shorter side 384) and the prompt verbatim
    q = units[0].questions[0]
    assert [p["text"] for p in d["units"][0]["questions"][0]["parts"] if "text" in p] == [
        v for k, v in q.parts if k == "text"
    ]
    assert min(v.size for k, v in q.parts if k == "image")[1] == 384
    again = write_study(data["co"], spec, tmp_path / "s2", annotators=["alice", "bob"], seed=3, sample=3)
    assert again.path.read_bytes() == summary.path.read_bytes()  # reproducible
    redone = write_study(data["co"], spec, tmp_path / "s", annotators=["alice"], seed=3, sample=1)  # the same folder
    names = set(_images(_study_data(redone.path)))
    assert {f"images/{f.name}" for f in (tmp_path / "s" / "images").iterdir()} == names  # stale images removed
    html = summary.path.read_text(encoding="utf-8")
    assert "innerHTML" not in html and "</script>" not in html.split('id="study-data">')[1].split("</script>")[0]


def test_markup_in_the_data_cannot_leave_the_data_block(data, tmp_path):
    from commonlink.eval.report.page import json_for_script

    text = json_for_script({"x": "</script><script>alert(1)</script><!--"})
    assert "</" not in text and "<!--" not in text and json.loads(text)["x"].startswith("</script>")
    with pytest.raises(InputError, match="holds other files"):
        (tmp_path / "busy").mkdir()
        (tmp_path / "busy" / "notes.txt").write_text("mine")
        write_study(data["co"], study_spec("main"), tmp_path / "busy")


# ----------------------------------------------------------------------------------------------- in a browser
def _play(browser, page: Path, decide, *, start, reload_after: int) -> tuple[str, list[str]]:  # noqa: F811
    """Answer every question by clicking (``decide(question id) -> choice numbers``), reloading the page once after
    ``reload_after`` answers; returns the exported answers text and the question ids in the order answered."""
    from selenium.webdriver.support.ui import WebDriverWait

    def wait_for(script: str) -> None:  # a page state, however slowly a loaded machine gets there (never a sleep)
        WebDriverWait(browser, 120, poll_frequency=0.05).until(lambda b: b.execute_script(script))

    _open(browser, page)
    start()
    answered: list[str] = []
    while browser.find_element("id", "question").is_displayed():
        box = browser.find_element("id", "question")
        qid = box.get_attribute("data-question")
        wait_for("return Array.from(document.querySelectorAll('#question img')).every(i => i.complete)")
        widths = browser.execute_script(
            "return Array.from(document.querySelectorAll('#question img')).map(i => i.naturalWidth)"
        )
        assert widths and all(w > 0 for w in widths), widths  # every image loads from disk (allowed by the CSP)
        assert qid not in answered  # a reload resumes at the first unanswered question
        assert browser.find_element("id", "submit").get_attribute("disabled")  # nothing picked yet
        for k in decide(qid):
            box.find_element("css selector", f'button.choice[data-index="{k}"]').click()
        browser.find_element("id", "submit").click()
        answered.append(qid)
        # the answer is taken (and stored) once the page has moved on from this question
        wait_for(
            "var q = document.getElementById('question'), d = document.getElementById('done');"
            f"return (d && d.offsetParent !== null) || (q && q.getAttribute('data-question') !== {json.dumps(qid)});"
        )
        if len(answered) == reload_after:
            browser.refresh()
            # the page restores the study from storage after it loads: wait for that state (start hidden again)
            wait_for(
                "var s = document.getElementById('start'), q = document.getElementById('question');"
                "return document.readyState === 'complete' && s && s.offsetParent === null"
                " && q && q.offsetParent !== null;"
            )
            assert not browser.find_element("id", "start").is_displayed()
    assert browser.find_element("id", "done").is_displayed()
    browser.find_element("id", "export").click()
    errors = [e["message"] for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, errors
    return browser.find_element("id", "export-text").get_attribute("value"), answered


def test_a_person_answers_common_o_in_the_browser_and_is_scored_beside_random(browser, data, tmp_path):  # noqa: F811
    out = tmp_path / "study"
    _cli("human", "study", data["co"], "--split", "main", "--out", out, "--annotators", "dana,erin")
    _, units = study_units(data["co"], study_spec("main"))
    questions = {q.id: q for u in units for q in u.questions}
    wrong = {units[1].questions[0].id, units[3].questions[0].id}

    def decide(qid):
        q = questions[qid]
        return [k for k in range(len(q.choices)) if k not in q.gold][:1] if qid in wrong else q.gold

    def start():
        browser.find_element("css selector", 'button.start[data-annotator="dana"]').click()

    text, answered = _play(browser, out / "index.html", decide, start=start, reload_after=2)
    assert sorted(answered) == sorted(questions)
    lines = [json.loads(x) for x in text.splitlines()]
    assert lines[0]["annotator"] == "dana" and lines[0]["split"] == "main" and len(lines) == 1 + ROWS
    assert all(isinstance(x["ms"], int) and x["ms"] >= 0 for x in lines[1:])
    answers = tmp_path / "dana.jsonl"
    answers.write_text(text, encoding="utf-8")

    run = tmp_path / "runs" / "dana"
    _cli("eval", "score", answers, "--data", data["co"], "--split", "main", "--out", run)
    results = json.loads((run / "results.json").read_text())
    assert results["run_name"] == "dana" and results["backend"] == "human"
    assert results["metrics"]["overall"]["accuracy"] == pytest.approx((ROWS - len(wrong)) / ROWS)
    assert results["human"]["units_scored"] == ROWS and (run / "report.html").is_file()
    _cli("eval", "commono", "--model", "random", "--data", data["co"], "--split", "main", "--out", tmp_path / "rnd")
    table = _cli("eval", "compare", run, tmp_path / "rnd")
    assert "dana" in table and "random" in table


def test_a_person_plays_chains_in_the_browser_and_is_scored_beside_random(browser, data, tmp_path):  # noqa: F811
    out = tmp_path / "chain-study"
    _cli("human", "study", data["chains"], "--split", "synchronous", "--out", out, "--memory", "nlm")
    spec = study_spec("synchronous", settings=AssociationSettings(memory="nlm"))
    _, units = study_units(data["chains"], spec)
    questions = {q.id: (u, k, q) for u in units for k, q in enumerate(u.questions)}
    first = _study_data(out / "index.html")["plans"][0]["units"][0]
    failing = _study_data(out / "index.html")["units"][first]["id"]  # the first chain shown: wrong at step 2
    first = next(k for k, u in enumerate(units) if u.id == failing)

    def decide(qid):
        unit, k, q = questions[qid]
        return [1 - q.gold[0]] if unit.id == failing and k == 1 else q.gold

    def start():
        browser.find_element("id", "annotator").send_keys("carol")
        browser.find_element("id", "start-button").click()

    text, answered = _play(browser, out / "index.html", decide, start=start, reload_after=4)
    # the chain that failed shows no step after the wrong one; the others are played to their last step
    assert len(answered) == sum(len(u.questions) for u in units) - (len(units[first].questions) - 2)
    # each step's prompt holds the memory the model's NLM memory shows at that step of the all-correct path
    assert all(q.parts[0][1].startswith("Before this question, you have learnt") for _, _, q in questions.values())
    answers = tmp_path / "carol.jsonl"
    answers.write_text(text, encoding="utf-8")
    run = tmp_path / "runs" / "carol"
    _cli("eval", "score", answers, "--data", data["chains"], "--split", "synchronous", "--out", run)
    results = json.loads((run / "results.json").read_text())
    lengths = [1 if u.id == failing else len(u.questions) for u in units]
    assert results["metrics"]["summary"]["chains"] == len(units)
    per = results["metrics"]["per_concept"]
    assert sum(c["mean_steps"] * c["chains"] for c in per.values()) == pytest.approx(sum(lengths))
    assert results["association"]["deduction"] is False and results["association"]["memory"] == "nlm"
    rnd = tmp_path / "rnd-chains"
    _cli(
        "eval", "association", "--data", data["chains"], "--config", "synchronous", "--model", "random",
        "--no-deduction", "--memory", "nlm", "--out", rnd, "--quiet",
    )  # fmt: skip
    table = _cli("eval", "compare", run, rnd)
    assert "carol" in table and "random" in table


# ----------------------------------------------------------------------------------------------- agreement
def test_two_annotators_agreement_and_kappa_equal_a_hand_computation(data, tmp_path):
    spec = study_spec("main")
    page = write_study(data["co"], spec, tmp_path / "s").path
    _, units = study_units(data["co"], spec)
    qs = [u.questions[0] for u in units]
    other = [[k for k in range(len(q.choices)) if k not in q.gold][:1] for q in qs]
    # A: right on items 0-3, wrong on 4. B: right on 0-1, wrong (the same way as A) on 4, wrong on 2; skips 3.
    a = {q.id: q.gold for q in qs[:4]} | {qs[4].id: other[4]}
    b = {qs[0].id: qs[0].gold, qs[1].id: qs[1].gold, qs[2].id: other[2], qs[4].id: other[4]}
    files = [
        _answers_file(tmp_path / "a.jsonl", page, "A", a, units),
        _answers_file(tmp_path / "b.jsonl", page, "B", b, units),
    ]
    result = agreement_of_files(files, data["co"], "main", n_boot=200, seed=1)
    labels = result["label_agreement"]
    assert labels["per_annotator"]["A"]["value"] == pytest.approx(4 / 5)
    assert labels["per_annotator"]["B"]["value"] == pytest.approx(2 / 4)
    assert labels["pooled"]["value"] == pytest.approx(6 / 9) and labels["pooled"]["n"] == 9
    # by hand: on the 4 items both answered, they agree on 0, 1 and 4 -> 3/4
    assert result["pairwise_agreement"][0]["value"] == pytest.approx(3 / 4)
    # Fleiss by hand, 4 items x 2 raters. Categories: gold0, gold1, gold2, other2, other4 (distinct answer sets
    # unless two happen to coincide, checked below). Items 0, 1, 4: both raters in one category (P_i = 1); item 2:
    # split (P_i = 0). P = 3/4. Category shares over 8 ratings: 2/8, 2/8, 1/8, 1/8, 2/8 -> Pe = (4+4+1+1+4)/64.
    assert len({tuple(qs[0].gold), tuple(qs[1].gold), tuple(qs[2].gold), tuple(other[2]), tuple(other[4])}) == 5
    p_bar, p_e = 3 / 4, 14 / 64
    assert result["fleiss_kappa"]["value"] == pytest.approx((p_bar - p_e) / (1 - p_e))
    assert result["fleiss_kappa"]["n"] == 4 and result["fleiss_kappa"]["se"] > 0
    assert "bootstrap" in result["se_method"] and "Fleiss' kappa" in result["card_sentence"]
    again = agreement_of_files(files, data["co"], "main", n_boot=200, seed=1)
    assert again == result  # seeded
    out = tmp_path / "agreement.json"
    text = _cli("human", "agreement", *files, "--data", data["co"], "--split", "main", "--out", out, "--bootstrap", 50)
    assert "Fleiss' kappa" in text and json.loads(out.read_text())["fleiss_kappa"]["value"] == pytest.approx(
        (p_bar - p_e) / (1 - p_e)
    )


def test_fleiss_kappa_matches_the_worked_example_of_fleiss_1971():
    # Wikipedia's worked example (10 items, 14 raters, 5 categories): kappa = 0.210
    table = [
        [0, 0, 0, 0, 14], [0, 2, 6, 4, 2], [0, 0, 3, 5, 6], [0, 3, 9, 2, 0], [2, 2, 8, 1, 1],
        [7, 7, 0, 0, 0], [3, 2, 6, 3, 0], [2, 5, 3, 2, 2], [6, 5, 2, 1, 0], [0, 2, 2, 3, 7],
    ]  # fmt: skip
    assert fleiss_kappa(table) == pytest.approx(0.20993, abs=1e-5)
    assert fleiss_kappa([[2, 0], [2, 0]]) is None  # one category: chance agreement is 1


# ----------------------------------------------------------------------------------------------- refusals
@pytest.fixture(scope="module")
def good_file(data, tmp_path_factory):
    root = tmp_path_factory.mktemp("human-refusals")
    spec = study_spec("main")
    page = write_study(data["co"], spec, root / "s").path
    _, units = study_units(data["co"], spec)
    picks = {u.questions[0].id: u.questions[0].gold for u in units}
    return _answers_file(root / "good.jsonl", page, "fay", picks, units), units


def _edit(src: Path, dest: Path, line: int, change) -> Path:
    lines = src.read_text(encoding="utf-8").splitlines()
    lines[line - 1] = change(lines[line - 1])
    dest.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return dest


@pytest.mark.parametrize(
    "line,change,message",
    [
        (3, lambda s: s[:-3], r"line 3: not valid JSON"),
        (2, lambda s: s.replace('"item": "', '"item": "nope-'), r"line 2: item nope-\S+ is not a question"),
        (4, lambda s: re.sub(r'"answer": \[[^]]*\]', '"answer": [99]', s), r"line 4: answer \[99\] is not a pick"),
        (2, lambda s: s.replace('"ms": 900', '"ms": -5'), r"line 2: 'ms'"),
        (1, lambda s: s.replace('"fingerprint": "', '"fingerprint": "x'), r"another release"),
        (1, lambda s: s.replace("commonlink-human-answers", "something-else"), r"line 1: not a human answers header"),
    ],
)
def test_corrupt_or_foreign_answers_are_refused_naming_the_row(good_file, data, tmp_path, line, change, message):
    path = _edit(good_file[0], tmp_path / "bad.jsonl", line, change)
    with pytest.raises(Exception, match=message):
        score_answers(path, data["co"], "main", out_dir=tmp_path / "run")
    assert not (tmp_path / "run" / "results.json").exists()


def test_answers_for_another_split_are_refused_by_the_cli(good_file, data, tmp_path):
    result = CliRunner().invoke(
        app,
        [
            "eval",
            "score",
            str(good_file[0]),
            "--data",
            str(data["co"]),
            "--split",
            "challenge",
            "--out",
            str(tmp_path / "r"),
        ],
    )
    assert result.exit_code == 1 and "for split 'main', not 'challenge'" in " ".join(result.output.split())
    assert not (tmp_path / "r" / "results.json").exists()


def test_a_chain_step_after_the_chain_ended_is_refused(data, tmp_path):
    spec = study_spec("synchronous")
    page = write_study(data["chains"], spec, tmp_path / "s").path
    _, units = study_units(data["chains"], spec)
    unit = units[0]
    picks = {unit.questions[0].id: [1 - unit.questions[0].gold[0]], unit.questions[1].id: unit.questions[1].gold}
    path = _answers_file(tmp_path / "late.jsonl", page, "gus", picks, units)
    with pytest.raises(
        InputError, match=r"line 3: \S+ answers a step after the chain ended \(wrong answer on line 2\)"
    ):
        score_answers(path, data["chains"], "synchronous", out_dir=tmp_path / "run")
    assert read_answers(path).annotator == "gus"


# ----------------------------------------------------------------------------------------------- the card
def test_the_card_takes_the_agreement_sentence_as_its_human_validation_answer(tmp_path):
    from commonlink.release.build import build_release
    from commonlink.release.card_info import HUMAN_VALIDATION, card_info_template, unanswered_questions
    from tests.fixtures.catalogs import write_rotating_catalog, write_tiny_pairs

    records = write_rotating_catalog(tmp_path / "cat", 10, fmt="PNG")
    write_tiny_pairs(tmp_path / "main.jsonl", tmp_path / "cat", records, 6)
    sentence = "2 annotator(s) answered 40 questions; agreed with the labels on 84.0% ± 2.1% of 80 answers."
    answers = {"human_validation": sentence}
    build_release([tmp_path / "main.jsonl"], tmp_path / "with", card_info=answers, progress=False)
    build_release([tmp_path / "main.jsonl"], tmp_path / "without", progress=False)
    with_card, without = ((tmp_path / d / "README.md").read_text() for d in ("with", "without"))
    assert HUMAN_VALIDATION.question in with_card and "84.0% ± 2.1% of 80 answers" in with_card
    # not answered: the question stands marked for the publisher (the paper's datasheet reports its validation)
    assert HUMAN_VALIDATION.question in without and "84.0%" not in without
    assert "human_validation" in unanswered_questions(without) and "human_validation" not in unanswered_questions(
        with_card
    )
    assert "human_validation:" in card_info_template()


def test_single_step_answers_are_scored_and_unfinished_tasks_are_left_out(data, tmp_path):
    spec = study_spec("single_step")
    page = write_study(data["chains"], spec, tmp_path / "s").path
    split, units = study_units(data["chains"], spec)
    assert all([q.id.split("/")[-2] for q in u.questions] == ["select", "deduce"] for u in units)
    picks = {}
    for n, unit in enumerate(units):
        select, deduce = unit.questions
        picks[select.id] = select.gold if n % 2 == 0 else [1 - select.gold[0]]
        if n != len(units) - 1:  # the last task: the selection only (unfinished: not scored)
            picks[deduce.id] = deduce.gold[:1]
    path = _answers_file(tmp_path / "hal.jsonl", page, "hal", picks, units)
    results, run = score_answers(path, data["chains"], "single_step", out_dir=tmp_path / "run")
    scored = len(units) - 1
    summary = results["metrics"]["summary"]
    assert results["human"]["unfinished_units"] == [units[-1].id] and results["human"]["units_scored"] == scored
    assert results["dataset"]["tasks_run"] == scored
    by_concept: dict[str, list[bool]] = {}  # the paper's average: of each concept's success ratio
    for n, unit in enumerate(units[:scored]):
        by_concept.setdefault(split.get(unit.row).concept, []).append(n % 2 == 0)
    expected = sum(sum(v) / len(v) for v in by_concept.values()) / len(by_concept)
    assert summary["avg_success_ratio"] == pytest.approx(expected)
    assert summary["avg_deduction_success_ratio"] == pytest.approx(1.0)
    # scored again into the same folder (a later export of the same person): replaced, not refused
    score_answers(path, data["chains"], "single_step", out_dir=run)


def test_a_perception_study_asks_one_yes_no_question_per_object_and_image(data, tmp_path):
    spec = study_spec("main", "perception")
    summary = write_study(data["co"], spec, tmp_path / "p")
    _, units = study_units(data["co"], spec)
    q = units[0].questions[0]
    assert q.choices == ["yes", "no"] and not q.multi and q.answer_text(q.gold) in ("Yes", "No")
    assert summary.questions == sum(len(u.questions) for u in units) > summary.units
    # everything right on rows 0 and 1, "yes" to every question of the others: scored by the perception task itself
    picks = {q.id: q.gold if u.row < 2 else [0] for u in units for q in u.questions}  # choice 0 is "yes"
    path = _answers_file(tmp_path / "ivy.jsonl", summary.path, "ivy", picks, units)
    results, _ = score_answers(path, data["co"], "main", out_dir=tmp_path / "run")
    asked = [(u.row, q) for u in units for q in u.questions]
    right = sum(1 for row, q in asked if row < 2 or q.gold == [0])
    assert results["task"] == "perception" and results["dataset"]["questions_scored"] == len(asked)
    assert results["metrics"]["overall"]["question_accuracy"] == pytest.approx(right / len(asked))


# ----------------------------------------------------------------------------------------------- protocols
def test_a_chain_study_follows_the_protocol_and_an_old_spec_reads_as_strict(data):
    """Under the paper protocol (the default) a person plays the steps the harness scores (from the first
    scored step of paper_schedule, images 336x336); under strict the steps after the chain's marked warm-up.
    A spec written before the protocols existed is the strict one."""
    from commonlink.human.items import StudySpec, open_split
    from commonlink.kinds.association.task_chains import paper_schedule

    paper, strict = (
        study_spec("synchronous"),
        study_spec("synchronous", settings=AssociationSettings(protocol="strict")),
    )
    chains = open_split(data["chains"], paper)
    _, paper_units = study_units(data["chains"], paper)
    _, strict_units = study_units(data["chains"], strict)
    for n, (p, s) in enumerate(zip(paper_units, strict_units)):
        chain = chains.get(n)
        first = paper_schedule(chain)[1]
        assert [q.gold[0] for q in p.questions] == [st.answer for st in chain.steps[first:]]
        assert [q.gold[0] for q in s.questions] == [st.answer for st in chain.steps if not st.warmup]
        assert len(p.questions) == len(chain.steps) - first < len(s.questions)
        assert all(part[1].size == (336, 336) for q in p.questions for part in q.parts if part[0] == "image")
    old = {**strict.to_dict(), "association": {k: v for k, v in strict.association.items() if k != "protocol"}}
    assert StudySpec.from_dict(old).association["protocol"] == "strict"


def test_a_single_step_deduction_is_judged_by_the_protocols_rule(data):
    """Paper: the harness's rule (a gold concept in the answer) on the task's own concept; strict: all-shared."""
    _, units = study_units(data["chains"], study_spec("single_step"))
    deduce = units[0].questions[1]
    assert deduce.rule == "harness" and deduce.is_correct(deduce.gold) and not deduce.is_correct([])
    wrong = [k for k in range(len(deduce.choices)) if k not in deduce.gold]
    assert deduce.is_correct(deduce.gold + wrong[:1])  # the harness counts it: the gold concept is in the answer
    _, units = study_units(data["chains"], study_spec("single_step", settings=AssociationSettings(protocol="strict")))
    strict = units[0].questions[1]
    assert strict.rule == "all-shared" and not strict.is_correct(
        strict.gold + [k for k in wrong[:1] if k not in strict.gold]
    )
