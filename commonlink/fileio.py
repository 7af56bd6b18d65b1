"""Small file helpers used everywhere: atomic writes, JSON lines, hashing, safe paths.

Everything that writes a result file goes through :func:`atomic_write` so that an interrupted run never leaves
a half-written file behind: data goes to a temporary file in the same folder, is flushed and fsynced, then
renamed over the target (``os.replace`` is atomic on POSIX and Windows).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import json
import os
import re
import sys
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from commonlink import constants
from commonlink.errors import InputError, SchemaError


@contextlib.contextmanager
def atomic_write(
    path: str | os.PathLike, mode: str = "w", encoding: str | None = "utf-8", *, fsync: bool = True
) -> Iterator[IO]:
    """Open a temporary file next to ``path``; on success it replaces ``path`` atomically.

    On any exception the temporary file is removed and ``path`` is left untouched. The temporary name carries
    the writer's pid (``.NAME.PID.XXXX.tmp``), so :func:`remove_stale_temp_files` can tell one left by a killed
    run from one being written. An ``OSError`` that names no file (a full disk on write or fsync) is raised
    again naming ``path``. ``fsync=False`` leaves durability to the caller (a writer that fsyncs a whole batch of
    files at once); the rename is still atomic.
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        binary = "b" in mode
        fd, tmp = make_temp_beside(path)
    except OSError as exc:
        raise _naming(exc, path) from exc
    try:
        # mkstemp creates 0600 files; give the result the permissions an ordinary open() would.
        os.chmod(tmp, 0o666 & ~_umask())
        with os.fdopen(fd, mode, encoding=None if binary else encoding) as handle:
            yield handle
            handle.flush()
            if fsync:
                os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(exc, OSError) and not exc.filename:
            raise _naming(exc, path) from exc
        raise


TEMP_SUFFIX = ".tmp"
_TEMP_NAME = re.compile(r"^\.(?P<name>.+)\.(?P<pid>\d+)\.[A-Za-z0-9_]+" + re.escape(TEMP_SUFFIX) + "$")


def make_temp_beside(path: str | os.PathLike) -> tuple[int, str]:
    """``(fd, name)`` of a new temporary file in ``path``'s folder, named ``.NAME.PID.XXXX.tmp`` (the pid lets
    :func:`remove_stale_temp_files` tell a killed writer's file from a running one's)."""
    path = Path(path)
    return tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}.", suffix=TEMP_SUFFIX, dir=path.parent)


def _naming(exc: OSError, path: str | os.PathLike) -> OSError:
    if exc.filename:
        return exc
    named = OSError(exc.errno, exc.strerror or str(exc), str(path))
    return named


def naming_path(exc: OSError, path: str | os.PathLike) -> OSError:
    """``exc`` when it names a file, else the same error naming ``path``: a full disk fails a ``write`` or an
    ``fsync``, whose error names no file (the CLI would say "Cannot write a file")."""
    return _naming(exc, path)


def pid_alive(pid: int) -> bool:
    """Whether a process with this id runs on this machine (a process we may not signal counts as running)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_temp_files(folder: str | os.PathLike) -> list[Path]:
    """Remove the temporary files (``.NAME.PID.XXXX.tmp``) that killed runs' :func:`atomic_write` left in
    ``folder`` (not below it); files of running processes are kept. Returns what was removed."""
    removed = []
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
        for entry in os.scandir(folder):
            match = _TEMP_NAME.match(entry.name)
            if match is None or not entry.is_file(follow_symlinks=False):
                continue
            pid = int(match["pid"])
            if pid != os.getpid() and not pid_alive(pid):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.path)
                removed.append(Path(entry.path))
    return removed


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_bytes(path: str | os.PathLike, data: bytes, *, fsync: bool = True) -> None:
    with atomic_write(path, "wb", fsync=fsync) as handle:
        handle.write(data)


def fsync_files(paths: Iterable[str | os.PathLike]) -> None:
    """Make a batch of freshly written (or renamed) files and their folders durable, at the cost of about one
    fsync: on Linux one ``syncfs`` a file system (it flushes the files' data and the folders' entries together;
    an fsync per new file costs 4-5 ms each on ext4 even when batched); elsewhere, or if ``syncfs`` fails, an
    fsync per file and per folder. Files gone since are skipped."""
    folders: dict[str, None] = {}
    files = []
    for path in paths:
        files.append(path)
        folders.setdefault(os.path.dirname(os.path.abspath(path)))
    if not files:
        return
    syncfs = _syncfs()
    if syncfs is not None:
        devices: set[int] = set()
        failed = False
        for folder in folders:
            with contextlib.suppress(FileNotFoundError):
                fd = os.open(folder, os.O_RDONLY)
                try:
                    device = os.fstat(fd).st_dev
                    if device not in devices:
                        devices.add(device)
                        failed = failed or syncfs(fd) != 0
                finally:
                    os.close(fd)
        if not failed:
            return
    for path in files:
        _fsync(path)
    for folder in folders:
        fsync_dir(folder)


@functools.cache
def _syncfs():
    """glibc's ``syncfs(fd)`` (Linux), or None where there is none."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).syncfs
    except (OSError, AttributeError):
        return None


