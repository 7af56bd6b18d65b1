"""Association release: chain files -> parquet configs (images stored once) -> load_dataset / load_association."""

from __future__ import annotations

import io
import json
import pickle
from pathlib import Path

import datasets
import pytest
from PIL import Image
from typer.testing import CliRunner

from commonlink.cli import app
from commonlink.errors import InputError
from commonlink.fileio import read_jsonl, sha256_file
from commonlink.formats.catalog import CatalogRecord, write_catalog
from commonlink.loaders import load_association, open_association
from commonlink.loaders.association import Chain, ChainStep, DeductionTask, SingleStepTask
from commonlink.release.association import build_association_release
from commonlink.release.staging import ReleaseOptions, verify_release
from tests.fixtures.tiny_chains import chains_command, write_concept_catalog

CONFIGS = ("single_step", "deduction", "synchronous", "asynchronous")
QUIET = ReleaseOptions(progress=False)


def _jpeg_with_gps(size, colour) -> bytes:
    img = Image.new("RGB", size, colour)
    exif = Image.Exif()
    exif[0x010F] = "PhoneMaker"
    exif.get_ifd(0x8825)[2] = (52.0, 31.0, 12.0)  # GPSLatitude
    buf = io.BytesIO()
    img.save(buf, format="JPEG", exif=exif)
    return buf.getvalue()


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    root = tmp_path_factory.mktemp("assoc")
    catalog = root / "catalog"
    (catalog / "images").mkdir(parents=True)
    records = []
    for i in range(16):
        # "wooden" images are the disjoint negatives of painted+furry queries in the metal-painted chains
        labels = [["metal", "painted"], ["metal"], ["painted", "furry"], ["furry"], ["wooden"]][i % 5]
        path = catalog / "images" / f"{i}.jpg"
        path.write_bytes(_jpeg_with_gps((30 + i, 20), (i * 12, 40, 90)))
        records.append(
            CatalogRecord(
                id=f"im{i:02d}",
                path=f"images/{i}.jpg",
                objects=labels,
                source="real",
                scene_id=f"s{i}",
                width=30 + i,
                height=20,
                sha256=sha256_file(path),
            )
        )
    write_catalog(catalog, records)
    chains = root / "chains"
    runner = CliRunner()
    built = runner.invoke(
        app,
        [
            "chains",
            str(catalog),
            "--out",
            str(chains),
            "--min-pixels",
            "0",
            "--concepts",
            "metal,painted,furry",
            "--pairs",
            "metal-painted",
            "--chains",
            "3",
            "--max-steps",
            "12",
            "--warmup",
            "2",
            "--single-steps",
            "3",
            "--deductions",
            "3",
            "--memory-size",
            "2",
            "--seed",
            "5",
        ],
    )
    assert built.exit_code == 0, built.output
    out = root / "release"
    files = sorted(str(p) for p in chains.glob("*.jsonl"))  # images.jsonl included, as a shell glob would
    result = runner.invoke(
        app,
        [
            "release",
            "build",
            *files,
            "--out",
            str(out),
            "--name",
            "assoc-test",
            "--license",
            "cc-by-4.0",
            "--no-progress",
        ],
    )
    assert result.exit_code == 0, result.output
    return root, chains, out


def test_configs_load_with_datasets_and_images_are_stored_once(release):
    _, chains, out = release
    images = datasets.load_dataset(str(out), "images", split="test")
    ids = list(images["id"])
    assert len(ids) == len(set(ids))
    referenced = set()
    for config in CONFIGS:
        ds = datasets.load_dataset(str(out), config, split="test")
        meta = json.loads((chains / f"{config}.jsonl.meta.json").read_text())
        assert len(ds) == meta["rows"]
        for row in ds:
            if config == "single_step":
                refs = [row["query"], *row["memory"], *row["candidates"]]
            elif config == "deduction":
                refs = [row["image_1"], row["image_2"]]
            else:
                refs = [row["start"], *row["positive"], *row["negative"]]
                assert len(row["positive"]) == row["num_steps"] == 14 and row["warmup"] == 2
            referenced.update(refs)
    assert referenced == set(ids)  # every used image once, nothing else
    decoded = images[0]["image"]
    assert isinstance(decoded, Image.Image) and decoded.size == (images[0]["width"], images[0]["height"])
    assert not decoded.getexif()  # GPS/EXIF stripped from the published bytes


