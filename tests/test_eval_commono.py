"""Common-O eval end to end: tiny random LLaVA through the real from_pretrained path, published-schema parquet,
batch invariance, resume after a kill, out-of-memory halving, bad rows, concat images, CLI, similarity."""

from __future__ import annotations

import dataclasses
import json
import threading

import pytest
import torch
from typer.testing import CliRunner

from commonlink.cli import app
from commonlink.constants import NO_COMMON_OBJECTS
from commonlink.errors import BackendError, InputError, SchemaError
from commonlink.eval.backends import GenerationSettings, load_backend
from commonlink.eval.backends.baselines import BaselineBackend
from commonlink.kinds.common_o.format import CONCAT_IMAGE_PROMPT, common_o_question, format_choices
from commonlink.kinds.common_o.loader import open_common_o
from commonlink.kinds.common_o.perception import evaluate_perception
from commonlink.kinds.common_o.similarity import char_ngram_embedder, object_similarity_analysis
from commonlink.kinds.common_o.task import common_o_request, evaluate_common_o, score_predictions
from tests.fixtures.tiny_models import build_tiny_idefics3, common_o_rows, write_common_o_split

SETTINGS = GenerationSettings(max_new_tokens=6, max_pixels=64 * 48)
FAST = dict(n_boot=50, progress=False, allow_unparseable=True)  # the tiny models answer no letters


