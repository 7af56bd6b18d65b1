"""The association and concept-perception tables of ``eval compare`` and the rescoring of single-step and
deduction runs on shared rows (chain runs cannot be rescored: a chain's steps depend on earlier answers)."""

from __future__ import annotations

from commonlink.eval.compare import PARSE_FAIL, REFUSED, Column, Table, mean_se, run_head
from commonlink.eval.scored import scored_counts
from commonlink.kinds.association.concept_prompts import COMPLEXITIES
from commonlink.kinds.association.metrics import ratio_metrics

__all__ = ["association_table", "concept_table", "rescorable_association", "rescore_association"]

#: the columns of the chain runs' and the ratio runs' tables between the memory and task and the failure columns
_CHAINS = [
    Column("Chains", "n", "int"),
    Column("Max steps", "max_steps", "num"),
    Column("Mean steps", "mean_steps", "num"),
]
_RATIOS = [Column("n", "n", "int"), Column("Success", "success", "ratio")]


def association_row(results: dict) -> dict:
    """One row of an association table: chain steps, or success ratios, with their standard errors."""
    metrics = results.get("metrics", {})
    summary, per = metrics.get("summary", {}), metrics.get("per_concept", {})
    row = run_head(results) | {
        "memory": results.get("association", {}).get("memory", "?"),
        "config": results.get("dataset", {}).get("config", "?"),
    }
    if "avg_mean_steps" in summary:
        chains = summary.get("chains", 0)
        unparseable = sum(v.get("ended", {}).get("unparseable", 0) for v in per.values())
        deductions = [
            v["deduction_success_ratio"] for v in per.values() if v.get("deduction_success_ratio") is not None
        ]
        return row | {
            "n": chains,
            "max_steps": summary.get("avg_max_steps"),
            "mean_steps": summary.get("avg_mean_steps"),
            "max_steps_se": summary.get("avg_max_steps_se"),  # runs written before it was recorded: none
            "mean_steps_se": summary.get("avg_mean_steps_se", mean_se([v.get("mean_steps_se") for v in per.values()])),
            "deduction": sum(deductions) / len(deductions) if deductions else None,
            "parse_failure_rate": unparseable / chains if chains else None,
        }
    return row | {
        "n": summary.get("n", 0),
        "parse_failure_rate": summary.get("unparseable_rate"),
        "success": summary.get("avg_success_ratio"),
        "success_se": mean_se([v.get("success_ratio_se") for v in per.values()]),
        "deduction": summary.get("avg_deduction_success_ratio"),
        "deduction_se": mean_se([v.get("deduction_success_ratio_se") for v in per.values()]),
    }


def association_table(title: str, runs: list[dict]) -> Table:
    """Association runs of one config, best first (mean steps for chains, else success or deduction)."""
    rows = [association_row(r) for r in runs]
    chains = any("mean_steps" in r for r in rows)
    key = "mean_steps" if chains else ("success" if any(r.get("success") is not None for r in rows) else "deduction")
    rows.sort(key=lambda r: -(r.get(key) or 0.0))
    columns = [Column("Memory", "memory"), Column("Task", "config"), *(_CHAINS if chains else _RATIOS)]
    return Table(title, [*columns, Column("Deduction", "deduction", "ratio"), PARSE_FAIL, REFUSED], rows)


def concept_table(title: str, runs: list[dict]) -> Table:
    """Concept-perception runs: one row per run and strategy, one column per complexity."""
    complexities = list(runs[0].get("concept_perception", {}).get("complexities") or COMPLEXITIES)
    columns = [Column("Strategy", "strategy"), Column("n", "n", "int")] + [Column(c, c, "ratio") for c in complexities]
    columns += [PARSE_FAIL, REFUSED]
    rows = []
    for results in runs:
        for strategy, cells in results.get("metrics", {}).get("table", {}).items():
            row = run_head(results) | {"strategy": strategy, "n": next(iter(cells.values()), {}).get("n")}
            row["parse_failure_rate"] = scored_counts(results).unparseable_rate
            for c in complexities:
                row |= {c: cells.get(c, {}).get("success_ratio"), f"{c}_se": cells.get(c, {}).get("se")}
            rows.append(row)
    return Table(title, columns, rows)


def rescorable_association(results: dict) -> bool:
    """Single-step and deduction runs can be rescored on shared rows; chain runs cannot."""
    return str(results.get("task")) in ("association/single_step", "association/deduction")


def rescore_association(records: list[dict], results: dict, *, seed: int, n_boot: int) -> dict:
    """Success ratios of ``records`` (a single-step or deduction run's predictions on shared rows)."""
    fields = [f for f in ("correct", "deduction_correct") if records and f in records[0]]
    if str(results.get("task")).endswith("deduction"):
        fields = ["deduction_correct"]
    elif not results.get("association", {}).get("deduction", True):
        fields = ["correct"]
    return ratio_metrics(records, fields, seed=seed, n_boot=n_boot)
