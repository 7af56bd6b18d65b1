"""What every command shares: error reporting, the console, option parsers."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from commonlink.errors import CommonlinkError, InputError, describe_os_error, parse_two
from commonlink.redact import redact_text

# Off a terminal (a pipe, a log file, a CI job) lines and tables are not wrapped at 80 columns: a wrapped path cannot
# be copied back into a shell, and a table cut into two lines per row cannot be read. On a terminal Rich wraps at its
# width as usual. (Tables take their natural width; nothing here expands to the console's width.)
_UNWRAPPED = 100_000


def _console(stream) -> Console:
    terminal = stream.isatty()
    return Console(stderr=stream is sys.stderr, soft_wrap=not terminal, width=None if terminal else _UNWRAPPED)


console = _console(sys.stdout)
err_console = _console(sys.stderr)


def shows_progress(quiet: bool, old_progress: bool | None) -> bool:
    """Whether to draw progress bars, from --quiet and the hidden old --progress/--no-progress."""
    return not quiet and old_progress is not False


def progress_shown(quiet: bool) -> bool:
    """Whether to draw progress bars: not with --quiet, and only on a terminal (a log file gets none)."""
    return not quiet and stdout_is_terminal()


F = TypeVar("F", bound=Callable)


def reports_errors(func: F) -> F:
    """Turn a :class:`CommonlinkError` into a two-line message (problem, fix) and exit status 1."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except CommonlinkError as exc:
            print_error(exc.problem, exc.fix)
            raise typer.Exit(1) from None
        except OSError as exc:  # read-only or full disk, a file where a folder belongs, no permission ...
            print_error(*describe_os_error(exc))
            raise typer.Exit(1) from None
        except KeyboardInterrupt:
            err_console.print("Interrupted. Rerun the same command to continue where it stopped.")
            raise typer.Exit(130) from None

    return wrapper  # type: ignore[return-value]


def print_error(problem: str, fix: str | None) -> None:
    """``Error: ...`` / ``Fix: ...`` on stderr, URLs' credentials masked.

    problem and fix quote user data (file names, labels): printed as text, never read as console markup.
    """
    err_console.print(f"[bold red]Error:[/] {escape(redact_text(problem))}", highlight=False, soft_wrap=True)
    if fix:
        err_console.print(f"[bold]Fix:[/] {escape(redact_text(fix))}", highlight=False, soft_wrap=True)


def parse_resolution(text: str, *, example: str = "512x512") -> tuple[int, int]:
    """``--resolution "512x384"`` -> (512, 384)."""
    problem = f"--resolution {text!r} is not WIDTHxHEIGHT."
    return parse_two(text.lower(), "x", int, problem, f"e.g. --resolution {example}.")


def parse_range(text: str, *, option: str) -> tuple[int, int]:
    """``"3-7"`` -> (3, 7); ``"5"`` -> (5, 5)."""

    try:
        if "-" in text:
            lo, hi = (int(p) for p in text.split("-", 1))
        else:
            lo = hi = int(text)
    except ValueError:
        raise InputError(f"{option} {text!r} is not a range.", f"Write it as LOW-HIGH, e.g. {option} 3-7.") from None
    if lo < 0 or hi < lo:
        raise InputError(f"{option} {text!r}: need 0 <= LOW <= HIGH.", f"e.g. {option} 3-7.")
    return lo, hi


def stdout_is_terminal() -> bool:
    return sys.stdout.isatty()
