"""`commonlink release build`: shards, card, manifest, refusal rules; read back with plain `datasets`."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml
from PIL import Image

from commonlink.constants import NO_COMMON_OBJECTS
from commonlink.errors import InputError, SchemaError
from commonlink.fileio import atomic_write_json, read_jsonl, sha256_file
from commonlink.formats.card import read_card_metadata, size_category
from commonlink.kinds.common_o.datasheet import DATASHEET_SECTIONS
from commonlink.kinds.common_o.format import common_o_features
from commonlink.release.build import build_release
from commonlink.release.shards import ShardWriter, parse_size
from commonlink.release.staging import ReleaseOptions, verify_release
from tests.fixtures.catalogs import rewrite_pairs, write_rotating_catalog, write_tiny_pairs

# ---------------------------------------------------------------------------------------------- tiny inputs


make_catalog = write_rotating_catalog
make_pairs = write_tiny_pairs


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """Two pairs files (main: real JPEGs, challenge: synthetic PNGs) and one release built from them."""
    base = tmp_path_factory.mktemp("release")
    real = make_catalog(base / "real_catalog", 12)
    synthetic = make_catalog(base / "synth_catalog", 6, source="synthetic", fmt="PNG")
    atomic_write_json(
        base / "synth_catalog" / "synth_config.json", {"asset_licenses": {"Apache-2.0 (test)": 3, "zlib (test)": 1}}
    )
    main_rows = make_pairs(base / "main.jsonl", base / "real_catalog", real, 20)
    challenge_rows = make_pairs(base / "challenge.jsonl", base / "synth_catalog", synthetic, 8, split="challenge")
    result = build_release(
        [base / "main.jsonl", base / "challenge.jsonl"],
        base / "rel",
        name="Tiny Common-O",
        version="0.2.0",
        license="cc-by-4.0",
        progress=False,
    )
    return {
        "base": base,
        "rel": base / "rel",
        "result": result,
        "rows": {"main": main_rows, "challenge": challenge_rows},
    }


# ----------------------------------------------------------------------------------------------------- tests


@pytest.mark.slow
def test_plain_load_dataset_reads_published_types_and_pil_images(tiny):
    import datasets

    ds = datasets.load_dataset(str(tiny["rel"]), cache_dir=str(tiny["base"] / "hf_cache"))
    assert set(ds) == {"main", "challenge"}
    assert ds["main"].num_rows == 20 and ds["challenge"].num_rows == 8
    published = common_o_features()
    assert ds["main"].features == published
    assert isinstance(published["image_1"], datasets.Image)
    assert published["num_choices"] == datasets.Value("int64") and published["choices"] == datasets.Value("string")
    for split, rows in tiny["rows"].items():
        for got, src in zip(ds[split], rows):
            assert isinstance(got["image_1"], Image.Image) and isinstance(got["image_2"], Image.Image)
            assert got["image_1"].size == (32, 24)
            assert got["id"] == src["id"]
            assert json.loads(got["choices"]) == src["choices"]
            assert json.loads(got["ground_truth_objects"]) == src["ground_truth"]
            assert json.loads(got["objects_1"]) == src["image_1"]["objects"]
            assert got["num_objects_image_2"] == len(src["image_2"]["objects"])
            assert got["num_choices"] == len(src["choices"])
            assert got["num_ground_truth_objects"] == len([t for t in src["ground_truth"] if t != NO_COMMON_OBJECTS])
            assert got["answer"] == src["answer"] and got["question"] == src["question"]
            assert got["real_or_synthetic"] == src["source"] and got["answer_type"] == "multiple_choice"
            assert (got["image_1_id"], got["scene_2_id"], got["view_1"]) == (
                src["image_1"]["id"],
                src["image_2"]["scene_id"],
                src["image_1"]["view"],
            )
    # the embedded bytes are the catalog files themselves
    first = tiny["rows"]["main"][0]["image_1"]
    table = pq.read_table(tiny["rel"] / "data" / "main-00000-of-00001.parquet", columns=["image_1"])
    assert table.column("image_1")[0].as_py()["bytes"] == (Path(first["catalog"]) / first["path"]).read_bytes()


@pytest.mark.slow
def test_shard_schema_carries_datasets_features(tiny):
    schema = pq.read_schema(tiny["rel"] / "data" / "challenge-00000-of-00001.parquet")
    assert schema.names == list(common_o_features())
    assert str(schema.field("image_1").type) == "struct<bytes: binary, path: string>"
    assert str(schema.field("num_objects_image_1").type) == "int64"
    hf = json.loads(schema.metadata[b"huggingface"])
    assert hf["info"]["features"]["image_2"] == {"_type": "Image"}


@pytest.mark.slow
def test_card_yaml_is_valid_and_numbers_match_the_build(tiny):
    from huggingface_hub import DatasetCard

    text = (tiny["rel"] / "README.md").read_text()
    meta = read_card_metadata(text)
    assert yaml.safe_load(text.split("---")[1]) == meta
    card = DatasetCard(text)
    assert card.data.license == "cc-by-4.0" and card.data.pretty_name == "Tiny Common-O"
    assert meta["size_categories"] == [size_category(28)] == ["n<1K"]
    assert meta["configs"][0]["data_files"] == [
        {"split": "main", "path": "data/main-*"},
        {"split": "challenge", "path": "data/challenge-*"},
    ]
    info = meta["dataset_info"]
    assert {s["name"]: s["num_examples"] for s in info["splits"]} == {"main": 20, "challenge": 8}
    assert [f["name"] for f in info["features"]] == list(common_o_features())
    assert {"name": "image_1", "dtype": "image"} in info["features"]

    # the seven datasheet sections, in order
    positions = [text.index(f"### {section}\n") for section in DATASHEET_SECTIONS]
    assert positions == sorted(positions)
    # numbers computed from the rows: totals, per-split real share, objects-per-image range, top object
    rows = tiny["rows"]["main"]
    assert "28 examples (main: 20, challenge: 8)" in text
    distinct = {r[k]["id"]: len(r[k]["objects"]) for r in rows for k in ("image_1", "image_2")}
    mean = sum(distinct.values()) / len(distinct)
    assert (
        f"| main | 20 | 100.0% | 0.0% | {len(distinct)} | {min(distinct.values())}–{max(distinct.values())} (mean "
        f"{mean:.2f})" in text
    )
    assert "| challenge | 8 | 0.0% | 100.0% |" in text
    freq = Counter()
    images = {
        (r[k]["catalog"], r[k]["id"]): r[k]["objects"]
        for split in tiny["rows"].values()
        for r in split
        for k in ("image_1", "image_2")
    }
    for objects in images.values():
        freq.update(objects)
    top_name, top_count = sorted(freq.items(), key=lambda kv: (-kv[1], kv[0]))[0]
    assert f"| {top_name} | {top_count} |" in text
    # the floor a model must beat: `none` scores the share with nothing in common (as eval measures it),
    # `random` 2^-(choices - 1) per example in expectation
    from commonlink.kinds.common_o.task import evaluate_common_o

    none = evaluate_common_o(tiny["rel"], "main", "none", n_boot=10, progress=False)["metrics"]["overall"]["accuracy"]
    assert none == sum(r["ground_truth"] == [NO_COMMON_OBJECTS] for r in rows) / len(rows)
    expected_random = sum(0.5 ** (len(r["choices"]) - 1) for r in rows) / len(rows)
    assert f"main: `none` {100 * none:.1f}%, `random` {100 * expected_random:.1f}% (expected) accuracy" in text
    # object areas against Common-O's 2-22% band, counted once per distinct image; synthetic assets' licences
    pairs = sum(len(objects) for objects in images.values())
    assert f"100.0% of the {pairs} (object, image) pairs fall in 2–22%, the band Common-O reports" in text
    assert "(3 under Apache-2.0 (test); 1 under zlib (test))" in text
    # figures are linked and exist; no local absolute paths leak into the card
    linked = [line.split("](")[1].rstrip(")") for line in text.splitlines() if line.startswith("![")]
    assert linked and all((tiny["rel"] / rel).is_file() and rel.endswith(".png") for rel in linked)
    assert str(tiny["base"]) not in text


@pytest.mark.slow
def test_manifest_hashes_every_file(tiny):
    manifest = json.loads((tiny["rel"] / "manifest.json").read_text())
    assert manifest["toolkit_version"] == __import__("commonlink").__version__
    assert manifest["kind"] == "common_o" and manifest["seed"] == 3 and manifest["version"] == "0.2.0"
    split = manifest["parts"]["main"]
    assert {k: split[k] for k in ("rows", "files")} == {"rows": 20, "files": ["data/main-00000-of-00001.parquet"]}
    # the sizes the card shows, so `release card` can render it again from the manifest
    assert (
        split["download_size"] == (tiny["rel"] / "data/main-00000-of-00001.parquet").stat().st_size
        and split["num_bytes"] > 0
    )
    on_disk = {p.relative_to(tiny["rel"]).as_posix() for p in tiny["rel"].rglob("*") if p.is_file()} - {"manifest.json"}
    assert set(manifest["files"]) == on_disk
    for rel, info in manifest["files"].items():
        assert sha256_file(tiny["rel"] / rel) == info["sha256"]
        assert (tiny["rel"] / rel).stat().st_size == info["size"]
    assert manifest["config"]["max_shard_bytes"] == 500 * 1024 * 1024
    assert [i["file"] for i in manifest["config"]["inputs"]] == ["main.jsonl", "challenge.jsonl"]
    assert verify_release(tiny["rel"]) == []
    # a changed file is caught
    figure = next(p for p in (tiny["rel"] / "figures").iterdir())
    original = figure.read_bytes()
    try:
        figure.write_bytes(original + b"x")
        assert verify_release(tiny["rel"]) == [f"figures/{figure.name}: content differs from the manifest"]
    finally:
        figure.write_bytes(original)


@pytest.mark.slow
def test_small_max_shard_size_splits_into_named_shards(tiny, tmp_path):
    import datasets

    result = build_release(
        [tiny["base"] / "main.jsonl"], tmp_path / "sharded", max_shard_bytes=parse_size("6KB"), progress=False
    )
    files = sorted(p.name for p in (tmp_path / "sharded" / "data").iterdir())
    n = len(files)
    assert n >= 3
    assert files == [f"main-{i:05d}-of-{n:05d}.parquet" for i in range(n)]
    assert result.splits["main"]["files"] == [f"data/{f}" for f in files]
    assert sum(pq.ParquetFile(tmp_path / "sharded" / "data" / f).metadata.num_rows for f in files) == 20
    ds = datasets.load_dataset(str(tmp_path / "sharded"), split="main", cache_dir=str(tmp_path / "hf_cache"))
    assert ds["id"] == [r["id"] for r in tiny["rows"]["main"]]


@pytest.mark.slow
def test_existing_release_refused_reused_or_overwritten(tiny, tmp_path):
    main = tiny["base"] / "main.jsonl"
    out = tmp_path / "rel"
    build_release([main], out, name="A", progress=False)
    first = json.loads((out / "manifest.json").read_text())
    again = build_release([main], out, name="A", progress=False)  # same inputs and options: kept
    assert again.reused and json.loads((out / "manifest.json").read_text()) == first
    with pytest.raises(InputError, match="already holds a different release"):
        build_release([main], out, name="B", progress=False)
    assert json.loads((out / "manifest.json").read_text()) == first  # untouched
    build_release([main], out, name="B", overwrite=True, progress=False)
    assert json.loads((out / "manifest.json").read_text())["name"] == "B"
    stranger = tmp_path / "notes"
    stranger.mkdir()
    (stranger / "mine.txt").write_text("keep me")
    with pytest.raises(InputError, match="not a commonlink release"):
        build_release([main], stranger, overwrite=True, progress=False)
    assert (stranger / "mine.txt").read_text() == "keep me"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes", "rel"]  # no temp folders left


def test_missing_image_names_row_and_path_and_leaves_nothing(tmp_path):
    records = make_catalog(tmp_path / "cat", 4)
    rows = make_pairs(tmp_path / "p.jsonl", tmp_path / "cat", records, 5)
    victim = tmp_path / "cat" / rows[2]["image_2"]["path"]
    # keep the files rows 0-1 need; remove one only row 2 uses as image_2
    assert all(victim.name not in (r["image_1"]["path"], r["image_2"]["path"]) for r in rows[:2])
    victim.unlink()
    with pytest.raises(InputError) as info:
        build_release([tmp_path / "p.jsonl"], tmp_path / "out", progress=False)
    message = str(info.value)
    assert "row 3" in message and rows[2]["id"] in message and str(victim) in message and "image_2" in message
    assert not (tmp_path / "out").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_bad_inputs_are_refused_clearly(tmp_path):
    records = make_catalog(tmp_path / "cat", 4)
    make_pairs(tmp_path / "a.jsonl", tmp_path / "cat", records, 3)
    make_pairs(tmp_path / "b.jsonl", tmp_path / "cat", records, 3, kind="association_chains")
    with pytest.raises(InputError, match="mix kinds"):
        build_release([tmp_path / "a.jsonl", tmp_path / "b.jsonl"], tmp_path / "out", progress=False)
    (tmp_path / "nometa.jsonl").write_text((tmp_path / "a.jsonl").read_text())
    with pytest.raises(InputError, match="no sidecar"):
        build_release([tmp_path / "nometa.jsonl"], tmp_path / "out", progress=False)
    rows = list(read_jsonl(tmp_path / "a.jsonl"))
    rows[1]["answer"] = "Z"
    rewrite_pairs(tmp_path / "a.jsonl", rows)
    with pytest.raises(SchemaError, match=r"row 2 .*answer 'Z'"):
        build_release([tmp_path / "a.jsonl"], tmp_path / "out", progress=False)
    make_pairs(tmp_path / "first.jsonl", tmp_path / "cat", records, 3)
    make_pairs(tmp_path / "again.jsonl", tmp_path / "cat", records, 2)
    with pytest.raises(
        SchemaError, match="again.jsonl, row 1 .*example id 'main-00000000' is already used by .*first.jsonl, row 1"
    ):
        build_release([tmp_path / "first.jsonl", tmp_path / "again.jsonl"], tmp_path / "out", progress=False)
    (tmp_path / "empty.jsonl").write_text("")
    (tmp_path / "empty.jsonl.meta.json").write_text(
        json.dumps({"kind": "common_o_pairs", "seed": 0, "split": "main", "count": 0})
    )
    with pytest.raises(InputError, match="Split 'main' has no rows"):
        build_release([tmp_path / "empty.jsonl"], tmp_path / "out", progress=False)
    with pytest.raises(InputError, match="license"):
        build_release([tmp_path / "a.jsonl"], tmp_path / "out", license="Not A License", progress=False)
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_an_options_record_and_keywords_build_the_same_release(tmp_path):
    records = make_catalog(tmp_path / "cat", 4)
    pairs = tmp_path / "a.jsonl"
    make_pairs(pairs, tmp_path / "cat", records, 3)
    options = ReleaseOptions(
        name="Same", version="1.2.0", license="cc-by-4.0", max_shard_bytes=parse_size("4KB"), progress=False
    )
    first = build_release([pairs], tmp_path / "rel", options)
    recorded = json.loads((tmp_path / "rel" / "manifest.json").read_text())["config"]
    assert not first.reused and len(first.splits["main"]["files"]) > 1  # the small shard size was applied
    assert {k: recorded[k] for k in ("name", "version", "license", "max_shard_bytes")} == {
        "name": "Same",
        "version": "1.2.0",
        "license": "cc-by-4.0",
        "max_shard_bytes": 4000,
    }
    again = build_release(
        [pairs],
        tmp_path / "rel",
        name="Same",
        version="1.2.0",
        license="cc-by-4.0",
        max_shard_bytes=parse_size("4KB"),
        progress=False,
    )
    assert again.reused  # the same options as keywords: the same build, kept
    changed = build_release(
        [pairs], tmp_path / "rel", options, version="1.2.1", overwrite=True
    )  # keywords change fields
    manifest = json.loads((tmp_path / "rel" / "manifest.json").read_text())
    assert not changed.reused and (manifest["name"], manifest["version"]) == ("Same", "1.2.1")
    build_release([pairs], tmp_path / "Folder Title", ReleaseOptions(name="", progress=False))
    assert json.loads((tmp_path / "Folder Title" / "manifest.json").read_text())["name"] == "Folder Title"
    with pytest.raises(TypeError, match="unknown release option.*nme; the options are name, version, license"):
        build_release([pairs], tmp_path / "other", nme="typo")
    with pytest.raises(InputError, match="X.Y.Z"):  # refused when the record is made, before any input is read
        ReleaseOptions(version="1.0")
    assert not (tmp_path / "other").exists()


def test_shard_writer_empty_split_abort_and_overwrite(tmp_path):
    features = common_o_features(provenance=False)
    with ShardWriter(tmp_path / "data", "empty", features) as writer:
        pass
    assert [s.path.name for s in writer.shards] == ["empty-00000-of-00001.parquet"]
    assert pq.read_table(writer.shards[0].path).num_rows == 0
    with pytest.raises(InputError, match="already holds shards"):
        ShardWriter(tmp_path / "data", "empty", features)
    with pytest.raises(SchemaError, match="missing"):
        with ShardWriter(tmp_path / "data", "other", features) as writer:
            writer.write({"image_1": b"x"})
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == ["empty-00000-of-00001.parquet"]
    with pytest.raises(InputError, match="not a size"):
        parse_size("lots")
    assert parse_size("64KiB") == 65536 and parse_size("1.5MB") == 1_500_000


@pytest.mark.slow
def test_cli_release_build(tiny, tmp_path):
    from typer.testing import CliRunner

    from commonlink.cli import app

    runner = CliRunner()
    out = tmp_path / "cli_rel"
    res = runner.invoke(
        app,
        [
            "release",
            "build",
            str(tiny["base"] / "challenge.jsonl"),
            "--out",
            str(out),
            "--no-progress",
            "--max-shard-size",
            "4KB",
            "--name",
            "CLI build",
        ],
    )
    assert res.exit_code == 0, res.output
    assert "challenge" in res.output and (out / "manifest.json").is_file()
    assert json.loads((out / "manifest.json").read_text())["parts"]["challenge"]["rows"] == 8
    res = runner.invoke(app, ["release", "build", str(tmp_path / "missing.jsonl"), "--out", str(tmp_path / "x")])
    assert res.exit_code == 1 and "not found" in res.output


def test_image_paths_cannot_escape_their_catalog(tmp_path):
    from commonlink.kinds.common_o.release import CatalogImageReader

    records = make_catalog(tmp_path / "cat", 2)
    outside = tmp_path / "secret.jpg"
    outside.write_bytes(b"outside")
    (tmp_path / "cat" / "images" / "link.jpg").symlink_to(outside)
    (tmp_path / "cat" / "images" / "inner.jpg").symlink_to(tmp_path / "cat" / records[0].path)
    reader = CatalogImageReader()
    catalog = str(tmp_path / "cat")
    assert (
        reader.read(catalog, records[1].path, what="row 1: image_1")
        == (tmp_path / "cat" / records[1].path).read_bytes()
    )
    assert (
        reader.read(catalog, "images/inner.jpg", what="row 1: image_1")
        == (tmp_path / "cat" / records[0].path).read_bytes()
    )
    with pytest.raises(InputError, match="row 2: image_2 path.*escapes"):
        reader.read(catalog, "images/link.jpg", what="row 2: image_2")
    with pytest.raises(InputError, match="escapes"):
        reader.read(catalog, "../secret.jpg", what="row 3: image_1")
    with pytest.raises(InputError, match="absolute"):
        reader.read(catalog, str(outside), what="row 4: image_1")


def test_shard_cap_holds_with_long_text_columns(tmp_path):
    """Shard sizes count the text columns too (measured per row group), not only the image bytes."""
    from datasets import Features, Value
    from datasets import Image as ImageFeature

    features = Features({"image": ImageFeature(), "text": Value("string"), "n": Value("int64")})
    cap = 40_000
    with ShardWriter(tmp_path, "main", features, max_shard_bytes=cap, row_group_rows=4) as writer:
        for i in range(60):
            writer.write({"image": {"bytes": bytes([i % 256]) * 300, "path": f"{i}.png"}, "text": "x" * 2_000, "n": i})
    shards = writer.shards
    assert len(shards) >= 3  # 60 rows of ~2.3 KB do not fit in 40 KB without the text being counted
    assert sum(s.rows for s in shards) == 60
    row = 300 + 2_000 + 8
    for shard in shards:
        assert shard.data_bytes <= cap + 4 * row  # at most one row group of estimate error past the cap


@pytest.mark.slow
def test_files_sampled_with_different_seeds_leave_no_local_paths_in_card_or_manifest(tmp_path):
    """The seed of each input is recorded by file name: the card and manifest get published."""
    records = make_catalog(tmp_path / "cat", 6)
    make_pairs(tmp_path / "main.jsonl", tmp_path / "cat", records, 4, seed=3)
    make_pairs(tmp_path / "challenge.jsonl", tmp_path / "cat", records, 4, split="challenge", seed=9)
    out = tmp_path / "rel"
    build_release([tmp_path / "main.jsonl", tmp_path / "challenge.jsonl"], out, progress=False)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["seed"] == {"main.jsonl": 3, "challenge.jsonl": 9}
    for name in ("README.md", "manifest.json"):
        assert str(tmp_path) not in (out / name).read_text(), name


def test_duplicate_ids_error_gives_a_fix_that_works(tmp_path):
    """`commonlink pairs` numbers ids {split}-{index} whatever the seed, so 'use other seeds' cannot help."""
    records = make_catalog(tmp_path / "cat", 6)
    make_pairs(tmp_path / "first.jsonl", tmp_path / "cat", records, 3, seed=1)
    make_pairs(tmp_path / "again.jsonl", tmp_path / "cat", records, 2, seed=2)
    with pytest.raises(SchemaError) as err:
        build_release([tmp_path / "first.jsonl", tmp_path / "again.jsonl"], tmp_path / "out", progress=False)
    assert "or seeds" not in err.value.fix and "--count" in err.value.fix


def test_image_changed_after_sampling_is_refused(tmp_path):
    records = make_catalog(tmp_path / "cat", 4)
    rows = make_pairs(tmp_path / "main.jsonl", tmp_path / "cat", records, 3)
    for row in rows:  # what `commonlink pairs` records for each image
        for key in ("image_1", "image_2"):
            row[key]["sha256"] = next(r.sha256 for r in records if r.id == row[key]["id"])
    rewrite_pairs(tmp_path / "main.jsonl", rows)
    Image.new("RGB", (32, 24), (1, 2, 3)).save(tmp_path / "cat" / records[1].path, "JPEG")  # edited after sampling
    with pytest.raises(SchemaError, match="changed after the pairs were sampled"):
        build_release([tmp_path / "main.jsonl"], tmp_path / "rel", progress=False)
    assert not (tmp_path / "rel").exists()


# Shard bytes of a fixed build, recorded with the toolkit before its restructure (commit ffd0216): a change in
# code layout must not change one byte of a release. Encoders decide the bytes too, so the check runs only
# with the pyarrow and Pillow it was recorded with. Re-recorded in issue 17, when image bytes stopped going
# through the codec a second time (the only change: with the old single codec the writer still reproduces the
# recorded bytes, GOLDEN_SHARDS_ONE_CODEC, checked in tests/test_shards.py; reads are equal, same file).
GOLDEN_SHARDS = {
    "data/challenge-00000-of-00001.parquet": "396d77ed71e5e7d7d75eba0d07f78e0555fde505cc6e2cb6eecdc8c4f876a139",
    "data/main-00000-of-00001.parquet": "cb050fb19b96fdbd25d7167ed9ab7a219901a67e8da7a00d7ac0bab51713383f",
}
GOLDEN_SHARDS_ONE_CODEC = {
    "data/challenge-00000-of-00001.parquet": "d753656402ae2ee9815ba019e7bd2f6ef0dac481ec847e9065c007724c777134",
    "data/main-00000-of-00001.parquet": "b9666224d28ebb38c72cd318420d964f769f31701e3d6e74efa890e97ee87344",
}
GOLDEN_ENCODERS = {"pyarrow": "26.0.1", "PIL": "13.0.0"}


@pytest.mark.slow
def test_release_shard_bytes_are_unchanged_from_the_recorded_build(tmp_path):
    import PIL
    import pyarrow

    found = {"pyarrow": pyarrow.__version__, "PIL": PIL.__version__}
    if found != GOLDEN_ENCODERS:
        pytest.skip(f"golden shards were recorded with {GOLDEN_ENCODERS}, this environment has {found}")
    main = make_catalog(tmp_path / "cat-real", 12)
    synthetic = make_catalog(tmp_path / "cat-syn", 12, source="synthetic", fmt="PNG", size=(40, 30))
    make_pairs(tmp_path / "main.jsonl", tmp_path / "cat-real", main, 10, split="main")
    make_pairs(tmp_path / "challenge.jsonl", tmp_path / "cat-syn", synthetic, 7, split="challenge")
    result = build_release(
        [tmp_path / "main.jsonl", tmp_path / "challenge.jsonl"], tmp_path / "release", progress=False
    )
    shards = {path: info["sha256"] for path, info in result.files.items() if path.startswith("data/")}
    assert shards == GOLDEN_SHARDS
