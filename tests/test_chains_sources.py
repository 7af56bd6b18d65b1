"""Chain sources: catalog, Hugging Face dataset, manifest folder, OCL/Pangea pickles, and unsafe pickles refused."""

from __future__ import annotations

import io
import json
import os
import pickle

import pytest
from PIL import Image
from typer.testing import CliRunner

from commonlink.cli import app
from commonlink.errors import InputError
from commonlink.fileio import read_jsonl, sha256_file
from commonlink.formats.association import ImageFetcher
from commonlink.formats.catalog import CatalogRecord, write_catalog
from commonlink.loaders import load_association
from commonlink.sampling.chain_sources import read_source
from commonlink.sampling.safe_pickle import UnsafePickleError, safe_load, safe_loads


def save_image(path, size=(40, 30), colour=(200, 10, 10)):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, colour).save(path)
    return path


def test_catalog_source_through_cli(tmp_path):
    catalog = tmp_path / "catalog"
    records = []
    for i in range(14):
        size = (40, 30) if i < 12 else (10, 10)  # two images under --min-pixels
        save_image(catalog / "images" / f"{i}.png", size=size, colour=(i * 15, 0, 0))
        objects = ["apple", "keys"] if i % 2 else ["apple", "mug"]
        if i % 3 == 0:
            objects = ["book"]
        records.append(
            CatalogRecord(
                id=f"id{i:02d}",
                path=f"images/{i}.png",
                objects=objects,
                source="real",
                scene_id=f"s{i}",
                width=size[0],
                height=size[1],
                sha256=sha256_file(catalog / "images" / f"{i}.png"),
            )
        )
    write_catalog(catalog, records)
    out = tmp_path / "chains"
    result = CliRunner().invoke(
        app,
        [
            "chains",
            str(catalog),
            "--out",
            str(out),
            "--min-pixels",
            "1000",
            "--concepts",
            "apple,keys",
            "--pairs",
            "apple-keys",
            "--chains",
            "2",
            "--max-steps",
            "6",
            "--single-steps",
            "2",
            "--deductions",
            "2",
            "--memory-size",
            "2",
            "--seed",
            "3",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "dropped 2 under 1,000 pixels" in result.output
    meta = json.loads((out / "synchronous.jsonl.meta.json").read_text())
    assert meta["source"]["source_type"] == "catalog" and meta["source"]["dropped_small"] == 2
    assert meta["concept_kind"] == "object" and meta["pairs"][0]["concepts"] == ["apple", "keys"]
    table = list(read_jsonl(out / "images.jsonl"))
    assert len(table) == 12 and all(row["width"] == 40 for row in table)
    chain = next(load_association(out, "synchronous"))
    assert chain.steps[0].query.image.size == (40, 30)
    # --list-concepts prints pool sizes
    listing = CliRunner().invoke(app, ["chains", str(catalog), "--list-concepts", "--min-pixels", "0"])
    assert listing.exit_code == 0 and "apple" in listing.output and "book" in listing.output


def test_hf_dataset_source_decodes_class_labels(tmp_path):
    import datasets

    names = ["run", "hit", "drive"]
    images, multi, single = [], [], []
    for i in range(10):
        buf = io.BytesIO()
        Image.new("RGB", (30 + i, 20), (i * 20, 5, 5)).save(buf, format="PNG")
        images.append({"bytes": buf.getvalue(), "path": None})
        multi.append([i % 3, (i + 1) % 3] if i % 2 else [i % 3])
        single.append(i % 3)
    features = datasets.Features(
        {
            "img": datasets.Image(),
            "acts": datasets.Sequence(datasets.ClassLabel(names=names)),
            "main": datasets.ClassLabel(names=names),
            "who": datasets.Value("string"),
        }
    )
    ds = datasets.Dataset.from_dict(
        {"img": images, "acts": multi, "main": single, "who": [f"player {i}" if i % 4 else None for i in range(10)]},
        features=features,
    )
    saved = tmp_path / "hfds"
    datasets.DatasetDict({"train": ds}).save_to_disk(str(saved))

    kept, report = read_source(str(saved), image_column="img", labels_column="acts")
    assert report.source_type == "hf" and report.read == 10 and len(kept) == 10
    by_row = {img.origin["row"]: img for img in kept}
    assert by_row[1].labels == ["hit", "drive"] and by_row[0].labels == ["run"]
    assert (by_row[3].width, by_row[3].height) == (33, 20)
    single_kept, _ = read_source(str(saved), image_column="img", labels_column="main", min_pixels=700)
    assert {img.labels[0] for img in single_kept} <= set(names) and len(single_kept) == 5  # 35x20 and up
    assert ImageFetcher().open(by_row[4].origin).size == (34, 20)
    assert all(img.name is None for img in kept)  # no --name-column: unnamed
    named, _ = read_source(str(saved), image_column="img", labels_column="acts", name_column="who")
    assert [img.name for img in named[:4]] == [None, "player 1", "player 2", "player 3"]
    with pytest.raises(InputError) as err:
        read_source(str(saved), image_column="img", labels_column="acts", name_column="nobody")
    assert "--name-column" in err.value.fix
    with pytest.raises(InputError) as err:
        read_source(str(saved), image_column="picture", labels_column="acts")
    assert "--image-column" in err.value.fix


def test_manifest_folder_source(tmp_path):
    photos = tmp_path / "photos"
    for i in range(4):
        save_image(photos / f"p{i}.jpg", size=(50, 40))
    (photos / "manifest.csv").write_text("file,objects\np0.jpg,cup;plate\np1.jpg,cup\np2.jpg,plate\np3.jpg,\n")
    kept, report = read_source(str(photos))
    assert report.source_type == "manifest" and report.read == 4 and report.dropped_unlabelled == 1
    assert sorted(img.labels for img in kept) == [["cup"], ["cup", "plate"], ["plate"]]


def ocl_fixture(tmp_path):
    root = tmp_path / "ocl"
    save_image(root / "a.jpg", size=(100, 80))
    save_image(root / "b.jpg", size=(60, 60))
    annotations = [
        {
            "name": "a.jpg",
            "objects": [
                {"obj": 3, "attr": [0, 2], "aff": [1], "box": [10, 10, 50, 40]},
                {"obj": 4, "attr": [1], "aff": [], "box": [60.0, 0.0, 140.0, 80.0]},  # clipped to the image: 40x80
                {"obj": 5, "attr": [0], "aff": [0], "box": [30, 30, 30, 60]},  # no area: dropped
            ],
        },
        {"name": "b.jpg", "objects": [{"obj": 1, "attr": [0], "aff": [1], "box": [0, 0, 60, 60]}]},
    ]
    (root / "ann.pkl").write_bytes(pickle.dumps(annotations, protocol=4))
    return root


def test_ocl_pickle_crops_boxes(tmp_path):
    root = ocl_fixture(tmp_path)
    names = tmp_path / "attrs.txt"
    names.write_text("metal\nfurry\nripe\n")
    kept, report = read_source(str(root / "ann.pkl"), source_type="ocl", label_names=str(names))
    assert report.read == 4 and report.dropped_bad_box == 1 and len(kept) == 3
    crops = sorted((img.crop, img.labels) for img in kept)
    assert crops == [([0, 0, 60, 60], ["metal"]), ([10, 10, 50, 40], ["metal", "ripe"]), ([60, 0, 100, 80], ["furry"])]
    first = next(img for img in kept if img.crop == [10, 10, 50, 40])
    assert (first.width, first.height) == (40, 30)
    assert ImageFetcher().open(first.origin, first.crop).size == (40, 30)
    affs, _ = read_source(str(root / "ann.pkl"), source_type="ocl", ocl_labels="aff")
    assert sorted(label for img in affs for label in img.labels) == ["aff_1", "aff_1"]
    small, rep = read_source(str(root / "ann.pkl"), source_type="ocl", min_pixels=1300)
    assert rep.dropped_small == 1 and len(small) == 2  # the 40x30 crop is under 1,300 pixels


def test_pangea_pickle_through_cli(tmp_path):
    root = tmp_path / "pangea"
    rows = []
    for i in range(12):
        dataset = "hico" if i % 2 else "vcoco"
        save_image(root / "imgs" / dataset / f"{i}.jpg", size=(40, 40), colour=(i * 10, 0, 0))
        actions = ["run"] if i % 3 == 0 else (["cut", "run"] if i % 3 == 1 else [2])
        rows.append((dataset, f"{i}.jpg", actions, [7, 8]))
    (root / "pangea.pkl").write_bytes(pickle.dumps(rows, protocol=2))
    kept, report = read_source(
        str(root / "pangea.pkl"), source_type="pangea", image_root=str(root / "imgs"), pangea_labels="action"
    )
    assert report.read == 12 and sorted({label for img in kept for label in img.labels}) == ["action_2", "cut", "run"]
    nodes, _ = read_source(
        str(root / "pangea.pkl"), source_type="pangea", image_root=str(root / "imgs")
    )  # default: nodes
    assert all(img.labels == ["node_7", "node_8"] for img in nodes)
    # the action labels name the image, as the authors' harness does (" ".join(action_labels))
    assert [img.name for img in nodes[:3]] == ["run", "cut run", "action_2"]
    out = tmp_path / "chains"
    result = CliRunner().invoke(
        app,
        [
            "chains",
            str(root / "pangea.pkl"),
            "--source-type",
            "pangea",
            "--image-root",
            str(root / "imgs"),
            "--pangea-labels",
            "action",
            "--preset",
            "none",
            "--out",
            str(out),
            "--min-pixels",
            "0",
            "--concepts",
            "run,cut",
            "--memory-size",
            "1",
            "--chains",
            "1",
            "--max-steps",
            "4",
            "--single-steps",
            "1",
            "--deductions",
            "1",
        ],
    )
    assert result.exit_code == 0, result.output
    assert json.loads((out / "single_step.jsonl.meta.json").read_text())["concept_kind"] == "action"


class _Payload:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_pickle_that_runs_code_is_refused(tmp_path):
    marker = tmp_path / "pwned"
    evil = tmp_path / "evil.pkl"
    evil.write_bytes(pickle.dumps([{"name": "a.jpg", "objects": [_Payload(marker)]}]))
    with pytest.raises(UnsafePickleError) as err:
        safe_load(evil)
    assert "refused" in err.value.problem and ("posix.system" in err.value.problem or "os.system" in err.value.problem)
    assert not marker.exists()
    result = CliRunner().invoke(app, ["chains", str(evil), "--source-type", "ocl", "--out", str(tmp_path / "o")])
    assert result.exit_code == 1 and "refused" in result.output and not marker.exists()
    assert not (tmp_path / "o").exists()


def test_restricted_unpickler_accepts_plain_data_only():
    data = {"a": [1, 2.5, None, True], "b": ("x", b"y"), "s": {1, 2}, "f": frozenset({3})}
    for protocol in range(0, pickle.HIGHEST_PROTOCOL + 1):
        assert safe_loads(pickle.dumps(data, protocol=protocol)) == data
    import collections

    with pytest.raises(UnsafePickleError):
        safe_loads(pickle.dumps(collections.OrderedDict(a=1)))
    with pytest.raises(InputError):
        safe_loads(b"not a pickle")


def test_cli_prints_labels_with_square_brackets_as_written(tmp_path):
    """Labels are data: '[red]' is printed as written and '[/]' does not crash the concept table."""
    catalog = tmp_path / "catalog"
    records = []
    for i in range(8):
        save_image(catalog / "images" / f"{i}.png", colour=(i * 30, 0, 0))
        records.append(
            CatalogRecord(
                id=f"id{i}",
                path=f"images/{i}.png",
                objects=["[red] mug" if i % 2 else "[/]"],
                source="real",
                scene_id=f"s{i}",
                width=40,
                height=30,
                sha256=sha256_file(catalog / "images" / f"{i}.png"),
            )
        )
    write_catalog(catalog, records)
    runner = CliRunner()
    listing = runner.invoke(
        app, ["chains", str(catalog), "--list-concepts", "--min-pixels", "0"], env={"COLUMNS": "200"}
    )
    assert listing.exit_code == 0, listing.output
    assert "[red] mug" in listing.output and "[/]" in listing.output
    built = runner.invoke(
        app,
        [
            "chains",
            str(catalog),
            "--out",
            str(tmp_path / "out"),
            "--min-pixels",
            "0",
            "--concepts",
            "[red] mug,[/]",
            "--chains",
            "1",
            "--max-steps",
            "3",
            "--single-steps",
            "1",
            "--deductions",
            "1",
            "--memory-size",
            "1",
        ],
        env={"COLUMNS": "200"},
    )
    assert built.exit_code == 0, built.output
    assert "[red] mug" in built.output
    info = runner.invoke(app, ["catalog", "info", str(catalog), "--no-check-files"], env={"COLUMNS": "200"})
    assert info.exit_code == 0, info.output
    assert "[red] mug" in info.output and "[/]" in info.output


def test_label_names_file_keeps_ids_on_their_lines_and_bad_files_fail_clearly(tmp_path):
    """Line i names id i: a blank line inside the list would shift every later id onto the wrong name."""
    from commonlink.errors import SchemaError
    from commonlink.sampling.chain_sources import read_label_names

    names = tmp_path / "names.txt"
    names.write_text("metal\nwooden\n\n")  # trailing blank lines are fine
    assert read_label_names(names) == ["metal", "wooden"]
    names.write_text("metal\n\nfurry\n")
    with pytest.raises(SchemaError, match="line 2"):
        read_label_names(names)
    names.write_text('["metal", "furry"')
    with pytest.raises(SchemaError, match="JSON"):
        read_label_names(names)
    names.write_bytes("métal\n".encode("latin-1"))
    with pytest.raises(SchemaError, match="UTF-8"):
        read_label_names(names)
