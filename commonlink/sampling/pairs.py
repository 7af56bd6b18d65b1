"""Common-O pair sampling (paper §3.1–3.2; docs/sampling.md): two images, lettered choices, the objects in both.

An example pairs two images of the same source (``real`` | ``synthetic``) from different scenes. Its ground
truth is the set of objects visible in both images ("No objects are in common" when there is none). The
number of common objects ``k`` is drawn first, from the ``common_distribution`` over ``k = 0..max_common``
(default ``none=0.1``: 10% with nothing in common, the rest even over 1..max_common); a pair with exactly
``k`` common objects is then found through an object -> image index:

* the eligible images of a source are held as a compact index (object ids per image and images per object,
  both in CSR form, integer scene codes), never as records, so memory grows by a few bytes per image;
* for an anchor image ``A`` the intersection size with every other image is one ``bincount`` over the
  posting lists of ``A``'s objects, so *all* partners with exactly ``k`` common objects are found in one
  step; anchors are visited in a seeded cyclic order, so one search is bounded by one pass over the anchors
  and a pass without a hit proves that ``k`` is exhausted (availability only ever shrinks);
* the quota of an exhausted ``k`` is moved to the feasible ``k`` with the fewest planned examples, and the
  statistics say so.

Records are read twice, streaming: once to build the index, once to fetch the records of the images used.
"""

from __future__ import annotations

import dataclasses
import math
import os
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

import numpy as np

