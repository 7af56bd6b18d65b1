"""Tiny random models that ship their own code, with the calling conventions of real remote-code VLM families.

Each builder writes a model folder that loads only with ``trust_remote_code=True``: ``config.json`` with the
family's ``model_type``, ``architectures`` and ``auto_map``, its Python files (from
``commonlink/testing/data/remote_code/<family>/`` plus ``tiny_vlm_core.py``), a byte-level BPE tokenizer with the
family's special tokens and chat template, and random weights saved with ``save_pretrained``. The code keeps each
family's entry point signature and message handling (each file names the real source it follows) around a tiny
Llama text model and a pixel projector, so answers are decoded from tokens the model really generated from the
images and prompt it received. Every call is recorded on ``model.received`` for tests.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from commonlink.testing.tiny_models import bpe_tokenizer

SOURCES = Path(__file__).parent / "data" / "remote_code"

#: ChatML, as the Qwen-based families (MiniCPM-V 2.6, mPLUG-Owl3) use.
CHATML_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


INIT_RANGE = 0.5


def _text_config(vocab_size: int) -> dict:
    # a wide initializer so that the random model's answers depend visibly on the images and prompt it gets
    return {"vocab_size": vocab_size, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
            "num_key_value_heads": 2, "max_position_embeddings": 4096, "pad_token_id": 0, "initializer_range": INIT_RANGE}


def _write_model(out_dir: Path, family: str, config: dict, tokenizer, *, seed: int, auto_class: str) -> Path:
    import torch
    import transformers

    out_dir.mkdir(parents=True, exist_ok=True)
    for source in [SOURCES / "tiny_vlm_core.py", *sorted((SOURCES / family).glob("*.py"))]:
        shutil.copyfile(source, out_dir / source.name)
    config.setdefault("initializer_range", INIT_RANGE)
    (out_dir / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    tokenizer.save_pretrained(out_dir)
    loaded = transformers.AutoConfig.from_pretrained(str(out_dir), trust_remote_code=True)
    torch.manual_seed(seed)
    model = getattr(transformers, auto_class).from_config(loaded, trust_remote_code=True)
    model.save_pretrained(out_dir)
    return out_dir


def build_minicpmv_double(out_dir: str | Path, *, seed: int = 0) -> Path:
    """MiniCPM-V 2.6's convention: ``AutoModel`` + ``AutoTokenizer``, answers from ``model.chat(...)``."""
    tokenizer = bpe_tokenizer(["<pad>", "<s>", "</s>", "<unk>", "<image>", "</image>", "<|im_start|>", "<|im_end|>", "<|endoftext|>"])
    tokenizer.chat_template = CHATML_TEMPLATE
    config = {
        "model_type": "minicpmv", "architectures": ["MiniCPMV"], "query_num": 4, "llm_config": _text_config(len(tokenizer)),
        "auto_map": {"AutoConfig": "configuration_minicpm.MiniCPMVConfig", "AutoModel": "modeling_minicpmv.MiniCPMV",
                     "AutoModelForCausalLM": "modeling_minicpmv.MiniCPMV"},
    }
    return _write_model(Path(out_dir), "minicpmv", config, tokenizer, seed=seed, auto_class="AutoModel")


def build_mplug_owl3_double(out_dir: str | Path, *, seed: int = 0) -> Path:
    """mPLUG-Owl3's convention: ``AutoModel`` + ``AutoTokenizer``, ``model.init_processor(tokenizer)``,
    ``<|image|>`` tags in the messages, answers from ``model.generate(..., decode_text=True)``."""
    tokenizer = bpe_tokenizer(["<pad>", "<s>", "</s>", "<unk>", "<|image|>", "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|endofchunk|>"])
    config = {
        "model_type": "mplugowl3", "architectures": ["mPLUGOwl3Model"], "llm_config": _text_config(len(tokenizer)),
        "auto_map": {"AutoConfig": "configuration_mplugowl3.mPLUGOwl3Config", "AutoModel": "modeling_mplugowl3.mPLUGOwl3Model"},
    }
    return _write_model(Path(out_dir), "mplugowl3", config, tokenizer, seed=seed, auto_class="AutoModel")


def build_molmo_double(out_dir: str | Path, *, seed: int = 0) -> Path:
    """Molmo's convention: ``AutoModelForCausalLM`` + ``AutoProcessor``, ``processor.process(images=, text=)``,
    answers from ``model.generate_from_batch(inputs, GenerationConfig(...), tokenizer=processor.tokenizer)``."""
    tokenizer = bpe_tokenizer(["<pad>", "<s>", "</s>", "<unk>", "<im_start>", "<im_end>", "<im_patch>", "<im_col>", "<|image|>", "<|endoftext|>"])
    config = {
        "model_type": "molmo", "architectures": ["MolmoForCausalLM"], "llm_config": _text_config(len(tokenizer)),
        "auto_map": {"AutoConfig": "config_molmo.MolmoConfig", "AutoModelForCausalLM": "modeling_molmo.MolmoForCausalLM"},
    }
    out_dir = _write_model(Path(out_dir), "molmo", config, tokenizer, seed=seed, auto_class="AutoModelForCausalLM")
    _write_processor_config(out_dir, "MolmoProcessor", "preprocessing_molmo.MolmoProcessor")
    return out_dir


#: Phi-3-vision's chat template layout (tokenizer_config.json of microsoft/Phi-3-vision-128k-instruct).
PHI3_TEMPLATE = (
    "{% for message in messages %}{{'<|' + message['role'] + '|>' + '\n' + message['content'] + '<|end|>\n' }}{% endfor %}"
    "{% if add_generation_prompt and messages[-1]['role'] != 'assistant' %}{{- '<|assistant|>\n' -}}{% endif %}"
)


def build_phi3_vision_double(out_dir: str | Path, *, seed: int = 0) -> Path:
    """Phi-3-vision's convention: ``AutoModelForCausalLM`` + ``AutoProcessor``; one prompt string from the
    tokenizer's chat template with ``<|image_N|>`` tags, ``processor(prompt, images)``, ``model.generate``."""
    tokenizer = bpe_tokenizer(["<pad>", "<s>", "</s>", "<unk>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>", "<|endoftext|>"])
    tokenizer.chat_template = PHI3_TEMPLATE
    config = dict(_text_config(len(tokenizer)), model_type="phi3_v", architectures=["Phi3VForCausalLM"], bos_token_id=1, eos_token_id=2,
                  auto_map={"AutoConfig": "configuration_phi3_v.Phi3VConfig", "AutoModelForCausalLM": "modeling_phi3_v.Phi3VForCausalLM"})
    out_dir = _write_model(Path(out_dir), "phi3v", config, tokenizer, seed=seed, auto_class="AutoModelForCausalLM")
    _write_processor_config(out_dir, "Phi3VProcessor", "processing_phi3_v.Phi3VProcessor")
    return out_dir


def _write_processor_config(out_dir: Path, processor_class: str, auto_processor: str) -> None:
    config = {"processor_class": processor_class, "auto_map": {"AutoProcessor": auto_processor}}
    (out_dir / "processor_config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
