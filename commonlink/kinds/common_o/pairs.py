"""Common-O pair sampling (paper §3.1–3.2; docs/sampling.md): two images, lettered choices, the objects in both.

An example pairs two images of the same source (``real`` | ``synthetic``) from different scenes. Its ground
truth is the set of objects visible in both images ("No objects are in common" when there is none). The number
of common objects ``k`` follows the ``common_distribution`` over ``k = 0..max_common`` (default ``paper``: the
shares of the paper's own examples, see :data:`PAPER_K_COUNTS`) as exact quotas; pairs with exactly ``k`` common
objects are found block by block (:mod:`commonlink.kinds.common_o.pair_search`). A ``k`` the catalogs cannot supply
hands its share to the others in proportion to their weights, and the statistics say so in ``notes`` and
``common_objects_missing``.

Records are read twice, streaming: once to build a compact index (object ids per image, integer scene codes),
once to fetch the records of the images used.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from commonlink import __version__
from commonlink.constants import NO_COMMON_OBJECTS
from commonlink.errors import CommonlinkError, InputError, NotEnoughDataError
from commonlink.fileio import sha256_file, write_jsonl
from commonlink.formats.catalog import SOURCES, catalog_file
from commonlink.formats.catalog_refs import pairs_meta_for_file, pairs_meta_from_file, pairs_rows_for_file
from commonlink.formats.meta import (
    COMMON_O_PAIRS_KIND,
    data_file_problem,
    read_meta,
    utc_now,
    write_meta,
)
from commonlink.kinds.common_o.pair_index import CatalogIndex, build_index, read_image_entries, resolve_catalogs
from commonlink.kinds.common_o.pair_rows import (  # noqa: F401 (build_choices: API here)
    DISTRACTOR_MODES,
    PairRows,
    RowPlan,
    build_choices,
    cooccurrence,
)
from commonlink.kinds.common_o.pair_search import (
    BLOCK,
    SearchResult,
    SourceImages,
    distinct_pairs,
    sample_source,
    weighted_quota,
)
from commonlink.locks import output_lock
from commonlink.progress import make_progress
from commonlink.seeding import rng_for

SPLITS = ("main", "challenge")
#: Objects a scene (paper §3.1): Common-O Bench 3–7, Common-O Complex 8–16.
DEFAULT_OBJECT_RANGE = {"main": (3, 7), "challenge": (8, 16)}
#: Share of real-photo examples in Common-O Bench (paper §3.1: 45% real, 55% synthetic).
PAPER_REAL_FRACTION = 0.45
#: Auto ``max_uses``: this many times the average number of uses the request needs, and at least 3.
AUTO_MAX_USES_FACTOR = 3
AUTO_MAX_USES_MIN = 3
#: Examples per number of common objects k = 0..7 in the paper's random sample of Common-O Bench (Figure 7, 18
#: examples). Table 7's 20 *model mistakes* are left out: mistakes over-represent large k (models fail there
#: more), so they are no sample of the split. Derivation in docs/sampling.md ("The default k distribution").
PAPER_K_COUNTS = (2, 7, 3, 2, 1, 2, 1, 0)
#: Pseudo-count added to every k (Jeffreys' 1/2): k = 7, which the main split allows and a sample of 18 easily
#: misses, is not ruled out, while the sample's shape stays (k >= 3: 8.5/22 = 38.6% against the sample's 6/18).
PAPER_K_SMOOTHING = 0.5
#: ``paper``: the shares of PAPER_K_COUNTS + PAPER_K_SMOOTHING (none 11.4%, k = 1 34.1%, mean k 2.41); for
#: another K the k >= 1 shape is stretched over 1..K and none keeps its share.
DEFAULT_COMMON_DISTRIBUTION = "paper"


@dataclass
class PairsConfig:
    """Options of one sampling run (the CLI maps one option to each field)."""

    split: str = "main"  #: "main" (Common-O Bench) or "challenge" (Common-O Complex)
    count: int = 1000  #: examples to sample
    objects: tuple[int, int] | None = None  #: eligible visible-object counts; None: 3-7 main, 8-16 challenge
    max_common: int | None = None  #: k ranges over 0..max_common; None: the upper object bound
    choices: int = 8  #: lettered choices per example (more only when k + 2 exceed it, see build_choices)
    max_uses: int | None = None  #: cap on examples an image appears in; None: auto (see AUTO_MAX_USES_*)
    real_fraction: float | None = None  #: share of real examples; None: split default (see resolve_real_fraction)
    seed: int = 0
    check_files: bool = True  #: verify that the images of the sampled pairs exist inside their catalogs
    #: how k is drawn over 0..max_common: "paper", "uniform", "none=P" (share P for k = 0, the rest even) or
    #: weights "w0,w1,..."
    common_distribution: str = DEFAULT_COMMON_DISTRIBUTION
    #: exact examples per k = 0..len - 1 (``pairs --k-from``: another split's counts); ``count`` must be their sum
    k_counts: list[int] | None = None
    k_from: str | None = None  #: where ``k_counts`` were read (recorded; ``pairs --k-from``)
    distractors: str = "one-image"  #: how distractors are drawn (pair_rows.DISTRACTOR_MODES)

    def object_range(self) -> tuple[int, int]:
        return tuple(self.objects) if self.objects is not None else DEFAULT_OBJECT_RANGE[self.split]  # type: ignore[return-value]

    def max_common_objects(self) -> int:
        return self.max_common if self.max_common is not None else self.object_range()[1]

    def validate(self) -> None:
        if self.split not in SPLITS:
            raise InputError(f"--split {self.split!r} is not a Common-O split.", f"Use one of: {', '.join(SPLITS)}.")
        if self.count is None:
            raise InputError(
                "--count is required (or --k-from, which takes another split's size).", "e.g. --count 1000."
            )
        if self.count < 1:
            raise InputError(f"--count {self.count}: need at least 1 example.", "e.g. --count 1000.")
        lo, hi = self.object_range()
        if lo < 1 or hi < lo:
            raise InputError(f"--objects {lo}-{hi}: need 1 <= LOW <= HIGH.", "e.g. --objects 3-7.")
        k_max = self.max_common_objects()
        if k_max < 0 or k_max > hi:
            raise InputError(
                f"--max-common {k_max}: two images with at most {hi} objects share 0..{hi} objects.",
                f"Use a value from 0 to {hi}, or widen --objects.",
            )
        if self.choices < 3:
            raise InputError(
                f"--choices {self.choices}: need at least 3 (an object, a distractor, '{NO_COMMON_OBJECTS}').",
                "e.g. --choices 8.",
            )
        if self.max_uses is not None and self.max_uses < 1:
            raise InputError(f"--max-uses {self.max_uses}: need at least 1.", "Leave it out for the automatic cap.")
        if self.distractors not in DISTRACTOR_MODES:
            raise InputError(
                f"--distractors {self.distractors!r} is not a distractor rule.",
                f"Use one of: {', '.join(DISTRACTOR_MODES)}.",
            )
        if self.real_fraction is not None and not 0.0 <= self.real_fraction <= 1.0:
            raise InputError(
                f"--real-fraction {self.real_fraction}: need a share between 0 and 1.", "e.g. --real-fraction 0.45."
            )
        if self.k_counts is not None:
            if len(self.k_counts) - 1 > k_max or any(n < 0 for n in self.k_counts):
                raise InputError(
                    f"--k-from: the split has examples with up to {len(self.k_counts) - 1} common objects; "
                    f"--max-common / --objects allow {k_max}.",
                    f"Widen --objects (or --max-common) to at least {len(self.k_counts) - 1}.",
                )
            if sum(self.k_counts) != self.count:
                raise InputError(
                    f"--count {self.count} differs from the {sum(self.k_counts)} examples whose k counts are copied.",
                    "Leave --count out with --k-from (it takes the split's size).",
                )
        common_weights(self.common_distribution, k_max)


def paper_weights(k_max: int) -> list[float]:
    """The ``paper`` distribution over 0..k_max: PAPER_K_COUNTS as shares; for k_max != 7, none keeps its share
    and the k >= 1 shape is stretched (linear interpolation) over 1..k_max."""
    counts = np.asarray(PAPER_K_COUNTS, dtype=np.float64) + PAPER_K_SMOOTHING
    shares = counts / counts.sum()
    if k_max == len(counts) - 1 or k_max == 0:
        return shares[: k_max + 1].tolist() if k_max else [1.0]
    rest = np.interp(np.linspace(0.0, 1.0, k_max), np.linspace(0.0, 1.0, len(counts) - 1), shares[1:])
    rest *= (1.0 - shares[0]) / rest.sum()
    return [float(shares[0]), *rest.tolist()]


def common_weights(spec: str, k_max: int) -> list[float]:
    """Weights of k = 0..k_max for ``--common-distribution``."""
    text = (spec or "").strip().lower().replace(" ", "")
    fix = (
        "Use paper (the default), uniform, none=P (e.g. none=0.1: 10% with nothing in common, the rest even), "
        "or one weight per k (e.g. 1,2,2,1)."
    )
    if text == "paper":
        return paper_weights(k_max)
    if text == "uniform":
        return [1.0] * (k_max + 1)
    if text.startswith("none="):
        try:
            share = float(text[5:])
        except ValueError:
            raise InputError(f"--common-distribution {spec!r}: {text[5:]!r} is not a number.", fix) from None
        if not 0.0 <= share <= 1.0:
            raise InputError(f"--common-distribution {spec!r}: the share must be between 0 and 1.", fix)
        if k_max == 0:
            return [1.0]
        return [share] + [(1.0 - share) / k_max] * k_max
    try:
        weights = [float(w) for w in text.split(",")]
    except ValueError:
        raise InputError(f"--common-distribution {spec!r} is not a distribution.", fix) from None
    if len(weights) != k_max + 1 or any(w < 0 for w in weights) or sum(weights) <= 0:
        raise InputError(
            f"--common-distribution {spec!r}: need {k_max + 1} weights >= 0 (k = 0..{k_max}) with a positive sum.", fix
        )
    return weights


def resolve_real_fraction(config: PairsConfig, eligible: dict[str, int]) -> float:
    """The share of real examples: the option if given, else 0 for challenge (synthetic only, as the paper),
    else 0.45 (the paper's share) when both sources have eligible images, else the one source available."""
    if config.real_fraction is not None:
        return float(config.real_fraction)
    if config.split == "challenge":
        return 0.0
    if eligible.get("real", 0) and eligible.get("synthetic", 0):
        return PAPER_REAL_FRACTION
    return 1.0 if eligible.get("real", 0) else 0.0


# ----------------------------------------------------------------------------------------------------------


def _source_images(index: CatalogIndex, source: int) -> tuple[np.ndarray, SourceImages]:
    """The eligible images of one source (global indices) and their objects and scenes, renumbered from 0."""
    members = np.flatnonzero(index.source == source)
    starts, ends = index.obj_ptr[members], index.obj_ptr[members + 1]
    lengths = ends - starts
    obj_ptr = np.zeros(len(members) + 1, dtype=np.int64)
    np.cumsum(lengths, out=obj_ptr[1:])
    flat = np.repeat(starts - obj_ptr[:-1], lengths) + np.arange(int(obj_ptr[-1]))
    _, scene = np.unique(index.scene[members], return_inverse=True)
    return members, SourceImages(obj_ptr, index.obj_ids[flat], scene.astype(np.int64))


def _check_source(config: PairsConfig, index: CatalogIndex, name: str, images: SourceImages, n: int, cap: int) -> None:
    """Refuse a request the source cannot hold whatever the pairs: too few images, names, pairs or slots."""
    lo, hi = config.object_range()
    m = images.m
    if m < 2:
        hint = (
            " (Common-O Complex is synthetic only by default)"
            if config.split == "challenge" and name == "synthetic"
            else ""
        )
        raise _too_few(name, m, n, lo, hi, index, "at least 2 images from different scenes" + hint)
    n_vocab = len(index.source_vocab[name])
    if n_vocab < config.choices - 1:
        raise NotEnoughDataError(
            f"The {name} images name only {n_vocab} kinds of object; {config.choices} choices need "
            f"{config.choices - 1} (plus '{NO_COMMON_OBJECTS}').",
            "Lower --choices, or add catalogs with more kinds of objects.",
        )
    distinct = distinct_pairs(images)
    if n > distinct:
        raise _too_few(
            name, m, n, lo, hi, index, f"{n:,} distinct pairs from different scenes, and there are {distinct:,}"
        )
    if 2 * n > m * cap:
        raise _too_few(name, m, n, lo, hi, index, f"{2 * n:,} image slots, and --max-uses {cap} allows {m * cap:,}")


def _sample_source(
    config: PairsConfig, index: CatalogIndex, s: int, n: int, quota: list[int] | None = None
) -> tuple[SearchResult, int, np.ndarray]:
    """Pairs of source ``s`` (global image indices in ``result.pairs``), the cap used, and the images' uses;
    ``quota``: the exact examples per k (``--k-from``), else drawn from the weights."""
    name = SOURCES[s]
    members, images = _source_images(index, s)
    cap = config.max_uses if config.max_uses is not None else auto_max_uses(n, images.m)
    _check_source(config, index, name, images, n, cap)
    weights = common_weights(config.common_distribution, config.max_common_objects())
    # a k needs its k objects plus a distractor among the source's object names
    result = sample_source(
        images,
        n,
        weights,
        cap,
        rng_for(config.seed, "pairs", config.split, name, "search"),
        k_limit=len(index.source_vocab[name]) - 1,
        quota=quota,
    )
    if len(result.pairs) < n:
        lo, hi = config.object_range()
        raise NotEnoughDataError(
            f"Found only {len(result.pairs):,} of {n:,} {name} examples from {images.m:,} eligible {name} images "
            f"({lo}-{hi} objects, {index.images_read:,} images read, --max-uses {cap}): every number of common "
            f"objects ran out (candidate pairs kept per k from 0: {result.candidates}; {len(index.source_vocab[name])} "
            f"{name} object names leave room for a distractor up to k = {len(index.source_vocab[name]) - 2}).",
            "Add images (more catalogs), raise --max-uses, widen --objects, lower --count or --choices, "
            "or change --real-fraction.",
        )
    uses = np.bincount(result.pairs[:, :2].ravel(), minlength=images.m)
    result.pairs[:, :2] = members[result.pairs[:, :2]]
    return result, cap, uses


# ----------------------------------------------------------------------------------------------------------
# Entry points
# ----------------------------------------------------------------------------------------------------------


def auto_max_uses(n: int, m: int) -> int:
    """The default --max-uses for ``n`` examples from ``m`` eligible images of a source."""
    return max(AUTO_MAX_USES_MIN, math.ceil(AUTO_MAX_USES_FACTOR * 2 * n / max(m, 1)))


def _too_few(source: str, m: int, n: int, lo: int, hi: int, index: CatalogIndex, needed: str) -> NotEnoughDataError:
    return NotEnoughDataError(
        f"Only {m:,} eligible {source} image(s) (showing {lo}-{hi} objects) were found among {index.images_read:,} "
        f"read from {len(index.catalogs)} catalog(s); {n:,} {source} example(s) need {needed}.",
        "Add images (more catalogs), widen --objects, lower --count, raise --max-uses, or change --real-fraction.",
    )


def source_quotas(config: PairsConfig, wanted: dict[str, int]) -> dict[str, list[int]]:
    """With ``config.k_counts``: the exact examples per k of each source, summing to the copied counts (real by
    largest remainders, synthetic the rest, so the split's counts are met exactly); else none."""
    if config.k_counts is None:
        return {}
    counts = [*config.k_counts, *[0] * (config.max_common_objects() + 1 - len(config.k_counts))]
    real = weighted_quota(wanted.get("real", 0), counts, rng_for(config.seed, "pairs", config.split, "k-from"))
    return {"real": real, "synthetic": [c - r for c, r in zip(counts, real)]}


def sample_pairs(
    catalog_dirs: Sequence[str | os.PathLike], config: PairsConfig, *, progress: bool = False
) -> tuple[PairRows, dict]:
    """Sample ``config.count`` Common-O examples from the catalogs; returns ``(rows, stats)``.

    Rows follow the pairs-file format (docs/sampling.md) and are built as they are read (:class:`PairRows`: a
    sequence, each row a fresh dict), so writing them streams; ``stats`` summarises the run (JSON-ready,
    deterministic). Raises :class:`NotEnoughDataError` when the catalogs cannot supply the request.
    """
    config.validate()
    catalogs = resolve_catalogs(catalog_dirs)
    with make_progress("items", disable=not progress, transient=True) as bar:
        index = build_index(catalogs, config.object_range(), bar)
        eligible = {name: int(np.count_nonzero(index.source == s)) for s, name in enumerate(SOURCES)}
        real_fraction = resolve_real_fraction(config, eligible)
        wanted = {"real": round(config.count * real_fraction)}
        wanted["synthetic"] = config.count - wanted["real"]
        task = bar.add_task("sampling pairs", total=None)
        quotas = source_quotas(config, wanted)
        results = {
            name: _sample_source(config, index, s, wanted[name], quotas.get(name))
            for s, name in enumerate(SOURCES)
            if wanted[name]
        }
        bar.advance(task, config.count)
        plan = _plan_rows(config, index, results)
        rows = PairRows(plan, read_image_entries(index, plan.images, config.check_files))
    stats = _stats(config, index, eligible, real_fraction, results, plan.choice_counts, len(rows))
    return rows, stats


def _plan_rows(config: PairsConfig, index: CatalogIndex, results: dict) -> RowPlan:
    """The pairs of every source in a seeded order, with a seeded side each (choices are drawn as the rows are
    read). ``results``: source name -> ``(SearchResult, cap, uses)``, global image indices."""
    # (source, image a, image b, k) per pair
    table = np.concatenate(
        [np.zeros((0, 4), dtype=np.int64)]
        + [np.insert(r.pairs, 0, SOURCES.index(name), axis=1) for name, (r, _, _) in results.items()]
    )
    order = rng_for(config.seed, "pairs", config.split, "order").permutation(len(table))
    # which image is shown first: a seeded coin per row (the search finds pairs in index order)
    swap = rng_for(config.seed, "pairs", config.split, "sides").random(len(table)) < 0.5
    table = table[order]
    images = np.where(swap[:, None], table[:, 2:0:-1], table[:, 1:3])
    # a row has max(choices, k + 2) choices (build_choices), k its common objects
    n_choices, counts = np.unique(np.maximum(config.choices, table[:, 3] + 2), return_counts=True)
    return RowPlan(
        split=config.split,
        images=np.ascontiguousarray(images),
        sources=table[:, 0].astype(np.uint8),
        vocabularies={SOURCES.index(name): [index.vocab[o] for o in ids] for name, ids in index.source_vocab.items()},
        min_choices=config.choices,
        choice_rng=functools.partial(rng_for, config.seed, "pairs", config.split, "choices"),
        choice_counts=dict(zip(n_choices.tolist(), counts.tolist())),
        cooccurrence=_cooccurrence(index) if config.distractors == "co-occurring" else None,
    )


def _cooccurrence(index: CatalogIndex) -> dict[int, dict[str, dict[str, int]]]:
    """Per source, how often two objects appear in one of its eligible catalog images."""
    return {
        s: cooccurrence(index.object_names(g) for g in np.flatnonzero(index.source == s).tolist())
        for s in range(len(SOURCES))
    }


def _source_notes(name: str, r: SearchResult) -> list[str]:
    """What could not be had as asked, in words (printed by `pairs`, the demo and kept in the sidecar)."""
    notes = []
    for k, (want, got) in enumerate(zip(r.requested, r.achieved)):
        if got >= want:
            continue
        every = r.exact or k >= r.exhaustive_from  # every pair sharing k objects was found
        if not r.candidates[k] and every:
            why = "no two images from different scenes share exactly that many objects"
        elif every:
            why = (
                f"{r.candidates[k]:,} distinct pair(s) share that many, all found, too few under the use cap --max-uses"
            )
        else:  # sampled: say how many of the pairs there are were not found
            why = (
                f"{r.candidates[k]:,} distinct pair(s) found of about {r.present[k]:,} that share that many (an "
                f"estimate: pairs sharing {r.exhaustive_from} or more objects are all listed, fewer are sampled in "
                f"blocks of {BLOCK:,} images), too few under the use cap --max-uses"
            )
        notes.append(f"{name}: {k} common object(s) could not be filled: {got} of {want} requested ({why}).")
    if r.moved_to:
        moved = ", ".join(f"k={k}: +{n}" for k, n in sorted(r.moved_to.items()))
        notes.append(
            f"{name}: the {sum(r.moved_to.values())} example(s) missing went to the counts that could take them, "
            f"by their weights ({moved})."
        )
    return notes


def _stats(config, index, eligible, real_fraction, results, choice_counts, n_rows) -> dict:
    ks = [str(k) for k in range(config.max_common_objects() + 1)]
    requested, achieved = dict.fromkeys(ks, 0), dict.fromkeys(ks, 0)
    notes, per_source = [], {}
    for name, (r, cap, uses) in results.items():
        for k in ks:
            requested[k] += r.requested[int(k)]
            achieved[k] += r.achieved[int(k)]
        notes += _source_notes(name, r)
        used = uses[uses > 0]
        per_source[name] = {
            "examples": len(r.pairs),
            "eligible_images": eligible[name],
            "images_used": int(len(used)),
            "image_uses_max": int(used.max()) if len(used) else 0,
            "image_uses_mean": round(float(used.mean()), 3) if len(used) else 0.0,
            "max_uses": cap,
            "common_objects_requested": {k: r.requested[int(k)] for k in ks},
            "common_objects": {k: r.achieved[int(k)] for k in ks},
            "common_objects_short": {
                k: r.requested[int(k)] - r.achieved[int(k)] for k in ks if r.achieved[int(k)] < r.requested[int(k)]
            },
            "candidate_pairs": {k: r.candidates[int(k)] for k in ks},
            "all_pairs_examined": r.exact,
            # every pair sharing this many objects or more is among the candidates (0: every pair examined)
            "all_pairs_found_from_k": r.exhaustive_from,
            # pairs from different scenes sharing each k: counted where all are found, else estimated
            "pairs_present": {k: r.present[int(k)] for k in ks},
        }
    n_real = per_source.get("real", {}).get("examples", 0)
    return {
        "examples": n_rows,
        "split": config.split,
        "objects": list(config.object_range()),
        "max_common": config.max_common_objects(),
        "common_distribution": config.common_distribution,
        "catalogs": len(index.catalogs),
        "images_read": index.images_read,
        "duplicate_images_skipped": index.duplicates_skipped,
        "eligible_images": eligible,
        "real_fraction": {"requested": real_fraction, "achieved": round(n_real / n_rows, 4) if n_rows else 0.0},
        "common_objects_requested": requested,
        "common_objects": achieved,
        "common_objects_missing": [int(k) for k in ks if not achieved[k]],
        "baselines": baseline_accuracy(achieved, choice_counts),
        "distractors": config.distractors,
        "choices_per_example": {str(c): n for c, n in sorted(choice_counts.items())},
        "image_uses_max": max((s["image_uses_max"] for s in per_source.values()), default=0),
        "by_source": per_source,
        "notes": notes,
    }


def baseline_accuracy(per_k: dict[str, int], choice_counts: dict[int, int]) -> dict[str, float]:
    """Expected accuracy of the weight-free baselines (the floor a model must beat): ``none`` scores the share
    with nothing in common; ``random`` picks each object choice with probability 1/2 (``none`` when it picks
    nothing), so a row with c choices is right with probability 2^-(c - 1)."""
    n = sum(per_k.values())
    random = sum(count * 0.5 ** (int(c) - 1) for c, count in choice_counts.items())
    return {"none": round(per_k.get("0", 0) / n, 4) if n else 0.0, "random": round(random / n, 4) if n else 0.0}


def pairs_meta(config: PairsConfig, catalog_dirs: Sequence[str | os.PathLike], stats: dict) -> dict:
    """The ``PAIRS_FILE.meta.json`` sidecar: kind, toolkit version, seed, split, options, catalogs (with the
    sha256 of each ``catalog.jsonl``, so a rerun can tell whether its inputs changed), stats, creation time."""
    catalogs = resolve_catalogs(catalog_dirs)
    return {
        "kind": COMMON_O_PAIRS_KIND,
        "toolkit_version": __version__,
        "seed": config.seed,
        "split": config.split,
        "count": stats["examples"],
        "config": config_record(config, stats),
        "catalogs": [str(p) for p in catalogs],
        "catalog_sha256": {str(p): sha256_file(catalog_file(p)) for p in catalogs},
        "stats": stats,
        "created": utc_now(),
    }


def config_record(config: PairsConfig, stats: dict | None = None) -> dict:
    """Every option as given, plus the values the defaults resolved to (when ``stats`` of a run are given)."""
    options = dataclasses.asdict(config)
    options["objects"] = list(config.object_range())
    options["max_common"] = config.max_common_objects()
    if stats is not None:
        options["real_fraction_used"] = stats["real_fraction"]["requested"]
        options["max_uses_used"] = {name: s["max_uses"] for name, s in stats["by_source"].items()}
    return options


def same_inputs(meta: dict, config: PairsConfig, catalog_dirs: Sequence[str | os.PathLike]) -> bool:
    """Whether an existing sidecar was written by this toolkit version from the same options and catalogs."""
    if meta.get("kind") != COMMON_O_PAIRS_KIND or meta.get("toolkit_version") != __version__:
        return False
    given = config_record(config)
    if any(meta.get("config", {}).get(key) != value for key, value in given.items()):
        return False
    catalogs = resolve_catalogs(catalog_dirs)
    return meta.get("catalog_sha256") == {str(p): sha256_file(catalog_file(p)) for p in catalogs}


def reusable_pairs(
    path: str | os.PathLike, config: PairsConfig, catalog_dirs: Sequence[str | os.PathLike]
) -> dict | None:
    """The sidecar of an existing pairs file when it was made from these catalogs with these settings (a rerun
    keeps that file), else ``None``."""
    try:
        previous = pairs_meta_from_file(read_meta(path), path)
    except CommonlinkError:
        return None
    if not same_inputs(previous, config, catalog_dirs):
        return None
    problem = data_file_problem(path, previous)
    if problem:  # truncated or edited since: never "kept", and never silently replaced either
        raise InputError(
            f"{path} was made from these catalogs with these settings, but {problem}.",
            "Pass --overwrite to sample it again, or restore the original file.",
        )
    return previous


@dataclass
class PairsFileResult:
    """What :func:`make_pairs_file` did."""

    path: Path
    stats: dict  #: the statistics of the file (as in its sidecar)
    kept: bool  #: the file was already built from these catalogs with these settings and was kept as is


def make_pairs_file(
    catalog_dirs: Sequence[str | os.PathLike],
    out: str | os.PathLike,
    config: PairsConfig,
    *,
    overwrite: bool = False,
    progress: bool = True,
) -> PairsFileResult:
    """Sample ``config`` from the catalogs into the pairs file ``out`` and its sidecar (``commonlink pairs``).

    One run per ``out`` at a time (a second is refused, naming the first). An existing file made from these
    catalogs with these settings is kept; any other existing file is refused unless ``overwrite``.
    """
    out = Path(out)
    config.validate()
    if out.is_dir():
        raise InputError(
            f"--out {out} is a folder; the pairs file is one file.",
            f"Pass a file path, e.g. --out {out / 'pairs.jsonl'}.",
        )
    with output_lock(out, what="commonlink pairs"):  # file and sidecar from the same run
        if out.exists() and not overwrite:
            previous = reusable_pairs(out, config, catalog_dirs)
            if previous is not None:
                return PairsFileResult(out, previous["stats"], kept=True)
            raise InputError(
                f"{out} already exists and was not made from these catalogs with these settings.",
                "Pass --overwrite to replace it, or choose another --out.",
            )
        rows, stats = sample_pairs(catalog_dirs, config, progress=progress)
        write_pairs(out, rows, pairs_meta(config, catalog_dirs, stats))
    return PairsFileResult(out, stats, kept=False)


def write_pairs(path: str | os.PathLike, rows: Iterable[dict], meta: dict) -> int:
    """Write the pairs file (JSON lines) and its ``.meta.json`` sidecar, both atomically; returns rows written."""
    count = write_jsonl(path, pairs_rows_for_file(rows, path))
    write_meta(path, {**pairs_meta_for_file(meta, path), "count": count})
    return count
