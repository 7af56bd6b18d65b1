"""The backend registry and the transformers model adapters, with tiny random models of several architectures
built here (LLaVA, Idefics3, Gemma 3, and a model that ships its own code), loaded through ``from_pretrained``."""

from __future__ import annotations

import json

import pytest
from PIL import Image
from typer.testing import CliRunner

from commonlink.cli import app
from commonlink.errors import BackendError, InputError
from commonlink.eval.backends import (
    BACKEND_REGISTRY,
    BackendInfo,
    GenerationRequest,
    GenerationSettings,
    LazyBackend,
    load_backend,
    parse_key_values,
    register_backend,
)
from commonlink.kinds.common_o.task import evaluate_common_o
from tests.fixtures.tiny_models import (
    build_remote_code_vlm,
    build_tiny_gemma3,
    build_tiny_idefics3,
)

FAST = {"n_boot": 20, "progress": False, "allow_unparseable": True}  # tiny models answer no letters
SETTINGS = GenerationSettings(max_new_tokens=4)


@pytest.fixture(scope="module")
def data_dir(common_o_split):
    return common_o_split(3, seed=5)


@pytest.fixture(scope="module")
def models(tmp_path_factory, tiny_llava):
    root = tmp_path_factory.mktemp("models")
    return {
        "llava": tiny_llava,
        "idefics3": build_tiny_idefics3(root / "idefics3"),
        "gemma3": build_tiny_gemma3(root / "gemma3"),
    }


# ------------------------------------------------------------------------------------------ registry and options
def test_parse_key_values_reads_json_and_nests_dotted_keys():
    assert parse_key_values(
        [
            "dtype=bfloat16",
            "processor.max_pixels=3136",
            "processor.min_pixels=784",
            "enforce_eager=true",
            'limit_mm_per_prompt={"image": 3}',
        ]
    ) == {
        "dtype": "bfloat16",
        "processor": {"max_pixels": 3136, "min_pixels": 784},
        "enforce_eager": True,
        "limit_mm_per_prompt": {"image": 3},
    }
    with pytest.raises(InputError, match="is not KEY=VALUE"):
        parse_key_values(["dtype"])


class EchoBackend:
    """A backend registered from outside the toolkit: answers with the number of images it was sent."""

    def __init__(self, model, *, prefix="n="):
        self.prefix = prefix
        self.generate_seconds = 0.0
        self.info = self.planned_info(model, prefix=prefix)

    @staticmethod
    def planned_info(model, **options):
        return BackendInfo(
            backend="echo",
            model=model,
            fingerprint=f"echo:{model}",
            batch_invariant=True,
            default_batch_size=4,
            output_options={k: v for k, v in options.items() if k != "images_per_request"},
        )

    def generate(self, requests, settings):
        return [f"{self.prefix}{len(r.images)}" for r in requests]

    def close(self):
        pass


def test_registry_loads_a_registered_backend_lazily_and_checks_its_options(data_dir, tmp_path, monkeypatch):
    monkeypatch.setitem(BACKEND_REGISTRY, "echo", "")  # undone after the test
    register_backend("echo", f"{__name__}:EchoBackend")
    backend = load_backend("echo", "m", prefix="images=")
    assert backend.generate([GenerationRequest("r", [None, None], "hi")], SETTINGS) == ["images=2"]
    results = evaluate_common_o(data_dir, "main", "m", "echo", tmp_path / "run", **FAST)
    assert results["backend"] == "echo" and results["dataset"]["rows_scored"] == 3
    assert not LazyBackend("echo", "m").loaded
    with pytest.raises(InputError, match=r"--backend-arg colour=\.\.\. is not an option of the echo backend") as err:
        load_backend("echo", "m", colour="red")
    assert "prefix" in err.value.fix
    with pytest.raises(InputError, match="Unknown --backend 'nope'"):
        load_backend("nope", "m")
    with pytest.raises(
        InputError, match="dtype"
    ):  # a transformers option misspelled names the real ones, before loading anything
        LazyBackend("transformers", "some/model", dtyp="bfloat16")


# ------------------------------------------------------------------------------------------ transformers adapters
@pytest.mark.slow
@pytest.mark.parametrize(
    "arch,model_class,expected",
    [
        ("llava", "auto", "LlavaForConditionalGeneration"),
        ("idefics3", "image-text-to-text", "Idefics3ForConditionalGeneration"),
        ("gemma3", "causal-lm", "Gemma3ForConditionalGeneration"),
    ],
)
def test_three_architectures_score_common_o_through_their_adapter(
    models, data_dir, tmp_path, arch, model_class, expected
):
    backend = load_backend("transformers", str(models[arch]), model_class=model_class)
    assert backend.info.details["model_class"] == expected and backend.info.details["trust_remote_code"] is False
    results = evaluate_common_o(
        data_dir, "main", backend_instance=backend, out_dir=tmp_path / arch, settings=SETTINGS, batch_size=2, **FAST
    )
    assert results["dataset"]["rows_scored"] == 3 and results["skipped"] == 0
    assert results["model_fingerprint"] == backend.info.fingerprint
    assert (model_class != "auto") == ("adapter" in backend.info.output_options)  # the adapter is part of the cache key


