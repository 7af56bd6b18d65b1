"""The transformers backend's adapters for remote-code families with their own entry point (MiniCPM-V's
``chat``, Molmo's ``generate_from_batch``, mPLUG-Owl3's ``init_processor`` + ``generate``, Phi-3-vision's single
prompt string, Qwen-VL-Chat's ``from_list_format`` + ``chat`` on image files), run end to
end on Common-O with tiny random models whose code has the real families' signatures
(``tests.fixtures.remote_code_models``; each double's files name the real source they follow)."""

from __future__ import annotations

import copy
import io
import json
import os
import shutil

import pytest
from PIL import Image
from typer.testing import CliRunner

from commonlink.cli import app
from commonlink.errors import BackendError, InputError
from commonlink.eval.backends import GenerationRequest, GenerationSettings, load_backend
from commonlink.eval.imaging import concat_side_by_side
from commonlink.kinds.association.prompts import ImageSlot
from commonlink.kinds.common_o.format import concat_question
from commonlink.kinds.common_o.task import evaluate_common_o
from tests.fixtures.remote_code_models import (
    build_minicpmv_double,
    build_molmo_double,
    build_mplug_owl3_double,
    build_phi3_vision_double,
    build_qwen_vl_chat_double,
)
from tests.fixtures.tiny_models import common_o_rows, write_common_o_split

FAST = {"n_boot": 20, "progress": False, "image_protocol": "native", "allow_unparseable": True}  # tiny models
SYSTEM = "Answer with letters only."
SETTINGS = GenerationSettings(max_new_tokens=6, system_prompt=SYSTEM)
BUILDERS = {
    "minicpm-chat": build_minicpmv_double,
    "mplug-owl3": build_mplug_owl3_double,
    "molmo": build_molmo_double,
    "phi3-vision": build_phi3_vision_double,
    "qwen-vl-chat": build_qwen_vl_chat_double,
}


@pytest.fixture(scope="module", autouse=True)
def private_commonlink_home(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("commonlink.constants.COMMONLINK_HOME", tmp_path_factory.mktemp("commonlink-home"))
        yield


@pytest.fixture(scope="module")
def rows():
    return common_o_rows(3, seed=5)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory, rows):
    return write_common_o_split(tmp_path_factory.mktemp("data"), rows)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("remote-models")
    return {adapter: build(root / adapter) for adapter, build in BUILDERS.items()}


def row_images(row) -> list:
    return [Image.open(io.BytesIO(row[key]["bytes"])).convert("RGB") for key in ("image_1", "image_2")]


def predictions(out_dir) -> list[dict]:
    return [json.loads(line) for line in (out_dir / "predictions.jsonl").read_text().splitlines()]


def run(backend, data_dir, out_dir, settings=SETTINGS, **kwargs):
    results = evaluate_common_o(
        data_dir, "main", backend_instance=backend, out_dir=out_dir, settings=settings, **FAST, **kwargs
    )
    assert results["dataset"]["rows_scored"] == 3 and results["skipped"] == 0
    return results, predictions(out_dir)


# ------------------------------------------------------------------------------------------ consent and detection
@pytest.mark.slow
@pytest.mark.parametrize("adapter", list(BUILDERS))
def test_each_family_needs_trust_remote_code_and_auto_finds_its_adapter(models, adapter):
    with pytest.raises(BackendError, match="ships its own Python code") as err:
        load_backend("transformers", str(models[adapter]))
    assert "--trust-remote-code" in err.value.fix
    backend = load_backend("transformers", str(models[adapter]), trust_remote_code=True, images_per_request=1)
    assert backend.adapter == adapter and backend.info.details["adapter"] == adapter
    assert backend.info.output_options == {}  # auto: the detected adapter follows the weights, not the cache key


