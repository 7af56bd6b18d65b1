"""Progress bars for long jobs (rich): count, rate, elapsed time and ETA."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TypeVar

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


def make_progress(unit: str = "it", *, transient: bool = False, disable: bool = False) -> Progress:
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
