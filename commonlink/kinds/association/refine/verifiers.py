"""The verifier models of ``chains verify``: each claim's yes/no question, asked of one model after another.

A claim ``(image index, concept)`` becomes one question (:data:`VERIFY_PROMPT`, choices Yes/No) whose request id
is its prediction-cache key, so a killed run replays the answers it already has. :func:`ask_verifiers` asks the
first model about every claim and each later model only about the claims every model before it left undecided
("This process begins with Gemini-1.5-Flash, then GPT4-V once Gemini-1.5-Flash is unable to reach a decision",
Labyrinth of Links App. A.1); :mod:`.verify` then adds the human decisions and applies them.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from commonlink.errors import InputError
from commonlink.eval.backends import (
    Backend,
    GenerationRequest,
    GenerationSettings,
    RequestFailure,
    load_backend,
)
from commonlink.eval.cache import CachedGenerator, PredictionCache, run_key
from commonlink.eval.imaging import resize_square
from commonlink.eval.parsing import parse_yes_no
from commonlink.kinds.association.format import ImageFetcher, LabelledImage
from commonlink.kinds.association.prompts import ImageSlot
from commonlink.kinds.association.refine.claims import Claim, Decision, model_verdict
from commonlink.progress import track

VERIFY_PROTOCOL = "association-verify-v2"  # v2: ordered verifiers, undecided kept apart, negatives asked
VERIFY_CHOICES = ["Yes", "No"]
#: The paper gives no wording for its verification question; this one reuses its output instruction (Table 3).
VERIFY_PROMPT = (
    'Does this image show the {kind} "{concept}"? Your response should be direct and exclusively only '
    "include one of the following items. Options: [Yes, No]."
)


#: The paper protocol's verification: the authors' harness (``LLM_Inception`` data/refinement/refine.py), verbatim:
#: the question, the image (its crop resized to 336 x 336), the output instruction; only "Yes" keeps a claim.
HARNESS_VERIFY_PROTOCOL = "association-verify-harness-v1"
HARNESS_VERIFY_QUESTION = "Analyze the provided image and determine if it contains the {kind}: {concept}.\n Image:"
HARNESS_VERIFY_INSTRUCTION = "Provide only 'Yes' or 'No' as the answer, without any additional explanation."
HARNESS_IMAGE_SIDE = 336
_HARNESS_YES_NO = re.compile(r"\b(yes|no)\b", re.IGNORECASE)


def harness_yes_no(text: str | None) -> bool | None:
    """The harness's reading (``find_yes_or_no``): the first whole word yes or no, else undecided (None)."""
    match = _HARNESS_YES_NO.search(text or "")
    return None if match is None else match.group(1).lower() == "yes"


def harness_concept(concept: str) -> str:
    """The concept as the harness writes it into the question: its lower-case letters only (``hit-18.1`` ->
    ``hit``)."""
    return "".join(c for c in concept if c.islower()) or concept


def claim_request_id(image_id: str, concept: str) -> str:
    """The request id of a claim's question (its prediction-cache key, so it must not change between runs)."""
    return f"verify/{image_id}/{concept}"


def verification_request(
    image, concept: str, concept_kind: str, image_id: str, *, harness: bool = False
) -> GenerationRequest:
    """A claim's question: ours (:data:`VERIFY_PROMPT`), or with ``harness`` the authors' (the image resized to
    336 x 336, the question and instruction verbatim)."""
    if harness:
        prompt = [
            HARNESS_VERIFY_QUESTION.format(kind=concept_kind, concept=harness_concept(concept)),
            ImageSlot(0),
            HARNESS_VERIFY_INSTRUCTION,
        ]
        image = resize_square(image, HARNESS_IMAGE_SIDE)
    else:
        prompt = [ImageSlot(0), VERIFY_PROMPT.format(kind=concept_kind, concept=concept)]
    return GenerationRequest(
        id=claim_request_id(image_id, concept),
        images=[image],
        prompt=prompt,
        choices=list(VERIFY_CHOICES),
        multi_select=False,
    )


