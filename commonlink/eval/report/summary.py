"""The metrics parts of the report that need no images: cells and tables a kind's page is made of, and the page
of runs without example cards (the tasks without a report page of their own, or more runs than it shows), which
shows :mod:`commonlink.eval.compare`'s tables under the runs' names."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

from commonlink.eval.compare import Column, Comparison, compare_runs
from commonlink.eval.run_names import run_name


def cell(value, spec: str = "", scale: float = 1) -> str:
    """A field of a results file as page text: a number formatted with ``spec`` (times ``scale``), anything
    else escaped as it is. A shared results.json may hold any JSON in any field, markup included."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return escape(format(value * scale, spec))
    return escape(str(value))


def sort_keys(keys) -> list[str]:
    """Group names in reading order: numbers by value, then text."""
    return sorted(keys, key=lambda k: (0, int(k), "") if str(k).lstrip("-").isdigit() else (1, 0, str(k)))


def table_html(head: Sequence[str], rows: Sequence[Sequence[str]], cls: str = "metrics") -> str:
    """A table (cells already escaped) in a box that scrolls sideways on a narrow screen."""
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return (
        f'<div class="scroll"><table class="{cls}"><tr>{"".join(f"<th>{h}</th>" for h in head)}</tr>'
        f"{body}</table></div>"
    )


# ------------------------------------------------------------------------------------------ runs without cards
def _comparison_cell(row: dict, column: Column) -> str:
    value = row.get(column.key)
    if value is None:
        return "–"
    if column.kind in ("text", "int"):
        return cell(value)
    scale, spec = {"pct": (100, ".2f"), "num": (1, ".2f"), "ratio": (1, ".3f")}[column.kind]
    se = row.get(f"{column.key}_se")
    return cell(value, spec, scale) + (f'<span class="se"> ± {cell(se, spec, scale)}</span>' if se is not None else "")


def comparison_html(comparison: Comparison) -> str:
    """The tables of :func:`commonlink.eval.compare.compare_runs` (notes first), each in a scrolling box."""
    parts = [f'<p class="note">{escape(n)}</p>' for n in comparison.notes]
    parts += [f'<p class="note">Not compared: {escape(r)}</p>' for r in comparison.refused]
    for table in comparison.tables:
        head = ["Run", "Model", "Backend", "Data"] + [escape(c.title) for c in table.columns]
        rows = [
            [cell(r["run"]), cell(r["model"]), cell(r["backend"]), cell(r["data"])]
            + [_comparison_cell(r, c) for c in table.columns]
            for r in table.rows
        ]
        parts.append(f"<h3>{escape(table.title)}</h3>" + table_html(head, rows))
    return "".join(parts)


def summary_page(runs: list[dict], runs_table: str) -> tuple[dict, int]:
    """The page of runs that have no example cards: their comparison (by name) and the runs table."""
    comparison = compare_runs(runs)
    tasks = sorted({str(r.get("task")) for r in runs})
    names = ", ".join(run_name(r) for r in runs)
    page = {
        "title": f"{' / '.join(tasks)}: {names}",
        "subtitle": f"{len(runs)} run{'s' if len(runs) > 1 else ''} · metrics only (no example cards for this task)",
        "metrics": comparison_html(comparison),
        "runs": runs_table,
        "footer": "metrics from each run's results.json",
        "data": {"kind": "summary", "runs": [run_name(r) for r in runs], "rows": []},
    }
    return page, 0
