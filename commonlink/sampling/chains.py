"""Association tasks built annotation-free from a labelled image set (paper §3, §4.1; docs/sampling.md).

Two samples are associated when their label sets intersect. For every chosen concept ``c`` the *positive pool*
holds the images labelled ``c``; the *negative pool* of a task holds the images that carry none of the task's
concepts. By default (``negatives="disjoint"``, the paper's eqs. 1, 4, 5: ``y_query ∩ y_q = ∅``) a negative
also shares no label at all with the step's query; ``negatives="chain"`` (the earlier default) only asks that
it lack the task's concepts. From the pools:

* **single_step** -- a query, ``memory_size`` memory images that share the concept, and two candidates (the
  positive and a negative, shuffled) with the answer index;
* **deduction** -- two images from one concept's pool, the option list (the chosen concepts) and the gold
  shared concepts;
* **synchronous** -- per concept, chains pre-sampled to ``warmup + max_steps`` steps: the positive of step
  ``t`` is the query of step ``t + 1``; each step has one positive and one negative candidate;
* **asynchronous** -- per concept pair, the period schedule ``run`` steps on concept 1, ``bridge`` steps from
  the pool sharing both, ``run`` steps on concept 2, ``bridge`` steps (3-1-3-1 in the authors' harness).

Every unit (one task, one chain) has its own generator ``rng_for(seed, kind, concept(s), index)``, so any
chain can be rebuilt alone and results do not depend on build order. Chains are drawn with numpy a chain at a
time and written as they are made (memory stays flat as the number of chains grows). Invariants are checked
on every task: a positive shares the step's concept with its query, a negative carries none of the task's
concepts (and, with disjoint negatives, no label of its query), the two candidates differ, and a positive is
never its own query.

Files written into the output folder (see README "chains"): ``images.jsonl`` (the image table) and one
``<task>.jsonl`` per task type with a ``<task>.jsonl.meta.json`` sidecar of kind ``association_chains``.
"""

from __future__ import annotations

import dataclasses
import difflib
import itertools
import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from commonlink import __version__
from commonlink.constants import DEFAULT_MIN_PIXELS
from commonlink.errors import (
    CommonlinkError,
    InputError,
    NotEnoughDataError,
    SchemaError,
)
from commonlink.fileio import atomic_write, remove_stale_temp_files, sha256_file
from commonlink.formats.association import (
    IMAGE_TABLE_TASK,
    IMAGES_FILENAME,
    PLAN_BRIDGE,
    PLAN_CONCEPT_1,
    PLAN_CONCEPT_2,
    TASKS,
    LabelledImage,
    name_unnamed,
    step_concept_codes,
    task_file,
    with_sha256,
)
from commonlink.formats.meta import (
    ASSOCIATION_CHAINS_KIND,
    meta_path,
    utc_now,
    write_meta,
)
from commonlink.locks import output_lock
from commonlink.progress import track
from commonlink.sampling.chain_sources import SourceReport
from commonlink.sampling.presets import (
    ConceptPreset,
    apply_aliases,
    check_preset_labels,
)
from commonlink.seeding import rng_for

NEGATIVE_MODES = ("disjoint", "chain")
_MAX_VECTOR_ROUNDS = 32
_DISJOINT_TRIES = 4


class ChainInvariantError(CommonlinkError):
    """A built task breaks an association invariant (a bug, never bad input)."""


@dataclass
class ChainConfig:
    """Everything that decides what gets built (recorded in every meta sidecar)."""

    seed: int = 0
    concepts: list[str] | None = None  #: explicit concepts; else the top_k largest pools
    top_k: int = 8
    min_pool: int = 10  #: smallest pool a top-k concept may have
    pairs: list[list[str]] | None = None  #: asynchronous concept pairs; None = pick up to auto_pairs
    auto_pairs: int = 4
    min_pixels: int = DEFAULT_MIN_PIXELS  #: applied by the source reader; recorded here
    memory_size: int = 3  #: K memory examples of a single-step task
    single_step_per_concept: int = 100
    deductions_per_concept: int = 100
    chains_per_concept: int = 2000  #: synchronous chains per concept and asynchronous chains per pair
    max_steps: int = 500  #: scored steps a chain is pre-sampled to (after the warm-up steps)
    warmup: int = 3  #: warm-up steps at the start of each chain (the correct choice is forced in eval)
    async_run: int = 3  #: steps on one concept before a bridge
    bridge_steps: int = 1
    negatives: str = "disjoint"  #: disjoint: a negative shares no label with its query (paper eq. 1); chain: lacks the task's concepts
    preset: str | None = None  #: the paper's concept set the concepts and pairs came from (sampling.presets)
    concept_kind: str = "concept"  #: what the labels are (attribute, affordance, action, object): used by prompts
    tasks: list[str] = field(default_factory=lambda: list(TASKS))

    def validate(self) -> None:
        unknown = [t for t in self.tasks if t not in TASKS]
        if unknown:
            raise InputError(f"Unknown task type(s) {unknown}.", f"Use some of: {', '.join(TASKS)}.")
        if self.negatives not in NEGATIVE_MODES:
            raise InputError(f"--negatives must be one of {NEGATIVE_MODES}, not {self.negatives!r}.")
        checks = {"--memory-size": (self.memory_size, 0), "--max-steps": (self.max_steps, 1), "--warmup": (self.warmup, 0),
                  "--async-run": (self.async_run, 1), "--bridge-steps": (self.bridge_steps, 1), "--top-k": (self.top_k, 1),
                  "--chains": (self.chains_per_concept, 0), "--single-steps": (self.single_step_per_concept, 0),
                  "--deductions": (self.deductions_per_concept, 0), "--min-pool": (self.min_pool, 1)}
        for option, (value, low) in checks.items():
            if value < low:
                raise InputError(f"{option} must be at least {low}, got {value}.")

    def async_period(self) -> str:
        return PLAN_CONCEPT_1 * self.async_run + PLAN_BRIDGE * self.bridge_steps + PLAN_CONCEPT_2 * self.async_run + PLAN_BRIDGE * self.bridge_steps

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