def test_qwen_vl_chat_v1_is_found_from_its_config_and_refused_as_a_plain_causal_lm(tmp_path):
    """Qwen-VL-Chat (Labyrinth Table 4) registers AutoModelForCausalLM, but is called through its own chat() and
    tokenizer.from_list_format(): auto picks its adapter (after consent), a generic adapter is refused."""
    (tmp_path / "config.json").write_text(
        json.dumps(
            {
                "model_type": "qwen",
                "architectures": ["QWenLMHeadModel"],
                "auto_map": {
                    "AutoConfig": "configuration_qwen.QWenConfig",
                    "AutoModelForCausalLM": "modeling_qwen.QWenLMHeadModel",
                },
                "visual": {"image_size": 448, "layers": 48},
            }
        )
    )
    with pytest.raises(BackendError, match="is a Qwen-VL-Chat model, which ships its own Python code") as err:
        load_backend("transformers", str(tmp_path))
    assert "--trust-remote-code" in err.value.fix
    with pytest.raises(InputError, match="Qwen-VL\\(-Chat\\) v1, which answers through its own chat") as err:
        load_backend("transformers", str(tmp_path), trust_remote_code=True, adapter="causal-lm")
    assert "adapter=qwen-vl-chat" in err.value.fix


def test_remote_code_of_an_unknown_family_is_refused_naming_the_adapters(tmp_path):
    (tmp_path / "config.json").write_text(
        json.dumps(
            {
                "model_type": "mystery_vlm",
                "architectures": ["MysteryVLM"],
                "auto_map": {"AutoConfig": "configuration_mystery.C", "AutoModel": "modeling_mystery.M"},
            }
        )
    )
    with pytest.raises(InputError, match="no adapter knows its calling convention") as err:
        load_backend("transformers", str(tmp_path), trust_remote_code=True)
    assert "minicpm-chat" in err.value.fix and "mplug-owl3" in err.value.fix and "molmo" in err.value.fix
    with pytest.raises(InputError, match="adapter=chat-glm is not a model adapter"):
        load_backend("transformers", str(tmp_path), trust_remote_code=True, adapter="chat-glm")
    with pytest.raises(InputError, match="image_placeholder applies to the generic adapters"):
        load_backend(
            "transformers",
            str(tmp_path),
            trust_remote_code=True,
            adapter="phi3-vision",
            image_placeholder="<|image_{n}|>",
        )


# ------------------------------------------------------------------------------------------ MiniCPM-V: model.chat
@pytest.mark.slow
def test_minicpm_chat_scores_common_o_with_both_images_the_question_and_greedy_settings(
    models, data_dir, rows, tmp_path
):
    backend = load_backend("transformers", str(models["minicpm-chat"]), trust_remote_code=True, images_per_request=2)
    results, preds = run(backend, data_dir, tmp_path / "run", batch_size=2)
    calls = backend.model.received
    assert [len(c["images"]) for c in calls] == [2, 1]  # batched: chat() got a list of two conversations, then one
    assert all(n == 2 for c in calls for n in c["images"])  # both images of every row reached the model
    prompts = [p for c in calls for p in c["prompts"]]
    assert all(p.startswith(f"<|im_start|>system\n{SYSTEM}<|im_end|>") for p in prompts)  # via chat(system_prompt=...)
    assert [p.count("(<image>./</image>)") for p in prompts] == [2, 2, 2]
    assert all(row["question"] in prompt for row, prompt in zip(rows, prompts))  # the row's question, verbatim
    assert all(
        c["generation_config"] == {"num_beams": 1, "repetition_penalty": 1.0} and c["max_new_tokens"] == 6
        for c in calls
    )
    # the scored text is what chat() returns when called the way VLMEvalKit's MiniCPM_V_2_6 calls it
    direct = backend.model.chat(
        image=None,
        msgs=[{"role": "user", "content": [*row_images(rows[0]), rows[0]["question"]]}],
        tokenizer=backend.tokenizer,
        sampling=False,
        num_beams=1,
        repetition_penalty=1.0,
        max_new_tokens=6,
        system_prompt=SYSTEM,
    )
    assert preds[0]["raw_output"] == direct and all(p["raw_output"] for p in preds)
    assert results["backend_details"]["adapter"] == "minicpm-chat"
    # batching does not change answers
    _, one_by_one = run(
        load_backend("transformers", str(models["minicpm-chat"]), trust_remote_code=True),
        data_dir,
        tmp_path / "run1",
        batch_size=1,
    )
    assert [p["raw_output"] for p in one_by_one] == [p["raw_output"] for p in preds]


