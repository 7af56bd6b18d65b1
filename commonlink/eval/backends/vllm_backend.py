"""Offline GPU inference with vLLM (optional extra ``commonlink[vllm]``): ``LLM.chat`` on large batches.

Requests are multi-image chat messages (PIL images as ``image_pil`` parts, vLLM >= 0.8), so vLLM applies the
model's own chat template. vLLM refuses a prompt with more images than ``limit_mm_per_prompt`` allows, so the
limit comes from the task (``images_per_request``: 2 for Common-O pairs, 1 for perception or
``--concat-images``, 3 for an association selection step) unless ``--backend-arg limit_mm_per_prompt=...`` says
otherwise. Any other ``--backend-arg KEY=VALUE`` is an engine argument passed to ``vllm.LLM`` as it is (vLLM
checks it); ``processor.KEY=VALUE`` goes to ``mm_processor_kwargs`` (e.g. Qwen's ``max_pixels``), like the
transformers backend's processor options. ``--gen-arg KEY=VALUE`` become ``SamplingParams`` fields.

vLLM schedules requests dynamically (continuous batching), so outputs are *not* guaranteed identical across
batch sizes; for reproducible numbers compare runs made with the same settings, or use the transformers
backend at batch size 1.

Tested against ``tests.fixtures.vllm_double``, whose signatures are checked against those recorded from
the real vLLM wheel (``tests/fixtures/data/vllm_api.json``); no GPU run is part of the test suite.
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
)
from commonlink.eval.backends.fingerprint import model_fingerprint

#: What a request holds when the protocol does not say (Common-O pairs).
DEFAULT_IMAGES_PER_REQUEST = 2


def planned_info(
    model: str,
    *,
    revision: str | None = None,
    max_model_len: int | None = None,
    processor: dict | None = None,
    images_per_request: int | None = None,
    **engine_args,
) -> BackendInfo:
    """What the backend for ``model`` will report, known without starting vLLM (for cache keys)."""
    # Engine arguments that cannot change an answer stay out of the cache key, so adding GPUs keeps the cache.
    neutral = {
        "tensor_parallel_size",
        "data_parallel_size",
        "gpu_memory_utilization",
        "trust_remote_code",
        "limit_mm_per_prompt",
        "enforce_eager",
        "seed",
        "disable_log_stats",
        "swap_space",
        "cpu_offload_gb",
    }
    engine = {k: v for k, v in engine_args.items() if k not in neutral}
    options = {
        k: v
        for k, v in (
            ("max_model_len", max_model_len),
            ("engine_args", engine or None),
            ("processor", processor or None),
        )
        if v is not None
    }
    return BackendInfo(
        backend="vllm",
        model=model,
        fingerprint=model_fingerprint(model, revision),
        batch_invariant=False,
        default_batch_size=256,
        output_options=options,
    )


#: vLLM's per-modality limit form (``vllm.config.multimodal.ImageDummyOptions``: ``count``, default 999, and the
#: image size used when profiling memory; extra fields are refused).
_IMAGE_LIMIT_FIELDS = {"count": 0, "width": 1, "height": 1}  # field: smallest value


def image_limit(limit) -> int:
    """The most images a prompt may have under ``limit_mm_per_prompt``: ``{"image": 3}`` or vLLM's per-modality
    form ``{"image": {"count": 5, "width": 512, "height": 512}}``; other modalities are vLLM's to check."""
    fix = (
        "e.g. --backend-arg 'limit_mm_per_prompt={\"image\": 3}' or vLLM's per-modality form "
        '\'{"image": {"count": 3, "width": 512, "height": 512}}\' (or leave it out: the task sets it).'
    )
    if not isinstance(limit, dict):
        raise InputError(f"--backend-arg limit_mm_per_prompt={limit!r} is not a mapping of modality to limit.", fix)
    value = limit.get("image", 999)  # MultiModalConfig.get_limit_per_prompt: an unset modality allows 999
    if isinstance(value, dict):
        for key, item in value.items():
            if key not in _IMAGE_LIMIT_FIELDS:
                raise InputError(
                    f"limit_mm_per_prompt image option {key!r} is not one of vLLM's "
                    f"({', '.join(_IMAGE_LIMIT_FIELDS)}).",
                    fix,
                )
            if isinstance(item, bool) or not isinstance(item, int) or item < _IMAGE_LIMIT_FIELDS[key]:
                raise InputError(
                    f"limit_mm_per_prompt image {key}={item!r} must be a whole number >= {_IMAGE_LIMIT_FIELDS[key]}.",
                    fix,
                )
        return int(value.get("count", 999))
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InputError(
            f"limit_mm_per_prompt image limit {value!r} is neither a whole number >= 0 "
            "nor vLLM's per-modality options.",
            fix,
        )
    return value


