"""Model backends: one request/settings interface over transformers, vLLM, OpenAI-compatible servers and
weight-free baselines.

Backends are found by name in :data:`BACKEND_REGISTRY` (name -> ``"module:Class"``, imported only when that
backend is used, the way lm-eval's model registry works); :func:`register_backend` adds one. A backend class
takes ``(model, **options)`` and has a static ``planned_info(model, **options)`` that says, without loading
anything, what it will report (for cache keys). Public API used by other stages (``chains verify``, the
benchmarks): :func:`load_backend`, :class:`LazyBackend`, :class:`GenerationRequest`, :class:`GenerationSettings`
and each backend's ``generate(requests, settings)``.
"""

from __future__ import annotations

import importlib
import inspect
import json
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
    chat_messages,
    generate_resilient,
    is_out_of_memory,
    message_parts,
    prompt_text,
)
from commonlink.eval.backends.baselines import BASELINES

#: Backend name -> "module:Class", imported lazily (see :func:`backend_class`).
BACKEND_REGISTRY: dict[str, str] = {
    "transformers": "commonlink.eval.backends.transformers_backend:TransformersBackend",
    "vllm": "commonlink.eval.backends.vllm_backend:VLLMBackend",
    "openai": "commonlink.eval.backends.openai_backend:OpenAIBackend",
}
BASELINE_TARGET = "commonlink.eval.backends.baselines:BaselineBackend"
BACKENDS = tuple(BACKEND_REGISTRY)

#: Option every backend may be given by a protocol: the most images one request of the task carries (Common-O
#: 2, or 1 with --concat-images; perception 1; association 3). vLLM sizes ``limit_mm_per_prompt`` from it.
IMAGES_PER_REQUEST = "images_per_request"

__all__ = [
    "BACKENDS",
    "BACKEND_REGISTRY",
    "BASELINES",
    "DEFAULT_MAX_PIXELS",
    "IMAGES_PER_REQUEST",
    "Backend",
    "BackendInfo",
    "BatchState",
    "GenerationRequest",
    "GenerationSettings",
    "LazyBackend",
    "RequestFailure",
    "backend_class",
    "chat_messages",
    "generate_resilient",
    "is_out_of_memory",
    "load_backend",
    "message_parts",
    "parse_key_values",
    "prompt_text",
    "register_backend",
]


def register_backend(name: str, target: str) -> None:
    """Make ``--backend NAME`` load ``target`` (``"package.module:Class"``), imported only when used."""
    if ":" not in target:
        raise InputError(
            f"Backend target {target!r} is not 'module:Class'.",
            "e.g. register_backend('mine', 'my_pkg.backend:MyBackend')",
        )
    BACKEND_REGISTRY[name] = target


def is_baseline(model: str) -> bool:
    """``--model random|none`` names a weight-free baseline, unless a folder of that name exists."""
    return model in BASELINES and not Path(model).exists()


def backend_class(backend: str, model: str = "") -> type:
    """The class implementing ``backend`` (the baseline class for ``--model random|none``), imported now."""
    if is_baseline(model):
        target = BASELINE_TARGET
    elif backend in BACKEND_REGISTRY:
        target = BACKEND_REGISTRY[backend]
    else:
        raise InputError(
            f"Unknown --backend {backend!r}.",
            f"Use one of {', '.join(BACKEND_REGISTRY)} (or --model random|none for a baseline).",
        )
    module_name, class_name = target.split(":", 1)
    return getattr(importlib.import_module(module_name), class_name)


#: Constructor parameters as ``--backend-arg`` and docs/eval.md spell them; those with options of their own are not
#: listed.
_DOCUMENTED_NAMES = {
    "model_kwargs": "model.KEY",
    "processor": "processor.KEY",
    "trust_remote_code": None,
    "concurrency": None,
    IMAGES_PER_REQUEST: None,
}


def _as_documented(known: list[str]) -> list[str]:
    """The option names of a backend as a user writes them (``processor.KEY``, not the constructor's ``processor``)."""
    shown = [_DOCUMENTED_NAMES.get(name, name) for name in known]
    return [name for name in shown if name]


