import json
import os
import re
import sys

import pytest

from commonlink.errors import InputError, SchemaError
from commonlink.fileio import (
    atomic_write,
    parse_jsonl_line,
    read_jsonl,
    safe_join,
    write_jsonl,
)
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


@pytest.mark.parametrize(
    "line",
    [
        '{"a": 1, "b": [1, 2.5, null, true], "c": {"d": "\\u00e9\\ud83d\\ude00"}}\n',
        '{"a": 1}',  # no newline (the last line of a file)
        '{"a": 1} \t\r\n',  # whitespace JSON allows after a value
        '{"a": 1}\x0b\n',  # whitespace to Python, not to JSON: "Extra data"
        '{"a": 1}\u00a0\n',
        '{"a": 1} {"b": 2}\n',
        '{"a": 1}]\n',
        '{"a": NaN, "b": -Infinity}\n',  # json.loads accepts these
        '{"a": "tab\tinside"}\n',  # a raw control character in a string: rejected
        '{"a": 1, "a": 2}\n',  # duplicate keys: the last wins
        '{"a": \n',
        "{oops\n",
        ' {"a": 1}\n',  # leading space: json.loads' path
        '\ufeff{"a": 1}\n',
        '[{"a": 1}]\n',
        '"{"\n',
        "{}\n",
    ],
)
def test_parse_jsonl_line_is_json_loads(line):
    """The raw_decode fast path gives what json.loads gives: the same object, or the same error."""
    try:
        expected = json.loads(line)
    except json.JSONDecodeError as exc:
        with pytest.raises(SchemaError, match=re.escape(f"f.jsonl, line 3: not valid JSON ({exc.msg}).")):
            parse_jsonl_line("f.jsonl", 3, line)
        return
    if not isinstance(expected, dict):
        with pytest.raises(SchemaError, match=f"expected a JSON object, got {type(expected).__name__}"):
            parse_jsonl_line("f.jsonl", 3, line)
        return
    got = parse_jsonl_line("f.jsonl", 3, line)
    assert json.dumps(got) == json.dumps(expected) and list(got) == list(expected)


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


def test_lazy_package_imports_a_name_from_its_module_on_first_use():
    import types

    from commonlink.lazy import lazy_package

    package = types.ModuleType("fake_package")
    sys.modules["fake_package"] = package
    try:
        getattr_, dir_, names = lazy_package("fake_package", {"json": ["dumps", "loads"], "os.path": ["join"]})
        assert names == ["dumps", "join", "loads"]
        assert getattr_("join") is os.path.join and getattr_("dumps") is json.dumps
        assert {"dumps", "join", "loads"} <= set(dir_())
        with pytest.raises(AttributeError, match="module 'fake_package' has no attribute 'load'"):
            getattr_("load")
    finally:
        del sys.modules["fake_package"]
