"""The HTML report: what the page holds (parsed back from the file), errors, and (when Debian's chromium and
chromedriver are installed, with selenium) what a real headless browser shows and does with it."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
from pathlib import Path

import pytest
from PIL import Image, ImageDraw
from typer.testing import CliRunner

from commonlink.cli import app
from commonlink.errors import InputError
from commonlink.eval.backends.base import BackendInfo
from commonlink.eval.report.html import write_report
from commonlink.kinds.association.report_page import memory_text
from commonlink.kinds.common_o.format import letters
from commonlink.kinds.common_o.task import evaluate_common_o
from commonlink.seeding import rng_for
from tests.fixtures.tiny_models import common_o_rows, write_common_o_split

XSS = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2"> & </pre>'


class Scripted:
    """A backend answering each Common-O request from a table {row id: output} (default: the first choice)."""

    def __init__(self, outputs: dict[str, str], name: str):
        self.outputs = outputs
        self.info = BackendInfo(
            backend="scripted",
            model=name,
            fingerprint=f"scripted:{name}",
            batch_invariant=True,
            default_batch_size=8,
            uses_images=False,
        )
        self.generate_seconds = 0.0

    def generate(self, requests, settings):
        return [self.outputs.get(r.id, "Answer: A") for r in requests]

    def close(self):
        pass


def _rows(n=24, seed=1):
    rows = common_o_rows(n, seed=seed, image_size=(96, 72))
    for i, row in enumerate(rows):  # a picture a person can tell apart: a numbered disc on a plain colour
        for key in ("image_1", "image_2"):
            img = Image.new("RGB", (96, 72), ((37 * i) % 255, 120 if key == "image_1" else 200, 90))
            ImageDraw.Draw(img).ellipse((28, 16, 68, 56), fill=(250, 250, 250))
            ImageDraw.Draw(img).text((40, 30), str(i), fill=(0, 0, 0))
            buf = io.BytesIO()
            img.save(buf, format="PNG")
            row[key] = {"bytes": buf.getvalue(), "path": None}
    return rows


def _truth_letters(row) -> list[str]:
    choices, truth = json.loads(row["choices"]), json.loads(row["ground_truth_objects"])
    return sorted(letters(len(choices))[choices.index(t)] for t in truth)


@pytest.fixture(scope="module")
def split_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("report-data")
    rows = _rows()
    write_common_o_split(root, rows)
    return root, rows


def _wrong_letters(row) -> list[str]:
    """Letters that make a wrong answer with at least one hallucinated object (a non-truth, non-"none" choice)."""
    choices = json.loads(row["choices"])
    truth = set(_truth_letters(row))
    labels = letters(len(choices))
    extra = next(labels[k] for k, c in enumerate(choices) if labels[k] not in truth and c != "No objects are in common")
    return sorted(truth | {extra})


@pytest.fixture(scope="module")
def runs(split_dir, tmp_path_factory):
    """Two models on the same split: 'alpha' is right on even rows, hallucinates on odd rows, cannot be parsed on
    row 3 and prints markup on row 5; 'beta' always answers correctly except on row 2."""
    data, rows = split_dir
    root = tmp_path_factory.mktemp("report-runs")
    alpha, beta = {}, {}
    for i, row in enumerate(rows):
        truth = _truth_letters(row)
        alpha[f"main-{i}"] = "Answer: " + ", ".join(truth if i % 2 == 0 else _wrong_letters(row))
        beta[f"main-{i}"] = "Answer: " + ", ".join(truth if i != 2 else _wrong_letters(row))
    alpha["main-3"] = "I cannot tell."
    alpha["main-5"] = (
        XSS + "\n" + "Let me look at both images. " * 5 + "\nAnswer: " + ", ".join(_wrong_letters(rows[5]))
    )
    dirs = {}
    for name, outputs in (("alpha", alpha), ("beta", beta)):
        dirs[name] = root / name
        evaluate_common_o(
            data, "main", out_dir=dirs[name], backend_instance=Scripted(outputs, name), progress=False, n_boot=50
        )
    return dirs


def page_data(path: Path) -> dict:
    html = path.read_text(encoding="utf-8")
    match = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', html, re.DOTALL)
    return json.loads(match.group(1))


def _predictions(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "predictions.jsonl").read_text().splitlines()]


# ----------------------------------------------------------------------------------------------- the page file
def test_eval_writes_a_report_beside_its_results(runs, split_dir):
    _, rows = split_dir
    page = runs["alpha"] / "report.html"
    data = page_data(page)
    assert data["kind"] == "common_o" and data["runs"] == ["alpha"]
    assert [r["id"] for r in data["rows"]] == [f"main-{i}" for i in range(len(rows))]
    by_id = {p["id"]: p for p in _predictions(runs["alpha"])}
    for r in data["rows"]:
        p = by_id[r["id"]]
        assert r["t"] == p["ground_truth_letters"] and r["c"] == p["choices"]
        out = r["r"][0]
        assert (out["p"], out["ok"], out["pok"], out["h"]) == (
            p["parsed_letters"],
            p["correct"],
            p["parse_ok"],
            p["hallucinated_objects"],
        )
        for url in r["im"]:  # thumbnails exist beside the page, at most the thumbnail size
            with Image.open(page.parent / url) as thumb:
                assert thumb.format == "JPEG" and max(thumb.size) <= 224
    assert data["rows"][3]["r"][0]["pok"] is False and data["rows"][3]["r"][0]["e"]
    assert data["rows"][5]["r"][0]["o"].startswith("<script>")


def test_strings_from_models_cannot_leave_the_data_block(runs):
    html = (runs["alpha"] / "report.html").read_text(encoding="utf-8")
    assert html.count("<script") == 2  # the data block and the page's own code, nothing a model wrote
    assert (
        "__pwned" in html
        and "<img src=x" not in html
        and "</pre>" not in html.split('id="report-data">')[1].split("</script>")[0]
    )


def test_side_by_side_joins_rows_and_orders_mistakes_by_seed(runs, tmp_path):
    summary = write_report([runs["alpha"], runs["beta"]], tmp_path / "both.html", seed=7)
    data = page_data(summary.path)
    assert data["runs"] == ["alpha", "beta"] and summary.cards == len(data["rows"])
    wrong = [[pos, r] for pos, row in enumerate(data["rows"]) for r, out in enumerate(row["r"]) if not out["ok"]]
    order = rng_for(7, "report", "mistakes").permutation(len(wrong))
    assert data["mistakes"] == [wrong[k] for k in order]
    assert [2, 1] in data["mistakes"] and [2, 0] not in data["mistakes"]  # beta's only mistake; alpha right on row 2
    assert summary.images_folder == tmp_path / "both_files" and summary.image_bytes > 0
    assert summary.total_bytes == summary.html_bytes + summary.image_bytes


def test_rerun_reuses_thumbnails_and_drops_stale_ones(runs, tmp_path):
    first = write_report([runs["alpha"]], tmp_path / "r.html")
    stale = tmp_path / "r_files" / ("0" * 24 + "-224.jpg")
    stale.write_bytes(b"old")
    (tmp_path / "r_files" / "notes.txt").write_text("mine")
    again = write_report([runs["alpha"]], tmp_path / "r.html")
    made = first.images_written + first.images_from_cache  # the eval's own report already put them in the shared cache
    assert made > 0 and first.images_reused == first.images_from_cache
    assert again.images_written == 0 and again.images_from_cache == 0 and again.images_reused == made
    assert not stale.exists() and (tmp_path / "r_files" / "notes.txt").exists()  # only our own thumbnails are pruned


def test_thumbnails_are_made_once_and_linked_for_the_next_report(runs, tmp_path, monkeypatch):
    from commonlink.eval.report.images import ThumbnailStore

    monkeypatch.setattr("commonlink.constants.COMMONLINK_HOME", tmp_path / "home")
    first = write_report([runs["alpha"]], tmp_path / "a" / "one.html")
    assert first.images_written > 0 and first.images_from_cache == 0
    cached = sorted((tmp_path / "home" / "thumbnails").rglob("*.jpg"))
    assert len(cached) == first.images_written

    def no_decoding(self, job):
        raise AssertionError(f"image {job.key} decoded again")

    monkeypatch.setattr(ThumbnailStore, "_thumbnail", no_decoding)
    for images in ("folder", "embed"):  # another page (another run's report) on the same images decodes none of them
        again = write_report([runs["alpha"], runs["beta"]], tmp_path / images / "two.html", images=images)
        assert again.images_written == 0 and again.images_from_cache == first.images_written
    linked = sorted((tmp_path / "folder" / "two_files").glob("*.jpg"))
    assert [p.read_bytes() for p in linked] == [p.read_bytes() for p in sorted(cached, key=lambda p: p.name)]
    monkeypatch.undo()
    monkeypatch.setattr("commonlink.constants.COMMONLINK_HOME", tmp_path / "home")
    off = write_report([runs["alpha"]], tmp_path / "off" / "one.html", thumbnail_cache=False)
    assert off.images_written == first.images_written and off.images_from_cache == 0


def test_the_report_reads_each_row_group_of_the_split_once(runs, tmp_path, monkeypatch):
    """Checking a card's row (its text fields) and taking its images come from the same row group read: a text-only
    read first and a whole one after would read the text columns of every group twice."""
    import pyarrow.parquet as pq

    reads = []
    read_row_group = pq.ParquetFile.read_row_group

    def counted(self, group, *args, **kwargs):
        reads.append((self.metadata.num_rows, group))
        return read_row_group(self, group, *args, **kwargs)

    monkeypatch.setattr(pq.ParquetFile, "read_row_group", counted)
    summary = write_report([runs["alpha"]], tmp_path / "once.html", thumbnail_cache=False)
    assert summary.cards == 24 and reads and len(reads) == len(set(reads))


def test_embedded_images_make_one_file(runs, tmp_path):
    summary = write_report([runs["alpha"]], tmp_path / "one.html", images="embed")
    data = page_data(summary.path)
    assert all(url.startswith("data:image/jpeg;base64,") for r in data["rows"] for url in r["im"])
    assert summary.images_folder is None and not (tmp_path / "one_files").exists()


def test_without_images_the_dataset_is_not_needed(runs, tmp_path):
    moved = tmp_path / "run"
    shutil.copytree(runs["alpha"], moved)
    results = json.loads((moved / "results.json").read_text())
    results["dataset"]["source"] = str(tmp_path / "gone")
    (moved / "results.json").write_text(json.dumps(results))
    with pytest.raises(InputError, match="--data"):
        write_report([moved], tmp_path / "x.html")
    summary = write_report([moved], tmp_path / "x.html", images="none")
    assert all(r.get("im") is None for r in page_data(summary.path)["rows"])


def test_a_report_that_cannot_be_made_warns_without_failing_the_eval(runs, tmp_path):
    from commonlink.eval.report.html import report_beside_run

    moved = tmp_path / "run"
    shutil.copytree(runs["alpha"], moved)
    (moved / "report.html").unlink()
    results = json.loads((moved / "results.json").read_text())
    results["dataset"]["source"] = str(tmp_path / "gone")
    (moved / "results.json").write_text(json.dumps(results))
    with pytest.warns(UserWarning, match=r"not written: .*commonlink eval report"):
        assert report_beside_run(moved) is None
    assert not (moved / "report.html").exists()


def test_other_data_is_refused(runs, tmp_path):
    other = tmp_path / "other"
    write_common_o_split(other, _rows(seed=9))
    with pytest.raises(InputError, match="not the row the run answered") as err:
        write_report([runs["alpha"]], tmp_path / "x.html", data=str(other))
    assert "--images none" in err.value.fix
    run_other = tmp_path / "run-other"
    evaluate_common_o(
        other,
        "main",
        out_dir=run_other,
        backend_instance=Scripted({}, "gamma"),
        progress=False,
        n_boot=20,
        report=False,
    )
    assert not (run_other / "report.html").exists()
    with pytest.raises(InputError, match="different data"):
        write_report([runs["alpha"], run_other], tmp_path / "x.html")


def test_cli_report_and_its_errors(runs, tmp_path):
    out = tmp_path / "cli.html"
    result = CliRunner().invoke(
        app, ["eval", "report", str(runs["alpha"]), str(runs["beta"]), "--out", str(out), "--quiet"]
    )
    assert result.exit_code == 0, result.output
    assert out.is_file() and "Report: file://" in result.output and "cli_files/" in result.output
    result = CliRunner().invoke(app, ["eval", "report", str(runs["alpha"]), str(runs["beta"])])
    assert result.exit_code == 1 and "--out" in result.output
    result = CliRunner().invoke(
        app, ["eval", "report", str(runs["alpha"]), "--out", str(tmp_path / "x.html"), "--images", "inline"]
    )
    assert result.exit_code == 1 and "folder, embed, none" in result.output
    result = CliRunner().invoke(app, ["eval", "report", str(runs["alpha"]), "--out", str(tmp_path / "x.pdf")])
    assert result.exit_code == 1 and "x.html" in result.output


def test_compare_writes_the_side_by_side_page(runs, tmp_path):
    result = CliRunner().invoke(
        app, ["eval", "compare", str(runs["alpha"]), str(runs["beta"]), "--html", str(tmp_path / "c.html")]
    )
    assert result.exit_code == 0, result.output
    assert page_data(tmp_path / "c.html")["runs"] == ["beta", "alpha"]  # leaderboard order: beta is more accurate


def test_truncated_output_says_where_the_whole_is(runs, tmp_path):
    summary = write_report([runs["alpha"]], tmp_path / "t.html", max_output_chars=100)
    row = page_data(summary.path)["rows"][5]["r"][0]
    assert len(row["o"]) == 100 and row["ol"] == len(_predictions(runs["alpha"])[5]["raw_output"])


# ----------------------------------------------------------------------------------------------- association
@pytest.fixture(scope="module")
def chain_run(tmp_path_factory):
    from commonlink.kinds.association.loader import open_association
    from commonlink.kinds.association.task import AssociationSettings, evaluate_association
    from tests.fixtures.tiny_chains import write_tiny_chain_files

    root = tmp_path_factory.mktemp("report-chains")
    write_tiny_chain_files(root, image_size=(48, 36), max_steps=12)
    split = open_association(root / "chains", "synchronous")
    answers = {(c.id, s.index): s.answer for c in split for s in c.steps}
    k_of = {c.id: 1 + i % 3 for i, c in enumerate(split)}  # chain i: right for 1 + i % 3 scored steps, then wrong
    prompts = {}

    class Chains:
        info = BackendInfo(
            backend="scripted",
            model="chainer",
            fingerprint="scripted:chainer",
            batch_invariant=True,
            default_batch_size=8,
            uses_images=False,
        )
        generate_seconds = 0.0

        def generate(self, requests, settings):
            from commonlink.kinds.association.prompts import prompt_text

            out = []
            for r in requests:
                chain, step, kind, _ = r.id.rsplit("/", 3)
                prompts[(chain, int(step), kind)] = prompt_text(r.prompt)
                answer = answers[(chain, int(step))]
                if kind == "select":
                    out.append(
                        f"Image{(answer if int(step) - 3 < k_of[chain] else 1 - answer) + 1}"
                        + (XSS if int(step) == 3 else "")
                    )
                else:
                    out.append("metal")
            return out

        def close(self):
            pass

    out = root / "run"
    evaluate_association(
        root / "chains",
        "synchronous",
        backend_instances=[Chains()],
        out_dir=out,
        progress=False,
        n_boot=20,
        settings=AssociationSettings(protocol="strict"),  # the step numbers below are the strict protocol's
    )
    return out, k_of, prompts


def test_chain_cards_end_at_the_failing_step_with_the_memory_the_model_saw(chain_run):
    out, k_of, prompts = chain_run
    data = page_data(out / "report.html")
    assert data["kind"] == "chains" and {c["id"] for c in data["rows"]} == set(k_of)
    for card in data["rows"]:
        k = k_of[card["id"]]
        assert card["len"] == k and card["ended"] == "wrong" and card["scored"] == k + 1 and card["warm"] == 3
        last = card["steps"][-1]
        assert last["k"] == 3 + k and not last["ok"] and last["ch"] == 1 - last["a"]
        assert len(card["steps"]) == min(6, 3 + k + 1) and card["hidden"] == 3 + k + 1 - len(card["steps"])
        for step in card["steps"]:
            if step["w"]:
                continue
            prompt = prompts[(card["id"], step["k"], "select")]
            assert step["mem"] and step["mem"] in prompt  # the memory text is the one the selection prompt carried
            assert len(step["cand"]) == 2 and all(u.endswith(".jpg") for u in [step["q"], *step["cand"]])


def test_memory_text_is_rebuilt_from_a_snapshot():
    snapshot = {"weights": {"metal|thing1": 1.8, "metal|thing2": 1.0, "furry|thing3": 0.6}}
    text = memory_text(snapshot, {"memory": "structm"}, "attribute")
    assert text == "Given the memory: {'metal': ['thing1', 'thing2'], 'furry': ['thing3']}"
    assert "\na->metal->b." in memory_text({"links": [["a", "metal", "b"]]}, {"memory": "chainm"}, "attribute")
    assert memory_text(snapshot, {"memory": "nom"}, "attribute") == ""


def test_several_association_runs_get_a_metrics_page_and_mixed_tasks_are_refused(chain_run, runs, tmp_path):
    out, _, _ = chain_run
    other = tmp_path / "other"
    shutil.copytree(out, other)
    results = json.loads((other / "results.json").read_text())
    results["run_name"] = "renamed run"
    (other / "results.json").write_text(json.dumps(results))
    summary = write_report([out, other], tmp_path / "x.html")
    html = summary.path.read_text()
    assert summary.cards == 0 and page_data(summary.path)["kind"] == "summary"
    summary_text = results["metrics"]["summary"]
    data = f"{Path(results['dataset']['source']).name} #{results['dataset']['fingerprint'][:8]}"  # the Data column
    for name in ("chainer structm strict", "renamed run"):  # the default name (model, memory, protocol); the given one
        cells = f"<td>{name}</td><td>chainer</td><td>scripted</td><td>{data}</td><td>structm</td><td>synchronous</td>"
        assert cells in html
    assert (
        f'<td>{summary_text["avg_max_steps"]:.2f}<span class="se"> ± ' in html
        and f'{summary_text["avg_mean_steps"]:.2f}<span class="se"> ± ' in html
    )
    with pytest.raises(InputError, match="different tasks"):
        write_report([out, runs["alpha"]], tmp_path / "x.html")
    with pytest.raises(InputError) as refused:
        write_report([runs["alpha"], _renamed_task(runs["alpha"], tmp_path / "odd", "mystery")], tmp_path / "y.html")
    assert "eval compare" not in str(refused.value) and "eval compare" not in str(refused.value.fix or "")


def _renamed_task(run: Path, dest: Path, task: str) -> Path:
    shutil.copytree(run, dest)
    results = json.loads((dest / "results.json").read_text())
    results["task"] = task
    (dest / "results.json").write_text(json.dumps(results))
    return dest


def test_association_pages_show_memory_and_parse_failures_for_every_task(chain_run, tmp_path):
    from commonlink.kinds.association.task import evaluate_association

    chains = chain_run[0].parent / "chains"
    for config in ("single_step", "deduction"):
        out = tmp_path / config
        results = evaluate_association(chains, config, ["random"], "transformers", out, progress=False, n_boot=20)
        html = (out / "report.html").read_text()
        rate = 100 * results["metrics"]["summary"]["unparseable_rate"]
        assert f"Memory <b>structm</b> · parse failures: <b>{rate:.1f}%</b>" in html, config
    html = (chain_run[0] / "report.html").read_text()
    assert "Memory <b>structm</b> · parse failures: <b>" in html and "chains ended by an unparseable answer" in html


def test_perception_and_concept_runs_get_a_metrics_page(split_dir, tmp_path):
    from commonlink.kinds.association.concept_task import evaluate_concept_perception
    from commonlink.kinds.common_o.perception import evaluate_perception
    from tests.fixtures.tiny_chains import write_tiny_chain_files

    data, _ = split_dir
    evaluate_perception(data, "main", "random", out_dir=tmp_path / "p", progress=False, n_boot=20)
    page = write_report([tmp_path / "p"]).path.read_text()
    assert "Question acc. (%)" in page and "<td>random</td>" in page
    chains = write_tiny_chain_files(tmp_path / "assoc", single_step_per_concept=3)
    evaluate_concept_perception(chains, "random", out_dir=tmp_path / "k", progress=False, n_boot=20)
    summary = write_report([tmp_path / "k"])
    assert summary.path == tmp_path / "k" / "report.html" and "task+ded" in summary.path.read_text()


# ----------------------------------------------------------------------------------------------- in a browser
CHROMIUM, CHROMEDRIVER = (
    shutil.which("chromium") or "/usr/bin/chromium",
    shutil.which("chromedriver") or "/usr/bin/chromedriver",
)


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    webdriver = pytest.importorskip(
        "selenium.webdriver", reason="selenium is not installed (pip install 'commonlink[test]')"
    )
    from selenium.webdriver.chrome.service import Service

    if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
        pytest.skip(
            "Debian's chromium and chromium-driver are not installed (scripts/setup.sh installs them when run as root)"
        )
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--window-size=1400,1800",
        f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})  # to fail on any script error or blocked resource
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    yield driver
    driver.quit()


def _open(browser, page: Path):
    browser.get(page.resolve().as_uri())
    errors = [e["message"] for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, errors  # a script error, or an image the page's security policy blocked
    return browser


def _images_loaded(browser) -> list[int]:
    """naturalWidth of every card image after it loaded (0 = broken or blocked)."""
    return browser.execute_script(
        "var imgs = Array.from(document.querySelectorAll('#cards img'));"
        "imgs.forEach(function (i) { i.loading = 'eager'; });"
        "return imgs.map(function (i) { return i.complete ? i.naturalWidth : -1; });"
    )


def _choose(browser, select_id: str, value: str) -> None:
    from selenium.webdriver.support.ui import Select

    Select(browser.find_element("id", select_id)).select_by_value(value)


def _card_ids(browser) -> list[str]:
    return [c.get_attribute("data-id") for c in browser.find_elements("css selector", "#cards article.card")]


@pytest.fixture(scope="module")
def side_by_side(runs, tmp_path_factory):
    return write_report([runs["alpha"], runs["beta"]], tmp_path_factory.mktemp("page") / "report.html", seed=3)


@pytest.mark.slow
def test_browser_filters_change_what_is_shown(browser, side_by_side, runs):
    _open(browser, side_by_side.path)
    alpha = _predictions(runs["alpha"])
    assert _card_ids(browser) == [p["id"] for p in alpha]  # 24 rows fit on the first page
    _choose(browser, "f-model", "0")
    _choose(browser, "f-show", "wrong")
    assert _card_ids(browser) == [p["id"] for p in alpha if not p["correct"]]
    assert f"of {sum(not p['correct'] for p in alpha)} matching" in browser.find_element("id", "status").text
    _choose(browser, "f-show", "parse")
    assert _card_ids(browser) == ["main-3"]
    _choose(browser, "f-show", "disagree")
    assert _card_ids(browser) == [p["id"] for p in alpha if int(p["id"].split("-")[1]) % 2 == 1 or p["id"] == "main-2"]
    _choose(browser, "f-show", "all")
    _choose(browser, "f-source", "real")
    assert _card_ids(browser) == [p["id"] for p in alpha if p["source"] == "real"]
    assert {t.text for t in browser.find_elements("css selector", "#cards .src-real, #cards .src-other")} == {"real"}
    _choose(browser, "f-source", "all")
    _choose(browser, "f-model", "1")
    _choose(browser, "f-show", "hallucinated")
    assert _card_ids(browser) == ["main-2"]


def test_browser_mistake_card_shows_the_right_letters(browser, side_by_side, runs):
    _open(browser, side_by_side.path)
    p = _predictions(runs["alpha"])[1]  # alpha wrong with a hallucinated object, beta right
    card = browser.find_element("css selector", '#cards article[data-id="main-1"]')
    assert card.find_element("css selector", ".truth-letters").text == ", ".join(p["ground_truth_letters"])
    picks = card.find_elements("css selector", ".pick-letters")
    assert [x.text for x in picks] == [", ".join(p["parsed_letters"]), ", ".join(p["ground_truth_letters"])]
    halluc_rows = card.find_elements("css selector", "td.mark.halluc")
    labels = letters(len(p["choices"]))
    assert [r.find_element("xpath", "..").get_attribute("data-letter") for r in halluc_rows] == [
        labels[p["choices"].index(name)] for name in p["hallucinated_objects"]
    ]
    assert card.find_element("css selector", ".halluc-names").text == ", ".join(p["hallucinated_objects"])
    assert "✗ wrong" in card.find_element("css selector", '.verdict[data-run="0"]').text
    assert "✓ correct" in card.find_element("css selector", '.verdict[data-run="1"]').text


def test_browser_shows_markup_from_a_model_as_text(browser, side_by_side):
    _open(browser, side_by_side.path)
    card = browser.find_element("css selector", '#cards article[data-id="main-5"]')
    card.find_element("css selector", "details.output summary").click()
    assert card.find_element("css selector", "pre.raw").text.startswith(XSS.strip())
    assert browser.execute_script("return window.__pwned === undefined")
    assert not card.find_elements("css selector", "pre.raw script, pre.raw img")


def test_browser_random_mistakes_table_and_paging(browser, side_by_side):
    data = page_data(side_by_side.path)
    _open(browser, side_by_side.path)
    browser.find_element("id", "view-mistakes").click()
    assert (
        not browser.find_element("id", "cards").is_displayed()
        and not browser.find_element("id", "pager").is_displayed()
    )
    table_rows = browser.find_elements("css selector", "#mistakes table.mistakes tr[data-id]")
    assert [r.get_attribute("data-id") for r in table_rows] == [
        data["rows"][pos]["id"] for pos, _ in data["mistakes"][:20]
    ]
    first = table_rows[0]
    pos, _ = data["mistakes"][0]
    assert first.find_element("css selector", "td.gt").text == ", ".join(data["rows"][pos]["t"])
    first.find_element("css selector", "a").click()  # jumps to that example's card
    assert _card_ids(browser) == [data["rows"][pos]["id"]]
    assert not browser.find_element("id", "mistakes").is_displayed()


@pytest.mark.slow
def test_browser_pages_through_many_rows(browser, chain_run, tmp_path):
    # 60 rows on 3 pages of 25
    data = tmp_path / "data"
    rows = common_o_rows(60, seed=4, image_size=(32, 24))
    write_common_o_split(data, rows)
    evaluate_common_o(
        data, "main", out_dir=tmp_path / "run", backend_instance=Scripted({}, "delta"), progress=False, n_boot=20
    )
    _open(browser, tmp_path / "run" / "report.html")
    assert _card_ids(browser) == [f"main-{i}" for i in range(25)]
    buttons = browser.find_elements("css selector", "#pager button")
    buttons[1].click()
    assert _card_ids(browser) == [f"main-{i}" for i in range(25, 50)]
    assert "Page 2 of 3" in browser.find_element("id", "pager").text
    browser.find_element("id", "view-mistakes").click()  # the table replaces the cards and their pager
    assert browser.find_element("id", "mistakes").is_displayed()
    assert (
        not browser.find_element("id", "pager").is_displayed()
        and not browser.find_element("id", "cards").is_displayed()
    )


def test_browser_chain_page_and_screenshots(browser, chain_run, side_by_side, tmp_path):
    out, k_of, _ = chain_run
    _open(browser, out / "report.html")
    cards = browser.find_elements("css selector", "#cards article.card")
    assert len(cards) == min(10, len(k_of))
    failing = cards[0].find_elements("css selector", ".step.failed")
    assert len(failing) == 1 and "✗ picked" in failing[0].text
    assert failing[0].find_elements("css selector", "figure.chosen-bad") and failing[0].find_elements(
        "css selector", "figure.answer"
    )
    assert "Given the memory" in failing[0].find_element("css selector", "pre.mem").text
    keep = os.environ.get("COMMONLINK_REPORT_SCREENSHOTS")  # set it to keep the pictures and look at them
    for name, page in (("chains", out / "report.html"), ("commono", side_by_side.path)):
        _open(browser, page)
        shot = tmp_path / f"{name}.png"
        assert browser.save_screenshot(str(shot))
        with Image.open(shot) as img:
            assert (
                img.size[0] >= 1000 and len(set(img.convert("L").resize((64, 64)).getdata())) > 20
            )  # not a blank page
        if keep:
            Path(keep).mkdir(parents=True, exist_ok=True)
            shutil.copy(shot, Path(keep) / shot.name)


def test_thumbnails_of_big_jpegs_and_tiny_pngs(tmp_path):
    from commonlink.eval.report.images import ImageJob, ThumbnailStore

    big = io.BytesIO()
    Image.new("RGB", (2000, 1000), (200, 30, 30)).save(big, format="JPEG")  # decoded at a reduced scale (draft)
    small = io.BytesIO()
    Image.new("RGBA", (40, 30), (0, 0, 255, 128)).save(small, format="PNG")  # never enlarged
    store = ThumbnailStore("folder", tmp_path / "t_files", size=224, workers=2)
    urls = store.urls(
        [
            ImageJob("a" * 24, lambda: big.getvalue()),
            None,
            ImageJob("b" * 24, lambda: small.getvalue()),
            ImageJob("a" * 24, lambda: pytest.fail("a key seen before is not made again")),
        ]
    )
    assert urls[1] is None and urls[0] == urls[3] and store.written == 2
    sizes = [Image.open(tmp_path / u).size for u in (urls[0], urls[2])]
    assert sizes == [(224, 112), (40, 30)]
    assert Image.open(tmp_path / urls[0]).getpixel((100, 50))[0] > 150  # the picture, not a blank
    with pytest.raises(InputError, match="not a readable image"):
        store.urls([ImageJob("c" * 24, lambda: b"not an image")])


def test_browser_loads_thumbnails_from_the_folder_and_embedded(browser, runs, tmp_path):
    import time

    for mode in ("folder", "embed"):
        summary = write_report([runs["alpha"]], tmp_path / f"{mode}.html", images=mode)
        _open(browser, summary.path)
        widths = _images_loaded(browser)
        deadline = time.monotonic() + 10
        while (not widths or min(widths) <= 0) and time.monotonic() < deadline:
            time.sleep(0.2)
            widths = _images_loaded(browser)
        assert len(widths) == 2 * 24 and min(widths) > 0, (mode, widths)


@pytest.mark.slow
def test_browser_pages_fit_a_narrow_phone_screen_and_number_scored_steps(browser, chain_run, side_by_side, tmp_path):
    out, k_of, _ = chain_run
    browser.set_window_size(390, 844)
    try:
        width = browser.execute_script("return window.innerWidth")
        assert width <= 390
        for page in (out / "report.html", side_by_side.path):
            _open(browser, page)
            assert browser.execute_script("return document.documentElement.scrollWidth") <= width, page
            if page == side_by_side.path:
                browser.find_element("id", "view-mistakes").click()  # the wide mistakes table scrolls inside its box
                assert browser.execute_script("return document.documentElement.scrollWidth") <= width
        _open(browser, out / "report.html")
        card = browser.find_elements("css selector", "#cards article.card")[0]
        heads = [h.get_attribute("textContent") for h in card.find_elements("css selector", ".step-head b")]
        data = page_data(out / "report.html")["rows"][0]
        scored = [h for h in heads if h.startswith("Step ")]
        warm = [h for h in heads if h.startswith("Warm-up ")]
        assert len(warm) == sum(s["w"] for s in data["steps"]) and len(scored) == sum(not s["w"] for s in data["steps"])
        first_scored = next(s for s in data["steps"] if not s["w"])
        assert scored[0].startswith(
            f"Step {first_scored['k'] - data['warm'] + 1} "
        )  # Step 1 when every scored step is shown
        if data["hidden"] == 0:
            assert scored[0].startswith("Step 1 ")
    finally:
        browser.set_window_size(1400, 1800)


def test_browser_single_step_and_deduction_pages(browser, chain_run, tmp_path):
    from commonlink.kinds.association.task import evaluate_association

    chains = chain_run[0].parent / "chains"
    for config in ("single_step", "deduction"):
        out = tmp_path / config
        evaluate_association(chains, config, ["random"], "transformers", out, progress=False, n_boot=20)
        data = page_data(out / "report.html")
        _open(browser, out / "report.html")
        assert _card_ids(browser) == [t["id"] for t in data["rows"]][:25]
        wrong = [t["id"] for t in data["rows"] if not t["ok"]]
        _choose(browser, "f-show", "wrong")
        assert _card_ids(browser) == wrong[:25]


# ------------------------------------------------------------------ issue 27, item 3: a shared results.json
def _tampered_run(source: Path, dest: Path, chains: bool = False) -> Path:
    """A copy of a run whose results.json carries markup in every field the page shows (a shared, edited file)."""
    shutil.copytree(source, dest)
    results = json.loads((dest / "results.json").read_text(encoding="utf-8"))
    metrics = results["metrics"]
    if chains:
        for v in metrics["per_concept"].values():
            v.update(
                chains=XSS,
                max_steps=XSS,
                mean_steps=XSS,
                mean_steps_se=XSS,
                deduction_success_ratio=XSS,
                ended={XSS: XSS},
            )
        metrics["per_concept"][XSS] = {"chains": XSS, "mean_steps": 1.5}
        metrics["summary"] = {"chains": XSS, "avg_max_steps": XSS, "avg_mean_steps": XSS}
    else:
        metrics["overall"].update(n=XSS, accuracy=XSS, accuracy_se=XSS, hallucination_rate=XSS, parse_failure_rate=XSS)
    results.update(
        bootstrap_resamples=XSS,
        backend=XSS,
        created=XSS,
        seed=XSS,
        toolkit_version=XSS,
        generation={"temperature": XSS, "top_p": XSS},
    )
    if not chains:
        results["dataset"] = {**(results.get("dataset") or {}), "split": XSS, "revision": XSS}
    (dest / "results.json").write_text(json.dumps(results), encoding="utf-8")
    return dest


def _outside_data_block(html: str) -> str:
    head, _, rest = html.partition('id="report-data">')
    return head + rest.split("</script>", 1)[1]


def test_fields_of_a_shared_results_json_are_escaped(runs, chain_run, tmp_path):
    common_o = write_report([_tampered_run(runs["alpha"], tmp_path / "a")], tmp_path / "a.html", images="none").path
    chains = write_report([_tampered_run(chain_run[0], tmp_path / "c", chains=True)], tmp_path / "c.html").path
    for page in (common_o, chains):
        html = page.read_text(encoding="utf-8")
        assert "<img src=x" not in _outside_data_block(html) and html.count("<script") == 2
        assert "&lt;img src=x onerror=" in html  # shown, as text


def test_page_policy_runs_only_the_page_own_script(runs):
    html = (runs["alpha"] / "report.html").read_text(encoding="utf-8")
    policy = re.search(r'http-equiv="Content-Security-Policy" content="([^"]*)"', html).group(1)
    script_src = re.search(r"script-src ([^;]*)", policy).group(1)
    assert "'unsafe-inline'" not in script_src and "'sha256-" in script_src


def test_browser_runs_no_markup_from_a_shared_results_json(browser, runs, chain_run, tmp_path):
    for name, source, chains in (("a", runs["alpha"], False), ("c", chain_run[0], True)):
        page = write_report(
            [_tampered_run(source, tmp_path / name, chains=chains)], tmp_path / f"{name}.html", images="none"
        ).path
        _open(browser, page)
        assert browser.execute_script("return window.__pwned === undefined")
        assert browser.find_elements("css selector", "#cards article.card")  # the page's own script still ran
