"""Applying verification decisions to association task files: drop, redraw or splice (``chains verify``).

After :mod:`.verify` has decided every claim (see :mod:`.claims`), the image
table is *verified*: a rejected presence claim removes the label (the annotation is judged absent), a rejected
absence claim adds it (the negative was judged to show the concept). Each row is then made valid again:

* ``on_fail="resample"`` (the default): a step whose positive (or start) was rejected keeps its place and gets a
  positive (or start) redrawn, seeded, from the images verified for its concept; a negative judged to show the
  concept is redrawn from the negative pool. Where no verified image fits, a chain with a period (asynchronous:
  ``--async-run`` steps on one concept, then a bridge) is *cut* at that step, so every kept step keeps its place
  in the 3-1-3-1 pattern; a synchronous chain (one concept throughout) splices the step out instead;
* ``on_fail="drop"``: a step whose positive was rejected is dropped and the next step follows on from the last
  kept image (an asynchronous chain's runs get shorter: its period is not kept); a rejected bridge is redrawn.

Single-step and deduction tasks with a rejected claim are dropped whole; deduction golds follow the verified
labels. Every surviving row is checked against the builder's invariants.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from commonlink.kinds.association.chains import AssociationBuilder, ChainInvariantError
from commonlink.kinds.association.format import (
    PLAN_BRIDGE,
    LabelledImage,
    step_concept_codes,
)
from commonlink.kinds.association.refine.claims import (
    Claim,
    Decision,
    describe,
    negative_claims,
    row_claims,
)
from commonlink.seeding import rng_for


@dataclass
class Drop:
    task: str
    id: str
    step: int | None  #: None: the whole task / chain
    reason: str


@dataclass
class Outcome:
    rows: int = 0
    kept_rows: int = 0
    dropped_rows: int = 0
    steps: int = 0
    kept_steps: int = 0
    redrawn_negatives: int = 0
    drops: list[Drop] = field(default_factory=list)
    resampled: list[Drop] = field(default_factory=list)  #: steps kept with a redrawn positive (or start)


def verified_table(table: Sequence[LabelledImage], rejected: dict[Claim, Decision]) -> list[LabelledImage]:
    """The image table with every rejected claim's label flipped: a rejected presence claim loses its label, a
    negative judged to show a concept gains it (in the table's option order it comes last)."""
    flips: dict[int, dict[str, bool]] = {}
    for (index, concept), decision in rejected.items():
        flips.setdefault(index, {})[concept] = not decision.present
    out = []
    for i, img in enumerate(table):
        if i not in flips:
            out.append(img)
            continue
        labels = [lb for lb in img.labels if flips[i].get(lb, True)]
        labels += [c for c, add in flips[i].items() if add and c not in labels]
        out.append(LabelledImage(img.id, labels, img.width, img.height, img.origin, img.crop, img.name))
    return out


ON_FAIL = ("resample", "drop")
_ATTEMPTS = 16


@dataclass
class Repair:
    """What a chain's repair may draw from: verified images per concept, and the run's seed and mode."""

    builder: AssociationBuilder
    trusted: dict[str, np.ndarray]  #: concept -> images whose claim for it was kept (verified, or not asked)
    on_fail: str = "resample"

    def pool(self, concepts: Sequence[str]) -> np.ndarray:
        pools = [self.trusted.get(c, np.zeros(0, dtype=np.int32)) for c in concepts]
        out = pools[0]
        for other in pools[1:]:
            out = np.intersect1d(out, other)
        return out


def verify_chain(
    row: dict, repair: Repair, rejected: dict[Claim, Decision], table, outcome: Outcome, task: str
) -> dict | None:
    """The chain with its rejected steps dropped (``on_fail="drop"``) or their positives redrawn from verified
    images (``"resample"``); later steps are repaired to follow on (see :func:`repair_chain`)."""
    n = len(row["positive"])
    outcome.steps += n
    bad = {t: claim for t, claim in row_claims(task, row) if claim in rejected}  # presence claims only
    drop: set[int] = set()
    start = int(row["start"])
    reasons = {t: describe(claim, table, rejected[claim]) for t, claim in bad.items()}
    if repair.on_fail == "drop":
        # A bridge is where an asynchronous chain switches concept: dropping one would strand the next run
        # (its queries lack the new concept), so a rejected bridge is redrawn from verified bridge images.
        for t in sorted(t for t in bad if t >= 0 and row["plan"][t] != PLAN_BRIDGE):
            outcome.drops.append(Drop(task, row["id"], t, reasons[t]))
            drop.add(t)
    if -1 in bad:
        why = "start image: " + describe(bad[-1], table, rejected[bad[-1]])
        codes = step_concept_codes(row["plan"])
        fresh = _pick(
            repair.pool([row["concepts"][int(codes[0])]]),
            {int(row["positive"][0])},
            rng_for(repair.builder.config.seed, "verify", row["id"], "start"),
        )
        if fresh is not None:
            start = fresh
            outcome.resampled.append(Drop(task, row["id"], -1, why + "; start redrawn from verified images"))
        elif keeps_period(repair, row):
            outcome.drops.append(Drop(task, row["id"], None, why + "; no verified image to redraw it from"))
            return None
        else:
            first = next((t for t in range(n) if t not in drop), None)
            if first is None:
                outcome.drops.append(Drop(task, row["id"], None, why))
                return None
            drop.add(first)  # the first kept step's positive becomes the start
            outcome.drops.append(Drop(task, row["id"], first, why + "; this step's positive becomes the start"))
            start = int(row["positive"][first])
    keep = [t for t in range(n) if t not in drop]
    positive = [int(p) for p in row["positive"]]
    negative = [int(q) for q in row["negative"]]
    keep = repair_chain(row, repair, start, keep, positive, negative, outcome, task, reasons)
    warm = int(row["warmup"])
    if not any(t >= warm for t in keep):
        outcome.drops.append(Drop(task, row["id"], None, "no scored step left after verification"))
        return None
    outcome.kept_steps += len(keep)
    return {
        **row,
        "start": start,
        "positive": [positive[t] for t in keep],
        "negative": [negative[t] for t in keep],
        "answer": [int(row["answer"][t]) for t in keep],
        "plan": "".join(row["plan"][t] for t in keep),
        "warmup": sum(t < warm for t in keep),
        "num_steps": len(keep),
    }


def repair_chain(
    row: dict,
    repair: Repair,
    start: int,
    keep: list[int],
    positive: list[int],
    negative: list[int],
    outcome: Outcome,
    task: str,
    reasons: dict[int, str],
) -> list[int]:
    """Make every kept step valid again, first invalid step first: redraw its negative (disjoint from the new
    query) when that suffices, else redraw its positive from the verified images of its pool, else drop it.
    Edits ``positive``/``negative`` in place; returns the kept step indices. ``reasons``: the rejection behind a
    step (resample mode keeps rejected steps: their positive lost the label, so they come up invalid here)."""
    builder = repair.builder
    concepts = row["concepts"]
    codes = step_concept_codes(row["plan"])
    while True:
        text = "".join(row["plan"][t] for t in keep)
        current = [np.asarray([v[t] for t in keep], dtype=np.int32) for v in (positive, negative)]
        invalid = builder.invalid_steps(concepts, text, start, current[0], current[1])
        if not invalid.any():
            return keep
        k = int(np.flatnonzero(invalid)[0])
        t = keep[k]
        query = start if k == 0 else positive[keep[k - 1]]
        rng = rng_for(builder.config.seed, "verify", row["id"], t)

        # this step's text, arrays and index bound now: valid_with is only called within this pass of the loop
        def valid_with(p: int, q: int, current=current, k=k, text=text) -> bool:
            trial = [current[0].copy(), current[1].copy()]
            trial[0][k], trial[1][k] = p, q
            return not builder.invalid_steps(concepts, text, start, trial[0], trial[1])[k]

        fixed = False
        for _ in range(_ATTEMPTS):
            q = _redraw_negative(builder, row, query, rng)
            if q is not None and valid_with(positive[t], q):
                negative[t] = q
                outcome.redrawn_negatives += 1
                fixed = True
                break
        if not fixed:
            step_concepts = concepts if row["plan"][t] == PLAN_BRIDGE else [concepts[int(codes[t])]]
            avoid = {query, *([positive[keep[k + 1]]] if k + 1 < len(keep) else [])}
            for _ in range(_ATTEMPTS):
                p = _pick(repair.pool(step_concepts), avoid, rng)
                if p is None:
                    break
                q = negative[t] if valid_with(p, negative[t]) else _redraw_negative(builder, row, query, rng)
                if q is not None and valid_with(p, q):
                    positive[t], negative[t] = p, q
                    why = (
                        f"{reasons[t]}; positive redrawn from verified images"
                        if t in reasons
                        else "positive redrawn from "
                        "verified images: after the dropped step(s) the old one no longer linked to its query"
                    )
                    outcome.resampled.append(Drop(task, row["id"], t, why))
                    fixed = True
                    break
        if not fixed:
            why = (
                f"{reasons[t]}; no verified image to redraw from"
                if t in reasons
                else "splice: after the dropped step(s) "
                "no verified image links this step's query and positive through its concept"
            )
            if keeps_period(repair, row):  # cut here: what is kept keeps its place in the chain's pattern
                outcome.drops.extend(
                    Drop(task, row["id"], u, f"cut: {why}" if u == t else "cut: after an unrepairable step")
                    for u in keep[k:]
                )
                del keep[k:]
                return keep
            keep.pop(k)
            outcome.drops.append(Drop(task, row["id"], t, why))


def keeps_period(repair: Repair, row: dict) -> bool:
    """Whether an unrepairable step cuts the chain (resample mode, a chain with bridges) rather than splicing."""
    return repair.on_fail == "resample" and PLAN_BRIDGE in row["plan"]


def _pick(pool: np.ndarray, avoid: set[int], rng: np.random.Generator) -> int | None:
    """A random image of ``pool`` not in ``avoid`` (None when there is none)."""
    if len(pool) == 0:
        return None
    for _ in range(_ATTEMPTS):
        choice = int(pool[rng.integers(0, len(pool))])
        if choice not in avoid:
            return choice
    left = [int(i) for i in pool if int(i) not in avoid]
    return left[int(rng.integers(0, len(left)))] if left else None


def _redraw_negative(builder: AssociationBuilder, row: dict, query: int, rng: np.random.Generator) -> int | None:
    """A negative for ``query`` from the chain's negative pool, or None if none fits."""
    pool = builder.negative_pool(row["concepts"])
    if builder.config.negatives == "disjoint" and len(pool):
        pool = pool[~builder.index.share_any_label(np.full(len(pool), query, dtype=np.int32), pool)]
    if not len(pool):
        return None
    return int(pool[rng.integers(0, len(pool))])


def verify_row(
    task: str, row: dict, repair: Repair, rejected: dict[Claim, Decision], table, outcome: Outcome
) -> dict | None:
    builder = repair.builder
    outcome.rows += 1
    if task in ("synchronous", "asynchronous"):
        result = verify_chain(row, repair, rejected, table, outcome, task)
    else:
        outcome.steps += 1
        failed = [claim for _, claim in (*row_claims(task, row), *negative_claims(task, row)) if claim in rejected]
        if failed:
            outcome.drops.append(Drop(task, row["id"], None, describe(failed[0], table, rejected[failed[0]])))
            result = None
        else:
            outcome.kept_steps += 1
            result = row
            if task == "deduction":  # gold follows the verified labels
                shared = set(builder.index.images[row["image_1"]].labels) & set(
                    builder.index.images[row["image_2"]].labels
                )
                result = {**row, "gold": [c for c in builder.options if c in shared]}
    if result is not None and task not in ("synchronous", "asynchronous"):
        try:  # a label a negative was found to carry elsewhere can break a task that passed its own claims
            builder.check_row(task, result)
        except ChainInvariantError as exc:
            outcome.drops.append(Drop(task, row["id"], None, f"invalid on the verified labels: {exc}"))
            result = None
    if result is None:
        outcome.dropped_rows += 1
        return None
    builder.check_row(task, result)
    outcome.kept_rows += 1
    return result
