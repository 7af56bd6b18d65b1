"""Exceptions that say what went wrong and what to do about it."""

from __future__ import annotations

import errno


class CommonlinkError(Exception):
    """Base class of every error commonlink raises on purpose.

    ``problem`` says what went wrong; ``fix`` (optional) says what the user can do. The CLI prints both and
    exits with status 1 instead of a traceback.
    """

    def __init__(self, problem: str, fix: str | None = None):
        self.problem = problem
        self.fix = fix
        super().__init__(problem if not fix else f"{problem}\nFix: {fix}")

    def __reduce__(self):
        # pickled as problem + fix (a worker process's error reaches the caller whole, with its own type)
        return _restore_error, (type(self), self.problem, self.fix), self.__dict__


def _restore_error(cls: type, problem: str, fix: str | None) -> CommonlinkError:
    error = cls.__new__(cls)
    CommonlinkError.__init__(error, problem, fix)
    return error


class InputError(CommonlinkError):
    """A file, option or record given by the user is missing, malformed or out of range."""


class SchemaError(CommonlinkError):
    """A dataset row, catalog line or file does not fit the expected schema."""


class NotEnoughDataError(CommonlinkError):
    """The inputs are valid but too few to satisfy the request (e.g. too few eligible images)."""


class BackendError(CommonlinkError):
    """A render or model backend failed (connection dropped, error reply, missing dependency)."""


class MissingDependencyError(CommonlinkError):
    """An optional extra is needed for this feature but is not installed."""

    def __init__(self, package: str, extra: str, feature: str):
        super().__init__(
            f"{feature} needs the optional package '{package}', which is not installed.",
            f"pip install 'commonlink[{extra}]'",
        )
        self.package = package
        self.extra = extra


def check_at_least(option: str, value: int | float | None, low: int | float, fix: str | None = None) -> None:
    """Refuse a setting below ``low`` (None: not set), naming it as the CLI does: ``--limit 0 must be at least 1.``
    Library settings call it, so the Python API refuses what the command line refuses, in the same words."""
    if value is not None and value < low:
        raise InputError(f"{option} {value} must be at least {low}.", fix)


def parse_two(text: str, sep: str, convert: type, problem: str, fix: str) -> tuple:
    """The two values of an option written ``A<sep>B`` (``2/8``, ``512x384``), each through ``convert``; anything
    else is an :class:`InputError` with ``problem`` and ``fix``."""
    try:
        first, second = (convert(v) for v in text.split(sep, 1))
    except ValueError:
        raise InputError(problem, fix) from None
    return first, second


def describe_os_error(exc: OSError) -> tuple[str, str]:
    """``(problem, fix)`` for an operating-system error, naming the path it concerns.

    Used at the CLI boundary so that a read-only disk, a full disk, a file where a folder is expected (and the
    other way round) or a permission problem reads as an error message with a fix, not a traceback.
    """
    path = exc.filename if exc.filename is not None else None
    other = f" -> {exc.filename2}" if getattr(exc, "filename2", None) else ""
    where = f"{path}{other}" if path is not None else "a file"
    code = exc.errno
    if code == errno.EROFS:
        return (
            f"Cannot write {where}: the file system is read-only.",
            "Pass an output path on a writable disk (e.g. another --out), or remount the disk read-write.",
        )
    if code in (errno.ENOSPC, getattr(errno, "EDQUOT", -1)):
        return (
            f"Cannot write {where}: no space left on the disk (or the disk quota is used up).",
            (
                "Free some space or write to another disk, then rerun the same command: finished work is kept and "
                "half-written files were not left behind."
            ),
        )
    if code == errno.EISDIR:
        return (
            f"{where} is a folder, where a file is expected.",
            "Pass a file path (e.g. a name inside that folder), or move the folder away.",
        )
    if code == errno.ENOTDIR:
        return (
            f"{where}: part of this path is a file, where a folder is expected.",
            "Pass a path whose parent folders are folders, or move the file that is in the way.",
        )
    if code == errno.EEXIST:
        return (
            f"{where} already exists and is in the way (a file where a folder is needed, or the other way round).",
            "Pass another path, or move what is there away.",
        )
    if code in (errno.EACCES, errno.EPERM):
        return (
            f"Permission denied: {where}.",
            "Pass a path you may read and write, or change its permissions (chmod/chown), then rerun.",
        )
    if code == errno.ENOENT:
        return (f"{where} not found.", "Check the path (and that its folder exists), then rerun.")
    if code == errno.ENAMETOOLONG:
        return (f"The path {where} is too long for the file system.", "Use a shorter folder or file name.")
    reason = exc.strerror or type(exc).__name__
    return (f"{where}: {reason}.", "Check the path, the disk and its permissions, then rerun the same command.")
