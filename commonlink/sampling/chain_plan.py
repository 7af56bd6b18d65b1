"""Planning an association build: which concepts and asynchronous pairs, the paper's presets, and a check that
every pool is big enough for the request before anything is drawn (errors name the concept)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from commonlink.errors import InputError, NotEnoughDataError
from commonlink.formats.association import LabelledImage
from commonlink.sampling.chain_builder import AssociationBuilder
from commonlink.sampling.chain_config import ChainConfig
from commonlink.sampling.label_index import LabelIndex
from commonlink.sampling.presets import ConceptPreset, apply_aliases, check_preset_labels


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
    left_out_no_negative: int = 0  #: images left out: they share a label with every other image (disjoint mode)


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
    for c in concepts:
        _check_concept_pools(config, c, pool_sizes[c], negative_sizes[c])
    pairs: list[list[str]] = []
    if "asynchronous" in config.tasks and config.chains_per_concept:
        if config.pairs is not None:
            pairs = [[a, b] for a, b in config.pairs if _check_pair(index, builder, a, b)]
        else:
            pairs = _auto_pairs(index, builder, concepts, config.auto_pairs)
            if not pairs:
                notes.append(
                    "asynchronous chains not built: no two chosen concepts share at least 2 images "
                    "(every bridge pool is empty or too small)"
                )
    bridge_sizes = {f"{a}+{b}": int(len(index.both(a, b))) for a, b in pairs}
    for a, b in pairs:
        for c in (a, b):
            if c not in pool_sizes:
                pool_sizes[c] = int(len(index.pool(c)))
    options = list(dict.fromkeys([*concepts, *(c for pair in pairs for c in pair)]))
    return BuildPlan(concepts, pairs, options, pool_sizes, negative_sizes, bridge_sizes, notes)


def _check_concept_pools(config: ChainConfig, concept: str, pool_size: int, negative_size: int) -> None:
    """The pool of ``concept`` holds enough images for every task asked of it, and its negative pool one."""
    if "single_step" in config.tasks and config.single_step_per_concept:
        _require(
            pool_size,
            config.memory_size + 2,
            what=f"pool (single-step: query, positive and {config.memory_size} memory images)",
            concept=concept,
            fix=_POOL_FIX,
        )
    if ("deduction" in config.tasks and config.deductions_per_concept) or (
        "synchronous" in config.tasks and config.chains_per_concept
    ):
        _require(pool_size, 2, what="pool", concept=concept, fix=_POOL_FIX)
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
        len(builder.negative_pool([a, b])),
        1,
        what=f"negative pool (images with neither it nor {b!r})",
        concept=a,
        fix="Add images that carry neither label.",
    )
    return True


def _auto_pairs(index: LabelIndex, builder: AssociationBuilder, concepts: Sequence[str], limit: int) -> list[list[str]]:
    """Up to ``limit`` pairs of the chosen concepts with the largest bridge pools (at least 2) and a negative pool."""
    ranked = []
    for a, b in itertools.combinations(concepts, 2):
        bridge = len(index.both(a, b))
        if bridge >= 2 and len(builder.negative_pool([a, b])) >= 1:
            ranked.append((-bridge, a, b))
    return [[a, b] for _, a, b in sorted(ranked)[:limit]]