class VLLMBackend:
    planned_info = staticmethod(planned_info)

    def __init__(
        self,
        model: str,
        *,
        revision: str | None = None,
        tensor_parallel_size: int = 1,
        data_parallel_size: int = 1,
        max_model_len: int | None = None,
        gpu_memory_utilization: float = 0.9,
        trust_remote_code: bool = False,
        images_per_request: int | None = None,
        processor: dict | None = None,
        seed: int = 0,
        **engine_args,
    ):
        try:
            import vllm
        except ImportError as exc:
            raise MissingDependencyError("vllm", "vllm", "The vllm backend") from exc
        check_local_model(model)
        images = int(images_per_request or DEFAULT_IMAGES_PER_REQUEST)
        limit = engine_args.pop("limit_mm_per_prompt", None) or {"image": images}
        self.max_images = image_limit(limit)
        kwargs = dict(
            model=model,
            revision=revision,
            tensor_parallel_size=tensor_parallel_size,
            gpu_memory_utilization=gpu_memory_utilization,
            trust_remote_code=bool(trust_remote_code),
            limit_mm_per_prompt=limit,
            seed=seed,
        )
        if data_parallel_size > 1:
            kwargs["data_parallel_size"] = data_parallel_size
        if max_model_len:
            kwargs["max_model_len"] = max_model_len
        if processor:
            kwargs["mm_processor_kwargs"] = dict(processor)
        kwargs.update(engine_args)
        try:
            self.llm = vllm.LLM(**kwargs)
        except TypeError as exc:  # EngineArgs(**kwargs) refuses an unknown engine argument
            raise InputError(
                f"vLLM refused an engine argument: {exc}.",
                "Check the --backend-arg names against vLLM's EngineArgs (`vllm serve --help`).",
            ) from exc
        except (ValueError, RuntimeError, OSError) as exc:
            raise BackendError(
                f"vLLM could not start {model!r} ({exc}).",
                "Check the model name, GPU memory and --backend-arg settings.",
            ) from exc
        self._vllm = vllm
        self.generate_seconds = 0.0
        self.tokens = {"prompt_tokens": 0, "completion_tokens": 0}
        self.info = planned_info(
            model, revision=revision, max_model_len=max_model_len, processor=processor, **engine_args
        )
        self.info.details.update(
            vllm_version=getattr(vllm, "__version__", "?"),
            tensor_parallel_size=tensor_parallel_size,
            data_parallel_size=data_parallel_size,
            limit_mm_per_prompt=limit,
            engine_args={k: v for k, v in kwargs.items() if k not in ("model",)},
            tokens=self.tokens,
        )

    def sampling_params(self, settings: GenerationSettings):
        try:
            return self._vllm.SamplingParams(
                temperature=settings.temperature,
                top_p=settings.top_p if not settings.greedy else 1.0,
                max_tokens=settings.max_new_tokens,
                seed=settings.seed,
                **settings.extra,
            )
        except Exception as exc:
            # TypeError: an unknown field; vllm.exceptions.VLLMValidationError (not a ValueError): a value out of
            # range
            raise InputError(
                f"vLLM's SamplingParams refused a --gen-arg or a generation setting: {exc}",
                "Use SamplingParams field names with values in vLLM's ranges, e.g. --gen-arg top_k=20, --temperature "
                "in [0, 2].",
            ) from exc

    def generate(
        self, requests: Sequence[GenerationRequest], settings: GenerationSettings
    ) -> list[str | RequestFailure]:
        results: list[str | RequestFailure | None] = [None] * len(requests)
        conversations, positions = [], []
        for i, request in enumerate(requests):
            if len(request.images) > self.max_images:  # vLLM would fail the whole batch on this one
                results[i] = RequestFailure(
                    f"{len(request.images)} images, more than limit_mm_per_prompt allows ({self.max_images})"
                )
                continue
            # PIL images go in as they are ("image_pil" parts): no PNG/base64 round trip for every image.
            conversations.append(
                chat_messages(request, settings, lambda img: {"type": "image_pil", "image_pil": img.convert("RGB")})
            )
            positions.append(i)
        if conversations:
            params = self.sampling_params(settings)
            start = time.perf_counter()
            outputs = self.llm.chat(conversations, sampling_params=params, use_tqdm=False)
            self.generate_seconds += time.perf_counter() - start
            for i, out in zip(positions, outputs):
                if not out.outputs:
                    results[i] = RequestFailure("vLLM returned no output")
                    continue
                self.tokens["prompt_tokens"] += len(out.prompt_token_ids or ())
                self.tokens["completion_tokens"] += len(out.outputs[0].token_ids or ())
                results[i] = out.outputs[0].text
        return results  # type: ignore[return-value]

    def close(self) -> None:
        del self.llm

        free_accelerator_memory()
