"""Which calling convention a transformers model needs: the adapter names, and picking one from config.json.

Models transformers knows natively load through an auto class (the *generic* adapters). Models that ship their own
code either register one of those auto classes too (then a generic adapter runs them with the processor and chat
template) or expose their own inference entry point, which only a *family* adapter knows how to call
(``remote_code_adapters``). ``adapter=auto`` reads ``model_type`` / ``architectures`` / ``auto_map`` from the
model's config.json -- without running any of its code -- to choose.
"""

from __future__ import annotations

from commonlink.errors import BackendError, InputError

#: Generic adapters: adapter name -> transformers auto class (``auto`` tries them in this order).
GENERIC_ADAPTERS = {
    "image-text-to-text": "AutoModelForImageTextToText",
    "vision2seq": "AutoModelForVision2Seq",
    "causal-lm": "AutoModelForCausalLM",
}
#: Adapters for remote-code families with their own calling convention (see remote_code_adapters.py).
FAMILY_ADAPTERS = ("phi3-vision", "minicpm-chat", "molmo", "mplug-owl3", "qwen-vl-chat")
ADAPTERS = ("auto", *GENERIC_ADAPTERS, *FAMILY_ADAPTERS)
FAMILY_NAMES = {
    "phi3-vision": "Phi-3-vision",
    "minicpm-chat": "MiniCPM-V",
    "molmo": "Molmo",
    "mplug-owl3": "mPLUG-Owl3",
    "qwen-vl-chat": "Qwen-VL-Chat",
}

#: Why Molmo takes one image a prompt (so Common-O needs --concat-images and association steps cannot run).
MOLMO_SEES_ONE_IMAGE = (
    "Molmo's processor puts every image at the start of the prompt and maps each image's patches onto the token "
    "positions of the first one (image_preprocessing_molmo.py, multimodal_preprocess), so the model sees one image a "
    "prompt"
)
#: The most images a request may carry, for families that cannot take more.
FAMILY_MAX_IMAGES = {"molmo": 1}

#: ``model_type`` and ``architectures`` values of the families' published config.json files.
FAMILY_MODEL_TYPES = {
    "phi3_v": "phi3-vision",
    "minicpmv": "minicpm-chat",
    "minicpmo": "minicpm-chat",
    "molmo": "molmo",
    "mplugowl3": "mplug-owl3",
}
FAMILY_ARCHITECTURES = {
    "Phi3VForCausalLM": "phi3-vision",
    "MiniCPMV": "minicpm-chat",
    "MiniCPMO": "minicpm-chat",
    "MolmoForCausalLM": "molmo",
    "mPLUGOwl3Model": "mplug-owl3",
}


def read_model_config(model: str, revision: str | None = None) -> dict | None:
    """The model's config.json as a dict (local folder, Hub cache or Hub), or None when it cannot be read.
    Nothing of the model's own code is imported."""
    from transformers import PretrainedConfig

    try:
        config, _ = PretrainedConfig.get_config_dict(str(model), revision=revision)
    except (OSError, ValueError):
        return None
    return config


def is_qwen_vl_v1(config: dict) -> bool:
    """Qwen-VL(-Chat) v1: model_type ``qwen`` (shared with the text-only Qwen v1) with a ``visual`` tower block."""
    return config.get("model_type") == "qwen" and "visual" in config


def family_of(config: dict) -> str | None:
    """The family adapter for a config, from its ``model_type`` or ``architectures``; None if not a known family."""
    if is_qwen_vl_v1(config):
        return "qwen-vl-chat"
    if config.get("model_type") in FAMILY_MODEL_TYPES:
        return FAMILY_MODEL_TYPES[config["model_type"]]
    return next((FAMILY_ARCHITECTURES[a] for a in config.get("architectures") or () if a in FAMILY_ARCHITECTURES), None)


def resolve_adapter(adapter: str, config: dict | None, *, model: str, trust_remote_code: bool) -> str:
    """The adapter to use: ``adapter`` itself unless ``auto``; for ``auto`` a known family's adapter, else
    ``auto`` (the generic classes in turn). A model with its own code that registers none of the generic auto
    classes and is of no known family is refused, naming the adapters to choose from."""
    if adapter not in ADAPTERS:
        raise InputError(
            f"--backend-arg adapter={adapter} is not a model adapter.", f"Use one of: {', '.join(ADAPTERS)}."
        )
    if config is not None and is_qwen_vl_v1(config) and adapter in GENERIC_ADAPTERS:
        raise InputError(
            f"{model!r} is Qwen-VL(-Chat) v1, which answers through its own chat() and tokenizer.from_list_format(), "
            f"not the {adapter} adapter (as a plain causal LM it would get prompts it was not trained on).",
            "Use --backend-arg adapter=qwen-vl-chat (or leave adapter at auto), with --trust-remote-code.",
        )
    if adapter != "auto" or config is None:
        return adapter
    family = family_of(config)
    auto_map = config.get("auto_map") or {}
    if family and auto_map and not trust_remote_code:
        raise BackendError(
            f"{model!r} is a {FAMILY_NAMES[family]} model, which ships its own Python code that runs only with your "
            "consent.",
            "Add --trust-remote-code if you trust the code of this model (read it first).",
        )
    if family:
        return family
    if auto_map and trust_remote_code and not set(auto_map) & set(GENERIC_ADAPTERS.values()):
        raise InputError(
            f"{model!r} ships its own code (auto_map: {', '.join(sorted(auto_map))}; model_type "
            f"{config.get('model_type')!r}, "
            f"architectures {config.get('architectures')}) and no adapter knows its calling convention.",
            f"If it follows one of the supported conventions, name it: --backend-arg adapter=NAME with NAME one of "
            f"{', '.join(ADAPTERS[1:])} (see docs/eval.md, 'Model adapters').",
        )
    return "auto"
