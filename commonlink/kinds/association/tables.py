"""The Markdown table of one association run (``results.md``): per concept max | mean steps (chains) or success
ratios, the requests made and what was scored."""

from __future__ import annotations

from collections.abc import Sequence

from commonlink.eval.report.tables import scored_lines
from commonlink.eval.run_names import run_name
from commonlink.eval.table_cells import md_cell

__all__ = ["association_markdown", "render_association_table"]


def render_association_table(results: dict) -> str:
    """Markdown table of per-concept metrics (chains: max | mean steps; others: success ratios)."""
    metrics = results["metrics"]
    title = (
        f"{results['task']} — {md_cell(run_name(results))}: {md_cell(', '.join(results['models']))} "
        f"({md_cell(results['backend'])}, memory {results['association']['memory']}, "
        f"{results['association'].get('protocol', 'strict')} protocol)"
    )
    lines = [f"### {title}", ""]
    per = metrics["per_concept"]
    if results["task"].endswith(("synchronous", "asynchronous")):
        lines += ["| concept | chains | max | mean ± SE | deduction |", "|---|---|---|---|---|"]
        for name, v in per.items():
            name = md_cell(name)  # a concept from the chain files, shown as written
            ded = "-" if v["deduction_success_ratio"] is None else f"{v['deduction_success_ratio']:.3f}"
            mean = "-" if v["mean_steps"] is None else f"{v['mean_steps']:.2f} ± {v['mean_steps_se']:.2f}"
            lines.append(
                f"| {name} | {v['chains']} | {'-' if v['max_steps'] is None else v['max_steps']} | {mean} | {ded} |"
            )
        s = metrics["summary"]
        if s["avg_max_steps"] is not None:
            lines.append(f"| **average** | {s['chains']} | {s['avg_max_steps']:.2f} | {s['avg_mean_steps']:.2f} | |")
    else:
        fields = [k for k in next(iter(per.values()), {}) if k.endswith("success_ratio")]
        lines += ["| concept | n | " + " | ".join(fields) + " |", "|---|---|" + "---|" * len(fields)]
        for name, v in per.items():
            name = md_cell(name)  # a concept from the chain files, shown as written
            lines.append(
                f"| {name} | {v['n']} | " + " | ".join(f"{v[f]:.3f} ± {v[f + '_se']:.3f}" for f in fields) + " |"
            )
        s = metrics["summary"]
        lines.append(
            "| **average** | " + str(s["n"]) + " | " + " | ".join(f"{s['avg_' + f]:.3f}" for f in fields) + " |"
        )
    req = results["requests"]
    if results.get("dataset", {}).get("limit"):
        lines += ["", f"Rows: {results['dataset']['limit']}."]
    lines += scored_lines(results) + [
        "",
        f"Model requests: {req['total']} for {req['scored_steps']} scored steps ({req['per_scored_step']} a step).",
    ]
    failed = metrics["summary"].get("failed_chains") or metrics["summary"].get("failed") or 0
    if failed:
        lines.append(
            f"**{failed} task(s) got no answer from the backend and are left out of the metrics; rerun to retry them.**"
        )
    return "\n".join(lines) + "\n"


def association_markdown(runs: Sequence[dict], breakdowns: bool = False) -> str:
    """:func:`render_association_table` of the first run (an association results table is one run's)."""
    return render_association_table(runs[0])
