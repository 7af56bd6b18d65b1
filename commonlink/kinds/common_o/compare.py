"""The Common-O and perception tables of ``eval compare`` and their rescoring on shared rows."""

from __future__ import annotations

from commonlink.eval.compare import PARSE_FAIL, REFUSED, Column, Table, run_head, with_se
from commonlink.kinds.common_o.metrics import common_o_metrics, perception_metrics

__all__ = ["common_o_table", "perception_table", "rescore_common_o", "rescore_perception"]

#: what both tables show after their count (and before the failure columns every table ends with)
_RATES = [Column("Accuracy (%)", "accuracy", "pct"), Column("Halluc. rate (%)", "hallucination_rate", "pct")]
_COMMON_O = [
    Column("n", "n", "int"),
    *_RATES,
    Column("1+ halluc. (%)", "hallucination_1plus", "pct"),
    Column("2+ halluc. (%)", "hallucination_2plus", "pct"),
]
_PERCEPTION = [
    Column("Images", "n", "int"),
    *_RATES,
    Column("Question acc. (%)", "question_accuracy", "pct"),
    Column("Recall (%)", "recall", "pct"),
    Column("Yes when absent (%)", "yes_rate_absent", "pct"),
]


def common_o_row(results: dict) -> dict:
    """One row of a Common-O or perception table: overall metrics with their standard errors."""
    overall = results.get("metrics", {}).get("overall", {})
    row = run_head(results) | {"n": overall.get("n", 0), "parse_failure_rate": overall.get("parse_failure_rate")}
    for key in (
        "accuracy",
        "hallucination_rate",
        "hallucination_1plus",
        "hallucination_2plus",
        "question_accuracy",
        "recall",
        "yes_rate_absent",
    ):
        row |= with_se(overall, key)
    return row


def _table(title: str, runs: list[dict], columns: list[Column]) -> Table:
    rows = [common_o_row(r) for r in runs]
    rows.sort(key=lambda r: (-(r.get("accuracy") or 0.0), r.get("hallucination_rate") or 0.0))
    return Table(title, [*columns, PARSE_FAIL, REFUSED], rows)


def common_o_table(title: str, runs: list[dict]) -> Table:
    """Common-O runs, most accurate first (fewest hallucinations on ties)."""
    return _table(title, runs, _COMMON_O)


def perception_table(title: str, runs: list[dict]) -> Table:
    """Perception runs, most accurate first (fewest hallucinations on ties)."""
    return _table(title, runs, _PERCEPTION)


def rescore_common_o(records: list[dict], results: dict, *, seed: int, n_boot: int) -> dict:
    """Common-O metrics of ``records`` (a run's predictions on the rows compared runs share)."""
    return common_o_metrics(records, seed=seed, n_boot=n_boot)


def rescore_perception(records: list[dict], results: dict, *, seed: int, n_boot: int) -> dict:
    """Perception metrics of ``records`` (a run's predictions on the rows compared runs share)."""
    return perception_metrics(records, seed=seed, n_boot=n_boot)
