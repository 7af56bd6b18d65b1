"""Results in lmms-eval's file convention, and the lmms-eval / VLMEvalKit exports scored like ours.

The lmms-eval part runs the real lmms-eval (its TaskManager and ``simple_evaluate``, in a subprocess) when it is
installed: ``scripts/harness_site.sh DIR`` installs it into a separate folder and ``COMMONLINK_HARNESS_SITE=DIR``
points the tests there (skipped otherwise). VLMEvalKit is not on PyPI: its TSV and scoring functions are checked
here without importing it.
"""

from __future__ import annotations

import ast
import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from commonlink.eval.association import evaluate_association
from commonlink.eval.backends import BACKEND_REGISTRY, BackendInfo, register_backend
from commonlink.eval.commono import evaluate_common_o
from commonlink.eval.harness_export import export_lmms_eval, export_vlmevalkit
from commonlink.eval.harnesses import vlmeval_messages, vlmeval_score
from commonlink.formats.association import LabelledImage
from commonlink.sampling.chains import ChainConfig, build_chain_files
from commonlink.testing.tiny_models import (
    build_tiny_llava,
    common_o_rows,
    write_common_o_split,
)

FAST = {"n_boot": 20, "show_progress": False}


class FixedAnswer:
    """Answers every request with ``answer`` (what lmms-eval's ``dummy`` model does)."""

    def __init__(self, model, *, answer="Answer: A"):
        self.answer = answer
        self.generate_seconds = 0.0
        self.info = self.planned_info(model, answer=answer)

    @staticmethod
    def planned_info(model, **options):
        return BackendInfo(backend="fixed", model=model, fingerprint=f"fixed:{options.get('answer', 'Answer: A')}", batch_invariant=True, default_batch_size=8,
                           uses_images=False)

    def generate(self, requests, settings):
        return [self.answer for _ in requests]

    def close(self):
        pass


@pytest.fixture(autouse=True)
def fixed_backend(monkeypatch, tmp_path):
    monkeypatch.setitem(BACKEND_REGISTRY, "fixed", "")
    register_backend("fixed", f"{__name__}:FixedAnswer")
    monkeypatch.setattr("commonlink.constants.COMMONLINK_HOME", tmp_path / "home")


@pytest.fixture()
def release(tmp_path):
    data = write_common_o_split(tmp_path / "data", common_o_rows(12, seed=7), split="main")
    write_common_o_split(tmp_path / "data", common_o_rows(5, seed=8), split="challenge")
    return data


def _chains(root: Path) -> Path:
    rng = np.random.default_rng(1)
    (root / "imgs").mkdir(parents=True)
    concepts = ["metal", "furry", "ripe", "painted"]
    images = []
    for i in range(60):
        labels = [str(c) for c in rng.choice(concepts, size=int(rng.integers(1, 3)), replace=False)] + [f"thing{i % 7}"]
        path = root / "imgs" / f"img{i:03d}.png"
        Image.new("RGB", (24, 24), tuple(int(v) for v in rng.integers(0, 255, 3))).save(path)
        images.append(LabelledImage(id=f"img{i:03d}", labels=labels, width=300, height=300, origin={"type": "file", "path": str(path)}))
    cfg = ChainConfig(seed=3, concepts=concepts, pairs=[["metal", "furry"]], chains_per_concept=2, max_steps=8, warmup=3,
                      single_step_per_concept=4, deductions_per_concept=2, min_pool=3, memory_size=3)
    build_chain_files(images, root / "chains", cfg, progress=False)
    return root / "chains"


# ------------------------------------------------------------------------------------------ our results, lmms-eval's layout
def test_runs_also_write_lmms_eval_results_and_sample_logs(release, tmp_path):
    results = evaluate_common_o(release, "challenge", "m", "fixed", tmp_path / "run", **FAST)
    folder = tmp_path / "run" / "lmms_eval"
    aggregated = json.loads((folder / "results.json").read_text())
    task = aggregated["results"]["common_o_challenge"]
    overall = results["metrics"]["overall"]
    assert task["acc,none"] == overall["accuracy"] and task["acc_stderr,none"] == overall["accuracy_se"]
    assert task["hallucination_rate,none"] == overall["hallucination_rate"]
    assert aggregated["n-samples"]["common_o_challenge"] == {"original": 5, "effective": 5}
    samples = [json.loads(line) for line in (folder / "samples_common_o_challenge.jsonl").read_text().splitlines()]
    predictions = [json.loads(line) for line in (tmp_path / "run" / "predictions.jsonl").read_text().splitlines()]
    assert [s["doc_id"] for s in samples] == [p["row_index"] for p in predictions] == list(range(5))
    assert all(s["resps"] == [["Answer: A"]] and s["filtered_resps"] == ["A"] for s in samples)
    assert [s["acc"] for s in samples] == [float(p["correct"]) for p in predictions]
    assert samples[0]["arguments"][0][0].startswith("Which objects are present in both images?")