@pytest.mark.slow
def test_minicpm_sampling_and_gen_args_reach_chat_and_ignored_ones_are_refused(models):
    backend = load_backend("transformers", str(models["minicpm-chat"]), trust_remote_code=True)
    request = GenerationRequest(
        "r", [Image.new("RGB", (40, 30), "red"), Image.new("RGB", (40, 30), "blue")], "Which objects"
    )
    sampled = [
        backend.generate([request], GenerationSettings(max_new_tokens=8, temperature=1.0, seed=s))[0] for s in (1, 1, 2)
    ]
    call = backend.model.received[-1]["generation_config"]
    assert call["do_sample"] is True and call["temperature"] == 1.0 and call["top_p"] == 1.0
    assert sampled[0] == sampled[1] != sampled[2]  # seeded sampling: same seed, same answer
    backend.generate([request], GenerationSettings(max_new_tokens=4, extra={"num_beams": 2, "repetition_penalty": 1.3}))
    assert backend.model.received[-1]["generation_config"] == {"num_beams": 2, "repetition_penalty": 1.3}
    with pytest.raises(
        InputError, match="--gen-arg bad_words_ids=... would be silently ignored by MiniCPM-V's chat"
    ) as err:
        backend.generate([request], GenerationSettings(max_new_tokens=4, extra={"bad_words_ids": [[5]]}))
    assert "num_beams" in err.value.fix
    # a --gen-arg that repeats an own setting is refused by the settings themselves, before any backend sees it
    with pytest.raises(InputError, match=r"--gen-arg temperature=\.\.\. duplicates an option"):
        GenerationSettings(max_new_tokens=4, extra={"temperature": 0.3})
    sliced = load_backend(
        "transformers", str(models["minicpm-chat"]), trust_remote_code=True, processor={"max_inp_length": 9}
    )
    sliced.generate([request], GenerationSettings(max_new_tokens=2))
    assert sliced.info.output_options == {"processor": {"max_inp_length": 9}}
    with pytest.raises(InputError, match=r"--backend-arg processor.num_beams=\.\.\. would be silently ignored"):
        load_backend("transformers", str(models["minicpm-chat"]), trust_remote_code=True, processor={"num_beams": 2})


# ------------------------------------------------------------------------------------------ mPLUG-Owl3
@pytest.mark.slow
def test_mplug_owl3_scores_common_o_through_init_processor_and_generate(models, data_dir, rows, tmp_path):
    backend = load_backend("transformers", str(models["mplug-owl3"]), trust_remote_code=True, images_per_request=2)
    _, preds = run(backend, data_dir, tmp_path / "run", batch_size=2)
    calls = backend.model.received
    assert len(calls) == 3 and all(
        c["image_views"] == 6 for c in calls
    )  # 2 images, each whole + 2 crops (cut_enable default)
    for row, call in zip(rows, calls):
        assert call["prompt"].startswith(f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n<|image|>")
        assert row["question"] in call["prompt"] and call["prompt"].endswith("<|im_start|>assistant\n")
        assert call["generate_kwargs"] == {"max_new_tokens": 6, "do_sample": False}
    # the scored text is what generate(decode_text=True) returns when called as in VLMEvalKit's mplug_owl3.py
    messages = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "<|image|><|image|>" + rows[0]["question"]},
        {"role": "assistant", "content": ""},
    ]
    inputs = backend.model.init_processor(backend.tokenizer)(messages, images=row_images(rows[0]), videos=None)
    assert (
        preds[0]["raw_output"]
        == backend.model.generate(
            **inputs, tokenizer=backend.tokenizer, max_new_tokens=6, decode_text=True, do_sample=False
        )[0]
    )


@pytest.mark.slow
def test_mplug_owl3_processor_options_and_gen_args_take_effect(models):
    uncut = load_backend(
        "transformers", str(models["mplug-owl3"]), trust_remote_code=True, processor={"cut_enable": False}
    )
    request = GenerationRequest(
        "r", [Image.new("RGB", (40, 30), "red"), Image.new("RGB", (40, 30), "blue")], "Which objects"
    )
    plain = uncut.generate([request], GenerationSettings(max_new_tokens=4))[0]
    assert uncut.model.received[-1]["image_views"] == 2 and uncut.info.output_options == {
        "processor": {"cut_enable": False}
    }
    ids = uncut.tokenizer(plain, add_special_tokens=False).input_ids
    banned = uncut.generate([request], GenerationSettings(max_new_tokens=4, extra={"bad_words_ids": [[ids[0]]]}))[0]
    assert banned != plain  # the first token was banned, so the answer changed
    with pytest.raises(InputError, match="refused the generation options"):
        uncut.generate([request], GenerationSettings(max_new_tokens=4, extra={"no_such_option": 1}))


