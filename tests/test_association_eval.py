"""The association protocol end to end: scripted backends with hand-worked metrics, lockstep == one by one,
resume from the cache, MoE votes, and a tiny random LLaVA through the real transformers path."""

from __future__ import annotations

import json

import numpy as np
import pytest

from commonlink.eval.backends import GenerationSettings
from commonlink.eval.backends.base import BackendInfo
from commonlink.eval.cache import PredictionCache
from commonlink.kinds.association.loader import open_association
from commonlink.kinds.association.task import (
    Asker,
    AssociationSettings,
    evaluate_association,
    majority_concepts,
    majority_selection,
    run_chains,
)
from tests.fixtures.tiny_chains import TINY_CONCEPTS, write_tiny_chain_files

CONCEPTS = list(TINY_CONCEPTS)
#: The protocol these tests were written for (warm-up from the gold concept, scoring from plan position 3).
STRICT = AssociationSettings(protocol="strict")


@pytest.fixture(scope="module")
def chain_dir(tmp_path_factory):
    return write_tiny_chain_files(
        tmp_path_factory.mktemp("assoc"),
        chains_per_concept=3,
        max_steps=12,
        single_step_per_concept=5,
        deductions_per_concept=5,
    )


class Scripted:
    """A deterministic backend that reads the task and step from the request id.

    ``select(chain_or_task, step, answer) -> 0|1`` decides the pick; ``deduce(gold) -> list`` the concepts.
    Records every batch so tests can check batching and request counts.
    """

    def __init__(self, answers, select, deduce=lambda gold: gold[:1], name="scripted"):
        self.answers, self.select, self.deduce = answers, select, deduce
        self.info = BackendInfo(
            backend="scripted",
            model=name,
            fingerprint=f"scripted:{name}",
            batch_invariant=True,
            default_batch_size=8,
            uses_images=False,
        )
        self.generate_seconds = 0.0
        self.batches = []

    def generate(self, requests, settings):
        self.batches.append(len(requests))
        out = []
        for r in requests:
            task, step, kind, _ = r.id.rsplit("/", 3)
            answer, gold = self.answers[(task, int(step))]
            if kind == "select":
                out.append(f"Image{self.select(task, int(step), answer) + 1}")
            else:
                out.append(", ".join(self.deduce(gold)) or "none of them")
        return out

    def close(self):
        pass


def _answers(chain_dir, config):
    split = open_association(chain_dir, config)
    answers = {}
    for task in split:
        if hasattr(task, "steps"):
            for s in task.steps:
                answers[(task.id, s.index)] = (s.answer, s.gold)
        elif hasattr(task, "candidates"):
            gold = [o for o in task.options if o in set(task.query.labels) & set(task.positive.labels)]
            answers[(task.id, 0)] = (task.answer, gold)
        else:
            answers[(task.id, 0)] = (None, task.gold)
    return split, answers


def test_correct_for_k_steps_then_wrong(chain_dir, tmp_path):
    split, answers = _answers(chain_dir, "synchronous")
    k_of = {chain.id: i % 5 for i, chain in enumerate(split)}  # chain i: right for i % 5 steps, then wrong
    backend = Scripted(answers, lambda c, t, a: a if t - 3 < k_of[c] else 1 - a)
    res = evaluate_association(
        chain_dir,
        "synchronous",
        backend_instances=[backend],
        out_dir=tmp_path,
        progress=False,
        n_boot=50,
        settings=STRICT,
    )
    per = res["metrics"]["per_concept"]
    for concept in CONCEPTS:
        lengths = [k_of[c.id] for c in split if c.concepts == [concept]]
        assert per[concept]["max_steps"] == max(lengths)
        assert per[concept]["mean_steps"] == pytest.approx(sum(lengths) / len(lengths))
        assert per[concept]["deduction_success_ratio"] in (None, 1.0)
    assert res["metrics"]["summary"]["avg_max_steps"] == pytest.approx(np.mean([per[c]["max_steps"] for c in CONCEPTS]))
    # two requests per scored step except the failing one (no deduction after a wrong pick)
    total_steps = sum(k + 1 for k in k_of.values())
    assert res["requests"]["total"] == 2 * total_steps - len(k_of)
    assert res["requests"]["per_scored_step"] <= 2
    log = [json.loads(line) for line in (tmp_path / "steps.jsonl").read_text().splitlines()]
    assert sum(1 for e in log if e["warmup"]) == 3 * len(k_of)
    assert (tmp_path / "results.md").read_text().startswith("### association/synchronous")