def test_association_single_step_writes_the_lmms_eval_layout(tmp_path):
    chains = _chains(tmp_path)
    results = evaluate_association(chains, "single_step", ["m"], "fixed", tmp_path / "run", backend_options={"answer": "Image1"}, **FAST)
    aggregated = json.loads((tmp_path / "run" / "lmms_eval" / "results.json").read_text())
    assert aggregated["results"]["association_single_step"]["acc,none"] == results["metrics"]["summary"]["avg_success_ratio"]
    samples = (tmp_path / "run" / "lmms_eval" / "samples_association_single_step.jsonl").read_text().splitlines()
    assert len(samples) == results["metrics"]["summary"]["n"] == 16 and json.loads(samples[0])["filtered_resps"] == ["Image1"]


# ------------------------------------------------------------------------------------------ VLMEvalKit export
@pytest.mark.slow
def test_vlmevalkit_export_reads_as_vlmevalkit_reads_it_and_scores_like_us(release, tmp_path):
    chains = _chains(tmp_path)
    written = export_vlmevalkit(tmp_path / "vlm", data=release, association=chains, show_progress=False)
    assert sorted(p.name for p in written) == ["CommonO.tsv", "CommonO_AssocSingleStep.tsv", "CommonO_Challenge.tsv", "commonlink_vlmeval.py"]
    module = ast.parse((tmp_path / "vlm" / "commonlink_vlmeval.py").read_text())
    cls = next(n for n in module.body if isinstance(n, ast.ClassDef))
    assert [b.id for b in cls.bases] == ["ImageBaseDataset"]  # vlmeval.dataset.image_base.ImageBaseDataset
    assert {n.name for n in cls.body if isinstance(n, ast.FunctionDef)} == {"build_prompt", "evaluate"}  # its abstract API
    import pandas as pd

    for name, data_args in (("CommonO", ("main",)), ("CommonO_Challenge", ("challenge",))):
        table = pd.read_csv(tmp_path / "vlm" / f"{name}.tsv", sep="\t")  # vlmeval.smp.load of a .tsv
        images = [str(x) for x in ast.literal_eval(table["image"][0])]  # vlmeval.smp.toliststr
        assert len(images) == 2 and len(images[0]) > 64
        messages = vlmeval_messages(dict(table.iloc[0]), ["/a.png", "/b.png"])
        assert [m["type"] for m in messages] == ["image", "image", "text"] and messages[2]["value"].startswith("Which objects")
        table["prediction"] = "Answer: A"
        ours = evaluate_common_o(release, data_args[0], "m", "fixed", None, **FAST)["metrics"]["overall"]
        scored = vlmeval_score(table)
        assert scored["acc"] == ours["accuracy"] and scored["hallucination_rate"] == ours["hallucination_rate"] and scored["n"] == ours["n"]
    table = pd.read_csv(tmp_path / "vlm" / "CommonO_AssocSingleStep.tsv", sep="\t")
    assert [m["type"] for m in vlmeval_messages(dict(table.iloc[0]), ["/q.png", "/1.png", "/2.png"])] == ["text", "image", "text", "image", "text", "image", "text"]
    table["prediction"] = "Image2"
    ours = evaluate_association(chains, "single_step", ["m"], "fixed", None, backend_options={"answer": "Image2"}, **FAST)
    assert vlmeval_score(table)["acc"] == ours["metrics"]["summary"]["avg_success_ratio"]


# ------------------------------------------------------------------------------------------ the real lmms-eval
LMMS_DRIVER = """
import json, sys
from lmms_eval.evaluator import simple_evaluate
from lmms_eval.tasks import TaskManager
include, model, model_args, tasks = sys.argv[1:5]
manager = TaskManager(include_path=include, include_defaults=False)
out = simple_evaluate(model=model, model_args=model_args, tasks=tasks.split(","), task_manager=manager, device="cpu", batch_size=1,
                      log_samples=True, gen_kwargs="max_new_tokens=6" if model != "dummy" else None, bootstrap_iters=10)
print("RESULT " + json.dumps({"tasks": sorted(manager.all_tasks), "results": out["results"],
                              "samples": {t: [{"doc_id": s["doc_id"], "resps": s["resps"]} for s in v] for t, v in out["samples"].items()}},
                             default=str))
"""


