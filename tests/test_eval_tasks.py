"""The Task interface and the one evaluator: outputs pinned to what the evaluators wrote before the Task
refactor, backends without images never decode one, and a new task (the docs' example) runs, shards and
resumes through the evaluator."""

from __future__ import annotations

import dataclasses
import hashlib
import json

import pytest

from commonlink.constants import NO_COMMON_OBJECTS
from commonlink.errors import InputError
from commonlink.eval.backends.base import GenerationRequest
from commonlink.eval.backends.baselines import BaselineBackend
from commonlink.eval.evaluator import RunOptions, run_eval
from commonlink.eval.outputs import evaluate, write_run
from commonlink.eval.parsing import parse_yes_no
from commonlink.eval.scored import UnparseableError
from commonlink.eval.task import Task
from commonlink.kinds.association.loader import AssociationImage
from commonlink.kinds.association.task import AssociationSettings, evaluate_association
from commonlink.kinds.common_o.loader import CommonOSplit, open_common_o
from commonlink.kinds.common_o.perception import evaluate_perception
from commonlink.kinds.common_o.task import CommonOTask, evaluate_common_o
from tests.fixtures.tiny_chains import write_tiny_chain_files

FAST = dict(n_boot=50, progress=False, report=False)


@pytest.fixture(scope="module")
def chain_dir(tmp_path_factory):
    return write_tiny_chain_files(
        tmp_path_factory.mktemp("assoc"),
        chains_per_concept=3,
        max_steps=12,
        single_step_per_concept=5,
        deductions_per_concept=5,
    )


def _sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _metrics_sha(results: dict) -> str:
    return hashlib.sha256(json.dumps(results["metrics"], sort_keys=True).encode()).hexdigest()


# The predictions file and metrics each evaluator wrote before the Task refactor (commit 9df1636), on the same
# tiny inputs: the refactor (and any later change) must give the same bytes. Association runs of that time ran
# what is now the strict protocol; "association-paper-..." pins the paper protocol (issue 36) on the same inputs.
PINNED = {
    "commono-random": (
        "4cc8e1c07230cd1e7001754b3db9b6a1f54fca5da693e3e2e2284826fdeee99f",
        "0fd8947b9433b09394c73f958c5865a53898a3e58d3805f208b18f301acf89ee",
    ),
    "commono-none": (
        "a12764b361ea3f6142cbdd98960a03dfb15e16cc3e2f3d6b109189f190be3ec2",
        "6173d11d43475d37f068e35376d16ebb47b7d1460f2a314cafede8c3ba7b0264",
    ),
    "perception-none": (
        "0a27276b34d9fdf14066cbeb2f1997301940384590fbd7797cf558ad0c5dbca1",
        "1172c005633dd4c64dde0c780cd60936b7ed01e414238f2f9425c4e6ff45d236",
    ),
    "perception-random": (
        "e3e96d7123fd4cffcca34b83ca2cefc45fc90e3b60b79e184b5d34825264a6df",
        "5dba7f31189725afbe354f5236c2ff3a1dc5989b9cc2d837f03bf893dd4410e6",
    ),
    "association-deduction-random": (
        "bfa7b80bfee2a31f0bd3739d0fa1effac97a34f14ae6666db2217d3172a3fb86",
        "7cccf7bb191394eea8f6b057727f93e564ff50a5221d1546e20d7ce8e1f57d5e",
    ),
    "association-paper-deduction-random": (
        "f4a6eafc00358e8d5b39508db5c7b54bbe2c231668f7031e6005991e1a6661db",
        "c6ae390c1eb80f91942498f7216c695bf6ee9eb42377be770a3271937b44aa02",
    ),
}


@pytest.mark.parametrize("name", sorted(PINNED))
def test_outputs_match_the_pinned_outputs(name, common_o_split, chain_dir, tmp_path):
    data = common_o_split(8, seed=1, shards=2)
    task, model = name.split("-", 1)[0], name.rsplit("-", 1)[1]
    if task == "commono":
        results = evaluate_common_o(data, "main", model, out_dir=tmp_path, seed=3, **FAST)
    elif task == "perception":
        results = evaluate_perception(data, "main", model, out_dir=tmp_path, **FAST)
    else:
        protocol = "paper" if "-paper-" in name else "strict"
        settings = AssociationSettings(protocol=protocol)
        results = evaluate_association(chain_dir, "deduction", [model], out_dir=tmp_path, settings=settings, **FAST)
        assert results["association_protocol"] == protocol
    assert (_sha(tmp_path / "predictions.jsonl"), _metrics_sha(results)) == PINNED[name]
    if name == "commono-none":  # readable anchors of the same run
        assert (
            results["metrics"]["overall"]["accuracy"] == 0.25
            and results["metrics"]["overall"]["hallucination_rate"] == 0.1375
        )


