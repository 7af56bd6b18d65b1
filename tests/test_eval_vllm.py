"""The vllm backend against ``tests.fixtures.vllm_double``, a stand-in built on the API recorded from the real
vLLM wheel (no GPU and no vLLM install are possible in this test environment)."""

from __future__ import annotations

import json
import sys

import pytest
from typer.testing import CliRunner

from commonlink.cli import app
from commonlink.errors import InputError
from commonlink.eval.backends import GenerationRequest, GenerationSettings, load_backend
from commonlink.kinds.association.task import evaluate_association
from commonlink.kinds.common_o.perception import evaluate_perception
from commonlink.kinds.common_o.task import evaluate_common_o
from tests.fixtures import vllm_double
from tests.fixtures.tiny_chains import write_tiny_chain_files

FAST = {"n_boot": 20, "progress": False}


@pytest.fixture(autouse=True)
def fake_vllm(monkeypatch, fresh_commonlink_home):
    monkeypatch.setitem(sys.modules, "vllm", vllm_double)
    monkeypatch.setattr(vllm_double, "INSTANCES", [])
    monkeypatch.setattr(vllm_double, "responder", vllm_double.default_responder)
    # "org/vlm" stands for a Hub model the double serves: the Hub lookup says it exists (no network in tests).
    monkeypatch.setattr("commonlink.loaders.hub_ids.lookup_reason", lambda repo_id, kind, revision=None: (None, True))
    return vllm_double


@pytest.fixture()
def common_o_data(common_o_split):
    return common_o_split(4, seed=2)


def test_common_o_and_perception_size_the_image_limit_from_the_task(common_o_data, tmp_path, fake_vllm):
    results = evaluate_common_o(
        common_o_data,
        "main",
        "org/vlm",
        "vllm",
        tmp_path / "pairs",
        backend_options={"tensor_parallel_size": 2, "max_model_len": 4096, "enforce_eager": True},
        **FAST,
    )
    llm = fake_vllm.INSTANCES[-1]
    assert llm.init_kwargs["limit_mm_per_prompt"] == {"image": 2} and llm.init_kwargs["tensor_parallel_size"] == 2
    assert llm.init_kwargs["enforce_eager"] is True and llm.init_kwargs["max_model_len"] == 4096
    parts = llm.calls[0].conversations[0][0]["content"]
    assert [p["type"] for p in parts] == ["image_pil", "image_pil", "text"] and parts[0]["image_pil"].size == (
        512,
        384,
    )  # the paper's 384 px
    params = llm.calls[0].sampling_params
    assert (params.temperature, params.top_p, params.max_tokens, params.seed) == (0.0, 1.0, 1024, 0)
    assert results["dataset"]["rows_scored"] == 4 and results["backend_details"]["limit_mm_per_prompt"] == {"image": 2}
    assert results["backend_details"]["tokens"]["prompt_tokens"] == 4 * 7

    evaluate_common_o(common_o_data, "main", "org/vlm", "vllm", tmp_path / "concat", concat_images=True, **FAST)
    assert fake_vllm.INSTANCES[-1].init_kwargs["limit_mm_per_prompt"] == {"image": 1}
    # the double answers letters, never yes/no: every perception answer is unparseable
    evaluate_perception(
        common_o_data, "main", "org/vlm", "vllm", tmp_path / "perception", allow_unparseable=True, **FAST
    )
    assert fake_vllm.INSTANCES[-1].init_kwargs["limit_mm_per_prompt"] == {"image": 1}


def test_system_prompt_gen_args_and_processor_options_reach_vllm(common_o_data, tmp_path, fake_vllm):
    settings = GenerationSettings(
        max_new_tokens=8, system_prompt="Answer tersely.", extra={"top_k": 20, "repetition_penalty": 1.05}
    )
    evaluate_common_o(
        common_o_data,
        "main",
        "org/vlm",
        "vllm",
        tmp_path / "a",
        settings=settings,
        limit=1,
        backend_options={"processor": {"max_pixels": 3136}},
        **FAST,
    )
    llm = fake_vllm.INSTANCES[-1]
    conversation = llm.calls[0].conversations[0]
    assert conversation[0] == {"role": "system", "content": "Answer tersely."} and conversation[1]["role"] == "user"
    assert llm.calls[0].sampling_params.top_k == 20 and llm.calls[0].sampling_params.repetition_penalty == 1.05
    assert llm.init_kwargs["mm_processor_kwargs"] == {"max_pixels": 3136}
    with pytest.raises(InputError, match="SamplingParams refused a --gen-arg"):
        load_backend("vllm", "org/vlm").generate(
            [GenerationRequest("r", [], "hi")], GenerationSettings(extra={"beams": 2})
        )