def ask_model(
    claims: Sequence[Claim],
    table: Sequence[LabelledImage],
    concept_kind: str,
    generator: CachedGenerator,
    progress: bool,
    label: str = "verify",
    *,
    harness: bool = False,
) -> dict[Claim, str]:
    """One model's raw answer to every claim's question (cached answers replayed, no image opened for them)."""
    fetcher = ImageFetcher()
    answers: dict[Claim, str] = {}
    chunks = [claims[i : i + 64] for i in range(0, len(claims), 64)]  # images decoded a chunk at a time
    for chunk in track(chunks, f"{label} (claims x64)", total=len(chunks), unit="chunks", disable=not progress):
        todo = []
        for claim in chunk:
            hit = generator.cached_answer(claim_request_id(table[claim[0]].id, claim[1]))
            if hit is None:
                todo.append(claim)
            else:
                answers[claim] = hit
        if not todo:
            continue
        requests = [
            verification_request(
                fetcher.open(table[i].origin, table[i].crop, what=f"image {table[i].id}"),
                c,
                concept_kind,
                table[i].id,
                harness=harness,
            )
            for i, c in todo
        ]
        for claim, request, output in zip(todo, requests, generator.answer(requests)):
            if isinstance(output, RequestFailure):
                raise InputError(
                    f"The backend gave no answer for {request.id} ({output.reason}).",
                    "Lower --batch-size or --max-pixels and rerun: answers so far are cached.",
                )
            answers[claim] = output
    return answers


@dataclass
class Verifiers:
    """The ordered verifier models: names/backends to load one at a time, or ready instances (tests)."""

    models: list[str] = field(default_factory=list)
    backends: list[str] = field(default_factory=list)
    options: list[dict] = field(default_factory=list)
    instances: list[Backend] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.instances) or len(self.models)

    def open(self, n: int) -> tuple[Backend, bool]:
        """The ``n``-th verifier and whether the caller must close it."""
        if self.instances:
            return self.instances[n], False
        return load_backend(self.backends[n], self.models[n], **self.options[n]), True


def verifiers_of(models, backend, backend_options, backend_instances) -> Verifiers:
    """Normalise ``verify_tasks``' model arguments: one backend name/options for all models, or one per model."""
    if backend_instances is not None:
        return Verifiers(
            instances=[backend_instances] if not isinstance(backend_instances, Sequence) else list(backend_instances)
        )
    models = [models] if isinstance(models, str) else list(models or [])
    backends = [backend] * len(models) if isinstance(backend, str) else list(backend)
    options = (
        [backend_options or {}] * len(models)
        if not isinstance(backend_options, (list, tuple))
        else list(backend_options)
    )
    if models and (len(backends) != len(models) or len(options) != len(models)):
        raise InputError(
            f"{len(models)} verifier models but {len(backends)} backends.",
            "Give one --backend for all models, or one per --model, in the same order.",
        )
    return Verifiers(models, backends, options)


def ask_verifiers(
    claims: Sequence[Claim],
    table: Sequence[LabelledImage],
    concept_kind: str,
    verifiers: Verifiers,
    cache: PredictionCache,
    images_sha: str | None,
    settings: GenerationSettings,
    batch_size: int | None,
    progress: bool,
    *,
    harness: bool = False,
) -> tuple[dict[Claim, Decision], list[dict]]:
    """Each model in order, asked only about the claims every model before it left undecided (App. A.1); with
    ``harness`` the authors' question and reading (:func:`harness_yes_no`)."""
    decided = {c: Decision("undecided", "model", present=c[1] in table[c[0]].labels) for c in claims}
    pending = list(claims)
    infos = []
    for n in range(len(verifiers)):
        instance, owned = verifiers.open(n)
        try:
            info = instance.info
            run = run_key(
                task="association/verify",
                protocol=HARNESS_VERIFY_PROTOCOL if harness else VERIFY_PROTOCOL,
                images=images_sha,
                model=info.fingerprint,
                backend=info.backend,
                settings=settings.to_dict(),
            )
            generator = CachedGenerator(instance, cache, settings, run, batch_size or info.default_batch_size)
            answers = ask_model(
                pending, table, concept_kind, generator, progress, f"verify with {info.model}", harness=harness
            )
        finally:
            if owned:
                instance.close()
        infos.append(
            {"model": info.model, "fingerprint": info.fingerprint, "backend": info.backend, "asked": len(pending)}
        )
        for claim in pending:
            said = harness_yes_no(answers[claim]) if harness else parse_yes_no(answers[claim])
            d = decided[claim]
            d.asked.append({"model": info.model, "answer": answers[claim], "said": said})
            d.verdict, d.answer, d.model = model_verdict(said, d.present), answers[claim], info.model
        pending = [c for c in pending if decided[c].verdict == "undecided"]
        infos[-1]["undecided"] = len(pending)
    return decided, infos


__all__ = [
    "HARNESS_VERIFY_INSTRUCTION",
    "HARNESS_VERIFY_PROTOCOL",
    "HARNESS_VERIFY_QUESTION",
    "VERIFY_CHOICES",
    "VERIFY_PROMPT",
    "VERIFY_PROTOCOL",
    "Verifiers",
    "ask_model",
    "ask_verifiers",
    "claim_request_id",
    "harness_concept",
    "harness_yes_no",
    "verification_request",
    "verifiers_of",
]
