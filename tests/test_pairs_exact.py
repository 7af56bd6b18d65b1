"""Above one block, the pair search lists every pair sharing the rare large k (pair_exact), checked by brute force."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from commonlink.kinds.common_o import pair_exact, pair_search
from commonlink.kinds.common_o.pair_search import SourceImages, find_candidates
from commonlink.kinds.common_o.pairs import PairsConfig, sample_pairs
from tests.fixtures.catalogs import family_scenes, write_scene_catalog


def _themed_images(m: int, seed: int, vocab: int = 60, sizes=(3, 7), group: int = 12) -> SourceImages:
    """Like the benchmark's catalog: scenes of 4 views, objects mostly from one themed group, so that pairs of
    different scenes share up to all their objects."""
    rng = np.random.default_rng(seed)
    sets, scene = [], []
    for s in range(-(-m // 4)):
        base = int(rng.integers(vocab // group)) * group
        size = int(rng.integers(sizes[0], sizes[1] + 1))
        objects: set[int] = set()
        while len(objects) < size:
            objects.add(base + int(rng.integers(group)) if rng.random() < 0.8 else int(rng.integers(vocab)))
        for _ in range(4):
            view = sorted(objects)
            if len(view) > sizes[0] and rng.random() < 0.2:
                view.pop(int(rng.integers(len(view))))
            sets.append(view)
            scene.append(s)
    sets, scene = sets[:m], scene[:m]
    obj_ptr = np.zeros(m + 1, dtype=np.int64)
    np.cumsum([len(v) for v in sets], out=obj_ptr[1:])
    return SourceImages(obj_ptr, np.concatenate(sets).astype(np.int32), np.asarray(scene, dtype=np.int64))


def _brute_force(images: SourceImages) -> dict[int, int]:
    """Code ``a * m + b`` -> shared objects, for every pair of different scenes sharing any (dense X Xᵀ)."""
    m = images.m
    x = np.zeros((m, int(images.obj_ids.max()) + 1), dtype=np.float32)
    x[np.repeat(np.arange(m), np.diff(images.obj_ptr)), images.obj_ids] = 1
    shared = np.triu(np.rint(x @ x.T).astype(np.int64), 1)
    shared[images.scene[:, None] == images.scene[None, :]] = 0
    a, b = np.nonzero(shared)
    return dict(zip((a * m + b).tolist(), shared[a, b].tolist()))


def _of_k(truth: dict[int, int], k: int) -> list[int]:
    return sorted(code for code, n in truth.items() if n == k)


def test_every_pair_sharing_the_large_k_is_found_above_the_old_one_block_limit():
    images = _themed_images(3000, seed=1)  # more than 2 * BLOCK: blocks of a random and a min-hash order
    assert images.m > 2 * pair_search.BLOCK
    truth = _brute_force(images)
    wanted = [50, 100, 80, 60, 40, 1000, 120, 40]  # k = 5 and 6 asked for more than there are
    found = find_candidates(images, 7, wanted, np.random.default_rng(0))
    assert not found.exact and found.exhaustive_from <= 5
    assert len(_of_k(truth, 5)) > 20  # the catalog has such pairs (the old search found only some of them)
    for k in range(found.exhaustive_from, 8):
        assert sorted(found.by_k[k].tolist()) == _of_k(truth, k), k
        assert found.present[k] == len(_of_k(truth, k))
    for k in range(1, found.exhaustive_from):  # sampled: real pairs of that k, and an estimate of how many
        assert set(found.by_k[k].tolist()) <= set(_of_k(truth, k))
        assert 0.5 * len(_of_k(truth, k)) <= found.present[k] <= 2 * len(_of_k(truth, k))


@pytest.mark.parametrize("sizes", [(3, 7), (8, 12)])
def test_both_ways_of_listing_find_exactly_the_pairs_sharing_at_least_t(sizes):
    images = _themed_images(240, seed=sizes[0], vocab=40, sizes=sizes, group=14)
    truth = _brute_force(images)
    for t in range(1, sizes[1] + 1):
        expected = sorted(code for code, n in truth.items() if n >= t)
        for method in (pair_exact._by_subsets, pair_exact._by_prefix):
            codes, shared = method(images, t, 10**9)
            different = images.scene[codes // images.m] != images.scene[codes % images.m]
            codes, shared = codes[different], shared[different]
            assert codes.tolist() == expected, (method.__name__, t)
            assert shared.tolist() == [truth[c] for c in expected], (method.__name__, t)


def test_a_threshold_that_costs_more_than_the_budget_is_raised_or_left_sampled():
    images = _themed_images(400, seed=3)
    assert pair_exact.pairs_sharing(images, 1, budget=100) is None  # every pair sharing one object: too many
    t, codes, shared = pair_exact.exhaustive_from(images, 1, 7, budget=20 * images.m)
    assert 1 < t <= 7 and set(shared.tolist()) <= set(range(t, 8))
    t, codes, shared = pair_exact.exhaustive_from(images, 1, 7, budget=0)
    assert t == 8 and len(codes) == len(shared) == 0  # none fits: every k stays sampled


def test_shared_objects_counts_each_pair():
    images = _themed_images(50, seed=4)
    a, b = np.array([0, 1, 7, 20]), np.array([3, 40, 8, 21])
    sets = [set(images.obj_ids[images.obj_ptr[g] : images.obj_ptr[g + 1]].tolist()) for g in range(images.m)]
    assert pair_exact.shared_objects(images, a, b).tolist() == [len(sets[i] & sets[j]) for i, j in zip(a, b)]


def _catalog_truth(rows_catalog) -> dict[int, int]:
    """Pairs of different scenes per shared count, from the catalog's records."""
    import json

    records = [json.loads(line) for line in (rows_catalog / "catalog.jsonl").read_text().splitlines() if line]
    counts: dict[int, int] = {}
    for one, two in itertools.combinations(records, 2):
        if one["scene_id"] != two["scene_id"]:
            k = len(set(one["objects"]) & set(two["objects"]))
            counts[k] = counts.get(k, 0) + 1
    return counts


