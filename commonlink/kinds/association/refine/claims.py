"""What association tasks claim about their images, and the decisions taken on those claims.

A *claim* is one ``(image index, concept)`` pair a task relies on. Its *polarity* follows the image table:

* a **presence** claim (the image is labelled with the concept): a chain's start image shows the first step's
  concept, a step's positive shows the step's concept (a bridge positive: both), a single-step task's query,
  positive and memory images and a deduction task's two images show the task's concept;
* an **absence** claim (the image is not labelled with it): a chain step's negative shows none of the chain's
  concepts, a single-step task's negative does not show its concept. Dataset labels are often incomplete, and
  a negative that does show the concept makes the step ambiguous (both candidates are right).

Both are asked the same question ("Does this image show ...?"); a *keep* means the answer agrees with the
label, a *reject* that it contradicts it, *undecided* that no verifier gave a readable yes or no.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from commonlink.kinds.association.format import (
    PLAN_BRIDGE,
    LabelledImage,
    step_concept_codes,
)
from commonlink.kinds.association.memory import image_name

Claim = tuple[int, str]  #: (image index, concept)
VERDICTS = ("keep", "reject", "undecided")


def row_claims(task: str, row: dict) -> Iterator[tuple[int, Claim]]:
    """``(step, claim)`` for every presence claim of a row; step -1 is a chain's start image (or the whole task)."""
    if task == "single_step":
        positive = row["candidates"][row["answer"]]
        for image in (row["query"], positive, *row["memory"]):
            yield -1, (int(image), row["concept"])
    elif task == "deduction":
        yield -1, (int(row["image_1"]), row["concept"])
        yield -1, (int(row["image_2"]), row["concept"])
    else:
        concepts = row["concepts"]
        codes = step_concept_codes(row["plan"])
        yield -1, (int(row["start"]), concepts[int(codes[0])])
        for t, positive in enumerate(row["positive"]):
            if row["plan"][t] == PLAN_BRIDGE:
                for concept in concepts:
                    yield t, (int(positive), concept)
            else:
                yield t, (int(positive), concepts[int(codes[t])])


def negative_claims(task: str, row: dict) -> Iterator[tuple[int, Claim]]:
    """``(step, claim)`` for every absence claim of a row: each negative against each concept it must lack."""
    if task == "single_step":
        yield -1, (int(row["candidates"][1 - row["answer"]]), row["concept"])
    elif task in ("synchronous", "asynchronous"):
        for t, negative in enumerate(row["negative"]):
            for concept in row["concepts"]:
                yield t, (int(negative), concept)


def task_claims(task: str, row: dict, negatives: bool = True) -> Iterator[tuple[int, Claim]]:
    """Every claim of a row: presence claims, then (with ``negatives``) absence claims."""
    yield from row_claims(task, row)
    if negatives:
        yield from negative_claims(task, row)


@dataclass
class Decision:
    verdict: str  #: "keep" | "reject" | "undecided" (relative to the claim's polarity, see the module doc)
    source: str  #: "model" | "human" | "unverified"
    answer: str | None = None  #: the deciding model's raw answer (the last one asked when undecided), or None
    present: bool = True  #: the claim's polarity: the image table labels the image with the concept
    model: str | None = None  #: the model whose answer decided (None: human or unverified)
    asked: list[dict] = field(default_factory=list)  #: every model asked, in order: {"model", "answer", "said"}

    def applied(self, undecided: str) -> str:
        """The verdict acted on: an undecided claim is kept or rejected as ``undecided`` says."""
        return undecided if self.verdict == "undecided" else self.verdict


def model_verdict(said: bool | None, present: bool) -> str:
    """A model's readable yes/no against the label: agreeing keeps the claim, contradicting rejects it."""
    if said is None:
        return "undecided"
    return "keep" if said == present else "reject"


def describe(claim: Claim, table: Sequence[LabelledImage], decision: Decision) -> str:
    """Why a claim fell, for reports: who rejected it, on which image, and what the model said."""
    img = table[claim[0]]
    where = (
        f"image {img.id} ({image_name(img)})" if decision.present else f"negative image {img.id} ({image_name(img)})"
    )
    if decision.verdict == "undecided":
        return f"no verifier could decide {claim[1]!r} on {where} (rejected by --undecided reject)"
    if decision.source != "model":
        return f"a reviewer rejected {claim[1]!r} on {where}"
    said = (
        f" (answered {decision.answer.strip()[:60]!r}{f' by {decision.model}' if decision.model else ''})"
        if decision.answer
        else ""
    )
    return f"the model {'rejected' if decision.present else 'found'} {claim[1]!r} on {where}{said}"
