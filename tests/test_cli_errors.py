"""Every command turns an operating-system error on its output (read-only disk, full disk, no permission, a file
where a folder belongs and the other way round) into ``Error: ... Fix: ...`` naming the path, never a traceback.

Tests run as root, which ignores permissions, so the read-only, full and forbidden disks are simulated: the
write calls (``open``, ``os.open``, ``os.mkdir``, ``os.replace``) raise the errno the kernel would, for paths
under the output only. File/folder mismatches are real paths.
"""

from __future__ import annotations

import builtins
import errno
import io
import os
from pathlib import Path

import pytest
from PIL import Image
from typer.testing import CliRunner

from commonlink.cli import app
from tests.fixtures.catalogs import family_scenes
from tests.fixtures.catalogs import write_scene_catalog as make_pairs_catalog

WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("inputs")
    catalog = make_pairs_catalog(root / "catalog", "real", family_scenes(24, seed=1), views=3, seed=1)
    pairs = root / "pairs.jsonl"
    result = CliRunner().invoke(app, ["pairs", str(catalog), "--out", str(pairs), "--count", "8"])
    assert result.exit_code == 0, result.output
    photos = root / "photos"
    photos.mkdir()
    for i in range(3):
        Image.new("RGB", (300, 300), (40 * i, 90, 10)).save(photos / f"p{i}.jpg")
    (root / "manifest.csv").write_text("file,objects\n" + "".join(f"p{i}.jpg,apple;keys;mug\n" for i in range(3)))
    from tests.fixtures.tiny_models import common_o_rows, write_common_o_split

    data = write_common_o_split(root / "data", common_o_rows(3, seed=1))
    return {"catalog": catalog, "pairs": pairs, "photos": photos, "manifest": root / "manifest.csv", "data": data}


def _stats_copy(inputs, out: Path) -> list[str]:
    # stats writes into the catalog it measures: its output is a catalog of its own (a merge of the input)
    return ["stats", str(out)]


# command -> (arguments writing to OUT, whether OUT is a file (else a folder))
COMMANDS = {
    "pairs": (lambda i, out: ["pairs", str(i["catalog"]), "--out", str(out), "--count", "8"], True),
    "chains": (
        lambda i, out: [
            "chains",
            str(i["catalog"]),
            "--out",
            str(out),
            "--tasks",
            "single_step",
            "--single-steps",
            "2",
            "--top-k",
            "2",
            "--min-pixels",
            "1",
        ],
        False,
    ),
    "release build": (lambda i, out: ["release", "build", str(i["pairs"]), "--out", str(out), "--no-progress"], False),
    "ingest": (lambda i, out: ["ingest", str(i["photos"]), "--manifest", str(i["manifest"]), "--out", str(out)], False),
    "catalog merge": (lambda i, out: ["catalog", "merge", str(i["catalog"]), "--out", str(out)], False),
    "synth": (
        lambda i, out: [
            "synth",
            "--out",
            str(out),
            "--scenes",
            "1",
            "--views",
            "1",
            "--resolution",
            "32x32",
            "--no-progress",
        ],
        False,
    ),
    "eval": (
        lambda i, out: [
            "eval",
            "commono",
            "--model",
            "none",
            "--data",
            str(i["data"]),
            "--out",
            str(out),
            "--bootstrap",
            "10",
            "--quiet",
        ],
        False,
    ),
    "stats": (_stats_copy, False),
}


def _under(path, root: str) -> bool:
    try:
        return os.path.abspath(os.fspath(path)).startswith(root)
    except TypeError:  # a file descriptor
        return False


