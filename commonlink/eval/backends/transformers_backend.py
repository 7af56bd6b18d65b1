"""Local inference with Hugging Face transformers: ``AutoProcessor`` + ``AutoModelForImageTextToText``.

The model's own chat template places the images (``{"type": "image"}`` parts) and the text; generation is
batched with left padding (so every row's answer starts right after its prompt) and greedy by default.
dtype/device follow the hardware: bf16 (or fp16 where bf16 is unsupported) spread over the visible GPUs with
``device_map="auto"``, fp32 on CPU.

Batch invariance: on CPU in fp32 outputs at batch size 1 and 4 are identical (tested); sampled decoding
(``temperature > 0``) runs each request alone from the seed, so it is batch invariant too. On GPUs, kernels for
different batch shapes may round differently in bf16 and flip a rare greedy token, so the default batch size
is 1 (the safe setting); ``--batch-size N`` trades that guarantee for speed.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from commonlink.errors import BackendError, InputError, MissingDependencyError
from commonlink.eval.backends.base import (
    BackendInfo,
    GenerationRequest,
    GenerationSettings,
    RequestFailure,
    free_accelerator_memory,
    message_parts,
)
from commonlink.eval.backends.fingerprint import model_fingerprint


def _import_torch_transformers():
    try:
        import torch
    except ImportError as exc:
        raise MissingDependencyError("torch", "eval", "The transformers backend") from exc
    try:
        import transformers
    except ImportError as exc:
        raise MissingDependencyError("transformers", "eval", "The transformers backend") from exc
    return torch, transformers


def choose_dtype_and_device(dtype: str = "auto", device: str = "auto"):
    """(torch dtype, device_map or device) for the hardware: bf16/fp16 + ``device_map="auto"`` on GPU, fp32 on CPU."""
    torch, _ = _import_torch_transformers()
    cuda = torch.cuda.is_available()
    if device == "auto":
        device = "auto" if cuda else "cpu"
    on_gpu = device == "auto" and cuda or device.startswith("cuda")
    if dtype == "auto":
        if on_gpu:
            torch_dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        else:
            torch_dtype = torch.float32
    else:
        names = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32", "half": "float16", "float": "float32"}
        torch_dtype = getattr(torch, names.get(dtype, dtype), None)
        if not isinstance(torch_dtype, torch.dtype):
            raise InputError(f"--dtype {dtype!r} is not a torch dtype.", "Use auto, bfloat16, float16 or float32.")
    return torch_dtype, device


def planned_info(model: str, *, revision: str | None = None, dtype: str = "auto", attn_implementation: str | None = None, **_) -> BackendInfo:
    """What the backend for ``model`` will report, known without loading it (for cache keys)."""
    try:
        import torch

        on_gpu = torch.cuda.is_available()
    except ImportError:
        on_gpu = False
    # Only explicit choices: "auto" stays "auto" so a CPU merge of GPU shards still finds their answers.
    options = {k: v for k, v in (("dtype", None if dtype == "auto" else dtype), ("attn_implementation", attn_implementation)) if v is not None}
    return BackendInfo(backend="transformers", model=str(model), fingerprint=model_fingerprint(str(model), revision),
                       batch_invariant=not on_gpu, default_batch_size=1, output_options=options)


class TransformersBackend:
    """A VLM loaded with transformers; ``generate`` runs one padded batch."""

    def __init__(
        self,
        model: str,
        *,
        revision: str | None = None,
        dtype: str = "auto",
        device: str = "auto",
        trust_remote_code: bool = False,
        attn_implementation: str | None = None,
    ):
        torch, transformers = _import_torch_transformers()
        self._torch = torch
        torch_dtype, device_arg = choose_dtype_and_device(dtype, device)
        load_kwargs = dict(revision=revision, trust_remote_code=trust_remote_code)
        try:
            self.processor = transformers.AutoProcessor.from_pretrained(model, **load_kwargs)
            model_kwargs = dict(load_kwargs, dtype=torch_dtype)
            if attn_implementation:
                model_kwargs["attn_implementation"] = attn_implementation
            if device_arg == "auto":
                model_kwargs["device_map"] = "auto"
            self.model = transformers.AutoModelForImageTextToText.from_pretrained(model, **model_kwargs)
        except (OSError, ValueError, KeyError) as exc:
            raise BackendError(
                f"Could not load {model!r} with AutoProcessor/AutoModelForImageTextToText ({exc}).",
                "Give a local folder or a Hub id of an image-text-to-text model (e.g. Qwen/Qwen2.5-VL-7B-Instruct); "
                "models with custom code also need --trust-remote-code.",
            ) from exc
        if device_arg != "auto":
            self.model.to(device_arg)
        self.model.eval()
        self.tokenizer = getattr(self.processor, "tokenizer", None)
        if self.tokenizer is None:
            raise BackendError(f"{model!r}: the processor has no tokenizer.", "Use a processor that bundles a tokenizer.")
        self.tokenizer.padding_side = "left"  # answers must start right after each prompt in a batch
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        if not getattr(self.processor, "chat_template", None) and not getattr(self.tokenizer, "chat_template", None):
            raise BackendError(
                f"{model!r} has no chat template, so the images and prompt cannot be formatted for it.",
                "Use an instruction-tuned checkpoint that ships a chat template (chat_template.jinja).",
            )
        self.generate_seconds = 0.0
        self.info = planned_info(model, revision=revision, dtype=dtype, attn_implementation=attn_implementation)
        self.info.details.update({
                "dtype": str(torch_dtype).replace("torch.", ""),
                "device": str(getattr(self.model, "hf_device_map", None) or self.model.device),
                "revision": revision,
                "transformers_version": transformers.__version__,
                "torch_version": torch.__version__,
                "model_class": type(self.model).__name__,
                "padding_side": "left",
            })

    def _chat_text(self, request: GenerationRequest) -> str:
        content = [{"type": "image"} if kind == "image" else {"type": "text", "text": value} for kind, value in message_parts(request)]
        conversation = [{"role": "user", "content": content}]
        return self.processor.apply_chat_template(conversation, add_generation_prompt=True, tokenize=False)

    def generate(self, requests: Sequence[GenerationRequest], settings: GenerationSettings) -> list[str | RequestFailure]:
        torch = self._torch
        if not settings.greedy and len(requests) > 1:
            # One random stream per batch would make a row's sample depend on its batch mates (and change on
            # resume): sample each request alone, from the seed.
            return [self.generate([request], settings)[0] for request in requests]
        texts = [self._chat_text(r) for r in requests]
        images = [[img.convert("RGB") for kind, img in message_parts(r) if kind == "image"] for r in requests]
        try:
            inputs = self.processor(text=texts, images=images if any(images) else None, return_tensors="pt", padding=True)
        except (ValueError, TypeError) as exc:
            if len(requests) == 1:
                return [RequestFailure(f"processor rejected the input ({exc})")]
            # One bad request must not sink its batch: redo them one by one so only that one fails.
            return [self.generate([request], settings)[0] for request in requests]
        inputs = inputs.to(self.model.device)
        if "pixel_values" in inputs and torch.is_floating_point(inputs["pixel_values"]):
            inputs["pixel_values"] = inputs["pixel_values"].to(self.model.dtype)
        gen_kwargs = dict(max_new_tokens=settings.max_new_tokens, pad_token_id=self.tokenizer.pad_token_id)
        if settings.greedy:
            gen_kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        else:
            torch.manual_seed(settings.seed)
            gen_kwargs.update(do_sample=True, temperature=settings.temperature, top_p=settings.top_p)
        start = time.perf_counter()
        with torch.inference_mode():
            output = self.model.generate(**inputs, **gen_kwargs)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        self.generate_seconds += time.perf_counter() - start
        new_tokens = output[:, inputs["input_ids"].shape[1] :]
        return list(self.tokenizer.batch_decode(new_tokens, skip_special_tokens=True))

    def close(self) -> None:
        del self.model

        free_accelerator_memory()
