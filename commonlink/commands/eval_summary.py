"""What the eval commands print after a run: the table, how much was really scored (with the loud warning of a
run whose answers could not be parsed), where the results and report are; and the failure of a run that scored
nothing. (Moved out of :mod:`commonlink.commands.eval`, which re-exports these names.)"""

from __future__ import annotations

from pathlib import Path

from commonlink.commands._common import console, err_console
from commonlink.errors import BackendError
from commonlink.eval.report.html import REPORT_FILENAME

__all__ = [
    "fail_if_nothing_scored",
    "print_estimate",
    "print_fresh_report",
    "print_summary",
    "print_warning",
    "report_line",
]


def report_line(summary) -> str:
    """One line saying where a report is and how heavy it is (used by eval and demo commands too)."""
    size = f"{summary.html_bytes / 1e6:.2f} MB page"
    if summary.images_folder is not None:
        size += f" + {summary.image_bytes / 1e6:.2f} MB of thumbnails in {summary.images_folder.name}/"
    return f"{summary.path.resolve().as_uri()}  ({summary.cards} cards, {size}, {summary.seconds:.1f}s)"


def print_estimate(estimate) -> None:
    """What a run sends, before the first request (``--dry-run``: instead of it)."""
    text = estimate.line() if estimate is not None else "What this run sends could not be estimated."
    console.print(text, highlight=False, markup=False, soft_wrap=True)


def print_warning(text: str) -> None:
    """A warning the user must not miss, on stderr in bold red (printed as text, never read as markup)."""
    err_console.print(text, style="bold red", highlight=False, markup=False, soft_wrap=True)


def print_summary(results: dict, out: Path, render, shard: str | None = None) -> None:
    """The run's table (with its scored line), skipped rows, timing and report; a run that scored nothing fails."""
    console.print(render(results), highlight=False, markup=False, soft_wrap=True)
    timing = results["timing"]
    if results.get("skipped"):
        console.print(f"Skipped rows: {results['skipped']} (reasons in {out}/results.json).", highlight=False)
    console.print(
        f"{timing['generated']} generated, {timing['from_cache']} from cache, {timing['wall_s']:.1f}s. Results in "
        f"{out}/",
        highlight=False,
    )
    print_fresh_report(out)
    if shard:
        console.print(
            f"Shard {shard} done. When every shard has finished, rerun without --shard on {out} to merge them.",
            highlight=False,
        )
    warning = (results.get("scored") or {}).get("warning")
    if warning:  # allowed with --allow-unparseable, but never quiet
        print_warning(warning)
    fail_if_nothing_scored(results, out)


def fail_if_nothing_scored(results: dict, out: Path) -> None:
    """A run that scored no row (every request refused, every row skipped) fails with the first reason, instead of
    exiting 0 with n = 0 and a table of dashes. results.json keeps every skipped row's reason."""
    scored = results.get("dataset", {}).get("rows_scored", results["metrics"]["overall"].get("n"))
    if scored:
        return
    skipped = results.get("skipped_rows") or []
    reason = skipped[0]["reason"] if skipped else "no row was selected"
    raise BackendError(
        f"No row was scored ({len(skipped)} skipped); the first reason: {reason}",
        f"Fix what the reason names and rerun the same command (reasons of every row in {out}/results.json).",
    )


def print_fresh_report(out: Path) -> None:
    """Say where the report is, when this run wrote one (a page older than results.json is from an earlier run)."""

    page, results = Path(out) / REPORT_FILENAME, Path(out) / "results.json"
    if page.is_file() and results.is_file() and page.stat().st_mtime >= results.stat().st_mtime:
        console.print(f"Report: {page.resolve().as_uri()}", highlight=False, soft_wrap=True)