@pytest.fixture(scope="module", autouse=True)
def hub_offline():
    """Hub ids used here ("org/some-vlm") must not be looked up on the internet when fingerprinting them."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
        yield


@pytest.fixture(scope="session")
def tiny_backend(tiny_llava):
    backend = load_backend("transformers", str(tiny_llava))
    yield backend
    backend.close()


@pytest.fixture(scope="session")
def data_dir(common_o_split):
    return common_o_split(8, seed=1, shards=2)


@pytest.fixture(scope="session")
def reference(tiny_backend, data_dir, tmp_path_factory):
    """The uninterrupted run at batch size 1 that the other runs must reproduce."""
    out = tmp_path_factory.mktemp("reference")
    results = evaluate_common_o(
        data_dir, "main", backend_instance=tiny_backend, out_dir=out, settings=SETTINGS, batch_size=1, **FAST
    )
    return results, out


class Wrapped:
    """A real backend behind a hook that can fail a call (kill, OOM) and counts batch sizes."""

    def __init__(self, inner, fail=None):
        self.inner, self.info, self.fail, self.calls = inner, inner.info, fail, []

    @property
    def generate_seconds(self):
        return self.inner.generate_seconds

    def generate(self, requests, settings):
        self.calls.append(len(requests))
        if self.fail:
            self.fail(len(self.calls), requests)
        return self.inner.generate(requests, settings)

    def close(self):
        pass


def _outputs(out_dir):
    return [
        (r["id"], r["raw_output"]) for r in map(json.loads, (out_dir / "predictions.jsonl").read_text().splitlines())
    ]


@pytest.mark.slow
def test_tiny_model_loads_through_from_pretrained(tiny_backend, tiny_llava):
    info = tiny_backend.info
    assert info.backend == "transformers" and info.details["model_class"] == "LlavaForConditionalGeneration"
    assert info.details["dtype"] == "float32" and info.details["device"] == "cpu"  # CPU: fp32
    assert info.fingerprint.startswith("sha256:") and info.default_batch_size == 1
    assert tiny_backend.tokenizer.padding_side == "left"


@pytest.mark.slow
def test_a_request_the_processor_rejects_fails_alone(tiny_backend):
    from PIL import Image

    from commonlink.eval.backends import GenerationRequest, RequestFailure

    good = GenerationRequest("a", [Image.new("RGB", (40, 30)), Image.new("RGB", (40, 30))], "Which objects?")
    bad = GenerationRequest(
        "b", [Image.new("RGB", (40, 30))], "a stray <image> token in the text"
    )  # 2 image tokens, 1 image
    out = tiny_backend.generate([good, bad, good], SETTINGS)
    assert isinstance(out[1], RequestFailure) and "image" in out[1].reason
    assert out[0] == out[2] == tiny_backend.generate([good], SETTINGS)[0]


@pytest.mark.slow
def test_sampled_outputs_do_not_depend_on_the_batch(tiny_backend):
    """With --temperature > 0 and a seed, a row's output must not depend on which rows share its batch
    (else a resumed or re-batched run differs from an uninterrupted one)."""
    from PIL import Image

    from commonlink.eval.backends import GenerationRequest

    sampled = GenerationSettings(max_new_tokens=8, temperature=1.5, seed=7, max_pixels=64 * 48)
    requests = [
        GenerationRequest(
            f"r{k}", [Image.new("RGB", (40, 30), (40 * k, 90, 200)), Image.new("RGB", (40, 30))], f"Which objects? {k}"
        )
        for k in range(3)
    ]
    alone = [tiny_backend.generate([r], sampled)[0] for r in requests]
    assert tiny_backend.generate(requests, sampled) == alone
    assert tiny_backend.generate(requests[1:], sampled) == alone[1:]


@pytest.mark.slow
def test_batch_size_does_not_change_predictions(tiny_backend, data_dir, reference, tmp_path):
    one, one_dir = reference
    four = evaluate_common_o(
        data_dir,
        "main",
        backend_instance=tiny_backend,
        out_dir=tmp_path / "bs4",
        settings=SETTINGS,
        batch_size=4,
        **FAST,
    )
    assert _outputs(one_dir) == _outputs(tmp_path / "bs4")
    assert len(_outputs(one_dir)) == 8 and all(text for _, text in _outputs(one_dir))
    assert one["metrics"] == four["metrics"]
    # results.json carries what is needed to reproduce and compare the run
    saved = json.loads((one_dir / "results.json").read_text())
    for key in ("metrics", "model", "backend", "prompt", "generation", "toolkit_version", "model_fingerprint"):
        assert key in saved
    assert saved["dataset"]["fingerprint"] == open_common_o(data_dir, "main").fingerprint
    assert saved["generation"]["max_new_tokens"] == 6 and saved["prompt"]["concat_images"] is False
    line = json.loads((one_dir / "predictions.jsonl").read_text().splitlines()[0])
    assert {"id", "raw_output", "parsed_letters", "correct", "hallucinated", "parse_ok"} <= set(line)
    assert (one_dir / "results.md").read_text().startswith("| Run | Model |")


@pytest.mark.slow
def test_a_second_architecture_idefics3(data_dir, tmp_path):
    backend = load_backend("transformers", str(build_tiny_idefics3(tmp_path / "idefics3")))
    assert backend.info.details["model_class"] == "Idefics3ForConditionalGeneration"
    one = evaluate_common_o(
        data_dir,
        "main",
        backend_instance=backend,
        out_dir=tmp_path / "bs1",
        settings=SETTINGS,
        batch_size=1,
        limit=4,
        **FAST,
    )
    evaluate_common_o(
        data_dir,
        "main",
        backend_instance=backend,
        out_dir=tmp_path / "bs4",
        settings=SETTINGS,
        batch_size=4,
        limit=4,
        **FAST,
    )
    assert one["dataset"]["rows_scored"] == 4 and _outputs(tmp_path / "bs1") == _outputs(tmp_path / "bs4")


@pytest.mark.slow
def test_killed_run_resumes_and_matches(tiny_backend, data_dir, reference, tmp_path, monkeypatch):
    full, full_dir = reference

    def kill_on_third_call(n, requests):
        if n == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        evaluate_common_o(
            data_dir,
            "main",
            backend_instance=Wrapped(tiny_backend, kill_on_third_call),
            out_dir=tmp_path / "run",
            settings=SETTINGS,
            batch_size=2,
            **FAST,
        )
    assert not (tmp_path / "run" / "results.json").exists()
    assert not [
        t for t in threading.enumerate() if t.name == "commonlink-eval-prefetch"
    ]  # the row prefetcher stopped too
    assert len((tmp_path / "run" / "prediction-cache.jsonl").read_text().splitlines()) == 4  # two batches were saved
    resumed_backend = Wrapped(tiny_backend)
    resumed = evaluate_common_o(
        data_dir,
        "main",
        backend_instance=resumed_backend,
        out_dir=tmp_path / "run",
        settings=SETTINGS,
        batch_size=2,
        **FAST,
    )
    assert resumed_backend.calls == [2, 2]  # only the 4 unfinished rows went to the model
    decoded = []
    original = type(open_common_o(data_dir, "main"))._open_image
    monkeypatch.setattr(
        type(open_common_o(data_dir, "main")),
        "_open_image",
        lambda self, row, i, f: decoded.append(i) or original(self, row, i, f),
    )
    complete = evaluate_common_o(
        data_dir,
        "main",
        backend_instance=Wrapped(tiny_backend),
        out_dir=tmp_path / "run",
        settings=SETTINGS,
        batch_size=2,
        **FAST,
    )
    assert decoded == [] and complete["metrics"] == full["metrics"]  # all cached: no image decoded at all
    monkeypatch.undo()
    assert resumed["timing"]["from_cache"] == 4 and resumed["timing"]["generated"] == 4
    assert resumed["metrics"] == full["metrics"]
    assert _outputs(tmp_path / "run") == _outputs(full_dir)
    # a changed generation setting is a different run: refused in the same folder, nothing reused with overwrite
    with pytest.raises(InputError, match="another run"):
        evaluate_common_o(
            data_dir,
            "main",
            backend_instance=tiny_backend,
            out_dir=tmp_path / "run",
            settings=GenerationSettings(max_new_tokens=5, max_pixels=64 * 48),
            batch_size=4,
            limit=1,
            **FAST,
        )
    again = evaluate_common_o(
        data_dir,
        "main",
        backend_instance=tiny_backend,
        out_dir=tmp_path / "run",
        settings=GenerationSettings(max_new_tokens=5, max_pixels=64 * 48),
        batch_size=4,
        limit=1,
        overwrite=True,
        **FAST,
    )
    assert again["timing"]["from_cache"] == 0


@pytest.mark.slow
def test_backend_options_that_change_outputs_are_part_of_the_cache_key(tiny_llava, data_dir, tmp_path):
    """A rerun in the same folder with another --dtype (or engine args, image format) must not reuse answers
    generated under the old one."""
    from commonlink.eval.backends import LazyBackend

    out = tmp_path / "run"
    first = evaluate_common_o(
        data_dir, "main", str(tiny_llava), "transformers", out, settings=SETTINGS, limit=1, **FAST
    )
    assert first["timing"]["generated"] == 1
    same = evaluate_common_o(data_dir, "main", str(tiny_llava), "transformers", out, settings=SETTINGS, limit=1, **FAST)
    assert same["timing"]["from_cache"] == 1
    bf16 = evaluate_common_o(
        data_dir,
        "main",
        str(tiny_llava),
        "transformers",
        out,
        settings=SETTINGS,
        limit=1,
        backend_options={"dtype": "bfloat16"},
        overwrite=True,
        **FAST,
    )  # another run: same folder only with overwrite
    assert bf16["timing"]["from_cache"] == 0 and bf16["timing"]["generated"] == 1
    assert bf16["run_key"] != first["run_key"]
    # the same rule for the other backends, known before anything is loaded
    assert (
        LazyBackend("vllm", str(tiny_llava), quantization="fp8").info.output_options
        != LazyBackend("vllm", str(tiny_llava)).info.output_options
    )
    assert (
        LazyBackend("openai", "m", image_format="jpeg").info.output_options
        != LazyBackend("openai", "m").info.output_options
    )


def test_rescoring_records_the_bootstrap_it_used(data_dir, tmp_path):
    """results.json of `eval score` must name the seed and resample count its standard errors came from."""
    run = evaluate_common_o(
        data_dir, "main", "random", "transformers", tmp_path / "run", seed=3, n_boot=40, progress=False
    )
    rescored = score_predictions(
        tmp_path / "run" / "predictions.jsonl", seed=0, n_boot=60, out_dir=tmp_path / "rescored"
    )
    saved = json.loads((tmp_path / "rescored" / "results.json").read_text())
    assert saved["seed"] == rescored["seed"] == 0 and saved["bootstrap_resamples"] == 60
    same = score_predictions(tmp_path / "run" / "predictions.jsonl", seed=3, n_boot=40)
    assert same["metrics"] == run["metrics"] and same["seed"] == 3 and same["bootstrap_resamples"] == 40


@pytest.mark.slow
def test_a_hub_model_not_yet_downloaded_runs_and_resumes(tiny_llava, data_dir, tmp_path):
    """First run of a Hub model id with an empty HF cache (the usual case on a fresh GPU machine): the commit must be
    known before loading, or the download changes the model fingerprint under the run. Real clients, local Hub."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from tests.fixtures.hub_server import HubServer

    root = Path(__file__).resolve().parents[1]
    with HubServer(tmp_path / "hub-store", tokens={"hf_writer": "alice"}, orgs={"alice": ["org"]}) as hub:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_"))}
        env.update(
            hub.client_env(token="hf_writer"),
            HF_HOME=str(tmp_path / "hf-home"),
            COMMONLINK_HOME=str(tmp_path / "cl-home"),
            PYTHONPATH=str(root),
            COLUMNS="200",
        )
        upload = (
            f"from huggingface_hub import HfApi; api = HfApi(); api.create_repo('org/tiny-vlm'); "
            f"api.upload_folder(repo_id='org/tiny-vlm', folder_path={str(tiny_llava)!r}); "
            "print(api.model_info('org/tiny-vlm').sha)"
        )
        done = subprocess.run([sys.executable, "-c", upload], env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        commit = done.stdout.split()[-1]
        args = [
            sys.executable,
            "-m",
            "commonlink.cli",
            "eval",
            "commono",
            "--model",
            "org/tiny-vlm",
            "--data",
            str(data_dir),
            "--out",
            str(tmp_path / "run"),
            "--limit",
            "2",
            "--max-new-tokens",
            "4",
            "--quiet",
            "--allow-unparseable",  # the tiny model answers no letters
            "--bootstrap",
            "10",
        ]
        first = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
        assert first.returncode == 0, first.stderr[-3000:]
        assert (
            json.loads((tmp_path / "run" / "results.json").read_text())["model_fingerprint"] == f"org/tiny-vlm@{commit}"
        )
        again = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "0 generated, 2 from cache" in again.stdout  # the rerun found the first run's answers


@pytest.mark.slow
def test_model_folder_changed_while_loading_is_a_clear_error(tiny_llava, data_dir, tmp_path):
    import shutil

    from commonlink.eval.backends import LazyBackend

    model = shutil.copytree(tiny_llava, tmp_path / "model")
    lazy = LazyBackend("transformers", str(model))
    (model / "generation_config.json").write_text(
        (model / "generation_config.json").read_text().replace("}", ', "max_length": 77}', 1)
    )
    with pytest.raises(BackendError) as err:
        evaluate_common_o(
            data_dir, "main", backend_instance=lazy, out_dir=tmp_path / "run", settings=SETTINGS, limit=1, **FAST
        )
    assert "changed" in err.value.problem and "Rerun" in err.value.fix


def test_compare_on_a_folder_of_unmerged_shards_says_how_to_merge(data_dir, tmp_path):
    evaluate_common_o(data_dir, "main", "random", "transformers", tmp_path / "run", shard=(0, 2), **FAST)
    result = CliRunner().invoke(app, ["eval", "compare", str(tmp_path / "run")])
    assert result.exit_code == 1
    assert "shard" in result.output and "without --shard" in result.output


@pytest.mark.slow
def test_shards_merge_without_loading_the_model(tiny_llava, data_dir, reference, tmp_path, monkeypatch):
    ref_results, ref_dir = reference
    out = tmp_path / "sharded"
    for k in range(2):  # what two processes (one per GPU) would run
        part = evaluate_common_o(
            data_dir, "main", str(tiny_llava), "transformers", out, settings=SETTINGS, shard=(k, 2), **FAST
        )
        assert part["dataset"]["rows_scored"] == 4 and part["backend_details"]["dtype"] == "float32"
        assert (out / f"results.shard-{k}-of-2.json").is_file() and (
            out / f"prediction-cache.shard-{k}-of-2.jsonl"
        ).is_file()
    assert [
        r["row_index"] for r in map(json.loads, (out / "predictions.shard-1-of-2.jsonl").read_text().splitlines())
    ] == [1, 3, 5, 7]

    def must_not_load(*args, **kwargs):
        raise AssertionError("the model was loaded although every prediction is cached")

    monkeypatch.setattr("commonlink.eval.backends.load_backend", must_not_load)
    merged = evaluate_common_o(
        data_dir, "main", str(tiny_llava), "transformers", out, settings=SETTINGS, batch_size=1, **FAST
    )
    assert merged["timing"]["from_cache"] == 8 and merged["timing"]["generated"] == 0
    assert (
        merged["metrics"] == ref_results["metrics"] and merged["model_fingerprint"] == ref_results["model_fingerprint"]
    )
    assert _outputs(out) == _outputs(ref_dir)


@pytest.mark.slow
def test_out_of_memory_halves_the_batch(tiny_backend, data_dir, reference, tmp_path):
    ref_results, ref_dir = reference

    def oom_above_two(n, requests):
        if len(requests) > 2:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    wrapped = Wrapped(tiny_backend, oom_above_two)
    results = evaluate_common_o(
        data_dir, "main", backend_instance=wrapped, out_dir=tmp_path / "oom", settings=SETTINGS, batch_size=8, **FAST
    )
    assert wrapped.calls[:2] == [8, 4] and set(wrapped.calls[2:]) == {2}
    assert results["oom_events"] == 2 and results["final_batch_size"] == 2 and results["skipped"] == 0
    assert _outputs(tmp_path / "oom") == _outputs(ref_dir)
    assert results["metrics"] == ref_results["metrics"]


@pytest.mark.slow
def test_out_of_memory_on_a_single_row_skips_it(tiny_backend, data_dir, tmp_path):
    def oom_on_row_3(n, requests):
        if any(r.id == "main-3" for r in requests):
            raise RuntimeError("CUDA error: out of memory")

    results = evaluate_common_o(
        data_dir,
        "main",
        backend_instance=Wrapped(tiny_backend, oom_on_row_3),
        out_dir=tmp_path,
        settings=SETTINGS,
        batch_size=2,
        limit=4,
        **FAST,
    )
    assert results["skipped"] == 1 and results["skipped_rows"][0]["id"] == "main-3"
    assert "out of memory" in results["skipped_rows"][0]["reason"]
    assert results["dataset"]["rows_scored"] == 3


@pytest.mark.parametrize("encoding", ["json", "python", "comma"])
def test_published_schema_list_encodings(encoding, tmp_path):
    folder = write_common_o_split(tmp_path / encoding, common_o_rows(6, seed=2, encoding=encoding))
    results = evaluate_common_o(folder, "main", "none", out_dir=tmp_path / "out", **FAST)
    examples = [open_common_o(folder, "main").get(i, images=False) for i in range(6)]
    expected = sum(e.ground_truth == ["No objects are in common"] for e in examples) / 6
    assert results["metrics"]["overall"]["accuracy"] == pytest.approx(expected)
    # the paper's formula: "none" is one false positive on every row with objects in common, over its choices
    shared = [1 / len(e.choices) for e in examples if e.ground_truth != ["No objects are in common"]]
    assert results["metrics"]["overall"]["hallucination_rate"] == pytest.approx(sum(shared) / 6) and 0 < len(shared) < 6
    assert results["metrics"]["overall"]["object_hallucination_rate"] == 0.0  # "none" never names an object
    assert results["backend"] == "baseline"


def _random_looking_at_images():
    """The random baseline declaring that it uses images, so rows are decoded for it as for a model."""
    backend = BaselineBackend("random")
    backend.info = dataclasses.replace(backend.info, uses_images=True, fingerprint="baseline:random-with-images")
    return backend


def test_bad_rows_are_reported_and_skipped(tmp_path):
    rows = common_o_rows(6, seed=3)
    rows[1]["image_2"] = {"bytes": b"\x89PNG\r\n\x1a\n broken", "path": None}  # undecodable image
    rows[3]["choices"] = '["apple", "keys"'  # malformed list
    rows[4]["ground_truth_objects"] = '["not a choice"]'
    folder = write_common_o_split(tmp_path / "bad", rows)
    with pytest.raises(
        SchemaError, match=r"1 of the 6 rows requested cannot be read \(more than the 0 allowed; stopped at row 1\)"
    ) as info:
        evaluate_common_o(
            folder, "main", backend_instance=_random_looking_at_images(), out_dir=tmp_path / "stopped", **FAST
        )  # default: at most 5% unreadable
    assert "field 'image_2'" in str(info.value) and not (tmp_path / "stopped" / "results.json").exists()
    results = evaluate_common_o(
        folder,
        "main",
        backend_instance=_random_looking_at_images(),
        out_dir=tmp_path / "out",
        max_unreadable_share=0.5,
        **FAST,
    )
    assert results["skipped"] == 3 and [s["row"] for s in results["skipped_rows"]] == [1, 3, 4]
    reasons = " ".join(s["reason"] for s in results["skipped_rows"])
    assert "image_2" in reasons and "choices" in reasons and "ground_truth_objects" in reasons
    assert results["dataset"]["rows_scored"] == 3
    assert len((tmp_path / "out" / "predictions.jsonl").read_text().splitlines()) == 3
    # a baseline never decodes images, so the broken image does not keep it from scoring row 1
    baseline = evaluate_common_o(
        folder, "main", "random", out_dir=tmp_path / "baseline", max_unreadable_share=0.5, report=False, **FAST
    )
    assert [s["row"] for s in baseline["skipped_rows"]] == [3, 4] and baseline["dataset"]["rows_scored"] == 4


def test_a_dataset_broken_as_a_whole_stops_early(tmp_path):
    rows = common_o_rows(22, seed=3, image_size=(8, 8))
    for row in rows:
        row["choices"] = "[broken"
    folder = write_common_o_split(tmp_path / "broken", rows)
    with pytest.raises(SchemaError, match="first 20 rows all failed"):
        evaluate_common_o(folder, "main", "none", out_dir=tmp_path / "out", max_unreadable_share=1, **FAST)
    with pytest.raises(
        SchemaError, match=r"2 of the 22 rows requested cannot be read \(more than the 1 allowed; stopped at row 1\)"
    ):
        evaluate_common_o(folder, "main", "none", out_dir=tmp_path / "out", **FAST)


@pytest.mark.slow
def test_concat_images_uses_one_image_and_the_second_prompt(tiny_backend, data_dir, tmp_path):
    example = open_common_o(data_dir, "main").get(0)
    native = common_o_request(example, concat=True, image_protocol="native")
    assert len(native.images) == 1 and native.images[0].width == example.image_1.width + example.image_2.width
    request = common_o_request(
        example, concat=True
    )  # the paper: each image to 384 px on its shorter side, then side by side
    assert example.image_1.size == example.image_2.size == (64, 48) and request.images[0].size == (2 * 512, 384)
    assert request.prompt.startswith("There are two images provided, one on the left and the other on the right.")
    results = evaluate_common_o(
        data_dir,
        "main",
        backend_instance=tiny_backend,
        out_dir=tmp_path,
        settings=SETTINGS,
        limit=2,
        concat_images=True,
        **FAST,
    )
    assert results["prompt"]["template"] == CONCAT_IMAGE_PROMPT and results["dataset"]["rows_scored"] == 2


def test_perception_baseline_by_hand(data_dir, tmp_path):
    """Paper §4.1 / Fig. 3: each image of each row, one question per choice object, present and absent."""
    results = evaluate_perception(data_dir, "main", "none", out_dir=tmp_path, **FAST)
    overall = results["metrics"]["overall"]
    split = open_common_o(data_dir, "main")
    examples = [split.get(i, images=False) for i in range(len(split))]
    asked = {
        (e.id, side, c)
        for e in examples
        for side in ("image_1", "image_2")
        for c in e.choices
        if c != NO_COMMON_OBJECTS
    }
    present = {
        (e.id, side, c)
        for e in examples
        for side, objs in (("image_1", e.objects_1), ("image_2", e.objects_2))
        for c in e.choices
        if c in objs
    }
    assert (
        overall["questions"] == len(asked)
        and overall["positives"] == len(present)
        and overall["negatives"] == len(asked - present)
    )
    # "none" answers No: right on every absent object, wrong on every present one; so an image is right only
    # when none of its choices is in it, and nothing is hallucinated
    assert overall["n"] == 2 * len(examples) and overall["unit"] == "image"
    assert overall["accuracy"] == 0.0 and overall["hallucination_rate"] == 0.0 and overall["hallucination_2plus"] == 0.0
    assert overall["question_accuracy"] == pytest.approx(len(asked - present) / len(asked)) and overall["recall"] == 0.0
    assert (
        results["prompt"]["template"] == "Is {} in this image?"
        and results["image_protocol"]["protocol"] == "shorter-side-384"
    )
    records = [json.loads(x) for x in (tmp_path / "predictions.jsonl").read_text().splitlines()]
    assert {(r["row_id"], r["image"], r["object"]) for r in records} == asked
    assert {(r["row_id"], r["image"], r["object"]) for r in records if r["present"]} == present
    # the same run in lmms-eval's convention: one logged sample per question, aggregated keys equal ours
    lmms = json.loads((tmp_path / "lmms_eval" / "results.json").read_text())
    assert lmms["results"]["common_o_perception"]["acc,none"] == overall["accuracy"]
    assert lmms["results"]["common_o_perception"]["question_acc,none"] == pytest.approx(overall["question_accuracy"])
    samples = [
        json.loads(x) for x in (tmp_path / "lmms_eval" / "samples_common_o_perception.jsonl").read_text().splitlines()
    ]
    assert len(samples) == len(records) == lmms["n-samples"]["common_o_perception"]["effective"]
    assert {s["target"] for s in samples if s["doc"]["present"]} == {"yes"} and {
        s["filtered_resps"][0] for s in samples
    } == {"no"}
    assert sum(s["question_acc"] for s in samples) == len(asked - present)
    assert samples[0]["arguments"][0][0] == f"Is {samples[0]['doc']['object']} in this image?"


@pytest.mark.slow
def test_perception_with_the_tiny_model(tiny_backend, data_dir, tmp_path):
    example = open_common_o(data_dir, "main").get(0)
    questions = 2 * sum(c != NO_COMMON_OBJECTS for c in example.choices)
    results = evaluate_perception(
        data_dir, "main", backend_instance=tiny_backend, out_dir=tmp_path / "one", limit=1, settings=SETTINGS, **FAST
    )
    assert results["dataset"]["questions_scored"] == questions and results["timing"]["generated"] == questions


@pytest.mark.slow
def test_cli_rejects_a_top_p_outside_0_1_before_loading_anything(tiny_llava, data_dir, tmp_path):
    """--top-p must be in (0, 1]: vLLM's SamplingParams and OpenAI servers reject other values only once the model is
    loaded (a traceback, or every row skipped); transformers silently decodes top-p 0 as greedy."""
    for value in ("0", "1.5"):
        result = CliRunner().invoke(
            app,
            [
                "eval",
                "commono",
                "--model",
                str(tiny_llava),
                "--data",
                str(data_dir),
                "--out",
                str(tmp_path / value),
                "--temperature",
                "0.7",
                "--top-p",
                value,
                "--limit",
                "1",
                "--quiet",
            ],
        )
        assert result.exit_code == 1 and "--top-p" in result.output, result.output
        assert not (tmp_path / value / "results.json").exists()


def test_cli_commono_score_compare(data_dir, tmp_path):
    runner = CliRunner()
    for model in ("none", "random"):
        result = runner.invoke(
            app,
            [
                "eval",
                "commono",
                "--model",
                model,
                "--data",
                str(data_dir),
                "--out",
                str(tmp_path / model),
                "--bootstrap",
                "50",
                "--quiet",
            ],
        )
        assert result.exit_code == 0, result.output
        assert "| " + model + " | baseline | main | 8 |" in result.output
    saved = json.loads((tmp_path / "random" / "results.json").read_text())
    rescored = score_predictions(tmp_path / "random" / "predictions.jsonl", data_dir, "main", n_boot=50)
    assert rescored["metrics"] == saved["metrics"] and rescored["facts_from"] == "dataset"
    assert score_predictions(tmp_path / "random" / "predictions.jsonl", n_boot=50)["metrics"] == saved["metrics"]
    # the parser runs again: an edited raw output changes the score
    lines = [json.loads(x) for x in (tmp_path / "random" / "predictions.jsonl").read_text().splitlines()]
    wrong = next(x for x in lines if not x["correct"])
    wrong["raw_output"] = "Answer: " + ", ".join(wrong["ground_truth_letters"])
    (tmp_path / "edited.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    edited = score_predictions(tmp_path / "edited.jsonl", data_dir, "main", n_boot=50)
    assert edited["metrics"]["overall"]["accuracy"] == pytest.approx(saved["metrics"]["overall"]["accuracy"] + 1 / 8)
    result = runner.invoke(
        app,
        ["eval", "score", str(tmp_path / "random" / "predictions.jsonl"), "--data", str(data_dir), "--bootstrap", "50"],
    )
    assert result.exit_code == 0 and "| random | baseline | main | 8 |" in result.output
    result = runner.invoke(
        app,
        [
            "eval",
            "compare",
            str(tmp_path / "random"),
            str(tmp_path / "none" / "results.json"),
            "--markdown",
            str(tmp_path / "lb.md"),
        ],
    )
    assert result.exit_code == 0, result.output
    table = (tmp_path / "lb.md").read_text().splitlines()
    ranked = [line.split("|")[1].strip() for line in table if line.startswith("| ") and not line.startswith("| Run ")]
    accuracy = {
        m: json.loads((tmp_path / m / "results.json").read_text())["metrics"]["overall"]["accuracy"]
        for m in ("none", "random")
    }
    assert ranked == sorted(accuracy, key=lambda m: -accuracy[m])
    # clear errors, no traceback
    result = runner.invoke(
        app, ["eval", "commono", "--model", "none", "--data", str(tmp_path / "missing"), "--split", "main"]
    )
    assert result.exit_code == 1 and "Error" in result.output
    result = runner.invoke(app, ["eval", "commono", "--model", "none", "--data", str(data_dir), "--split", "challenge"])
    assert result.exit_code == 1 and "challenge" in result.output
    result = runner.invoke(app, ["eval", "commono", "--model", "x", "--data", str(data_dir), "--backend", "nope"])
    assert result.exit_code == 1 and "Unknown --backend" in result.output


@pytest.mark.slow
def test_similarity_analysis(data_dir, tmp_path):
    def record(names, correct):
        return {"ground_truth": names, "correct": correct}

    records = [
        record(["silver knife", "silver whisk"], False),
        record(["silver fork", "silver spoon"], False),
        record(["apple", "keys"], True),
        record(["vase", "basketball"], True),
        record(["apple"], True),
    ]
    out = object_similarity_analysis(records)
    assert out["embedding"] == "char-ngram" and out["examples_used"] == 4 and out["r"] < -0.9
    embed = char_ngram_embedder()
    v = embed(["silver knife", "silver whisk", "apple"])
    assert v[0] @ v[1] > v[0] @ v[2]
    # any transformers encoder: a tiny random BERT with a WordPiece tokenizer built here
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import BertConfig, BertModel, PreTrainedTokenizerFast

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(
        ["silver knife whisk fork spoon apple keys vase basketball"],
        trainers.WordPieceTrainer(vocab_size=60, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]"]),
    )
    PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]").save_pretrained(
        tmp_path / "bert"
    )
    torch.manual_seed(0)
    BertModel(
        BertConfig(
            vocab_size=tok.get_vocab_size(),
            hidden_size=16,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=32,
        )
    ).save_pretrained(tmp_path / "bert")
    out = object_similarity_analysis(records, str(tmp_path / "bert"))
    assert out["embedding"] == str(tmp_path / "bert") and out["examples_used"] == 4 and -1 <= out["r"] <= 1
    # a wrong embedding path fails before any generation
    with pytest.raises(BackendError, match="embedding model"):
        evaluate_common_o(
            data_dir, "main", "none", tmp_path / "out", similarity_model=str(tmp_path / "missing"), **FAST
        )
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_vllm_backend_on_gpu(tiny_llava, data_dir, tmp_path):
    pytest.importorskip("vllm")
    results = evaluate_common_o(
        data_dir,
        "main",
        str(tiny_llava),
        "vllm",
        tmp_path,
        settings=SETTINGS,
        backend_options={"max_model_len": 1024},
        **FAST,
    )
    assert results["dataset"]["rows_scored"] == 8