def test_always_first_image_and_max_steps_cap(chain_dir):
    split, answers = _answers(chain_dir, "synchronous")
    backend = Scripted(answers, lambda c, t, a: 0)
    res = evaluate_association(
        chain_dir,
        "synchronous",
        backend_instances=[backend],
        progress=False,
        n_boot=20,
        settings=AssociationSettings(protocol="strict", max_steps=5),
    )
    for concept in CONCEPTS:
        expected = []
        for chain in split:
            if chain.concepts != [concept]:
                continue
            n = 0
            for step in chain.scored_steps:
                if step.answer != 0 or n == 5:
                    break
                n += 1
            expected.append(n)
        assert res["metrics"]["per_concept"][concept]["max_steps"] == max(expected)
        assert res["metrics"]["per_concept"][concept]["mean_steps"] == pytest.approx(np.mean(expected))


def test_wrong_deduction_does_not_end_chain_but_enters_memory(chain_dir):
    split, answers = _answers(chain_dir, "synchronous")
    backend = Scripted(
        answers, lambda c, t, a: a, deduce=lambda gold: ["painted"] if "painted" not in gold else ["metal"]
    )
    chains = [c for c in split][:2]
    asker = Asker([backend], PredictionCache(_tmpfile()), GenerationSettings(), ["k"], 8)
    runs = run_chains(
        chains, asker, AssociationSettings(protocol="strict", memory="structm", max_steps=6), progress=False
    )
    for run in runs:
        assert run.length == 6 and run.ended == "max_steps"
        assert run.deductions == 6 and run.deductions_correct == 0
        wrong = {e["deduction"][0] for e in run.log if not e["warmup"]}
        assert any(key.split("|")[0] in wrong for key in run.log[-1]["memory"]["weights"])


def _tmpfile():
    import tempfile

    return tempfile.mktemp(suffix=".jsonl")


def test_lockstep_equals_one_by_one_and_batches(chain_dir):
    split, answers = _answers(chain_dir, "asynchronous")
    chains = list(split)
    policy = lambda c, t, a: a if (t * 7 + len(c)) % 5 else 1 - a  # noqa: E731
    together = Scripted(answers, policy)
    runs = run_chains(
        chains,
        Asker([together], PredictionCache(_tmpfile()), GenerationSettings(), ["k"], 64),
        AssociationSettings(protocol="strict", memory="chainm"),
        progress=False,
    )
    alone = Scripted(answers, policy)
    singles = [
        run_chains(
            [c],
            Asker([alone], PredictionCache(_tmpfile()), GenerationSettings(), ["k"], 64),
            AssociationSettings(protocol="strict", memory="chainm"),
            progress=False,
        )[0]
        for c in chains
    ]
    assert [r.log for r in runs] == [r.log for r in singles]
    assert max(together.batches) == len(chains) > 1  # one batch holds a step of every chain
    assert len(together.batches) < len(alone.batches)


def test_groups_of_chains_give_the_same_results_and_log(chain_dir, tmp_path):
    split, answers = _answers(chain_dir, "asynchronous")
    policy = lambda c, t, a: a if (t + len(c)) % 4 else 1 - a  # noqa: E731
    whole = evaluate_association(
        chain_dir,
        "asynchronous",
        backend_instances=[Scripted(answers, policy)],
        out_dir=tmp_path / "a",
        progress=False,
        n_boot=20,
        settings=STRICT,
    )
    grouped = evaluate_association(
        chain_dir,
        "asynchronous",
        backend_instances=[Scripted(answers, policy)],
        out_dir=tmp_path / "b",
        progress=False,
        n_boot=20,
        group_size=2,
        settings=STRICT,
    )
    assert whole["metrics"] == grouped["metrics"]
    assert (tmp_path / "a" / "steps.jsonl").read_text() == (tmp_path / "b" / "steps.jsonl").read_text()