def test_eval_association_backend_vllm_sends_three_images_vllm_accepts(tmp_path, fake_vllm):
    """The bug this fixes: a hard-coded limit of 2 made vLLM refuse every association selection (3 images)."""
    data = write_tiny_chain_files(tmp_path)  # 4 concepts x 3 single-step tasks
    fake_vllm.responder = lambda conversation, params: (
        "Image1" if "Image1" in json.dumps(conversation[-1]["content"][-1]) else "metal"
    )
    result = CliRunner().invoke(
        app,
        [
            "eval",
            "association",
            "--data",
            str(data),
            "--config",
            "single_step",
            "--model",
            "org/vlm",
            "--backend",
            "vllm",
            "--backend-arg",
            "gpu_memory_utilization=0.5",
            "--out",
            str(tmp_path / "out"),
            "--quiet",
            "--bootstrap",
            "20",
        ],
    )
    assert result.exit_code == 0, result.output
    llm = fake_vllm.INSTANCES[-1]
    assert llm.init_kwargs["limit_mm_per_prompt"] == {"image": 3} and llm.init_kwargs["gpu_memory_utilization"] == 0.5
    selections = [
        c
        for call in llm.calls
        for c in call.conversations
        if sum(p["type"] == "image_pil" for p in c[-1]["content"]) == 3
    ]
    assert selections, "no 3-image selection request was sent"
    saved = json.loads((tmp_path / "out" / "results.json").read_text())
    assert saved["requests"]["failed"] == 0 and saved["metrics"]["summary"]["n"] == 12

    # with the old limit (2) forced by the user, vLLM would refuse each selection: they are reported as failed, not sent
    out = evaluate_association(
        data,
        "single_step",
        ["org/vlm"],
        "vllm",
        tmp_path / "limited",
        backend_options={"limit_mm_per_prompt": {"image": 2}},
        n_boot=20,
        progress=False,
    )
    assert out["requests"]["failed"] == 12 and out["metrics"]["summary"]["failed"] == 12
    assert all(
        len([p for p in c[-1]["content"] if p["type"] == "image_pil"]) <= 2
        for call in fake_vllm.INSTANCES[-1].calls
        for c in call.conversations
    )


def test_a_model_path_that_does_not_exist_is_refused_before_vllm_starts(tmp_path):
    with pytest.raises(InputError, match="no such folder"):
        load_backend("vllm", str(tmp_path / "no-such-model"))
    assert vllm_double.INSTANCES == []


@pytest.mark.parametrize(
    "settings,text",
    [
        (GenerationSettings(extra={"top_k": -5}), "top_k must be 0 (disable), or at least 1, got -5."),
        (GenerationSettings(temperature=3.0), "temperature must be in [0, 2], got 3.0."),
        (GenerationSettings(extra={"min_p": 1.5}), "min_p must be in [0, 1], got 1.5."),
    ],
)
def test_values_out_of_vllms_ranges_are_input_errors_with_vllms_text(settings, text):
    """vLLM's SamplingParams raises VLLMValidationError (not a TypeError or ValueError) for a value out of range: the
    backend turns it into an InputError with vLLM's own words, not a traceback."""
    with pytest.raises(InputError) as err:
        load_backend("vllm", "org/vlm").generate([GenerationRequest("r", [], "hi")], settings)
    assert text in err.value.problem and "--gen-arg" in err.value.fix


def _recorder():
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(
        "record_vllm_api", Path(__file__).resolve().parents[1] / "scripts" / "record_vllm_api.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_double_keeps_the_signatures_recorded_from_the_real_vllm_wheel():
    """Kept on purpose although its subject is the double: it is what ties the double to the real vLLM (same
    parameter names, kinds and default values as the recording of vLLM's own LLM/SamplingParams), so a double
    kinder than vLLM cannot creep in unnoticed."""
    import ast
    import inspect
    from pathlib import Path

    recorded = json.loads((Path(__file__).parent / "fixtures" / "data" / "vllm_api.json").read_text())
    record = _recorder()
    tree = ast.parse(inspect.getsource(vllm_double))
    llm = record._class(tree, "LLM")
    for name in ("__init__", "chat", "generate"):
        assert record._params(record._method(llm, name)) == recorded[f"LLM.{name}"], name
    fields = [
        {"name": n.target.id, "default": ast.unparse(n.value)}
        for n in record._class(tree, "SamplingParams").body
        if isinstance(n, ast.AnnAssign) and not n.target.id.startswith("_")
    ]
    assert fields == recorded["SamplingParams"]
    assert recorded["vllm_version"] == vllm_double.__version__


def test_vllms_per_modality_limit_form_is_accepted(fake_vllm):
    """vLLM's documented form {"image": {"count": 5, "width": 512, "height": 512}} (vllm.config.multimodal
    ImageDummyOptions: count, default 999, plus the profiling size) passes through; its count is our image cap."""
    per_modality = {"image": {"count": 5, "width": 512, "height": 512}, "video": 0}
    backend = load_backend("vllm", "org/vlm", limit_mm_per_prompt=per_modality)
    assert fake_vllm.INSTANCES[-1].init_kwargs["limit_mm_per_prompt"] == per_modality and backend.max_images == 5
    backend = load_backend("vllm", "org/vlm", limit_mm_per_prompt={"image": {"width": 448, "height": 448}})
    assert backend.max_images == 999  # count left out: vLLM's default
    for bad, says in [
        ({"image": {"count": 5, "size": 512}}, "size"),
        ({"image": {"count": -1}}, "count"),
        ({"image": {"count": 5, "width": 0}}, "width"),
        ({"image": "5"}, "'5'"),
        ([5], "mapping"),
    ]:
        with pytest.raises(InputError, match=says):
            load_backend("vllm", "org/vlm", limit_mm_per_prompt=bad)
