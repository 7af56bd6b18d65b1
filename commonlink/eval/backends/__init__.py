"""Model backends: one request/settings interface over transformers, vLLM, OpenAI-compatible servers and
weight-free baselines. Heavy libraries are imported only when a backend is created."""

from __future__ import annotations

from pathlib import Path

from commonlink.errors import BackendError, InputError
from commonlink.eval.backends.base import (
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
from commonlink.eval.backends.baselines import BASELINES

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
    "LazyBackend",
    "load_backend",
    "message_parts",
    "prompt_text",
]


def _module(backend: str, model: str):
    """The module implementing ``backend`` (baselines for ``random``/``none``); light to import."""
    if model in BASELINES and not Path(model).exists():
        from commonlink.eval.backends import baselines

        return baselines
    if backend == "transformers":
        from commonlink.eval.backends import transformers_backend

        return transformers_backend
    if backend == "vllm":
        from commonlink.eval.backends import vllm_backend

        return vllm_backend
    if backend == "openai":
        from commonlink.eval.backends import openai_backend

        return openai_backend
    raise InputError(f"Unknown backend {backend!r}.", f"Use one of {', '.join(BACKENDS)} (or --model random|none for a baseline).")


def load_backend(backend: str, model: str, **options) -> Backend:
    """Create a backend. ``model`` ``random``/``none`` (not an existing path) gives a weight-free baseline.

    ``options`` go to the backend's constructor (e.g. ``dtype``, ``device`` for transformers;
    ``tensor_parallel_size`` for vllm; ``base_url``, ``api_key_env``, ``concurrency`` for openai); ``None``
    values are dropped so callers can pass every CLI option through.
    """
    options = {k: v for k, v in options.items() if v is not None}
    module = _module(backend, model)
    if module.__name__.endswith("baselines"):
        return module.BaselineBackend(model)
    if backend == "transformers":
        return module.TransformersBackend(model, **options)
    if backend == "vllm":
        return module.VLLMBackend(model, **options)
    return module.OpenAIBackend(model, **options)


class LazyBackend:
    """A backend that is only loaded when a request actually needs the model.

    Its ``info`` (name, fingerprint, default batch size) is known up front, so cache keys can be computed and
    a rerun whose predictions are all cached - or the merge of sharded runs - never loads the weights.
    """

    def __init__(self, backend: str, model: str, **options):
        self._args = (backend, model)
        self._options = {k: v for k, v in options.items() if v is not None}
        self._inner: Backend | None = None
        self.info = _module(backend, model).planned_info(model, **self._options)
        self.info.details["loaded"] = False

    @property
    def loaded(self) -> bool:
        return self._inner is not None

    @property
    def generate_seconds(self) -> float:
        return self._inner.generate_seconds if self._inner is not None else 0.0

    def generate(self, requests, settings):
        if self._inner is None:
            inner = load_backend(*self._args, **self._options)
            if inner.info.fingerprint != self.info.fingerprint:
                # The cache key was made from the planned weights; answers of other weights must not go under it.
                planned = self.info.fingerprint
                inner.close()
                raise BackendError(
                    f"The weights of {self._args[1]!r} changed between planning the run and loading them ({planned} -> "
                    f"{inner.info.fingerprint}): files of the model folder changed, or the Hub snapshot was updated meanwhile.",
                    "Rerun the same command: it keys the prediction cache to the weights now in place (answers cached for the "
                    "old weights are kept apart, not mixed in).",
                )
            self._inner = inner
            self.info = inner.info
        return self._inner.generate(requests, settings)

    def close(self) -> None:
        if self._inner is not None:
            self._inner.close()
