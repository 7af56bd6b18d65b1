"""`commonlink pairs`: Common-O pair sampling from real and synthetic catalogs built here (records + PNGs)."""

from __future__ import annotations

import itertools
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from commonlink.cli import app
from commonlink.constants import NO_COMMON_OBJECTS
from commonlink.errors import InputError, NotEnoughDataError
from commonlink.fileio import read_jsonl
from commonlink.formats.catalog import CatalogRecord, read_catalog, write_catalog
from commonlink.formats.catalog_refs import CatalogResolver, catalog_reference
from commonlink.formats.meta import meta_path
from commonlink.kinds.common_o.format import common_o_question, letters
from commonlink.kinds.common_o.pairs import PairsConfig, build_choices, pairs_meta, sample_pairs, write_pairs
from tests.fixtures.catalogs import VOCAB, family_scenes, write_scene_catalog

make_catalog = write_scene_catalog


@pytest.fixture(scope="module")
def catalogs(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("catalogs")
    real_scenes = family_scenes(24, seed=1) + [["apple", "keys"], VOCAB[:9]]  # last two: 2 and 9 objects, not eligible
    real = make_catalog(root / "real", "real", real_scenes, views=3, seed=1)
    synthetic = make_catalog(root / "synthetic", "synthetic", family_scenes(30, seed=2), views=4, hide=True, seed=2)
    return real, synthetic


def _records_by_id(*folders: Path) -> dict[str, CatalogRecord]:
    return {r.id: r for folder in folders for r in read_catalog(folder)}


def _check_row(row: dict, records: dict[str, CatalogRecord], config: PairsConfig) -> int:
    """Every per-example invariant; returns the number of common objects."""
    lo, hi = config.object_range()
    rec = [records[row["image_1"]["id"]], records[row["image_2"]["id"]]]
    # same source, different scenes, not the same image, eligible object counts
    assert rec[0].source == rec[1].source == row["source"]
    assert rec[0].scene_id != rec[1].scene_id and rec[0].id != rec[1].id
    assert all(lo <= len(set(r.objects)) <= hi for r in rec)
    for key, r in zip(("image_1", "image_2"), rec):
        image = row[key]
        assert Path(image["catalog"]).is_absolute() and not Path(image["path"]).is_absolute()
        assert (Path(image["catalog"]) / image["path"]).is_file()
        assert image["objects"] == r.objects and image["scene_id"] == r.scene_id and image["view"] == r.view
        assert image["object_area"] == r.object_area
    # ground truth = objects in both images
    common = set(rec[0].objects) & set(rec[1].objects)
    choices = row["choices"]
    assert set(row["ground_truth"]) == (common or {NO_COMMON_OBJECTS})
    # choices: ground truth + distractors + "none", distinct, exactly --choices unless k + 2 exceed it
    assert len(choices) == len(set(choices)) == max(config.choices, len(common) + 2)
    assert choices.count(NO_COMMON_OBJECTS) == 1
    distractors = [c for c in choices if c not in common and c != NO_COMMON_OBJECTS]
    assert len(distractors) >= 1
    only_one = set(rec[0].objects) ^ set(rec[1].objects)
    if any(d not in only_one for d in distractors):  # objects in neither image only once the one-image ones ran out
        assert only_one <= set(distractors)
    # letters, answer, question
    labels = letters(len(choices))
    truth_letters = [labels[choices.index(t)] for t in row["ground_truth"]]
    assert row["answer"] == ", ".join(sorted(truth_letters, key=labels.index))
    assert [choices[labels.index(x)] for x in row["answer"].split(", ")] == row["ground_truth"]
    assert row["question"] == common_o_question(choices)
    assert "A. " + choices[0] in row["question"] and "Answer:" in row["question"]
    assert row["question_template"] == "which_objects_in_both_v1"
    return len(common)


def test_rows_keep_every_invariant(catalogs):
    config = PairsConfig(split="main", count=60, max_common=3, max_uses=4, seed=3, common_distribution="uniform")
    rows, stats = sample_pairs(list(catalogs), config)
    records = _records_by_id(*catalogs)
    assert len(rows) == 60 and len({r["id"] for r in rows}) == 60
    ks = [_check_row(row, records, config) for row in rows]
    # no unordered pair twice; no image above --max-uses
    pairs = [frozenset((r["image_1"]["id"], r["image_2"]["id"])) for r in rows]
    assert len(set(pairs)) == len(pairs)
    uses = Counter(i for p in pairs for i in p)
    assert max(uses.values()) <= 4 and stats["image_uses_max"] == max(uses.values())
    # the ineligible images (2 and 9 objects) never appear
    assert all(3 <= len(records[i].objects) <= 7 for i in uses)
    # k balanced over 0..3, per source and overall, exactly as requested
    assert stats["common_objects"] == stats["common_objects_requested"]
    by_k = Counter(ks)
    assert {str(k): by_k[k] for k in range(4)} == stats["common_objects"]
    assert max(by_k.values()) - min(by_k.values()) <= 2 and set(by_k) == {0, 1, 2, 3}
    for name in ("real", "synthetic"):
        per = Counter(k for k, r in zip(ks, rows) if r["source"] == name)
        assert max(per.values()) - min(per.values()) <= 1
    # default real share with both sources: the paper's 45%
    assert sum(r["source"] == "real" for r in rows) == 27 and stats["real_fraction"]["requested"] == 0.45
    assert stats["choices_per_example"] == {"8": 60}
    json.dumps(stats)  # JSON-ready


def test_real_fraction_and_challenge_default(catalogs):
    rows, stats = sample_pairs(list(catalogs), PairsConfig(count=40, real_fraction=0.25, seed=1))
    assert sum(r["source"] == "real" for r in rows) == 10 and stats["real_fraction"]["achieved"] == 0.25
    rows, _ = sample_pairs(list(catalogs), PairsConfig(count=40, real_fraction=1.0, seed=1))
    assert {r["source"] for r in rows} == {"real"}
    # challenge is synthetic only unless told otherwise
    rows, stats = sample_pairs(list(catalogs), PairsConfig(split="challenge", objects=(3, 7), count=30, seed=1))
    assert {r["source"] for r in rows} == {"synthetic"} and stats["real_fraction"]["requested"] == 0.0
    assert all(r["id"].startswith("challenge-") and r["split"] == "challenge" for r in rows)
    # only one source present: main uses it whole
    _, stats = sample_pairs([catalogs[1]], PairsConfig(count=20, seed=1))
    assert stats["by_source"]["synthetic"]["examples"] == 20 and "real" not in stats["by_source"]


def test_same_seed_same_output_other_seed_differs(catalogs):
    config = PairsConfig(count=50, seed=11)
    rows_a, stats_a = sample_pairs(list(catalogs), config)
    rows_b, stats_b = sample_pairs(list(catalogs), PairsConfig(count=50, seed=11))
    assert rows_a == rows_b and stats_a == stats_b
    rows_c, _ = sample_pairs(list(catalogs), PairsConfig(count=50, seed=12))
    assert [r["choices"] for r in rows_a] != [r["choices"] for r in rows_c]
    assert {frozenset((r["image_1"]["id"], r["image_2"]["id"])) for r in rows_a} != {
        frozenset((r["image_1"]["id"], r["image_2"]["id"])) for r in rows_c
    }


def test_impossible_counts_are_redistributed_and_reported(tmp_path):
    # every scene a different triple: two scenes share at most 2 objects, so k = 3..7 cannot happen
    triples = [list(t) for t in itertools.combinations(VOCAB[:9], 3)][::3]
    folder = make_catalog(tmp_path / "triples", "synthetic", triples, views=2)
    config = PairsConfig(
        count=45, seed=0, common_distribution="uniform"
    )  # default max_common = 7 (the upper --objects bound)
    rows, stats = sample_pairs([folder], config)
    records = _records_by_id(folder)
    ks = Counter(_check_row(r, records, config) for r in rows)
    assert len(rows) == 45 and set(ks) == {0, 1, 2}
    assert ks[0] == ks[1] == ks[2] == 15  # the impossible quota went evenly to the feasible counts
    assert all(stats["common_objects"][str(k)] == 0 for k in range(3, 8))
    short = stats["by_source"]["synthetic"]["common_objects_short"]
    assert set(short) == {"3", "4", "5", "6", "7"}
    assert stats["common_objects_missing"] == [3, 4, 5, 6, 7]
    assert any(
        "3 common object(s) could not be filled: 0 of" in note and "share exactly" in note for note in stats["notes"]
    )
    assert any("went to the counts that could take them" in note for note in stats["notes"])
    assert stats["baselines"]["none"] == round(15 / 45, 4)
    # the card of a release built from it says which counts were not reached, with the floors
    from commonlink.release.build import build_release

    pairs_file = tmp_path / "pairs.jsonl"
    write_pairs(pairs_file, rows, pairs_meta(config, [folder], stats))
    build_release([pairs_file], tmp_path / "release", name="triples", overwrite=True, progress=False)
    card = " ".join((tmp_path / "release" / "README.md").read_text().split())
    assert "**Not reached in main:** no example has 3, 4, 5, 6, 7 object(s) in common (the split allows 0–7)" in card
    assert "main: `none` 33.3%" in card


def test_build_choices_rules():
    rng = np.random.default_rng(0)
    vocab = VOCAB
    # one-image objects are used before objects in neither image
    choices, truth, answer = build_choices(["apple", "keys", "mug"], ["apple", "spoon"], vocab, 8, rng)
    assert truth == ["apple"] and len(choices) == 8
    assert {"keys", "mug", "spoon"} <= set(choices)
    assert answer == letters(8)[choices.index("apple")]
    # more one-image objects than slots: every distractor comes from them
    a, b = VOCAB[:10], VOCAB[9:19]
    choices, truth, _ = build_choices(a, b, vocab, 8, rng)
    assert truth == [VOCAB[9]] and set(choices) - {VOCAB[9], NO_COMMON_OBJECTS} <= set(a) ^ set(b)
    # nothing in common: the "none" choice is the answer
    choices, truth, answer = build_choices(["apple", "keys", "mug"], ["spoon", "fork", "bowl"], vocab, 8, rng)
    assert truth == [NO_COMMON_OBJECTS] and answer == letters(8)[choices.index(NO_COMMON_OBJECTS)]
    # many common objects: room grows to k + 2 (one distractor and "none")
    same = VOCAB[:8]
    choices, truth, answer = build_choices(same + ["lime"], same + ["pen"], vocab, 8, rng)
    assert (
        len(choices) == 10 and set(truth) == set(same) and len(answer.split(", ")) == 8
    )  # 8 common + none + 1 distractor
    assert truth == [c for c in choices if c in same]  # ground truth in letter order
    # 6 common objects: still exactly 8 choices with one distractor, as the paper prints them
    choices, truth, _ = build_choices(same[:6] + ["lime"], same[:6] + ["pen"], vocab, 8, rng)
    assert len(choices) == 8 and len(truth) == 6 and set(truth) == set(same[:6])
    # a larger --choices is honoured
    assert len(build_choices(["apple"], ["apple"], vocab, 12, rng)[0]) == 12
    # too few object names for the requested choices
    with pytest.raises(NotEnoughDataError, match="choices"):
        build_choices(["apple", "keys"], ["apple"], ["apple", "keys", "mug"], 8, rng)


def test_common_distribution_default_and_options(catalogs):
    # the default is the paper's shares; none=0.1: exactly 10% with nothing in common, the rest even over 1..K
    # (K = 3 here)
    rows, stats = sample_pairs(
        list(catalogs), PairsConfig(count=60, max_common=3, max_uses=6, seed=4, common_distribution="none=0.1")
    )
    ks = Counter(0 if r["ground_truth"] == [NO_COMMON_OBJECTS] else len(r["ground_truth"]) for r in rows)
    assert ks[0] == 6 and ks[1] + ks[2] + ks[3] == 54 and max(ks[1], ks[2], ks[3]) - min(ks[1], ks[2], ks[3]) <= 2
    assert stats["common_objects"] == stats["common_objects_requested"]
    # explicit weights, and uniform as before
    rows, _ = sample_pairs(
        list(catalogs), PairsConfig(count=40, max_common=3, max_uses=6, seed=4, common_distribution="0,1,1,0")
    )
    assert {len(r["ground_truth"]) for r in rows} == {1, 2} and NO_COMMON_OBJECTS not in {
        t for r in rows for t in r["ground_truth"]
    }
    meta = pairs_meta(PairsConfig(count=40, max_common=3), list(catalogs), _)
    assert meta["config"]["common_distribution"] == "paper"
    for bad in ("none=2", "1,2", "sometimes", "none=x"):
        with pytest.raises(InputError, match="--common-distribution"):
            PairsConfig(count=5, max_common=3, common_distribution=bad).validate()


def test_cli_writes_pairs_and_meta_keeps_and_refuses(catalogs, tmp_path):
    out = tmp_path / "pairs.jsonl"
    args = [
        "pairs",
        str(catalogs[0]),
        str(catalogs[1]),
        "--out",
        str(out),
        "--count",
        "30",
        "--seed",
        "5",
        "--max-common",
        "3",
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "Common objects per example" in result.output and "Sources" in result.output
    assert "Choices per example" in result.output and "image reuse max" in result.output
    assert "Baselines (the floor a model must beat): `none`" in result.output
    rows = list(read_jsonl(out))
    meta = json.loads(meta_path(out).read_text())
    assert len(rows) == 30 == meta["count"]
    assert meta["kind"] == "common_o_pairs" and meta["seed"] == 5 and meta["split"] == "main"
    assert meta["config"]["max_common"] == 3 and meta["config"]["objects"] == [3, 7]
    # catalogs named relative to the pairs file (formats.catalog_refs), so the folder can move
    assert meta["catalogs"] == [catalog_reference(catalogs[0], out), catalog_reference(catalogs[1], out)]
    assert meta["stats"]["examples"] == 30 and meta["toolkit_version"] and meta["created"]
    expected, _ = sample_pairs(list(catalogs), PairsConfig(count=30, seed=5, max_common=3))
    assert [CatalogResolver(out).pairs_row(row) for row in rows] == expected
    # same settings again: kept; other settings: refused without --overwrite, nothing lost
    before = out.read_bytes()
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0 and "kept" in again.output and out.read_bytes() == before
    other = CliRunner().invoke(app, args[:-2] + ["--max-common", "2"])
    assert other.exit_code == 1 and "--overwrite" in other.output and out.read_bytes() == before
    replaced = CliRunner().invoke(app, args[:-2] + ["--max-common", "2", "--overwrite"])
    assert replaced.exit_code == 0 and json.loads(meta_path(out).read_text())["config"]["max_common"] == 2


def test_cli_too_few_images_says_how_many_and_what_to_change(catalogs, tmp_path):
    out = tmp_path / "pairs.jsonl"
    result = CliRunner().invoke(app, ["pairs", str(catalogs[1]), "--out", str(out), "--count", "10000"])
    assert result.exit_code == 1
    text = " ".join(result.output.split())
    assert "Only 120 eligible synthetic image(s)" in text and "--count" in text and "--max-uses" in text
    assert not out.exists() and not meta_path(out).exists()
    # challenge needs 8-16 objects a scene: none here
    result = CliRunner().invoke(
        app, ["pairs", str(catalogs[1]), "--out", str(out), "--split", "challenge", "--count", "10"]
    )
    text = " ".join(result.output.split())
    assert result.exit_code == 1 and "Only 0 eligible synthetic image(s) (showing 8-16 objects)" in text
    assert "--objects" in text
    # a source that is asked for but absent
    result = CliRunner().invoke(
        app, ["pairs", str(catalogs[1]), "--out", str(out), "--count", "10", "--real-fraction", "0.5"]
    )
    assert result.exit_code == 1 and "Only 0 eligible real image(s)" in " ".join(result.output.split())


def test_bad_input_errors(catalogs, tmp_path):
    with pytest.raises(InputError, match="not an image catalog"):
        sample_pairs([tmp_path], PairsConfig(count=5))
    with pytest.raises(InputError, match="--split"):
        sample_pairs(list(catalogs), PairsConfig(split="test", count=5))
    with pytest.raises(InputError, match="--max-common"):
        sample_pairs(list(catalogs), PairsConfig(count=5, max_common=9))
    with pytest.raises(InputError, match="--real-fraction"):
        sample_pairs(list(catalogs), PairsConfig(count=5, real_fraction=1.5))
    result = CliRunner().invoke(
        app, ["pairs", str(catalogs[0]), "--out", str(tmp_path / "p.jsonl"), "--count", "5", "--objects", "7-3"]
    )
    assert result.exit_code == 1 and "--objects" in result.output


def test_missing_image_file_is_named(tmp_path):
    folder = make_catalog(tmp_path / "cat", "real", family_scenes(10, seed=4), views=2, seed=4)
    victim = read_catalog(folder)[0]
    (folder / victim.path).unlink()
    with pytest.raises(InputError, match="missing") as info:
        sample_pairs([folder], PairsConfig(count=15, max_uses=10, seed=0))
    assert victim.path in str(info.value)


def test_duplicate_catalogs_and_images_count_once(catalogs, tmp_path):
    rows, stats = sample_pairs([catalogs[0], catalogs[0]], PairsConfig(count=20, seed=2))
    assert stats["catalogs"] == 1 and stats["duplicate_images_skipped"] == 0
    # a second catalog listing the same images (e.g. a merged copy): each image is one image
    copy = tmp_path / "copy"
    copy.mkdir()
    for record in read_catalog(catalogs[0]):
        (copy / record.path).parent.mkdir(parents=True, exist_ok=True)
        (copy / record.path).write_bytes((catalogs[0] / record.path).read_bytes())
    write_catalog(copy, read_catalog(catalogs[0]))
    rows, stats = sample_pairs([catalogs[0], copy], PairsConfig(count=20, seed=2))
    assert stats["duplicate_images_skipped"] == stats["images_read"] // 2
    assert all(r["image_1"]["id"] != r["image_2"]["id"] for r in rows)


def test_write_pairs_is_atomic_and_round_trips(catalogs, tmp_path):
    config = PairsConfig(count=12, seed=4)
    rows, stats = sample_pairs(list(catalogs), config)
    out = tmp_path / "deep" / "pairs.jsonl"
    assert write_pairs(out, rows, pairs_meta(config, list(catalogs), stats)) == 12
    assert [CatalogResolver(out).pairs_row(row) for row in read_jsonl(out)] == rows
    assert not [p for p in out.parent.iterdir() if p.name.endswith(".tmp")]
    meta = json.loads(meta_path(out).read_text())
    assert set(meta["catalog_sha256"]) == {catalog_reference(c, out) for c in catalogs}


@pytest.mark.slow
def test_output_is_identical_across_processes(catalogs, tmp_path):
    # string hashing differs between processes (PYTHONHASHSEED); the pairs file must not
    import os
    import subprocess
    import sys

    outputs = []
    for hash_seed in ("1", "2"):
        out = tmp_path / f"pairs-{hash_seed}.jsonl"
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        code = "from commonlink.cli import main; main()"
        args = ["pairs", str(catalogs[0]), str(catalogs[1]), "--out", str(out), "--count", "40", "--seed", "9"]
        subprocess.run([sys.executable, "-c", code, *args], check=True, env=env, capture_output=True)
        outputs.append(out.read_bytes())
    assert outputs[0] == outputs[1] and outputs[0].count(b"\n") == 40


def test_running_out_while_sampling_names_the_reasons(tmp_path):
    # every scene shows the same three objects: only k = 3 exists, and 3 names leave no room for a distractor
    folder = make_catalog(tmp_path / "same", "synthetic", [["apple", "keys", "mug"]] * 4, views=2)
    with pytest.raises(NotEnoughDataError) as info:
        sample_pairs([folder], PairsConfig(count=5, choices=3, seed=0))
    text = str(info.value)
    assert "Found only 0 of 5 synthetic examples from 8 eligible synthetic images" in text
    assert "candidate pairs kept per k from 0: [0, 0, 0, 20, 0, 0, 0, 0]" in text  # only k = 3 exists
    assert "leave room for a distractor up to k = 1" in text and "--choices" in text


def test_a_catalog_path_leaving_the_catalog_is_refused_naming_its_line(tmp_path):
    """An image path with '..' is refused (never read from outside the catalog), and the error says which
    catalog.jsonl line holds it, so it can be fixed."""
    real = write_scene_catalog(tmp_path / "real", "real", family_scenes(12, 1), views=2)
    escaping = tmp_path / "escaping"
    escaping.mkdir()
    lines = (real / "catalog.jsonl").read_text().splitlines()
    (escaping / "catalog.jsonl").write_text(
        "".join(line.replace('"path": "images/', '"path": "../real/images/') + "\n" for line in lines)
    )
    with pytest.raises(InputError) as err:
        sample_pairs([escaping], PairsConfig(split="main", count=5, objects=(3, 6), seed=0))
    assert str(escaping / "catalog.jsonl") in err.value.problem and ", line " in err.value.problem
    assert "escapes the folder" in err.value.problem


def test_make_pairs_file_keeps_a_rerun_refuses_other_settings_and_holds_the_lock(catalogs, tmp_path):
    """The CLI's rules (keep an identical rerun, refuse to replace another file without overwrite, one writer
    per file) live in make_pairs_file, so library callers get them too."""
    from commonlink.kinds.common_o.pairs import make_pairs_file
    from commonlink.locks import output_lock

    out = tmp_path / "pairs.jsonl"
    config = PairsConfig(split="main", count=20, seed=3)
    first = make_pairs_file(list(catalogs), out, config, progress=False)
    assert not first.kept and first.stats["examples"] == 20 == len(list(read_jsonl(out)))
    written = out.read_bytes()
    again = make_pairs_file(list(catalogs), out, config, progress=False)
    assert again.kept and again.stats == first.stats and out.read_bytes() == written
    with pytest.raises(InputError, match="already exists"):
        make_pairs_file(list(catalogs), out, PairsConfig(split="main", count=20, seed=4), progress=False)
    with output_lock(out, what="commonlink pairs"), pytest.raises(InputError, match="being written"):
        make_pairs_file(
            list(catalogs), out, PairsConfig(split="main", count=20, seed=4), overwrite=True, progress=False
        )
    assert out.read_bytes() == written
