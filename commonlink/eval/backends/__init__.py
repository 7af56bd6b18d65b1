"""Model backends: one request/settings interface over transformers, vLLM, OpenAI-compatible servers and
weight-free baselines. Heavy libraries are imported only when a backend is created."""

from __future__ import annotations

from pathlib import Path

from ...errors import InputError
from .base import (
    DEFAULT_MAX_PIXELS,
    Backend,
    BackendInfo,
    BatchState,
    GenerationRequest,
    GenerationSettings,
    RequestFailure,
    generate_resilient,
    is_out_of_memory,
    message_parts,
    prompt_text,
)
from .baselines import BASELINES

BACKENDS = ("transformers", "vllm", "openai")

__all__ = [
    "BACKENDS",
    "BASELINES",
    "DEFAULT_MAX_PIXELS",
    "Backend",
    "BackendInfo",
    "BatchState",
    "GenerationRequest",
    "GenerationSettings",
    "RequestFailure",
    "generate_resilient",
    "is_out_of_memory",
    "load_backend",
    "message_parts",
    "prompt_text",
]


def load_backend(backend: str, model: str, **options) -> Backend:
    """Create a backend. ``model`` ``random``/``none`` (not an existing path) gives a weight-free baseline.

    ``options`` go to the backend's constructor (e.g. ``dtype``, ``device`` for transformers;
    ``tensor_parallel_size`` for vllm; ``base_url``, ``api_key_env``, ``concurrency`` for openai); ``None``
    values are dropped so callers can pass every CLI option through.
    """
    options = {k: v for k, v in options.items() if v is not None}
    if model in BASELINES and not Path(model).exists():
        from .baselines import BaselineBackend

        return BaselineBackend(model)
    if backend == "transformers":
        from .transformers_backend import TransformersBackend

        return TransformersBackend(model, **options)
    if backend == "vllm":
        from .vllm_backend import VLLMBackend

        return VLLMBackend(model, **options)
    if backend == "openai":
        from .openai_backend import OpenAIBackend

        return OpenAIBackend(model, **options)
    raise InputError(f"Unknown backend {backend!r}.", f"Use one of {', '.join(BACKENDS)} (or --model random|none for a baseline).")
