"""Ingest and scenes: declared views of one scene refused as near-duplicates say so and name the option; folders that
silently become a few large scenes are warned about."""

from __future__ import annotations

import json

import numpy as np
from PIL import Image
from typer.testing import CliRunner

from commonlink.catalog import ingest_photos
from commonlink.cli import app


def _photo(path, seed, *, shift=0):
    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 255, (12, 16, 3), dtype=np.uint8).repeat(8, 0).repeat(8, 1)
    pixels = np.clip(pixels.astype(int) + shift, 0, 255).astype(np.uint8)  # a second shot from the same spot
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(pixels).save(path)


def test_a_near_duplicate_of_a_declared_view_of_the_same_scene_says_so(tmp_path):
    photos = tmp_path / "photos"
    _photo(photos / "kitchen-1.png", 1)
    _photo(photos / "kitchen-2.png", 1, shift=3)
    _photo(photos / "office.png", 2)
    manifest = tmp_path / "labels.csv"
    manifest.write_text(
        "file,objects,scene,view\n"
        "kitchen-1.png,cup;plate,kitchen,1\n"
        "kitchen-2.png,cup;plate,kitchen,2\n"
        "office.png,pen;lamp,office,1\n"
    )
    report = ingest_photos(photos, manifest, tmp_path / "catalog", min_pixels=100)
    [refusal] = report.refused
    assert refusal.reason == "near_duplicate" and refusal.file == "kitchen-2.png"
    assert "another view of the same scene 'kitchen'" in refusal.detail and "--allow-near-duplicates" in refusal.detail

    kept = ingest_photos(photos, manifest, tmp_path / "catalog-both", min_pixels=100, allow_near_duplicates=True)
    assert not kept.refused and len(kept.added) == 3


def test_a_near_duplicate_across_scenes_keeps_the_plain_message(tmp_path):
    photos = tmp_path / "photos"
    _photo(photos / "a.png", 1)
    _photo(photos / "b.png", 1, shift=3)
    manifest = tmp_path / "labels.csv"
    manifest.write_text("file,objects,scene\na.png,cup,one\nb.png,cup,two\n")
    [refusal] = ingest_photos(photos, manifest, tmp_path / "catalog", min_pixels=100).refused
    assert refusal.reason == "near_duplicate" and "same scene" not in refusal.detail


def test_folders_that_become_large_scenes_are_warned_about(tmp_path):
    photos = tmp_path / "photos"
    lines = ["file,objects"]
    for i in range(24):
        folder = "trip-a" if i < 12 else "trip-b"
        _photo(photos / folder / f"p{i:02d}.png", 100 + i)
        lines.append(f"{folder}/p{i:02d}.png,cup;pen")
    _photo(photos / "loose.png", 7)
    lines.append("loose.png,cup")
    manifest = tmp_path / "labels.csv"
    manifest.write_text("\n".join(lines) + "\n")
    out = tmp_path / "catalog"
    result = CliRunner().invoke(
        app, ["ingest", str(photos), "--manifest", str(manifest), "--out", str(out), "--min-pixels", "100"]
    )
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "each folder became one scene" in text and "'trip-a' (12 photos)" in text and "scene` column" in text
    assert json.loads((out / "ingest_report.json").read_text())["folder_scenes"] == {"trip-a": 12, "trip-b": 12}

    declared = tmp_path / "declared.csv"  # with a scene column the same photos give no warning
    declared.write_text("\n".join(["file,objects,scene"] + [f"{line},s{i}" for i, line in enumerate(lines[1:])]) + "\n")
    again = CliRunner().invoke(
        app, ["ingest", str(photos), "--manifest", str(declared), "--out", str(tmp_path / "c2"), "--min-pixels", "100"]
    )
    assert again.exit_code == 0, again.output
    assert "each folder became one scene" not in again.output
