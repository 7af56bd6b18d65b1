"""Finding Common-O pairs with exactly ``k`` common objects (docs/sampling.md, "How pairs are found").

The eligible images of one source are cut into blocks of at most ``BLOCK`` images; within a block the pairs that
share objects are listed object by object (every pair of the block's images showing it; one ``unique`` gives
each pair's count), the pairs that share none are drawn at random and checked, and each pair from different
scenes becomes a candidate for its ``k`` (a few times what the ``k`` needs are kept). Two block orders are
used: a seeded random one (a fair sample of all pairs: most common counts) and one that sorts images by a seeded
min-hash of their object sets, so images that share many objects (the views and sets of one photo shoot or
scene set) land in one block (the rare high counts). Work and memory are a constant per image (a block's pairs),
so the search grows linearly with the catalog; a source of at most ``2 * BLOCK`` images is one block, where the
candidates are every pair and "no pair shares k objects" is exact. On a larger source the min-hash order finds
only some of the rare high counts, so from the lowest ``k`` whose candidates are few for its quota every pair
sharing that many objects or more is listed exactly (:mod:`commonlink.kinds.common_o.pair_exact`, within
``EXACT_WORK_PER_IMAGE``); a ``k`` below that stays sampled, with an estimate of its pairs from the random order.

Quotas per ``k`` are then filled from shuffled candidates, rarest ``k`` first, under the per-image cap; the share
of a ``k`` that cannot be filled is moved to the ``k`` that still have candidates, in proportion to their
weights, and reported (never silently put on ``k = 0``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from commonlink.kinds.common_o.pair_exact import exhaustive_from
from commonlink.kinds.common_o.pair_runs import SourceImages, run_pairs

#: Images a block: the work per image is proportional to it (the pairs of its block), and so are the chances of
#: finding the rarest counts; 1,024 keeps a block's arrays at a few MB.
BLOCK = 1024
#: Candidates kept per block and k: this many times the block's fair share of the k's quota (plus a few), so
#: that pairs lost to the cap and moved quotas still find candidates.
CANDIDATE_SPARE = 4
CANDIDATE_MIN = 16
#: Work allowed per image (index entries and pairs listed) for listing every pair of the rare large k exactly
#: (pair_exact): about a third of what the block search spends on an image, so exactness costs little time.
EXACT_WORK_PER_IMAGE = 64


@dataclass
class SearchResult:
    pairs: np.ndarray  #: int64 (n, 3): image a, image b (indices into the source's images), k
    requested: list[int]  #: the quota per k from the distribution
    achieved: list[int]
    candidates: list[int]  #: distinct candidate pairs kept per k (all that were found, for a k rarer than its limit)
    exact: bool  #: every pair of the source was examined (one block): a k with no candidate is impossible
    exhaustive_from: int = 0  #: every pair sharing this many objects or more was found (0 with ``exact``)
    present: list[int] = field(
        default_factory=list
    )  #: pairs per k there are: exact from exhaustive_from, else estimated
    moved_to: dict[int, int] = field(default_factory=dict)  #: k -> examples it received from short k


def weighted_quota(n: int, weights: list[float], rng: np.random.Generator) -> list[int]:
    """``n`` examples split by ``weights`` (largest remainders; ties broken by ``rng``): exact counts, not drawn."""
    total = float(sum(weights))
    if n <= 0 or total <= 0:
        return [0] * len(weights)
    exact = np.asarray(weights, dtype=np.float64) / total * n
    quota = np.floor(exact).astype(np.int64)
    rest = n - int(quota.sum())
    if rest:
        order = np.lexsort((rng.random(len(weights)), -(exact - quota)))  # largest remainder first, random ties
        quota[order[:rest]] += 1
    return [int(q) for q in quota]


def _shared_pairs(images: SourceImages, block: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The pairs of ``block`` (an index array) that share at least one object: sorted local codes ``i * b + j``
    (i < j) and how many objects each shares. Built object by object (every pair of the block's images showing
    it), so the work is the sum over objects of their images squared, never ``b x b``; listed for a range of
    first images at a time (about PAIR_CHUNK (object, pair) entries), so memory is the distinct pairs found
    plus one chunk, however much the block's images overlap."""
    b = len(block)
    starts, ends = images.obj_ptr[block], images.obj_ptr[block + 1]
    lengths = ends - starts
    local = np.repeat(np.arange(b, dtype=np.int32), lengths)  # int32 throughout: b * b < 2**31 (b <= 2 * BLOCK)
    flat = np.repeat(starts - np.cumsum(lengths) + lengths, lengths) + np.arange(int(lengths.sum()))
    objects = images.obj_ids[flat]
    order = np.lexsort((local, objects))  # by object, then image: each object's images form one sorted run
    return run_pairs(objects[order], local[order], b, np.uint16)  # a count is at most the objects of one image


