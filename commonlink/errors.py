"""Exceptions that say what went wrong and what to do about it."""

from __future__ import annotations


class CommonlinkError(Exception):
    """Base class of every error commonlink raises on purpose.

    ``problem`` says what went wrong; ``fix`` (optional) says what the user can do. The CLI prints both and
    exits with status 1 instead of a traceback.
    """

    def __init__(self, problem: str, fix: str | None = None):
        self.problem = problem
        self.fix = fix
        super().__init__(problem if not fix else f"{problem}\nFix: {fix}")


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
