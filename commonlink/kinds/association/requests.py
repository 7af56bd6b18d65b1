"""What the association protocol asks of the models and how it reads their answers: the protocol settings,
the selection and deduction requests, the :class:`Asker` (every model behind the prediction cache), the majority
votes of several models (``--moe``) and when a deduction counts as correct."""

from __future__ import annotations

import hashlib
import re
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
from commonlink.eval.imaging import resize_square
from commonlink.kinds.association.concept_prompts import STRATEGIES, strategy_preamble
from commonlink.kinds.association.memory import CHAINM_WINDOW, MEMORY_KINDS, MemoryBase
from commonlink.kinds.association.memory import image_name as memory_name
from commonlink.kinds.association.prompts import (
    answer_line,
    deduction_prompt,
    parse_concepts,
    parse_selection,
    prompt_text,
    selection_prompt,
)
from commonlink.seeding import rng_for

SELECTION_CHOICES = ["Image1", "Image2"]

#: The association protocols (docs/eval.md "Association protocols"). ``paper``: what the authors' harness
#: (``lihong2303/LLM_Inception``, eval_multistep.py / eval_singlestep.py) did to produce the paper's numbers;
#: ``strict``: this project's stricter choices (the protocol of every run before the switch existed).
PROTOCOLS = ("paper", "strict")
#: Side of the square every image is resized to under the paper protocol (the harness: ``resize((336, 336))``
#: of the object crop); 0 = sent as stored.
HARNESS_IMAGE_SIDE = 336
#: Warm-up steps per chain concept under the paper protocol (the harness's ``few_shot_num``).
PAPER_WARMUP_PER_CONCEPT = 3
#: What each protocol does, recorded in results.json (``protocol_rules``).
PROTOCOL_RULES = {
    "paper": {
        "warmup": "3 steps per concept (asynchronous: 3 on concept 1, then 3 on concept 2), selection forced, "
        "memory from the model's own deduction; the scored chain restarts from a fresh concept-1 query "
        "(order 1,1,1,b,2,2,2,b)",
        "selection": "correct when the answer contains the right label (Image1 / Image 1), as the harness reads it",
        "deduction_memory": "every option named in the answer (case-insensitive substring) enters the memory",
        "vote": "several models: every answer's words counted, the most frequent word wins, ties drawn at random "
        "(seeded per request)",
        "images": f"resized to {HARNESS_IMAGE_SIDE}x{HARNESS_IMAGE_SIDE} (object crops where the sample has a box)",
    },
    "strict": {
        "warmup": "the chain's marked warm-up steps (default 3 in all), selection forced, memory learns the gold "
        "concept; scoring starts at the next step of the chain",
        "selection": "the parsed pick must be the right candidate (naming both is unparseable)",
        "deduction_memory": "the options the answer names as whole words enter the memory",
        "vote": "several models: the candidate most models picked (a tie goes to the first model), the concepts "
        "more than half named",
        "images": "sent as stored (object crops where the sample has a box)",
    },
}


