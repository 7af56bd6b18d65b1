"""Planning an association build: which concepts and asynchronous pairs, the paper's presets, and a check that
every pool is big enough for the request before anything is drawn (errors name the concept)."""

from __future__ import annotations

import itertools
import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from commonlink.errors import InputError, NotEnoughDataError
from commonlink.kinds.association.chain_builder import AssociationBuilder
from commonlink.kinds.association.chain_config import (
    CHAINS_PER_IMAGE,
    LARGE_BUILD_STEPS,
    MIN_CHAINS,
    PAPER_CHAINS,
    ChainConfig,
)
from commonlink.kinds.association.format import LabelledImage
from commonlink.kinds.association.label_index import LabelIndex
from commonlink.kinds.association.presets import ConceptPreset, apply_aliases, check_preset_labels

log = logging.getLogger(__name__)


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
            candidates = [[piece[:i].strip(), piece[i + 1 :].strip()] for i in cuts]
            splits = [c for c in candidates if c[0] in known_set and c[1] in known_set] or candidates[:1]
        if not splits or not splits[0][0] or not splits[0][1]:
            raise InputError(
                f"--pairs entry {piece!r} is not CONCEPT1-CONCEPT2.", "e.g. --pairs metal-furry,ripe-fresh"
            )
        if len(splits) > 1:
            raise InputError(
                f"--pairs entry {piece!r} can be split more than one way.", "Write it as CONCEPT1:CONCEPT2."
            )
        a, b = splits[0]
        if a == b:
            raise InputError(f"--pairs entry {piece!r} pairs a concept with itself.", "Pair two different concepts.")
        pairs.append([a, b])
    return pairs


def _unknown_concept(index: LabelIndex, name: str, option: str) -> InputError:
    hint = index.suggest(name)
    fix = (
        f"Did you mean {', '.join(repr(h) for h in hint)}?"
        if hint
        else "Run `commonlink chains SOURCE --list-concepts` to see the labels and pool sizes."
    )
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


@dataclass
class BuildPlan:
    concepts: list[str]
    pairs: list[list[str]]
    options: list[str]  #: the deduction option list: the concepts, then pair concepts not among them
    pool_sizes: dict[str, int]
    negative_pool_sizes: dict[str, int]
    bridge_pool_sizes: dict[str, int]  #: "a+b" -> size
    notes: list[str]
    #: images that share a label with every other image (disjoint negatives): never a query or a negative
    without_disjoint_negative: int = 0
    #: concept or "a+b" -> images of its pool(s) never a query of its tasks (no disjoint negative in its negative pool)
    no_disjoint_negative: dict[str, int] = field(default_factory=dict)
    #: concept (synchronous) or "a+b" (asynchronous) -> chains built (ChainConfig.chain_count)
    chain_counts: dict[str, int] = field(default_factory=dict)


def use_preset(
    images: Sequence[LabelledImage], config: ChainConfig, preset: ConceptPreset | None
) -> list[LabelledImage]:
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
    needed = [
        *(preset.concepts if config.concepts is None else ()),
        *(c for p in preset.pairs for c in p if wants_pairs),
    ]
    check_preset_labels(preset, labels, needed)
    used = config.concepts is None or wants_pairs
    if config.concepts is None:
        config.concepts = list(preset.concepts)
    if wants_pairs:
        config.pairs = [list(p) for p in preset.pairs]
    config.preset = preset.name if used else None  # --concepts (and --pairs) given: the preset supplied nothing
    return images


_POOL_FIX = "Choose other --concepts, lower --min-pixels or --memory-size, or add images with this label."