# ------------------------------------------------------------------------------------------ Molmo
@pytest.mark.slow
def test_molmo_takes_one_image_so_common_o_runs_with_concatenated_pairs(models, data_dir, rows, tmp_path):
    with pytest.raises(InputError, match="sees one image a prompt") as err:
        evaluate_common_o(
            data_dir,
            "main",
            str(models["molmo"]),
            "transformers",
            tmp_path / "pairs",
            settings=SETTINGS,
            backend_options={"trust_remote_code": True},
            **FAST,
        )
    assert "--concat-images" in err.value.fix
    result = CliRunner().invoke(
        app,
        [
            "eval",
            "commono",
            "--model",
            str(models["molmo"]),
            "--data",
            str(data_dir),
            "--out",
            str(tmp_path / "run"),
            "--trust-remote-code",
            "--concat-images",
            "--image-protocol",
            "native",
            "--max-new-tokens",
            "6",
            "--system-prompt",
            SYSTEM,
            "--gen-arg",
            "repetition_penalty=1.1",
            "--quiet",
            "--allow-unparseable",  # the tiny model answers no letters
            "--bootstrap",
            "20",
        ],
    )
    assert result.exit_code == 0, result.output
    saved = json.loads((tmp_path / "run" / "results.json").read_text())
    assert saved["dataset"]["rows_scored"] == 3 and saved["backend_details"]["adapter"] == "molmo"
    preds = predictions(tmp_path / "run")
    assert all(p["raw_output"] for p in preds)
    # a multi-image request reaching the adapter anyway fails alone, with the reason
    backend = load_backend("transformers", str(models["molmo"]), trust_remote_code=True)
    pair = GenerationRequest("pair", row_images(rows[0]), rows[0]["question"])
    single = GenerationRequest("one", row_images(rows[0])[:1], rows[0]["question"])
    out = backend.generate([pair, single], SETTINGS)
    assert "sees one image a prompt" in out[0].reason and isinstance(out[1], str)
    with pytest.raises(
        InputError, match="--gen-arg repetition_penalt=... is not a transformers GenerationConfig field"
    ):
        backend.generate([single], GenerationSettings(max_new_tokens=4, extra={"repetition_penalt": 1.1}))
    call = backend.model.received[-1]
    assert (
        call["images"] == 1
        and call["generation_config"]["max_new_tokens"] == 6
        and call["generation_config"]["do_sample"] is False
    )
    text = backend.tokenizer.decode(call["prompt_ids"])
    assert (
        f"User: {SYSTEM}\n\n{rows[0]['question']} Assistant:" in text
    )  # no system turn in Molmo: it leads the question
    # what the CLI run scored is generate_from_batch's answer for the concatenated pair, called as VLMEvalKit's
    # molmo.py does
    import torch
    import transformers

    inputs = backend.processor.process(
        images=[concat_side_by_side(*row_images(rows[0]))], text=f"{SYSTEM}\n\n{concat_question(rows[0]['question'])}"
    )
    inputs = {k: v.unsqueeze(0) for k, v in inputs.items()}
    output = backend.model.generate_from_batch(
        inputs,
        transformers.GenerationConfig(
            max_new_tokens=6, stop_strings="<|endoftext|>", use_cache=True, do_sample=False, repetition_penalty=1.1
        ),
        tokenizer=backend.tokenizer,
    )
    assert torch.is_tensor(output)
    assert (
        preds[0]["raw_output"]
        == backend.tokenizer.decode(output[0, inputs["input_ids"].size(1) :], skip_special_tokens=True).strip()
    )


