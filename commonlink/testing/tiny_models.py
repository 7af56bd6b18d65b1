"""Offline stand-ins for tests and benchmarks: a tiny random LLaVA and small Common-O parquet splits.

Nothing is downloaded. :func:`build_tiny_llava` (and :func:`build_tiny_idefics3`) makes a randomly initialised LLaVA (CLIP vision tower +
Llama text model, a byte-level BPE tokenizer trained with ``tokenizers`` on the prompt words, a chat template)
and saves it with ``save_pretrained``, so it loads through the real ``from_pretrained`` path. Its outputs are
gibberish, but deterministic for given weights and inputs, which is what batching and resume checks need.
:func:`write_common_o_split` writes rows in the published ``facebook/Common-O`` schema (parquet with
``datasets`` Image features, list fields as strings in the chosen encoding).
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
from PIL import Image

from commonlink.constants import NO_COMMON_OBJECTS
from commonlink.formats.common_o import (
    PERCEPTION_PROMPT,
    common_o_features,
    common_o_question,
    letters,
)

CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }}: {% if m['content'] is string %}{{ m['content'] }}{% else %}"
    "{% for c in m['content'] %}{% if c['type'] == 'image' %}<image>{% else %}{{ c['text'] }}{% endif %}{% endfor %}"
    "{% endif %}\n{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}"
)

#: Gemma 3's layout: an image is <start_of_image> (the processor expands it), a system turn when given.
GEMMA_CHAT_TEMPLATE = (
    "{% for m in messages %}<start_of_turn>{{ m['role'] }}\n{% if m['content'] is string %}{{ m['content'] }}{% else %}"
    "{% for c in m['content'] %}{% if c['type'] == 'image' %}<start_of_image>{% else %}{{ c['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<end_of_turn>\n{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)

OBJECTS = ["apple", "keys", "spoon", "cup", "glass cup", "remote", "vase", "shoes", "mallard (fake duck)", "basketball", "candle", "marker"]


def build_tiny_llava(out_dir: str | Path, *, seed: int = 0, image_size: int = 32, patch_size: int = 8, layers: int = 2) -> Path:
    """Save a tiny random LLaVA (model + processor + chat template) to ``out_dir`` and return the path."""
    import torch
    from transformers import (
        CLIPVisionConfig,
        LlamaConfig,
        LlavaConfig,
        LlavaForConditionalGeneration,
        LlavaProcessor,
    )
    from transformers.models.llava.image_processing_pil_llava import (
        LlavaImageProcessorPil,
    )

    out_dir = Path(out_dir)
    tokenizer = bpe_tokenizer(["<pad>", "<s>", "</s>", "<unk>", "<image>"])
    image_processor = LlavaImageProcessorPil(size={"shortest_edge": image_size}, crop_size={"height": image_size, "width": image_size})
    processor = LlavaProcessor(
        image_processor=image_processor, tokenizer=tokenizer, patch_size=patch_size, vision_feature_select_strategy="default",
        num_additional_image_tokens=1, chat_template=CHAT_TEMPLATE,
    )
    vision = CLIPVisionConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, image_size=image_size, patch_size=patch_size, projection_dim=16)
    text = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=layers, num_attention_heads=2, num_key_value_heads=2,
        max_position_embeddings=2048, pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
    )
    config = LlavaConfig(vision_config=vision, text_config=text, image_token_index=tokenizer.convert_tokens_to_ids("<image>"),
                         vision_feature_select_strategy="default", vision_feature_layer=-1)
    torch.manual_seed(seed)
    model = LlavaForConditionalGeneration(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(out_dir)
    processor.save_pretrained(out_dir)
    return out_dir


def bpe_tokenizer(special_tokens: list[str], vocab_size: int = 400):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    corpus = [common_o_question(OBJECTS + [NO_COMMON_OBJECTS]), common_o_question(OBJECTS, concat=True), PERCEPTION_PROMPT, "Answer: " + ", ".join(letters(16)), "yes no"]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=special_tokens, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>", pad_token="<pad>")


def build_tiny_idefics3(out_dir: str | Path, *, seed: int = 0) -> Path:
    """Save a tiny random Idefics3 (SigLIP-style vision tower, pixel shuffle, Llama text model) to ``out_dir``."""
    import torch
    from transformers import (
        Idefics3Config,
        Idefics3ForConditionalGeneration,
        Idefics3Processor,
        Idefics3VisionConfig,
        LlamaConfig,
    )
    from transformers.models.idefics3.image_processing_pil_idefics3 import (
        Idefics3ImageProcessorPil,
    )

    out_dir = Path(out_dir)
    specials = ["<pad>", "<s>", "</s>", "<unk>", "<image>", "<fake_token_around_image>", "<end_of_utterance>", "<global-img>"]
    specials += [f"<row_{i + 1}_col_{j + 1}>" for i in range(6) for j in range(6)]
    tokenizer = bpe_tokenizer(specials)
    image_processor = Idefics3ImageProcessorPil(size={"longest_edge": 64}, max_image_size={"longest_edge": 32}, do_image_splitting=False)
    # image_seq_len = (image_size / patch_size)^2 / scale_factor^2 = (32 / 8)^2 / 2^2
    processor = Idefics3Processor(image_processor=image_processor, tokenizer=tokenizer, image_seq_len=4, chat_template=CHAT_TEMPLATE)
    vision = Idefics3VisionConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, image_size=32, patch_size=8)
    text = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
                       pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    torch.manual_seed(seed)
    model = Idefics3ForConditionalGeneration(Idefics3Config(vision_config=vision, text_config=text, image_token_id=tokenizer.convert_tokens_to_ids("<image>"), scale_factor=2))
    model.save_pretrained(out_dir)
    processor.save_pretrained(out_dir)
    return out_dir


REMOTE_CONFIG_CODE = """from transformers import LlavaConfig