def plan_build(index: LabelIndex, config: ChainConfig) -> BuildPlan:
    """Choose concepts and pairs and check every pool is big enough for the request (errors name the concept)."""
    config.validate()
    concepts, notes = choose_concepts(index, config)
    builder = AssociationBuilder(index, config, concepts)
    pool_sizes = {c: int(len(index.pool(c))) for c in concepts}
    negative_sizes = {c: int(len(builder.negative_pool([c]))) for c in concepts}
    no_negative = {}
    for c in concepts:
        _check_concept_pools(config, c, pool_sizes[c], len(index.without([c])))
        no_negative[c] = _check_queries(builder, config, c)
    pairs: list[list[str]] = []
    if "asynchronous" in config.tasks and config.builds_chains:
        if config.pairs is not None:
            pairs = [[a, b] for a, b in config.pairs if _check_pair(index, builder, a, b)]
        else:
            pairs = _auto_pairs(index, builder, concepts, config.auto_pairs, notes)
            if not pairs:
                notes.append(
                    "asynchronous chains not built: no two chosen concepts share at least 2 images "
                    "(every bridge pool is empty or too small)"
                )
    bridge_sizes = {f"{a}+{b}": int(len(index.both(a, b))) for a, b in pairs}
    for a, b in pairs:
        images = _pair_images(index, a, b)
        no_negative[f"{a}+{b}"] = int(len(images) - len(builder.query_pool([a, b], images)))
        for c in (a, b):
            if c not in pool_sizes:
                pool_sizes[c] = int(len(index.pool(c)))
    options = list(dict.fromkeys([*concepts, *(c for pair in pairs for c in pair)]))
    plan = BuildPlan(concepts, pairs, options, pool_sizes, negative_sizes, bridge_sizes, notes)
    plan.chain_counts = {c: config.chain_count(pool_sizes[c]) for c in concepts} | {
        f"{a}+{b}": config.chain_count(len(_pair_images(index, a, b))) for a, b in pairs
    }
    _note_chain_counts(plan, config)
    plan.without_disjoint_negative = int(builder.without_any_negative().sum())
    plan.no_disjoint_negative = no_negative
    _note_images_without_negative(plan, builder)
    return plan


def _note_chain_counts(plan: BuildPlan, config: ChainConfig) -> None:
    """Say how many chains each concept and pair gets and why; warn (before building) above LARGE_BUILD_STEPS."""
    sync = [plan.chain_counts[c] for c in plan.concepts] if "synchronous" in config.tasks else []
    pairs = [plan.chain_counts[f"{a}+{b}"] for a, b in plan.pairs] if "asynchronous" in config.tasks else []
    if not (sync or pairs):
        return
    how = (
        f"--chains {config.chains_per_concept}"
        if config.chains_per_concept is not None
        else f"scaled to the pools: {CHAINS_PER_IMAGE} per pool image (at least {MIN_CHAINS}), the paper's "
        f"max({PAPER_CHAINS}, pool size) for pools of {PAPER_CHAINS // CHAINS_PER_IMAGE}+ images"
    )
    steps = (sum(sync) + sum(pairs)) * (config.max_steps + config.warmup)
    plan.notes.append(
        f"chains per concept {min(sync or [0])}-{max(sync or [0])}, per pair {min(pairs or [0])}-{max(pairs or [0])} "
        f"({how}); {steps:,} chain steps"
    )
    if steps > LARGE_BUILD_STEPS:
        warning = (
            f"WARNING: this build writes {steps:,} chain steps (about {steps * 9 / 1e6:,.0f} MB of chain files); "
            "an eval of them sends up to one request per step. Pass a smaller --chains or --max-steps to build less."
        )
        plan.notes.append(warning)
        log.warning(warning)


def _note_images_without_negative(plan: BuildPlan, builder: AssociationBuilder) -> None:
    """Say which images are kept out of query and negative positions, and why (summary, sidecars, card)."""
    lonely = builder.without_any_negative()
    if plan.without_disjoint_negative:
        plan.notes.append(
            f"{plan.without_disjoint_negative} image(s) share a label with every other image: no disjoint negative "
            "exists for them, so they are never a query or a negative; they stay in use as single-step positives, "
            "memory and deduction images and chains' last positives (--negatives chain uses them everywhere)"
        )
    for a, b in plan.pairs:
        images = _pair_images(builder.index, a, b)
        extra = plan.no_disjoint_negative[f"{a}+{b}"] - int(lonely[images].sum())
        if extra:
            plan.notes.append(
                f"pair {a}+{b}: {extra} more image(s) of its pools are never its queries: each shares a label with "
                f"every image that carries neither {a!r} nor {b!r} (no disjoint negative for its chains)"
            )


def _pair_images(index: LabelIndex, a: str, b: str) -> np.ndarray:
    """The images an asynchronous chain on ``a`` and ``b`` draws from (either pool)."""
    return np.union1d(index.pool(a), index.pool(b)).astype(np.int32)


_QUERY_FIX = (
    "Add images that share no label with them, use --negatives chain (a negative then only lacks the task's "
    "concepts), or leave the tasks that need queries out of --tasks (deductions need no negative)."
)