# ------------------------------------------------------------------------------------------ Phi-3-vision
@pytest.mark.slow
def test_phi3_vision_gets_one_prompt_string_with_numbered_image_tags(models, data_dir, rows, tmp_path):
    backend = load_backend("transformers", str(models["phi3-vision"]), trust_remote_code=True, images_per_request=2)
    _, preds = run(backend, data_dir, tmp_path / "run", batch_size=2)
    calls = backend.model.received
    assert len(calls) == 3 and all(c["images"] == 2 for c in calls)
    assert all(
        sum(1 for t in c["prompt_ids"] if t == -1) == 4 and sum(1 for t in c["prompt_ids"] if t == -2) == 4
        for c in calls
    )
    prompt = (
        f"<|system|>\n{SYSTEM}<|end|>\n<|user|>\n<|image_1|>\n<|image_2|>\n{rows[0]['question']}<|end|>\n"
        "<|assistant|>\n"
    )
    assert (
        backend.tokenizer.apply_chat_template(
            [
                {"role": "system", "content": SYSTEM},
                {"role": "user", "content": f"<|image_1|>\n<|image_2|>\n{rows[0]['question']}"},
            ],
            tokenize=False,
            add_generation_prompt=True,
        )
        == prompt
    )
    inputs = backend.processor(prompt, row_images(rows[0]), return_tensors="pt")
    assert calls[0]["prompt_ids"] == inputs["input_ids"][0].tolist()  # the adapter built exactly that prompt
    output = backend.model.generate(
        **inputs, eos_token_id=backend.tokenizer.eos_token_id, max_new_tokens=6, do_sample=False
    )
    assert (
        preds[0]["raw_output"]
        == backend.processor.batch_decode(
            output[:, inputs["input_ids"].shape[1] :], skip_special_tokens=True, clean_up_tokenization_spaces=False
        )[0]
    )
    with pytest.raises(TypeError):  # why the generic adapter cannot run it: the processor takes one string, not a batch
        backend.processor([prompt], row_images(rows[0]))


# ------------------------------------------------------------------------------------------ Qwen-VL-Chat
QWEN_GREEDY = {"max_new_tokens": 6, "do_sample": False, "top_p": None, "top_k": None, "temperature": None}


@pytest.mark.slow
def test_qwen_vl_chat_scores_common_o_through_from_list_format_and_chat_on_image_files(
    models, data_dir, rows, tmp_path
):
    backend = load_backend("transformers", str(models["qwen-vl-chat"]), trust_remote_code=True, images_per_request=2)
    results, preds = run(backend, data_dir, tmp_path / "run", batch_size=2)
    calls = backend.model.received
    assert len(calls) == 3 and results["backend_details"]["adapter"] == "qwen-vl-chat"
    for row, call, images in zip(rows, calls, map(row_images, rows)):
        first, second = call["image_paths"]
        # the model card's / VLMEvalKit's query: "Picture N: <img>PATH</img>\n" per image, then the question
        assert call["query"] == f"Picture 1: <img>{first}</img>\nPicture 2: <img>{second}</img>\n{row['question']}"
        assert call["system"] == SYSTEM and call["raw_text"].startswith(f"<|im_start|>system\n{SYSTEM}<|im_end|>")
        assert call["image_sizes"] == [img.size for img in images]  # the model opened the files the adapter wrote
        assert call["generation_config"] == {**QWEN_GREEDY, "repetition_penalty": None}  # greedy, not top_p 0.3
        assert not any(map(os.path.exists, call["image_paths"]))  # the temporary files are gone
    assert backend.model.generation_config.do_sample is True  # the model's own config is left as it was
    # the scored text is what chat() returns when called as the model card does, on the same pixels
    paths = []
    for n, image in enumerate(row_images(rows[0])):
        paths.append(str(tmp_path / f"direct{n}.png"))
        image.save(paths[-1])
    query = backend.tokenizer.from_list_format([{"image": p} for p in paths] + [{"text": rows[0]["question"]}])
    config = copy.deepcopy(backend.model.generation_config)
    config.update(max_new_tokens=6, do_sample=False, top_p=None, top_k=None, temperature=None)
    response, history = backend.model.chat(
        backend.tokenizer, query=query, history=None, system=SYSTEM, generation_config=config
    )
    assert preds[0]["raw_output"] == response and history == [(query, response)]
    assert all(isinstance(p["raw_output"], str) for p in preds)


