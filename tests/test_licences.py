"""Licences and attribution as data: manifest columns -> catalog -> release columns, card and the licence check."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from PIL import Image

from commonlink.catalog.ingest import ingest_photos
from commonlink.catalog.labels import read_manifest
from commonlink.errors import InputError, SchemaError
from commonlink.fileio import atomic_write_json
from commonlink.formats.catalog import read_catalog, write_catalog
from commonlink.formats.licences import (
    LICENCES,
    check_licence_id,
    incompatibility,
    licence_ids_in_text,
    normalise_licence,
)
from commonlink.kinds.common_o.format import common_o_features
from commonlink.release.build import build_release
from commonlink.release.card_info import card_info_template
from commonlink.synth.assets import load_assets
from tests.fixtures.catalogs import write_rotating_catalog, write_tiny_pairs

CREDIT_COLUMNS = [f"image_{n}_{f}" for n in (1, 2) for f in ("license", "author", "source_url")]


# ---------------------------------------------------------------------------------------------- the table
def test_ids_are_normalised_and_unknown_ones_list_the_accepted():
    assert normalise_licence("CC-BY 4.0") == "cc-by-4.0"
    assert normalise_licence(" Apache-2.0 ") == "apache-2.0"
    assert normalise_licence("CC0") == "cc0-1.0"
    assert normalise_licence("cc-by-5.0") is None
    with pytest.raises(InputError, match=r"unknown licence 'gpl-ish'") as err:
        check_licence_id("gpl-ish", where="m.csv, line 3")
    assert "cc-by-nc-4.0" in err.value.fix and "cc0-1.0" in err.value.fix and "'other'" in err.value.fix


@pytest.mark.parametrize(
    ("image", "release", "allowed"),
    [
        ("cc-by-nc-4.0", "cc-by-4.0", False),  # non-commercial photo in a release allowing commercial use
        ("cc-by-nc-4.0", "cc-by-nc-4.0", True),
        ("cc-by-nc-sa-4.0", "cc-by-nc-4.0", False),  # share-alike: only its own licence
        ("cc-by-nc-sa-4.0", "cc-by-nc-sa-4.0", True),
        ("cc-by-sa-4.0", "cc-by-4.0", False),
        ("cc-by-sa-3.0", "cc-by-sa-4.0", True),  # a later version of the same licence
        ("cc-by-sa-4.0", "cc-by-sa-3.0", False),
        ("cc-by-4.0", "cc-by-nc-4.0", True),
        ("cc-by-4.0", "cc0-1.0", False),  # the credit would be lost
        ("mit", "cc-by-4.0", True),
        ("cc0-1.0", "cc0-1.0", True),
        ("cc0-1.0", "openrail", True),
        ("cc-by-4.0", "openrail", False),  # a release licence the table does not know
        ("cc-by-nd-4.0", "cc-by-nd-4.0", False),  # a benchmark adapts its images
        ("other", "cc-by-nc-4.0", False),
        ("scea", "cc-by-4.0", True),
        ("scea", "cc0-1.0", False),
    ],
)
def test_compatibility_rules(image, release, allowed):
    assert (incompatibility(image, release) is None) is allowed


def test_the_built_in_assets_licences_are_read_from_their_text():
    found = {tuple(licence_ids_in_text(asset.license)) for asset in load_assets().assets}
    assert found == {("apache-2.0",), ("zlib",), ("scea", "zlib")}  # the duck: its mesh's own SCEA licence too
    assert licence_ids_in_text("my own terms") == ["other"] and licence_ids_in_text(None) == ["other"]
    assert all(incompatibility(i, "cc-by-4.0") is None for ids in found for i in ids)


# ---------------------------------------------------------------------------------------------- manifest + ingest
def _photo(seed: int) -> Image.Image:
    blocks = (np.random.default_rng(seed).random((15, 20, 3)) * 255).astype(np.uint8)
    return Image.fromarray(blocks).resize((400, 300), Image.NEAREST)


def _photos(root: Path, n: int) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        _photo(100 + i).save(root / f"p{i}.jpg", quality=92)


OBJECTS = ["apple;mug;keys", "apple;mug;book", "mug;keys;pen", "apple;book;pen"]


def _manifest(path: Path, licences: list[str]) -> None:
    lines = ["file,objects,scene,Licence,author,source_url"]
    for i, lic in enumerate(licences):
        lines.append(f"p{i}.jpg,{OBJECTS[i % 4]},s{i},{lic},Ann Author {i % 2},https://example.org/p{i}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_manifest_columns_are_read_normalised_and_checked(tmp_path):
    path = tmp_path / "m.csv"
    _manifest(path, ["CC-BY-4.0", "cc0"])
    entries = read_manifest(path)
    assert [(e.license, e.author, e.source_url) for e in entries] == [
        ("cc-by-4.0", "Ann Author 0", "https://example.org/p0"),
        ("cc0-1.0", "Ann Author 1", "https://example.org/p1"),
    ]
    assert all(not e.extra for e in entries)  # known columns, not kept as extras
    _manifest(path, ["cc-by-4.0", "cc-by-nc-7.0"])
    with pytest.raises(InputError, match=r"m\.csv, line 3: unknown licence 'cc-by-nc-7.0'") as err:
        read_manifest(path)
    assert "cc-by-nc-4.0" in err.value.fix
    jsonl = tmp_path / "m.jsonl"
    jsonl.write_text('{"file": "a.jpg", "objects": ["apple"], "source_url": "ftp://x"}\n')
    with pytest.raises(SchemaError, match="not a web address"):
        read_manifest(jsonl)


@pytest.fixture(scope="module")
def ingested(tmp_path_factory):
    """Four photos ingested with a licence column: two cc-by-4.0, one cc0-1.0, one cc-by-nc-4.0 (p3)."""
    base = tmp_path_factory.mktemp("licences")
    _photos(base / "photos", 4)
    _manifest(base / "labels.csv", ["cc-by-4.0", "CC-BY-4.0", "cc0-1.0", "cc-by-nc-4.0"])
    report = ingest_photos(base / "photos", base / "labels.csv", base / "catalog")
    assert len(report.added) == 4
    records = read_catalog(base / "catalog")
    return base, records


def test_ingest_carries_the_credits_into_the_catalog_and_refreshes_them(ingested, tmp_path):
    base, records = ingested
    by_file = {r.extra["source_file"]: r for r in records}
    assert by_file["p1.jpg"].license == "cc-by-4.0" and by_file["p3.jpg"].license == "cc-by-nc-4.0"
    assert by_file["p0.jpg"].author == "Ann Author 0" and by_file["p2.jpg"].source_url == "https://example.org/p2"
    line = json.loads((base / "catalog" / "catalog.jsonl").read_text().splitlines()[0])
    assert {"license", "author", "source_url"} <= line.keys()
    # a licence fixed in the manifest reaches the catalog on the next run (without re-reading the photo)
    _photos(tmp_path / "photos", 2)
    _manifest(tmp_path / "m.csv", ["cc-by-4.0", "cc-by-4.0"])
    ingest_photos(tmp_path / "photos", tmp_path / "m.csv", tmp_path / "cat")
    _manifest(tmp_path / "m.csv", ["cc-by-4.0", "cc-by-sa-4.0"])
    report = ingest_photos(tmp_path / "photos", tmp_path / "m.csv", tmp_path / "cat")
    assert [u["change"] for u in report.updated] == ["license"]
    assert sorted(r.license for r in read_catalog(tmp_path / "cat")) == ["cc-by-4.0", "cc-by-sa-4.0"]


def test_a_catalog_without_credits_keeps_its_bytes(tmp_path):
    records = write_rotating_catalog(tmp_path / "cat", 2)
    assert all(
        k not in json.loads(line)
        for line in (tmp_path / "cat" / "catalog.jsonl").read_text().splitlines()
        for k in ("license", "author", "source_url")
    )
    records[0].license = "bogus"
    write_catalog(tmp_path / "cat", records)
    with pytest.raises(SchemaError, match=r"line 1: license 'bogus' is not a licence id"):
        read_catalog(tmp_path / "cat")


# ---------------------------------------------------------------------------------------------- release
def _pairs(base: Path, catalog: Path, records, n: int) -> Path:
    write_tiny_pairs(base / "main.jsonl", catalog, records, n)
    return base / "main.jsonl"


def test_an_incompatible_photo_is_refused_naming_the_file(ingested, tmp_path):
    base, records = ingested
    pairs = _pairs(tmp_path, base / "catalog", records, 6)
    with pytest.raises(InputError) as err:
        build_release([pairs], tmp_path / "rel", license="cc-by-4.0", progress=False)
    assert "cc-by-nc-4.0: non-commercial" in err.value.problem and "p3.jpg" in err.value.problem
    assert "p0.jpg" not in err.value.problem  # the compatible photos are not named
    assert "--licence-check warn" in err.value.fix
    assert not (tmp_path / "rel").exists()
    # a cc0 release cannot carry the cc-by photos either: they are named, counted
    with pytest.raises(InputError, match=r"3 image\(s\).*attribution.*p0\.jpg, p1\.jpg"):
        build_release([pairs], tmp_path / "rel", license="cc0-1.0", progress=False)
    # --licence-check warn builds and lists them
    result = build_release([pairs], tmp_path / "rel", license="cc-by-4.0", licence_check="warn", progress=False)
    assert any("p3.jpg" in note and note.startswith("--licence-check warn") for note in result.notes)
    assert json.loads((tmp_path / "rel" / "manifest.json").read_text())["config"]["licence_check"] == "warn"


@pytest.fixture(scope="module")
def released(ingested):
    base, records = ingested
    pairs = _pairs(base, base / "catalog", records, 6)
    result = build_release([pairs], base / "rel", license="cc-by-nc-4.0", progress=False)
    return base, records, result


def test_a_release_of_licensed_photos_has_credit_columns_and_lists_them_on_its_card(released):
    base, records, result = released
    assert not any("record no licence" in note for note in result.notes)
    table = pq.read_table(base / "rel" / "data" / "main-00000-of-00001.parquet")
    assert table.schema.names == [*common_o_features(), *CREDIT_COLUMNS]  # published columns unchanged, in front
    by_id = {r.id: r for r in records}
    for row in table.drop_columns(["image_1", "image_2"]).to_pylist():
        for n in (1, 2):
            record = by_id[row[f"image_{n}_id"]]
            assert (row[f"image_{n}_license"], row[f"image_{n}_author"], row[f"image_{n}_source_url"]) == (
                record.license,
                record.author,
                record.source_url,
            )
    card = (base / "rel" / "README.md").read_text()
    assert "## Image licences and attribution" in card
    section = card.split("## Image licences and attribution")[1].split("\n## ")[0]
    assert "| cc-by-4.0 | Creative Commons BY 4.0 | 2 |" in section
    assert "| cc0-1.0 |" in section and "| cc-by-nc-4.0 |" in section
    assert "Ann Author 0 (2)" in section and "`image_1_license`" in section
    assert "Under which licences are the individual images" in card and "Photos by licence: 2 under cc-by-4.0" in card
    assert "| image_2_author | Value('string') | who to credit for image 2" in card


@pytest.mark.slow
def test_load_dataset_sees_the_credit_columns(released):
    import datasets

    base, records, _ = released
    ds = datasets.load_dataset(str(base / "rel"), cache_dir=str(base / "hf_cache"))
    assert set(CREDIT_COLUMNS) <= set(ds["main"].column_names)
    licences = {r.id: r.license for r in records}
    assert [row["image_1_license"] for row in ds["main"]] == [licences[i] for i in ds["main"]["image_1_id"]]


def test_a_release_without_credits_keeps_its_columns_and_warns_about_photos_without_a_licence(tmp_path):
    records = write_rotating_catalog(tmp_path / "catalog", 6)
    pairs = _pairs(tmp_path, tmp_path / "catalog", records, 4)
    result = build_release([pairs], tmp_path / "rel", license="cc-by-4.0", progress=False)
    assert pq.read_schema(tmp_path / "rel" / "data" / "main-00000-of-00001.parquet").names == list(common_o_features())
    (note,) = [n for n in result.notes if "record no licence" in n]
    assert note.startswith("5 real photo(s) record no licence (images/img0000.jpg, images/img0001.jpg")  # distinct
    card = (tmp_path / "rel" / "README.md").read_text()
    assert "record no licence: the build did not know" in card
    assert "image_1_license" not in card


def _synthetic_catalog(root: Path, by_object: dict | None, counts: dict | None = None):
    records = write_rotating_catalog(root, 6, source="synthetic", fmt="PNG")
    config = {"asset_licenses": counts or {}}
    if by_object is not None:
        config["asset_license_by_object"] = by_object
    atomic_write_json(root / "synth_config.json", config)
    return records


def test_synthetic_assets_are_checked_against_the_release_licence(tmp_path):
    names = ["apple", "keys", "mug", "book", "pen", "duck", "ball", "cup"]
    by_object = {name: "Apache-2.0 (own model)" for name in names}
    by_object["duck"] = "zlib (the wheel); the duck model itself: SCEA Shared Source License 1.0"
    by_object["ball"] = "CC-BY-NC-4.0 (a scan from a museum)"
    records = _synthetic_catalog(tmp_path / "catalog", by_object)
    pairs = _pairs(tmp_path, tmp_path / "catalog", records, 5)
    with pytest.raises(InputError, match=r"cc-by-nc-4.0: non-commercial.*asset 'ball' of catalog") as err:
        build_release([pairs], tmp_path / "rel", license="cc-by-4.0", progress=False)
    assert "duck" not in err.value.problem  # SCEA renders may go under cc-by-4.0 (formats/licences.py)
    with pytest.raises(InputError, match=r"scea: attribution.*asset 'duck'"):
        build_release([pairs], tmp_path / "rel", license="cc0-1.0", progress=False)
    result = build_release([pairs], tmp_path / "rel", license="cc-by-nc-4.0", progress=False)
    assert not result.notes  # renders: no photo licence to record
    card = (tmp_path / "rel" / "README.md").read_text(encoding="utf-8")
    answer = card.split("whom must a user of them credit (attribution)?**", 1)[1].split("**", 1)[0]
    assert "synthetic renders are released under cc-by-nc-4.0" in answer and "None." not in answer
    # a catalog that counts its asset licences only (made before per-object ones): every licence counted is checked
    records = _synthetic_catalog(tmp_path / "old", None, {"my own terms": 2, "zlib (x)": 1})
    write_tiny_pairs(tmp_path / "old.jsonl", tmp_path / "old", records, 3)
    with pytest.raises(InputError, match=r"other \(asset licence 'my own terms'\): unknown"):
        build_release([tmp_path / "old.jsonl"], tmp_path / "rel2", license="cc-by-nc-4.0", progress=False)


def test_card_info_asks_about_image_licences():
    assert "\nimage_licences:" in card_info_template()
    assert "cc-by-nc-4.0" in LICENCES and "other" in LICENCES


def test_an_association_release_carries_its_photos_credits_and_checks_them(tmp_path):
    from typer.testing import CliRunner

    from commonlink.cli import app
    from tests.fixtures.tiny_chains import chains_command, write_concept_catalog

    records = write_concept_catalog(tmp_path / "catalog", 12, seed=300)
    for i, record in enumerate(records):
        record.license, record.author = ("cc-by-nc-4.0" if i == 0 else "cc-by-4.0"), f"Photographer {i % 3}"
    write_catalog(tmp_path / "catalog", records)
    built = CliRunner().invoke(app, chains_command(tmp_path / "catalog", tmp_path / "chains", seed=3))
    assert built.exit_code == 0, built.output
    chain_files = sorted((tmp_path / "chains").glob("*.jsonl"))
    used = {json.loads(line)["id"] for line in (tmp_path / "chains" / "images.jsonl").read_text().splitlines()}
    if "im00" in used:  # the non-commercial photo is in the release: refused under cc-by-4.0
        with pytest.raises(InputError, match=r"cc-by-nc-4.0: non-commercial.*images/0\.png"):
            build_release(chain_files, tmp_path / "refused", license="cc-by-4.0", progress=False)
    build_release(chain_files, tmp_path / "rel", license="cc-by-nc-4.0", progress=False)
    table = pq.read_table(next((tmp_path / "rel" / "images").glob("*.parquet")))
    assert table.schema.names[-3:] == ["license", "author", "source_url"]
    by_id = {r.id: r for r in records}
    for row in table.drop_columns(["image"]).to_pylist():
        assert (row["license"], row["author"]) == (by_id[row["id"]].license, by_id[row["id"]].author)
    card = (tmp_path / "rel" / "README.md").read_text()
    assert "## Image licences and attribution" in card and "`images.license`" in card


def test_a_card_rewritten_from_the_manifest_keeps_the_credits_and_the_publishers_answer(released, tmp_path):
    import shutil

    from commonlink.release.card_rebuild import rebuild_card

    base, _, _ = released
    shutil.copytree(base / "rel", tmp_path / "rel")
    rebuild_card(tmp_path / "rel", {"image_licences": "The lab's members agreed to these licences."})
    card = (tmp_path / "rel" / "README.md").read_text()
    assert "| cc-by-nc-4.0 | Creative Commons BY-NC 4.0 | 1 |" in card
    assert "Photos by licence: 2 under cc-by-4.0" in card and "agreed to these licences." in card


def test_a_licence_fixed_in_the_catalog_makes_a_new_build(tmp_path):
    records = write_rotating_catalog(tmp_path / "catalog", 4)
    for record in records:
        record.license = "cc-by-4.0"
    write_catalog(tmp_path / "catalog", records)
    pairs = _pairs(tmp_path, tmp_path / "catalog", records, 3)
    first = build_release([pairs], tmp_path / "rel", license="cc-by-4.0", progress=False)
    assert build_release([pairs], tmp_path / "rel", license="cc-by-4.0", progress=False).reused
    records[0].license = "cc-by-sa-4.0"
    write_catalog(tmp_path / "catalog", records)
    with pytest.raises(InputError, match=r"cc-by-sa-4.0: share-alike.*images/img0000\.jpg"):
        build_release([pairs], tmp_path / "rel", license="cc-by-4.0", progress=False)
    records[0].license, records[0].author = "cc-by-4.0", "Someone Else"
    write_catalog(tmp_path / "catalog", records)
    second = build_release([pairs], tmp_path / "rel", license="cc-by-4.0", overwrite=True, progress=False)
    assert not second.reused and second.files != first.files  # the new author is in the shards