def test_resume_from_cache_gives_identical_results(chain_dir, tmp_path):
    split, answers = _answers(chain_dir, "synchronous")
    policy = lambda c, t, a: a if t < 9 else 1 - a  # noqa: E731
    full = evaluate_association(
        chain_dir,
        "synchronous",
        backend_instances=[Scripted(answers, policy)],
        out_dir=tmp_path / "full",
        progress=False,
        n_boot=30,
        settings=STRICT,
    )

    class Dies(Scripted):
        def generate(self, requests, settings):
            if len(self.batches) == 4:
                raise KeyboardInterrupt
            return super().generate(requests, settings)

    with pytest.raises(KeyboardInterrupt):
        evaluate_association(
            chain_dir,
            "synchronous",
            backend_instances=[Dies(answers, policy)],
            out_dir=tmp_path / "resumed",
            progress=False,
            n_boot=30,
            settings=STRICT,
        )
    again = Scripted(answers, policy)
    resumed = evaluate_association(
        chain_dir,
        "synchronous",
        backend_instances=[again],
        out_dir=tmp_path / "resumed",
        progress=False,
        n_boot=30,
        settings=STRICT,
    )
    assert resumed["metrics"] == full["metrics"]
    assert resumed["requests"]["from_cache"] > 0
    assert resumed["requests"]["generated"] == full["requests"]["generated"] - resumed["requests"]["from_cache"]


def test_single_step_and_deduction_ratios(chain_dir):
    split, answers = _answers(chain_dir, "single_step")
    tasks = list(split)
    right = {t.id for i, t in enumerate(tasks) if i % 2 == 0}
    backend = Scripted(answers, lambda c, t, a: a if c in right else 1 - a)
    res = evaluate_association(
        chain_dir, "single_step", backend_instances=[backend], progress=False, n_boot=20, settings=STRICT
    )
    for concept, v in res["metrics"]["per_concept"].items():
        mine = [t for t in tasks if t.concept == concept]
        assert v["success_ratio"] == pytest.approx(sum(t.id in right for t in mine) / len(mine))
        assert v["deduction_success_ratio"] == 1.0
    _, ded_answers = _answers(chain_dir, "deduction")
    res = evaluate_association(
        chain_dir,
        "deduction",
        backend_instances=[Scripted(ded_answers, None, deduce=lambda g: ["nonsense"])],
        progress=False,
        allow_unparseable=True,  # every deduction names no offered concept
        n_boot=20,
        settings=STRICT,
    )
    assert res["metrics"]["summary"]["avg_deduction_success_ratio"] == 0.0
    assert res["metrics"]["summary"]["unparseable_rate"] == 1.0


def test_single_step_without_deduction_reports_no_deduction_ratio(chain_dir, tmp_path):
    """--no-deduction sends no deduction requests, so no deduction success ratio (not 0%) may be reported."""
    split, answers = _answers(chain_dir, "single_step")
    backend = Scripted(answers, lambda c, t, a: a, name="always-right")
    res = evaluate_association(
        chain_dir,
        "single_step",
        backend_instances=[backend],
        settings=AssociationSettings(protocol="strict", deduction=False),
        out_dir=tmp_path,
        progress=False,
        n_boot=20,
    )
    assert res["requests"]["total"] == len(split)  # selections only
    assert res["metrics"]["summary"]["avg_success_ratio"] == 1.0
    assert "avg_deduction_success_ratio" not in res["metrics"]["summary"]
    assert all("deduction_success_ratio" not in v for v in res["metrics"]["per_concept"].values())


