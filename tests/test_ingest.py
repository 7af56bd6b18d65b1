"""Real-photo ingestion: manifest reading, vocabulary, metadata stripping, refusals, idempotency, resume, CLI."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

import commonlink.catalog.ingest as ingest_mod
from commonlink.catalog.ingest import REPORT_FILENAME, ingest_photos
from commonlink.catalog.labels import read_manifest
from commonlink.catalog.vocabulary import Vocabulary, likely_typos, normalise_name
from commonlink.cli import app
from commonlink.errors import InputError, SchemaError
from commonlink.formats.catalog import image_path, read_catalog

GPS_IFD = 0x8825
ORIENTATION = 0x0112
RED, BLUE = (220, 20, 20), (20, 20, 220)


# ---------------------------------------------------------------- fixtures made here
def noise_photo(seed: int, size=(400, 300)) -> Image.Image:
    """A distinct 'photo': coarse random blocks (distinct seeds -> far-apart perceptual hashes)."""
    w, h = size
    blocks = (np.random.default_rng(seed).random((h // 20, w // 20, 3)) * 255).astype(np.uint8)
    return Image.fromarray(blocks).resize((w, h), Image.NEAREST)


def split_photo() -> Image.Image:
    """400x300 as stored by the camera: left half red, right half blue."""
    arr = np.zeros((300, 400, 3), np.uint8)
    arr[:, :200] = RED
    arr[:, 200:] = BLUE
    return Image.fromarray(arr)


def gps_exif(orientation: int = 1) -> Image.Exif:
    exif = Image.Exif()
    exif[ORIENTATION] = orientation
    exif[0x010F] = "PhoneMaker"  # Make
    exif[GPS_IFD] = {1: "N", 2: (48.0, 51.0, 30.0), 3: "E", 4: (2.0, 17.0, 40.0)}
    return exif


XMP = b'<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:Description exif:GPSLatitude="48,51.5N"/></x:xmpmeta>'


def make_photos(root):
    """Photo folder covering every refusal reason; returns the manifest text (CSV)."""
    root.mkdir()
    split_photo().save(
        root / "rotated.jpg", exif=gps_exif(orientation=6), quality=92, comment=b"taken at home", xmp=XMP
    )
    noise_photo(1).save(root / "plain.png", exif=gps_exif())
    noise_photo(2).save(root / "lossy.webp", exif=gps_exif(), quality=90)
    (root / "sub").mkdir()
    noise_photo(3).save(
        root / "sub" / "in_folder.jpg", quality=90, exif=gps_exif(), comment=b"taken at home"
    )  # upright: JPEG tables kept
    noise_photo(4, size=(150, 150)).save(root / "tiny.png")
    good = io.BytesIO()
    noise_photo(5).save(good, format="JPEG", quality=90)
    (root / "truncated.jpg").write_bytes(good.getvalue()[: len(good.getvalue()) // 2])
    (root / "garbage.jpg").write_bytes(b"this is not an image at all")
    (root / "copy_of_plain.png").write_bytes((root / "plain.png").read_bytes())
    noise_photo(1).save(root / "near_plain.jpg", quality=85)  # same picture, other encoding
    noise_photo(6).save(root / "typo.jpg", quality=90)
    noise_photo(7).save(root / "empty.jpg", quality=90)
    noise_photo(8).save(root / "not_listed.jpg", quality=90)
    noise_photo(9).save(root.parent / "secret.jpg", quality=90)
    (root / "link.jpg").symlink_to(root.parent / "secret.jpg")  # a link leading out of the photos folder
    return (
        "file,objects,scene,background,view\n"
        "rotated.jpg,Apple; Rubber  Duck,s1,blanket,1\n"
        "plain.png,apple;keys,s1,blanket,2\n"
        "lossy.webp,coffee mug,s2,floor,1\n"
        "sub/in_folder.jpg,KEYS,,counter,\n"
        "tiny.png,apple,s3,,\n"
        "truncated.jpg,apple,s3,,\n"
        "garbage.jpg,apple,s3,,\n"
        "copy_of_plain.png,apple,s3,,\n"
        "near_plain.jpg,apple,s3,,\n"
        "typo.jpg,aple;keys,s3,,\n"
        "empty.jpg,,s3,,\n"
        "gone.jpg,apple,s3,,\n"
        "../outside.jpg,apple,s3,,\n"
        "plain.png,apple,s9,,\n"
        "link.jpg,apple,s9,,\n"
    )


VOCAB = "apple\nkeys\nrubber duck: duck\nmug: cup, coffee mug\n"


@pytest.fixture()
def photo_set(tmp_path):
    photos = tmp_path / "photos"
    manifest = tmp_path / "labels.csv"
    manifest.write_text(make_photos(photos))
    vocab = tmp_path / "vocab.txt"
    vocab.write_text(VOCAB)
    return photos, manifest, vocab, tmp_path / "catalog"


# ---------------------------------------------------------------- manifest and vocabulary
def test_manifest_csv_and_jsonl(tmp_path):
    csv_path = tmp_path / "m.csv"
    csv_path.write_text("\ufeffFile,Objects,Scene\na.jpg, Apple ; keys ;,s1\n\nb.jpg,,\n")
    entries = read_manifest(csv_path)
    assert [(e.file, e.objects, e.scene, e.line) for e in entries] == [
        ("a.jpg", ["Apple", "keys"], "s1", 2),
        ("b.jpg", [], None, 4),
    ]

    jsonl = tmp_path / "m.jsonl"
    jsonl.write_text(json.dumps({"file": "x/a.jpg", "objects": ["mug", " keys "], "view": 3, "camera": "pixel"}) + "\n")
    (entry,) = read_manifest(jsonl)
    assert (entry.file, entry.objects, entry.view, entry.extra) == (
        "x/a.jpg",
        ["mug", "keys"],
        "3",
        {"camera": "pixel"},
    )

    jsonl.write_text('{"file": "a.jpg", "objects": ["a"]}\n{"file": "b.jpg", "objects": 3}\n')
    with pytest.raises(SchemaError, match="line 2.*objects"):
        read_manifest(jsonl)
    csv_path.write_text("path,labels\na.jpg,apple\n")
    with pytest.raises(SchemaError, match="line 1.*'file'"):
        read_manifest(csv_path)
    csv_path.write_text("file,objects\na.jpg,apple,keys\n")
    with pytest.raises(SchemaError, match="(?s)line 2.*';'"):
        read_manifest(csv_path)


def test_manifest_and_vocabulary_not_in_utf8_fail_clearly(tmp_path):
    """A spreadsheet export in Latin-1 is a schema error naming the file and the fix, not a traceback."""
    csv_path = tmp_path / "m.csv"
    csv_path.write_bytes("file,objects\na.jpg,café\n".encode("latin-1"))
    with pytest.raises(SchemaError, match="m.csv.*UTF-8") as info:
        read_manifest(csv_path)
    assert "UTF-8" in info.value.fix
    vocab = tmp_path / "objects.txt"
    vocab.write_bytes("café\n".encode("latin-1"))
    with pytest.raises(SchemaError, match="objects.txt.*UTF-8"):
        Vocabulary.from_file(vocab)
    array = tmp_path / "m.json"
    array.write_text('[{"file": "a.jpg", "objects": ["apple"]}]')
    with pytest.raises(SchemaError, match="line 1") as info:
        read_manifest(array)
    assert info.value.fix  # says how to write the file


def test_vocabulary_normalises_aliases_and_suggests(tmp_path):
    assert normalise_name("  Rubber__Duck \t") == "rubber duck"
    path = tmp_path / "v.txt"
    path.write_text("# objects\nApple\nmug: Cup, coffee_mug\n\nremote control: remote\n")
    vocab = Vocabulary.from_file(path)
    assert vocab.names == ["apple", "mug", "remote control"]
    assert vocab.canonical("COFFEE   MUG") == "mug" and vocab.canonical("cup") == "mug"
    assert vocab.canonical("pear") is None
    assert vocab.suggest("aple") == ["apple"]
    with pytest.raises(InputError, match="Did you mean 'remote control'"):
        vocab.resolve("remote controll")
    path.write_text("mug: cup\nglass: cup\n")
    with pytest.raises(SchemaError, match="line 2.*'cup'"):
        Vocabulary.from_file(path)
    assert likely_typos({"apple": 5, "aple": 1, "keys": 2}) == [("aple", "apple")]


# ---------------------------------------------------------------- ingestion
def test_ingest_strips_metadata_applies_orientation_and_refuses_with_reasons(photo_set):
    photos, manifest, vocab, out = photo_set
    report = ingest_photos(photos, manifest, out, vocabulary=vocab)

    records = {r.extra["source_file"]: r for r in read_catalog(out)}
    assert sorted(records) == ["lossy.webp", "plain.png", "rotated.jpg", "sub/in_folder.jpg"]
    reasons = {(r.file, r.line): r.reason for r in report.refused}
    assert reasons == {
        ("tiny.png", 6): "too_small",
        ("truncated.jpg", 7): "corrupt",
        ("garbage.jpg", 8): "corrupt",
        ("copy_of_plain.png", 9): "exact_duplicate",
        ("near_plain.jpg", 10): "near_duplicate",
        ("typo.jpg", 11): "unknown_object",
        ("empty.jpg", 12): "no_objects",
        ("gone.jpg", 13): "missing",
        ("../outside.jpg", 14): "path_escapes",
        ("plain.png", 15): "listed_twice",
        ("link.jpg", 16): "path_escapes",
    }
    typo = next(r for r in report.refused if r.reason == "unknown_object")
    assert typo.suggestions == {"aple": ["apple"]} and "did you mean 'apple'" in typo.detail
    assert [(p.file_a, p.file_b, p.kept_both) for p in report.near_duplicates] == [
        ("plain.png", "near_plain.jpg", False)
    ]
    assert report.unlisted == ["not_listed.jpg"]

    # names normalised onto the canonical vocabulary (case, spacing, synonyms)
    assert records["rotated.jpg"].objects == ["apple", "rubber duck"]
    assert records["lossy.webp"].objects == ["mug"]
    assert records["sub/in_folder.jpg"].objects == ["keys"]
    assert records["sub/in_folder.jpg"].scene_id == "sub"  # default scene: the photo's folder
    assert (records["rotated.jpg"].background, records["rotated.jpg"].view) == ("blanket", "1")

    for record in records.values():
        stored = image_path(out, record)
        data = stored.read_bytes()
        assert record.id == record.sha256[:16] and stored.name.startswith(record.id)
        assert b"GPS" not in data and b"Exif" not in data and b"xmpmeta" not in data and b"taken at home" not in data
        with Image.open(stored) as img:
            assert not img.getexif() and not img.getexif().get_ifd(GPS_IFD)
            assert "comment" not in img.info and "xmp" not in img.info
            assert (img.width, img.height) == (record.width, record.height)
    assert image_path(out, records["rotated.jpg"]).suffix == ".jpg"
    assert image_path(out, records["plain.png"]).suffix == ".png"
    assert image_path(out, records["lossy.webp"]).suffix == ".png"

    # orientation 6 applied: the 400x300 red|blue photo is stored upright as 300x400, red on top
    with Image.open(image_path(out, records["rotated.jpg"])) as img:
        assert img.size == (300, 400)
        top, bottom = (
            np.asarray(img.convert("RGB").getpixel((150, 60))),
            np.asarray(img.convert("RGB").getpixel((150, 340))),
        )
        assert np.abs(top - RED).max() < 40 and np.abs(bottom - BLUE).max() < 40
    # original resolution kept; PNG stored losslessly
    with Image.open(image_path(out, records["plain.png"])) as img, Image.open(photos / "plain.png") as src:
        assert img.size == (400, 300) and np.array_equal(np.asarray(img), np.asarray(src))

    saved = json.loads((out / REPORT_FILENAME).read_text())
    assert saved["counts"]["added"] == 4 and saved["counts"]["refused"] == 11
    assert saved["refused_by_reason"]["corrupt"] == 2 and saved["toolkit_version"]


def test_rerun_is_idempotent_and_adds_only_new_photos(photo_set):
    photos, manifest, vocab, out = photo_set
    ingest_photos(photos, manifest, out, vocabulary=vocab)
    first = (out / "catalog.jsonl").read_bytes()
    first_images = sorted(p.name for p in (out / "images").iterdir())

    decoded = []
    real_open = ingest_mod.open_image

    def counting_open(*args, **kwargs):
        decoded.append(kwargs.get("what"))
        return real_open(*args, **kwargs)

    ingest_mod.open_image = counting_open
    try:
        again = ingest_photos(photos, manifest, out, vocabulary=vocab)
        assert (out / "catalog.jsonl").read_bytes() == first
        assert again.added == [] and again.unchanged == 4
        assert "rotated.jpg" not in decoded and "plain.png" not in decoded  # known photos are not decoded again

        # add a photo and fix a label; re-run adds only the new one and updates the label
        noise_photo(20).save(photos / "new.jpg", quality=90)
        manifest.write_text(
            manifest.read_text().replace("lossy.webp,coffee mug", "lossy.webp,cup;apple") + "new.jpg,apple,s4,,\n"
        )
        decoded.clear()
        third = ingest_photos(photos, manifest, out, vocabulary=vocab)
    finally:
        ingest_mod.open_image = real_open
    assert [a["file"] for a in third.added] == ["new.jpg"]
    assert [u["file"] for u in third.updated] == ["lossy.webp"] and third.unchanged == 3
    assert "new.jpg" in decoded and "rotated.jpg" not in decoded
    records = {r.extra["source_file"]: r for r in read_catalog(out)}
    assert records["lossy.webp"].objects == ["mug", "apple"]
    assert len(records) == 5 and len(list((out / "images").iterdir())) == len(first_images) + 1


def test_interrupted_run_keeps_finished_photos_and_resumes(photo_set, monkeypatch):
    photos, manifest, vocab, out = photo_set
    real_clean = ingest_mod.clean_image
    calls = []

    def flaky_clean(img):
        calls.append(1)
        if len(calls) == 3:
            # periodic checkpoint: the two finished photos are on disk even if the process died right here
            assert [r.extra["source_file"] for r in read_catalog(out)] == ["rotated.jpg", "plain.png"]
            raise KeyboardInterrupt  # Ctrl-C in the middle of the third photo
        return real_clean(img)

    monkeypatch.setattr(ingest_mod, "clean_image", flaky_clean)
    with pytest.raises(KeyboardInterrupt):
        ingest_photos(photos, manifest, out, vocabulary=vocab, checkpoint_every=1)
    partial = read_catalog(out)  # a complete, parseable catalog of the photos finished before the interrupt
    assert [r.extra["source_file"] for r in partial] == ["rotated.jpg", "plain.png"]
    assert all(image_path(out, r).is_file() for r in partial)
    assert not [p for p in out.rglob("*.tmp")]

    monkeypatch.setattr(ingest_mod, "clean_image", real_clean)
    report = ingest_photos(photos, manifest, out, vocabulary=vocab)
    assert report.unchanged == 2 and [a["file"] for a in report.added] == ["lossy.webp", "sub/in_folder.jpg"]
    assert len(read_catalog(out)) == 4


def test_without_vocabulary_and_with_near_duplicates_allowed(photo_set):
    photos, manifest, _, out = photo_set
    report = ingest_photos(photos, manifest, out, allow_near_duplicates=True)
    files = {r.extra["source_file"] for r in read_catalog(out)}
    assert {"near_plain.jpg", "typo.jpg"} <= files  # typo cannot be refused without a vocabulary...
    assert ("aple", "apple") in report.possible_typos  # ...but it is flagged
    assert [(p.file_b, p.kept_both) for p in report.near_duplicates] == [("near_plain.jpg", True)]
    assert "no vocabulary file" in report.vocabulary


def test_heic_phone_photo_is_stored_as_jpeg_without_gps(tmp_path):
    pillow_heif = pytest.importorskip("pillow_heif")
    photos = tmp_path / "photos"
    photos.mkdir()
    heif = pillow_heif.from_pillow(split_photo())
    try:
        heif.save(photos / "phone.heic", quality=90, exif=gps_exif(orientation=6).tobytes())
    except Exception as exc:  # pragma: no cover - depends on the wheel's encoders
        pytest.skip(f"pillow-heif cannot write HEIC here: {exc}")
    (tmp_path / "m.jsonl").write_text(json.dumps({"file": "phone.heic", "objects": ["Apple"], "scene": "k"}) + "\n")
    report = ingest_photos(photos, tmp_path / "m.jsonl", tmp_path / "cat")
    assert [a["file"] for a in report.added] == ["phone.heic"]
    (record,) = read_catalog(tmp_path / "cat")
    data = image_path(tmp_path / "cat", record).read_bytes()
    assert data[:3] == b"\xff\xd8\xff" and b"GPS" not in data and b"Exif" not in data
    assert (record.width, record.height) == (300, 400) and record.extra["source_format"] == "HEIF"
    with Image.open(image_path(tmp_path / "cat", record)) as img:  # rotated exactly once: red on top
        assert img.size == (300, 400) and np.abs(np.asarray(img.getpixel((150, 60))) - RED).max() < 40


def test_photo_over_the_pixel_cap_is_refused_not_decoded(tmp_path, monkeypatch):
    photos = tmp_path / "photos"
    photos.mkdir()
    noise_photo(12).save(photos / "huge.png")  # 120,000 px; the cap is lowered below it
    (tmp_path / "m.csv").write_text("file,objects\nhuge.png,apple\n")
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 20_000)
    report = ingest_photos(photos, tmp_path / "m.csv", tmp_path / "cat")
    assert [(r.reason, r.file) for r in report.refused] == [("too_large", "huge.png")]
    assert "COMMONLINK_MAX_IMAGE_PIXELS" in report.refused[0].detail and read_catalog(tmp_path / "cat") == []


def test_bad_inputs_fail_clearly(tmp_path):
    (tmp_path / "photos").mkdir()
    with pytest.raises(InputError, match="Manifest not found"):
        ingest_photos(tmp_path / "photos", tmp_path / "nope.csv", tmp_path / "cat")
    with pytest.raises(InputError, match="Photos folder not found"):
        ingest_photos(tmp_path / "nowhere", tmp_path / "nope.csv", tmp_path / "cat")
    (tmp_path / "m.csv").write_text("file,objects\n")
    with pytest.raises(InputError, match="lists no photos"):
        ingest_photos(tmp_path / "photos", tmp_path / "m.csv", tmp_path / "cat")


# ---------------------------------------------------------------- CLI
def test_cli_ingest_prints_table_and_strict_exit_code(photo_set):
    photos, manifest, vocab, out = photo_set
    runner = CliRunner()
    args = ["ingest", str(photos), "--manifest", str(manifest), "--out", str(out), "--vocabulary", str(vocab)]
    result = runner.invoke(app, args, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "Refused photos (11)" in result.output and "did you mean 'apple'" in result.output
    assert "4 added" in result.output and "not_listed.jpg" in result.output
    assert len(read_catalog(out)) == 4

    strict = runner.invoke(app, [*args, "--strict"], env={"COLUMNS": "200"})
    assert strict.exit_code == 2 and "0 added" in strict.output and "4 already in the catalog" in strict.output

    missing = runner.invoke(app, ["ingest", str(photos), "--manifest", str(photos / "none.csv"), "--out", str(out)])
    assert missing.exit_code == 1 and "Manifest not found" in missing.output and "Fix:" in missing.output


def test_second_batch_renames_edits_and_metadata_only_changes(tmp_path):
    batch1, batch2, out = tmp_path / "batch1", tmp_path / "batch2", tmp_path / "catalog"
    batch1.mkdir()
    batch2.mkdir()
    noise_photo(30).save(batch1 / "IMG_0001.jpg", quality=90)
    noise_photo(33).save(batch1 / "scan.png", exif=gps_exif())
    (tmp_path / "m1.csv").write_text("file,objects\nIMG_0001.jpg,apple\nscan.png,keys\n")
    ingest_photos(batch1, tmp_path / "m1.csv", out)

    # a second batch from another phone: same file name, other photo; plus a copy of a batch-1 photo
    noise_photo(31).save(batch2 / "IMG_0001.jpg", quality=90)
    (batch2 / "IMG_0002.jpg").write_bytes((batch1 / "IMG_0001.jpg").read_bytes())
    (tmp_path / "m2.csv").write_text("file,objects\nIMG_0001.jpg,mug\nIMG_0002.jpg,apple\n")
    second = ingest_photos(batch2, tmp_path / "m2.csv", out)
    assert [a["file"] for a in second.added] == ["IMG_0001.jpg"] and not second.updated
    (dup,) = second.refused
    assert dup.reason == "exact_duplicate" and dup.other == str(batch1.resolve() / "IMG_0001.jpg")
    assert sorted(r.objects[0] for r in read_catalog(out)) == ["apple", "keys", "mug"]

    # renamed inside batch 1 (manifest follows): the record moves, nothing is added
    (batch1 / "IMG_0001.jpg").rename(batch1 / "kitchen.jpg")
    (tmp_path / "m1.csv").write_text("file,objects\nkitchen.jpg,apple\nscan.png,keys\n")
    moved = ingest_photos(batch1, tmp_path / "m1.csv", out)
    assert not moved.added and [u["change"] for u in moved.updated] == ["moved from 'IMG_0001.jpg'"]

    # the batch-2 photo is edited: the new version replaces the old record and its image file
    old = next(r for r in read_catalog(out) if r.objects == ["mug"])
    noise_photo(32).save(batch2 / "IMG_0001.jpg", quality=90)
    edited = ingest_photos(batch2, tmp_path / "m2.csv", out)
    assert [u["change"] for u in edited.updated] == [f"photo changed (was {old.id})"]
    assert not image_path(out, old).exists()

    # only metadata changed (GPS removed): same stored pixels, the record stays, nothing refused
    noise_photo(33).save(batch1 / "scan.png")
    again = ingest_photos(batch1, tmp_path / "m1.csv", out)
    assert not again.added and not again.refused and again.unchanged == 2
    records = read_catalog(out)
    assert len(records) == 3 and all(image_path(out, r).is_file() for r in records)
    assert len(list((out / "images").iterdir())) == 3


def test_cli_prints_names_with_square_brackets_as_written(tmp_path):
    """File and object names are data, not console markup: '[copy]' is shown, '[/]' does not crash the report."""
    photos = tmp_path / "photos"
    photos.mkdir()
    noise_photo(1).save(photos / "b.jpg", quality=90)
    (photos / "b [copy].jpg").write_bytes((photos / "b.jpg").read_bytes())
    noise_photo(2).save(photos / "c.jpg", quality=90)
    (tmp_path / "m.csv").write_text("file,objects\nb.jpg,apple\nb [copy].jpg,apple\nc.jpg,[/]x\n")
    (tmp_path / "objects.txt").write_text("apple\n")
    result = CliRunner().invoke(
        app,
        [
            "ingest",
            str(photos),
            "-m",
            str(tmp_path / "m.csv"),
            "-o",
            str(tmp_path / "cat"),
            "--vocabulary",
            str(tmp_path / "objects.txt"),
        ],
        env={"COLUMNS": "200"},
    )
    assert result.exit_code == 0, result.output
    assert "b [copy].jpg" in result.output and "'[/]x'" in result.output and "1 added" in result.output


def test_cli_error_messages_show_square_brackets_as_written(tmp_path):
    """An error naming user data with '[...]' prints it verbatim (and '[/]' does not crash the error handler)."""
    (tmp_path / "photos").mkdir()
    (tmp_path / "m.csv").write_text("file,objects\na.jpg,apple,[/]\n")
    runner = CliRunner()
    result = runner.invoke(
        app,
        ["ingest", str(tmp_path / "photos"), "-m", str(tmp_path / "m.csv"), "-o", str(tmp_path / "cat")],
        env={"COLUMNS": "200"},
    )
    assert result.exit_code == 1 and "line 2: more values than columns (['[/]'] left over)" in result.output
    result = runner.invoke(
        app,
        ["ingest", str(tmp_path / "photos"), "-m", str(tmp_path / "m [bold].csv"), "-o", str(tmp_path / "cat")],
        env={"COLUMNS": "200"},
    )
    assert result.exit_code == 1 and "m [bold].csv" in result.output