from commonlink import __version__
from commonlink.constants import NO_COMMON_OBJECTS
from commonlink.errors import (
    CommonlinkError,
    InputError,
    NotEnoughDataError,
    SchemaError,
)
from commonlink.fileio import jsonl_lines, parse_jsonl_line, sha256_file, write_jsonl
from commonlink.formats.catalog import (
    SOURCES,
    CatalogRecord,
    catalog_file,
    image_path,
    iter_catalog_rows,
)
from commonlink.formats.catalog_refs import pairs_meta_for_file, pairs_meta_from_file, pairs_rows_for_file
from commonlink.formats.common_o import QUESTION_TEMPLATE_ID, common_o_question, letters
from commonlink.formats.meta import (
    COMMON_O_PAIRS_KIND,
    data_file_problem,
    read_meta,
    utc_now,
    write_meta,
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
#: Default share of examples with nothing in common. Uniform over k = 0..K gives 1/(K+1): 12.5% for main's
#: K = 7, but 25% for K = 3, where always answering "No objects are in common" scores 25%. A fixed 10% keeps
#: that floor low whatever K, close to the paper's own sample (2 of the 18 randomly drawn examples of its
#: Figure 7, 11%, have nothing in common).
DEFAULT_COMMON_DISTRIBUTION = "none=0.1"


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
    #: how k is drawn over 0..max_common: "uniform", "none=P" (share P for k = 0, the rest even) or weights "w0,w1,..."
    common_distribution: str = DEFAULT_COMMON_DISTRIBUTION

    def object_range(self) -> tuple[int, int]:
        return tuple(self.objects) if self.objects is not None else DEFAULT_OBJECT_RANGE[self.split]  # type: ignore[return-value]

    def max_common_objects(self) -> int:
        return self.max_common if self.max_common is not None else self.object_range()[1]

    def validate(self) -> None:
        if self.split not in SPLITS:
            raise InputError(f"--split {self.split!r} is not a Common-O split.", f"Use one of: {', '.join(SPLITS)}.")
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
            raise InputError(f"--choices {self.choices}: need at least 3 (an object, a distractor, '{NO_COMMON_OBJECTS}').", "e.g. --choices 8.")
        if self.max_uses is not None and self.max_uses < 1:
            raise InputError(f"--max-uses {self.max_uses}: need at least 1.", "Leave it out for the automatic cap.")
        if self.real_fraction is not None and not 0.0 <= self.real_fraction <= 1.0:
            raise InputError(f"--real-fraction {self.real_fraction}: need a share between 0 and 1.", "e.g. --real-fraction 0.45.")
        common_weights(self.common_distribution, k_max)


def common_weights(spec: str, k_max: int) -> list[float] | None:
    """Weights of k = 0..k_max for ``--common-distribution`` (None for "uniform", drawn exactly as before)."""
    text = (spec or "").strip().lower().replace(" ", "")
    fix = "Use uniform, none=P (e.g. none=0.1: 10% with nothing in common, the rest even), or one weight per k (e.g. 1,2,2,1)."
    if text == "uniform":
        return None
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
        raise InputError(f"--common-distribution {spec!r}: need {k_max + 1} weights >= 0 (k = 0..{k_max}) with a positive sum.", fix)
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
# Pass 1: a compact index of the eligible images
# ----------------------------------------------------------------------------------------------------------


@dataclass
class _Index:
    catalogs: list[Path]  #: absolute catalog folders, in the order given
    vocab: list[str]  #: object names, sorted; object ids index this list
    source_vocab: dict[str, np.ndarray]  #: object ids seen in each source (all images, eligible or not)
    images_read: int
    duplicates_skipped: int
    # one entry per eligible image:
    catalog_index: np.ndarray  #: int32
    row_index: np.ndarray  #: int64, row number within the catalog file (0-based, blank lines skipped)
    source: np.ndarray  #: uint8, index into SOURCES
    scene: np.ndarray  #: int64, global scene code (scene ids are compared across catalogs, per source)
    obj_ptr: np.ndarray  #: int64, CSR pointers into obj_ids
    obj_ids: np.ndarray  #: int32, object ids (distinct per image, sorted)
    image_ids: list[str]  #: record ids, to check that pass 2 reads the same catalog

    def object_names(self, g: int) -> list[str]:
        return list(map(self.vocab.__getitem__, self.obj_ids[self.obj_ptr.item(g) : self.obj_ptr.item(g + 1)].tolist()))


def _resolve_catalogs(catalog_dirs: Sequence[str | os.PathLike]) -> list[Path]:
    if not catalog_dirs:
        raise InputError("No catalog folder given.", "Pass one or more catalog folders (made by `commonlink ingest` or `commonlink synth`).")
    seen: dict[Path, None] = {}
    for raw in catalog_dirs:
        path = Path(raw).expanduser().resolve()
        if not catalog_file(path).is_file():
            raise InputError(
                f"{raw} is not an image catalog (no {catalog_file(path).name} in it).",
                "Create one with `commonlink ingest` (photos) or `commonlink synth` (renders), or fix the path.",
            )
        seen.setdefault(path, None)  # the same folder twice counts once
    return list(seen)


def _build_index(catalogs: list[Path], object_range: tuple[int, int], progress) -> _Index:
    lo, hi = object_range
    name_ids: dict[str, int] = {}
    scene_codes: dict[tuple[int, str], int] = {}
    seen_ids: set[str] = set()
    source_objs: list[set[int]] = [set() for _ in SOURCES]
    # typed arrays, not lists: a few bytes an image instead of a Python int object each
    cat_idx = array("i")
    row_idx = array("q")
    src = array("B")
    scene = array("q")
    counts = array("q")
    obj_flat = array("i")
    image_ids: list[str] = []
    images_read = duplicates = 0
    task = progress.add_task("reading catalogs", total=None)
    # bound methods: this loop runs once per catalog line
    add_seen, new_id, name_id, scene_code = seen_ids.add, image_ids.append, name_ids.setdefault, scene_codes.setdefault
    for ci, folder in enumerate(catalogs):
        for row, record in enumerate(iter_catalog_rows(folder)):
            images_read += 1
            if images_read % 1024 == 0:  # batched: a rich update per record costs more than the record
                progress.advance(task, 1024)
            image_id = record["id"]
            if image_id in seen_ids:  # the same image listed twice (e.g. overlapping catalogs): keep the first
                duplicates += 1
                continue
            add_seen(image_id)
            names = set(record["objects"])
            if NO_COMMON_OBJECTS in names:
                raise SchemaError(
                    f"{catalog_file(folder)}, row {row + 1}: object name {NO_COMMON_OBJECTS!r} is reserved for the answer choice.",
                    "Rename that object in the catalog.",
                )
            s = SOURCES.index(record["source"])
            try:
                ids = sorted(map(name_ids.__getitem__, names))
            except KeyError:  # a new object name: ids in order of first appearance
                ids = sorted([name_id(n, len(name_ids)) for n in names])
            source_objs[s].update(ids)
            if not lo <= len(ids) <= hi:
                continue
            cat_idx.append(ci)
            row_idx.append(row)
            src.append(s)
            scene.append(scene_code((s, str(record["scene_id"])), len(scene_codes)))
            counts.append(len(ids))
            obj_flat.extend(ids)
            new_id(image_id)
    # Object ids in name order, so that the output does not depend on which catalog named an object first.
    vocab = sorted(name_ids)
    remap = np.empty(len(name_ids), dtype=np.int32)
    for new, name in enumerate(vocab):
        remap[name_ids[name]] = new
    obj_ids = remap[np.frombuffer(obj_flat, dtype=np.int32)] if obj_flat else np.zeros(0, dtype=np.int32)
    obj_ptr = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(np.frombuffer(counts, dtype=np.int64), out=obj_ptr[1:])
    if len(obj_ids):  # keep ids sorted per image after the remap: one sort by (image, id)
        image_of = np.repeat(np.arange(len(counts)), np.frombuffer(counts, dtype=np.int64))
        obj_ids = obj_ids[np.lexsort((obj_ids, image_of))]
    source_vocab = {
        name: np.sort(remap[np.fromiter(source_objs[s], dtype=np.int64)]) if source_objs[s] else np.zeros(0, dtype=np.int32)
        for s, name in enumerate(SOURCES)
    }
    return _Index(
        catalogs=catalogs,
        vocab=vocab,
        source_vocab=source_vocab,
        images_read=images_read,
        duplicates_skipped=duplicates,
        catalog_index=np.array(cat_idx, dtype=np.int32),
        row_index=np.array(row_idx, dtype=np.int64),
        source=np.array(src, dtype=np.uint8),
        scene=np.array(scene, dtype=np.int64),
        obj_ptr=obj_ptr,
        obj_ids=obj_ids.astype(np.int32, copy=False),
        image_ids=image_ids,
    )


# ----------------------------------------------------------------------------------------------------------
# Sampling pairs of one source
# ----------------------------------------------------------------------------------------------------------


@dataclass
class _SourceResult:
    pairs: list[tuple[int, int, int]]  #: (global image index A, global image index B, k)
    requested: list[int]  #: balanced quota per k
    achieved: list[int]
    moved: dict[int, int]  #: k -> examples moved away because k ran out
    exhausted_reason: dict[int, str]
    uses: np.ndarray
    max_uses: int
    anchors_examined: int


class _SourcePool:
    """The eligible images of one source, indexed for exact-k partner search."""

    def __init__(self, index: _Index, source: int, n_vocab: int):
        self.members = np.flatnonzero(index.source == source)  # global image indices
        m = len(self.members)
        self.m = m
        starts = index.obj_ptr[self.members]
        ends = index.obj_ptr[self.members + 1]
        self.n_objects = (ends - starts).astype(np.int64)
        self.obj_ptr = np.zeros(m + 1, dtype=np.int64)
        np.cumsum(self.n_objects, out=self.obj_ptr[1:])
        self.obj_ids = (
            np.concatenate([index.obj_ids[a:b] for a, b in zip(starts, ends)]) if m else np.zeros(0, dtype=np.int32)
        )
        # inverted index (CSR): posting[posting_ptr[o]:posting_ptr[o + 1]] are the images showing object o.
        # 4 bytes per (image, object), whatever the vocabulary size (a dense object x image matrix is not).
        by_object = np.argsort(self.obj_ids, kind="stable")
        self.posting = np.repeat(np.arange(m, dtype=np.int32), self.n_objects)[by_object]
        self.posting_ptr = np.zeros(n_vocab + 1, dtype=np.int64)
        np.cumsum(np.bincount(self.obj_ids, minlength=n_vocab), out=self.posting_ptr[1:])
        # scenes as contiguous runs of a sort order, so the members of a scene are one slice
        _, scene_local = np.unique(index.scene[self.members], return_inverse=True)
        self.scene = scene_local.astype(np.int64)
        self.n_scenes = int(self.scene.max()) + 1 if m else 0
        self.scene_order = np.argsort(self.scene, kind="stable")
        self.scene_start = np.zeros(self.n_scenes + 1, dtype=np.int64)
        np.cumsum(np.bincount(self.scene, minlength=self.n_scenes), out=self.scene_start[1:])

    def max_distinct_pairs(self) -> int:
        """Unordered pairs of images from different scenes."""
        sizes = np.diff(self.scene_start)
        return (self.m * (self.m - 1) - int(np.sum(sizes * (sizes - 1)))) // 2


def _balanced_quota(n: int, k_max: int, rng: np.random.Generator) -> list[int]:
    bins = k_max + 1
    quota = [n // bins] * bins
    for k in rng.choice(bins, size=n % bins, replace=False):
        quota[int(k)] += 1
    return quota


def _weighted_quota(n: int, weights: list[float], rng: np.random.Generator) -> list[int]:
    """``n`` examples split by ``weights`` (largest remainders; ties broken by ``rng``): the counts are exact,
    not drawn, so a split of 1,000 with none=0.1 has exactly 100 examples with nothing in common."""
    share = np.asarray(weights, dtype=np.float64) / float(sum(weights))
    exact = share * n
    quota = np.floor(exact).astype(np.int64)
    rest = n - int(quota.sum())
    if rest:
        order = np.lexsort((rng.random(len(weights)), -(exact - quota)))  # largest remainder first, random ties
        quota[order[:rest]] += 1
    return [int(q) for q in quota]


def _sample_source(
    pool: _SourcePool,
    n: int,
    k_max: int,
    cap: int,
    n_vocab_source: int,
    seed: int,
    split: str,
    source_name: str,
    progress,
    common_distribution: str = DEFAULT_COMMON_DISTRIBUTION,
) -> _SourceResult:
    """Draw ``n`` pairs of one source, each with its scheduled number of common objects k (drawn from
    ``common_distribution`` over 0..k_max); a k that runs out hands its unserved examples to other feasible k."""
    rng = rng_for(seed, "pairs", split, source_name, "search")
    weights = common_weights(common_distribution, k_max)
    quota = _balanced_quota(n, k_max, rng) if weights is None else _weighted_quota(n, weights, rng)
    # an exhausted k's quota goes where the planned count is furthest below its weight (evenly for uniform)
    target_weight = np.asarray(weights if weights is not None else [1.0] * (k_max + 1), dtype=np.float64)
    schedule = np.repeat(np.arange(k_max + 1), quota)
    rng.shuffle(schedule)
    search = _PairSearch(pool, k_max, cap, n_vocab_source, source_name, rng)
    scheduler = _KSchedule(schedule, quota, k_max, source_name, rng, search.exhausted, search.reason, target_weight)
    task = progress.add_task(f"sampling {source_name} pairs", total=n)
    pairs: list[tuple[int, int, int]] = []
    achieved = [0] * (k_max + 1)
    i = 0
    while i < len(schedule):
        k = schedule.item(i)
        found = k_max if search.exhausted[k] else search.find_pair(k)
        if isinstance(found, int):  # k is used up: reschedule from position i on (i itself included)
            scheduler.exhaust(k, found, i)
            if search.exhausted.all():
                break
            continue
        a, b = found
        search.take(a, b)
        pairs.append((pool.members.item(a), pool.members.item(b), k))
        achieved[k] += 1
        if len(pairs) % 64 == 0:
            progress.advance(task, 64)
        i += 1
    return _SourceResult(pairs, quota, achieved, scheduler.moved, search.reason, search.uses, cap, search.examined)


#: An invalid partner's intersection count in the search is set to this, or has it added (an image at its cap):
#: counts are at most 16, so the result stays negative and never equals a k.
_INVALID_PARTNER = -64
_array_max, _array_min = np.maximum.reduce, np.minimum.reduce


class _PairSearch:
    """Exact-k partner search over one source: which images are still available, how often each was used, the
    pairs already drawn, and per anchor an upper bound on the k it can still reach."""

    def __init__(self, pool: _SourcePool, k_max: int, cap: int, n_vocab_source: int, source_name: str, rng) -> None:
        self.pool, self.cap, self.rng = pool, cap, rng
        self.exhausted = np.zeros(k_max + 1, dtype=bool)
        self.reason: dict[int, str] = {}
        for k in range(k_max + 1):
            if int(np.count_nonzero(pool.n_objects >= k)) < 2:
                self.exhausted[k], self.reason[k] = True, f"fewer than two {source_name} images show {k}+ objects"
            elif k + 1 > n_vocab_source:
                # every example needs its k objects plus a distractor from the source's object names
                self.exhausted[k], self.reason[k] = True, f"only {n_vocab_source} {source_name} object names: no room for a distractor"
        self.uses = np.zeros(pool.m, dtype=np.int64)
        self.available = bytearray(b"\x01") * pool.m  # a bytearray: read once per anchor visited, cheaply
        # added to the intersection counts: 0 for an available image, _INVALID_PARTNER for one at its cap
        self.penalty = np.zeros(pool.m, dtype=np.int64)
        self.n_capped = 0  # images at their cap (none: the penalty is all zeros and is not added)
        self.partners: dict[int, list[int]] = {}
        self.anchors = [rng.permutation(np.flatnonzero(pool.n_objects >= k)).astype(np.int32) for k in range(k_max + 1)]
        self.cursor = [0] * (k_max + 1)
        self.examined = 0
        # the posting list of each object name as a view, made once (slicing per anchor costs more than the bincount)
        bounds = pool.posting_ptr.tolist()
        self.postings = [pool.posting[lo:hi] for lo, hi in pairwise(bounds)]
        # Per anchor, a bit set of the k it may still reach (0..largest intersection with a valid partner).
        # Partners only ever become invalid (uses reach the cap, pairs get used), so a set computed once stays an
        # upper bound: anchors that cannot reach k are skipped without any array work.
        self.reachable = [(1 << (k_max + 1)) - 1] * pool.m

    def find_pair(self, k: int) -> tuple[int, int] | int:
        """One pass at most over the anchors of k; returns (a, b), or the largest k any anchor may still reach."""
        pool, order, bit = self.pool, self.anchors[k], 1 << k
        postings, obj_ids, obj_ptr = self.postings, pool.obj_ids, pool.obj_ptr
        scene_of, scene_order, scene_start = pool.scene, pool.scene_order, pool.scene_start
        available, reachable = self.available, self.reachable
        n_order, cursor = len(order), self.cursor[k]
        seen_max = -1
        for _ in range(n_order):
            a = order.item(cursor)
            cursor = cursor + 1 if cursor + 1 < n_order else 0
            if not available[a]:
                continue
            if not reachable[a] & bit:
                seen_max = max(seen_max, reachable[a].bit_length() - 1)
                continue
            self.examined += 1
            objs = obj_ids[obj_ptr.item(a) : obj_ptr.item(a + 1)].tolist()
            # shared[b] = |objects(a) & objects(b)| for a valid partner b, negative for an invalid one
            shared = np.bincount(np.concatenate(list(map(postings.__getitem__, objs))), minlength=pool.m)
            if self.n_capped:
                shared += self.penalty  # images at their cap
            scene = scene_of.item(a)
            # different scenes only (this also excludes a itself)
            shared[scene_order[scene_start.item(scene) : scene_start.item(scene + 1)]] = _INVALID_PARTNER
            used = self.partners.get(a)
            if used:
                shared[used] = _INVALID_PARTNER  # no unordered pair twice
            # (ufunc reductions called directly: ndarray.max and np.flatnonzero add a Python layer per call)
            top = max(int(_array_max(shared)) + 1, 0)  # 1 + the largest intersection with a valid partner, 0 if none
            reachable[a] = (1 << top) - 1
            seen_max = max(seen_max, top - 1)
            if top <= k:
                continue
            hits = (shared == k).nonzero()[0]
            if len(hits) == 0:
                continue
            self.cursor[k] = cursor
            # prefer the least-used partners: spreads image reuse without changing which k is drawn
            hit_uses = self.uses[hits]
            least = hits[hit_uses == _array_min(hit_uses)]
            return a, int(least[self.rng.integers(len(least))])
        self.cursor[k] = cursor
        return seen_max

    def take(self, a: int, b: int) -> None:
        """Record the pair (a, b): both images used once more (unavailable at the cap), the pair never again."""
        uses = self.uses
        for x, y in ((a, b), (b, a)):
            used = uses.item(x) + 1
            uses[x] = used
            if used >= self.cap:
                self.available[x] = 0
                self.penalty[x] = _INVALID_PARTNER
                self.n_capped += 1
            self.partners.setdefault(x, []).append(y)


class _KSchedule:
    """The per-example schedule of k; when a k runs out, its unserved examples move to the feasible k furthest
    below its weight (shares ``exhausted`` and ``reason`` with the search)."""

    def __init__(self, schedule: np.ndarray, quota, k_max: int, source_name: str, rng, exhausted: np.ndarray,
                 reason: dict[int, str], target_weight: np.ndarray) -> None:
        self.schedule, self.k_max, self.source_name, self.rng = schedule, k_max, source_name, rng
        self.target_weight = target_weight  # an exhausted k's examples go where planned/weight is lowest
        self.planned = np.asarray(quota, dtype=np.int64)  # examples still planned + achieved, per k
        self.exhausted, self.reason = exhausted, reason
        self.moved: dict[int, int] = {}

    def exhaust(self, k: int, seen_max: int, i: int) -> None:
        exhausted, schedule, name = self.exhausted, self.schedule, self.source_name
        exhausted[k] = True
        self.reason.setdefault(k, f"no pair of {name} images from different scenes is left sharing exactly {k} objects")
        # a full pass over the anchors of k covered every image that can anchor a larger k
        for k2 in range(k + 1, self.k_max + 1):
            if not exhausted[k2] and k2 > seen_max:
                exhausted[k2] = True
                self.reason.setdefault(k2, f"no pair of {name} images from different scenes shares {k2} objects")
        later = np.arange(i, len(schedule))
        for k_gone in np.flatnonzero(exhausted):
            positions = later[schedule[i:] == k_gone]
            if len(positions) == 0:
                continue
            feasible = np.flatnonzero(~exhausted)
            if len(feasible) == 0:
                return
            self.moved[int(k_gone)] = self.moved.get(int(k_gone), 0) + len(positions)
            self.planned[k_gone] -= len(positions)
            new_ks = []
            weighted = feasible[self.target_weight[feasible] > 0]
            for _ in positions:
                if len(weighted):
                    target = weighted[np.argmin(self.planned[weighted] / self.target_weight[weighted])]
                else:
                    target = feasible[np.argmin(self.planned[feasible])]
                self.planned[target] += 1
                new_ks.append(target)
            schedule[positions] = self.rng.permutation(np.asarray(new_ks))


# ----------------------------------------------------------------------------------------------------------
# Pass 2 and rows
# ----------------------------------------------------------------------------------------------------------


_IMAGE_KEYS = {1: "image_1", 2: "image_2"}


def _fill_images(index: _Index, rows: list[dict], slots: np.ndarray, check_files: bool) -> None:
    """Stream the catalogs once more and put the record of each used image into its rows.

    ``slots`` is an (n, 3) array of ``(global image index, row number, 1 | 2)``. Each row gets its own copy of
    the image fields and no record is kept, so memory holds the rows and the compact index only. Records
    were validated in pass 1; the id check catches a catalog rewritten in between.
    """
    images = slots[:, 0]
    order = np.lexsort((index.row_index[images], index.catalog_index[images]))
    slots = slots[order]
    slot_catalog = index.catalog_index[slots[:, 0]]
    slot_row = index.row_index[slots[:, 0]]
    missing: list[str] = []
    shared = {name: name for name in index.vocab}
    for ci in np.unique(slot_catalog).tolist():
        folder = index.catalogs[ci]
        folder_text = str(folder)
        path = catalog_file(folder)
        pos, end = np.searchsorted(slot_catalog, [ci, ci + 1]).tolist()
        # only the lines of used images are parsed (pass 1 checked every line of this file)
        for row, (lineno, line) in enumerate(jsonl_lines(path)):
            if pos == end:
                break
            if row != slot_row.item(pos):
                continue
            data = parse_jsonl_line(path, lineno, line)
            g = slots.item(pos, 0)
            if data.get("id") != index.image_ids[g]:
                raise InputError(
                    f"{path} changed while pairs were being sampled (row {row + 1} is now image {data.get('id')!r}).",
                    "Rerun `commonlink pairs` once the catalog is no longer being written.",
                )
            try:
                if check_files and not _image_exists(folder, folder_text, data["path"]):
                    missing.append(str(folder / data["path"]))
            except InputError as exc:  # a path escaping the catalog: say which record holds it
                raise InputError(f"{path}, line {lineno}: {exc.problem}", exc.fix) from None
            entry = _image_entry(folder_text, data, shared)
            while True:  # every use of this image
                rows[slots.item(pos, 1)][_IMAGE_KEYS[slots.item(pos, 2)]] = entry
                pos += 1
                if pos == end or slots.item(pos, 0) != g:
                    break
                entry = _copy_entry(entry)
        if pos < end:
            raise InputError(f"{path} got shorter while pairs were being sampled.", "Rerun `commonlink pairs`.")
    if missing:
        shown = ", ".join(sorted(missing)[:5])
        raise InputError(
            f"{len(missing)} image file(s) named by the catalogs are missing, e.g. {shown}.",
            "Restore the files, or rebuild the catalog so that it lists only images that exist.",
        )


def _image_exists(folder: Path, folder_text: str, relative: str) -> bool:
    # Plain relative paths are the norm and need one stat; anything else goes through safe_join (via
    # image_path), which refuses absolute paths and '..' with a clear error. Symlinks that lead out of the
    # catalog are refused by image_path when the release build opens the image.
    # (The substring test first: building a Path for every image costs more than the stat.)
    if os.path.isabs(relative) or (".." in relative and ".." in Path(relative).parts):
        return image_path(folder, CatalogRecord("", relative, [], "real", "", 0, 0, "")).is_file()
    return os.path.isfile(os.path.join(folder_text, relative))


def _image_entry(folder: str, record: dict, shared: dict[str, str]) -> dict:
    """The ``image_N`` fields of a row, from a catalog record (a fresh copy for every use).

    ``shared`` maps repeated short strings (object names, backgrounds, views) to one string object each, so
    that thousands of rows do not hold thousands of copies of "apple".
    """
    area = record.get("object_area")
    view, background = record.get("view"), record.get("background")
    return {
        "catalog": folder,
        "id": record["id"],
        "path": record["path"],
        "scene_id": record["scene_id"],
        "view": shared.setdefault(view, view) if isinstance(view, str) else view,
        "background": shared.setdefault(background, background) if isinstance(background, str) else background,
        "objects": list(map(shared.setdefault, record["objects"], record["objects"])),
        "object_area": {shared.setdefault(o, o): v for o, v in area.items()} if area is not None else None,
        "width": record["width"],
        "height": record["height"],
        "sha256": record["sha256"],
    }


def _copy_entry(entry: dict) -> dict:
    """Another use of an image: the same fields, its own lists and dicts."""
    area = entry["object_area"]
    return {**entry, "objects": list(entry["objects"]), "object_area": dict(area) if area is not None else None}


def build_choices(
    objects_1: Iterable[str], objects_2: Iterable[str], vocabulary: Sequence[str], min_choices: int, rng: np.random.Generator
) -> tuple[list[str], list[str], str]:
    """Lettered choices for two object sets: ``(choices, ground_truth, answer)``.

    Choices are the common objects, distractors (objects in only one image first, then objects in neither,
    drawn from ``vocabulary``) and "No objects are in common", shuffled; there are ``max(min_choices, k + 2)``
    of them: exactly ``min_choices`` (8 by default, as every list the paper prints) while the k common objects
    leave room for a distractor, else every common object, "No objects are in common" and one distractor (so
    the answer is never simply "every object listed"). With 8 choices: k <= 6 gives 8 choices; k = 7 gives 9;
    the challenge split's k = 8..16 gives k + 2. ``ground_truth`` lists the common objects
    in letter order (or the "none" choice); ``answer`` is their letters, e.g. ``"A, C"``.
    """
    set_1, set_2 = set(objects_1), set(objects_2)
    common = sorted(set_1 & set_2)
    n_choices = max(min_choices, len(common) + 2)
    n_distractors = n_choices - 1 - len(common)
    only_one = sorted(set_1 ^ set_2)
    distractors = [only_one[j] for j in rng.permutation(len(only_one))[:n_distractors].tolist()]
    if len(distractors) < n_distractors:
        union = set_1 | set_2
        neither = sorted(set(vocabulary) - union)
        need = n_distractors - len(distractors)
        if len(neither) < need:
            raise NotEnoughDataError(
                f"Only {len(neither) + len(only_one) + len(common)} object names are known: {n_choices} choices need "
                f"{n_choices - 1}.",
                "Lower --choices, or add catalogs with more kinds of objects.",
            )
        distractors += [neither[j] for j in rng.choice(len(neither), size=need, replace=False).tolist()]
    options = common + distractors + [NO_COMMON_OBJECTS]
    choices = [options[j] for j in rng.permutation(len(options)).tolist()]
    truth_set = set(common) if common else {NO_COMMON_OBJECTS}
    labels = letters(len(choices))
    truth_positions = [j for j, c in enumerate(choices) if c in truth_set]
    ground_truth = [choices[j] for j in truth_positions]
    answer = ", ".join([labels[j] for j in truth_positions])
    return choices, ground_truth, answer


# ----------------------------------------------------------------------------------------------------------
# Entry points
# ----------------------------------------------------------------------------------------------------------


def auto_max_uses(n: int, m: int) -> int:
    """The default --max-uses for ``n`` examples from ``m`` eligible images of a source."""
    return max(AUTO_MAX_USES_MIN, math.ceil(AUTO_MAX_USES_FACTOR * 2 * n / max(m, 1)))


def _too_few(source: str, m: int, n: int, lo: int, hi: int, index: _Index, needed: str) -> NotEnoughDataError:
    return NotEnoughDataError(
        f"Only {m:,} eligible {source} image(s) (showing {lo}-{hi} objects) were found among {index.images_read:,} "
        f"read from {len(index.catalogs)} catalog(s); {n:,} {source} example(s) need {needed}.",
        "Add images (more catalogs), widen --objects, lower --count, raise --max-uses, "
        "or change --real-fraction.",
    )


def sample_pairs(
    catalog_dirs: Sequence[str | os.PathLike], config: PairsConfig, *, progress: bool = False
) -> tuple[list[dict], dict]:
    """Sample ``config.count`` Common-O examples from the catalogs; returns ``(rows, stats)``.

    Rows follow the pairs-file format (README, section ``pairs``); ``stats`` summarises the run (JSON-ready,
    deterministic). Raises :class:`NotEnoughDataError` when the catalogs cannot supply the request.
    """
    config.validate()
    lo, hi = config.object_range()
    k_max = config.max_common_objects()
    catalogs = _resolve_catalogs(catalog_dirs)
    with make_progress("items", disable=not progress, transient=True) as bar:
        index = _build_index(catalogs, (lo, hi), bar)
        eligible = {name: int(np.count_nonzero(index.source == s)) for s, name in enumerate(SOURCES)}
        real_fraction = resolve_real_fraction(config, eligible)
        wanted = {"real": round(config.count * real_fraction)}
        wanted["synthetic"] = config.count - wanted["real"]
        results: dict[str, _SourceResult] = {}
        for s, name in enumerate(SOURCES):
            n = wanted[name]
            if n == 0:
                continue
            m = eligible[name]
            if m < 2:
                hint = " (Common-O Complex is synthetic only by default)" if config.split == "challenge" and name == "synthetic" else ""
                raise _too_few(name, m, n, lo, hi, index, "at least 2 images from different scenes" + hint)
            pool = _SourcePool(index, s, len(index.vocab))
            n_vocab = len(index.source_vocab[name])
            if n_vocab < config.choices - 1:
                raise NotEnoughDataError(
                    f"The {name} images name only {n_vocab} kinds of object; {config.choices} choices need "
                    f"{config.choices - 1} (plus '{NO_COMMON_OBJECTS}').",
                    "Lower --choices, or add catalogs with more kinds of objects.",
                )
            cap = config.max_uses if config.max_uses is not None else auto_max_uses(n, m)
            distinct = pool.max_distinct_pairs()
            if n > distinct:
                raise _too_few(name, m, n, lo, hi, index, f"{n:,} distinct pairs from different scenes, and there are {distinct:,}")
            if 2 * n > m * cap:
                raise _too_few(name, m, n, lo, hi, index, f"{2 * n:,} image slots, and --max-uses {cap} allows {m * cap:,}")
            result = _sample_source(pool, n, k_max, cap, n_vocab, config.seed, config.split, name, bar,
                                    common_distribution=config.common_distribution)
            if len(result.pairs) < n:
                reasons = "; ".join(f"{k}: {why}" for k, why in sorted(result.exhausted_reason.items()))
                raise NotEnoughDataError(
                    f"Found only {len(result.pairs):,} of {n:,} {name} examples from {m:,} eligible {name} images "
                    f"({lo}-{hi} objects, {index.images_read:,} images read, --max-uses {cap}); every number of "
                    f"common objects ran out ({reasons}).",
                    "Add images (more catalogs), raise --max-uses, widen --objects, lower --count or --choices, "
                    "or change --real-fraction.",
                )
            results[name] = result
            del pool

        # rows in a seeded order; choices come from the index, image fields from pass 2
        jobs = [(name, a, b) for name, r in results.items() for a, b, _ in r.pairs]
        order = rng_for(config.seed, "pairs", config.split, "order").permutation(len(jobs))
        vocab_names = {name: [index.vocab[o] for o in ids] for name, ids in index.source_vocab.items()}
        choice_rng = rng_for(config.seed, "pairs", config.split, "choices")
        rows = []
        choice_counts: dict[int, int] = {}
        split, n_choices, object_names = config.split, config.choices, index.object_names
        for i, j in enumerate(order.tolist()):
            name, a, b = jobs[j]
            choices, truth, answer = build_choices(object_names(a), object_names(b), vocab_names[name], n_choices, choice_rng)
            choice_counts[len(choices)] = choice_counts.get(len(choices), 0) + 1
            rows.append(
                {
                    "id": f"{split}-{i:08d}",
                    "split": split,
                    "source": name,
                    "image_1": None,
                    "image_2": None,
                    "choices": choices,
                    "ground_truth": truth,
                    "answer": answer,
                    "question": common_o_question(choices),
                    "question_template": QUESTION_TEMPLATE_ID,
                }
            )
        # (global image, row, 1 | 2) for every image of every row
        slots = np.empty((len(order), 2, 3), dtype=np.int64)
        images = np.array([(a, b) for _, a, b in jobs], dtype=np.int64).reshape(-1, 2)
        slots[:, :, 0] = images[order]
        slots[:, :, 1] = np.arange(len(order))[:, None]
        slots[:, :, 2] = (1, 2)
        _fill_images(index, rows, slots.reshape(-1, 3), config.check_files)
    stats = _stats(config, index, eligible, real_fraction, results, choice_counts, len(rows))
    return rows, stats


def _stats(config, index, eligible, real_fraction, results, choice_counts, n_rows) -> dict:
    k_max = config.max_common_objects()
    ks = [str(k) for k in range(k_max + 1)]
    requested = {k: 0 for k in ks}
    achieved = {k: 0 for k in ks}
    notes = []
    per_source = {}
    for name, r in results.items():
        for k in range(k_max + 1):
            requested[str(k)] += r.requested[k]
            achieved[str(k)] += r.achieved[k]
        short = {str(k): r.requested[k] - r.achieved[k] for k in range(k_max + 1) if r.achieved[k] < r.requested[k]}
        for k, count in sorted(r.moved.items()):
            if r.requested[k] > r.achieved[k]:
                notes.append(
                    f"{name}, {k} common object(s): {r.achieved[k]} of {r.requested[k]} requested ({r.exhausted_reason.get(k, 'ran out')}); "
                    f"the other {r.requested[k] - r.achieved[k]} went to other counts."
                )
        used = r.uses[r.uses > 0]
        per_source[name] = {
            "examples": len(r.pairs),
            "eligible_images": eligible[name],
            "images_used": int(len(used)),
            "image_uses_max": int(used.max()) if len(used) else 0,
            "image_uses_mean": round(float(used.mean()), 3) if len(used) else 0.0,
            "max_uses": r.max_uses,
            "common_objects_requested": {str(k): r.requested[k] for k in range(k_max + 1)},
            "common_objects": {str(k): r.achieved[k] for k in range(k_max + 1)},
            "common_objects_short": short,
            "anchors_examined": r.anchors_examined,
        }
    n_real = per_source.get("real", {}).get("examples", 0)
    return {
        "examples": n_rows,
        "split": config.split,
        "objects": list(config.object_range()),
        "max_common": k_max,
        "catalogs": len(index.catalogs),
        "images_read": index.images_read,
        "duplicate_images_skipped": index.duplicates_skipped,
        "eligible_images": eligible,
        "real_fraction": {"requested": real_fraction, "achieved": round(n_real / n_rows, 4) if n_rows else 0.0},
        "common_objects_requested": requested,
        "common_objects": achieved,
        "choices_per_example": {str(c): n for c, n in sorted(choice_counts.items())},
        "image_uses_max": max((s["image_uses_max"] for s in per_source.values()), default=0),
        "by_source": per_source,
        "notes": notes,
    }


def pairs_meta(config: PairsConfig, catalog_dirs: Sequence[str | os.PathLike], stats: dict) -> dict:
    """The ``PAIRS_FILE.meta.json`` sidecar: kind, toolkit version, seed, split, options, catalogs (with the
    sha256 of each ``catalog.jsonl``, so a rerun can tell whether its inputs changed), stats, creation time."""
    catalogs = _resolve_catalogs(catalog_dirs)
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
    catalogs = _resolve_catalogs(catalog_dirs)
    return meta.get("catalog_sha256") == {str(p): sha256_file(catalog_file(p)) for p in catalogs}


def reusable_pairs(path: str | os.PathLike, config: PairsConfig, catalog_dirs: Sequence[str | os.PathLike]) -> dict | None:
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


def make_pairs_file(catalog_dirs: Sequence[str | os.PathLike], out: str | os.PathLike, config: PairsConfig, *,
                    overwrite: bool = False, progress: bool = True) -> PairsFileResult:
    """Sample ``config`` from the catalogs into the pairs file ``out`` and its sidecar (``commonlink pairs``).

    One run per ``out`` at a time (a second is refused, naming the first). An existing file made from these
    catalogs with these settings is kept; any other existing file is refused unless ``overwrite``.
    """
    out = Path(out)
    config.validate()
    if out.is_dir():
        raise InputError(f"--out {out} is a folder; the pairs file is one file.", f"Pass a file path, e.g. --out {out / 'pairs.jsonl'}.")
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
