"""What the association protocol asks of the models and how it reads their answers: the protocol settings,
the selection and deduction requests, the :class:`Asker` (every model behind the prediction cache), the majority
votes of several models (``--moe``) and when a deduction counts as correct."""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from commonlink.errors import InputError
from commonlink.eval.backends.base import (
    Backend,
    GenerationRequest,
    GenerationSettings,
    RequestFailure,
)
from commonlink.eval.cache import CachedGenerator, PredictionCache
from commonlink.kinds.association.concept_prompts import STRATEGIES, strategy_preamble
from commonlink.kinds.association.memory import CHAINM_WINDOW, MEMORY_KINDS, MemoryBase
from commonlink.kinds.association.memory import image_name as memory_name
from commonlink.kinds.association.prompts import deduction_prompt, prompt_text, selection_prompt

SELECTION_CHOICES = ["Image1", "Image2"]


@dataclass
class AssociationSettings:
    """Protocol settings (all recorded in results.json and in the cache key)."""

    memory: str = "structm"  #: nom | structm | nlm | chainm
    repetition: float = 1.0  #: memory weight added when an entry is seen again
    forgetting: float = 0.2  #: memory weight removed from every other entry each step
    max_steps: int = 500  #: scored steps after which a chain stops (counted as a full-length chain)
    deduction: bool = True  #: run the deduction step after each correct selection (chains)
    chainm_window: int = CHAINM_WINDOW  #: ChainM subchains kept in memory (the harness: 5; 0 = all)
    deduction_rule: str = "all-shared"  #: when a deduction counts as correct (DEDUCTION_RULES; the paper defines none)
    strategy: str = "normal"  #: prompt strategy (concept_prompts.STRATEGIES; text-only here: see strategy_preamble)

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise InputError(
                f"--strategy {self.strategy!r} is not a strategy.", f"Use one of: {', '.join(STRATEGIES)}."
            )
        if self.deduction_rule not in DEDUCTION_RULES:
            raise InputError(
                f"--deduction-rule {self.deduction_rule!r} is not a rule.", f"Use one of: {', '.join(DEDUCTION_RULES)}."
            )
        if self.memory not in MEMORY_KINDS:
            raise InputError(
                f"--memory {self.memory!r} is not a memory strategy.", f"Use one of: {', '.join(MEMORY_KINDS)}."
            )
        if self.max_steps < 1:
            raise InputError("--max-steps must be at least 1.")


# ------------------------------------------------------------------------------------------ naming images
def image_name(image, options: Sequence[str]) -> str:
    """How the memory names an image: its source name (OCL object such as "sandwich", Pangea action phrase),
    else what its labels say (association_memory.image_name). ``options`` is kept for callers' signatures."""
    return memory_name(image)


#: When a deduction counts as correct. The paper scores deductions (Table 3's step) without saying how; the
#: default is this project's own. all-shared: it names at least one concept and every one it names is shared;
#: any-shared: at least one concept it names is shared; exact: it names exactly the shared concepts.
DEDUCTION_RULES = ("all-shared", "any-shared", "exact")


def deduction_correct(predicted: list[str] | None, gold: Sequence[str], rule: str = "all-shared") -> bool:
    """Whether a deduction is correct under ``rule`` (see :data:`DEDUCTION_RULES`); naming nothing never is."""
    if not predicted:
        return False
    if rule == "any-shared":
        return bool(set(predicted) & set(gold))
    if rule == "exact":
        return set(predicted) == set(gold)
    return set(predicted) <= set(gold)


