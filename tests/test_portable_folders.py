"""Portable work folders: pairs, chain and image-table files name catalogs relative to themselves.

Copying a work folder (catalogs + pairs + chains) elsewhere and building releases from the copy gives the same
releases; files written with absolute catalog paths still read; ``--catalog-root`` relocates the catalogs; a
missing catalog is an error naming the path looked for and the option.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from commonlink.cli import app
from commonlink.errors import InputError, SchemaError
from commonlink.fileio import read_jsonl, write_jsonl
from commonlink.formats.association import read_image_table
from commonlink.formats.catalog_refs import (
    CatalogResolver,
    catalog_location,
    catalog_reference,
    origin_for_file,
    resolve_catalog_reference,
)
from commonlink.formats.meta import read_meta, write_meta
from tests.fixtures.catalogs import family_scenes, write_scene_catalog
from tests.fixtures.tiny_chains import CONCEPT_POOLS, chains_command, write_concept_catalog

runner = CliRunner()


def _label_catalog(folder: Path) -> None:
    """A catalog whose objects serve as chain concepts (metal / painted / furry pools, wooden negatives)."""
    write_concept_catalog(folder, 16, pools=(*CONCEPT_POOLS, ("wooden",)))


def _invoke(*args: str):
    result = runner.invoke(app, [str(a) for a in args])
    return result


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    """work/catalogs/{real,labels}, work/pairs/main.jsonl and work/chains/, all made with the CLI."""
    work = tmp_path_factory.mktemp("portable") / "work"
    write_scene_catalog(work / "catalogs" / "real", "real", family_scenes(12, seed=1), views=2)
    _label_catalog(work / "catalogs" / "labels")
    made = _invoke(
        "pairs", work / "catalogs" / "real", "--out", work / "pairs" / "main.jsonl", "--count", "8", "--seed", "2"
    )
    assert made.exit_code == 0, made.output
    made = _invoke(*chains_command(work / "catalogs" / "labels", work / "chains", seed=5))
    assert made.exit_code == 0, made.output
    return work


def _build(inputs: list[Path], out: Path, *extra: str):
    return _invoke("release", "build", *inputs, "--out", out, "--no-progress", *extra)


def _data_files(release: Path) -> dict:
    manifest = json.loads((release / "manifest.json").read_text())
    return {name: info["sha256"] for name, info in manifest["files"].items() if name.endswith(".parquet")}


def test_files_name_catalogs_relative_to_themselves(work):
    rows = list(read_jsonl(work / "pairs" / "main.jsonl"))
    assert {row[key]["catalog"] for row in rows for key in ("image_1", "image_2")} == {"../catalogs/real"}
    meta = read_meta(work / "pairs" / "main.jsonl")
    assert meta["catalogs"] == ["../catalogs/real"] and list(meta["catalog_sha256"]) == ["../catalogs/real"]
    table = list(read_jsonl(work / "chains" / "images.jsonl"))
    assert {row["origin"]["catalog"] for row in table} == {"../catalogs/labels"}
    assert all(row["origin"]["path"].startswith("images/") for row in table)
    text = (work / "pairs" / "main.jsonl").read_text() + (work / "chains" / "images.jsonl").read_text()
    assert str(work) not in text  # no absolute path of this machine left in the files
    # the sampler still recognises its own output: a rerun keeps the file
    again = _invoke(
        "pairs", work / "catalogs" / "real", "--out", work / "pairs" / "main.jsonl", "--count", "8", "--seed", "2"
    )
    assert again.exit_code == 0 and "kept it" in again.output, again.output


def test_a_copied_work_folder_builds_the_same_releases(work, tmp_path):
    before_pairs, before_chains = tmp_path / "before-pairs", tmp_path / "before-chains"
    assert _build([work / "pairs" / "main.jsonl"], before_pairs).exit_code == 0
    chain_files = sorted((work / "chains").glob("*.jsonl"))
    assert _build(chain_files, before_chains).exit_code == 0

    # Copy the whole folder elsewhere, then move the original out of the way: nothing may still point at it.
    copy = tmp_path / "elsewhere" / "copy"
    shutil.copytree(work, copy)
    hidden = work.with_name("work-moved-away")
    work.rename(hidden)
    try:
        pairs = _build([copy / "pairs" / "main.jsonl"], tmp_path / "after-pairs")
        assert pairs.exit_code == 0, pairs.output
        chains = _build(sorted((copy / "chains").glob("*.jsonl")), tmp_path / "after-chains")
        assert chains.exit_code == 0, chains.output
        # the same parquet bytes as from the original folder
        assert _data_files(tmp_path / "after-pairs") == _data_files(before_pairs)
        assert _data_files(tmp_path / "after-chains") == _data_files(before_chains)
        # other readers of chain files follow the copy too
        review = _invoke("chains", "review", copy / "chains", "--out", tmp_path / "review")
        assert review.exit_code == 0, review.output
    finally:
        hidden.rename(work)


def test_catalog_root_relocates_and_the_missing_catalog_error_names_path_and_option(work, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(work / "pairs", copy / "pairs")
    shutil.copytree(work / "chains", copy / "chains")
    shutil.copytree(work / "catalogs", tmp_path / "shared" / "cats")  # the catalogs live somewhere else
    missing = _build([copy / "pairs" / "main.jsonl"], tmp_path / "r0")
    assert missing.exit_code == 1
    message = " ".join(missing.output.split())
    assert str(copy / "catalogs" / "real") in message and "--catalog-root" in message, message
    assert "../catalogs/real" in message

    root = tmp_path / "shared" / "cats"
    assert _build([copy / "pairs" / "main.jsonl"], tmp_path / "r1", "--catalog-root", root).exit_code == 0
    chains = _build(sorted((copy / "chains").glob("*.jsonl")), tmp_path / "r2", "--catalog-root", root)
    assert chains.exit_code == 0, chains.output

    wrong = _build([copy / "pairs" / "main.jsonl"], tmp_path / "r3", "--catalog-root", tmp_path)
    assert wrong.exit_code == 1
    message = " ".join(wrong.output.split())
    assert str(tmp_path / "real") in message and "--catalog-root" in message, message


def test_every_reader_of_chain_files_takes_catalog_root(work, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(work / "chains", copy / "chains")
    shutil.copytree(work / "catalogs", tmp_path / "shared" / "cats")
    root = str(tmp_path / "shared" / "cats")
    run = tmp_path / "run"
    assoc = ["eval", "association", "--data", copy / "chains", "--config", "synchronous", "--model", "random"]
    missing = _invoke(*assoc, "--out", tmp_path / "run-missing", "--quiet")
    assert missing.exit_code == 1
    message = " ".join(missing.output.split())
    assert str(copy / "catalogs" / "labels") in message and "--catalog-root" in message, message
    scored = _invoke(*assoc, "--out", run, "--quiet", "--no-report", "--catalog-root", root)
    assert scored.exit_code == 0, scored.output
    page = _invoke("eval", "report", run, "--out", tmp_path / "page.html", "--quiet", "--catalog-root", root)
    assert page.exit_code == 0, page.output
    assert (tmp_path / "page.html").is_file()
    review = _invoke("chains", "review", copy / "chains", "--out", tmp_path / "review", "--catalog-root", root)
    assert review.exit_code == 0, review.output
    verify = _invoke(
        "chains",
        "verify",
        copy / "chains",
        "--out",
        tmp_path / "verified",
        "--decisions",
        tmp_path / "review" / "decisions.csv",
        "--catalog-root",
        root,
    )
    assert verify.exit_code == 0, verify.output
    release = tmp_path / "common-o"
    assert _build([work / "pairs" / "main.jsonl"], release).exit_code == 0
    exported = _invoke(
        "export",
        "vlmevalkit",
        "--out",
        tmp_path / "vlm",
        "--data",
        release,
        "--split",
        "main",
        "--association",
        copy / "chains",
        "--catalog-root",
        root,
    )
    assert exported.exit_code == 0, exported.output
    assert (tmp_path / "vlm" / "CommonO_AssocSingleStep.tsv").is_file()
    # the verified table names the catalog relative to its own folder
    table = list(read_jsonl(tmp_path / "verified" / "images.jsonl"))
    assert {row["origin"]["catalog"] for row in table} == {"../shared/cats/labels"}


def test_files_with_absolute_catalog_paths_still_read(work, tmp_path):
    """Files written before the rule: absolute catalog in pairs rows and sidecar, absolute image paths in the table."""
    real, labels = (work / "catalogs" / "real").resolve(), (work / "catalogs" / "labels").resolve()
    old = tmp_path / "old"
    old.mkdir()
    rows = list(read_jsonl(work / "pairs" / "main.jsonl"))
    for row in rows:
        for key in ("image_1", "image_2"):
            row[key]["catalog"] = str(real)
    write_jsonl(old / "main.jsonl", rows)
    meta = {k: v for k, v in read_meta(work / "pairs" / "main.jsonl").items() if k not in ("sha256", "rows")}
    write_meta(old / "main.jsonl", {**meta, "catalogs": [str(real)], "catalog_sha256": {str(real): "x"}})
    built = _build([old / "main.jsonl"], tmp_path / "r")
    assert built.exit_code == 0, built.output
    assert _data_files(tmp_path / "r") == _data_files(_fresh(work, tmp_path))

    # an image table as older builds wrote it: absolute catalog and image paths
    shutil.copytree(work / "chains", old / "chains")
    table = list(read_jsonl(old / "chains" / "images.jsonl"))
    for row in table:
        row["origin"] = {**row["origin"], "catalog": str(labels), "path": str(labels / row["origin"]["path"])}
    write_jsonl(old / "chains" / "images.jsonl", table)
    chain_meta = json.loads((old / "chains" / "synchronous.jsonl.meta.json").read_text())
    chain_meta.pop("images_sha256", None)
    images = read_image_table(old / "chains" / "synchronous.jsonl", chain_meta)
    assert [img.origin["path"] for img in images] == [
        str(labels / r["origin"]["path"]) for r in read_jsonl(work / "chains" / "images.jsonl")
    ]
    # one naming no catalog at all (a bare absolute path) is refused since issue 38: nothing outside a catalog is read
    for row in table:
        row["origin"] = {"type": "file", "path": row["origin"]["path"], "sha256": row["origin"].get("sha256")}
    write_jsonl(old / "chains" / "images.jsonl", table)
    with pytest.raises(SchemaError, match="outside every catalog"):
        read_image_table(old / "chains" / "synchronous.jsonl", chain_meta)


def _fresh(work: Path, tmp_path: Path) -> Path:
    out = tmp_path / "fresh"
    assert _build([work / "pairs" / "main.jsonl"], out).exit_code == 0
    return out


def test_reference_rule(tmp_path):
    catalog = tmp_path / "catalogs" / "real"
    write_scene_catalog(catalog, "real", family_scenes(2, seed=0), views=1)
    pairs = tmp_path / "runs" / "a" / "pairs.jsonl"
    assert catalog_reference(catalog, pairs) == "../../catalogs/real"
    assert catalog_reference(catalog, tmp_path / "pairs.jsonl") == "catalogs/real"
    assert catalog_location("../../catalogs/real", pairs) == catalog
    assert catalog_location(str(catalog), pairs) == catalog  # absolute: as stored
    assert catalog_location("../../catalogs/real", pairs, tmp_path / "x") == tmp_path / "x" / "real"
    assert catalog_location(str(catalog), pairs, tmp_path / "x") == tmp_path / "x" / "real"
    assert resolve_catalog_reference("../../catalogs/real", pairs) == catalog
    with pytest.raises(InputError) as caught:
        resolve_catalog_reference("../catalogs/real", pairs)
    assert str(tmp_path / "runs" / "catalogs" / "real") in caught.value.problem and "--catalog-root" in caught.value.fix
    # an image-table origin goes out relative and comes back absolute
    origin = {"type": "file", "catalog": str(catalog), "path": str(catalog / "images" / "0.png")}
    table = tmp_path / "chains" / "images.jsonl"
    stored = origin_for_file(origin, table)
    assert stored == {"type": "file", "catalog": "../catalogs/real", "path": "images/0.png"}
    assert CatalogResolver(table).origin(stored) == origin
    outside = {"type": "file", "catalog": str(catalog), "path": str(tmp_path / "elsewhere.png")}
    assert origin_for_file(outside, table) == {"type": "file", "path": str(tmp_path / "elsewhere.png")}
    other = {"type": "file", "path": "/data/ocl/0.jpg"}  # not a catalog image: kept as it is
    assert origin_for_file(other, table) == other and CatalogResolver(table).origin(other) == other


def test_manifest_folder_images_are_portable_too(tmp_path):
    """A chain source's image folder with a manifest (not a catalog: no catalog.jsonl) is named relative to the
    image table as well, and read back wherever the folder now is."""
    folder = tmp_path / "work" / "photos"
    (folder / "sub").mkdir(parents=True)
    origin = {
        "type": "file",
        "path": str(folder / "sub" / "a.jpg"),
        "catalog": str(folder),
        "relative": "sub/a.jpg",
        "sha256": "ab",
    }
    table = tmp_path / "work" / "chains" / "images.jsonl"
    stored = origin_for_file(origin, table)
    assert stored == {
        "type": "file",
        "path": "sub/a.jpg",
        "catalog": "../photos",
        "relative": "sub/a.jpg",
        "sha256": "ab",
    }
    assert CatalogResolver(table).origin(stored) == origin  # the folder need not be a catalog
    moved = tmp_path / "elsewhere" / "photos"
    moved.mkdir(parents=True)
    assert CatalogResolver(table, moved.parent).origin(stored)["path"] == str(moved / "sub" / "a.jpg")
    with pytest.raises(InputError) as caught:
        CatalogResolver(tmp_path / "other" / "chains" / "images.jsonl").origin(stored)
    assert str(tmp_path / "other" / "photos") in caught.value.problem and "--catalog-root" in caught.value.fix