# ---------------------------------------------------------------------------------------------- label index
class LabelIndex:
    """Images sorted by id, their labels as ids, and per-label membership (the pools)."""

    def __init__(self, images: Sequence[LabelledImage]):
        by_id: dict[str, LabelledImage] = {}
        for img in images:
            if img.id in by_id:
                raise SchemaError(f"Two samples have the same id {img.id!r}.", "Make the source's image names unique.")
            by_id[img.id] = img
        self.images: list[LabelledImage] = [by_id[k] for k in sorted(by_id)]
        self.label_names: list[str] = sorted({label for img in self.images for label in img.labels})
        self.label_id = {name: i for i, name in enumerate(self.label_names)}
        members: list[list[int]] = [[] for _ in self.label_names]
        for i, img in enumerate(self.images):
            for label in dict.fromkeys(img.labels):
                members[self.label_id[label]].append(i)
        self._members = [np.asarray(m, dtype=np.int32) for m in members]
        self._has: dict[str, np.ndarray] = {}
        self._bits: np.ndarray | None = None
        self._digits: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.images)

    def pool(self, concept: str) -> np.ndarray:
        """Indices of the images labelled ``concept`` (sorted)."""
        return self._members[self.label_id[concept]] if concept in self.label_id else np.zeros(0, dtype=np.int32)

    def digits(self) -> np.ndarray:
        """``str(i)`` for every image index (at least 0 and 1), as an object array: integer arrays to text by lookup."""
        if self._digits is None:
            self._digits = np.array([str(i) for i in range(max(2, len(self.images)))], dtype=object)
        return self._digits

    def pool_sizes(self) -> dict[str, int]:
        return {name: len(m) for name, m in zip(self.label_names, self._members)}

    def has(self, concept: str) -> np.ndarray:
        """Boolean membership vector of ``concept`` over all images."""
        mask = self._has.get(concept)
        if mask is None:
            mask = np.zeros(len(self.images), dtype=bool)
            mask[self.pool(concept)] = True
            self._has[concept] = mask
        return mask

    def both(self, a: str, b: str) -> np.ndarray:
        return np.flatnonzero(self.has(a) & self.has(b)).astype(np.int32)

    def without(self, concepts: Sequence[str]) -> np.ndarray:
        """Indices of the images carrying none of ``concepts`` (the negative pool of a task)."""
        mask = np.zeros(len(self.images), dtype=bool)
        for concept in concepts:
            mask |= self.has(concept)
        return np.flatnonzero(~mask).astype(np.int32)

    def label_bits(self) -> np.ndarray:
        """Packed label sets: one uint64 per image when there are at most 64 labels (an overlap test is one
        AND), else images x ceil(labels/8) bytes. For overlap tests of many pairs at once."""
        if self._bits is None:
            if len(self.label_names) <= 64:
                bits = np.zeros(len(self.images), dtype=np.uint64)
                for lid, members in enumerate(self._members):
                    bits[members] |= np.uint64(1) << np.uint64(lid)
            else:
                bits = np.zeros((len(self.images), (len(self.label_names) + 7) // 8), dtype=np.uint8)
                for lid, members in enumerate(self._members):
                    bits[members, lid // 8] |= np.uint8(0x80 >> (lid % 8))
            self._bits = bits
        return self._bits

    def share_any_label(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Per pair (a[i], b[i]): whether the two images share a label."""
        bits = self.label_bits()
        if bits.ndim == 1:
            return (bits[a] & bits[b]) != 0
        return (bits[a] & bits[b]).any(axis=1)

    def suggest(self, name: str) -> list[str]:
        return difflib.get_close_matches(name, self.label_names, n=3, cutoff=0.6)


# ---------------------------------------------------------------------------------------------- choosing concepts
def parse_concepts(text: str | None) -> list[str] | None:
    if text is None or not text.strip():
        return None
    return [c.strip() for c in text.split(",") if c.strip()]


def parse_pairs(text: str | None, known: Sequence[str]) -> list[list[str]] | None:
    """``"metal-furry,ripe-fresh"`` -> pairs; a hyphen inside a name is resolved against the known labels."""
    if text is None or not text.strip():
        return None
    known_set = set(known)
    pairs = []
    for piece in (p.strip() for p in text.split(",") if p.strip()):
        if ":" in piece:
            splits = [piece.split(":", 1)]
        else:
            cuts = [i for i, ch in enumerate(piece) if ch == "-"]
            candidates = [[piece[:i].strip(), piece[i + 1:].strip()] for i in cuts]
            splits = [c for c in candidates if c[0] in known_set and c[1] in known_set] or candidates[:1]
        if not splits or not splits[0][0] or not splits[0][1]:
            raise InputError(f"--pairs entry {piece!r} is not CONCEPT1-CONCEPT2.", "e.g. --pairs metal-furry,ripe-fresh")
        if len(splits) > 1:
            raise InputError(f"--pairs entry {piece!r} can be split more than one way.", "Write it as CONCEPT1:CONCEPT2.")
        a, b = splits[0]
        if a == b:
            raise InputError(f"--pairs entry {piece!r} pairs a concept with itself.", "Pair two different concepts.")
        pairs.append([a, b])
    return pairs


def _unknown_concept(index: LabelIndex, name: str, option: str) -> InputError:
    hint = index.suggest(name)
    fix = f"Did you mean {', '.join(repr(h) for h in hint)}?" if hint else "Run `commonlink chains SOURCE --list-concepts` to see the labels and pool sizes."
    return InputError(f"{option}: no image is labelled {name!r}.", fix)


def choose_concepts(index: LabelIndex, config: ChainConfig) -> tuple[list[str], list[str]]:
    """The concepts to build for (explicit, else the top-k pools of at least min_pool images), plus notes."""
    notes: list[str] = []
    sizes = index.pool_sizes()
    if config.concepts:
        for name in config.concepts:
            if name not in sizes:
                raise _unknown_concept(index, name, "--concepts")
        return list(dict.fromkeys(config.concepts)), notes
    eligible = sorted((name for name, n in sizes.items() if n >= config.min_pool), key=lambda n: (-sizes[n], n))
    if not eligible:
        biggest = max(sizes.values(), default=0)
        raise NotEnoughDataError(
            f"No label has a pool of at least {config.min_pool} images (largest: {biggest}).",
            "Lower --min-pool or --min-pixels, or add images.",
        )
    chosen = eligible[: config.top_k]
    if len(chosen) < config.top_k:
        notes.append(f"only {len(chosen)} labels have at least {config.min_pool} images (asked for top {config.top_k})")
    return chosen, notes


def _require(pool_size: int, need: int, *, what: str, concept: str, fix: str) -> None:
    if pool_size < need:
        raise NotEnoughDataError(
            f"Concept {concept!r} has {pool_size} image(s) in its {what}; the request needs at least {need}.", fix
        )


# ---------------------------------------------------------------------------------------------- tasks as arrays
@dataclass
class ChainArrays:
    """One pre-sampled chain: image indices into the image table, per step."""

    id: str
    kind: str  #: "synchronous" | "asynchronous"
    concepts: list[str]  #: [c] or [c1, c2]
    start: int  #: query image of step 0
    positive: np.ndarray  #: int32 (steps,); positive[t] is the query of step t + 1
    negative: np.ndarray  #: int32 (steps,)
    answer: np.ndarray  #: uint8 (steps,); index of the positive among the two candidates
    plan: str  #: one character a step: "1" concept 1, "2" concept 2, "b" bridge
    warmup: int  #: the first ``warmup`` steps are warm-up steps

    def to_json(self) -> dict:
        return {"id": self.id, "kind": self.kind, "concepts": self.concepts, "start": int(self.start),
                "positive": self.positive.tolist(), "negative": self.negative.tolist(), "answer": self.answer.tolist(),
                "plan": self.plan, "warmup": self.warmup, "num_steps": int(len(self.positive))}

    def to_line(self, digits: np.ndarray | None = None) -> str:
        """``json.dumps(self.to_json(), separators=(",", ":"))``, assembled from parts: the integer arrays are
        most of a chain file. ``digits`` (``str(i)`` for every image index, an object array) turns an array into
        text by lookup, about twice as fast as the JSON encoder."""
        def ints(values: np.ndarray) -> str:
            if digits is not None:
                return "[" + ",".join(digits[values].tolist()) + "]"
            return json.dumps(values.tolist(), separators=(",", ":"))
        return (f'{{"id":{json.dumps(self.id, ensure_ascii=False)},"kind":{json.dumps(self.kind)},'
                f'"concepts":{json.dumps(self.concepts, ensure_ascii=False, separators=(",", ":"))},"start":{int(self.start)},'
                f'"positive":{ints(self.positive)},"negative":{ints(self.negative)},"answer":{ints(self.answer)},'
                f'"plan":{json.dumps(self.plan)},"warmup":{int(self.warmup)},"num_steps":{len(self.positive)}}}')


class AssociationBuilder:
    """Draws every task from the pools of a :class:`LabelIndex`; each method rebuilds one unit alone."""

    def __init__(self, index: LabelIndex, config: ChainConfig, options: Sequence[str]):
        self.index = index
        self.config = config
        self.options = list(options)  #: the deduction option list (gold = shared labels among these)
        self._neg_cache: dict[tuple[str, ...], np.ndarray] = {}

    # -- pools --------------------------------------------------------------------------------------------
    def negative_pool(self, concepts: Sequence[str]) -> np.ndarray:
        key = tuple(sorted(concepts))
        pool = self._neg_cache.get(key)
        if pool is None:
            pool = self._neg_cache[key] = self.index.without(key)
        return pool

    def _draw_negatives(self, rng: np.random.Generator, queries: np.ndarray, concepts: Sequence[str]) -> np.ndarray:
        pool = self.negative_pool(concepts)
        if len(pool) == 0:
            raise NotEnoughDataError(
                f"No image is free of {' and '.join(repr(c) for c in concepts)}, so there is no negative candidate.",
                "Add images without these labels, or choose other concepts.",
            )
        negatives = pool[rng.integers(0, len(pool), size=len(queries))]
        if self.config.negatives == "disjoint":
            negatives = self._make_disjoint(rng, queries, negatives, pool)
        return negatives

    def _make_disjoint(self, rng, queries, negatives, pool):
        """Redraw negatives that share any label with their query (paper eq. 1: y_i ∩ y_j = ∅)."""
        bad = np.flatnonzero(self.index.share_any_label(queries, negatives))
        for _ in range(_MAX_VECTOR_ROUNDS):
            if len(bad) == 0:
                return negatives
            # _DISJOINT_TRIES candidates per clash at once: most clashes resolve in one round
            tries = pool[rng.integers(0, len(pool), size=(len(bad), _DISJOINT_TRIES))]
            fits = ~self.index.share_any_label(np.repeat(queries[bad], _DISJOINT_TRIES), tries.ravel()).reshape(tries.shape)
            found = fits.any(axis=1)
            negatives[bad[found]] = tries[found, fits[found].argmax(axis=1)]
            bad = bad[~found]
        for t in bad:  # rare: search the exact pool of this query
            ok = pool[~self.index.share_any_label(np.full(len(pool), queries[t]), pool)]
            if len(ok) == 0:
                img = self.index.images[int(queries[t])]
                raise NotEnoughDataError(
                    f"Image {img.id} (labels {img.labels}) shares a label with every negative candidate.",
                    "Use --negatives chain, or add images with other labels.",
                )
            negatives[t] = ok[rng.integers(0, len(ok))]
        return negatives

    # -- single step / deduction -------------------------------------------------------------------------
    def single_step(self, concept: str, number: int) -> dict:
        cfg = self.config
        rng = rng_for(cfg.seed, "single_step", concept, number)
        pool = self.index.pool(concept)
        picks = pool[rng.choice(len(pool), size=cfg.memory_size + 2, replace=False)]
        query, positive, memory = int(picks[0]), int(picks[1]), [int(i) for i in picks[2:]]
        negative = int(self._draw_negatives(rng, np.asarray([query], dtype=np.int32), [concept])[0])
        answer = int(rng.integers(0, 2))
        candidates = [positive, negative] if answer == 0 else [negative, positive]
        task = {"id": f"single_step-{concept}-{number:05d}", "concept": concept, "query": query, "memory": memory,
                "memory_concept": concept, "candidates": candidates, "answer": answer}
        self._check_step(task["id"], concept, [concept], np.asarray([query]), np.asarray([positive]), np.asarray([negative]))
        return task

    def deduction(self, concept: str, number: int) -> dict:
        rng = rng_for(self.config.seed, "deduction", concept, number)
        pool = self.index.pool(concept)
        a, b = (int(i) for i in pool[rng.choice(len(pool), size=2, replace=False)])
        shared = set(self.index.images[a].labels) & set(self.index.images[b].labels)
        gold = [c for c in self.options if c in shared]
        if concept not in gold:
            raise ChainInvariantError(f"deduction-{concept}-{number}: the two images do not share {concept!r}.")
        return {"id": f"deduction-{concept}-{number:05d}", "concept": concept, "image_1": a, "image_2": b, "gold": gold}

    # -- chains ------------------------------------------------------------------------------------------
    def _walk(self, rng: np.random.Generator, start: int, plan_codes: np.ndarray, pools: Sequence[np.ndarray]) -> np.ndarray:
        """Positives along a plan (pool ``pools[code]`` per step), never equal to the step's query."""
        positives = np.empty(len(plan_codes), dtype=np.int32)
        for code, pool in enumerate(pools):
            where = np.flatnonzero(plan_codes == code)
            if len(where):
                positives[where] = pool[rng.integers(0, len(pool), size=len(where))]
        for _ in range(_MAX_VECTOR_ROUNDS):
            queries = np.concatenate(([start], positives[:-1]))
            clash = np.flatnonzero(positives == queries)
            if len(clash) == 0:
                return positives
            for code, pool in enumerate(pools):
                where = clash[plan_codes[clash] == code]
                if len(where):
                    positives[where] = pool[rng.integers(0, len(pool), size=len(where))]
        previous = start  # left-to-right pass: draw excluding the query (pools have >= 2 images)
        for t in range(len(positives)):
            if positives[t] == previous:
                pool = pools[plan_codes[t]]
                choice = pool[rng.integers(0, len(pool) - 1)]
                positives[t] = choice if choice != previous else pool[-1]
            previous = positives[t]
        return positives

    def synchronous(self, concept: str, number: int) -> ChainArrays:
        cfg = self.config
        rng = rng_for(cfg.seed, "chains", "synchronous", concept, number)
        pool = self.index.pool(concept)
        steps = cfg.warmup + cfg.max_steps
        start = int(pool[rng.integers(0, len(pool))])
        positive = self._walk(rng, start, np.zeros(steps, dtype=np.int8), [pool])
        queries = np.concatenate(([start], positive[:-1])).astype(np.int32)
        negative = self._draw_negatives(rng, queries, [concept])
        answer = rng.integers(0, 2, size=steps).astype(np.uint8)
        chain = ChainArrays(f"synchronous-{concept}-{number:05d}", "synchronous", [concept], start, positive, negative,
                            answer, PLAN_CONCEPT_1 * steps, cfg.warmup)
        self.check_chain(chain)
        return chain

    def asynchronous(self, pair: Sequence[str], number: int) -> ChainArrays:
        cfg = self.config
        first, second = pair
        rng = rng_for(cfg.seed, "chains", "asynchronous", first, second, number)
        steps = cfg.warmup + cfg.max_steps
        period = cfg.async_period()
        plan = (period * (steps // len(period) + 1))[:steps]
        codes = np.frombuffer(plan.encode("ascii"), dtype=np.uint8)
        plan_codes = np.where(codes == ord(PLAN_CONCEPT_1), 0, np.where(codes == ord(PLAN_CONCEPT_2), 1, 2)).astype(np.int8)
        pools = [self.index.pool(first), self.index.pool(second), self.index.both(first, second)]
        start = int(pools[0][rng.integers(0, len(pools[0]))])
        positive = self._walk(rng, start, plan_codes, pools)
        queries = np.concatenate(([start], positive[:-1])).astype(np.int32)
        negative = self._draw_negatives(rng, queries, [first, second])
        answer = rng.integers(0, 2, size=steps).astype(np.uint8)
        chain = ChainArrays(f"asynchronous-{first}+{second}-{number:05d}", "asynchronous", [first, second], start,
                            positive, negative, answer, plan, cfg.warmup)
        self.check_chain(chain)
        return chain

    # -- invariants --------------------------------------------------------------------------------------
    def _check_step(self, task_id, concept, chain_concepts, queries, positives, negatives, step_numbers=None) -> None:
        has = self.index.has(concept)
        problems = []
        if not has[queries].all():
            problems.append(f"a query lacks {concept!r}")
        if not has[positives].all():
            problems.append(f"a positive lacks {concept!r}")
        for c in chain_concepts:
            if self.index.has(c)[negatives].any():
                problems.append(f"a negative carries {c!r}")
        if self.config.negatives == "disjoint" and self.index.share_any_label(queries, negatives).any():
            problems.append("a negative shares a label with its query")
        if (positives == negatives).any():
            problems.append("an image is both candidates of a step")
        if (positives == queries).any():
            problems.append("a positive is its own query")
        if problems:
            raise ChainInvariantError(f"{task_id}: {'; '.join(problems)}.", "This is a bug in commonlink; please report it with the seed and config.")

    def invalid_steps(self, concepts: Sequence[str], plan: str, start: int, positive: np.ndarray, negative: np.ndarray) -> np.ndarray:
        """Per step, whether it breaks an invariant (the same rules :meth:`check_chain` enforces)."""
        positive = np.asarray(positive, dtype=np.int32)
        negative = np.asarray(negative, dtype=np.int32)
        queries = np.concatenate(([start], positive[:-1])).astype(np.int32)
        codes = step_concept_codes(plan)
        has = [self.index.has(c) for c in concepts]
        if not len(plan):
            return np.zeros(0, dtype=bool)
        table = np.stack(has)
        bad = ~(table[codes, positive] & table[codes, queries])  # both carry the step's concept
        for mask in has:
            bad |= mask[negative]
        bad |= positive == negative
        bad |= positive == queries
        if self.config.negatives == "disjoint":
            bad |= self.index.share_any_label(queries, negative)
        bridges = np.frombuffer(plan.encode("ascii"), dtype=np.uint8) == ord(PLAN_BRIDGE)
        for mask in has:
            bad |= bridges & ~mask[positive]
        return bad

    def check_row(self, task: str, row: dict) -> None:
        """Raise :class:`ChainInvariantError` if a task-file row (any task type) breaks an invariant."""
        if task in ("synchronous", "asynchronous"):
            self.check_chain(ChainArrays(row["id"], task, list(row["concepts"]), int(row["start"]),
                                         np.asarray(row["positive"], dtype=np.int32), np.asarray(row["negative"], dtype=np.int32),
                                         np.asarray(row["answer"], dtype=np.uint8), row["plan"], int(row["warmup"])))
        elif task == "single_step":
            positive = row["candidates"][row["answer"]]
            negative = row["candidates"][1 - row["answer"]]
            concept = row["concept"]
            if not all(self.index.has(concept)[m] for m in row["memory"]):
                raise ChainInvariantError(f"{row['id']}: a memory image lacks {concept!r}.")
            self._check_step(row["id"], concept, [concept], np.asarray([row["query"]]), np.asarray([positive]), np.asarray([negative]))
        elif task == "deduction":
            has = self.index.has(row["concept"])
            if not (has[row["image_1"]] and has[row["image_2"]]) or row["image_1"] == row["image_2"]:
                raise ChainInvariantError(f"{row['id']}: the two images do not both carry {row['concept']!r}.")
            shared = set(self.index.images[row["image_1"]].labels) & set(self.index.images[row["image_2"]].labels)
            if row["gold"] != [c for c in self.options if c in shared]:
                raise ChainInvariantError(f"{row['id']}: gold {row['gold']} is not the options both images carry.")

    def check_chain(self, chain: ChainArrays) -> None:
        """Raise :class:`ChainInvariantError` if any step of ``chain`` breaks an invariant."""
        queries = np.concatenate(([chain.start], chain.positive[:-1])).astype(np.int32)
        codes = step_concept_codes(chain.plan)
        for code, concept in enumerate(chain.concepts):
            where = np.flatnonzero(codes == code)
            if len(where):
                self._check_step(chain.id, concept, chain.concepts, queries[where], chain.positive[where], chain.negative[where])
        bridges = np.flatnonzero(np.frombuffer(chain.plan.encode("ascii"), dtype=np.uint8) == ord(PLAN_BRIDGE))
        if len(bridges) and not all(self.index.has(c)[chain.positive[bridges]].all() for c in chain.concepts):
            raise ChainInvariantError(f"{chain.id}: a bridge positive lacks one of {chain.concepts}.")


# ---------------------------------------------------------------------------------------------- planning
@dataclass
class BuildPlan:
    concepts: list[str]
    pairs: list[list[str]]
    options: list[str]  #: the deduction option list: the concepts, then pair concepts not among them
    pool_sizes: dict[str, int]
    negative_pool_sizes: dict[str, int]
    bridge_pool_sizes: dict[str, int]  #: "a+b" -> size
    notes: list[str]
    left_out_no_negative: int = 0  #: images left out: they share a label with every other image (disjoint mode)


def use_preset(images: Sequence[LabelledImage], config: ChainConfig, preset: ConceptPreset | None) -> list[LabelledImage]:
    """Take the paper's concepts and pairs from ``preset`` where ``config`` does not name its own.

    Labels that are aliases of the preset's concepts are renamed (Pangea ``hit-18.1`` -> ``hit``); the preset's
    name is recorded in ``config.preset`` (and so in every meta sidecar and the release card). A concept the
    source does not carry is an error that names it.
    """
    if preset is None:
        config.preset = None
        return list(images)
    images = apply_aliases(images, preset)
    labels = {label for img in images for label in img.labels}
    wants_pairs = config.pairs is None and "asynchronous" in config.tasks
    needed = [*(preset.concepts if config.concepts is None else ()), *(c for p in preset.pairs for c in p if wants_pairs)]
    check_preset_labels(preset, labels, needed)
    used = config.concepts is None or wants_pairs
    if config.concepts is None:
        config.concepts = list(preset.concepts)
    if wants_pairs:
        config.pairs = [list(p) for p in preset.pairs]
    config.preset = preset.name if used else None  # --concepts (and --pairs) given: the preset supplied nothing
    return images


def plan_build(index: LabelIndex, config: ChainConfig) -> BuildPlan:
    """Choose concepts and pairs and check every pool is big enough for the request (errors name the concept)."""
    config.validate()
    concepts, notes = choose_concepts(index, config)
    builder = AssociationBuilder(index, config, concepts)
    pool_sizes = {c: int(len(index.pool(c))) for c in concepts}
    negative_sizes = {c: int(len(builder.negative_pool([c]))) for c in concepts}
    fix = "Choose other --concepts, lower --min-pixels or --memory-size, or add images with this label."
    for c in concepts:
        if "single_step" in config.tasks and config.single_step_per_concept:
            _require(pool_sizes[c], config.memory_size + 2, what=f"pool (single-step: query, positive and {config.memory_size} memory images)", concept=c, fix=fix)
        if ("deduction" in config.tasks and config.deductions_per_concept) or ("synchronous" in config.tasks and config.chains_per_concept):
            _require(pool_sizes[c], 2, what="pool", concept=c, fix=fix)
        _require(negative_sizes[c], 1, what="negative pool (images without it)", concept=c,
                 fix="Add images that do not carry this label, or choose another concept.")
    pairs: list[list[str]] = []
    bridge_sizes: dict[str, int] = {}
    if "asynchronous" in config.tasks and config.chains_per_concept:
        if config.pairs is not None:
            for a, b in config.pairs:
                for name in (a, b):
                    if name not in index.label_id:
                        raise _unknown_concept(index, name, "--pairs")
                bridge = len(index.both(a, b))
                if bridge == 0:
                    raise NotEnoughDataError(
                        f"Pair {a}-{b}: no image carries both {a!r} and {b!r}, so the bridge pool is empty and an "
                        "asynchronous chain cannot switch between them.",
                        "Choose a pair of concepts that co-occur on some images (see --list-concepts).",
                    )
                for name in (a, b):
                    _require(len(index.pool(name)), 2, what="pool", concept=name, fix=fix)
                _require(bridge, 2, what=f"bridge pool with {b!r}", concept=a, fix="Choose a pair that co-occurs on more images.")
                _require(len(builder.negative_pool([a, b])), 1, what=f"negative pool (images with neither it nor {b!r})", concept=a,
                         fix="Add images that carry neither label.")
                pairs.append([a, b])
                bridge_sizes[f"{a}+{b}"] = bridge
        else:
            ranked = []
            for a, b in itertools.combinations(concepts, 2):
                bridge = len(index.both(a, b))
                if bridge >= 2 and len(builder.negative_pool([a, b])) >= 1:
                    ranked.append((-bridge, a, b))
            for _, a, b in sorted(ranked)[: config.auto_pairs]:
                pairs.append([a, b])
                bridge_sizes[f"{a}+{b}"] = len(index.both(a, b))
            if not pairs:
                notes.append("asynchronous chains not built: no two chosen concepts share at least 2 images (every bridge pool is empty or too small)")
    for a, b in pairs:
        for c in (a, b):
            if c not in pool_sizes:
                pool_sizes[c] = int(len(index.pool(c)))
    options = list(dict.fromkeys([*concepts, *(c for pair in pairs for c in pair)]))
    return BuildPlan(concepts, pairs, options, pool_sizes, negative_sizes, bridge_sizes, notes)


# ---------------------------------------------------------------------------------------------- writing
@dataclass
class BuildSummary:
    out_dir: Path
    files: dict[str, Path]  #: task -> chain file
    counts: dict[str, int]
    steps: int
    skipped: list[str]  #: tasks found already built with the same settings
    plan: BuildPlan


def _write_images(out_dir: Path, index: LabelIndex) -> Path:
    path = out_dir / IMAGES_FILENAME
    with atomic_write(path, "w") as handle:
        for i, img in enumerate(index.images):
            # the file's sha256, recorded now (the release refuses an image changed after `chains`); catalogs named
            # relative to the table (formats.catalog_refs)
            handle.write(json.dumps({"index": i, **dataclasses.replace(img, origin=with_sha256(img.origin)).to_json(path)},
                                    ensure_ascii=False) + "\n")
    return path


def _iter_units(plan: BuildPlan, config: ChainConfig, task: str) -> list[tuple]:
    if task == "single_step":
        return [(c, i) for c in plan.concepts for i in range(config.single_step_per_concept)]
    if task == "deduction":
        return [(c, i) for c in plan.concepts for i in range(config.deductions_per_concept)]
    if task == "synchronous":
        return [(c, i) for c in plan.concepts for i in range(config.chains_per_concept)]
    return [(tuple(p), i) for p in plan.pairs for i in range(config.chains_per_concept)]


def _lines(builder: AssociationBuilder, task: str, units: list[tuple]) -> Iterator[str]:
    method = getattr(builder, task)
    for unit, number in units:
        made = method(unit, number)
        if isinstance(made, ChainArrays):
            yield made.to_line(builder.index.digits())
        else:
            yield json.dumps(made, ensure_ascii=False, separators=(",", ":"))


def without_disjoint_negative(index: LabelIndex) -> np.ndarray:
    """Indices of the images that share a label with every other image (no disjoint negative can exist for them;
    by symmetry they can be no one's negative either). One check per distinct label set: a seeded sample of
    images first (almost every set finds a disjoint one there), the whole index only when the sample has none."""
    n = len(index)
    sample = rng_for(0, "disjoint-check").permutation(n)[:256]
    by_labels: dict[tuple[str, ...], list[int]] = {}
    for i, img in enumerate(index.images):
        by_labels.setdefault(tuple(sorted(set(img.labels))), []).append(i)
    lonely: list[int] = []
    for members in by_labels.values():
        rep = members[0]
        if not index.share_any_label(np.full(len(sample), rep), sample).all():
            continue
        if index.share_any_label(np.full(n, rep), np.arange(n)).all():
            lonely.extend(members)
    return np.asarray(sorted(lonely), dtype=np.int64)


def build_chain_files(images: Sequence[LabelledImage], out_dir: str | os.PathLike, config: ChainConfig, *,
                      source: SourceReport | None = None, progress: bool = True) -> BuildSummary:
    """Build every task type of ``config.tasks`` into ``out_dir`` (one JSONL + meta sidecar per task).

    A task whose meta already records the same settings, source and image table is skipped (rerunning after an
    interruption redoes only what is missing); every file is written atomically. One run per ``out_dir`` at a
    time (a second is refused, naming the first); temporary files that killed runs left there are removed first.
    """
    out_dir = Path(out_dir)
    with output_lock(out_dir, what="commonlink chains"):
        remove_stale_temp_files(out_dir)
        return _build_chain_files(images, out_dir, config, source=source, progress=progress)


def _build_chain_files(images: Sequence[LabelledImage], out_dir: Path, config: ChainConfig, *,
                       source: SourceReport | None, progress: bool) -> BuildSummary:
    small = sum(1 for img in images if img.pixels < config.min_pixels)
    if small:  # readers already drop these; callers passing their own lists get the same rule
        images = [img for img in images if img.pixels >= config.min_pixels]
    images = name_unnamed(images)  # memories, prompts and review pages name every image by what it shows
    index = LabelIndex(images)
    if len(index) == 0:
        raise NotEnoughDataError("The source has no labelled image left to build from.",
                                 "Check the label column/field, and lower --min-pixels if images were dropped as too small.")
    lonely = without_disjoint_negative(index) if config.negatives == "disjoint" else np.zeros(0, dtype=np.int64)
    if len(lonely):
        total = len(index)
        keep = np.ones(total, dtype=bool)
        keep[lonely] = False
        index = LabelIndex([img for img, k in zip(index.images, keep) if k])
    why = (f"Only {len(index)} usable image(s) remain: {len(lonely)} of {len(lonely) + len(index)} share a label with "
           "every other image, so no disjoint negative exists for them, and were left out.")
    fix = "Add images that share no label with these, or use --negatives chain (negatives lack only the chain's concepts)."
    if len(lonely) and len(index) < 2:
        raise NotEnoughDataError(why, fix)
    try:
        plan = plan_build(index, config)
    except (NotEnoughDataError, InputError) as exc:
        if not len(lonely):
            raise
        raise NotEnoughDataError(f"{exc.problem} {why}", f"{exc.fix} Or: {fix}") from None
    if small:
        plan.notes.append(f"{small} image(s) under {config.min_pixels:,} pixels left out")
    if len(lonely):
        plan.notes.append(f"{len(lonely)} image(s) left out: each shares a label with every other image, so no "
                          "disjoint negative exists for it (--negatives chain keeps them)")
    plan.left_out_no_negative = int(len(lonely))
    out_dir.mkdir(parents=True, exist_ok=True)
    builder = AssociationBuilder(index, config, plan.options)
    images_path = _write_images(out_dir, index)
    # The image table gets a sidecar too, so `release build OUT/*.jsonl` accepts it (and skips it).
    images_sha = write_meta(images_path, {"kind": ASSOCIATION_CHAINS_KIND, "task": IMAGE_TABLE_TASK, "toolkit_version": __version__,
                                          "seed": config.seed, "images": len(index)})["sha256"]
    counts = {task: len(_iter_units(plan, config, task)) for task in config.tasks}
    steps_per_chain = config.warmup + config.max_steps
    base_meta = {
        "kind": ASSOCIATION_CHAINS_KIND, "toolkit_version": __version__, "seed": config.seed, "config": config.to_json(),
        "source": dataclasses.asdict(source) if source else None, "images_file": IMAGES_FILENAME,
        "images": len(index), "images_sha256": images_sha, "concept_kind": config.concept_kind,
        "options": plan.options,
        "concepts": [{"name": c, "pool_size": plan.pool_sizes[c], "negative_pool_size": plan.negative_pool_sizes.get(c)}
                     for c in plan.concepts],
        "pairs": [{"concepts": p, "bridge_pool_size": plan.bridge_pool_sizes[f"{p[0]}+{p[1]}"]} for p in plan.pairs],
        "counts": counts, "notes": plan.notes, "left_out_no_disjoint_negative": plan.left_out_no_negative,
    }
    files, skipped = {}, []
    for task in config.tasks:
        path = task_file(out_dir, task)
        meta = {**base_meta, "task": task, "rows": counts[task],
                "steps": counts[task] * steps_per_chain if task in ("synchronous", "asynchronous") else counts[task]}
        if _already_built(path, meta):
            skipped.append(task)
            files[task] = path
            continue
        units = _iter_units(plan, config, task)
        lines = _lines(builder, task, units)
        if progress:
            lines = track(lines, f"{task} ({len(units)})", total=len(units), unit="tasks")
        with atomic_write(path, "w") as handle:
            for line in lines:
                handle.write(line + "\n")
        meta["created"] = utc_now()
        write_meta(path, meta)  # records the file's sha256 and rows
        files[task] = path
    total_steps = sum(counts.get(t, 0) for t in ("synchronous", "asynchronous")) * steps_per_chain
    return BuildSummary(out_dir, files, counts, total_steps, skipped, plan)


_VOLATILE = ("created", "sha256")


def _already_built(path: Path, meta: dict) -> bool:
    mp = meta_path(path)
    if not (path.is_file() and mp.is_file()):
        return False
    try:
        old = json.loads(mp.read_text(encoding="utf-8"))
    except (OSError, ValueError):  # unreadable, not UTF-8 or not JSON: rebuilt
        return False
    if not isinstance(old, dict):
        return False
    if {k: v for k, v in old.items() if k not in _VOLATILE} != {k: v for k, v in meta.items() if k not in _VOLATILE}:
        return False
    return old.get("sha256") == sha256_file(path)


