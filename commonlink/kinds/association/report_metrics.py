"""The metrics of one association run on its report page: the memory and parse-failure line, and per concept
max | mean steps (chains) or success ratios (other configs), as tables and charts."""

from __future__ import annotations

from html import escape

from commonlink.eval.report.charts import Series, bar_chart
from commonlink.eval.report.summary import cell, sort_keys, table_html

__all__ = ["association_facts", "association_metrics_html"]


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