def test_card_manifest_and_rerun(release):
    _, chains, out = release
    card = (out / "README.md").read_text()
    for config in (*CONFIGS, "images"):
        assert f"config_name: {config}" in card and f"path: {config}/test-*" in card
    meta = json.loads((chains / "synchronous.jsonl.meta.json").read_text())
    for concept in meta["concepts"]:
        assert f"| {concept['name']} | {concept['pool_size']} |" in card
    assert "metal + painted" in card and "max_steps" in card and "license: cc-by-4.0" in card
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["kind"] == "association" and manifest["seed"] == 5
    assert manifest["configs"]["synchronous"]["rows"] == 9 and verify_release(out) == []
    files = sorted(str(p) for p in chains.glob("*.jsonl"))
    again = build_association_release(
        files, out, ReleaseOptions(name="assoc-test", license="cc-by-4.0", max_shard_bytes=500_000_000, progress=False)
    )
    assert again.reused and again.splits["synchronous"]["rows"] == 9


def test_loader_yields_typed_tasks_with_images(release):
    _, chains, out = release
    chain = next(load_association(out, "asynchronous"))
    assert isinstance(chain, Chain) and chain.concepts == ["metal", "painted"] and len(chain) == 14
    assert [s.warmup for s in chain.steps[:3]] == [True, True, False]
    for step in chain.steps:
        assert isinstance(step, ChainStep)
        assert step.concept in step.query.labels and step.concept in step.positive.labels
        assert not set(chain.concepts) & set(step.negative.labels)
        assert step.concept in step.gold
    assert chain.steps[1].query.id == chain.steps[0].positive.id
    assert [s.bridge for s in chain.steps[:8]] == [False, False, False, True, False, False, False, True]
    image = chain.steps[0].query.image
    assert isinstance(image, Image.Image) and image.size[1] == 20
    task = next(load_association(out, "single_step"))
    assert isinstance(task, SingleStepTask) and len(task.memory) == 2 and task.concept in task.positive.labels
    deduction = next(load_association(out, "deduction"))
    assert isinstance(deduction, DeductionTask) and deduction.concept in deduction.gold
    assert deduction.options == ["metal", "painted", "furry"]
    # the same tasks straight from the chain files
    from_files = open_association(chains, "asynchronous")
    released = open_association(out, "asynchronous")
    assert len(from_files) == len(released) == 3
    a, b = from_files.get(2), released.get(2)
    assert [s.positive.id for s in a.steps] == [s.positive.id for s in b.steps]
    assert a.steps[5].negative.image.size == b.steps[5].negative.image.size


def test_ocl_crops_are_released_as_crops(tmp_path):
    root = tmp_path / "ocl"
    root.mkdir()
    Image.new("RGB", (90, 60), (10, 120, 30)).save(root / "scene.png")
    objects = [{"obj": k, "attr": [k % 2, 2], "aff": [], "box": [k * 10, 0, k * 10 + 20 + k, 30]} for k in range(6)]
    (root / "ocl.pkl").write_bytes(pickle.dumps([{"name": "scene.png", "objects": objects}]))
    chains = tmp_path / "chains"
    built = CliRunner().invoke(
        app,
        [
            "chains",
            str(root / "ocl.pkl"),
            "--source-type",
            "ocl",
            "--out",
            str(chains),
            "--min-pixels",
            "0",
            "--concepts",
            "attr_0,attr_1",
            "--tasks",
            "synchronous",
            "--chains",
            "1",
            "--max-steps",
            "3",
            "--negatives",
            "chain",
        ],
    )  # every crop carries attr_2: no disjoint negative exists
    assert built.exit_code == 0, built.output
    out = tmp_path / "release"
    build_association_release([chains / "synchronous.jsonl"], out, QUIET)
    images = datasets.load_dataset(str(out), "images", split="test")
    for row in images:
        x1, y1, x2, y2 = row["crop"]
        assert row["image"].size == (x2 - x1, y2 - y1) == (row["width"], row["height"])
    chain = next(load_association(out, "synchronous"))
    assert chain.concept_kind == "attribute"


