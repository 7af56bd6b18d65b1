"""`catalog merge` (de-duplication, conflicts, path collisions, verification, idempotency) and `catalog info`."""

from __future__ import annotations

import json

import pytest
from PIL import Image
from typer.testing import CliRunner

from commonlink.catalog.info import catalog_summary
from commonlink.catalog.merge import merge_catalogs
from commonlink.cli import app
from commonlink.errors import InputError, SchemaError
from commonlink.fileio import sha256_file
from commonlink.formats.catalog import image_path, read_catalog, write_catalog
from tests.fixtures.catalogs import write_tiny_catalog


def make_catalog(root, specs):
    """A catalog written the way a render shard would be: images/<n>.png of seeded noise, ids from the file hash."""
    return write_tiny_catalog(
        root,
        [
            {
                "objects": objects,
                "seed": seed,
                "scene_id": scene,
                "source": "synthetic",
                "view": str(seed % 4),
                "name": f"{n:04d}.png",
                "object_area": {o: 0.05 for o in objects},
            }
            for n, (seed, objects, scene) in enumerate(specs)
        ],
    )


def test_merge_dedupes_renames_colliding_paths_and_is_idempotent(tmp_path):
    a = make_catalog(tmp_path / "a", [(1, ["duck", "mug"], "s1"), (2, ["mug"], "s1")])
    b = make_catalog(
        tmp_path / "b", [(2, ["mug"], "s1"), (3, ["apple", "duck", "mug"], "s2")]
    )  # seed 2 = same image as a[1]
    out = tmp_path / "merged"
    report = merge_catalogs([tmp_path / "a", tmp_path / "b"], out)

    merged = read_catalog(out)
    assert [r.id for r in merged] == [a[0].id, a[1].id, b[1].id]
    assert report.added == 3 and report.duplicates == 1 and report.images_written == 3
    # b's images/0001.png collides with a's images/0001.png (another image): stored under its id instead
    assert merged[2].path == f"images/{b[1].id}.png"
    assert report.renamed == [
        {"catalog": str(tmp_path / "b"), "id": b[1].id, "from": "images/0001.png", "to": merged[2].path}
    ]
    for record in merged:
        assert sha256_file(image_path(out, record)) == record.sha256
    assert merged[2].object_area == {"apple": 0.05, "duck": 0.05, "mug": 0.05}

    before = (out / "catalog.jsonl").read_bytes()
    again = merge_catalogs([tmp_path / "a", tmp_path / "b"], out)
    assert (out / "catalog.jsonl").read_bytes() == before
    assert again.added == 0 and again.already_present == 3 and again.images_written == 0

    # a later shard extends the merged catalog
    make_catalog(tmp_path / "c", [(9, ["keys"], "s9")])
    merge_catalogs([tmp_path / "c"], out)
    assert len(read_catalog(out)) == 4


def test_conflicting_records_are_refused_and_nothing_is_written(tmp_path):
    make_catalog(tmp_path / "a", [(1, ["duck", "mug"], "s1")])
    make_catalog(tmp_path / "b", [(1, ["duck"], "s1")])  # same image, other labels
    out = tmp_path / "merged"
    with pytest.raises(InputError, match=r"(?s)1 conflicting record.*objects: \['duck', 'mug'\] vs \['duck'\]") as err:
        merge_catalogs([tmp_path / "a", tmp_path / "b"], out)
    assert "Nothing was written" in err.value.fix
    assert not out.exists()


def test_missing_and_damaged_images_are_refused(tmp_path):
    recs = make_catalog(tmp_path / "a", [(1, ["duck"], "s1"), (2, ["mug"], "s1")])
    (tmp_path / "a" / recs[1].path).unlink()
    with pytest.raises(InputError, match="1 image file"):
        merge_catalogs([tmp_path / "a"], tmp_path / "out")
    assert not (tmp_path / "out" / "catalog.jsonl").exists()

    recs = make_catalog(tmp_path / "b", [(3, ["duck"], "s1")])
    Image.new("RGB", (8, 8), "red").save(tmp_path / "b" / recs[0].path)  # changed after the catalog was written
    with pytest.raises(SchemaError, match="does not match the record's sha256"):
        merge_catalogs([tmp_path / "b"], tmp_path / "out2")
    assert not (tmp_path / "out2" / "catalog.jsonl").exists()
    assert not list((tmp_path / "out2").rglob("*.tmp"))
    merge_catalogs([tmp_path / "b"], tmp_path / "out3", verify=False)  # the user may insist
    assert len(read_catalog(tmp_path / "out3")) == 1


