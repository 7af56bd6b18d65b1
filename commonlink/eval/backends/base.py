"""What every model backend shares: the request and settings records, and OOM-tolerant batch generation.

A backend is any object with

* ``info``: a :class:`BackendInfo` (name, model, fingerprint, batching guarantees),
* ``generate(requests, settings) -> list[str | RequestFailure]``: one output text per request, in order,
* ``close()``: free the model / connections,
* ``generate_seconds``: seconds spent inside the model's own generate calls (for overhead benchmarks).

Protocols (Common-O, perception, association) build :class:`GenerationRequest` records and call
:func:`generate_resilient`, which caps image sizes, and halves the batch on out-of-memory errors instead of
crashing.
"""

from __future__ import annotations

import gc
import logging
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from commonlink.errors import InputError
from commonlink.eval.imaging import cap_pixels
from commonlink.loaders import hub_ids

log = logging.getLogger(__name__)

#: Default image cap (width x height) applied before any backend sees an image; ``--max-pixels 0`` disables.
DEFAULT_MAX_PIXELS = 1_048_576


@dataclass
class GenerationRequest:
    """One model call: images, a prompt, and (for multiple-choice protocols) the choices.

    ``prompt`` is either a string (the images go first, in order, then the text) or a list of segments:
    strings and image slots (any object with an integer ``index`` attribute, e.g.
    ``association_prompts.ImageSlot``) that say where each image goes in the message.
    ``choices`` lets weight-free baselines answer; model backends ignore it. ``multi_select`` says whether
    several choices may be picked (Common-O) or exactly one (yes/no, association).
    """

    id: str
    images: list[Any]  #: PIL images
    prompt: str | list[Any]
    choices: list[str] | None = None
    multi_select: bool = False


#: Generation settings that have their own option (``extra``, a ``--gen-arg``, may not set them behind its back).
OWN_GENERATION_OPTIONS = {
    "max_new_tokens": "--max-new-tokens",
    "temperature": "--temperature",
    "top_p": "--top-p",
    "seed": "--seed",
    "max_pixels": "--max-pixels",
    "system_prompt": "--system-prompt",
}


@dataclass(frozen=True)
class GenerationSettings:
    """Decoding settings; part of the prediction-cache key (changing one re-runs the affected rows)."""

    max_new_tokens: int = 1024
    temperature: float = 0.0  #: 0 = greedy decoding (the paper's setting)
    top_p: float = 1.0
    seed: int = 0
    max_pixels: int = DEFAULT_MAX_PIXELS  #: cap on width x height per image; 0 = no cap
    #: A system message sent before each request (``--system-prompt``); None = none.
    system_prompt: str | None = None
    #: Further decoding options passed as they are to the backend's generate call (``--gen-arg k=v``):
    #: ``model.generate`` kwargs (transformers), ``SamplingParams`` fields (vLLM), request body fields (OpenAI).
    extra: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        """Refuse settings no backend can honour, in the CLI's words (``commonlink eval`` builds this record)."""
        if self.max_new_tokens < 1:
            raise InputError(f"--max-new-tokens {self.max_new_tokens} must be at least 1.")
        if self.temperature < 0:
            raise InputError(f"--temperature {self.temperature} must be >= 0 (0 = greedy).")
        if not 0 < self.top_p <= 1:
            raise InputError(f"--top-p {self.top_p} must be in (0, 1].", "e.g. --top-p 0.9 (1 = no nucleus cut).")
        if self.max_pixels < 0:
            raise InputError(f"--max-pixels {self.max_pixels} must be >= 0 (0 = no cap).")
        for key in self.extra:
            if key in OWN_GENERATION_OPTIONS:
                raise InputError(
                    f"--gen-arg {key}=... duplicates an option.", f"Use {OWN_GENERATION_OPTIONS[key]} instead."
                )

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0

    def to_dict(self) -> dict:
        # system_prompt/extra only when set, so runs with the default settings keep their cache keys
        out = asdict(self)
        if self.system_prompt is None:
            out.pop("system_prompt")
        if not self.extra:
            out.pop("extra")
        return out


@dataclass
class BackendInfo:
    """What a backend is, for result files and cache keys."""

    backend: str  #: "transformers" | "vllm" | "openai" | "baseline"
    model: str  #: name or path as given
    fingerprint: str  #: identifies the weights (hub commit, hash of local files, or name for APIs)
    batch_invariant: bool  #: True when outputs are known not to depend on batch size
    default_batch_size: int
    uses_images: bool = True
    details: dict = field(default_factory=dict)  #: dtype, device, parallelism, server URL, ...
    #: Options chosen by the user, besides the weights and GenerationSettings, that change outputs (--dtype,
    #: engine args, image format); part of the prediction-cache key. Empty when every such option is default.
    output_options: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class RequestFailure:
    """A request the backend could not answer (the row is reported and skipped, the run goes on)."""

    reason: str


