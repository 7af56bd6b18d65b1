"""Drawing association tasks from the pools of a :class:`~commonlink.kinds.association.label_index.LabelIndex`: one
single-step task, deduction or chain per call, each from its own generator, checked against the invariants
(docs/sampling.md "chains")."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from commonlink.errors import NotEnoughDataError
from commonlink.kinds.association.chain_config import ChainConfig, ChainInvariantError
from commonlink.kinds.association.format import PLAN_BRIDGE, PLAN_CONCEPT_1, PLAN_CONCEPT_2, step_concept_codes
from commonlink.kinds.association.label_index import LabelIndex, without_disjoint_negative
from commonlink.seeding import rng_for

_MAX_VECTOR_ROUNDS = 32
_DISJOINT_TRIES = 4


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
        return {
            "id": self.id,
            "kind": self.kind,
            "concepts": self.concepts,
            "start": int(self.start),
            "positive": self.positive.tolist(),
            "negative": self.negative.tolist(),
            "answer": self.answer.tolist(),
            "plan": self.plan,
            "warmup": self.warmup,
            "num_steps": int(len(self.positive)),
        }

    def to_line(self, digits: np.ndarray | None = None) -> str:
        """``json.dumps(self.to_json(), separators=(",", ":"))``, assembled from parts: the integer arrays are
        most of a chain file. ``digits`` (``str(i)`` for every image index, an object array) turns an array into
        text by lookup, about twice as fast as the JSON encoder."""

        def ints(values: np.ndarray) -> str:
            if digits is not None:
                return "[" + ",".join(digits[values].tolist()) + "]"
            return json.dumps(values.tolist(), separators=(",", ":"))

        return (
            f'{{"id":{json.dumps(self.id, ensure_ascii=False)},"kind":{json.dumps(self.kind)},'
            f'"concepts":{json.dumps(self.concepts, ensure_ascii=False, separators=(",", ":"))},'
            f'"start":{int(self.start)},'
            f'"positive":{ints(self.positive)},"negative":{ints(self.negative)},"answer":{ints(self.answer)},'
            f'"plan":{json.dumps(self.plan)},"warmup":{int(self.warmup)},"num_steps":{len(self.positive)}}}'
        )


class AssociationBuilder:
    """Draws every task from the pools of a :class:`LabelIndex`; each method rebuilds one unit alone."""

    def __init__(self, index: LabelIndex, config: ChainConfig, options: Sequence[str]):
        self.index = index
        self.config = config
        self.options = list(options)  #: the deduction option list (gold = shared labels among these)
        self._neg_cache: dict[tuple[str, ...], np.ndarray] = {}
        self._query_ok: dict[tuple[str, ...], np.ndarray] = {}
        self._no_negative: np.ndarray | None = None

    # -- pools --------------------------------------------------------------------------------------------
    def without_any_negative(self) -> np.ndarray:
        """Boolean mask of the images that share a label with every other image when negatives are disjoint: no
        negative exists for them and they are no one's negative, so they are never a query or a negative. They
        still serve where no negative is drawn for them: single-step positives, memory and deduction images, and
        a chain's last positive. All False with ``negatives="chain"``."""
        if self._no_negative is None:
            self._no_negative = np.zeros(len(self.index), dtype=bool)
            if self.config.negatives == "disjoint":
                self._no_negative[without_disjoint_negative(self.index)] = True
        return self._no_negative

    def negative_pool(self, concepts: Sequence[str]) -> np.ndarray:
        """The images carrying none of ``concepts`` (with disjoint negatives, less those no query can take)."""
        key = tuple(sorted(concepts))
        pool = self._neg_cache.get(key)
        if pool is None:
            pool = self.index.without(key)
            unusable = self.without_any_negative()
            pool = self._neg_cache[key] = pool[~unusable[pool]] if unusable.any() else pool
        return pool

    def query_pool(self, concepts: Sequence[str], pool: np.ndarray) -> np.ndarray:
        """The images of ``pool`` that can be a query in a task on ``concepts``: with disjoint negatives, those for
        which the task's negative pool holds an image that shares no label with them (paper eq. 1). The others are
        left out of the query positions only (see :meth:`without_any_negative`)."""
        if self.config.negatives != "disjoint":
            return pool
        key = tuple(sorted(concepts))
        ok = self._query_ok.get(key)
        if ok is None:
            ok = self._query_ok[key] = ~self.without_any_negative()
            # One concept: an image sharing no label with a query lacks the concept, so every image with a disjoint
            # image has a negative. A pair's negatives also lack the other concept: check its images against them.
            if len(key) > 1:
                candidates = np.unique(np.concatenate([self.index.pool(c) for c in key]))
                candidates = candidates[ok[candidates]]
                ok[without_disjoint_negative(self.index, candidates, self.negative_pool(key))] = False
        keep = ok[pool]
        return pool if keep.all() else pool[keep]

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
            fits = ~self.index.share_any_label(np.repeat(queries[bad], _DISJOINT_TRIES), tries.ravel()).reshape(
                tries.shape
            )
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
        queries = self.query_pool([concept], pool)
        if len(queries) == len(pool):
            picks = pool[rng.choice(len(pool), size=cfg.memory_size + 2, replace=False)]
        else:  # the query from the images with a disjoint negative; positive and memory from the whole pool
            first = queries[rng.integers(0, len(queries))]
            rest = pool[pool != first]
            picks = np.concatenate(([first], rest[rng.choice(len(rest), size=cfg.memory_size + 1, replace=False)]))
        query, positive, memory = int(picks[0]), int(picks[1]), [int(i) for i in picks[2:]]
        negative = int(self._draw_negatives(rng, np.asarray([query], dtype=np.int32), [concept])[0])
        answer = int(rng.integers(0, 2))
        candidates = [positive, negative] if answer == 0 else [negative, positive]
        task = {
            "id": f"single_step-{concept}-{number:05d}",
            "concept": concept,
            "query": query,
            "memory": memory,
            "memory_concept": concept,
            "candidates": candidates,
            "answer": answer,
        }
        self._check_step(
            task["id"], concept, [concept], np.asarray([query]), np.asarray([positive]), np.asarray([negative])
        )
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
    def _walk(
        self,
        rng: np.random.Generator,
        start: int,
        plan_codes: np.ndarray,
        pools: Sequence[np.ndarray],
        last_pools: Sequence[np.ndarray],
    ) -> np.ndarray:
        """Positives along a plan (query pool ``pools[code]`` per step: each positive is the next step's query),
        never equal to the step's query. The last positive is no query: where ``last_pools[code]`` (the whole
        pool) holds more images, it is drawn again from there."""
        positives = self._walk_queries(rng, start, plan_codes, pools)
        code = plan_codes[-1]  # chains have at least one step (--max-steps >= 1)
        full = last_pools[code]
        if len(full) > len(pools[code]):
            previous = start if len(positives) == 1 else positives[-2]
            choice = full[rng.integers(0, len(full) - 1)]
            positives[-1] = choice if choice != previous else full[-1]
        return positives

    def _walk_queries(
        self, rng: np.random.Generator, start: int, plan_codes: np.ndarray, pools: Sequence[np.ndarray]
    ) -> np.ndarray:
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
        queries = self.query_pool([concept], pool)
        steps = cfg.warmup + cfg.max_steps
        start = int(queries[rng.integers(0, len(queries))])
        positive = self._walk(rng, start, np.zeros(steps, dtype=np.int8), [queries], [pool])
        queries = np.concatenate(([start], positive[:-1])).astype(np.int32)
        negative = self._draw_negatives(rng, queries, [concept])
        answer = rng.integers(0, 2, size=steps).astype(np.uint8)
        chain = ChainArrays(
            f"synchronous-{concept}-{number:05d}",
            "synchronous",
            [concept],
            start,
            positive,
            negative,
            answer,
            PLAN_CONCEPT_1 * steps,
            cfg.warmup,
        )
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
        plan_codes = np.where(codes == ord(PLAN_CONCEPT_1), 0, np.where(codes == ord(PLAN_CONCEPT_2), 1, 2)).astype(
            np.int8
        )
        pools = [self.index.pool(first), self.index.pool(second), self.index.both(first, second)]
        query_pools = [self.query_pool(pair, pool) for pool in pools]
        start = int(query_pools[0][rng.integers(0, len(query_pools[0]))])
        positive = self._walk(rng, start, plan_codes, query_pools, pools)
        queries = np.concatenate(([start], positive[:-1])).astype(np.int32)
        negative = self._draw_negatives(rng, queries, [first, second])
        answer = rng.integers(0, 2, size=steps).astype(np.uint8)
        chain = ChainArrays(
            f"asynchronous-{first}+{second}-{number:05d}",
            "asynchronous",
            [first, second],
            start,
            positive,
            negative,
            answer,
            plan,
            cfg.warmup,
        )
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
            raise ChainInvariantError(
                f"{task_id}: {'; '.join(problems)}.",
                "This is a bug in commonlink; please report it with the seed and config.",
            )

    def invalid_steps(
        self, concepts: Sequence[str], plan: str, start: int, positive: np.ndarray, negative: np.ndarray
    ) -> np.ndarray:
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
            self.check_chain(
                ChainArrays(
                    row["id"],
                    task,
                    list(row["concepts"]),
                    int(row["start"]),
                    np.asarray(row["positive"], dtype=np.int32),
                    np.asarray(row["negative"], dtype=np.int32),
                    np.asarray(row["answer"], dtype=np.uint8),
                    row["plan"],
                    int(row["warmup"]),
                )
            )
        elif task == "single_step":
            positive = row["candidates"][row["answer"]]
            negative = row["candidates"][1 - row["answer"]]
            concept = row["concept"]
            if not all(self.index.has(concept)[m] for m in row["memory"]):
                raise ChainInvariantError(f"{row['id']}: a memory image lacks {concept!r}.")
            self._check_step(
                row["id"],
                concept,
                [concept],
                np.asarray([row["query"]]),
                np.asarray([positive]),
                np.asarray([negative]),
            )
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
                self._check_step(
                    chain.id, concept, chain.concepts, queries[where], chain.positive[where], chain.negative[where]
                )
        bridges = np.flatnonzero(np.frombuffer(chain.plan.encode("ascii"), dtype=np.uint8) == ord(PLAN_BRIDGE))
        if len(bridges) and not all(self.index.has(c)[chain.positive[bridges]].all() for c in chain.concepts):
            raise ChainInvariantError(f"{chain.id}: a bridge positive lacks one of {chain.concepts}.")