def fsync_dir(folder: str | os.PathLike) -> None:
    """Make a folder's entries (new names, renames) durable; a no-op where folders cannot be fsynced (Windows)."""
    if os.name == "posix":
        _fsync(folder)


def _fsync(path: str | os.PathLike) -> None:
    """fsync a file or folder by its path (one that is gone by now has nothing left to make durable)."""
    with contextlib.suppress(FileNotFoundError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_write(path, "w") as handle:
        handle.write(text)


def atomic_write_json(path: str | os.PathLike, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False, ensure_ascii=False) + "\n")


def write_jsonl(path: str | os.PathLike, rows: Iterable[dict]) -> int:
    """Atomically write ``rows`` as JSON lines; returns the number of rows written."""
    count = 0
    with atomic_write(path, "w") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False, sort_keys=False) + "\n")
            count += 1
    return count


def read_jsonl(path: str | os.PathLike) -> Iterator[dict]:
    """Stream JSON objects from a JSON-lines file, naming the line of any malformed entry."""
    for _, obj in read_jsonl_numbered(path):
        yield obj


def read_jsonl_numbered(
    path: str | os.PathLike, *, fix: str = "Fix or remove that line; each line must be one JSON object."
) -> Iterator[tuple[int, dict]]:
    """``(line number, object)`` for each non-blank line; ``fix`` is the advice given with a malformed line.

    A UTF-8 byte-order mark (as spreadsheet and Windows editors write) is accepted.
    """
    path = Path(path)
    for lineno, line in jsonl_lines(path):
        yield lineno, parse_jsonl_line(path, lineno, line, fix=fix)


_JSON_DECODER = json.JSONDecoder()  # json.loads' own settings
_JSON_WHITESPACE = " \t\n\r"  # the whitespace JSON allows around a value


def jsonl_lines(path: str | os.PathLike) -> Iterator[tuple[int, str]]:
    """``(line number, text)`` of each non-blank line of a JSON-lines file, unparsed (a reader that needs only
    some lines parses those with :func:`parse_jsonl_line`). A UTF-8 byte-order mark is accepted."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"File not found: {path}", "Check the path, or create the file first.")
    with path.open("r", encoding="utf-8-sig") as handle:
        try:
            for lineno, line in enumerate(handle, start=1):
                if line.strip():
                    yield lineno, line
        except UnicodeDecodeError as exc:
            raise not_utf8_error(path, exc) from exc


def not_utf8_error(path: str | os.PathLike, exc: UnicodeDecodeError) -> SchemaError:
    """The error for a text file that is not UTF-8, naming the file, the first undecodable line and its byte
    (found by reading the file again line by line: the decoder reads ahead, so ``exc`` does not say the line)."""
    where, byte = "", exc.object[exc.start : exc.start + 1].hex() if isinstance(exc.object, (bytes, bytearray)) else "?"
    with contextlib.suppress(OSError), open(path, "rb") as handle:
        for lineno, raw in enumerate(handle, start=1):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as bad:
                where, byte = f", line {lineno}", raw[bad.start : bad.start + 1].hex()
                break
    return SchemaError(
        f"{path}{where}: not UTF-8 text (byte 0x{byte} cannot be decoded); commonlink files are UTF-8.",
        "Restore the file from the run that wrote it, or re-save it as UTF-8 (a text editor's 'Save with encoding').",
    )


def read_user_text(path: str | os.PathLike, what: str, fix: str, *, encoding: str = "utf-8") -> str:
    """The text of a file the user named: ``what`` says what it is ("Vocabulary file") and ``fix`` how to pass one,
    for the :class:`InputError` where it is missing; one that is not UTF-8 is a :class:`SchemaError` naming the byte."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{what} not found: {path}", fix)
    try:
        return path.read_text(encoding=encoding)
    except UnicodeDecodeError as exc:
        raise SchemaError(
            f"{path}: not UTF-8 text (byte {exc.start} cannot be decoded).", f"Save the {what.lower()} as UTF-8."
        ) from None


