"""Every pair of a source's images from different scenes that shares at least ``t`` objects, listed exactly
(docs/sampling.md, "How pairs are found").

The block search (:mod:`commonlink.kinds.common_o.pair_search`) samples pairs, which finds plenty of the common
counts of common objects but only some of the rare large ones once a source is more than one block. Pairs sharing
many objects are few, and two indexes find all of them without looking at the others:

- **t-subsets**: every image lists each ``t``-subset of its objects; two images share at least ``t`` objects
  exactly when they list a subset in common, and a pair sharing ``j`` objects lists ``comb(j, t)`` of them, so
  the count of a pair's listings gives ``j`` with no check. Cheap while images have few objects (a 7-object
  image lists at most 35 subsets).
- **prefix filter** (as in set-similarity joins): objects ordered by how few of the source's images show them;
  an image of ``n`` objects is indexed by its ``n - t + 1`` rarest ones. Two images sharing ``t`` objects share
  one of those of each (otherwise fewer than ``t`` would be left), so the pairs of each rare object's posting
  list are the candidates, and each is checked. Used where images have many objects (Common-O Complex).

Both costs are counted before a pair is listed; the cheaper one runs if it fits the budget, else the threshold
is raised (fewer, rarer pairs) until one fits, and the caller reports the counts below it as sampled.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from commonlink.kinds.common_o.pair_runs import PAIR_CHUNK, SourceImages, run_pairs

_EMPTY = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))


def pairs_sharing(images: SourceImages, t: int, budget: int) -> tuple[np.ndarray, np.ndarray] | None:
    """Codes ``a * m + b`` (a < b, different scenes, sorted) of every pair sharing at least ``t`` objects and how
    many each shares; ``None`` when listing them would cost more than ``budget`` (index entries + pairs)."""
    found = _by_subsets(images, t, budget)
    if found is None:
        found = _by_prefix(images, t, budget)
    if found is None:
        return None
    codes, shared = found
    m = images.m
    different = images.scene[codes // m] != images.scene[codes % m]
    return codes[different], shared[different]


def _by_subsets(images: SourceImages, t: int, budget: int) -> tuple[np.ndarray, np.ndarray] | None:
    lengths = np.diff(images.obj_ptr)
    per_size = np.bincount(lengths) if len(lengths) else np.zeros(0, dtype=np.int64)
    sizes = [n for n in range(t, len(per_size)) if per_size[n]]
    if not sizes:
        return _EMPTY
    n_entries = sum(int(per_size[n]) * math.comb(n, t) for n in sizes)
    if n_entries > budget:
        return None
    subsets, owner = [], []
    for n in sizes:
        members = np.flatnonzero(lengths == n)
        objects = images.obj_ids[images.obj_ptr[members][:, None] + np.arange(n)]
        combos = np.array(list(itertools.combinations(range(n), t)), dtype=np.intp)
        subsets.append(objects[:, combos].reshape(-1, t))
        owner.append(np.repeat(members, len(combos)))
    listed, image = np.concatenate(subsets), np.concatenate(owner)
    del subsets, owner
    order = np.lexsort((image, *listed.T[::-1]))  # by subset (first object first), then image
    listed, image = listed[order], image[order]
    starts = np.ones(len(image), dtype=bool)
    starts[1:] = (listed[1:] != listed[:-1]).any(axis=1)
    del listed, order
    group = np.cumsum(starts)
    group_size = np.bincount(group)
    if n_entries + int((group_size * (group_size - 1) // 2).sum()) > budget:
        return None
    shared_one = group_size[group] > 1  # most subsets are listed by one image: no pair
    codes, listings = run_pairs(group[shared_one], image[shared_one], images.m)
    # a pair sharing j >= t objects lists comb(j, t) subsets in common, increasing in j
    listings_of = np.array([math.comb(j, t) for j in range(t, max(sizes) + 1)], dtype=np.int64)
    return codes.astype(np.int64, copy=False), t + np.searchsorted(listings_of, listings)


def _by_prefix(images: SourceImages, t: int, budget: int) -> tuple[np.ndarray, np.ndarray] | None:
    m = images.m
    lengths = np.diff(images.obj_ptr)
    if not len(images.obj_ids):
        return _EMPTY
    seen = np.bincount(images.obj_ids)
    owner = np.repeat(np.arange(m), lengths)
    order = np.lexsort((images.obj_ids, seen[images.obj_ids], owner))  # each image's objects, rarest first
    rank = np.arange(len(order)) - np.repeat(images.obj_ptr[:-1], lengths)
    prefix = order[rank < (lengths - t + 1)[owner]]
    tokens, owner = images.obj_ids[prefix], owner[prefix]
    posting = np.bincount(tokens) if len(tokens) else np.zeros(0, dtype=np.int64)
    checks = int((posting * (posting - 1) // 2).sum())  # candidate listings, each checked object by object
    if len(tokens) + checks * max(1, int(lengths.max(initial=0))) > budget:
        return None
    by_token = np.lexsort((owner, tokens))
    codes, _ = run_pairs(tokens[by_token], owner[by_token], m)
    codes = codes.astype(np.int64, copy=False)
    shared = np.concatenate(
        [shared_objects(images, part // m, part % m) for part in np.array_split(codes, -(-len(codes) // PAIR_CHUNK))]
        or [np.zeros(0, dtype=np.int64)]
    )
    enough = shared >= t
    return codes[enough], shared[enough]


def shared_objects(images: SourceImages, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """How many objects images ``a[i]`` and ``b[i]`` share (one sorted lookup per object of ``a[i]``)."""
    if not len(a):
        return np.zeros(0, dtype=np.int64)
    lengths = np.diff(images.obj_ptr)
    width = int(images.obj_ids.max()) + 1
    # (image, object) keys of the whole source, sorted: objects are sorted within each image
    keys = np.repeat(np.arange(images.m, dtype=np.int64), lengths) * width + images.obj_ids
    n = lengths[a]
    firsts = np.cumsum(n) - n
    objects = images.obj_ids[np.repeat(images.obj_ptr[a] - firsts, n) + np.arange(int(n.sum()))]
    probe = np.repeat(b.astype(np.int64), n) * width + objects
    at = np.minimum(np.searchsorted(keys, probe), len(keys) - 1)
    hits = (keys[at] == probe).astype(np.int64)
    return np.add.reduceat(hits, firsts) * (n > 0)


def exhaustive_from(images: SourceImages, lowest: int, k_max: int, budget: int) -> tuple[int, np.ndarray, np.ndarray]:
    """The smallest ``t`` in ``lowest..k_max`` whose pairs fit ``budget`` (``k_max + 1`` when none does), and the
    codes and shared counts of every pair sharing ``t..k_max`` objects."""
    for t in range(max(lowest, 1), k_max + 1):
        found = pairs_sharing(images, t, budget)
        if found is not None:
            codes, shared = found
            keep = shared <= k_max
            return t, codes[keep], shared[keep]
    return k_max + 1, *_EMPTY
