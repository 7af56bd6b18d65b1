"""Local inference with Hugging Face transformers: a model adapter loads the model and calls it its family's way.

Model adapters (``--backend-arg adapter=...``; ``model_class`` is an older name for the same option):

* ``auto`` (default): a model whose config.json names a remote-code family (``model_type`` / ``architectures``,
  see ``model_families``) gets that family's adapter; any other model tries ``AutoModelForImageTextToText``, then
  ``AutoModelForVision2Seq`` (transformers 4.x; folded into the first in 5.x), then ``AutoModelForCausalLM`` with
  the processor. A model with its own code of no known family that registers none of those classes is refused
  with the list of adapters.
* generic: ``image-text-to-text``, ``vision2seq`` or ``causal-lm``: ``AutoProcessor`` + that auto class; the
  model's own chat template places the images (``{"type": "image"}`` parts) and the text; batched with left
  padding.
* family (``remote_code_adapters``; they need ``--trust-remote-code``): ``minicpm-chat`` (MiniCPM-V's
  ``model.chat``), ``molmo`` (``generate_from_batch``), ``mplug-owl3`` (``init_processor`` + ``generate``),
  ``phi3-vision`` (one prompt string with ``<|image_N|>`` tags).

Models with their own code load only with ``--trust-remote-code`` (the user's explicit choice; never on by
default). ``processor.KEY=VALUE`` backend args are processor options: for the generic adapters and phi3-vision
they go to ``AutoProcessor.from_pretrained`` (e.g. Qwen's ``min_pixels`` / ``max_pixels``), for molmo to
``processor.process``, for mplug-owl3 to the processor call (``cut_enable``), for minicpm-chat to ``chat``
(``max_slice_nums``, ``max_inp_length``, ...). ``model.KEY=VALUE`` go to the model's ``from_pretrained``;
``image_placeholder`` (e.g. ``<|image_{n}|>``) formats prompts for generic chat templates that take plain-text
content with numbered image tags. Greedy decoding by default.
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
    chat_messages,
    check_local_model,
    free_accelerator_memory,
    message_parts,
)
from commonlink.eval.backends.fingerprint import model_fingerprint
from commonlink.eval.backends.model_families import (
    FAMILY_ADAPTERS,
    FAMILY_MAX_IMAGES,
    GENERIC_ADAPTERS,
    MOLMO_SEES_ONE_IMAGE,
    read_model_config,
    resolve_adapter,
)
from commonlink.eval.backends.remote_code_adapters import FAMILY_CLASSES


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
            raise InputError(
                f"--backend-arg dtype={dtype!r} is not a torch dtype.", "Use auto, bfloat16, float16 or float32."
            )
    return torch_dtype, device


MODEL_CLASSES = GENERIC_ADAPTERS


def chosen_adapter(adapter: str, model_class: str | None) -> str:
    """``adapter``, or ``model_class`` (its older name) when only that was given."""
    if model_class is not None and adapter not in ("auto", model_class):
        raise InputError(
            f"--backend-arg adapter={adapter} and model_class={model_class} disagree.",
            "Give only adapter=... (model_class is its older name).",
        )
    return model_class or adapter


def planned_info(
    model: str,
    *,
    revision: str | None = None,
    dtype: str = "auto",
    attn_implementation: str | None = None,
    adapter: str = "auto",
    model_class: str | None = None,
    processor: dict | None = None,
    model_kwargs: dict | None = None,
    image_placeholder: str | None = None,
    **_,
) -> BackendInfo:
    """What the backend for ``model`` will report, known without loading it (for cache keys)."""
    try:
        import torch

        on_gpu = torch.cuda.is_available()
    except ImportError:
        on_gpu = False
    # Only explicit choices: "auto" stays "auto" so a CPU merge of GPU shards still finds their answers.
    adapter = chosen_adapter(adapter, model_class)
    chosen = (
        ("dtype", None if dtype == "auto" else dtype),
        ("attn_implementation", attn_implementation),
        ("adapter", None if adapter == "auto" else adapter),
        ("processor", processor or None),
        ("model", model_kwargs or None),
        ("image_placeholder", image_placeholder),
    )
    options = {k: v for k, v in chosen if v is not None}
    return BackendInfo(
        backend="transformers",
        model=str(model),
        fingerprint=model_fingerprint(str(model), revision),
        batch_invariant=not on_gpu,
        default_batch_size=1,
        output_options=options,
    )


def _model_classes(transformers, model_class: str) -> list:
    if model_class == "auto":
        names = list(MODEL_CLASSES.values())
    else:
        names = [MODEL_CLASSES[model_class]]
    classes = [getattr(transformers, n) for n in names if hasattr(transformers, n)]
    if not classes:
        raise InputError(
            f"transformers {transformers.__version__} has no {names[0]}.",
            "Use --backend-arg model_class=image-text-to-text (Vision2Seq models moved there in transformers 5).",
        )
    return classes


def _remote_code_refused(exc: BaseException) -> bool:
    return "trust_remote_code" in str(exc)


def load_model(transformers, model: str, model_class: str, kwargs: dict):
    """The model loaded with the first auto class that knows its configuration (see the module docstring)."""
    tried = []
    for cls in _model_classes(transformers, model_class):
        try:
            return cls.from_pretrained(model, **kwargs)
        except ValueError as exc:
            if _remote_code_refused(exc) or "Unrecognized configuration class" not in str(exc):
                raise
            tried.append(cls.__name__)
    raise BackendError(
        f"{model!r}: none of {', '.join(tried)} knows this model's configuration.",
        "If the model ships its own code (auto_map in config.json), add --trust-remote-code (only for code you trust); "
        "otherwise it is not a generative vision-language model transformers can load.",
    )


def _rgb(img):
    """``img`` in RGB: as it is when it already is (``convert`` would copy every pixel of every image)."""
    return img if img.mode == "RGB" else img.convert("RGB")


class TransformersBackend:
    """A VLM loaded with transformers; ``generate`` runs one padded batch."""

    planned_info = staticmethod(planned_info)

    def __init__(
        self,
        model: str,
        *,
        revision: str | None = None,
        dtype: str = "auto",
        device: str = "auto",
        trust_remote_code: bool = False,
        attn_implementation: str | None = None,
        adapter: str = "auto",
        model_class: str | None = None,
        processor: dict | None = None,
        model_kwargs: dict | None = None,
        image_placeholder: str | None = None,
        images_per_request: int | None = None,
    ):
        check_local_model(model)
        torch, transformers = _import_torch_transformers()
        self._torch = torch
        torch_dtype, device_arg = choose_dtype_and_device(dtype, device)
        requested = chosen_adapter(adapter, model_class)
        self.adapter = resolve_adapter(
            requested, read_model_config(model, revision), model=str(model), trust_remote_code=bool(trust_remote_code)
        )
        self._check_adapter_options(images_per_request, image_placeholder)
        load_kwargs = dict(revision=revision, trust_remote_code=bool(trust_remote_code))
        model_load_kwargs = dict(load_kwargs, dtype=torch_dtype, **(model_kwargs or {}))
        if attn_implementation:
            model_load_kwargs["attn_implementation"] = attn_implementation
        if device_arg == "auto":
            model_load_kwargs["device_map"] = "auto"
        self.image_placeholder = image_placeholder
        self._load(transformers, model, model_load_kwargs, load_kwargs, processor, trust_remote_code=trust_remote_code)
        if device_arg != "auto":
            self.model.to(device_arg)
        self.model.eval()
        if self.family is None:
            self._check_generic_processor(model)
        self.generate_seconds = 0.0
        self.info = planned_info(
            model,
            revision=revision,
            dtype=dtype,
            attn_implementation=attn_implementation,
            adapter=requested,
            processor=processor,
            model_kwargs=model_kwargs,
            image_placeholder=image_placeholder,
        )
        self.info.details.update(
            {
                "dtype": str(torch_dtype).replace("torch.", ""),
                "device": str(getattr(self.model, "hf_device_map", None) or self.model.device),
                "revision": revision,
                "transformers_version": transformers.__version__,
                "torch_version": torch.__version__,
                "adapter": self.adapter,
                "model_class": type(self.model).__name__,
                "trust_remote_code": bool(trust_remote_code),
            }
        )
        if self.family is None:
            self.info.details["padding_side"] = "left"

    def _check_adapter_options(self, images_per_request: int | None, image_placeholder: str | None) -> None:
        """Refuse, before loading anything, options the resolved adapter cannot honour."""
        limit = FAMILY_MAX_IMAGES.get(self.adapter)
        if limit is not None and (images_per_request or 0) > limit:
            raise InputError(
                f"{MOLMO_SEES_ONE_IMAGE}, and this task sends {images_per_request} images a request.",
                "Run Common-O with --concat-images (the pair side by side in one image); "
                "association steps (3 images) cannot run with Molmo.",
            )
        if image_placeholder and self.adapter in FAMILY_ADAPTERS:
            raise InputError(
                f"--backend-arg image_placeholder applies to the generic adapters; the {self.adapter} adapter writes "
                "the "
                "prompt the way its model family expects.",
                "Drop image_placeholder.",
            )

    def _load(
        self,
        transformers,
        model: str,
        model_load_kwargs: dict,
        load_kwargs: dict,
        processor: dict | None,
        *,
        trust_remote_code: bool,
    ) -> None:
        """Load the model and processor with the adapter (a family's class, or an auto class + AutoProcessor)."""
        self.family = None
        try:
            if self.adapter in FAMILY_ADAPTERS:
                self.family = FAMILY_CLASSES[self.adapter](
                    transformers, model, model_load_kwargs, load_kwargs, processor or {}
                )
                self.model, self.processor, self.tokenizer = (
                    self.family.model,
                    self.family.processor,
                    self.family.tokenizer,
                )
            else:
                self.processor = transformers.AutoProcessor.from_pretrained(model, **load_kwargs, **(processor or {}))
                self.model = load_model(transformers, model, self.adapter, model_load_kwargs)
        except (OSError, ValueError, KeyError) as exc:
            if _remote_code_refused(exc) and not trust_remote_code:
                raise BackendError(
                    f"{model!r} ships its own Python code, which runs only with your consent.",
                    "Add --trust-remote-code if you trust the code of this model (read it first), "
                    "or use a model transformers supports natively.",
                ) from exc
            raise BackendError(
                f"Could not load {model!r} with the {self.adapter} model adapter ({exc}).",
                "Give a local folder or a Hub id of an image-text-to-text model (e.g. Qwen/Qwen2.5-VL-7B-Instruct); "
                "models with custom code also need --trust-remote-code "
                "(and, if auto does not recognise them, --backend-arg adapter=...).",
            ) from exc

    def _check_generic_processor(self, model: str) -> None:
        self.tokenizer = getattr(self.processor, "tokenizer", None)
        if self.tokenizer is None:
            raise BackendError(
                f"{model!r}: the processor has no tokenizer.", "Use a processor that bundles a tokenizer."
            )
        self.tokenizer.padding_side = "left"  # answers must start right after each prompt in a batch
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        if not getattr(self.processor, "chat_template", None) and not getattr(self.tokenizer, "chat_template", None):
            raise BackendError(
                f"{model!r} has no chat template, so the images and prompt cannot be formatted for it.",
                "Use an instruction-tuned checkpoint that ships a chat template (chat_template.jinja).",
            )

    def _chat_text(self, request: GenerationRequest, settings: GenerationSettings) -> str:
        if self.image_placeholder:
            # templates with plain-text content and numbered image tags (Phi-3-vision: <|image_1|>)
            numbered = iter(range(1, len(request.images) + 1))
            text = "".join(
                self.image_placeholder.format(n=next(numbered)) if kind == "image" else value
                for kind, value in message_parts(request)
            )
            messages = ([{"role": "system", "content": settings.system_prompt}] if settings.system_prompt else []) + [
                {"role": "user", "content": text}
            ]
        else:
            messages = chat_messages(request, settings, lambda _: {"type": "image"})
        return self.processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)

    def generate(
        self, requests: Sequence[GenerationRequest], settings: GenerationSettings
    ) -> list[str | RequestFailure]:
        if self.family is not None:
            outputs = self.family.generate(requests, settings)
            self.generate_seconds = self.family.generate_seconds
            return outputs
        torch = self._torch
        if not settings.greedy and len(requests) > 1:
            # One random stream per batch would make a row's sample depend on its batch mates (and change on
            # resume): sample each request alone, from the seed.
            return [self.generate([request], settings)[0] for request in requests]
        texts = [self._chat_text(r, settings) for r in requests]
        images = [[_rgb(img) for kind, img in message_parts(r) if kind == "image"] for r in requests]
        try:
            inputs = self.processor(
                text=texts, images=images if any(images) else None, return_tensors="pt", padding=True
            )
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
        gen_kwargs.update(settings.extra)
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