def loads_user_json(text: str, path: str | os.PathLike, fix: str, *, problem: str = "not valid JSON") -> Any:
    """``json.loads(text)`` of a file the user wrote; malformed JSON is a :class:`SchemaError` naming ``path``, the
    ``problem``, the parser's reason and line, and the ``fix``."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise SchemaError(f"{path}: {problem} ({exc.msg}, line {exc.lineno}).", fix) from None


def parse_jsonl_line(
    path: str | os.PathLike,
    lineno: int,
    line: str,
    *,
    fix: str = "Fix or remove that line; each line must be one JSON object.",
) -> dict:
    """One line of a JSON-lines file as an object; a malformed line is a :class:`SchemaError` naming it."""
    if line[:1] == "{":
        # What json.loads does for a line that starts with "{" (no BOM, no leading space), minus its per-call
        # overhead (a third of the cost of a catalog record); anything else goes through json.loads itself.
        try:
            obj, end = _JSON_DECODER.raw_decode(line)
        except ValueError:
            pass
        else:
            if not line[end:].strip(_JSON_WHITESPACE):
                return obj
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise SchemaError(f"{path}, line {lineno}: not valid JSON ({exc.msg}).", fix) from exc
    if not isinstance(obj, dict):
        raise SchemaError(f"{path}, line {lineno}: expected a JSON object, got {type(obj).__name__}.", fix)
    return obj


def sha256_file(path: str | os.PathLike, chunk_size: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(chunk_size):
            digest.update(chunk)
    return digest.hexdigest()


def memoised_by_file_stats(memo_name: str, paths: list[Path], compute) -> str:
    """``compute()`` (a digest of the files' contents), memoised under ``COMMONLINK_HOME/memo_name`` by every
    file's resolved path, size, modification and change time: a multi-GB split is read once, not at every run
    (as git's index trusts unchanged stats). Any change to a file moves its change time, so a changed file is
    hashed again."""
    stats = [(p.resolve(), p.stat()) for p in paths]
    key = hashlib.sha256(
        "\n".join(f"{r}|{st.st_size}|{st.st_mtime_ns}|{st.st_ctime_ns}" for r, st in stats).encode()
    ).hexdigest()
    memo_path = constants.COMMONLINK_HOME / memo_name
    try:
        memo = json.loads(memo_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        memo = {}
    if not isinstance(memo, dict):
        memo = {}
    value = memo.get(key)
    if not isinstance(value, str):
        value = memo[key] = compute()
        try:
            memo_path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_json(memo_path, memo)
        except OSError:
            pass  # the memo only saves time
    return value


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def safe_join(root: str | os.PathLike, relative: str) -> Path:
    """Resolve ``relative`` inside ``root``; refuse absolute paths and paths that escape ``root``.

    Symlinks are resolved too, so a link pointing outside ``root`` is refused as well.
    """
    root_path = Path(root).resolve()
    if os.path.isabs(relative):
        raise InputError(
            f"Path {relative!r} is absolute; it must be relative to {root_path}.",
            "Write paths in the manifest relative to the photos folder.",
        )
    candidate = (root_path / relative).resolve()
    if candidate != root_path and root_path not in candidate.parents:
        raise InputError(
            f"Path {relative!r} escapes the folder {root_path}.",
            "Keep every file inside the folder you pass; remove '..' from the path.",
        )
    return candidate
