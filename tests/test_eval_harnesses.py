"""Results in lmms-eval's file convention, and the lmms-eval / VLMEvalKit exports scored like ours.

The lmms-eval part runs the real lmms-eval (its TaskManager and ``simple_evaluate``, in a subprocess) when it is
installed: ``scripts/harness_site.sh DIR`` installs it into a separate folder and ``COMMONLINK_HARNESS_SITE=DIR``
points the tests there (skipped otherwise). VLMEvalKit is not on PyPI and needs its own environment (its
requirements pin nothing against ours but pull torchvision, which needs the matching torch build): with
``COMMONLINK_VLMEVAL_PYTHON`` set to that environment's python, its own run.py runs the exported datasets in a
subprocess (skipped otherwise); without it, the TSV files and prediction files are read here the way VLMEvalKit
reads them (from its source and that real run).
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

from commonlink.errors import InputError
from commonlink.eval.backends import (
    BACKEND_REGISTRY,
    BackendInfo,
    RequestFailure,
    message_parts,
    register_backend,
)
from commonlink.eval.export.harnesses import vlmeval_messages, vlmeval_records, vlmeval_score
from commonlink.eval.export.writers import export_lmms_eval, export_vlmevalkit
from commonlink.kinds.association.chains import ChainConfig, build_chain_files
from commonlink.kinds.association.format import LabelledImage
from commonlink.kinds.association.task import AssociationSettings, evaluate_association
from commonlink.kinds.common_o.loader import open_common_o
from commonlink.kinds.common_o.task import (
    common_o_request,
    evaluate_common_o,
    score_predictions,
)
from tests.fixtures.harness_models import (
    ContentHashBackend,
    ReplayBackend,
    content_answer,
    content_key,
    vlmeval_message_parts,
)
from tests.fixtures.tiny_models import (
    build_tiny_llava,
    common_o_rows,
    write_common_o_split,
)

FAST = {"n_boot": 20, "progress": False}


class FixedAnswer:
    """Answers every request with ``answer`` (what lmms-eval's ``dummy`` model does)."""

    def __init__(self, model, *, answer="Answer: A"):
        self.answer = answer
        self.generate_seconds = 0.0
        self.info = self.planned_info(model, answer=answer)

    @staticmethod
    def planned_info(model, **options):
        return BackendInfo(
            backend="fixed",
            model=model,
            fingerprint=f"fixed:{options.get('answer', 'Answer: A')}",
            batch_invariant=True,
            default_batch_size=8,
            uses_images=False,
        )

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


@pytest.fixture()
def vlm_release(tmp_path):
    """More rows and fewer choices than ``release``: enough right answers from a content-hash model that equal
    accuracies are not both zero."""
    data = write_common_o_split(tmp_path / "vlm-data", common_o_rows(30, seed=7, num_choices=4), split="main")
    write_common_o_split(tmp_path / "vlm-data", common_o_rows(10, seed=8, num_choices=4), split="challenge")
    return data


def _chains(root: Path, single_steps: int = 4) -> Path:
    rng = np.random.default_rng(1)
    (root / "imgs").mkdir(parents=True)
    concepts = ["metal", "furry", "ripe", "painted"]
    images = []
    for i in range(60):
        labels = [str(c) for c in rng.choice(concepts, size=int(rng.integers(1, 3)), replace=False)] + [f"thing{i % 7}"]
        path = root / "imgs" / f"img{i:03d}.png"
        Image.new("RGB", (24, 24), tuple(int(v) for v in rng.integers(0, 255, 3))).save(path)
        images.append(
            LabelledImage(
                id=f"img{i:03d}",
                labels=labels,
                width=300,
                height=300,
                origin={"type": "file", "path": str(path), "catalog": str(root / "imgs")},  # an image folder
            )
        )
    cfg = ChainConfig(
        seed=3,
        concepts=concepts,
        pairs=[["metal", "furry"]],
        chains_per_concept=2,
        max_steps=8,
        warmup=3,
        single_step_per_concept=single_steps,
        deductions_per_concept=2,
        min_pool=3,
        memory_size=3,
    )
    build_chain_files(images, root / "chains", cfg, progress=False)
    return root / "chains"


# ------------------------------------------------------------------------------------ our results, lmms-eval's layout
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
    results = evaluate_association(
        chains, "single_step", ["m"], "fixed", tmp_path / "run", backend_options={"answer": "Image1"}, **FAST
    )
    aggregated = json.loads((tmp_path / "run" / "lmms_eval" / "results.json").read_text())
    assert (
        aggregated["results"]["association_single_step"]["acc,none"]
        == results["metrics"]["summary"]["avg_success_ratio"]
    )
    samples = (tmp_path / "run" / "lmms_eval" / "samples_association_single_step.jsonl").read_text().splitlines()
    assert len(samples) == results["metrics"]["summary"]["n"] == 16 and json.loads(samples[0])["filtered_resps"] == [
        "Image1"
    ]


# ------------------------------------------------------------------------------------------ VLMEvalKit export
# What VLMEvalKit does with the files, read from its source (open-compass/VLMEvalKit, vlmeval/dataset/image_base.py,
# vlmeval/inference.py, vlmeval/smp/file.py) and seen in a real run (test_vlmevalkit_runs_the_exported_datasets...):
# ImageBaseDataset.__init__ reads $LMUData/NAME.tsv with pandas.read_csv(sep="\t"), turns a list-valued `image` or
# `image_path` cell into a list (toliststr: eval of the text), and dump_image decodes each base64 image to
# $LMUData/images/NAME/<image_path> unless a readable file is already there. infer_data_job drops `image`, adds
# `prediction` and writes the table as xlsx (PRED_FORMAT: tsv with QUOTE_ALL, or json records); an empty answer
# comes back from xlsx/tsv as NaN. evaluate(eval_file) reads that file with vlmeval.smp.load.
# The default test run cannot import vlmeval (its own environment; see the real run below), so these tests do what
# it does with pandas.
def _to_list(cell) -> list[str]:
    """vlmeval.smp.toliststr of a TSV cell."""
    return [str(x) for x in ast.literal_eval(cell)] if cell.startswith("[") and cell.endswith("]") else [cell]


def _dump_images(line, folder: Path) -> list[str]:
    """ImageBaseDataset.dump_image for a line with a list of images and image_path (keeps existing files)."""
    import base64
    import io

    paths = []
    for data, name in zip(_to_list(line["image"]), _to_list(line["image_path"])):
        path = folder / name
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            Image.open(io.BytesIO(base64.b64decode(data))).save(path)
        paths.append(str(path))
    return paths


def _prediction_round_trip(table, fmt: str, path: Path):
    """What vlmeval.smp.load returns for the prediction file infer_data_job dumps (its dump/load in
    vlmeval/smp/file.py: xlsx through xlsxwriter without formulas, tsv with QUOTE_ALL, json as records)."""
    import csv

    import pandas as pd

    table = table.drop(columns=["image"])
    if fmt == "xlsx":
        with pd.ExcelWriter(
            path, engine="xlsxwriter", engine_kwargs={"options": {"strings_to_formulas": False}}
        ) as writer:
            table.to_excel(writer, index=False)
        return pd.read_excel(path)
    if fmt == "tsv":
        table.to_csv(path, sep="\t", index=False, encoding="utf-8", quoting=csv.QUOTE_ALL)
        return pd.read_csv(path, sep="\t")
    path.write_text(json.dumps(table.to_dict("records"), default=int))
    return json.loads(path.read_text())


class Scripted(ContentHashBackend):
    """Content-hash answers, except an empty answer and a failed request on chosen ids."""

    def __init__(self, model, *, empty=(), failed=()):
        super().__init__(model)
        self.empty, self.failed = set(empty), set(failed)

    def generate(self, requests, settings):
        answers = super().generate(requests, settings)
        return [
            RequestFailure("injected") if r.id in self.failed else "" if r.id in self.empty else a
            for r, a in zip(requests, answers)
        ]


def test_vlmevalkit_module_keeps_every_exported_dataset_and_our_prompt(release, tmp_path):
    export_vlmevalkit(tmp_path / "vlm", data=release, progress=False)
    for name in ("CommonO", "CommonO_Challenge"):  # what VLMEvalKit's LOCALIZE leaves beside a TSV over 1 GB
        (tmp_path / "vlm" / f"{name}_local.tsv").write_text("index\timage_path\n")
    again = write_common_o_split(tmp_path / "other", common_o_rows(3, seed=9), split="challenge")
    export_vlmevalkit(tmp_path / "vlm", data=again, splits=("challenge",), progress=False)  # one split again
    # VLMEvalKit would keep serving the stale localized copy of the re-exported split
    assert (
        not (tmp_path / "vlm" / "CommonO_Challenge_local.tsv").exists()
        and (tmp_path / "vlm" / "CommonO_local.tsv").exists()
    )
    source = (tmp_path / "vlm" / "commonlink_vlmeval.py").read_text()
    module = ast.parse(source)
    names = next(
        ast.literal_eval(n.value) for n in module.body if isinstance(n, ast.Assign) and n.targets[0].id == "DATASETS"
    )
    assert names == ["CommonO", "CommonO_Challenge"]  # the second export did not unregister CommonO
    cls = next(n for n in module.body if isinstance(n, ast.ClassDef))
    assert [b.id for b in cls.bases] == ["ImageBaseDataset"]  # vlmeval.dataset.image_base.ImageBaseDataset
    assert {n.name for n in cls.body if isinstance(n, ast.FunctionDef)} == {"load_data", "build_prompt", "evaluate"}
    attributes = {n.targets[0].id: n.value for n in cls.body if isinstance(n, ast.Assign)}
    # infer_data uses the dataset's prompt over a model's own VQA prompt only with this flag (vlmeval/inference.py)
    assert (
        ast.literal_eval(attributes["force_use_dataset_prompt"]) is True
        and ast.literal_eval(attributes["TYPE"]) == "VQA"
    )
    assert {n.name for n in module.body if isinstance(n, ast.FunctionDef)} == {"register", "main"}
    compile(source, "commonlink_vlmeval.py", "exec")


@pytest.mark.slow
def test_vlmevalkit_tsv_gives_our_requests_and_its_prediction_files_score_like_us(vlm_release, tmp_path):
    release = vlm_release
    import pandas as pd

    chains = _chains(tmp_path / "assoc")
    written = export_vlmevalkit(tmp_path / "vlm", data=release, association=chains, progress=False)
    assert sorted(p.name for p in written) == [
        "CommonO.tsv",
        "CommonO_AssocSingleStep.tsv",
        "CommonO_Challenge.tsv",
        "commonlink_vlmeval.py",
    ]
    for name, split in (("CommonO", "main"), ("CommonO_Challenge", "challenge")):
        table = pd.read_csv(tmp_path / "vlm" / f"{name}.tsv", sep="\t")
        # the message VLMEvalKit builds from each line is the request `commonlink eval commono` sends
        ours = ContentHashBackend()
        requests = [common_o_request(e) for e in open_common_o(release, split)]
        answers = []
        for (_, line), request in zip(table.iterrows(), requests):
            message = vlmeval_messages(line, _dump_images(line, tmp_path / "images" / name))
            assert [m["type"] for m in message] == ["image", "image", "text"]
            parts = vlmeval_message_parts(message)
            assert content_key(parts) == content_key(message_parts(request))
            answers.append(content_answer(parts))
        assert len(set(_to_list(table["image_path"][0]))) == 2 and all(
            n.endswith(".png") for n in _to_list(table["image_path"][0])
        )
        # an empty answer and a failed request, as VLMEvalKit writes them
        table["prediction"] = answers
        table.loc[0, "prediction"] = ""
        table.loc[1, "prediction"] = "Failed to obtain answer via API."
        scripted = Scripted("m", empty={requests[0].id}, failed={requests[1].id})
        expected = evaluate_common_o(release, split, "m", "fixed", None, backend_instance=scripted, **FAST)
        overall = expected["metrics"]["overall"]
        assert overall["parse_failure_rate"] > 0 and (
            split != "main" or overall["accuracy"] > 0
        )  # not a comparison of zeros
        for fmt in ("xlsx", "tsv", "json"):  # xlsx: VLMEvalKit's default PRED_FORMAT
            loaded = _prediction_round_trip(table, fmt, tmp_path / f"{name}.{fmt}")
            records = vlmeval_records(loaded)  # the per-row results file: the empty answer is empty, not "nan"
            assert (
                records[0]["raw_output"] == ""
                and records[1]["failed"]
                and [r["raw_output"] for r in records[2:]] == answers[2:]
            )
            scored = vlmeval_score(loaded)
            assert scored == {
                "acc": overall["accuracy"],
                "hallucination_rate": overall["hallucination_rate"],
                "parse_failure_rate": overall["parse_failure_rate"],
                "n": overall["n"],
                "failed": 1,
            }
    table = pd.read_csv(tmp_path / "vlm" / "CommonO_AssocSingleStep.tsv", sep="\t")
    messages = [
        vlmeval_messages(line, _dump_images(line, tmp_path / "images" / "assoc")) for _, line in table.iterrows()
    ]
    assert [m["type"] for m in messages[0]] == ["text", "image", "text", "image", "text", "image", "text"]
    assert set(table["answer"]) <= {"Image1", "Image2"}
    table["prediction"] = [content_answer(vlmeval_message_parts(m)) for m in messages]
    ours = evaluate_association(
        chains,
        "single_step",
        ["m"],
        "fixed",
        None,
        backend_instances=[ContentHashBackend()],
        settings=AssociationSettings(protocol="strict", deduction=False),  # the export is strict
        **FAST,
    )["metrics"]["summary"]
    assert 0 < ours["avg_success_ratio"] < 1
    for fmt in ("xlsx", "tsv", "json"):
        scored = vlmeval_score(_prediction_round_trip(table, fmt, tmp_path / f"assoc.{fmt}"))
        assert scored == {
            "acc": ours["avg_success_ratio"],
            "unparseable_rate": ours["unparseable_rate"],
            "n": ours["n"],
            "failed": 0,
        }


def test_vlmevalkit_images_are_named_by_content(tmp_path):
    """dump_image keeps any readable file already at a row's image path: names from the row index alone (its
    default) would show a re-exported release the previous export's pictures."""
    import pandas as pd

    first = write_common_o_split(tmp_path / "a", common_o_rows(3, seed=1), split="challenge")
    second = write_common_o_split(tmp_path / "b", common_o_rows(3, seed=2), split="challenge")
    names = []
    for data in (first, second):
        export_vlmevalkit(tmp_path / "vlm", data=data, splits=("challenge",), progress=False)
        table = pd.read_csv(tmp_path / "vlm" / "CommonO_Challenge.tsv", sep="\t")
        names.append([n for cell in table["image_path"] for n in _to_list(cell)])
        for _, line in table.iterrows():  # what VLMEvalKit shows the model is this export's images
            for data_b64, path in zip(_to_list(line["image"]), _dump_images(line, tmp_path / "images")):
                import base64
                import io

                assert np.array_equal(
                    np.asarray(Image.open(path)), np.asarray(Image.open(io.BytesIO(base64.b64decode(data_b64))))
                )
    assert not set(names[0]) & set(names[1])


# ------------------------------------------------------------------------------------------ the real VLMEvalKit
VLMEVAL_DRIVER = """
import itertools, json, os, re, sys
from functools import partial
from pathlib import Path

export_dir, llava_dir, work = sys.argv[1:4]
sys.path.insert(0, export_dir)
import commonlink_vlmeval
from PIL import Image
from vlmeval.config import supported_VLM
from vlmeval.smp import load
from vlmeval.vlm.base import BaseModel

from tests.fixtures.harness_models import content_answer, content_key, vlmeval_message_parts

SENT = {}  # model -> {content key of the message VLMEvalKit sent: answer}


class ContentHashModel(BaseModel):
    INTERLEAVE = True

    def generate_inner(self, message, dataset=None):
        parts = vlmeval_message_parts(message)
        answer = SENT.setdefault("content_hash", {})[content_key(parts)] = content_answer(parts)
        return answer


def answer_options(text):
    if "Options: [Image1, Image2]" in text:
        return ["Image1", "Image2"]
    letters = re.findall(r"(?:^|, |: )([A-Z])\\. ", text)
    return [f"Answer: {x}" for x in letters] + [f"Answer: {x}, {y}" for x, y in itertools.combinations(letters, 2)]


class TinyLlava(BaseModel):
    # A local HF LLaVA on CPU, called as VLMEvalKit's own LLaVA_Next.generate_inner calls its model (which needs
    # CUDA). Its random weights would write unreadable text; decoding is constrained to answers in the asked
    # format, so the scores compared are not all zero (the model still picks the answer).
    INTERLEAVE = True

    def __init__(self, model_path):
        super().__init__()
        from transformers import AutoProcessor, LlavaForConditionalGeneration
        self.processor = AutoProcessor.from_pretrained(model_path)
        self.model = LlavaForConditionalGeneration.from_pretrained(model_path).eval()

    def generate_inner(self, message, dataset=None):
        content, images = [], []
        for m in message:
            if m["type"] == "text":
                content.append({"type": "text", "text": m["value"]})
            else:
                content.append({"type": "image"})
                images.append(Image.open(m["value"]).convert("RGB"))
        prompt = self.processor.apply_chat_template([{"role": "user", "content": content}], add_generation_prompt=True)
        inputs = self.processor(text=prompt, images=images, return_tensors="pt")
        tok, start = self.processor.tokenizer, inputs["input_ids"].shape[1]
        text = "".join(m["value"] for m in message if m["type"] == "text")
        sequences = [tok(o, add_special_tokens=False).input_ids + [tok.eos_token_id] for o in answer_options(text)]

        def allowed(batch, ids):
            done = ids[start:].tolist()
            following = {s[len(done)] for s in sequences if len(s) > len(done) and s[: len(done)] == done}
            return sorted(following) or [tok.eos_token_id]

        output = self.model.generate(**inputs, do_sample=False, max_new_tokens=16, prefix_allowed_tokens_fn=allowed)
        answer = self.processor.decode(output[0][start:], skip_special_tokens=True)
        SENT.setdefault("tiny_llava", {})[content_key(vlmeval_message_parts(message))] = answer
        return answer


supported_VLM["content_hash"] = ContentHashModel
supported_VLM["tiny_llava"] = partial(TinyLlava, model_path=llava_dir)
all_data = ["CommonO", "CommonO_Challenge", "CommonO_AssocSingleStep"]
commonlink_vlmeval.main(["--data", *all_data, "--model", "content_hash", "tiny_llava", "--work-dir", f"{work}/xlsx"])
os.environ["PRED_FORMAT"] = "json"
commonlink_vlmeval.main(["--data", *all_data, "--model", "content_hash", "--work-dir", f"{work}/json"])
del os.environ["PRED_FORMAT"]
config = {
    "model": {"content_hash": {}},
    "data": {"CommonO_Challenge": {"class": "CommonLinkDataset", "dataset": "CommonO_Challenge"}},
}
Path(work, "config.json").write_text(json.dumps(config))
commonlink_vlmeval.main(["--config", f"{work}/config.json", "--work-dir", f"{work}/config"])
# A TSV over 1 GB (the real Common-O main split) is first rewritten by VLMEvalKit's LOCALIZE into NAME_local.tsv
# with the images as files under their image_path names; take that path at this size.
import vlmeval.dataset.image_base as image_base
image_base.file_size = lambda f, unit="GB": 2
localized_data = ["CommonO_Challenge", "CommonO_AssocSingleStep"]
commonlink_vlmeval.main(["--data", *localized_data, "--model", "content_hash", "--work-dir", f"{work}/localized"])

out = {"sent": SENT, "status": {}, "predictions": {}, "files": {}}
for fmt in ("xlsx", "json", "config", "localized"):
    for status_file in Path(work, fmt).glob("*/T*/status.json"):
        model = status_file.parent.parent.name
        status = json.loads(status_file.read_text())
        out["status"][f"{fmt}/{model}"] = status["datasets"]
        out["files"][f"{fmt}/{model}"] = sorted(p.name for p in status_file.parent.iterdir())
        for name, entry in status["datasets"].items():
            table = load(str(status_file.parent / entry["prediction_file"]))
            rows = table if isinstance(table, list) else table.to_dict("records")
            # a missing prediction reads back as NaN (not equal to itself) from a table
            out["predictions"][f"{fmt}/{model}/{name}"] = {
                str(r["index"]): (None if r["prediction"] != r["prediction"] else str(r["prediction"])) for r in rows
            }
print("RESULT " + json.dumps(out, default=str))
"""


@pytest.mark.slow
def test_vlmevalkit_runs_the_exported_datasets_and_scores_like_us(vlm_release, tmp_path):
    """VLMEvalKit's own run.py (through the exported file's launcher) with two models registered the way its docs
    say: a content-hash model (its answers show the messages equal our requests; its scores equal ours) and a
    tiny random LLaVA (its answers, rescored by commonlink, give VLMEvalKit's scores)."""
    import subprocess

    release = vlm_release

    python = os.environ.get("COMMONLINK_VLMEVAL_PYTHON")
    if not python:
        pytest.skip(
            "VLMEvalKit not installed: it is not on PyPI; install it from a git checkout into its own environment "
            "(docs/eval.md) and set COMMONLINK_VLMEVAL_PYTHON to that environment's python"
        )
    repo = str(Path(__file__).resolve().parents[1])
    env = {k: v for k, v in os.environ.items() if k not in ("LMUData", "PRED_FORMAT", "EVAL_FORMAT")}
    env.update(PYTHONPATH=repo, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    probe = subprocess.run(
        [python, "-c", "import vlmeval.dataset, commonlink.eval.export.harnesses"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert probe.returncode == 0, (
        f"COMMONLINK_VLMEVAL_PYTHON={python} cannot import vlmeval and commonlink: {probe.stderr[-2000:]}"
    )

    chains = _chains(tmp_path / "assoc")
    export = tmp_path / "export"
    export_vlmevalkit(export, data=release, association=chains, progress=False)
    llava = build_tiny_llava(tmp_path / "llava")
    driver = tmp_path / "vlmeval_driver.py"
    driver.write_text(VLMEVAL_DRIVER)
    done = subprocess.run(
        [python, str(driver), str(export), str(llava), str(tmp_path / "work")],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=900,
    )
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")), None)
    assert done.returncode == 0 and line, (done.stdout[-2000:], done.stderr[-4000:])
    out = json.loads(line.removeprefix("RESULT "))
    assert (export / "images" / "CommonO").is_dir()  # LMUData defaulted to the exported folder

    # every run (--data with xlsx and json prediction files, --config naming the class) evaluated without error
    assert sorted(out["status"]) == [
        "config/content_hash",
        "json/content_hash",
        "localized/content_hash",
        "xlsx/content_hash",
        "xlsx/tiny_llava",
    ]
    expected = {"config": {"CommonO_Challenge"}, "localized": {"CommonO_Challenge", "CommonO_AssocSingleStep"}}
    for key, datasets in out["status"].items():
        fmt, model = key.split("/")
        assert set(datasets) == expected.get(fmt, {"CommonO", "CommonO_Challenge", "CommonO_AssocSingleStep"}), key
        for name, entry in datasets.items():
            assert entry["status"] == "done" and not entry.get("error_message") and entry["primary_metric"] == "acc", (
                key,
                name,
                entry,
            )
        assert {f"{model}_{name}_acc.csv" for name in datasets} <= set(out["files"][key])  # VLMEvalKit's score files
        assert {f"{model}_{name}_results.{'json' if fmt == 'json' else 'xlsx'}" for name in datasets} <= set(
            out["files"][key]
        )
    assert (
        out["predictions"]["config/content_hash/CommonO_Challenge"]
        == out["predictions"]["xlsx/content_hash/CommonO_Challenge"]
    )
    # the localized copies (no base64 left, images found by their image_path names) give the same answers
    import pandas as pd

    localized = pd.read_csv(export / "CommonO_Challenge_local.tsv", sep="\t")
    assert "image" not in localized.columns and len(localized) == 10
    assert localized["image_path"][0] == pd.read_csv(export / "CommonO_Challenge.tsv", sep="\t")["image_path"][0]
    for name in ("CommonO_Challenge", "CommonO_AssocSingleStep"):
        assert out["predictions"][f"localized/content_hash/{name}"] == out["predictions"][f"xlsx/content_hash/{name}"]
    export_vlmevalkit(export, data=release, splits=("challenge",), progress=False)  # re-export: the stale copy goes
    assert (
        not (export / "CommonO_Challenge_local.tsv").exists()
        and (export / "CommonO_AssocSingleStep_local.tsv").exists()
    )

    hashed = ContentHashBackend()
    for name, split in (("CommonO", "main"), ("CommonO_Challenge", "challenge")):
        ours = evaluate_common_o(
            release, split, "m", "fixed", tmp_path / f"ours-{split}", backend_instance=hashed, **FAST
        )
        overall = ours["metrics"]["overall"]
        predictions = [
            json.loads(x) for x in (tmp_path / f"ours-{split}" / "predictions.jsonl").read_text().splitlines()
        ]
        for fmt in ("xlsx", "json"):
            # same message -> same answer: VLMEvalKit sent every row exactly our request
            assert out["predictions"][f"{fmt}/content_hash/{name}"] == {
                str(p["row_index"]): p["raw_output"] for p in predictions
            }
            metrics = out["status"][f"{fmt}/content_hash"][name]["metrics"]
            assert metrics["acc"] == pytest.approx(overall["accuracy"]) and metrics["n"] == overall["n"]
            assert metrics["hallucination_rate"] == pytest.approx(overall["hallucination_rate"])
            assert metrics["parse_failure_rate"] == pytest.approx(overall["parse_failure_rate"])
        # the tiny LLaVA's answers in VLMEvalKit, rescored by `commonlink eval score`
        llava_answers = out["predictions"][f"xlsx/tiny_llava/{name}"]
        assert len(llava_answers) == overall["n"]
        lines = [
            json.dumps({"id": f"{split}-{i}", "raw_output": llava_answers[str(i)] or ""})
            for i in range(len(llava_answers))
        ]
        (tmp_path / f"llava-{split}.jsonl").write_text("\n".join(lines) + "\n")
        rescored = score_predictions(tmp_path / f"llava-{split}.jsonl", release, split, n_boot=20)["metrics"]["overall"]
        metrics = out["status"]["xlsx/tiny_llava"][name]["metrics"]
        assert metrics["acc"] == pytest.approx(rescored["accuracy"]) and metrics["hallucination_rate"] == pytest.approx(
            rescored["hallucination_rate"]
        )
        assert (
            metrics["parse_failure_rate"] == pytest.approx(rescored["parse_failure_rate"])
            and rescored["parse_failure_rate"] == 0
        )

    single_step = {"settings": AssociationSettings(protocol="strict", deduction=False), **FAST}  # as exported
    ours = evaluate_association(chains, "single_step", ["m"], "fixed", None, backend_instances=[hashed], **single_step)[
        "metrics"
    ]["summary"]
    for fmt in ("xlsx", "json"):
        metrics = out["status"][f"{fmt}/content_hash"]["CommonO_AssocSingleStep"]["metrics"]
        assert metrics["acc"] == pytest.approx(ours["avg_success_ratio"]) and metrics["n"] == ours["n"] == 16
    # the tiny LLaVA's association answers replayed into `commonlink eval association` (every request found)
    replayed = evaluate_association(
        chains,
        "single_step",
        ["m"],
        "fixed",
        None,
        backend_instances=[ReplayBackend(out["sent"]["tiny_llava"])],
        **single_step,
    )["metrics"]["summary"]
    metrics = out["status"]["xlsx/tiny_llava"]["CommonO_AssocSingleStep"]["metrics"]
    assert metrics["acc"] == pytest.approx(replayed["avg_success_ratio"]) and metrics[
        "unparseable_rate"
    ] == pytest.approx(replayed["unparseable_rate"])
    assert 0 < replayed["avg_success_ratio"] < 1 and replayed["n"] == 16


# ------------------------------------------------------------------------------------------ the real lmms-eval
LMMS_DRIVER = """
import json, sys
from lmms_eval.evaluator import simple_evaluate
from lmms_eval.tasks import TaskManager
include, model, model_args, tasks = sys.argv[1:5]
manager = TaskManager(include_path=include, include_defaults=False)
out = simple_evaluate(
    model=model, model_args=model_args, tasks=tasks.split(","), task_manager=manager, device="cpu", batch_size=1,
    log_samples=True, gen_kwargs="max_new_tokens=6" if model != "dummy" else None, bootstrap_iters=10,
)
samples = {t: [{"doc_id": s["doc_id"], "resps": s["resps"]} for s in v] for t, v in out["samples"].items()}
print("RESULT " + json.dumps({"tasks": sorted(manager.all_tasks), "results": out["results"], "samples": samples},
                             default=str))
"""


@pytest.fixture()
def run_lmms_eval(tmp_path):
    """Runs lmms-eval's simple_evaluate in a subprocess with the harness folder first on the path (its pinned
    filelock must be imported before any other copy)."""
    import subprocess

    # scripts/setup.sh installs the harness into .harness-site; COMMONLINK_HARNESS_SITE points elsewhere
    site = os.environ.get("COMMONLINK_HARNESS_SITE") or str(Path(__file__).resolve().parents[1] / ".harness-site")
    # The harness's own environment (scripts/harness_site.sh); a folder of an older --no-deps install also works.
    python = Path(site) / "bin" / "python"
    if not python.is_file() and not (Path(site) / "lmms_eval").is_dir():
        pytest.skip(
            "lmms-eval not installed (scripts/setup.sh puts it in .harness-site; or scripts/harness_site.sh DIR, "
            "then COMMONLINK_HARNESS_SITE=DIR)"
        )
    driver = tmp_path / "lmms_driver.py"
    driver.write_text(LMMS_DRIVER)
    repo = str(Path(__file__).resolve().parents[1])

    def run(include: Path, model: str, model_args: str, tasks: str) -> dict:
        env = dict(
            os.environ, PYTHONPATH=os.pathsep.join([site, repo]), HF_DATASETS_CACHE=str(tmp_path / "hf-datasets")
        )
        done = subprocess.run(
            [str(python) if python.is_file() else sys.executable, str(driver), str(include), model, model_args, tasks],
            capture_output=True,
            text=True,
            env=env,
            check=False,
            timeout=600,
        )
        line = next((ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")), None)
        assert done.returncode == 0 and line, done.stderr[-3000:]
        return json.loads(line.removeprefix("RESULT "))

    return run


@pytest.mark.slow
def test_lmms_eval_runs_the_exported_tasks_and_scores_like_us(run_lmms_eval, release, tmp_path):
    chains = _chains(tmp_path / "assoc")
    export_lmms_eval(tmp_path / "export", data=release, association=chains, progress=False)
    include = tmp_path / "export" / "commonlink_tasks"

    # lmms-eval's dummy model answers "Answer: A" everywhere; our run with the same answers must score the same
    out = run_lmms_eval(include, "dummy", "response=Answer: A", "common_o,common_o_challenge")
    assert {"common_o", "common_o_challenge", "association_single_step"} <= set(out["tasks"])
    for task, split in (("common_o", "main"), ("common_o_challenge", "challenge")):
        ours = evaluate_common_o(release, split, "m", "fixed", None, **FAST)["metrics"]["overall"]
        assert out["results"][task]["acc,none"] == pytest.approx(ours["accuracy"])
        assert out["results"][task]["hallucination_rate,none"] == pytest.approx(ours["hallucination_rate"])
    out = run_lmms_eval(include, "dummy", "response=Image2", "association_single_step")
    ours = evaluate_association(
        chains, "single_step", ["m"], "fixed", None, backend_options={"answer": "Image2"}, **FAST
    )
    assert out["results"]["association_single_step"]["acc,none"] == pytest.approx(
        ours["metrics"]["summary"]["avg_success_ratio"]
    )

    # a tiny real model through lmms-eval's own llava_hf adapter: its answers, rescored by commonlink, give its score
    model = build_tiny_llava(tmp_path / "llava")
    out = run_lmms_eval(include, "llava_hf", f"pretrained={model},device_map=cpu", "common_o")
    samples = out["samples"]["common_o"]
    assert len(samples) == 12 and all(s["resps"][0][0] for s in samples)
    from commonlink.kinds.common_o.task import score_predictions

    predictions = tmp_path / "lmms_predictions.jsonl"
    rows = {int(s["doc_id"]): s["resps"][0][0] for s in samples}
    predictions.write_text("".join(json.dumps({"id": f"main-{i}", "raw_output": rows[i]}) + "\n" for i in sorted(rows)))
    rescored = score_predictions(predictions, release, "main", n_boot=20)
    assert out["results"]["common_o"]["acc,none"] == pytest.approx(rescored["metrics"]["overall"]["accuracy"])
    assert out["results"]["common_o"]["hallucination_rate,none"] == pytest.approx(
        rescored["metrics"]["overall"]["hallucination_rate"]
    )


def test_lmms_eval_export_files(release, tmp_path):
    written = export_lmms_eval(tmp_path / "export", data=release, progress=False)
    names = sorted(p.name for p in written)
    assert names == sorted(
        [
            "_common_o_template_yaml",
            "common_o.yaml",
            "common_o_challenge.yaml",
            "common_o_challenge.parquet",
            "common_o_main.parquet",
            "utils.py",
        ]
    )
    template = (tmp_path / "export" / "commonlink_tasks" / "_common_o_template_yaml").read_text()
    assert (
        "dataset_path: parquet" in template and "process_results: !function utils.common_o_process_results" in template
    )
    hub = export_lmms_eval(tmp_path / "hub", data="facebook/Common-O", revision="v1.0.0", progress=False)
    text = (tmp_path / "hub" / "commonlink_tasks" / "_common_o_template_yaml").read_text()
    assert (
        "dataset_path: facebook/Common-O" in text
        and "revision: v1.0.0" in text
        and not any(p.suffix == ".parquet" for p in hub)
    )
    with (tmp_path / "export" / "commonlink_tasks" / "common_o.yaml").open() as handle:
        assert "task: common_o\ntest_split: main\ninclude: _common_o_template_yaml" in handle.read()


def test_lmms_eval_export_copies_a_sharded_split_as_stored(tmp_path):
    """A local release's shards become one parquet file per split, copied a row group at a time (a paper-sized
    split holds gigabytes of images): every row as stored, in order, read back by `datasets` with images."""
    import datasets

    from commonlink.kinds.common_o.loader import open_common_o

    data = write_common_o_split(tmp_path / "data", common_o_rows(9, seed=3), split="main", shards=3)
    export_lmms_eval(tmp_path / "export", data=data, splits=("main",), progress=False)
    folder = tmp_path / "export" / "commonlink_tasks"
    assert not [p for p in folder.iterdir() if p.name.startswith(".")]  # no temporary file left behind
    exported = datasets.load_dataset("parquet", data_files=str(folder / "common_o_main.parquet"), split="train")
    source = open_common_o(data, "main")
    assert len(exported) == len(source) == 9
    for i, row in enumerate(exported):
        stored = source.raw_row(i)
        text = [k for k in stored if k not in ("image_1", "image_2")]
        assert {k: row[k] for k in text} == {k: stored[k] for k in text} and set(row) == set(stored)
        assert row["image_1"].tobytes() == source.get(i).image_1.tobytes()  # an image, the same pixels


def test_lmms_eval_export_of_chains_without_single_step_tasks_says_so_and_writes_no_parquet(release, tmp_path):
    chains = _chains(tmp_path / "assoc", single_steps=0)
    with pytest.raises(InputError, match="single_step config has no tasks") as caught:
        export_lmms_eval(tmp_path / "export", data=release, association=chains, progress=False)
    assert "commonlink chains" in caught.value.fix
    assert not list((tmp_path / "export" / "commonlink_tasks").glob("*association*"))


@pytest.mark.slow
def test_the_documented_lmms_eval_command_runs_to_the_end(release, tmp_path):
    """docs/eval.md's command, as a user runs it: the harness environment's own `lmms-eval` CLI on the exported
    tasks. It exits 0 and writes its results (with a --no-deps install it wrote them, then died importing
    pytablewriter for its table; and lmms-eval exits 0 even when a run fails, so the files are checked too)."""
    import subprocess

    site = Path(os.environ.get("COMMONLINK_HARNESS_SITE") or Path(__file__).resolve().parents[1] / ".harness-site")
    if not (site / "bin" / "lmms-eval").is_file():
        pytest.skip("no lmms-eval environment (scripts/setup.sh makes .harness-site; or scripts/harness_site.sh DIR)")
    export_lmms_eval(tmp_path / "harness", data=release, progress=False)
    model = build_tiny_llava(tmp_path / "llava")
    env = dict(
        os.environ,
        HF_DATASETS_CACHE=str(tmp_path / "hf-datasets"),
        PYTHONPATH=os.pathsep.join([str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")]),
    )
    done = subprocess.run(
        [
            str(site / "bin" / "lmms-eval"),
            "--include_path",
            str(tmp_path / "harness" / "commonlink_tasks"),
            "--tasks",
            "common_o",
            "--model",
            "llava_hf",
            "--model_args",
            f"pretrained={model},device_map=cpu",
            "--device",
            "cpu",
            "--output_path",
            str(tmp_path / "lmms-runs"),
            "--log_samples",
        ],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = list((tmp_path / "lmms-runs").rglob("*_results.json"))
    assert len(results) == 1 and "common_o" in json.loads(results[0].read_text())["results"], done.stderr[-3000:]
    assert "|common_o" in done.stdout  # the results table, which needs pytablewriter
