"""`release build --workers N`: rows verified in worker processes, the release byte-identical to one worker's,
errors still naming the bad row and file, in input order (issue 40)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from commonlink.errors import InputError, SchemaError
from commonlink.fileio import sha256_file
from commonlink.formats.catalog import write_catalog
from commonlink.release import parallel
from commonlink.release.build import build_release
from commonlink.release.parallel import check_workers, ordered_map, usable_cpus
from commonlink.release.staging import ReleaseOptions
from tests.fixtures.catalogs import write_rotating_catalog, write_tiny_pairs
from tests.test_association_release import release  # noqa: F401  (the fixture: chain files of 16 photos)


def release_bytes(folder: Path) -> dict[str, bytes]:
    """Every file of a release, the manifest without its build time (the one field two builds may differ in)."""
    files = {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}
    manifest = json.loads(files.pop("manifest.json"))
    assert manifest.pop("created")
    files["manifest.json"] = json.dumps(manifest, sort_keys=True).encode()
    return files


@pytest.fixture()
def small_chunks(monkeypatch):
    """Chunks of 3 rows, so a tiny input spans many chunks (and the pool is used, with several in flight)."""
    monkeypatch.setattr(parallel, "CHUNK_ITEMS", 3)


def test_two_workers_write_the_same_release_as_one(tmp_path, small_chunks):
    real = write_rotating_catalog(tmp_path / "real", 12)
    synthetic = write_rotating_catalog(tmp_path / "synth", 6, source="synthetic", fmt="PNG")
    write_tiny_pairs(tmp_path / "main.jsonl", tmp_path / "real", real, 25)
    write_tiny_pairs(tmp_path / "challenge.jsonl", tmp_path / "synth", synthetic, 10, split="challenge")
    inputs = [tmp_path / "main.jsonl", tmp_path / "challenge.jsonl"]
    one = build_release(inputs, tmp_path / "one", name="same", progress=False, workers=1)
    two = build_release(inputs, tmp_path / "two", name="same", progress=False, workers=2)
    assert one.splits == two.splits and one.splits["main"]["rows"] == 25
    assert release_bytes(tmp_path / "one") == release_bytes(tmp_path / "two")
    # the build key does not record the number of workers: a rebuild with another number keeps the release
    assert build_release(inputs, tmp_path / "two", name="same", progress=False, workers=1).reused


def test_a_corrupt_image_with_two_workers_fails_naming_its_row_and_file(tmp_path, small_chunks):
    records = write_rotating_catalog(tmp_path / "cat", 8, fmt="PNG")
    bad = tmp_path / "cat" / records[5].path
    bad.write_bytes(bad.read_bytes()[:-40])  # truncated; its sha256 recorded, so only decoding finds it
    records[5].sha256 = sha256_file(bad)
    write_catalog(tmp_path / "cat", records)
    pairs = tmp_path / "main.jsonl"
    write_tiny_pairs(pairs, tmp_path / "cat", records, 30)
    with pytest.raises(InputError) as err:
        build_release([pairs], tmp_path / "rel", progress=False, workers=2)
    # row 5 (in the second chunk) pairs image 4 with image 5 (7 x 4 + 1 = 29 = 5 mod 8): its first use
    assert records[5].path in err.value.problem and "row 5 (id main-00000004): image_2" in err.value.problem
    assert "corrupt or truncated" in err.value.problem and err.value.fix
    with pytest.raises(InputError) as alone:
        build_release([pairs], tmp_path / "rel", progress=False, workers=1)
    assert (err.value.problem, err.value.fix) == (alone.value.problem, alone.value.fix)
    assert not (tmp_path / "rel").exists() and not list(tmp_path.glob(".rel.*"))


def _pid_or_fail(state: dict, item: int) -> tuple[int, int]:
    if item in state["bad"]:
        raise SchemaError(f"item {item} is bad", "drop it")
    return item * item, os.getpid()


def _state() -> dict:
    return {"bad": {17, 30}}


def _items(n: int, fail_at: int | None = None):
    for i in range(n):
        if i == fail_at:
            raise InputError(f"cannot read item {i}")
        yield i


@pytest.mark.parametrize("workers", [1, 2])
def test_results_come_in_order_and_the_first_error_in_input_order_is_raised(workers):
    got = []
    with pytest.raises(SchemaError) as err:  # item 17 fails in a worker; the input fails later, at item 25
        for item, result in ordered_map(_pid_or_fail, _items(40, fail_at=25), setup=_state, workers=workers):
            got.append((item, result[0]))
    assert got == [(i, i * i) for i in range(17)]
    assert err.value.problem == "item 17 is bad" and err.value.fix == "drop it"  # the worker's error, whole
    with pytest.raises(InputError, match="cannot read item 12"):  # the input fails first
        list(ordered_map(_pid_or_fail, _items(40, fail_at=12), setup=_state, workers=workers))


def test_work_runs_in_worker_processes_only_when_there_is_more_than_a_chunk():
    pids = {
        pid
        for _, (_, pid) in ordered_map(
            _pid_or_fail, range(3 * parallel.CHUNK_ITEMS), setup=_state_without_bad, workers=2
        )
    }
    assert os.getpid() not in pids and 1 <= len(pids) <= 2
    few = {pid for _, (_, pid) in ordered_map(_pid_or_fail, range(5), setup=_state_without_bad, workers=2)}
    assert few == {os.getpid()}  # one chunk: no processes started for it


def _state_without_bad() -> dict:
    return {"bad": set()}


def test_workers_are_checked_like_the_command_line_option():
    assert check_workers(None) == usable_cpus() >= 1 and check_workers(3) == 3
    for bad in (0, -2):
        with pytest.raises(InputError, match=f"--workers {bad} must be at least 1"):
            ReleaseOptions(workers=bad)
    with pytest.raises(InputError, match="whole number"):
        ReleaseOptions(workers=1.5)
    assert "workers" not in ReleaseOptions(workers=2).recorded()


def test_association_images_verified_by_two_workers_give_the_same_release(release, tmp_path, small_chunks):  # noqa: F811
    _, chains, _ = release  # 16 photos with GPS (cleaned and re-encoded) and their chain files
    files = sorted(chains.glob("*.jsonl"))
    one = build_release(files, tmp_path / "one", name="assoc", progress=False, workers=1)
    two = build_release(files, tmp_path / "two", name="assoc", progress=False, workers=2)
    assert one.splits == two.splits and one.splits["images"]["rows"] == 16
    assert release_bytes(tmp_path / "one") == release_bytes(tmp_path / "two")