def _check_queries(builder: AssociationBuilder, config: ChainConfig, concept: str) -> int:
    """Enough images of the pool of ``concept`` can be queries (single-step: 1, chains: 2); returns how many cannot."""
    pool = builder.index.pool(concept)
    usable = len(builder.query_pool([concept], pool))
    need = max(
        1 if "single_step" in config.tasks and config.single_step_per_concept else 0,
        2 if "synchronous" in config.tasks and config.builds_chains else 0,
    )
    if usable < need:
        raise NotEnoughDataError(
            f"Concept {concept!r}: only {usable} of its {len(pool)} image(s) can be a query; the request needs at "
            f"least {need}. The other {len(pool) - usable} share a label with every other image, so no disjoint "
            "negative exists for them (paper eq. 1).",
            _QUERY_FIX,
        )
    return int(len(pool) - usable)


def _pair_query_shortfall(builder: AssociationBuilder, a: str, b: str) -> str | None:
    """Why an asynchronous chain on ``a`` and ``b`` cannot be drawn for lack of query images, or None: each of its
    pools (``a``, ``b``, the bridge) needs 2 images with a disjoint negative that carries neither concept."""
    index = builder.index
    for what, pool in ((f"{a!r}", index.pool(a)), (f"{b!r}", index.pool(b)), ("bridge", index.both(a, b))):
        usable = len(builder.query_pool([a, b], pool))
        if usable < 2:
            return (
                f"Pair {a}-{b}: only {usable} of the {len(pool)} image(s) in its {what} pool can be a query; an "
                f"asynchronous chain needs at least 2. The other {len(pool) - usable} share a label with every image "
                f"that carries neither {a!r} nor {b!r}, so no disjoint negative exists for them (paper eq. 1)."
            )
    return None


def _check_concept_pools(config: ChainConfig, concept: str, pool_size: int, negative_size: int) -> None:
    """The pool of ``concept`` holds enough images for every task asked of it and, where a task draws negatives,
    some image lacks it (``negative_size``; whether those can be the negatives of its queries is checked next)."""
    if "single_step" in config.tasks and config.single_step_per_concept:
        _require(
            pool_size,
            config.memory_size + 2,
            what=f"pool (single-step: query, positive and {config.memory_size} memory images)",
            concept=concept,
            fix=_POOL_FIX,
        )
    if ("deduction" in config.tasks and config.deductions_per_concept) or (
        "synchronous" in config.tasks and config.builds_chains
    ):
        _require(pool_size, 2, what="pool", concept=concept, fix=_POOL_FIX)
    if any(task in config.tasks for task in ("single_step", "synchronous")):
        _require(
            negative_size,
            1,
            what="negative pool (images without it)",
            concept=concept,
            fix="Add images that do not carry this label, or choose another concept.",
        )


def _check_pair(index: LabelIndex, builder: AssociationBuilder, a: str, b: str) -> bool:
    """A pair the user named: both labels known, a bridge pool of at least 2 and a negative pool (else an error)."""
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
        _require(len(index.pool(name)), 2, what="pool", concept=name, fix=_POOL_FIX)
    _require(bridge, 2, what=f"bridge pool with {b!r}", concept=a, fix="Choose a pair that co-occurs on more images.")
    _require(
        len(index.without([a, b])),
        1,
        what=f"negative pool (images with neither it nor {b!r})",
        concept=a,
        fix="Add images that carry neither label.",
    )
    shortfall = _pair_query_shortfall(builder, a, b)
    if shortfall:
        raise NotEnoughDataError(shortfall, _QUERY_FIX)
    return True


def _auto_pairs(
    index: LabelIndex, builder: AssociationBuilder, concepts: Sequence[str], limit: int, notes: list[str]
) -> list[list[str]]:
    """Up to ``limit`` pairs of the chosen concepts with a bridge pool (at least 2 images), a negative pool and
    2 images per pool that can be queries (pairs passed over for that last reason are noted), spread over the
    concepts as the paper's are: each next pair is the one whose concepts are in the fewest pairs chosen so far,
    the largest bridge pool first among those (4 pairs of 8 concepts share no concept when the bridges allow)."""
    candidates = []
    for a, b in itertools.combinations(concepts, 2):
        bridge = len(index.both(a, b))
        if bridge >= 2 and len(builder.negative_pool([a, b])) >= 1:
            candidates.append((-bridge, a, b))
    pairs: list[list[str]] = []
    used: Counter[str] = Counter()
    while candidates and len(pairs) < limit:
        best = min(candidates, key=lambda t: (max(used[t[1]], used[t[2]]), used[t[1]] + used[t[2]], t))
        candidates.remove(best)
        _, a, b = best
        shortfall = _pair_query_shortfall(builder, a, b)
        if shortfall:
            notes.append(f"pair {a}+{b} passed over: {shortfall}")
        else:
            pairs.append([a, b])
            used.update((a, b))
    return pairs
