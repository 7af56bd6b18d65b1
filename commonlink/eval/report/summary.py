"""The metrics parts of the report that need no images: the association metrics of one run (per concept, with
its memory and parse-failure rate) and the page of runs without example cards (perception, concept perception,
several association runs), which shows :mod:`commonlink.eval.compare`'s tables under the runs' names."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

from commonlink.eval.compare import Column, Comparison, compare_runs
from commonlink.eval.report.charts import Series, bar_chart
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


# ------------------------------------------------------------------------------------------ one association run
def association_facts(run: dict, chains: bool) -> str:
    """The line every association page shows: the memory, and how many answers could not be parsed."""
    metrics = run.get("metrics") or {}
    summary, per = metrics.get("summary") or {}, metrics.get("per_concept") or {}
    if chains:
        total = summary.get("chains") or 0
        bad = sum(
            (v.get("ended") or {}).get("unparseable", 0) for v in per.values() if isinstance(v.get("ended"), dict)
        )
        what = "chains ended by an unparseable answer"
    else:
        total = summary.get("n") or 0
        bad = sum(v.get("unparseable", 0) for v in per.values() if isinstance(v.get("unparseable"), int))
        what = "answers could not be parsed"
    rate = f"{100 * bad / total:.1f}%" if isinstance(total, int) and total and isinstance(bad, int) else "–"
    memory = (run.get("association") or {}).get("memory", "?")
    return (
        f'<p class="facts">Memory <b>{cell(memory)}</b> · parse failures: <b>{rate}</b> ({cell(bad)} of {cell(total)} '
        f"{what})"
        "</p>"
    )


def _chain_rows(per: dict, names: list[str], summary: dict) -> list[list[str]]:
    rows = []
    for name in names:
        v = per[name]
        mean = (
            "–"
            if v.get("mean_steps") is None
            else cell(v["mean_steps"], ".2f")
            + (
                f'<span class="se"> ± {cell(v["mean_steps_se"], ".2f")}</span>'
                if v.get("mean_steps_se") is not None
                else ""
            )
        )
        ded = "–" if v.get("deduction_success_ratio") is None else cell(v["deduction_success_ratio"], ".1f", 100) + "%"
        ended = ", ".join(f"{escape(str(k))} {cell(n)}" for k, n in sorted((v.get("ended") or {}).items()))
        most = (
            "–"
            if v.get("max_steps") is None
            else cell(v["max_steps"])
            + (
                f'<span class="se"> ± {cell(v["max_steps_se"], ".2f")}</span>'
                if v.get("max_steps_se") is not None
                else ""
            )
        )
        rows.append([escape(name), cell(v.get("chains", 0)), most, mean, ded, ended])
    if summary.get("avg_max_steps") is not None:
        rows.append(
            [
                "average",
                cell(summary.get("chains", 0)),
                cell(summary["avg_max_steps"], ".2f"),
                cell(summary.get("avg_mean_steps"), ".2f"),
                "",
                "",
            ]
        )
    return rows


def association_metrics_html(run: dict, chains: bool) -> str:
    """Per-concept metrics of one association run: max | mean steps for chains, success ratios otherwise."""
    metrics = run.get("metrics") or {}
    per = metrics.get("per_concept") or {}
    names = sort_keys(per)
    facts = association_facts(run, chains)
    if chains:
        table = table_html(
            ["Concept", "Chains", "Max steps", "Mean steps", "Deduction ✓", "Ended by"],
            _chain_rows(per, names, metrics.get("summary") or {}),
        )
        charts = bar_chart(
            "Mean steps per concept",
            names,
            [Series("mean", [per[n].get("mean_steps") for n in names], [per[n].get("mean_steps_se") for n in names])],
            x_label="concept",
            percent=False,
        ) + bar_chart(
            "Max steps per concept",
            names,
            [Series("max", [per[n].get("max_steps") for n in names], [None] * len(names))],
            x_label="concept",
            percent=False,
        )
        note = (
            '<p class="note">Max | mean steps: correct scored steps before a chain ended (warm-up steps not counted); '
            "± one bootstrap standard error.</p>"
        )
        return facts + table + note + f'<div class="charts">{charts}</div>'
    fields = [k for k in (next(iter(per.values()), {}) or {}) if k.endswith("success_ratio")]
    rows = [
        [escape(name), cell(per[name].get("n", 0))]
        + [
            f"{cell(per[name].get(f), '.1f', 100)}<span class='se'> ± "
            f"{cell(per[name].get(f + '_se', 0), '.1f', 100)}</span>"
            for f in fields
        ]
        for name in names
    ]
    charts = "".join(
        bar_chart(
            f.replace("_", " ").capitalize(),
            names,
            [Series("ratio", [per[n].get(f) for n in names], [per[n].get(f + "_se") for n in names])],
            x_label="concept",
        )
        for f in fields
    )
    head = ["Concept", "n"] + [f"{escape(f.replace('_', ' '))} %" for f in fields]
    return facts + table_html(head, rows) + f'<div class="charts">{charts}</div>'


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