@pytest.mark.slow
def test_system_prompt_and_gen_args_reach_the_model(models):
    backend = load_backend("transformers", str(models["gemma3"]))
    request = GenerationRequest("r", [Image.new("RGB", (40, 30), "red")], "Which objects")
    text = backend._chat_text(request, GenerationSettings(system_prompt="Be brief."))
    assert text.startswith("<start_of_turn>system\nBe brief.<end_of_turn>") and "<start_of_image>" in text
    inputs = backend.processor(
        text=[backend._chat_text(request, SETTINGS)], images=[[request.images[0]]], return_tensors="pt"
    )
    prompt_length = inputs["input_ids"].shape[1]
    first_token = int(backend.model.generate(**inputs, max_new_tokens=1, do_sample=False)[0, prompt_length])
    plain = backend.generate([request], GenerationSettings(max_new_tokens=3))[0]
    assert plain.startswith(backend.tokenizer.decode([first_token]))
    banned = backend.generate(
        [request], GenerationSettings(max_new_tokens=3, extra={"bad_words_ids": [[first_token]]})
    )[0]
    assert banned != plain  # the first token was banned, so the answer changed (byte-level pieces decode lossily)


@pytest.mark.slow
def test_processor_options_go_to_the_processor_and_the_cache_key(models):
    default = load_backend("transformers", str(models["idefics3"]))
    split = load_backend("transformers", str(models["idefics3"]), processor={"do_image_splitting": True})
    assert (
        split.processor.image_processor.do_image_splitting is True
        and default.processor.image_processor.do_image_splitting is False
    )
    assert (
        split.info.output_options == {"processor": {"do_image_splitting": True}} and default.info.output_options == {}
    )
    image = Image.new("RGB", (64, 48), "blue")
    lengths = [
        b.processor(text=["<image>hi"], images=[[image]], return_tensors="pt")["input_ids"].shape[1]
        for b in (default, split)
    ]
    assert lengths[1] > lengths[0]  # image splitting adds the crops' tokens: the option changed what the model sees


@pytest.mark.slow
def test_remote_code_models_load_only_when_the_user_trusts_them(tmp_path, data_dir):
    model = build_remote_code_vlm(tmp_path / "remote")
    with pytest.raises(BackendError, match="ships its own Python code") as err:
        load_backend("transformers", str(model))
    assert "--trust-remote-code" in err.value.fix
    result = CliRunner().invoke(
        app,
        [
            "eval",
            "commono",
            "--model",
            str(model),
            "--data",
            str(data_dir),
            "--out",
            str(tmp_path / "run"),
            "--trust-remote-code",
            "--max-new-tokens",
            "3",
            "--quiet",
            "--allow-unparseable",  # the tiny model answers no letters
            "--bootstrap",
            "20",
        ],
    )
    assert result.exit_code == 0, result.output
    saved = json.loads((tmp_path / "run" / "results.json").read_text())
    assert (
        saved["backend_details"]["model_class"] == "TinyRemoteForCausalLM"
        and saved["backend_details"]["trust_remote_code"] is True
    )


def test_cli_backend_and_gen_args_are_checked_with_the_fix(data_dir, tmp_path):
    bad = CliRunner().invoke(
        app,
        ["eval", "commono", "--model", "random", "--data", str(data_dir), "--gen-arg", "temperature=0.5", "--quiet"],
    )
    assert bad.exit_code == 1 and "--gen-arg temperature" in bad.output and "--temperature" in bad.output
    bad = CliRunner().invoke(
        app, ["eval", "commono", "--model", "some/model", "--data", str(data_dir), "--concurrency", "4", "--quiet"]
    )
    assert bad.exit_code == 1 and "--concurrency applies to --backend openai" in bad.output
    bad = CliRunner().invoke(
        app, ["eval", "commono", "--model", "random", "--data", str(data_dir), "--concurrency", "4", "--quiet"]
    )
    assert bad.exit_code == 1 and "weight-free baseline" in bad.output and "--concurrency" in bad.output
    ok = CliRunner().invoke(
        app,
        [
            "eval",
            "commono",
            "--model",
            "random",
            "--data",
            str(data_dir),
            "--out",
            str(tmp_path / "r"),
            "--system-prompt",
            "Be brief.",
            "--gen-arg",
            "top_k=20",
            "--quiet",
            "--bootstrap",
            "20",
        ],
    )
    assert ok.exit_code == 0, ok.output
    saved = json.loads((tmp_path / "r" / "results.json").read_text())
    assert saved["generation"]["system_prompt"] == "Be brief." and saved["generation"]["extra"] == {"top_k": 20}


def test_a_model_path_that_does_not_exist_is_named_with_the_fix(data_dir, tmp_path):
    """A missing local folder must not reach from_pretrained, which reads it as a Hub id and talks of repo-id syntax."""
    missing = tmp_path / "no-such-model"
    with pytest.raises(InputError) as err:
        load_backend("transformers", str(missing))
    assert "no such folder" in err.value.problem and str(missing) in err.value.problem and "Hub id" in err.value.fix
    result = CliRunner().invoke(
        app,
        [
            "eval",
            "commono",
            "--backend",
            "transformers",
            "--model",
            str(missing),
            "--data",
            str(data_dir),
            "--out",
            str(tmp_path / "run"),
            "--quiet",
        ],
    )
    assert result.exit_code == 1 and "no such folder" in result.output and "Repo id" not in result.output
    assert not (tmp_path / "run" / "results.json").exists()