@dataclass
class AssociationSettings:
    """Protocol settings (all recorded in results.json and in the cache key).

    ``protocol`` (``paper``, the default, or ``strict``; :data:`PROTOCOL_RULES`) decides the warm-up, how
    selections and deductions are read, the vote of several models and the image size; ``deduction_rule`` and
    ``image_size`` left at ``None`` take the protocol's (``harness`` and 336 under paper, ``all-shared`` and
    0 = as stored under strict); set, they override it (recorded in ``overrides``)."""

    memory: str = "structm"  #: nom | structm | nlm | chainm
    repetition: float = 1.0  #: memory weight added when an entry is seen again
    forgetting: float = 0.2  #: memory weight removed from every other entry each step
    max_steps: int = 500  #: scored steps after which a chain stops (counted as a full-length chain)
    deduction: bool = True  #: run the deduction step after each correct selection (chains)
    chainm_window: int = CHAINM_WINDOW  #: ChainM subchains kept in memory (the harness: 5; 0 = all)
    deduction_rule: str | None = None  #: when a deduction counts as correct (ASSOCIATION_DEDUCTION_RULES)
    strategy: str = "normal"  #: prompt strategy (concept_prompts.STRATEGIES; text-only here: see strategy_preamble)
    protocol: str = "paper"  #: paper | strict (PROTOCOLS)
    image_size: int | None = None  #: side of the square images are resized to (0 = as stored); None = protocol's
    overrides: list[str] | None = None  #: settings given that differ from the protocol's (filled in, recorded)

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise InputError(
                f"--protocol {self.protocol!r} is not an association protocol.",
                f"Use one of: {', '.join(PROTOCOLS)} (paper: the authors' harness; strict: this project's).",
            )
        paper = self.protocol == "paper"
        defaults = {"deduction_rule": HARNESS_RULE if paper else "all-shared", "image_size": HARNESS_IMAGE_SIDE * paper}
        if self.overrides is None:
            self.overrides = [k for k, v in defaults.items() if getattr(self, k) not in (None, v)]
        for key, value in defaults.items():
            if getattr(self, key) is None:
                setattr(self, key, value)
        if self.image_size < 0:
            raise InputError(f"--image-size must be 0 (as stored) or a side in pixels, got {self.image_size}.")
        if self.strategy not in STRATEGIES:
            raise InputError(
                f"--strategy {self.strategy!r} is not a strategy.", f"Use one of: {', '.join(STRATEGIES)}."
            )
        if self.deduction_rule not in ASSOCIATION_DEDUCTION_RULES:
            raise InputError(
                f"--deduction-rule {self.deduction_rule!r} is not a rule.",
                f"Use one of: {', '.join(ASSOCIATION_DEDUCTION_RULES)}.",
            )
        if self.memory not in MEMORY_KINDS:
            raise InputError(
                f"--memory {self.memory!r} is not a memory strategy.", f"Use one of: {', '.join(MEMORY_KINDS)}."
            )
        if self.max_steps < 1:
            raise InputError("--max-steps must be at least 1.")

    @property
    def paper(self) -> bool:
        return self.protocol == "paper"

    def rules(self) -> dict:
        """What this protocol does, in words (results.json ``protocol_rules``)."""
        return {**PROTOCOL_RULES[self.protocol], "deduction_rule": self.deduction_rule}

    def new_memory(self, concept_kind: str) -> MemoryBase:
        """An empty memory of these settings' kind, weights and ChainM window for concepts of ``concept_kind``."""
        return MemoryBase(
            self.memory,
            self.repetition,
            self.forgetting,
            concept_kind=concept_kind,
            chainm_window=self.chainm_window,
        )


# ------------------------------------------------------------------------------------------ naming images
def image_name(image, options: Sequence[str]) -> str:
    """How the memory names an image: its source name (OCL object such as "sandwich", Pangea action phrase),
    else what its labels say (association_memory.image_name). ``options`` is kept for callers' signatures."""
    return memory_name(image)


#: When a deduction counts as correct. The paper scores deductions (Table 3's step) without saying how; the
#: authors' harness counts one right when any gold concept appears in the answer text (``harness``, the paper
#: protocol's rule). Ours (on the parsed concepts): all-shared: it names at least one concept and every one it
#: names is shared (the strict protocol's); any-shared: at least one concept it names is shared; exact: it
#: names exactly the shared concepts.
DEDUCTION_RULES = ("all-shared", "any-shared", "exact")
HARNESS_RULE = "harness"
#: The rules an association run takes: ours and the harness's (which reads the answer text, not parsed concepts).
ASSOCIATION_DEDUCTION_RULES = (HARNESS_RULE, *DEDUCTION_RULES)


def harness_deduction_correct(text: str | None, gold: Sequence[str]) -> bool:
    """The harness's deduction rule: some gold concept occurs in the answer (case-insensitive substring, so
    "metal" counts in "metallic" and in "not metal", as ``attr.lower() in response2.lower()`` does)."""
    body = (text or "").lower()
    return any(g.lower() in body for g in gold)


def harness_concepts(text: str | None, options: Sequence[str]) -> list[str] | None:
    """The options the harness writes into the memory after a deduction: each option occurring in the answer
    (case-insensitive substring), in option order; ``None`` if none."""
    body = (text or "").lower()
    return [o for o in options if o.lower() in body] or None


def harness_picked(text: str | None, answer: int) -> bool:
    """The harness's selection rule: the right label (``Image1`` or ``Image 1``) occurs in the answer, case as
    written (an answer naming both candidates counts as right, as in the harness)."""
    body = text or ""
    return any(label in body for label in (f"Image{answer + 1}", f"Image {answer + 1}"))


_PUNCTUATION = re.compile(r"[^\w\s]")


def harness_vote(outputs: Sequence[str | None], seed: int, request_id: str) -> str | None:
    """The harness's vote of several models (``QA_with_MOE``): the answers joined, punctuation removed, the words
    counted; the most frequent word is the answer, a tie drawn at random (here seeded by ``seed`` and the
    request, so a rerun draws the same). ``None`` when every model failed; ``""`` when no answer had a word."""
    texts = [o for o in outputs if o is not None]
    if not texts:
        return None
    counts = Counter(_PUNCTUATION.sub("", " ".join(texts)).split())
    if not counts:
        return ""
    best = max(counts.values())
    tied = [word for word, n in counts.items() if n == best]  # in order of first appearance
    return tied[int(rng_for(seed, "harness-vote", request_id).integers(0, len(tied)))]


