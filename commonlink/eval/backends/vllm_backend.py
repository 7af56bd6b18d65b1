"""Offline GPU inference with vLLM (optional extra ``commonlink[vllm]``): ``LLM.chat`` on large batches.

Requests are multi-image chat messages (PIL images as ``image_pil`` parts, vLLM >= 0.8), so vLLM applies the
model's own chat template. Tensor- and data-parallel sizes and any other engine argument are passed through.
vLLM schedules requests dynamically (continuous batching), so outputs are *not* guaranteed identical across
batch sizes; for reproducible numbers compare runs made with the same settings, or use the transformers
backend at batch size 1.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from commonlink.errors import BackendError, MissingDependencyError
from commonlink.eval.backends.base import (
    BackendInfo,
    GenerationRequest,
    GenerationSettings,
    RequestFailure,
    free_accelerator_memory,
    message_parts,
)
from commonlink.eval.backends.fingerprint import model_fingerprint


def planned_info(model: str, *, revision: str | None = None, max_model_len: int | None = None, engine_args: dict | None = None, **_) -> BackendInfo:
    """What the backend for ``model`` will report, known without starting vLLM (for cache keys)."""
    options = {k: v for k, v in (("max_model_len", max_model_len), ("engine_args", engine_args or None)) if v is not None}
    return BackendInfo(backend="vllm", model=model, fingerprint=model_fingerprint(model, revision), batch_invariant=False, default_batch_size=256,
                       output_options=options)


class VLLMBackend:
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
        max_images: int = 2,
        seed: int = 0,
        engine_args: dict | None = None,
    ):
        try:
            import vllm
        except ImportError as exc:
            raise MissingDependencyError("vllm", "vllm", "The vllm backend") from exc
        kwargs = dict(
            model=model,
            revision=revision,
            tensor_parallel_size=tensor_parallel_size,
            gpu_memory_utilization=gpu_memory_utilization,
            trust_remote_code=trust_remote_code,
            limit_mm_per_prompt={"image": max_images},
            seed=seed,
        )
        if data_parallel_size > 1:
            kwargs["data_parallel_size"] = data_parallel_size
        if max_model_len:
            kwargs["max_model_len"] = max_model_len
        kwargs.update(engine_args or {})
        try:
            self.llm = vllm.LLM(**kwargs)
        except (ValueError, RuntimeError, OSError) as exc:
            raise BackendError(f"vLLM could not start {model!r} ({exc}).", "Check the model name, GPU memory and --vllm-arg settings.") from exc
        self._vllm = vllm
        self.generate_seconds = 0.0
        self.info = planned_info(model, revision=revision, max_model_len=max_model_len, engine_args=engine_args)
        self.info.details.update(
            vllm_version=getattr(vllm, "__version__", "?"),
            tensor_parallel_size=tensor_parallel_size,
            data_parallel_size=data_parallel_size,
            engine_args={k: v for k, v in kwargs.items() if k not in ("model",)},
        )

    def generate(self, requests: Sequence[GenerationRequest], settings: GenerationSettings) -> list[str | RequestFailure]:
        conversations = []
        for request in requests:
            # PIL images go in as they are ("image_pil" parts): no PNG/base64 round trip for every image.
            content = [
                {"type": "image_pil", "image_pil": value.convert("RGB")} if kind == "image" else {"type": "text", "text": value}
                for kind, value in message_parts(request)
            ]
            conversations.append([{"role": "user", "content": content}])
        params = self._vllm.SamplingParams(
            temperature=settings.temperature,
            top_p=settings.top_p if not settings.greedy else 1.0,
            max_tokens=settings.max_new_tokens,
            seed=settings.seed,
        )
        start = time.perf_counter()
        outputs = self.llm.chat(conversations, sampling_params=params, use_tqdm=False)
        self.generate_seconds += time.perf_counter() - start
        return [out.outputs[0].text if out.outputs else RequestFailure("vLLM returned no output") for out in outputs]

    def close(self) -> None:
        del self.llm

        free_accelerator_memory()
