"""Release figures: written, non-empty, showing the data they claim to (tiny catalog built here)."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from commonlink.constants import NO_COMMON_OBJECTS
from commonlink.formats.catalog import CatalogRecord, write_catalog
from commonlink.kinds.common_o.figures import (
    area_fractions_by_source,
    common_object_count,
    sample_rows,
    unique_images,
    write_common_o_figures,
)

RED = (255, 0, 0)
BLUE = (0, 0, 255)


def _catalog(tmp_path, *, areas: bool, estimated: bool = False):
    cat = tmp_path / "catalog"
    (cat / "images").mkdir(parents=True)
    specs = [
        ("a", ["apple", "keys", "mug"], "synthetic", RED),
        ("b", ["apple", "mug", "duck", "ball"], "synthetic", RED),
        ("c", ["keys", "book", "lamp"], "real", BLUE),
        ("d", ["apple", "book", "lamp", "mug", "cup"], "real", BLUE),
    ]
    records = []
    for ident, objects, source, colour in specs:
        Image.new("RGB", (96, 64), colour).save(cat / "images" / f"{ident}.png")
        area = {name: 0.05 for name in objects} if areas and source == "synthetic" else None
        extra = (
            {"estimated_object_areas": [0.1, 0.2], "area_method": "sam-auto"} if estimated and source == "real" else {}
        )
        records.append(
            CatalogRecord(
                id=ident,
                path=f"images/{ident}.png",
                objects=objects,
                source=source,
                scene_id=ident,
                width=96,
                height=64,
                sha256="0" * 64,
                object_area=area,
                extra=extra,
            )
        )
    write_catalog(cat, records)
    return cat, {r.id: r for r in records}


def _row(cat, rec_1, rec_2, split, index):
    common = sorted(set(rec_1.objects) & set(rec_2.objects)) or [NO_COMMON_OBJECTS]
    choices = sorted(set(rec_1.objects) | set(rec_2.objects)) + [NO_COMMON_OBJECTS]
    answer = ", ".join(chr(65 + i) for i, c in enumerate(choices) if c in common)

    def image(rec):
        return {
            "catalog": str(cat.resolve()),
            "id": rec.id,
            "path": rec.path,
            "scene_id": rec.scene_id,
            "objects": rec.objects,
            "object_area": rec.object_area,
        }

    return {
        "id": f"{split}-{index:08d}",
        "split": split,
        "source": rec_1.source,
        "image_1": image(rec_1),
        "image_2": image(rec_2),
        "choices": choices,
        "ground_truth": common,
        "answer": answer,
    }


def _rows(cat, recs):
    main = [
        _row(cat, recs["a"], recs["b"], "main", 0),
        _row(cat, recs["c"], recs["d"], "main", 1),
        _row(cat, recs["a"], recs["c"], "main", 2),
    ]
    challenge = [_row(cat, recs["b"], recs["a"], "challenge", 0)]
    return {"main": main, "challenge": challenge}


@pytest.mark.slow
def test_figures_written_non_empty_and_linked_relative_to_release(tmp_path):
    cat, recs = _catalog(tmp_path, areas=True)
    out = tmp_path / "release" / "figures"
    written = write_common_o_figures(_rows(cat, recs), out, seed=3)
    assert set(written) == {
        "Objects per image",
        "Object frequency (top 30)",
        "Common objects per example",
        "Object area fraction by source",
        "Sample examples (main)",
        "Sample examples (challenge)",
    }
    for rel in written.values():
        path = tmp_path / "release" / rel
        assert rel.startswith("figures/") and path.suffix == ".png"
        with Image.open(path) as img:
            assert img.width > 300 and img.height > 200
            pixels = np.asarray(img.convert("L"))
        assert pixels.std() > 5, f"{rel} looks blank"
    # no temporary files left behind by the atomic writes
    assert sorted(p.name for p in out.iterdir()) == sorted(rel.split("/")[1] for rel in written.values())


def test_contact_sheet_shows_both_images(tmp_path):
    cat, recs = _catalog(tmp_path, areas=False)
    rows = {"main": [_row(cat, recs["a"], recs["c"], "main", 0)]}  # a is red, c is blue
    written = write_common_o_figures(rows, tmp_path / "rel" / "figures")
    sheet = np.asarray(Image.open(tmp_path / "rel" / written["Sample examples (main)"]).convert("RGB")).astype(int)
    red = ((sheet[..., 0] > 240) & (sheet[..., 1] < 15) & (sheet[..., 2] < 15)).sum()
    blue = ((sheet[..., 2] > 240) & (sheet[..., 0] < 15) & (sheet[..., 1] < 15)).sum()
    assert red > 5000 and blue > 5000
    # no area fractions known anywhere: the area figure is skipped, not drawn empty
    assert "Object area fraction by source" not in written


def test_missing_image_is_drawn_as_placeholder(tmp_path):
    cat, recs = _catalog(tmp_path, areas=False)
    (cat / "images" / "c.png").unlink()
    written = write_common_o_figures({"main": [_row(cat, recs["a"], recs["c"], "main", 0)]}, tmp_path / "r" / "figures")
    assert (tmp_path / "r" / written["Sample examples (main)"]).stat().st_size > 0


def test_statistics_helpers(tmp_path):
    cat, recs = _catalog(tmp_path, areas=True, estimated=True)
    rows = _rows(cat, recs)
    images = unique_images(row for split in rows.values() for row in split)
    assert sorted(img["id"] for img in images) == ["a", "b", "c", "d"]
    assert [common_object_count(r) for r in rows["main"]] == [2, 2, 1]
    areas = area_fractions_by_source(images)
    # synthetic: exact per-object areas from the rows; real: SAM estimates read back from the catalog
    assert sorted(areas["synthetic"]) == [0.05] * 7
    assert sorted(areas["real"]) == [0.1, 0.1, 0.2, 0.2]


def test_sample_rows_is_seeded():
    rows = [{"id": str(i)} for i in range(50)]
    first = sample_rows(rows, 6, seed=1, split="main")
    assert first == sample_rows(rows, 6, seed=1, split="main")
    assert first != sample_rows(rows, 6, seed=2, split="main")
    assert [r["id"] for r in first] == sorted((r["id"] for r in first), key=int)
    assert sample_rows(rows[:3], 6, seed=1, split="main") == rows[:3]


@pytest.mark.parametrize("rows_by_split", [{}, {"main": []}])
def test_nothing_to_draw(tmp_path, rows_by_split):
    assert write_common_o_figures(rows_by_split, tmp_path / "figures") == {}


@pytest.mark.slow
def test_object_frequency_order_does_not_depend_on_string_hashing():
    """Tied object counts are ordered by name, so a rebuilt release has byte-identical figures (sha256 in the
    manifest) whatever PYTHONHASHSEED the process got."""
    import os
    import subprocess
    import sys

    code = (
        "from commonlink.kinds.common_o.figures import _object_frequency_figure\n"
        "imgs = [{'source': 'real', 'objects': [f'obj{i}' for i in range(12)]}]\n"
        "fig = _object_frequency_figure(imgs)\n"
        "print([t.get_text() for t in fig.axes[0].get_yticklabels()])\n"
    )
    outputs = set()
    for hash_seed in ("1", "2", "3"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed, "MPLBACKEND": "Agg"}
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        outputs.add(done.stdout.strip())
    assert len(outputs) == 1
    (labels,) = outputs
    assert labels == str(sorted(f"obj{i}" for i in range(12)))  # all tied: by name, the first at the top
