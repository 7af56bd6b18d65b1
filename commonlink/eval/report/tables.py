"""Markdown tables of results (``results.md``, the eval commands' summaries) and reading results files;
runs side by side are :mod:`commonlink.eval.compare`'s. Each task draws its own table
(:attr:`commonlink.registry.TaskInfo.results_table`); :func:`render_markdown_table` asks the runs' task for it."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

from commonlink import registry
from commonlink.errors import InputError
from commonlink.eval.scored import check_parsed, scored_line

__all__ = ["load_results", "pct", "render_markdown_table", "scored_lines"]


def pct(group: dict, name: str, *, se: bool = True) -> str:
    """``group[name]`` as a percentage with two decimals, ``± SE`` from ``group[name + "_se"]`` (``se``); "-" when
    the group lacks it."""
    value = group.get(name)
    if value is None:
        return "-"
    text = f"{100 * value:.2f}"
    if se and group.get(f"{name}_se") is not None:
        text += f" ± {100 * group[f'{name}_se']:.2f}"
    return text


def scored_lines(results: dict) -> list[str]:
    """How much was really scored (answers, unparseable share, refused requests) and, past the allowed share of
    unparseable answers, the warning in bold."""
    warning = (results.get("scored") or {}).get("warning") or check_parsed(results, 1.0, allow=True)
    return ["", scored_line(results)] + ([f"**{warning}**"] if warning else [])


def load_results(paths: Sequence[str | os.PathLike]) -> list[dict]:
    """Read results.json files (a run folder is accepted for its results.json)."""
    runs = []
    for path in paths:
        path = Path(path)
        if path.is_dir():
            path = path / "results.json"
        if not path.is_file():
            shards = sorted(path.parent.glob("results.shard-*.json")) if path.name == "results.json" else []
            if shards:
                raise InputError(
                    f"{path}: no results file; the folder holds shard results only "
                    f"({', '.join(p.name for p in shards)}).",
                    "Merge them: rerun the same `commonlink eval` command without --shard on this folder (no model is "
                    "loaded), "
                    "or pass a results.shard-K-of-N.json file.",
                )
            raise InputError(
                f"{path}: no results file.", "Give results.json files or run folders written by `commonlink eval`."
            )
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise InputError(
                f"{path}: not valid JSON ({exc}).", "Give results.json files written by `commonlink eval`."
            ) from exc
        if not isinstance(data, dict) or "metrics" not in data:
            raise InputError(
                f"{path}: not a commonlink results file (no 'metrics').",
                "Give results.json files written by `commonlink eval`.",
            )
        data["_path"] = str(path)
        runs.append(data)
    return runs


def render_markdown_table(results: dict | Sequence[dict], *, breakdowns: bool = False) -> str:
    """A markdown table of one run or several runs of a task, drawn by the task of the first
    (:attr:`commonlink.registry.TaskInfo.results_table`: one line per run, ± bootstrap standard errors, for one run
    the line of how much was scored; ``breakdowns``: the tables by group of one run)."""
    runs = [results] if isinstance(results, dict) else list(results)
    if not runs:
        return "(no results)"
    task = str(runs[0].get("task", ""))
    info = registry.task_for_results(task)
    if info is None or info.results_table is None:
        raise InputError(
            f"No results table for task {task!r}.",
            f"Give results.json files of a registered task ({', '.join(registry.task_names())}).",
        )
    return info.results_table(runs, breakdowns)