def deduction_correct(
    predicted: list[str] | None, gold: Sequence[str], rule: str = "all-shared", *, text: str | None = None
) -> bool:
    """Whether a deduction is correct under ``rule`` (see :data:`ASSOCIATION_DEDUCTION_RULES`); naming nothing
    never is. ``harness`` reads the answer ``text`` (required for it)."""
    if rule == HARNESS_RULE:
        if text is None and predicted:
            raise ValueError("the harness deduction rule reads the answer text: pass text=")
        return harness_deduction_correct(text, gold)
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
        self.seed = settings.seed  #: seeds the paper protocol's tie-breaks of several models' votes
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
    image_size: int = 0,
) -> GenerationRequest:
    """The selection of one step: query and candidates, the memory in the prompt. ``pixels=False`` (backends that
    do not use images) leaves the images undecoded (``None``); the request id depends on image ids only.
    ``strategy``: a prompt strategy's text in front (about ``options``), or CoT's answer line; ``image_size``:
    every image resized to that square (0: as stored)."""
    segments = selection_prompt(
        concept_kind,
        memory.render(),
        preamble=strategy_preamble(strategy, concept_kind, options),
        cot=strategy == "cot",
    )
    images = [query, *candidates]
    return GenerationRequest(
        id=_request_id("select", task_id, step, segments, images),
        images=[resize_square(img.image, image_size) if pixels else None for img in images],
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
    image_size: int = 0,
) -> GenerationRequest:
    """The deduction on two images (which concepts they share); ``pixels`` and ``image_size`` as in
    :func:`selection_request`; ``strategy``: ComKnow's knowledge in front, or CoT's answer line (One-shot's
    example is the selection's)."""
    segments = deduction_prompt(
        concept_kind,
        options,
        preamble=strategy_preamble(strategy, concept_kind, options) if strategy == "comknow" else "",
        cot=strategy == "cot",
    )
    return GenerationRequest(
        id=_request_id("deduce", task_id, step, segments, [image_1, image_2]),
        images=[resize_square(i.image, image_size) for i in (image_1, image_2)] if pixels else [None, None],
        prompt=segments,
        choices=list(options),
        multi_select=True,
    )


# ------------------------------------------------------------------------------------------ reading answers
def read_selection(
    outputs: list[str | None], answer: int, settings: AssociationSettings, *, seed: int, request_id: str
) -> tuple[int | None, bool, str | None]:
    """``(choice, correct, text)`` of one selection's answers (one per model). Paper: the answer text (one
    model's, or the harness's word vote of several) is right when it contains the right label; strict: the
    parsed picks' majority must be the right candidate (``text`` None)."""
    if settings.paper:
        text = outputs[0] if len(outputs) == 1 else harness_vote(outputs, seed, request_id)
        if text is not None and settings.strategy == "cot":
            text = answer_line(text)
        return (parse_selection(text) if text is not None else None), harness_picked(text, answer), text
    choice = majority_selection([parse_selection(o) if o is not None else None for o in outputs])
    return choice, choice == answer, None


def read_deduction(
    outputs: list[str | None],
    gold: Sequence[str],
    options: Sequence[str],
    settings: AssociationSettings,
    *,
    seed: int,
    request_id: str,
) -> tuple[list[str] | None, bool]:
    """``(concepts, correct)`` of one deduction's answers: the concepts go into the memory, ``correct`` is the
    settings' deduction rule against ``gold``. Paper: the options occurring in the answer text (one model's, or
    the word vote of several); strict: the options more than half of the models named as whole words."""
    cot = settings.strategy == "cot"
    text = None
    if settings.paper:
        text = outputs[0] if len(outputs) == 1 else harness_vote(outputs, seed, request_id)
        if text is not None and cot:
            text = answer_line(text)
        concepts = harness_concepts(text, options)
    else:
        parsed = [parse_concepts(o, list(options), answer_only=cot) if o is not None else None for o in outputs]
        concepts = majority_concepts(parsed, options)
        if len(outputs) == 1 and outputs[0] is not None:
            text = answer_line(outputs[0]) if cot else outputs[0]
    if settings.deduction_rule == HARNESS_RULE and text is None and len(outputs) > 1:
        raise InputError(
            "--deduction-rule harness reads one answer text, and the strict vote of several models gives none.",
            "Use --protocol paper (the harness's word vote) or another --deduction-rule.",
        )
    return concepts, deduction_correct(concepts, gold, settings.deduction_rule, text=text or "")


def protocol_gold(gold: Sequence[str], concepts: Sequence[str], settings: AssociationSettings) -> list[str]:
    """The gold of a deduction: under the paper protocol the task's own concepts that both images carry (the
    harness intersects the shared labels with the chain's concepts), under strict every shared option."""
    return [g for g in gold if g in concepts] if settings.paper else list(gold)