def test_release_refuses_bad_inputs(release, tmp_path):
    _, chains, _ = release
    with pytest.raises(InputError) as err:
        build_association_release([chains / "images.jsonl"], tmp_path / "r1", QUIET)
    assert "no task files" in err.value.problem
    with pytest.raises(InputError) as err:
        build_association_release([chains / "synchronous.jsonl", chains / "synchronous.jsonl"], tmp_path / "r2", QUIET)
    assert "Two inputs" in err.value.problem
    rows = list(read_jsonl(chains / "deduction.jsonl"))
    tampered = tmp_path / "deduction.jsonl"
    tampered.write_text("".join(json.dumps(r) + "\n" for r in rows[:-1]))
    (tmp_path / "deduction.jsonl.meta.json").write_text((chains / "deduction.jsonl.meta.json").read_text())
    with pytest.raises(Exception) as err:
        build_association_release([tampered], tmp_path / "r3", QUIET)
    assert "changed after it was built" in str(err.value)


def test_empty_task_file_is_left_out_of_the_release(release, tmp_path):
    """A task type `chains` could not build (0 rows) must not become a config that load_dataset cannot open."""
    root, _, _ = release
    chains = tmp_path / "chains"
    runner = CliRunner()
    built = runner.invoke(
        app,
        [
            "chains",
            str(root / "catalog"),
            "--out",
            str(chains),
            "--min-pixels",
            "0",
            "--concepts",
            "metal,furry",
            "--chains",
            "2",
            "--max-steps",
            "6",
            "--warmup",
            "1",
            "--single-steps",
            "2",
            "--deductions",
            "2",
            "--memory-size",
            "2",
            "--seed",
            "1",
        ],
    )
    assert built.exit_code == 0, built.output
    assert (chains / "asynchronous.jsonl").read_text() == ""  # metal and furry share no image: no bridge
    result = build_association_release(sorted(chains.glob("*.jsonl")), tmp_path / "rel", QUIET)
    assert "asynchronous" not in result.splits and result.splits["synchronous"]["rows"] == 4
    assert any("asynchronous" in note for note in result.notes)
    for config in result.splits:
        assert len(datasets.load_dataset(str(tmp_path / "rel"), config, split="test")) == result.splits[config]["rows"]
    assert verify_release(tmp_path / "rel") == []
    with pytest.raises(InputError, match="no rows"):
        build_association_release([chains / "asynchronous.jsonl"], tmp_path / "rel2", QUIET)


def file_origin(path: Path) -> dict:
    """A file origin as chain sources write it: inside its folder, with its sha256."""
    from commonlink.fileio import sha256_file

    return {"type": "file", "path": str(path), "catalog": str(path.parent), "sha256": sha256_file(path)}


def test_png_text_chunks_are_not_published(tmp_path):
    """PNG tEXt/iTXt chunks (captions, locations, software) count as metadata: the image is re-encoded without them."""
    from PIL import PngImagePlugin

    from commonlink.formats.association import ImageFetcher, LabelledImage
    from commonlink.release.association import release_image_bytes

    info = PngImagePlugin.PngInfo()
    info.add_text("Comment", "taken at home, 52.5N 13.4E")
    info.add_itxt("Location", "Berlin")
    path = tmp_path / "photo.png"
    Image.new("RGB", (30, 20), (10, 200, 30)).save(path, pnginfo=info)
    img = LabelledImage(id="p", labels=["x"], width=30, height=20, origin=file_origin(path))
    data = release_image_bytes(ImageFetcher(), img)
    assert b"52.5N" not in data and b"Berlin" not in data
    released = Image.open(io.BytesIO(data))
    assert released.size == (30, 20) and released.getpixel((3, 3)) == (10, 200, 30) and not released.text
    clean = tmp_path / "clean.png"
    Image.new("RGB", (30, 20), (10, 200, 30)).save(clean)
    plain = LabelledImage(id="c", labels=["x"], width=30, height=20, origin=file_origin(clean))
    assert release_image_bytes(ImageFetcher(), plain) == clean.read_bytes()  # a clean file is published as it is