def deny_writes(monkeypatch, root: Path, code: int) -> None:
    """Writes under ``root`` fail with ``code`` as the kernel would report them (errno, message, path)."""
    root_text = str(root)

    def fail(path):
        raise OSError(code, os.strerror(code), os.fspath(path))

    real_open, real_os_open, real_mkdir, real_replace, real_rename = (
        builtins.open,
        os.open,
        os.mkdir,
        os.replace,
        os.rename,
    )

    def guarded_open(file, mode="r", *args, **kwargs):
        if isinstance(mode, str) and any(c in mode for c in "wax+") and _under(file, root_text):
            fail(file)
        return real_open(file, mode, *args, **kwargs)

    def guarded_os_open(path, flags, *args, **kwargs):
        if flags & WRITE_FLAGS and _under(path, root_text):
            fail(path)
        return real_os_open(path, flags, *args, **kwargs)

    def guarded_mkdir(path, *args, **kwargs):
        if _under(path, root_text):
            fail(path)
        return real_mkdir(path, *args, **kwargs)

    def guarded_replace(src, dst, *args, **kwargs):
        if _under(dst, root_text):
            fail(dst)
        return real_replace(src, dst, *args, **kwargs)

    def guarded_rename(src, dst, *args, **kwargs):
        if _under(dst, root_text):
            fail(dst)
        return real_rename(src, dst, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", guarded_open)
    monkeypatch.setattr(io, "open", guarded_open)
    monkeypatch.setattr(os, "open", guarded_os_open)
    monkeypatch.setattr(os, "mkdir", guarded_mkdir)
    monkeypatch.setattr(os, "replace", guarded_replace)
    monkeypatch.setattr(os, "rename", guarded_rename)


def assert_clear_error(result, path_fragment: str) -> None:
    output = result.output
    assert result.exit_code == 1, output
    assert not isinstance(result.exception, SystemExit) or result.exception.code == 1
    assert "Traceback" not in output and "Error:" in output and "Fix:" in output, output
    assert path_fragment in output.replace("\n", ""), output


def _output_for(command: str, inputs, tmp_path: Path) -> Path:
    name = "out.jsonl" if COMMANDS[command][1] else "out"
    target = tmp_path / "disk" / name
    target.parent.mkdir()
    if command == "stats":  # stats writes into an existing catalog
        import shutil

        shutil.copytree(inputs["catalog"], target)
    return target


@pytest.mark.parametrize("code", [errno.EROFS, errno.ENOSPC, errno.EACCES], ids=["read-only", "no-space", "permission"])
@pytest.mark.parametrize("command", list(COMMANDS))
def test_unwritable_output_is_an_error_with_a_fix(inputs, tmp_path, monkeypatch, command, code):
    out = _output_for(command, inputs, tmp_path)
    args = COMMANDS[command][0](inputs, out)
    deny_writes(monkeypatch, out.parent, code)
    result = CliRunner().invoke(app, args, env={"COLUMNS": "400"})
    monkeypatch.undo()
    assert_clear_error(result, str(out.parent))
    expected = {errno.EROFS: "read-only", errno.ENOSPC: "no space", errno.EACCES: "Permission denied"}[code]
    assert expected in result.output


@pytest.mark.parametrize("command", [c for c in COMMANDS if c != "stats"])
def test_output_under_a_file_is_an_error_with_a_fix(inputs, tmp_path, command):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    out = blocker / ("out.jsonl" if COMMANDS[command][1] else "out")
    result = CliRunner().invoke(app, COMMANDS[command][0](inputs, out), env={"COLUMNS": "400"})
    assert_clear_error(result, str(blocker))
    assert blocker.read_text() == "not a folder"


@pytest.mark.parametrize("command", list(COMMANDS))
def test_output_of_the_wrong_kind_is_an_error_with_a_fix(inputs, tmp_path, command):
    """A folder where the output is a file (pairs), a file where it is a folder (the others)."""
    out = tmp_path / "wrong"
    if COMMANDS[command][1]:
        out.mkdir()
        (out / "keep.txt").write_text("mine")
    else:
        out.write_text("mine")
    args = COMMANDS[command][0](inputs, out)
    result = CliRunner().invoke(app, [*args, "--overwrite"] if command == "pairs" else args, env={"COLUMNS": "400"})
    assert_clear_error(result, str(out))
    assert (out / "keep.txt").read_text() == "mine" if out.is_dir() else out.read_text() == "mine"
