"""Progress bars for long jobs (rich): count, rate, elapsed time and ETA.

Bars are drawn only on a terminal. Off one (a pipe, a log file, a CI job) rich would still print each bar's last
frame when it stops, and wrap it at 80 columns: noise in a log, so there they are off whatever the caller asked.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterable, Iterator
from typing import TypeVar

from rich import get_console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

T = TypeVar("T")


class RateColumn(ProgressColumn):
    """Items per second, e.g. ``12.3 scenes/s``."""

    def __init__(self, unit: str = "it"):
        super().__init__()
        self.unit = unit

    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        return Text("" if speed is None else f"{speed:.1f} {self.unit}/s", style="progress.data.speed")


def bars_shown(requested: bool = True) -> bool:
    """Whether a bar asked for is drawn: only where rich's console is a terminal."""
    return requested and get_console().is_terminal


def make_progress(unit: str = "it", *, transient: bool = False, disable: bool = False) -> Progress:
    disable = not bars_shown(not disable)
    return Progress(
        TextColumn("{task.description}", style="bold", markup=False),  # descriptions name user files: no markup
        BarColumn(),
        MofNCompleteColumn(),
        RateColumn(unit),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        transient=transient,
        disable=disable,
    )


def track(
    items: Iterable[T], description: str, total: int | None = None, *, unit: str = "it", disable: bool = False
) -> Iterator[T]:
    """Iterate with a progress bar (count, rate, elapsed, ETA)."""
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    with make_progress(unit, disable=disable) as progress:
        task = progress.add_task(description, total=total)
        for item in items:
            yield item
            progress.advance(task)


#: The libraries' own switches for their (tqdm) bars; each reads its variable when first imported.
LIBRARY_BAR_SWITCHES = ("HF_DATASETS_DISABLE_PROGRESS_BARS", "HF_HUB_DISABLE_PROGRESS_BARS")


def quiet_library_bars_by_default() -> None:
    """Turn off ``datasets``' and ``huggingface_hub``'s own bars before they are imported (the CLI calls this when
    ``--quiet`` is given or stdout is no terminal). A variable the user set either way wins."""
    for name in LIBRARY_BAR_SWITCHES:
        os.environ.setdefault(name, "1")


def datasets_bars(shown: bool) -> contextlib.AbstractContextManager:
    """``datasets``' own bars ("Generating main split") only where ours are shown; the caller's setting comes back
    afterwards."""
    # the functions, not ``datasets.utils.tqdm``: that name is the tqdm class datasets.utils re-exports, not the module
    from datasets import utils

    if bars_shown(shown) and sys.stderr.isatty():  # tqdm draws on stderr
        return contextlib.nullcontext()
    return library_bars_off(utils)


@contextlib.contextmanager
def library_bars_off(utils) -> Iterator[None]:
    """A library's own tqdm bars off for the block, the caller's setting back afterwards: ``utils`` is the module
    with its ``are_progress_bars_disabled`` / ``disable_progress_bars`` / ``enable_progress_bars`` (``datasets.utils``,
    ``huggingface_hub.utils``)."""
    was_disabled = utils.are_progress_bars_disabled()
    utils.disable_progress_bars()
    try:
        yield
    finally:
        if not was_disabled:
            utils.enable_progress_bars()