def _subsample(values: np.ndarray, limit: int, rng: np.random.Generator) -> np.ndarray:
    return values if len(values) <= limit else values[rng.choice(len(values), size=limit, replace=False)]


def _disjoint_pairs(
    scene: np.ndarray, shared_codes: np.ndarray, total: int, limit: int, rng: np.random.Generator
) -> np.ndarray:
    """At most ``limit`` local codes of pairs (different scenes) that share no object, of ``total`` such pairs:
    drawn at random and checked when they are common (no ``b x b`` work), else enumerated."""
    b = len(scene)
    if total * 10 >= b * b:  # at least a fifth of all pairs: ~2 * limit hits from the draws below
        draws = int(2 * limit * b * b / 2 / total) + 16
        i, j = rng.integers(b, size=draws), rng.integers(b, size=draws)
        low, high = np.minimum(i, j), np.maximum(i, j)
        codes = low * b + high
        at = np.minimum(np.searchsorted(shared_codes, codes), max(len(shared_codes) - 1, 0))
        known = shared_codes[at] == codes if len(shared_codes) else np.zeros(len(codes), dtype=bool)
        return _subsample(np.unique(codes[(low != high) & (scene[low] != scene[high]) & ~known]), limit, rng)
    mask = np.triu(scene[:, None] != scene[None, :], 1).ravel()
    mask[shared_codes] = False
    return _subsample(np.flatnonzero(mask), limit, rng)


def _minhash_order(images: SourceImages, rng: np.random.Generator) -> np.ndarray:
    """Images sorted by two seeded min-hashes of their object sets (similar sets sort together), ties random."""
    n_objects = int(images.obj_ids.max()) + 1 if len(images.obj_ids) else 1
    keys = [rng.random(images.m)]
    for _ in range(2):
        rank = rng.permutation(n_objects)[images.obj_ids]
        keys.append(np.minimum.reduceat(rank, images.obj_ptr[:-1]) if len(rank) else np.zeros(images.m, np.int64))
    return np.lexsort(keys)  # last key first: hash 2, then hash 1, then random