def test_backend_failures_are_left_out_and_retried(chain_dir, tmp_path):
    from commonlink.eval.backends.base import RequestFailure

    split, answers = _answers(chain_dir, "synchronous")
    first = list(split)[0].id

    class FailsFirstChain(Scripted):
        def generate(self, requests, settings):
            out = super().generate(requests, settings)
            return [
                RequestFailure("out of memory") if r.id.startswith(first + "/") else o for r, o in zip(requests, out)
            ]

    policy = lambda c, t, a: a if t < 6 else 1 - a  # noqa: E731
    res = evaluate_association(
        chain_dir,
        "synchronous",
        backend_instances=[FailsFirstChain(answers, policy)],
        out_dir=tmp_path,
        progress=False,
        n_boot=20,
        settings=STRICT,
    )
    assert res["metrics"]["summary"]["failed_chains"] == 1
    assert all(v["max_steps"] == v["mean_steps"] == 3 for v in res["metrics"]["per_concept"].values() if v["chains"])
    assert "left out of the metrics" in (tmp_path / "results.md").read_text()
    again = evaluate_association(
        chain_dir,
        "synchronous",
        backend_instances=[Scripted(answers, policy)],
        out_dir=tmp_path,
        progress=False,
        n_boot=20,
        settings=STRICT,
    )
    assert again["metrics"]["summary"]["failed_chains"] == 0
    assert again["metrics"]["summary"]["chains"] == res["metrics"]["summary"]["chains"] + 1


def test_majority_votes():
    assert majority_selection([0, 1, 1]) == 1
    assert majority_selection([1, 0]) == 1  # tie: first model's pick
    assert majority_selection([None, None]) is None
    assert majority_concepts([["a"], ["a", "b"], ["b"]], ["a", "b", "c"]) == ["a", "b"]
    assert majority_concepts([["a"], ["b"], None], ["a", "b"]) == ["a"]


def test_moe_and_random_baseline_via_cli(chain_dir, tmp_path):
    from typer.testing import CliRunner

    from commonlink.cli import app

    out = tmp_path / "moe"
    result = CliRunner().invoke(
        app,
        [
            "eval",
            "association",
            "--data",
            str(chain_dir),
            "--config",
            "synchronous",
            "--model",
            "random",
            "--model",
            "random",
            "--moe",
            "--memory",
            "nlm",
            "--out",
            str(out),
            "--max-steps",
            "8",
        ],
    )
    assert result.exit_code == 0, result.output
    res = json.loads((out / "results.json").read_text())
    assert res["moe"] and res["models"] == ["random", "random"]
    assert res["association"]["memory"] == "nlm"
    assert 0 < res["metrics"]["summary"]["avg_mean_steps"] <= 8  # the random baseline's picks parse: chains advance
    assert res["metrics"]["per_concept"]["metal"]["ended"].get("unparseable", 0) == 0
    bad = CliRunner().invoke(
        app,
        [
            "eval",
            "association",
            "--data",
            str(chain_dir),
            "--config",
            "synchronous",
            "--model",
            "random",
            "--memory",
            "bogus",
        ],
    )
    assert bad.exit_code == 1 and "memory" in bad.output.lower()


@pytest.mark.slow
def test_tiny_llava_through_transformers(chain_dir, tmp_path, tiny_llava):
    pytest.importorskip("transformers")
    model_dir = tiny_llava

    def run(batch_size: int) -> dict:
        return evaluate_association(
            chain_dir,
            "synchronous",
            models=[str(model_dir)],
            backend="transformers",
            out_dir=tmp_path / f"b{batch_size}",
            batch_size=batch_size,
            limit=3,
            settings=AssociationSettings(protocol="strict", max_steps=3),
            progress=False,
            n_boot=20,
            allow_unparseable=True,  # the tiny model names no image
        )

    res1, res4 = run(1), run(4)
    assert res1["metrics"] == res4["metrics"]
    assert res1["backend_details"][0].get("loaded", True) is True and "dtype" in res1["backend_details"][0]
    # Everything cached: the rerun answers from the cache without loading the weights.
    again = evaluate_association(
        chain_dir,
        "synchronous",
        models=[str(model_dir)],
        backend="transformers",
        out_dir=tmp_path / "b1",
        batch_size=1,
        limit=3,
        settings=AssociationSettings(protocol="strict", max_steps=3),
        progress=False,
        n_boot=20,
        allow_unparseable=True,
    )
    assert again["metrics"] == res1["metrics"] and again["requests"]["generated"] == 0
    assert again["backend_details"][0]["loaded"] is False
    assert (tmp_path / "b1" / "steps.jsonl").read_text() == (tmp_path / "b4" / "steps.jsonl").read_text()


# ------------------------------------------------------------------------------------------ the paper protocol
def _log(path):
    return [json.loads(line) for line in (path / "steps.jsonl").read_text().splitlines()]