def test_rotated_photo_is_upright_and_sized_alike_in_chain_files_and_release(tmp_path):
    """An EXIF-rotated photo: the chain-file loader and the release show the same upright pixels and size."""
    from commonlink.formats.association import ImageFetcher, LabelledImage
    from commonlink.release.association import release_image_bytes, stored_size

    raw = Image.new("RGB", (30, 20), (200, 10, 10))
    raw.paste((10, 10, 200), (0, 0, 10, 20))  # a blue band on the left of the stored pixels
    exif = Image.Exif()
    exif[0x0112] = 6  # "rotate 90 clockwise to display"
    path = tmp_path / "rotated.jpg"
    raw.save(path, exif=exif, quality=95)
    img = LabelledImage(id="r", labels=["x"], width=30, height=20, origin=file_origin(path))
    shown = ImageFetcher().open(img.origin, what="rotated")
    released = Image.open(io.BytesIO(release_image_bytes(ImageFetcher(), img)))
    assert shown.size == released.size == stored_size(release_image_bytes(ImageFetcher(), img)) == (20, 30)
    # the blue band is now at the top in both
    assert shown.getpixel((10, 2))[2] > 150 and released.getpixel((10, 2))[2] > 150
    cropped = ImageFetcher().open(img.origin, [0, 0, 10, 20], what="crop")  # boxes stay in file coordinates
    assert cropped.size == (10, 20) and cropped.getpixel((5, 10))[2] > 150


def test_the_shared_image_table_is_read_once_per_build(release, tmp_path, monkeypatch):
    """The task files of one `chains` run share images.jsonl: it is hashed and parsed once, not once per task."""
    import commonlink.release.association as association_release

    _, chains, _ = release
    calls = []
    real = association_release.read_image_table
    monkeypatch.setattr(
        association_release,
        "read_image_table",
        lambda path, meta=None, **kw: calls.append(path) or real(path, meta, **kw),
    )
    tasks = sorted(chains.glob("*.jsonl"))
    result = build_association_release(tasks, tmp_path / "r", QUIET)
    assert len(result.splits) == 5 and len(calls) == 1  # four task configs + images, one table read


