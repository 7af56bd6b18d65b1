import json

import pytest

from commonlink.errors import InputError, SchemaError
from commonlink.fileio import atomic_write, read_jsonl, safe_join, write_jsonl
from commonlink.seeding import rng_for


def test_atomic_write_keeps_old_file_on_failure(tmp_path):
    target = tmp_path / "a.txt"
    target.write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_write(target) as fh:
            fh.write("new partial")
            raise RuntimeError("boom")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["a.txt"]


def test_jsonl_roundtrip_and_bad_line(tmp_path):
    path = tmp_path / "x.jsonl"
    assert write_jsonl(path, [{"a": 1}, {"b": 2}]) == 2
    assert list(read_jsonl(path)) == [{"a": 1}, {"b": 2}]
    path.write_text(json.dumps({"a": 1}) + "\n{oops\n")
    with pytest.raises(SchemaError, match="line 2"):
        list(read_jsonl(path))


def test_safe_join_refuses_escape(tmp_path):
    assert safe_join(tmp_path, "a/b.jpg") == (tmp_path / "a/b.jpg").resolve()
    with pytest.raises(InputError, match="escapes"):
        safe_join(tmp_path, "../x.jpg")
    with pytest.raises(InputError, match="absolute"):
        safe_join(tmp_path, "/etc/passwd")


def test_rng_for_is_independent_of_order():
    a = rng_for(7, "scene", 3).integers(0, 1 << 30, 5)
    rng_for(7, "scene", 2).integers(0, 10, 100)
    b = rng_for(7, "scene", 3).integers(0, 1 << 30, 5)
    assert (a == b).all()
    assert not (rng_for(8, "scene", 3).integers(0, 1 << 30, 5) == a).all()


def test_atomic_write_respects_umask(tmp_path):
    import os

    old = os.umask(0o022)
    try:
        with atomic_write(tmp_path / "p.txt") as fh:
            fh.write("x")
    finally:
        os.umask(old)
    assert (tmp_path / "p.txt").stat().st_mode & 0o777 == 0o644


def test_progress_description_is_shown_as_written():
    """Descriptions name user files ('[v2] main.jsonl'); they must not be read as rich markup (a '[/]' crashed)."""
    from commonlink.progress import make_progress

    progress = make_progress()
    progress.add_task("main: [/] and [v2] main.jsonl", total=1)
    assert progress.columns[0].render(progress.tasks[0]).plain == "main: [/] and [v2] main.jsonl"