def test_merge_links_and_refuses_bad_arguments(tmp_path):
    make_catalog(tmp_path / "a", [(1, ["duck"], "s1")])
    merge_catalogs([tmp_path / "a"], tmp_path / "hard", link="hardlink")
    merge_catalogs([tmp_path / "a"], tmp_path / "soft", link="symlink")
    (rec,) = read_catalog(tmp_path / "hard")
    assert (tmp_path / "hard" / rec.path).stat().st_ino == (tmp_path / "a" / "images/0000.png").stat().st_ino
    assert (tmp_path / "soft" / rec.path).is_symlink()
    with pytest.raises(InputError, match="Unknown link mode"):
        merge_catalogs([tmp_path / "a"], tmp_path / "x", link="teleport")
    with pytest.raises(InputError, match="not an image catalog"):
        merge_catalogs([tmp_path / "nothing"], tmp_path / "x")


def test_catalog_info_counts(tmp_path):
    make_catalog(tmp_path / "a", [(1, ["duck", "mug"], "s1"), (2, ["mug"], "s1"), (3, ["apple", "duck", "mug"], "s2")])
    summary = catalog_summary(tmp_path / "a", top=2)
    assert summary["images"] == 3 and summary["sources"] == {"synthetic": 3} and summary["scenes"] == 2
    assert summary["objects_per_image"] == {"min": 1, "mean": 2.0, "max": 3, "histogram": {"1": 1, "2": 1, "3": 1}}
    assert summary["top_objects"] == [["mug", 3], ["duck", 2]]
    assert (
        summary["distinct_objects"] == 3 and summary["missing_images"] == [] and summary["images_with_object_area"] == 3
    )


def test_cli_merge_and_info(tmp_path):
    make_catalog(tmp_path / "a", [(1, ["duck", "mug"], "s1")])
    make_catalog(tmp_path / "b", [(2, ["Mug"], "s2")])
    runner = CliRunner()
    result = runner.invoke(
        app,
        ["catalog", "merge", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "m")],
        env={"COLUMNS": "200"},
    )
    assert result.exit_code == 0, result.output
    assert "2 record(s) added" in result.output and "images/0000.png stored as" in result.output

    info = runner.invoke(app, ["catalog", "info", str(tmp_path / "m"), "--json"])
    assert info.exit_code == 0, info.output
    assert json.loads(info.output)["images"] == 2
    table = runner.invoke(app, ["catalog", "info", str(tmp_path / "m")], env={"COLUMNS": "200"})
    assert table.exit_code == 0 and "objects per image" in table.output and "duck" in table.output

    (tmp_path / "m" / read_catalog(tmp_path / "m")[0].path).unlink()
    broken = runner.invoke(app, ["catalog", "info", str(tmp_path / "m")], env={"COLUMNS": "200"})
    assert broken.exit_code == 1 and "Missing image files" in broken.output

    conflict = runner.invoke(app, ["catalog", "merge", str(tmp_path / "a"), "--out", str(tmp_path / "a2")])
    assert conflict.exit_code == 0
    make_catalog(tmp_path / "c", [(1, ["duck"], "s1")])
    refused = runner.invoke(app, ["catalog", "merge", str(tmp_path / "c"), "--out", str(tmp_path / "a2")])
    assert refused.exit_code == 1 and "conflicting" in refused.output and "Fix:" in refused.output


def test_a_catalog_being_written_is_not_written_twice(tmp_path):
    from commonlink.catalog.ingest import ingest_photos
    from commonlink.formats.catalog import catalog_lock

    make_catalog(tmp_path / "a", [(1, ["duck"], "s1")])
    (tmp_path / "photos").mkdir()
    Image.new("RGB", (300, 300), "red").save(tmp_path / "photos" / "p.png")
    (tmp_path / "m.csv").write_text("file,objects\np.png,duck\n")
    with catalog_lock(tmp_path / "out", what="another merge"):
        with pytest.raises(InputError, match=r"being written by another merge \(pid"):
            merge_catalogs([tmp_path / "a"], tmp_path / "out")
        with pytest.raises(InputError, match="being written by another merge"):
            ingest_photos(tmp_path / "photos", tmp_path / "m.csv", tmp_path / "out")
    merge_catalogs([tmp_path / "a"], tmp_path / "out")  # released: works
    ingest_photos(tmp_path / "photos", tmp_path / "m.csv", tmp_path / "out")
    assert len(read_catalog(tmp_path / "out")) == 2


def test_merge_into_one_of_the_inputs_adds_the_others(tmp_path):
    a = make_catalog(tmp_path / "a", [(1, ["duck"], "s1")])
    b = make_catalog(tmp_path / "b", [(2, ["mug"], "s2")])
    report = merge_catalogs([tmp_path / "a", tmp_path / "b"], tmp_path / "a")
    assert report.already_present == 1 and report.added == 1 and report.images_written == 1
    merged = read_catalog(tmp_path / "a")
    assert [r.id for r in merged] == [a[0].id, b[0].id]
    assert merged[1].path == f"images/{b[0].id}.png"  # images/0000.png is a's own image
    assert sha256_file(image_path(tmp_path / "a", merged[1])) == b[0].sha256