@pytest.mark.slow
def test_qwen_vl_chat_sampling_gen_args_and_the_base_model(models, tmp_path):
    backend = load_backend("transformers", str(models["qwen-vl-chat"]), trust_remote_code=True)
    request = GenerationRequest("r", [Image.new("RGB", (40, 30), "red")], "Which objects")
    sampled = [
        backend.generate([request], GenerationSettings(max_new_tokens=8, temperature=1.0, seed=s))[0] for s in (1, 1, 2)
    ]
    call = backend.model.received[-1]["generation_config"]
    assert call["do_sample"] is True and call["temperature"] == 1.0 and call["top_p"] == 1.0 and call["top_k"] == 0
    assert sampled[0] == sampled[1] != sampled[2]  # seeded sampling: same seed, same answer
    backend.generate([request], GenerationSettings(max_new_tokens=4, extra={"repetition_penalty": 1.3}))
    assert backend.model.received[-1]["generation_config"] == {
        **QWEN_GREEDY,
        "max_new_tokens": 4,
        "repetition_penalty": 1.3,
    }
    assert backend.model.received[-1]["system"] == "You are a helpful assistant."  # no --system-prompt: chat()'s own
    with pytest.raises(InputError, match="--gen-arg repetition_penalt=... is not a field of Qwen-VL-Chat's"):
        backend.generate([request], GenerationSettings(max_new_tokens=4, extra={"repetition_penalt": 1.1}))
    # the base Qwen-VL (chat_format "raw") is not a chat model: refused when loaded, not request by request
    base = tmp_path / "qwen-vl-base"
    shutil.copytree(models["qwen-vl-chat"], base)
    generation = json.loads((base / "generation_config.json").read_text())
    (base / "generation_config.json").write_text(json.dumps({**generation, "chat_format": "raw"}))
    with pytest.raises(InputError, match="chat_format 'chatml'") as err:
        load_backend("transformers", str(base), trust_remote_code=True)
    assert "Qwen/Qwen-VL-Chat" in err.value.fix


# ------------------------------------------------------------------------------------------ interleaved prompts
@pytest.mark.slow
def test_interleaved_association_prompts_keep_image_and_text_order(models):
    images = [Image.new("RGB", (40 + i, 30), c) for i, c in enumerate(("red", "green", "blue"))]
    request = GenerationRequest(
        "step", images, ["Query:", ImageSlot(0), "Candidates:", ImageSlot(2), "or", ImageSlot(1), "Which?"]
    )
    settings = GenerationSettings(max_new_tokens=3)
    minicpm = load_backend("transformers", str(models["minicpm-chat"]), trust_remote_code=True, images_per_request=3)
    assert isinstance(minicpm.generate([request], settings)[0], str)
    call = minicpm.model.received[-1]
    assert (
        "Query:\n(<image>./</image>)\nCandidates:\n(<image>./</image>)\nor\n(<image>./</image>)\nWhich?"
        in call["prompts"][0]
    )
    assert call["image_sizes"] == [[(40, 30), (42, 30), (41, 30)]]  # the images in the order the prompt names them
    mplug = load_backend(
        "transformers",
        str(models["mplug-owl3"]),
        trust_remote_code=True,
        images_per_request=3,
        processor={"cut_enable": False},
    )
    mplug.generate([request], settings)
    assert (
        "Query:" + "<|image|>" * 4 + "Candidates:" in mplug.model.received[-1]["prompt"]
        and mplug.model.received[-1]["image_views"] == 3
    )
    phi3 = load_backend("transformers", str(models["phi3-vision"]), trust_remote_code=True, images_per_request=3)
    phi3.generate([request], settings)
    ids = phi3.model.received[-1]["prompt_ids"]
    assert [t for i, t in enumerate(ids) if t < 0 and (i == 0 or ids[i - 1] != t)] == [
        -1,
        -2,
        -3,
    ]  # tags numbered in prompt order
    qwen = load_backend("transformers", str(models["qwen-vl-chat"]), trust_remote_code=True, images_per_request=3)
    qwen.generate([request], settings)
    call = qwen.model.received[-1]
    p0, p1, p2 = call["image_paths"]
    assert call["query"] == f"Query:Picture 1: <img>{p0}</img>\nCandidates:Picture 2: <img>{p1}</img>\nor" + (
        f"Picture 3: <img>{p2}</img>\nWhich?"
    )
    assert call["image_sizes"] == [(40, 30), (42, 30), (41, 30)]  # in the order the prompt names them
    with pytest.raises(InputError, match="sees one image a prompt"):
        load_backend("transformers", str(models["molmo"]), trust_remote_code=True, images_per_request=3)
