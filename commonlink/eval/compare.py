"""Compare named runs of any eval task: one table per task (and split or config), best first.

    >>> from commonlink.eval.compare import compare_runs, render_comparison
    >>> comparison = compare_runs(["runs/qwen", "runs/llava"])   # run folders or results.json files
    >>> print(render_comparison(comparison, "md"))

A run shows under its **name** (``run_name`` in results.json: ``--run-name``, by default the model and the
settings that set it apart, see :func:`default_run_name`). Runs are grouped by their data identity
(:func:`commonlink.eval.data_identity.data_identity`: task, split or config, and the data's fingerprint), never by
a row id alone: runs on two releases that both have a ``main`` split go in two tables, each with its data in the
title and the ``Data`` column. Runs of one group are ranked together only when they cover the same rows:
otherwise Common-O, perception and single-step/deduction association runs are rescored on the rows they share
(from their predictions.jsonl, with a note saying so), and chain or concept-perception runs are refused with the
reason. A group that cannot be compared is listed in :attr:`Comparison.refused` (the CLI prints it and exits 1);
it never hides the other groups' tables.
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from commonlink import registry
from commonlink.errors import InputError
from commonlink.eval.data_identity import data_identity, data_label
from commonlink.eval.report.tables import load_results
from commonlink.eval.run_names import default_run_name, model_names, run_name
from commonlink.eval.scored import scored_counts
from commonlink.eval.table_cells import csv_cell, md_cell

__all__ = [
    "PARSE_FAIL",
    "REFUSED",
    "Column",
    "Comparison",
    "Table",
    "RowSetMismatch",
    "compare_runs",
    "default_run_name",
    "render_comparison",
    "row_set",
    "mean_se",
    "run_head",
    "run_name",
    "task_kind",
    "with_se",
]

FORMATS = ("md", "csv", "json")


class RowSetMismatch(InputError):
    """Runs of one task cover different rows and cannot be rescored on the rows they share."""


# ------------------------------------------------------------------------------------------ names and row sets
def task_kind(results: dict) -> str:
    """``common_o``, ``perception``, ``association/CONFIG`` or ``concept_perception``."""
    return str(results.get("task") or "?")


def row_set(results: dict) -> dict:
    """The rows a run covered: ``{"count", "digest"}`` (``digest`` None for runs written before it was recorded)."""
    recorded = results.get("row_set")
    if recorded:
        return recorded
    data = results.get("dataset", {})
    count = data.get("rows_requested", data.get("tasks_run", data.get("rows_scored")))
    return {"count": count, "digest": None}


# ------------------------------------------------------------------------------------------ columns and rows
@dataclass
class Column:
    title: str
    key: str
    kind: str = "text"  #: text | int | pct (a share shown in %) | num (2 decimals) | ratio (3 decimals)


#: the last columns of every table: the share of answers that could not be parsed, and the requests the backend
#: refused or failed (left out of the scores, :func:`commonlink.eval.scored.scored_counts`)
PARSE_FAIL = Column("Parse fail. (%)", "parse_failure_rate", "pct")
REFUSED = Column("Refused", "refused", "int")


@dataclass
class Table:
    title: str
    columns: list[Column]
    rows: list[dict]


@dataclass
class Comparison:
    tables: list[Table]
    notes: list[str] = field(default_factory=list)
    #: groups of runs that could not be compared, each with the reason (the other groups' tables are in ``tables``)
    refused: list[str] = field(default_factory=list)


def run_head(results: dict) -> dict:
    """The columns every table starts with: the run's name, model(s), backend, data (:func:`data_label`), its
    refused requests (the ``Refused`` column, :data:`REFUSED`) and results path."""
    return {
        "run": run_name(results),
        "model": "+".join(model_names(results)),
        "backend": results.get("backend", "?"),
        "data": data_label(results),
        "refused": scored_counts(results).refused,
        "path": results.get("_path"),
    }


def with_se(group: dict, key: str, out_key: str | None = None) -> dict:
    """``{out_key: value, out_key_se: its standard error}`` from a metrics group."""
    out_key = out_key or key
    return {out_key: group.get(key), f"{out_key}_se": group.get(f"{key}_se")}


def mean_se(values: Sequence[float | None]) -> float | None:
    """SE of an average of independent per-concept means (each with its own SE)."""
    values = [v for v in values if v is not None]
    return (sum(v * v for v in values) ** 0.5 / len(values)) if values else None


# ------------------------------------------------------------------------------------------ shared rows
def _predictions(results: dict) -> list[dict] | None:
    path = results.get("_path")
    file = Path(path).parent / "predictions.jsonl" if path else None
    if file is None or not file.is_file():
        return None
    return [json.loads(line) for line in file.read_text(encoding="utf-8").splitlines() if line.strip()]


def _on_shared_rows(title: str, kind: str, runs: list[dict], notes: list[str]) -> list[dict]:
    """The runs rescored on the rows they all share, or :class:`RowSetMismatch` saying why not."""
    described = "; ".join(f"{run_name(r)}: {row_set(r)['count']} rows" for r in runs)
    task = _task_of(kind)
    rescorable = task.rescore is not None and task.rescorable(runs[0])
    records = [_predictions(r) for r in runs] if rescorable else []
    if not rescorable or any(r is None for r in records):
        why = (
            "they cannot be rescored on shared rows"
            if not rescorable
            else "a run folder has no predictions.jsonl to rescore from"
        )
        raise RowSetMismatch(
            f"{title}: the runs cover different rows ({described}) and {why}; they are not ranked together.",
            "Rerun them on the same rows (same --rows/--limit and data), or compare each group separately.",
        )
    key = task.record_key

    def row_id(record: dict) -> str:
        return str(record.get(key, record.get("id")))

    shared = set.intersection(*({row_id(x) for x in recs} for recs in records))
    if not shared:
        raise RowSetMismatch(
            f"{title}: the runs share no rows ({described}).",
            "Rerun them on the same rows (same --rows/--limit and data).",
        )
    notes.append(
        f"{title}: the runs cover different rows ({described}); each is scored here on the {len(shared)} rows they all "
        "share."
    )
    seeds = [(r.get("seed", 0), r.get("bootstrap_resamples", 1000)) for r in runs]
    return [
        dict(r, metrics=task.rescore([x for x in recs if row_id(x) in shared], r, seed=seed, n_boot=n_boot))
        for r, recs, (seed, n_boot) in zip(runs, records, seeds)
    ]


def _task_of(kind: str) -> registry.TaskInfo:
    task = registry.task_for_results(kind)
    if task is None or task.compare_table is None:
        raise InputError(
            f"Runs of task {kind!r} cannot be compared: no registered task writes them.",
            f"Compare runs of the registered tasks ({', '.join(registry.task_names())}).",
        )
    return task


def _same_rows(runs: list[dict]) -> bool:
    sets = [row_set(r) for r in runs]
    fingerprints = {r.get("dataset", {}).get("fingerprint") for r in runs}
    if len(fingerprints) > 1:
        return False
    if all(s.get("digest") for s in sets):
        return len({s["digest"] for s in sets}) == 1
    return len({s.get("count") for s in sets}) == 1


# ------------------------------------------------------------------------------------------ compare and render
def compare_runs(runs: Sequence[str | os.PathLike | dict]) -> Comparison:
    """One :class:`Table` per task, split/config and data over ``runs`` (run folders, results.json paths, or
    results dicts), best first; runs over different rows are rescored on their shared rows (noted) or their group
    is refused (:attr:`Comparison.refused`, with the reason) while the other groups are still tabled."""
    loaded = [r if isinstance(r, dict) else load_results([r])[0] for r in runs]
    groups: dict[tuple, list[dict]] = {}
    for results in loaded:
        groups.setdefault(data_identity(results), []).append(results)
    # a task and split shown on several data: each table names its data
    splits = [(kind, split) for kind, split, _ in groups]
    notes: list[str] = []
    refused: list[str] = []
    tables = []
    for (kind, split, _), members in groups.items():
        try:
            task = _task_of(kind)
        except InputError as exc:  # a run of no registered task: its group only is not compared
            refused.append(exc.problem + (f" {exc.fix}" if exc.fix else ""))
            continue
        title = f"{kind} ({split})" if task.title_with_split else kind
        if splits.count((kind, split)) > 1:
            title += f" on {data_label(members[0])}"
        if len(members) > 1 and not _same_rows(members):
            try:
                members = _on_shared_rows(title, kind, members, notes)
            except RowSetMismatch as exc:
                refused.append(exc.problem + (f" {exc.fix}" if exc.fix else ""))
                continue
        names = [run_name(r) for r in members]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            notes.append(
                f"{title}: several runs are named {', '.join(repeated)}; give each a --run-name (`eval score "
                "--run-name` for a "
                "rescored file) to tell them apart."
            )
        tables.append(task.compare_table(title, members))
    several = sorted({f"{kind} ({split})" for kind, split in splits if splits.count((kind, split)) > 1})
    if several:
        notes.insert(
            0,
            f"{', '.join(several)}: the runs were made on different data (see the Data column); each data has its "
            "own table, never ranked together.",
        )
    return Comparison(tables, notes, refused)


def _cell(row: dict, column: Column) -> str:
    value = row.get(column.key)
    if value is None:
        return "-"
    if column.kind == "text":
        return str(value)
    if column.kind == "int":
        return str(int(value))
    scale, digits = {"pct": (100, 2), "num": (1, 2), "ratio": (1, 3)}[column.kind]
    text = f"{scale * value:.{digits}f}"
    se = row.get(f"{column.key}_se")
    return text + (f" ± {scale * se:.{digits}f}" if se is not None else "")


def render_comparison(comparison: Comparison, fmt: str = "md") -> str:
    """``md`` (a markdown table per task, notes first), ``csv`` (one header + rows per table, a blank line
    between tables) or ``json`` (``{"notes", "tables": [{"title", "rows"}]}`` with raw numbers)."""
    if fmt not in FORMATS:
        raise InputError(f"--format {fmt}: not one of {', '.join(FORMATS)}.", "Use --format md, csv or json.")
    if fmt == "json":
        tables = [
            {
                "title": t.title,
                "columns": [c.key for c in t.columns],
                "rows": [{k: v for k, v in r.items() if k != "path"} | {"path": r.get("path")} for r in t.rows],
            }
            for t in comparison.tables
        ]
        return json.dumps(
            {"notes": comparison.notes, "refused": comparison.refused, "tables": tables}, indent=1, ensure_ascii=False
        )
    if fmt == "csv":
        blocks = []
        for t in comparison.tables:
            buffer = io.StringIO()
            writer = csv.writer(buffer, lineterminator="\n")
            keys = ["run", "model", "backend", "data"] + [
                k
                for c in t.columns
                for k in ((c.key, f"{c.key}_se") if c.kind in ("pct", "num", "ratio") else (c.key,))
            ]
            writer.writerow(["task"] + keys)
            for row in t.rows:
                writer.writerow(
                    [csv_cell(t.title)] + ["" if row.get(k) is None else csv_cell(row.get(k)) for k in keys]
                )
            blocks.append(buffer.getvalue())
        return "\n".join(blocks)
    lines = [f"Note: {n}" for n in comparison.notes] + [f"Not compared: {r}" for r in comparison.refused]
    for t in comparison.tables:
        titles = ["Run", "Model", "Backend", "Data"] + [c.title for c in t.columns]
        lines += ([""] if lines else []) + [
            f"**{md_cell(t.title)}**",
            "",
            "| " + " | ".join(titles) + " |",
            "|" + "---|" * len(titles),
        ]
        for row in t.rows:
            cells = [md_cell(row["run"]), md_cell(row["model"]), md_cell(row["backend"]), md_cell(row["data"])]
            cells += [md_cell(_cell(row, c)) if c.kind == "text" else _cell(row, c) for c in t.columns]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