def _block_candidates(
    images: SourceImages, block: np.ndarray, k_max: int, wanted: list[int], rng: np.random.Generator
) -> tuple[list[np.ndarray], np.ndarray]:
    """Per k, local codes of candidate pairs of one block (different scenes), and how many of the block's pairs
    from different scenes share each k (before any is left out; the last entry: all of them)."""
    b, scene = len(block), images.scene[block]
    codes, shared = _shared_pairs(images, block)
    different = scene[codes // b] != scene[codes % b]
    codes, shared = codes[different], shared[different]
    per_scene = np.bincount(np.unique(scene, return_inverse=True)[1])
    disjoint = b * (b - 1) // 2 - int((per_scene * (per_scene - 1) // 2).sum()) - len(codes)
    by_k = [_disjoint_pairs(scene, codes, disjoint, _limit(wanted[0], b, images.m), rng) if disjoint else codes[:0]]
    present = np.zeros(k_max + 2, dtype=np.int64)
    present[0], present[-1] = disjoint, disjoint + len(codes)
    for k in range(1, k_max + 1):  # a pass per k over 16-bit counts: no sort, no index array the size of codes
        of_k = codes[shared == k]
        present[k] = len(of_k)
        by_k.append(_subsample(of_k, _limit(wanted[k], b, images.m), rng))
    return by_k, present


def _blocks(images: SourceImages, rng: np.random.Generator) -> list[list[np.ndarray]]:
    """The blocks of each order: one block of every image for a small source, else two orders of BLOCK-sized ones."""
    if images.m <= 2 * BLOCK:
        return [[np.arange(images.m)]]
    n_blocks = -(-images.m // BLOCK)
    return [np.array_split(order, n_blocks) for order in (rng.permutation(images.m), _minhash_order(images, rng))]


@dataclass
class Candidates:
    """What the search found in one source."""

    by_k: list[np.ndarray]  #: per k, codes ``a * m + b`` (a < b, distinct) in a seeded random order
    exact: bool  #: every pair was examined (one block)
    exhaustive_from: int  #: every pair sharing this many objects or more (up to k_max) is in ``by_k``
    present: list[int]  #: pairs from different scenes sharing each k: exact from exhaustive_from, else estimated


def find_candidates(images: SourceImages, k_max: int, wanted: list[int], rng: np.random.Generator) -> Candidates:
    """Candidate pairs per k (at most a few times what the k needs, except that every pair of a k from
    ``exhaustive_from`` on is kept), and how many pairs there are of each k."""
    m = images.m
    orders = _blocks(images, rng)
    found: list[list[np.ndarray]] = [[] for _ in range(k_max + 1)]
    sample = np.zeros(k_max + 2, dtype=np.int64)  # pairs per k in the first (random) order's blocks
    for o, blocks in enumerate(orders):
        for block in blocks:
            by_k, present = _block_candidates(images, block, k_max, wanted, rng)
            sample += present if o == 0 else 0
            for k, local in enumerate(by_k):
                if len(local):
                    a, c = block[local // len(block)], block[local % len(block)]
                    found[k].append(np.minimum(a, c).astype(np.int64) * m + np.maximum(a, c))
    candidates = []
    for parts in found:
        codes = np.unique(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.int64)
        candidates.append(codes[rng.permutation(len(codes))])
    # the random order's blocks hold a fair sample of the pairs: scaled up, an estimate of each k's pairs
    scale = distinct_pairs(images) / max(int(sample[-1]), 1)
    estimate = [max(int(round(n * scale)), len(c)) for n, c in zip(sample[:-1].tolist(), candidates)]
    if len(orders) == 1:
        return Candidates(candidates, True, 0, estimate)  # one block: every pair counted, the scale is 1
    # the k a random search finds plenty of stay sampled; from the lowest k it may not, every pair is listed
    lowest = next((k for k in range(1, k_max + 1) if len(candidates[k]) < CANDIDATE_SPARE * wanted[k]), k_max + 1)
    t, codes, shared = exhaustive_from(images, lowest, k_max, EXACT_WORK_PER_IMAGE * m)
    for k in range(t, k_max + 1):
        of_k = codes[shared == k]
        candidates[k] = of_k[rng.permutation(len(of_k))]
        estimate[k] = len(of_k)
    return Candidates(candidates, False, t, estimate)


def distinct_pairs(images: SourceImages) -> int:
    """Unordered pairs of images from different scenes."""
    sizes = np.bincount(images.scene) if images.m else np.zeros(0, dtype=np.int64)
    return (images.m * (images.m - 1) - int(np.sum(sizes * (sizes - 1)))) // 2


def _limit(wanted: int, b: int, m: int) -> int:
    """Candidates kept from one block of ``b`` of ``m`` images for a k that needs ``wanted`` pairs."""
    return CANDIDATE_MIN + CANDIDATE_SPARE * -(-wanted * b // m)


def _fill(
    k: int,
    want: int,
    codes: np.ndarray,
    start: int,
    m: int,
    uses: np.ndarray,
    cap: int,
    pairs: list[tuple[int, int, int]],
) -> tuple[int, int]:
    """Take up to ``want`` pairs of ``codes[start:]`` whose images are both under the cap; returns (taken, next)."""
    taken, position = 0, start
    while taken < want and position < len(codes):
        a, b = divmod(codes.item(position), m)
        position += 1
        if uses.item(a) < cap and uses.item(b) < cap:
            uses[a] += 1
            uses[b] += 1
            pairs.append((a, b, k))
            taken += 1
    return taken, position


_NO_PAIRS = np.zeros((0, 3), dtype=np.int64)


def sample_source(
    images: SourceImages,
    n: int,
    weights: list[float],
    cap: int,
    rng: np.random.Generator,
    k_limit: int | None = None,
    quota: list[int] | None = None,
) -> SearchResult:
    """``n`` pairs of one source, k following ``weights`` (over 0..len(weights) - 1) as far as the catalogs allow;
    no pair with more than ``k_limit`` common objects (e.g. no room left for a distractor). ``quota``: exact
    examples per k (summing to ``n``) instead of the weights' largest-remainder split."""
    k_max = len(weights) - 1
    drawn = weighted_quota(n, weights, rng)  # drawn either way, so the generator's state does not depend on it
    quota = list(quota) if quota is not None else drawn
    found = find_candidates(images, k_max, quota, rng)
    candidates = found.by_k
    result = SearchResult(
        _NO_PAIRS,
        list(quota),
        [0] * (k_max + 1),
        [len(c) for c in candidates],
        found.exact,
        found.exhaustive_from,
        found.present,
    )
    pairs: list[tuple[int, int, int]] = []
    if k_limit is not None:
        candidates = [c if k <= k_limit else c[:0] for k, c in enumerate(candidates)]
    uses = np.zeros(images.m, dtype=np.int64)
    cursor = [0] * (k_max + 1)
    target = list(quota)
    while True:
        # rarest k first: it has the fewest candidates for its quota
        for k in sorted(range(k_max + 1), key=lambda k: (len(candidates[k]) / max(target[k], 1), k)):
            taken, cursor[k] = _fill(
                k, target[k] - result.achieved[k], candidates[k], cursor[k], images.m, uses, cap, pairs
            )
            result.achieved[k] += taken
        short = sum(target) - sum(result.achieved)
        open_ks = [k for k in range(k_max + 1) if cursor[k] < len(candidates[k])]
        if short == 0 or not open_ks:
            result.pairs = np.array(pairs, dtype=np.int64).reshape(-1, 3)  # 24 bytes a pair, not ~130
            return result
        for k in range(k_max + 1):  # a k that fell short is closed at what it got
            target[k] = result.achieved[k]
        preferred = [k for k in open_ks if weights[k] > 0] or open_ks
        _spread(short, preferred, weights, target, result.moved_to)


def _spread(short: int, ks: list[int], weights: list[float], target: list[int], moved_to: dict[int, int]) -> None:
    """Give ``short`` more examples to ``ks``, one at a time to the k furthest below its weight (lowest
    target / weight; equal weights for zero-weight ks), so the counts stay as close to the weights as they can."""
    ks_array = np.asarray(ks)
    weight = np.asarray([weights[k] if weights[k] > 0 else 1.0 for k in ks], dtype=np.float64)
    planned = np.asarray([target[k] for k in ks], dtype=np.float64)
    for _ in range(short):
        j = int(np.argmin(planned / weight))
        planned[j] += 1
        k = int(ks_array[j])
        target[k] += 1
        moved_to[k] = moved_to.get(k, 0) + 1