def test_paper_asynchronous_warmup_per_concept_and_fresh_concept_1_start(chain_dir, tmp_path):
    """Under the paper protocol (the default) an asynchronous chain warms up on 3 steps of each concept, each
    answered by the model's own deduction (one request each, no selection), and its first scored step is on
    concept 1, not a bridge; the memory holds what the model deduced, not the gold concept."""
    split, answers = _answers(chain_dir, "asynchronous")
    chains = list(split)
    # deduce a wrong concept everywhere: under paper it, not the gold, must be in the memory after warm-up
    backend = Scripted(
        answers, lambda c, t, a: a, deduce=lambda gold: ["painted"] if "painted" not in gold else ["ripe"]
    )
    res = evaluate_association(
        chain_dir, "asynchronous", backend_instances=[backend], out_dir=tmp_path, progress=False, n_boot=20
    )
    assert res["association_protocol"] == "paper" and res["association"]["protocol"] == "paper"
    assert res["association"]["deduction_rule"] == "harness" and res["association"]["image_size"] == 336
    assert "1,1,1,b,2,2,2,b" in res["protocol_rules"]["warmup"]
    on_disk = json.loads((tmp_path / "results.json").read_text())
    assert on_disk["association_protocol"] == "paper"
    log = _log(tmp_path)
    for chain in chains:
        entries = [e for e in log if e["chain"] == chain.id]
        warm = [e for e in entries if e["warmup"]]
        first, second = chain.concepts
        assert [e["concept"] for e in warm] == [first] * 3 + [second] * 3
        assert not any(e["bridge"] for e in warm)
        assert all(e["deduction_outputs"] for e in warm)  # the model was asked
        memory_concepts = {k.split("|")[0] for k in warm[-1]["memory"]["weights"]}
        assert memory_concepts <= {"painted", "ripe"}  # the model's deductions, not the gold concepts
        scored = [e for e in entries if not e["warmup"]]
        assert scored[0]["concept"] == first and scored[0]["bridge"] is False
        assert scored[0]["step"] == 8  # after 0-2 and 4-6, the skipped bridges 3 and 7
        assert [chain.plan[e["step"]] for e in scored] == list("111b222")
        # the first scored query is fresh: never shown in the warm-up
        shown = {chain.steps[e["step"]].query.id for e in warm} | {c for e in warm for c in e["candidates"]}
        assert chain.steps[scored[0]["step"]].query.id not in shown
    # per chain: 6 warm-up deductions, then a selection and a deduction per scored step (7, all right)
    assert res["requests"]["total"] == len(chains) * (6 + 2 * 7)


def test_paper_synchronous_golden_lengths(chain_dir, tmp_path):
    """Paper golden: synchronous warm-up on steps 0, 2, 4 (a fresh query each), scoring from step 6; a chain
    right for k scored steps, then wrong, has length k."""
    split, answers = _answers(chain_dir, "synchronous")
    k_of = {chain.id: i % 5 for i, chain in enumerate(split)}
    backend = Scripted(answers, lambda c, t, a: a if t - 6 < k_of[c] else 1 - a)
    res = evaluate_association(
        chain_dir, "synchronous", backend_instances=[backend], out_dir=tmp_path, progress=False, n_boot=20
    )
    for concept in CONCEPTS:
        lengths = [k_of[c.id] for c in split if c.concepts == [concept]]
        assert res["metrics"]["per_concept"][concept]["max_steps"] == max(lengths)
        assert res["metrics"]["per_concept"][concept]["mean_steps"] == pytest.approx(sum(lengths) / len(lengths))
    log = _log(tmp_path)
    for chain in split:
        entries = [e for e in log if e["chain"] == chain.id]
        assert [e["step"] for e in entries if e["warmup"]] == [0, 2, 4]
        assert next(e for e in entries if not e["warmup"])["step"] == 6
    # 3 warm-up deductions a chain, 2 requests a right scored step, 1 for the wrong one
    assert res["requests"]["total"] == sum(3 + 2 * k + 1 for k in k_of.values())


