"""Ingest's journal (commonlink.catalog.ingest_log): bounded checkpoint cost, one fsync a batch, and a catalog
that survives a kill -9 at each point of the new format: after an image and before its journal line, after a
journal append, in the middle of one (a torn last line), and after a fold's rename but before the journal's
removal. Each kill is a real process death (``os._exit`` in a child, so no ``finally`` runs), then a second run
must finish the job with every photo exactly once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import commonlink.catalog.ingest_log as log_mod
from commonlink.catalog.ingest import ingest_photos
from commonlink.catalog.ingest_log import JOURNAL_FILENAME, replay_journal
from commonlink.errors import SchemaError
from commonlink.formats.catalog import image_path, read_catalog

ROOT = Path(__file__).resolve().parents[1]
N = 12


@pytest.fixture
def photos(tmp_path):
    folder = tmp_path / "photos"
    folder.mkdir()
    lines = ["file,objects"]
    for i in range(N):
        blocks = (np.random.default_rng(i).random((6, 8, 3)) * 255).astype(np.uint8)
        Image.fromarray(blocks).resize((80, 60), Image.NEAREST).save(folder / f"p{i:02d}.png")
        lines.append(f"p{i:02d}.png,apple")
    manifest = tmp_path / "labels.csv"
    manifest.write_text("\n".join(lines) + "\n")
    return folder, manifest, tmp_path / "catalog"


def _run_child(folder: Path, manifest: Path, out: Path, crash: str, after: int) -> int:
    """Ingest in a child process that dies (os._exit, like kill -9) at ``crash`` on its ``after``-th pass there."""
    code = textwrap.dedent(f"""
        import os, sys
        import commonlink.catalog.ingest as ingest_mod
        import commonlink.catalog.ingest_log as log_mod
        calls = {{"n": 0}}
        def die_after(real):
            def wrapper(*args, **kwargs):
                result = real(*args, **kwargs)
                calls["n"] += 1
                if calls["n"] == {after}:
                    os._exit(137)
                return result
            return wrapper
        crash = {crash!r}
        if crash == "mid_image":  # the temporary file of an image written, not yet renamed
            from commonlink.fileio import make_temp_beside
            real_write = ingest_mod.atomic_write_bytes
            def half_write(path, data, **kwargs):
                calls["n"] += 1
                if calls["n"] == {after}:
                    fd, _ = make_temp_beside(path)
                    os.write(fd, data[: len(data) // 2])
                    os._exit(137)
                return real_write(path, data, **kwargs)
            ingest_mod.atomic_write_bytes = half_write
        if crash == "after_image":
            ingest_mod.atomic_write_bytes = die_after(ingest_mod.atomic_write_bytes)
        elif crash == "after_append":
            log_mod.CatalogJournal.flush = die_after(log_mod.CatalogJournal.flush)
        elif crash == "after_fold_rename":
            log_mod.write_catalog = die_after(log_mod.write_catalog)
        ingest_mod.ingest_photos({str(folder)!r}, {str(manifest)!r}, {str(out)!r}, checkpoint_every=2, min_pixels=1)
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, check=False
    ).returncode


def _consistent(out: Path) -> list:
    """The catalog as any reader sees it: parseable, every image in place."""
    records = read_catalog(out) if (out / "catalog.jsonl").is_file() else []
    assert all(image_path(out, r).is_file() for r in records)
    return records


def _finish_and_check(folder: Path, manifest: Path, out: Path, kept: int | None = None) -> None:
    """A second run completes the catalog; ``kept``: photos the killed run finished (not ingested again)."""
    report = ingest_photos(folder, manifest, out, checkpoint_every=2, min_pixels=1)
    if kept is not None:
        assert report.unchanged == kept
    records = _consistent(out)
    assert sorted(r.extra["source_file"] for r in records) == [f"p{i:02d}.png" for i in range(N)]
    assert len(report.added) + report.unchanged == N and not report.refused and not report.updated
    assert not (out / JOURNAL_FILENAME).exists()
    assert len(list((out / "images").iterdir())) == N  # orphans reused, half-written temporary files removed


@pytest.mark.parametrize(
    ("crash", "after", "kept"),
    [("mid_image", 5, 4), ("after_image", 5, 4), ("after_append", 3, 6), ("after_fold_rename", 2, 4)],
)
def test_a_run_killed_at_each_point_leaves_a_readable_catalog_and_the_next_run_finishes(photos, crash, after, kept):
    folder, manifest, out = photos
    assert _run_child(folder, manifest, out, crash, after) == 137
    before = _consistent(out)
    journal = out / JOURNAL_FILENAME
    if crash == "after_append":
        assert journal.is_file() and journal.read_text().endswith("\n")  # finished work kept in the journal
        replayed = {r.id: r for r in before}
        assert replay_journal(out, replayed) > 0 and len(replayed) > len(before)
    if crash == "after_fold_rename":
        assert journal.is_file() and len(before) == 4  # folded twice (2, then 4 records); the journal not yet removed
    _finish_and_check(folder, manifest, out, kept)


def test_a_torn_last_journal_line_is_skipped_and_its_photo_ingested_again(photos):
    folder, manifest, out = photos
    assert _run_child(folder, manifest, out, "after_append", 3) == 137
    journal = out / JOURNAL_FILENAME
    full = journal.read_text()
    torn = full[: len(full) - 40]  # a kill in the middle of appending the last line
    journal.write_text(torn)
    records = {r.id: r for r in read_catalog(out)}
    complete_lines = torn.count("\n")
    assert replay_journal(out, records) == complete_lines == 1
    _finish_and_check(folder, manifest, out, kept=4 + 1)


def test_a_damaged_line_before_the_end_is_an_error_naming_the_fix(photos):
    folder, manifest, out = photos
    assert _run_child(folder, manifest, out, "after_append", 3) == 137
    journal = out / JOURNAL_FILENAME
    lines = journal.read_text().splitlines(keepends=True)
    journal.write_text("{not json\n" + "".join(lines))
    with pytest.raises(SchemaError, match=r"line 1: not a journal line") as err:
        ingest_photos(folder, manifest, out, checkpoint_every=2, min_pixels=1)
    assert "Remove .ingest-journal.jsonl" in err.value.fix


def test_a_sigkilled_run_resumes(photos):
    """The real signal, at whatever moment it lands."""
    folder, manifest, out = photos
    code = (
        f"import commonlink.catalog.ingest as m; m.ingest_photos({str(folder)!r}, {str(manifest)!r}, {str(out)!r}, "
        "checkpoint_every=1, min_pixels=1)"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    child = subprocess.Popen([sys.executable, "-c", code], env=env, cwd=ROOT)
    deadline = time.monotonic() + 60
    while not (out / "images").is_dir() and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    child.send_signal(signal.SIGKILL)
    child.wait()
    _consistent(out)
    _finish_and_check(folder, manifest, out)


def test_checkpoints_cost_a_bounded_number_of_catalog_rewrites_and_one_fsync_batch_each(photos, monkeypatch):
    """Folds at 2, 4, 8 records and at the end (not at every checkpoint), and the journal is fsynced once a batch."""
    folder, manifest, out = photos
    folds, journal_fsyncs = [], []
    real_write = log_mod.write_catalog

    def counting_write(folder_, records):
        records = list(records)
        folds.append(len(records))
        return real_write(folder_, records)

    real_flush = log_mod.CatalogJournal.flush

    def counting_flush(self):
        if self._ops:
            journal_fsyncs.append(len(self._ops))
        return real_flush(self)

    monkeypatch.setattr(log_mod, "write_catalog", counting_write)
    monkeypatch.setattr(log_mod.CatalogJournal, "flush", counting_flush)
    ingest_photos(folder, manifest, out, checkpoint_every=2, min_pixels=1)
    assert folds == [2, 4, 8, 12]  # geometric, then the end: N + N/2 + ... records written, not N^2 / 2
    assert journal_fsyncs == [2] * (N // 2)
    assert json.loads((out / "catalog.jsonl").read_text().splitlines()[0])["extra"]["source_file"] == "p00.png"