@pytest.fixture()
def run_lmms_eval(tmp_path):
    """Runs lmms-eval's simple_evaluate in a subprocess with the harness folder first on the path (its pinned
    filelock must be imported before any other copy)."""
    import subprocess

    # scripts/setup.sh installs the harness into .harness-site; COMMONLINK_HARNESS_SITE points elsewhere
    site = os.environ.get("COMMONLINK_HARNESS_SITE") or str(Path(__file__).resolve().parents[1] / ".harness-site")
    if not (Path(site) / "lmms_eval").is_dir():
        pytest.skip("lmms-eval not installed (scripts/setup.sh puts it in .harness-site; or scripts/harness_site.sh DIR, "
                    "then COMMONLINK_HARNESS_SITE=DIR)")
    driver = tmp_path / "lmms_driver.py"
    driver.write_text(LMMS_DRIVER)
    repo = str(Path(__file__).resolve().parents[1])

    def run(include: Path, model: str, model_args: str, tasks: str) -> dict:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([site, repo]), HF_DATASETS_CACHE=str(tmp_path / "hf-datasets"))
        done = subprocess.run([sys.executable, str(driver), str(include), model, model_args, tasks], capture_output=True, text=True, env=env, check=False,
                              timeout=600)
        line = next((ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")), None)
        assert done.returncode == 0 and line, done.stderr[-3000:]
        return json.loads(line.removeprefix("RESULT "))

    return run


@pytest.mark.slow
def test_lmms_eval_runs_the_exported_tasks_and_scores_like_us(run_lmms_eval, release, tmp_path):
    chains = _chains(tmp_path / "assoc")
    export_lmms_eval(tmp_path / "export", data=release, association=chains, show_progress=False)
    include = tmp_path / "export" / "commonlink_tasks"

    # lmms-eval's dummy model answers "Answer: A" everywhere; our run with the same answers must score the same
    out = run_lmms_eval(include, "dummy", "response=Answer: A", "common_o,common_o_challenge")
    assert {"common_o", "common_o_challenge", "association_single_step"} <= set(out["tasks"])
    for task, split in (("common_o", "main"), ("common_o_challenge", "challenge")):
        ours = evaluate_common_o(release, split, "m", "fixed", None, **FAST)["metrics"]["overall"]
        assert out["results"][task]["acc,none"] == pytest.approx(ours["accuracy"])
        assert out["results"][task]["hallucination_rate,none"] == pytest.approx(ours["hallucination_rate"])
    out = run_lmms_eval(include, "dummy", "response=Image2", "association_single_step")
    ours = evaluate_association(chains, "single_step", ["m"], "fixed", None, backend_options={"answer": "Image2"}, **FAST)
    assert out["results"]["association_single_step"]["acc,none"] == pytest.approx(ours["metrics"]["summary"]["avg_success_ratio"])

    # a tiny real model through lmms-eval's own llava_hf adapter: its answers, rescored by commonlink, give its score
    model = build_tiny_llava(tmp_path / "llava")
    out = run_lmms_eval(include, "llava_hf", f"pretrained={model},device_map=cpu", "common_o")
    samples = out["samples"]["common_o"]
    assert len(samples) == 12 and all(s["resps"][0][0] for s in samples)
    from commonlink.eval.commono import score_predictions

    predictions = tmp_path / "lmms_predictions.jsonl"
    rows = {int(s["doc_id"]): s["resps"][0][0] for s in samples}
    predictions.write_text("".join(json.dumps({"id": f"main-{i}", "raw_output": rows[i]}) + "\n" for i in sorted(rows)))
    rescored = score_predictions(predictions, release, "main", n_boot=20)
    assert out["results"]["common_o"]["acc,none"] == pytest.approx(rescored["metrics"]["overall"]["accuracy"])
    assert out["results"]["common_o"]["hallucination_rate,none"] == pytest.approx(rescored["metrics"]["overall"]["hallucination_rate"])


def test_lmms_eval_export_files(release, tmp_path):
    written = export_lmms_eval(tmp_path / "export", data=release, show_progress=False)
    names = sorted(p.name for p in written)
    assert names == sorted(["_common_o_template_yaml", "common_o.yaml", "common_o_challenge.yaml", "common_o_challenge.parquet", "common_o_main.parquet",
                            "utils.py"])
    template = (tmp_path / "export" / "commonlink_tasks" / "_common_o_template_yaml").read_text()
    assert "dataset_path: parquet" in template and "process_results: !function utils.common_o_process_results" in template
    hub = export_lmms_eval(tmp_path / "hub", data="facebook/Common-O", revision="v1.0.0", show_progress=False)
    text = (tmp_path / "hub" / "commonlink_tasks" / "_common_o_template_yaml").read_text()
    assert "dataset_path: facebook/Common-O" in text and "revision: v1.0.0" in text and not any(p.suffix == ".parquet" for p in hub)
    with (tmp_path / "export" / "commonlink_tasks" / "common_o.yaml").open() as handle:
        assert "task: common_o\ntest_split: main\ninclude: _common_o_template_yaml" in handle.read()