@pytest.fixture()
def decode_log(monkeypatch):
    """Every Common-O row read with its pixels and every association image decoded, recorded."""
    log = []
    real_get, real_image = CommonOSplit.get, AssociationImage.image

    def get(self, i, *, images=True):
        if images:
            log.append(("common-o row", i))
        return real_get(self, i, images=images)

    def image(self):
        log.append(("association image", self.id))
        return real_image.fget(self)

    monkeypatch.setattr(CommonOSplit, "get", get)
    monkeypatch.setattr(AssociationImage, "image", property(image))
    return log


def test_backends_without_images_never_decode_one(decode_log, common_o_split, chain_dir, tmp_path):
    data = common_o_split(8, seed=1, shards=2)
    evaluate_common_o(data, "main", "none", out_dir=tmp_path / "none", **FAST)
    evaluate_common_o(data, "main", "random", out_dir=tmp_path / "random", concat_images=True, **FAST)
    evaluate_perception(data, "main", "random", out_dir=tmp_path / "perception", **FAST)
    for config in ("single_step", "deduction", "synchronous"):
        evaluate_association(chain_dir, config, ["random"], out_dir=tmp_path / config, **FAST)
    assert decode_log == []
    # the same baselines declaring that they use images do decode them (so the check above can fail)
    looking = BaselineBackend("random")
    looking.info = dataclasses.replace(looking.info, uses_images=True, fingerprint="baseline:random-with-images")
    evaluate_common_o(data, "main", backend_instance=looking, out_dir=tmp_path / "looking", limit=2, **FAST)
    evaluate_association(
        chain_dir, "deduction", backend_instances=[looking], out_dir=tmp_path / "looking-assoc", limit=1, **FAST
    )
    assert [kind for kind, _ in decode_log] == ["common-o row"] * 2 + ["association image"] * 2


# ------------------------------------------------------------------------------------------ adding a task
class SharesAnyTask(Task):
    """The example of docs/eval.md, "Adding a task": "Do the two images show any object in common?" yes/no."""

    name = "shares_any"
    description = "shares-any"
    writes_report = False  # the HTML report knows Common-O and association runs

    def __init__(self, data, split="main"):
        self.data, self.split = data, split

    def open(self):
        return open_common_o(self.data, self.split)

    def key_parts(self, dataset, info, settings):
        return self.common_key_parts(dataset, info, settings, task=self.name)

    def requests(self, example):
        request = GenerationRequest(
            id=example.id,
            images=[example.image_1, example.image_2],
            choices=["yes", "no"],
            multi_select=False,
            prompt="Do the two images show any object in common? Answer yes or no.",
        )
        return [(request, {"id": example.id, "shares": example.ground_truth != [NO_COMMON_OBJECTS]})]

    def score(self, meta, output):
        answer = parse_yes_no(output)
        return dict(meta, raw_output=output, answer=answer, correct=answer == meta["shares"])

    def results(self, run, outcome):
        n = len(outcome.records)
        return {
            "metrics": {"overall": {"n": n, "accuracy": sum(r["correct"] for r in outcome.records) / n if n else None}},
            **run.outcome_fields(outcome),
        }

    # no writer: commonlink.eval.outputs.write_results writes results.json and predictions.jsonl


def test_the_evaluator_returns_results_and_the_writers_write_them(common_o_split, tmp_path):
    """run_eval writes nothing but the prediction cache; write_run writes the task's files and the report."""
    data = common_o_split(6, seed=2)
    out = tmp_path / "run"
    options = RunOptions(models=["random"], out_dir=out, n_boot=20, progress=False)
    run = run_eval(CommonOTask(data, "main"), options)
    assert run.results["task"] == "common_o" and len(run.outcome.records) == 6
    assert sorted(p.name for p in out.iterdir()) == ["prediction-cache.jsonl"]
    write_run(run, report=False)
    assert {"results.json", "predictions.jsonl", "results.md"} <= {p.name for p in out.iterdir()}
    assert json.loads((out / "results.json").read_text()) == run.results
    assert not (out / "report.html").exists()
    write_run(run)
    assert (out / "report.html").is_file()


class _Mumbling(BaselineBackend):
    """A baseline that answers no letter at all (as a tiny or badly prompted model does): nothing parses."""

    def __init__(self):
        super().__init__("random")
        self.info = dataclasses.replace(self.info, fingerprint="baseline:mumbling")

    def generate(self, requests, settings):
        return ["I am not sure what is in these pictures." for _ in requests]


