"""One writer per output: an exclusive lock held while a command writes a file or folder.

Every command that writes an output (pairs, chains, release build, synth, stats, ingest, catalog merge, eval)
takes :func:`output_lock` on it first; a second run into the same output is refused at once, with the pid of
the run holding it, instead of interleaving its files with the first run's.

The lock is an advisory ``flock`` on a small lock file. The operating system drops it when the process ends,
even on ``kill -9``, so a killed run never leaves a lock that blocks the next one. Where ``fcntl`` does not
exist (Windows) the lock is skipped.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from commonlink.errors import InputError


def lock_path_for(target: str | os.PathLike) -> Path:
    """The lock file guarding ``target`` (a file or folder): ``.NAME.lock`` beside it.

    Beside, not inside: a release folder is replaced by a rename, and a pairs file is a file.
    """
    target = Path(target)
    return target.parent / f".{target.name}.lock"


@contextlib.contextmanager
def output_lock(
    target: str | os.PathLike,
    *,
    what: str = "commonlink",
    lock_file: str | os.PathLike | None = None,
    keep_file: bool = False,
) -> Iterator[Path]:
    """Hold the writer lock of ``target`` for the block; an :class:`InputError` naming the holder when taken.

    ``lock_file`` overrides where the lock lives (default :func:`lock_path_for`). The lock file is removed on
    release unless ``keep_file``; a run that opened the file just before it was removed notices (the path no
    longer names the file it locked) and opens it again, so removal never lets two writers in.
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield Path(lock_file or lock_path_for(target))
        return
    path = Path(lock_file) if lock_file is not None else lock_path_for(target)
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        fd = _open_lock_file(path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd)
            os.close(fd)
            raise InputError(
                f"{target} is being written by {holder}; two runs writing one output would mix their files.",
                "Wait for that run to finish (or stop it), then run again; or pick another output path.",
            ) from None
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(path))
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # the holder removed the file between our open and our lock: lock the new one
    try:
        os.ftruncate(fd, 0)
        try:
            os.write(fd, f"{what} (pid {os.getpid()})".encode())
        except OSError as exc:  # a full disk names no file: name the output this lock guards
            raise OSError(exc.errno, exc.strerror or str(exc), str(target)) from exc
        try:
            yield path
        except OSError as exc:
            if exc.filename:
                raise
            # a write or fsync that failed (a full disk) names no file: name the output being written at least
            raise OSError(exc.errno, exc.strerror or str(exc), str(target)) from exc
    finally:
        if not keep_file:
            with contextlib.suppress(OSError):
                os.unlink(path)
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _open_lock_file(path: Path) -> int:
    """Open (create) the lock file without following a link: the lock file is truncated and written, so a
    link planted in its place would overwrite its target. A symlink, hard link or non-file is refused."""
    refusal = InputError(
        f"The lock file {path} is a link or not a regular file; commonlink will not write through it.",
        f"Remove {path} (commonlink creates it again), then run again.",
    )
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0), 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP or path.is_symlink() or (path.exists() and not path.is_file()):
            raise refusal from None
        raise  # a read-only or full disk, no permission: the CLI names the path
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_nlink > 1:
        os.close(fd)
        raise refusal
    return fd


def _read_holder(fd: int) -> str:
    try:
        text = os.pread(fd, 200, 0).decode("utf-8", "replace").strip()
    except OSError:
        text = ""
    return text or "another process"


__all__ = ["lock_path_for", "output_lock"]