def _accepted(cls: type, options: dict, backend: str) -> dict:
    """``options`` checked against the constructor of ``cls``: an unknown one is an error naming the known ones.
    The task's image count (:data:`IMAGES_PER_REQUEST`) is dropped for backends that have no use for it."""
    if not getattr(cls, "takes_options", True):
        return {}  # weight-free baselines: backend options are meaningless, not an error
    params = inspect.signature(cls.__init__).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return options  # e.g. vllm: other keys are engine arguments, checked by vLLM itself
    known = [name for name in params if name not in ("self", "model", "name")]
    out = {}
    for key, value in options.items():
        if key == "model" and "model_kwargs" in known:  # --backend-arg model.KEY=VALUE: from_pretrained options
            key = "model_kwargs"
        if key in known:
            out[key] = value
        elif key != IMAGES_PER_REQUEST:
            raise InputError(
                f"--backend-arg {key}=... is not an option of the {backend} backend.",
                f"Options of {backend}: {', '.join(_as_documented(known))}.",
            )
    return out


def load_backend(backend: str, model: str, **options) -> Backend:
    """Create a backend. ``model`` ``random``/``none`` (not an existing path) gives a weight-free baseline.

    ``options`` go to the backend's constructor (e.g. ``dtype``, ``device``, ``processor`` for transformers;
    ``tensor_parallel_size`` and any engine argument for vllm; ``base_url``, ``api_key_env``, ``concurrency``
    for openai; see docs/eval.md); ``None`` values are dropped so callers can pass every option through.
    """
    options = {k: v for k, v in options.items() if v is not None}
    cls = backend_class(backend, model)
    if is_baseline(model):
        return cls(model)
    return cls(model, **_accepted(cls, options, backend))


def parse_key_values(items: list[str] | tuple[str, ...], *, option: str = "--backend-arg") -> dict:
    """``["k=v", "processor.min_pixels=3136"]`` -> ``{"k": "v", "processor": {"min_pixels": 3136}}``.

    Values are read as JSON when they parse (numbers, true/false, null, lists, objects), else kept as text;
    a dotted key fills a nested dict (``processor.X``, ``model.X``, ``mm_processor_kwargs.X``).
    """
    out: dict = {}
    for item in items or ():
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise InputError(
                f"{option} {item!r} is not KEY=VALUE.",
                f"e.g. {option} dtype=bfloat16 or {option} processor.max_pixels=1003520",
            )
        try:
            value = json.loads(text)
        except ValueError:
            value = text
        *parents, leaf = key.split(".")
        target = out
        for part in parents:
            target = target.setdefault(part, {})
            if not isinstance(target, dict):
                raise InputError(
                    f"{option} {item!r}: {part} was already given a plain value.",
                    f"Give either {part}=VALUE or {part}.KEY=VALUE.",
                )
        target[leaf] = value
    return out


class LazyBackend:
    """A backend that is only loaded when a request actually needs the model.

    Its ``info`` (name, fingerprint, default batch size) is known up front, so cache keys can be computed and
    a rerun whose predictions are all cached - or the merge of sharded runs - never loads the weights.
    """

    def __init__(self, backend: str, model: str, **options):
        self._args = (backend, model)
        cls = backend_class(backend, model)
        #: ``(info, settings) -> {name: {"asked", "sent", "why"}}``: settings the backend's rules do not send
        self.not_sent_rules = getattr(cls, "not_sent_rules", None)
        self._options = _accepted(cls, {k: v for k, v in options.items() if v is not None}, backend)
        self._inner: Backend | None = None
        self.info = cls.planned_info(model, **self._options)
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
                    f"{inner.info.fingerprint}): files of the model folder changed, or the Hub snapshot was updated "
                    "meanwhile.",
                    "Rerun the same command: it keys the prediction cache to the weights now in place (answers cached "
                    "for the "
                    "old weights are kept apart, not mixed in).",
                )
            self._inner = inner
            self.info = inner.info
        return self._inner.generate(requests, settings)

    def close(self) -> None:
        if self._inner is not None:
            self._inner.close()