@pytest.mark.slow
def test_merging_render_shards_brings_masks_and_plans_along(tmp_path):
    """Shards rendered on different machines merge into a catalog whose exact masks still resolve."""
    import pytest

    pytest.importorskip("pyrender")
    from commonlink.catalog.areas import mask_area_fractions, mask_for, read_instance_mask
    from commonlink.catalog.merge import merge_catalogs
    from commonlink.formats.catalog import read_catalog
    from commonlink.synth.job import SynthJob
    from commonlink.synth.plan import PlanConfig
    from commonlink.synth.runner import synthesize

    config = SynthJob(scenes=2, seed=5, plan=PlanConfig(3, 4, views=2, width=64, height=64))
    synthesize(tmp_path / "a", config, shard=(0, 2), progress=False)
    synthesize(tmp_path / "b", config, shard=(1, 2), progress=False)
    report = merge_catalogs([tmp_path / "a", tmp_path / "b"], tmp_path / "merged")
    assert report.added == 4 and report.sidecars_written == 2 * 2 + 2  # 4 masks, 2 plans
    merged = tmp_path / "merged"
    for record in read_catalog(merged):
        assert (merged / record.extra["mask"]).is_file() and (merged / record.extra["plan"]).is_file()
        path, id_to_name = mask_for(merged, record)
        assert path.resolve().is_relative_to(merged.resolve())
        areas = mask_area_fractions(read_instance_mask(path), id_to_name)
        assert {k: round(v, 6) for k, v in areas.items() if k in record.object_area} == {
            k: round(v, 6) for k, v in record.object_area.items()
        }


def test_merging_into_an_existing_catalog_keeps_its_masks(tmp_path):
    """A later merge must not overwrite a mask that a record already in the output catalog names."""
    for name, seed in (("a", 1), ("b", 2)):
        records = make_catalog(tmp_path / name, [(seed, ["duck"], f"s{seed}")])
        (tmp_path / name / "masks").mkdir()
        (tmp_path / name / "masks" / "mask_0.png").write_bytes(f"mask of {name}".encode())
        records[0].extra["mask"] = "masks/mask_0.png"
        write_catalog(tmp_path / name, records)
    out = tmp_path / "out"
    merge_catalogs([tmp_path / "a"], out)
    merge_catalogs([tmp_path / "b"], out)
    first, second = read_catalog(out)
    assert (out / first.extra["mask"]).read_bytes() == b"mask of a"
    assert (out / second.extra["mask"]).read_bytes() == b"mask of b"


def test_symlinked_merge_reports_why_its_images_cannot_be_read(tmp_path):
    """Readers refuse links leading out of a catalog; the error must say that --link symlink made them and how to
    fix."""
    from commonlink.kinds.common_o.release import CatalogImageReader

    make_catalog(tmp_path / "a", [(1, ["duck"], "s1")])
    merge_catalogs([tmp_path / "a"], tmp_path / "soft", link="symlink")
    (rec,) = read_catalog(tmp_path / "soft")
    with pytest.raises(InputError, match="symbolic link") as err:
        image_path(tmp_path / "soft", rec)
    assert "--link copy" in err.value.fix
    with pytest.raises(InputError, match="symbolic link") as err:
        CatalogImageReader().read(str(tmp_path / "soft"), rec.path, what="row 1: image_1")
    assert "--link copy" in err.value.fix


@pytest.mark.parametrize("field, value", [("width", "abc"), ("height", -3), ("width", 12.5), ("id", 7), ("path", None)])
def test_hand_edited_record_with_a_wrong_type_is_a_schema_error(tmp_path, field, value):
    """A catalog line with a wrong-typed field names the line and the field (it was a TypeError deep inside)."""
    (record,) = make_catalog(tmp_path / "a", [(1, ["duck"], "s1")])
    row = {**record.to_json(), field: value}
    (tmp_path / "a" / "catalog.jsonl").write_text(json.dumps(row) + "\n")
    with pytest.raises(SchemaError, match=f"line 1.*{field}"):
        read_catalog(tmp_path / "a")
    result = CliRunner().invoke(app, ["catalog", "info", str(tmp_path / "a")], env={"COLUMNS": "200"})
    assert result.exit_code == 1 and field in result.output and "Traceback" not in result.output


def test_catalog_info_refuses_a_negative_top(tmp_path):
    make_catalog(tmp_path / "a", [(1, ["duck", "mug"], "s1")])
    result = CliRunner().invoke(app, ["catalog", "info", str(tmp_path / "a"), "--top", "-1"], env={"COLUMNS": "200"})
    assert result.exit_code == 2 and "--top" in result.output  # was: every object but the last listed


