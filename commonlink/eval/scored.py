"""How much of a run was really scored: answers scored, the share that could not be parsed, and the requests the
backend refused (or rows that could not be read), for every task; and the check that refuses a run where no
answer could be parsed, or more than a stated share.

A run whose answers are all unparseable scores 0 on everything (every row is wrong, a multi-step task ends at its
first step): the table looks like a result and measures only the parser. :func:`check_parsed` makes such a
run fail (:class:`UnparseableError`, exit status 1 on the CLI) after its files are written, unless the caller
allows it (``allow_unparseable``, ``--allow-unparseable``). :func:`scored_counts` is what results.json records
under ``scored`` and what the tables (console, results.md, ``eval compare``, ``eval report``) show.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from commonlink import registry
from commonlink.errors import CommonlinkError, InputError

__all__ = [
    "MAX_UNPARSEABLE_SHARE",
    "ScoredCounts",
    "UnparseableError",
    "check_parsed",
    "row_counts",
    "scored_counts",
    "scored_line",
    "skipped_counts",
]

#: A run fails when more than this share of its scored answers could not be parsed (``max_unparseable_share``).
MAX_UNPARSEABLE_SHARE = 0.5


class UnparseableError(CommonlinkError):
    """No answer of a run could be parsed, or more than the allowed share; ``results`` holds what was written."""

    def __init__(self, problem: str, fix: str | None = None, *, results: dict | None = None):
        super().__init__(problem, fix)
        self.results = results or {}


@dataclass(frozen=True)
class ScoredCounts:
    n: int  #: answers scored (rows, questions, tasks or chains: the task says, :attr:`TaskInfo.scored_counts`)
    unit: str  #: what ``n`` counts
    unparseable: int | None  #: of them, answers that could not be parsed (None: not recorded)
    refused: int  #: requests the backend refused or failed (left out of the scores; a rerun retries them)
    unreadable: int  #: rows that could not be read (left out)

    def __post_init__(self) -> None:  # a results.json from elsewhere may hold anything: only numbers count
        for name in ("n", "refused", "unreadable"):
            object.__setattr__(self, name, _count(getattr(self, name)) or 0)
        object.__setattr__(self, "unparseable", _count(self.unparseable))

    @property
    def unparseable_rate(self) -> float | None:
        return (self.unparseable / self.n) if self.n and self.unparseable is not None else None

    def to_dict(self) -> dict:
        return asdict(self) | {"unparseable_rate": self.unparseable_rate}


def _count(value) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0 else None


def skipped_counts(results: dict) -> tuple[int, int]:
    """(refused requests, unreadable rows) of a row task: a skipped row with a request id got an error answer."""
    skipped = [s for s in results.get("skipped_rows") or [] if isinstance(s, dict)]
    refused = sum(1 for s in skipped if s.get("id") is not None)
    return refused, len(skipped) - refused


def row_counts(results: dict, unit: str = "rows", n_field: str = "n") -> ScoredCounts:
    """The counts of a row task: ``metrics.overall[n_field]`` answers scored in ``unit``, its ``parse_failures``."""
    overall = (results.get("metrics") or {}).get("overall") or {}
    return ScoredCounts(overall.get(n_field) or 0, unit, overall.get("parse_failures"), *skipped_counts(results))


def scored_counts(results: dict) -> ScoredCounts:
    """The counts of any task's results: its task's own (:attr:`commonlink.registry.TaskInfo.scored_counts`), else
    a row task's (:func:`row_counts`)."""
    info = registry.task_for_results(str(results.get("task") or ""))
    if info is not None and info.scored_counts is not None:
        return info.scored_counts(results)
    return row_counts(results)


def scored_line(results: dict) -> str:
    """``Scored: 40 rows; unparseable 3 (7.5%); refused requests 0; unreadable rows 0.``"""
    c = scored_counts(results)
    rate = c.unparseable_rate
    parse = "unparseable not recorded" if c.unparseable is None else f"unparseable {c.unparseable}"
    if rate is not None:
        parse += f" ({100 * rate:.1f}%)"
    line = f"Scored: {c.n} {c.unit}; {parse}; refused requests {c.refused}"
    return line + (f"; unreadable rows {c.unreadable}." if c.unreadable else ".")


def check_parsed(results: dict, max_share: float = MAX_UNPARSEABLE_SHARE, *, allow: bool = False) -> str | None:
    """Refuse (:class:`UnparseableError`) a run where no scored answer could be parsed or more than ``max_share``
    of them; with ``allow``, return the warning instead (None when the run is within the share)."""
    if not 0 <= max_share <= 1:
        raise InputError(
            f"--max-unparseable-share {max_share} must be between 0 and 1.",
            f"e.g. {MAX_UNPARSEABLE_SHARE} (the default) or 1 to allow any share.",
        )
    c = scored_counts(results)
    rate = c.unparseable_rate
    if rate is None or not c.unparseable:
        return None
    if rate < 1 and rate <= max_share:
        return None
    share = f"more than {100 * max_share:g}% of the answers"
    what = "no answer could be parsed" if rate >= 1 else f"{share} could not be parsed"
    problem = (
        f"WARNING: {what} ({c.unparseable} of {c.n} {c.unit}, {100 * rate:.1f}%): the scores "
        "measure the answer parser, not the model."
    )
    if allow:
        return problem
    raise UnparseableError(
        problem,
        "Read the raw outputs in the run folder (reasoning models need a larger --max-new-tokens; check the prompt "
        "or --strategy); pass --allow-unparseable (allow_unparseable=True) to accept the run. Its files are written "
        "either way.",
        results=results,
    )