# ------------------------------------------------------------------------------------------ model calls
class Asker:
    """Sends batches of requests to one or more models, each behind the prediction cache (one
    :class:`CachedGenerator` per model); several models are combined by majority vote by the caller."""

    def __init__(
        self,
        backends: list[Backend],
        cache: PredictionCache,
        settings: GenerationSettings,
        run_keys: list[str],
        batch_size: int,
    ):
        self.generators = [CachedGenerator(b, cache, settings, run, batch_size) for b, run in zip(backends, run_keys)]
        self.requests_sent = 0  #: requests asked of the protocol (one per request, whatever the number of models)
        #: False when no model looks at pixels (the random baseline): requests are built without decoding images
        self.pixels = any(b.info.uses_images for b in backends)

    @property
    def generated(self) -> int:
        return sum(g.generated for g in self.generators)

    @property
    def cached(self) -> int:
        return sum(g.cached for g in self.generators)

    @property
    def failures(self) -> int:
        return sum(g.failures for g in self.generators)

    def ask(self, requests: list[GenerationRequest]) -> list[list[str | None]]:
        """Per request, the output of each model (``None`` where the backend failed on it)."""
        self.requests_sent += len(requests)
        per_model = [generator.answer(requests) for generator in self.generators]
        return [
            [None if isinstance(out[i], RequestFailure) else out[i] for out in per_model] for i in range(len(requests))
        ]


def majority_selection(votes: list[int | None]) -> int | None:
    counted = Counter(v for v in votes if v is not None)
    if not counted:
        return None
    best = max(counted.values())
    tied = {v for v, n in counted.items() if n == best}
    return next(v for v in votes if v in tied)  # first model's pick among the tied


def majority_concepts(votes: list[list[str] | None], options: Sequence[str]) -> list[str] | None:
    parsed = [v for v in votes if v is not None]
    if not parsed:
        return None
    counts = Counter(c for v in parsed for c in set(v))
    winners = [o for o in options if counts[o] * 2 > len(parsed)]
    return winners or parsed[0]


def _request_id(kind: str, task_id: str, step: int, segments, images) -> str:
    """Identify a request by task, step and its exact content (prompt text with memory, image ids)."""
    digest = hashlib.sha256(
        (prompt_text(segments) + "\0" + "\0".join(i.id for i in images)).encode("utf-8")
    ).hexdigest()[:16]
    return f"{task_id}/{step}/{kind}/{digest}"


def selection_request(
    task_id: str,
    step: int,
    query,
    candidates,
    concept_kind: str,
    memory: MemoryBase,
    *,
    pixels: bool = True,
    strategy: str = "normal",
    options: Sequence[str] = (),
) -> GenerationRequest:
    """The selection of one step: query and candidates, the memory in the prompt. ``pixels=False`` (backends that
    do not use images) leaves the images undecoded (``None``); the request id depends on image ids only.
    ``strategy``: a prompt strategy's text in front (about ``options``), or CoT's answer line."""
    segments = selection_prompt(
        concept_kind,
        memory.render(),
        preamble=strategy_preamble(strategy, concept_kind, options),
        cot=strategy == "cot",
    )
    images = [query, *candidates]
    return GenerationRequest(
        id=_request_id("select", task_id, step, segments, images),
        images=[img.image if pixels else None for img in images],
        prompt=segments,
        choices=list(SELECTION_CHOICES),
        multi_select=False,
    )


def deduction_request(
    task_id: str,
    step: int,
    image_1,
    image_2,
    concept_kind: str,
    options: list[str],
    *,
    pixels: bool = True,
    strategy: str = "normal",
) -> GenerationRequest:
    """The deduction on two images (which concepts they share); ``pixels`` as in :func:`selection_request`;
    ``strategy``: ComKnow's knowledge in front, or CoT's answer line (One-shot's example is the selection's)."""
    segments = deduction_prompt(
        concept_kind,
        options,
        preamble=strategy_preamble(strategy, concept_kind, options) if strategy == "comknow" else "",
        cot=strategy == "cot",
    )
    return GenerationRequest(
        id=_request_id("deduce", task_id, step, segments, [image_1, image_2]),
        images=[image_1.image, image_2.image] if pixels else [None, None],
        prompt=segments,
        choices=list(options),
        multi_select=True,
    )