@pytest.fixture(scope="module")
def catalog(tmp_path_factory):
    root = tmp_path_factory.mktemp("exact")
    return write_scene_catalog(root / "s", "synthetic", family_scenes(40, seed=6), views=4, hide=True, seed=6)


def test_blocks_lowered_below_the_catalog_still_find_every_pair_of_the_large_k(catalog, monkeypatch):
    """BLOCK lowered so that a 160-image catalog is searched block by block, as a large one is."""
    monkeypatch.setattr(pair_search, "BLOCK", 16)
    config = PairsConfig(count=120, seed=2, common_distribution="uniform")
    rows, stats = sample_pairs([catalog], config)
    source = stats["by_source"]["synthetic"]
    assert source["all_pairs_examined"] is False
    t = source["all_pairs_found_from_k"]
    assert t <= 6
    truth = _catalog_truth(catalog)
    for k in range(t, 8):
        assert source["candidate_pairs"][str(k)] == truth.get(k, 0) == source["pairs_present"][str(k)]
    for row in rows:  # the rows are real pairs of their k
        common = set(row["image_1"]["objects"]) & set(row["image_2"]["objects"])
        assert len(row["ground_truth"]) == len(common) or (not common and len(row["ground_truth"]) == 1)


def test_a_short_k_that_was_only_sampled_says_how_many_pairs_there_are(catalog, monkeypatch):
    monkeypatch.setattr(pair_search, "BLOCK", 16)
    monkeypatch.setattr(pair_search, "EXACT_WORK_PER_IMAGE", 0)  # exactness priced out: every k sampled
    _, stats = sample_pairs([catalog], PairsConfig(count=120, seed=2, common_distribution="uniform"))
    source = stats["by_source"]["synthetic"]
    t = source["all_pairs_found_from_k"]
    assert t >= 7  # only where listing costs nothing: no image shows 7 objects
    short = [n for n in stats["notes"] if "could not be filled" in n and int(n.split(": ")[1].split()[0]) < t]
    assert short and all("of about" in n and "are sampled" in n for n in short)
    for k, n in source["pairs_present"].items():  # an estimate, never below what was found
        assert n >= source["candidate_pairs"][k]


def test_one_block_counts_every_k_exactly(catalog):
    _, stats = sample_pairs([catalog], PairsConfig(count=60, seed=1))
    source = stats["by_source"]["synthetic"]
    assert source["all_pairs_examined"] is True and source["all_pairs_found_from_k"] == 0
    truth = _catalog_truth(catalog)
    assert source["pairs_present"] == {str(k): truth.get(k, 0) for k in range(8)}