def test_paper_deduction_rule_counts_an_answer_containing_a_gold_concept(chain_dir, tmp_path):
    """ "metal, and maybe painted" for a metal pair: right under paper (a gold concept occurs), wrong under
    strict's all-shared (it names a concept they do not share)."""
    split, answers = _answers(chain_dir, "single_step")

    def deduce(gold):
        extra = next(c for c in CONCEPTS if c not in gold)
        return [*gold, f"maybe {extra}"]

    runs = {}
    for protocol in ("paper", "strict"):
        runs[protocol] = evaluate_association(
            chain_dir,
            "single_step",
            backend_instances=[Scripted(answers, lambda c, t, a: a, deduce=deduce)],
            settings=AssociationSettings(protocol=protocol),
            out_dir=tmp_path / protocol,
            progress=False,
            n_boot=20,
        )
    assert runs["paper"]["metrics"]["summary"]["avg_deduction_success_ratio"] == 1.0
    assert runs["strict"]["metrics"]["summary"]["avg_deduction_success_ratio"] == 0.0
    assert runs["strict"]["association_protocol"] == "strict"


def test_paper_selection_and_deduction_readers():
    from commonlink.kinds.association.requests import (
        harness_concepts,
        harness_deduction_correct,
        harness_picked,
        harness_vote,
        read_selection,
    )

    assert harness_deduction_correct("It looks metallic.", ["metal"])  # substring, as the harness
    assert not harness_deduction_correct("wooden", ["metal"])
    assert harness_concepts("Metal and furry", ["metal", "furry", "ripe"]) == ["metal", "furry"]
    assert harness_picked("Image 2", 1) and harness_picked("Image1 or Image2", 0) and not harness_picked("image1", 0)
    # the harness's word vote: the most frequent word of all answers
    assert harness_vote(["Image1.", "Image1", "Image2"], 0, "r") == "Image1"
    assert harness_vote([None, None], 0, "r") is None
    # a tie is drawn at random, seeded: the same request and seed draw the same word, others may not
    draws = {harness_vote(["Image1", "Image2"], seed, "r") for seed in range(40)}
    assert draws == {"Image1", "Image2"}
    assert harness_vote(["Image1", "Image2"], 7, "r") == harness_vote(["Image1", "Image2"], 7, "r")
    paper, strict = AssociationSettings(), AssociationSettings(protocol="strict")
    assert read_selection(["Image1 or Image2"], 0, paper, seed=0, request_id="r")[1] is True
    assert read_selection(["Image1 or Image2"], 0, strict, seed=0, request_id="r")[1] is False
    # strict's tie goes to the first model
    assert read_selection(["Image2", "Image1"], 1, strict, seed=0, request_id="r")[:2] == (1, True)


def test_paper_images_are_336_square_and_strict_native(chain_dir, tmp_path):
    split, answers = _answers(chain_dir, "single_step")

    class Sees(Scripted):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            self.info.uses_images = True
            self.sizes = set()

        def generate(self, requests, settings):
            self.sizes |= {img.size for r in requests for img in r.images}
            return super().generate(requests, settings)

    seen = {}
    for protocol in ("paper", "strict"):
        backend = Sees(answers, lambda c, t, a: a)
        evaluate_association(
            chain_dir,
            "single_step",
            backend_instances=[backend],
            settings=AssociationSettings(protocol=protocol),
            out_dir=tmp_path / protocol,
            progress=False,
            n_boot=10,
            limit=2,
        )
        seen[protocol] = backend.sizes
    assert seen["paper"] == {(336, 336)}
    assert seen["strict"] == {(24, 24)}  # the tiny images as stored


def test_paper_protocol_refuses_a_chain_too_short_and_bad_protocol(tmp_path):
    short = write_tiny_chain_files(tmp_path / "short", chains_per_concept=1, max_steps=2, tasks=["asynchronous"])
    with pytest.raises(Exception, match="too short for the paper protocol"):
        evaluate_association(short, "asynchronous", progress=False, n_boot=10)
    with pytest.raises(Exception, match="--protocol 'harness' is not"):
        AssociationSettings(protocol="harness")
    overridden = AssociationSettings(deduction_rule="all-shared")
    assert overridden.overrides == ["deduction_rule"] and overridden.image_size == 336