class Backend(Protocol):  # pragma: no cover - typing only
    info: BackendInfo
    generate_seconds: float

    def generate(
        self, requests: Sequence[GenerationRequest], settings: GenerationSettings
    ) -> list[str | RequestFailure]: ...

    def close(self) -> None: ...


def message_parts(request: GenerationRequest) -> list[tuple[str, Any]]:
    """The request as ordered ``("image", img)`` / ``("text", str)`` parts (images first for string prompts)."""
    if isinstance(request.prompt, str):
        return [("image", img) for img in request.images] + [("text", request.prompt)]
    parts: list[tuple[str, Any]] = []
    for segment in request.prompt:
        if isinstance(segment, str):
            if segment:
                parts.append(("text", segment))
        else:
            parts.append(("image", request.images[int(segment.index)]))
    return parts


def chat_messages(request: GenerationRequest, settings: GenerationSettings, image_part, text_part=None) -> list[dict]:
    """The request as chat messages: an optional system message, then one user message whose content is
    ``image_part(img)`` / ``text_part(text)`` dicts in prompt order (the shape every chat template and API takes)."""
    text_part = text_part or (lambda text: {"type": "text", "text": text})
    content = [image_part(value) if kind == "image" else text_part(value) for kind, value in message_parts(request)]
    messages = [{"role": "system", "content": settings.system_prompt}] if settings.system_prompt else []
    return messages + [{"role": "user", "content": content}]


def prompt_text(request: GenerationRequest, image_token: str = "<image>") -> str:
    """The prompt as one string with ``image_token`` where images go (for logs and cache keys)."""
    return "".join(image_token if kind == "image" else value for kind, value in message_parts(_without_images(request)))


def _without_images(request: GenerationRequest) -> GenerationRequest:
    return GenerationRequest(
        request.id, [None] * len(request.images), request.prompt, request.choices, request.multi_select
    )


def check_local_model(model: str) -> None:
    """A ``--model`` written as a path (absolute, ``./``, ``../``, ``~``) must exist: transformers and vLLM would
    otherwise read it as a Hub id and fail with a message about repo-id syntax that hides the real problem."""
    text = str(model)
    if text.startswith(("/", "./", "../", "~", ".\\", "..\\")) and not Path(text).expanduser().exists():
        raise InputError(
            f"--model {text}: there is no such folder.",
            "Check the path (a local model folder holds config.json and the weights), or give a Hub id like org/name.",
        )
    # Neither a path nor a Hub model (or a cached copy): say so now, not after the loader's download retries.
    hub_ids.require_hub_model(text)


def is_out_of_memory(exc: BaseException) -> bool:
    """True for CUDA/accelerator out-of-memory errors (``torch.cuda.OutOfMemoryError`` or the RuntimeError form)."""
    if type(exc).__name__ == "OutOfMemoryError":
        return True
    return isinstance(exc, (RuntimeError, MemoryError)) and "out of memory" in str(exc).lower()


def free_accelerator_memory() -> None:
    gc.collect()
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        torch.cuda.empty_cache()


@dataclass
class BatchState:
    """The batch size in force; :func:`generate_resilient` halves it on out-of-memory errors."""

    batch_size: int
    oom_events: int = 0


def generate_resilient(
    backend: Backend,
    requests: Sequence[GenerationRequest],
    settings: GenerationSettings,
    state: BatchState,
) -> list[str | RequestFailure]:
    """Generate for ``requests`` in batches of ``state.batch_size``; out of memory halves the batch and goes on.

    A single request that still runs out of memory comes back as a :class:`RequestFailure` (reported, skipped);
    any other error propagates. Images are capped to ``settings.max_pixels`` first.
    """
    if settings.max_pixels and backend.info.uses_images:
        requests = [
            GenerationRequest(
                r.id, [cap_pixels(img, settings.max_pixels) for img in r.images], r.prompt, r.choices, r.multi_select
            )
            for r in requests
        ]
    results: list[str | RequestFailure] = []
    i = 0
    while i < len(requests):
        chunk = list(requests[i : i + max(1, state.batch_size)])
        try:
            outputs = backend.generate(chunk, settings)
        except Exception as exc:  # noqa: BLE001 - filtered just below
            if not is_out_of_memory(exc):
                raise
            free_accelerator_memory()
            state.oom_events += 1
            if len(chunk) == 1:
                log.warning("Out of memory on %s even alone; skipping it.", chunk[0].id)
                results.append(RequestFailure(f"out of memory at batch size 1 ({exc.__class__.__name__})"))
                i += 1
                continue
            state.batch_size = max(1, len(chunk) // 2)
            log.warning("Out of memory at batch size %d; continuing at %d.", len(chunk), state.batch_size)
            continue
        if len(outputs) != len(chunk):
            raise RuntimeError(
                f"backend {backend.info.backend} returned {len(outputs)} outputs for {len(chunk)} requests"
            )
        results.extend(outputs)
        i += len(chunk)
    return results