def test_photo_catalog_with_an_all_overlapping_image_builds_names_images_and_releases(tmp_path):
    """Issue 23: a small multi-object photo catalog (no image names) where one image shows every object builds
    with the default disjoint negatives (that image kept out of query and negative positions, counted in the
    summary and the card); memories
    and prompts name images by what they show, never "unnamed image"; the release verifies."""
    from commonlink.eval.association import evaluate_association

    catalog = tmp_path / "catalog"
    (catalog / "images").mkdir(parents=True)
    sets = [
        ["red circle", "blue square"],
        ["red circle"],
        ["blue square", "green star"],
        ["green star"],
        ["yellow cup"],
        ["red circle", "yellow cup"],
    ]
    records = []
    for i in range(19):
        labels = ["red circle", "blue square", "green star", "yellow cup"] if i == 18 else sets[i % len(sets)]
        (catalog / "images" / f"{i}.jpg").write_bytes(_jpeg_with_gps((30 + i, 20), (i * 12, 40, 90)))
        records.append(
            CatalogRecord(
                id=f"im{i:02d}",
                path=f"images/{i}.jpg",
                objects=labels,
                source="real",
                scene_id=f"s{i}",
                width=30 + i,
                height=20,
                sha256=sha256_file(catalog / "images" / f"{i}.jpg"),
            )
        )
    write_catalog(catalog, records)
    chains, out = tmp_path / "chains", tmp_path / "release"
    runner = CliRunner()
    built = runner.invoke(
        app,
        [
            "chains",
            str(catalog),
            "--out",
            str(chains),
            "--min-pixels",
            "0",
            "--concepts",
            "red circle,blue square",
            "--pairs",
            "red circle-blue square",
            "--chains",
            "2",
            "--max-steps",
            "8",
            "--warmup",
            "2",
            "--single-steps",
            "3",
            "--deductions",
            "2",
            "--memory-size",
            "2",
            "--seed",
            "1",
        ],
    )
    assert built.exit_code == 0, built.output
    assert "1 image(s) share a label with every other image" in " ".join(built.output.split())
    files = sorted(str(p) for p in chains.glob("*.jsonl"))
    result = runner.invoke(
        app,
        ["release", "build", *files, "--out", str(out), "--name", "photos", "--license", "cc-by-4.0", "--no-progress"],
    )
    assert result.exit_code == 0, result.output
    assert verify_release(out) == []
    card = " ".join((out / "README.md").read_text().split())
    assert "never a query or a negative (no disjoint negative exists for them): 1." in card
    names = list(datasets.load_dataset(str(out), "images", split="test")["name"])
    assert len(set(names)) == len(names) and all(n.startswith("the image with a") for n in names)
    for config in ("single_step", "synchronous"):
        evaluate_association(
            out, config, ["random"], out_dir=tmp_path / f"eval-{config}", show_progress=False, report=False, n_boot=10
        )
        logged = "".join(p.read_text() for p in (tmp_path / f"eval-{config}").rglob("*.jsonl"))
        assert logged and "unnamed image" not in logged
        if config == "synchronous":  # steps.jsonl holds the memory after every step
            assert "the image with a" in logged
    chain = next(load_association(out, "synchronous"))
    for step in chain.steps:  # invariants on every step: positive shares the concept, negative shares no label
        assert step.concept in step.positive.labels and not set(step.query.labels) & set(step.negative.labels)


def _fresh_chains(tmp_path):
    """A catalog with real sha256s and its chain files (built with the CLI, as a user builds them)."""
    catalog, chains = tmp_path / "catalog", tmp_path / "chains"
    write_concept_catalog(catalog, 12, seed=300)
    built = CliRunner().invoke(app, chains_command(catalog, chains, seed=3, extra=("--negatives", "chain")))
    assert built.exit_code == 0, built.output
    table = list(read_jsonl(chains / "images.jsonl"))
    assert all(row["origin"]["sha256"] == sha256_file(catalog / row["origin"]["relative"]) for row in table)  # recorded
    return catalog, chains


def _build_from(chains, out):
    """`commonlink release build` of every chain file in ``chains`` into ``out``."""
    files = sorted(str(p) for p in chains.glob("*.jsonl"))
    return CliRunner().invoke(app, ["release", "build", *files, "--out", str(out), "--no-progress"])


def test_an_image_changed_after_chains_is_refused(tmp_path):
    catalog, chains = _fresh_chains(tmp_path)
    from tests.test_hub import tiny_png

    (catalog / "images" / "0.png").write_bytes(tiny_png(999))  # same size, other pixels: labels no longer true
    done = _build_from(chains, tmp_path / "rel")
    assert done.exit_code == 1
    assert "changed since the chain files were built" in done.output and "images/0.png" in done.output
    assert not (tmp_path / "rel").exists()


def test_a_symlink_out_of_the_catalog_is_refused(tmp_path):
    catalog, chains = _fresh_chains(tmp_path)
    outside = tmp_path / "elsewhere.png"
    outside.write_bytes((catalog / "images" / "1.png").read_bytes())  # even the same bytes: never read from outside
    (catalog / "images" / "1.png").unlink()
    (catalog / "images" / "1.png").symlink_to(outside)
    done = _build_from(chains, tmp_path / "rel")
    assert done.exit_code == 1
    assert "symbolic link" in done.output and "escapes the catalog" in done.output
    assert not (tmp_path / "rel").exists()
