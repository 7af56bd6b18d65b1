"""Pairs rows built as they are read (PairRows), the second catalog pass, and the chunked pair search."""

from __future__ import annotations

import itertools
import json
import tracemalloc
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from commonlink.errors import InputError
from commonlink.fileio import read_jsonl
from commonlink.formats.catalog import catalog_file
from commonlink.formats.catalog_refs import CatalogResolver
from commonlink.kinds.common_o import pair_rows, pair_runs, pair_search, pairs
from commonlink.kinds.common_o.pair_search import SourceImages
from commonlink.kinds.common_o.pairs import PairsConfig, pairs_meta, sample_pairs, write_pairs
from tests.fixtures.catalogs import family_scenes, write_scene_catalog


@pytest.fixture(scope="module")
def catalog(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("rows")
    return write_scene_catalog(root / "synthetic", "synthetic", family_scenes(40, seed=5), views=4, hide=True, seed=5)


def test_rows_are_the_same_on_every_read_and_changing_one_changes_nothing(catalog, tmp_path, monkeypatch):
    config = PairsConfig(count=60, seed=2)
    rows, stats = sample_pairs([catalog], config)
    first = list(rows)
    assert len(rows) == 60 and list(rows) == first and rows == first and first == rows
    assert rows[0] == first[0] and rows[-1] == first[-1] and rows[59] == first[59]
    assert rows[5:17:3] == first[5:17:3] and rows[::-7] == first[::-7]
    with pytest.raises(IndexError):
        rows[60]
    # a row is a fresh dict each time: editing it (its lists and image fields too) leaves the run as it was
    edited = rows[0]
    edited["choices"].append("spoon")
    edited["image_1"]["objects"].append("spoon")
    edited["image_2"]["id"] = "x"
    assert rows[0] == first[0] != edited
    # indexing every row in a loop builds each row once, not once per index (rows 0..i-1 before row i)
    built = Counter()
    real_build = pair_rows.build_choices

    def counted(*args):
        built["rows"] += 1
        return real_build(*args)

    again, _ = sample_pairs([catalog], config)
    monkeypatch.setattr(pair_rows, "build_choices", counted)
    assert [again[i] for i in range(len(again))] == first and built["rows"] == 60
    monkeypatch.undo()
    # written as read
    out = tmp_path / "pairs.jsonl"
    assert write_pairs(out, rows, pairs_meta(config, [catalog], stats)) == 60
    assert [CatalogResolver(out).pairs_row(row) for row in read_jsonl(out)] == first


def test_reading_the_rows_holds_one_row_at_a_time(catalog):
    rows, _ = sample_pairs([catalog], PairsConfig(count=150, seed=3))
    for _ in rows:  # once before measuring: caches on first use (question text, letters) are not rows
        pass
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in rows:
            pass
        streamed = tracemalloc.get_traced_memory()[0] - before
        held = list(rows)
        listed = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(held) == 150
    # 150 rows with their image records are hundreds of KB; reading them one by one keeps none of them
    assert listed > 150 * 2_000 and streamed < listed / 20


def test_choice_counts_in_the_stats_are_those_of_the_rows(tmp_path):
    # scenes of 6-9 objects around shared pairs: up to k = 9 common objects, and with 4 choices any k >= 3 needs more
    folder = write_scene_catalog(tmp_path / "big", "synthetic", family_scenes(30, seed=7, sizes=(6, 9)), views=3)
    config = PairsConfig(
        split="challenge", count=80, objects=(6, 9), choices=4, seed=1, common_distribution="uniform", max_uses=12
    )
    rows, stats = sample_pairs([folder], config)
    counted = Counter(len(r["choices"]) for r in rows)
    assert len(counted) > 2  # rows with 4 choices and rows with k + 2 of them
    assert stats["choices_per_example"] == {str(c): n for c, n in sorted(counted.items())}
    ks = Counter(len(set(r["image_1"]["objects"]) & set(r["image_2"]["objects"])) for r in rows)
    assert {str(k): n for k, n in ks.items()} == {k: n for k, n in stats["common_objects"].items() if n}


def _rewrite_before_pass_two(monkeypatch, change) -> None:
    """Run ``change`` on the catalog folder just before the second catalog pass reads it."""
    original = pairs.read_image_entries

    def changed_then_read(index, images, check_files):
        change(index.catalogs[0])
        return original(index, images, check_files)

    monkeypatch.setattr(pairs, "read_image_entries", changed_then_read)


def test_a_catalog_rewritten_between_the_passes_is_refused(tmp_path, monkeypatch):
    folder = write_scene_catalog(tmp_path / "c", "real", family_scenes(12, seed=4), views=2)

    def swap_lines(folder: Path) -> None:
        lines = catalog_file(folder).read_text().splitlines(keepends=True)
        catalog_file(folder).write_text("".join(lines[1::2][:1] + lines[:1] + lines[2:]))

    _rewrite_before_pass_two(monkeypatch, swap_lines)
    with pytest.raises(InputError, match="changed while pairs were being sampled"):
        sample_pairs([folder], PairsConfig(count=30, seed=0))


def test_a_catalog_cut_short_between_the_passes_is_refused(tmp_path, monkeypatch):
    folder = write_scene_catalog(tmp_path / "c", "real", family_scenes(12, seed=4), views=2)

    def cut(folder: Path) -> None:
        lines = catalog_file(folder).read_text().splitlines(keepends=True)
        catalog_file(folder).write_text("".join(lines[:3]))

    _rewrite_before_pass_two(monkeypatch, cut)
    with pytest.raises(InputError, match="got shorter while pairs were being sampled"):
        sample_pairs([folder], PairsConfig(count=30, seed=0))


def _random_images(m: int, seed: int, vocab: int = 12, sizes=(3, 9)) -> SourceImages:
    rng = np.random.default_rng(seed)
    sets = [np.sort(rng.choice(vocab, size=int(rng.integers(*sizes)), replace=False)) for _ in range(m)]
    obj_ptr = np.zeros(m + 1, dtype=np.int64)
    np.cumsum([len(s) for s in sets], out=obj_ptr[1:])
    return SourceImages(obj_ptr, np.concatenate(sets).astype(np.int32), rng.integers(0, m // 3, m))


@pytest.mark.parametrize("chunk", [1, 7, 500])
def test_shared_pairs_are_the_same_listed_in_chunks(monkeypatch, chunk):
    images = _random_images(90, seed=chunk)
    block = np.random.default_rng(0).permutation(90)[:70]
    whole_codes, whole_counts = pair_search._shared_pairs(images, block)
    # every pair of the block sharing an object, with how many: by brute force
    sets = [set(images.obj_ids[images.obj_ptr[g] : images.obj_ptr[g + 1]].tolist()) for g in block.tolist()]
    expected = {
        i * len(block) + j: len(sets[i] & sets[j])
        for i, j in itertools.combinations(range(len(block)), 2)
        if sets[i] & sets[j]
    }
    assert dict(zip(whole_codes.tolist(), whole_counts.tolist())) == expected
    assert whole_codes.tolist() == sorted(expected)
    monkeypatch.setattr(pair_runs, "PAIR_CHUNK", chunk)
    codes, counts = pair_search._shared_pairs(images, block)
    assert codes.tolist() == whole_codes.tolist() and counts.tolist() == whole_counts.tolist()
    assert codes.dtype == whole_codes.dtype


def test_sampling_is_the_same_whatever_the_chunk(catalog, monkeypatch):
    config = PairsConfig(count=50, seed=8, max_common=4)
    expected = json.dumps(list(sample_pairs([catalog], config)[0]))
    monkeypatch.setattr(pair_runs, "PAIR_CHUNK", 3)
    assert json.dumps(list(sample_pairs([catalog], config)[0])) == expected


def test_an_empty_block_has_no_shared_pairs():
    images = _random_images(6, seed=1)
    codes, counts = pair_search._shared_pairs(images, np.zeros(0, dtype=np.int64))
    assert len(codes) == 0 and len(counts) == 0