def _stamped_catalog(root, seeds):
    """A catalog whose records carry file stamps, as ingest writes them."""
    from commonlink.formats.catalog import FILE_STAMP_KEY, file_stamp

    records = make_catalog(root, [(seed, ["duck"], f"s{seed}") for seed in seeds])
    for record in records:
        record.extra[FILE_STAMP_KEY] = file_stamp(image_path(root, record))
    write_catalog(root, records)
    return records


def test_merge_trusts_a_recorded_sha256_only_while_the_file_stamp_matches(tmp_path, monkeypatch):
    import os

    import commonlink.catalog.merge as merge_mod

    records = _stamped_catalog(tmp_path / "a", [1, 2, 3])
    hashed = []
    real_copy_into = merge_mod._copy_into

    def copy_into(source, fd, tmp, source_stat, *, hashing):
        if hashing:
            hashed.append(source.name)
        return real_copy_into(source, fd, tmp, source_stat, hashing=hashing)

    monkeypatch.setattr(merge_mod, "_copy_into", copy_into)
    report = merge_catalogs([tmp_path / "a"], tmp_path / "out")
    assert report.hashes_reused == 3 and hashed == []  # no image read twice
    merged = read_catalog(tmp_path / "out")
    for record in merged:  # the copies keep the stamp valid: merging the merged catalog reuses the hashes again
        assert record.extra["file_stamp"] == [
            os.stat(image_path(tmp_path / "out", record)).st_size,
            os.stat(image_path(tmp_path / "out", record)).st_mtime_ns,
        ]
    assert merge_catalogs([tmp_path / "out"], tmp_path / "again").hashes_reused == 3

    # A changed file (new mtime) is hashed, and the damage is found.
    damaged = image_path(tmp_path / "a", records[1])
    damaged.write_bytes(damaged.read_bytes()[:-1] + b"\0")
    with pytest.raises(SchemaError, match="does not match the record's sha256"):
        merge_catalogs([tmp_path / "a"], tmp_path / "out2")
    assert hashed == ["0001.png"]  # the unchanged first image was trusted, the changed one hashed


def test_rehash_finds_damage_that_kept_size_and_mtime(tmp_path):
    import os

    records = _stamped_catalog(tmp_path / "a", [1, 2])
    damaged = image_path(tmp_path / "a", records[0])
    before = os.stat(damaged)
    data = bytearray(damaged.read_bytes())
    data[-1] ^= 0xFF
    damaged.write_bytes(bytes(data))
    os.utime(damaged, ns=(before.st_atime_ns, before.st_mtime_ns))  # same size, same mtime: the stamp cannot tell
    assert merge_catalogs([tmp_path / "a"], tmp_path / "trusted").hashes_reused == 2
    result = CliRunner().invoke(
        app, ["catalog", "merge", str(tmp_path / "a"), "--out", str(tmp_path / "checked"), "--rehash"]
    )
    assert result.exit_code == 1 and "does not match the record's sha256" in result.output
    assert not (tmp_path / "checked" / "catalog.jsonl").exists()


def test_merge_fsyncs_the_batch_once_at_the_end_not_as_it_copies(tmp_path, monkeypatch):
    import commonlink.catalog.merge as merge_mod

    _stamped_catalog(tmp_path / "a", [1, 2, 3])
    events = []
    monkeypatch.setattr(merge_mod.os, "fsync", lambda fd: events.append("fsync"))
    monkeypatch.setattr(merge_mod, "fsync_files", lambda paths: events.append(("batch", len(list(paths)))))
    report = merge_catalogs([tmp_path / "a"], tmp_path / "out")
    assert report.images_written == 3
    assert events == [("batch", 3), "fsync"]  # no fsync per image: the batch, then catalog.jsonl's own
    assert len(read_catalog(tmp_path / "out")) == 3


def test_a_half_written_image_is_replaced_and_a_link_at_the_path_is_never_written_through(tmp_path):
    """Images go straight to their final names (the catalog names them only after the batch's fsync): what a
    killed merge left at a path is replaced, and a hard link found there (into another catalog) is unlinked,
    not overwritten."""
    import os

    records = make_catalog(tmp_path / "a", [(1, ["duck"], "s1"), (2, ["mug"], "s2")])
    out = tmp_path / "out"
    (out / "images").mkdir(parents=True)
    good = image_path(tmp_path / "a", records[0]).read_bytes()
    (out / records[0].path).write_bytes(good[: len(good) // 2])  # a kill in the middle of the copy
    victim = tmp_path / "other_catalog_image.png"
    victim.write_bytes(b"another catalog's image")
    os.link(victim, out / records[1].path)
    report = merge_catalogs([tmp_path / "a"], out)
    assert report.images_written == 2 and report.images_in_place == 0
    for record in read_catalog(out):
        assert sha256_file(image_path(out, record)) == record.sha256
    assert victim.read_bytes() == b"another catalog's image"