class Recording(Wrapped):
    """Records the size of every image the backend is handed."""

    def __init__(self, inner):
        super().__init__(inner)
        self.sizes = []

    def generate(self, requests, settings):
        self.sizes += [img.size for r in requests for img in r.images]
        return super().generate(requests, settings)


def test_the_model_receives_the_papers_384_px_shorter_side_by_default(tiny_backend, data_dir, tmp_path):
    assert open_common_o(data_dir, "main").get(0).image_1.size == (64, 48)
    UNCAPPED = GenerationSettings(
        max_new_tokens=6
    )  # the default --max-pixels safety cap (1,048,576) leaves 512x384 alone
    TINY = dict(FAST, allow_unparseable=True)  # the tiny model answers no letters
    paper = Recording(tiny_backend)
    results = evaluate_common_o(
        data_dir, "main", backend_instance=paper, out_dir=tmp_path / "paper", settings=UNCAPPED, limit=2, **TINY
    )
    assert paper.sizes == [(512, 384)] * 4  # 64x48 -> shorter side 384, aspect kept
    assert results["image_protocol"] == {"protocol": "shorter-side-384", "kind": "shorter-side", "value": 384}
    native = Recording(tiny_backend)
    other = evaluate_common_o(
        data_dir,
        "main",
        backend_instance=native,
        out_dir=tmp_path / "paper",
        settings=UNCAPPED,
        limit=2,
        image_protocol="native",
        overwrite=True,
        **TINY,
    )
    assert native.sizes == [(64, 48)] * 4  # the protocol is in the run key: another run (refused without overwrite)
    assert other["run_key"] != results["run_key"] and other["timing"]["generated"] == 2
    capped = Recording(tiny_backend)
    evaluate_common_o(
        data_dir,
        "main",
        backend_instance=capped,
        out_dir=tmp_path / "cap",
        settings=UNCAPPED,
        limit=1,
        image_protocol="max-pixels-1000",
        **TINY,
    )
    assert all(w * h <= 1000 for w, h in capped.sizes) and capped.sizes[0][0] / capped.sizes[0][1] == pytest.approx(
        64 / 48, rel=0.05
    )
    with pytest.raises(InputError, match="not an image protocol"):
        evaluate_common_o(data_dir, "main", "none", image_protocol="shorter-side", **TINY)


def test_a_rows_own_question_is_sent_verbatim(tiny_backend, data_dir, tmp_path):
    example = open_common_o(data_dir, "main").get(0)
    assert example.question_source == "dataset"
    assert common_o_request(example).prompt == example.question
    assert common_o_request(example, question="built").prompt == common_o_question(example.choices)
    assert common_o_request(example, concat=True).prompt == CONCAT_IMAGE_PROMPT.format(format_choices(example.choices))


def test_scoring_an_empty_predictions_file_is_an_error_not_a_table_of_zeros(data_dir, tmp_path):
    empty = tmp_path / "predictions.jsonl"
    empty.write_text("")
    with pytest.raises(InputError, match="holds no predictions"):
        score_predictions(empty, data_dir)
    result = CliRunner().invoke(app, ["eval", "score", str(empty), "--data", str(data_dir)])
    assert result.exit_code == 1 and "holds no predictions" in result.output and "| 0 |" not in result.output