def test_an_unparseable_run_is_refused_after_its_files_are_written(common_o_split, tmp_path):
    """run_eval records the parse check (scored.warning) and raises nothing; evaluate writes the files, then
    refuses the run (UnparseableError) unless allowed; a dry run returns the estimate and writes nothing."""
    data = common_o_split(4, seed=5)
    out = tmp_path / "run"
    options = RunOptions(backend_instances=[_Mumbling()], out_dir=out, n_boot=20, progress=False, report=False)
    run = run_eval(CommonOTask(data, "main"), options)
    assert run.results["scored"]["unparseable_rate"] == 1.0
    assert run.results["scored"]["warning"].startswith("WARNING: no answer could be parsed")
    assert not (out / "results.json").exists()  # run_eval writes nothing but the cache
    with pytest.raises(UnparseableError) as refused:
        evaluate(CommonOTask(data, "main"), options)
    written = json.loads((out / "results.json").read_text())
    assert written["scored"] == refused.value.results["scored"] and (out / "predictions.jsonl").is_file()
    allowed = evaluate(CommonOTask(data, "main"), dataclasses.replace(options, allow_unparseable=True))
    assert allowed["scored"]["warning"] == written["scored"]["warning"]
    with pytest.raises(InputError, match="--max-unparseable-share 2"):
        dataclasses.replace(options, max_unparseable_share=2)
    seen = []
    dry = tmp_path / "dry"
    dry_options = RunOptions(models=["random"], out_dir=dry, dry_run=True, on_estimate=seen.append, progress=False)
    dry_run = run_eval(CommonOTask(data, "main"), dry_options)
    assert dry_run.out_dir is None and dry_run.results["dry_run"] and dry_run.results["estimate"]["requests"] == 4
    assert evaluate(CommonOTask(data, "main"), dry_options) == dry_run.results
    assert len(seen) == 2 and seen[0].requests == 4 and not dry.exists()


def test_common_key_parts_name_the_backend_options_only_when_set():
    """A run with default backend options keeps the key (and the cache) it had before options existed."""
    from types import SimpleNamespace

    from commonlink.eval.backends.base import GenerationSettings

    dataset, settings = SimpleNamespace(fingerprint="d1"), GenerationSettings()
    plain = SimpleNamespace(fingerprint="m1", backend="transformers", output_options={})
    parts = Task.common_key_parts(dataset, plain, settings, task="t", split="main")
    assert parts == {
        "dataset": "d1",
        "model": "m1",
        "backend": "transformers",
        "settings": settings.to_dict(),
        "task": "t",
        "split": "main",
    }
    tuned = SimpleNamespace(fingerprint="m1", backend="transformers", output_options={"dtype": "bfloat16"})
    assert Task.common_key_parts(dataset, tuned, settings, task="t")["backend_options"] == {"dtype": "bfloat16"}


def test_evaluate_common_o_hands_task_options_to_the_task_and_the_rest_to_the_run(common_o_split, tmp_path):
    data = common_o_split(4, seed=3)
    results = evaluate_common_o(
        data, "main", "random", out_dir=tmp_path / "run", question="built", n_boot=20, limit=2, progress=False
    )
    assert results["prompt"]["question"] == "built" and results["dataset"]["rows_requested"] == 2
    assert set(results["timing"]) >= {"wall_s", "generate_s", "from_cache", "generated", "examples_per_s"}
    with pytest.raises(TypeError, match="questions"):
        evaluate_common_o(data, "main", "random", questions="built", progress=False)


def test_a_new_task_runs_shards_and_resumes_through_the_evaluator(common_o_split, tmp_path):
    data = common_o_split(8, seed=1, shards=2)
    task = SharesAnyTask(data)
    whole = evaluate(task, RunOptions(models=["none"], out_dir=tmp_path / "whole", n_boot=20, progress=False))
    truth = [open_common_o(data, "main").get(i, images=False).ground_truth != [NO_COMMON_OBJECTS] for i in range(8)]
    assert whole["task"] == "shares_any" and whole["model"] == "none"  # the common head
    assert whole["metrics"]["overall"] == {
        "n": 8,
        "accuracy": sum(not t for t in truth) / 8,
    }  # "none" always answers no
    for k in (0, 1):
        part = evaluate(task, RunOptions(models=["random"], out_dir=tmp_path / "sharded", shard=(k, 2), progress=False))
        assert (
            part["metrics"]["overall"]["n"] == 4 and (tmp_path / "sharded" / f"results.shard-{k}-of-2.json").is_file()
        )
    merged = evaluate(task, RunOptions(models=["random"], out_dir=tmp_path / "sharded", progress=False))
    assert merged["metrics"]["overall"]["n"] == 8 and merged["metrics"] != whole["metrics"]
    cache = tmp_path / "sharded" / "prediction-cache.jsonl"
    assert not cache.exists() or cache.read_text() == ""  # the merge answered everything from the shards' caches