class TinyRemoteConfig(LlavaConfig):
    model_type = "tiny_remote_vlm"
"""

REMOTE_MODEL_CODE = """from transformers import LlavaForConditionalGeneration

from .configuration_tiny_remote import TinyRemoteConfig


class TinyRemoteForCausalLM(LlavaForConditionalGeneration):
    config_class = TinyRemoteConfig
"""


def build_remote_code_vlm(out_dir: str | Path, *, seed: int = 0) -> Path:
    """A tiny model that ships its own code (``auto_map`` in config.json), registered only for
    ``AutoModelForCausalLM``: transformers loads it only with ``trust_remote_code=True``, and then the generic
    causal-LM adapter runs it with the processor and chat template.

    The code is a thin subclass of LLaVA (so it runs offline); what matters is the loading path it exercises.
    Families whose code brings its own entry point (MiniCPM-V, Molmo, mPLUG-Owl3, Phi-3-vision) are modelled in
    :mod:`commonlink.testing.remote_code_models`.
    """
    out_dir = build_tiny_llava(out_dir, seed=seed)
    (out_dir / "configuration_tiny_remote.py").write_text(REMOTE_CONFIG_CODE, encoding="utf-8")
    (out_dir / "modeling_tiny_remote.py").write_text(REMOTE_MODEL_CODE, encoding="utf-8")
    config = json.loads((out_dir / "config.json").read_text(encoding="utf-8"))
    config.update(model_type="tiny_remote_vlm", architectures=["TinyRemoteForCausalLM"],
                  auto_map={"AutoConfig": "configuration_tiny_remote.TinyRemoteConfig", "AutoModelForCausalLM": "modeling_tiny_remote.TinyRemoteForCausalLM"})
    (out_dir / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    return out_dir


def build_tiny_gemma3(out_dir: str | Path, *, seed: int = 0) -> Path:
    """Save a tiny random Gemma 3 (SigLIP vision tower, average-pooled soft tokens, Gemma 3 text model) to ``out_dir``.

    transformers maps Gemma 3 in both ``AutoModelForImageTextToText`` and ``AutoModelForCausalLM``, so it
    exercises the causal-LM-plus-processor adapter (``--backend-arg adapter=causal-lm``) with a real model.
    """
    import torch
    from tokenizers import Tokenizer
    from transformers import (
        Gemma3Config,
        Gemma3ForConditionalGeneration,
        Gemma3Processor,
        PreTrainedTokenizerFast,
    )
    from transformers.models.gemma3.image_processing_pil_gemma3 import (
        Gemma3ImageProcessorPil,
    )

    out_dir = Path(out_dir)
    specials = ["<pad>", "<s>", "</s>", "<unk>", "<start_of_image>", "<end_of_image>", "<image_soft_token>"]
    base = bpe_tokenizer(specials)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(base.backend_tokenizer.to_str()), bos_token="<s>", eos_token="</s>", unk_token="<unk>", pad_token="<pad>",
        extra_special_tokens={"boi_token": "<start_of_image>", "eoi_token": "<end_of_image>", "image_token": "<image_soft_token>"},
    )
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in specials}
    image_processor = Gemma3ImageProcessorPil(size={"height": 32, "width": 32})
    # (32 / 8)^2 = 16 patches, average-pooled to mm_tokens_per_image = 4 soft tokens
    processor = Gemma3Processor(image_processor=image_processor, tokenizer=tokenizer, chat_template=GEMMA_CHAT_TEMPLATE, image_seq_length=4)
    vision = dict(model_type="siglip_vision_model", hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, image_size=32, patch_size=8)
    text = dict(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, head_dim=16,
                sliding_window=64, pad_token_id=ids["<pad>"], bos_token_id=ids["<s>"], eos_token_id=ids["</s>"])
    config = Gemma3Config(text_config=text, vision_config=vision, mm_tokens_per_image=4, boi_token_index=ids["<start_of_image>"],
                          eoi_token_index=ids["<end_of_image>"], image_token_index=ids["<image_soft_token>"])
    torch.manual_seed(seed)
    model = Gemma3ForConditionalGeneration(config)
    model.generation_config.pad_token_id = ids["<pad>"]
    model.save_pretrained(out_dir)
    processor.save_pretrained(out_dir)
    return out_dir


def encode_list(values: list[str], encoding: str) -> str:
    """A list as the published schema stores it: ``json``, ``python`` literal or ``comma``-separated text."""
    if encoding == "json":
        return json.dumps(values)
    if encoding == "python":
        return repr(list(values))
    if encoding == "comma":
        return ", ".join(values)
    raise ValueError(f"unknown list encoding {encoding!r}")


def _png(rng: np.random.Generator, size: tuple[int, int]) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 255, (size[1], size[0], 3), dtype=np.uint8)).save(buf, format="PNG")
    return buf.getvalue()


def common_o_rows(n: int, *, seed: int = 0, encoding: str = "json", image_size: tuple[int, int] = (64, 48), num_choices: int = 6) -> list[dict]:
    """``n`` rows in the published column layout, with random images and consistent objects/choices/answers."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        objects_1 = [str(o) for o in rng.choice(OBJECTS, size=3, replace=False)]
        common = list(objects_1[: int(rng.integers(0, 3))])
        others = [o for o in OBJECTS if o not in objects_1]
        objects_2 = common + [str(o) for o in rng.choice(others, size=3 - len(common), replace=False)]
        pool = sorted(set(objects_1) | set(objects_2))
        choices = [str(c) for c in rng.permutation(pool)][: num_choices - 1]
        # common objects cut off by the choice limit take the places of other objects, last first
        free = [k for k in range(len(choices) - 1, -1, -1) if choices[k] not in common]
        for k, c in zip(free, [c for c in common if c not in choices]):
            choices[k] = c
        choices.insert(int(rng.integers(0, len(choices) + 1)), NO_COMMON_OBJECTS)
        truth = common or [NO_COMMON_OBJECTS]
        labels = letters(len(choices))
        answer = ", ".join(sorted(labels[choices.index(t)] for t in truth))
        rows.append(
            {
                "image_1": {"bytes": _png(rng, image_size), "path": None},
                "image_2": {"bytes": _png(rng, image_size), "path": None},
                "question": common_o_question(choices),
                "answer": answer,
                "objects_1": encode_list(objects_1, encoding),
                "objects_2": encode_list(objects_2, encoding),
                "num_objects_image_1": len(objects_1),
                "num_objects_image_2": len(objects_2),
                "question_template": "which_objects_in_both_v1",
                "answer_type": "multiple_choice",
                "choices": encode_list(choices, encoding),
                "num_choices": len(choices),
                "num_ground_truth_objects": len(common),
                "real_or_synthetic": "real" if i % 2 == 0 else "synthetic",
                "ground_truth_objects": encode_list(truth, encoding),
            }
        )
    return rows


def write_common_o_split(out_dir: str | Path, rows: list[dict], *, split: str = "main", shards: int = 1) -> Path:
    """Write ``rows`` as ``out_dir/data/{split}-0000i-of-0000n.parquet`` with the published features."""
    from datasets import Dataset

    out_dir = Path(out_dir)
    (out_dir / "data").mkdir(parents=True, exist_ok=True)
    features = common_o_features(provenance=False)
    bounds = np.linspace(0, len(rows), shards + 1).astype(int)
    for k in range(shards):
        part = Dataset.from_list(rows[bounds[k] : bounds[k + 1]], features=features)
        part.to_parquet(str(out_dir / "data" / f"{split}-{k:05d}-of-{shards:05d}.parquet"))
    return out_dir
