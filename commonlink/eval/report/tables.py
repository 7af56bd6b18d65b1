"""Markdown tables of results (``results.md``, the eval commands' summaries) and reading results files;
runs side by side are :mod:`commonlink.eval.compare`'s."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

from commonlink.errors import InputError
from commonlink.eval.run_names import run_name
from commonlink.eval.scored import check_parsed, scored_line
from commonlink.eval.table_cells import md_cell


def _pct(group: dict, name: str, *, se: bool = True) -> str:
    value = group.get(name)
    if value is None:
        return "-"
    text = f"{100 * value:.2f}"
    if se and group.get(f"{name}_se") is not None:
        text += f" ± {100 * group[f'{name}_se']:.2f}"
    return text


_COLUMNS = [
    ("Accuracy (%)", "accuracy"),
    ("Halluc. rate (%)", "hallucination_rate"),
    ("1+ halluc. (%)", "hallucination_1plus"),
    ("2+ halluc. (%)", "hallucination_2plus"),
]


def _row(label: list[str], group: dict, *, perception: bool = False) -> str:
    if perception:
        cells = [_pct(group, "accuracy"), _pct(group, "hallucination_rate")]
    else:
        cells = [_pct(group, key) for _, key in _COLUMNS]
    cells.append(_pct(group, "parse_failure_rate", se=False))
    return "| " + " | ".join([md_cell(x) for x in label] + [str(group.get("n", 0))] + cells) + " |"


def hallucination_similarity_lines(analysis: dict | None) -> list[str]:
    """Markdown lines of the hallucination-by-distractor-similarity bins (none without the analysis)."""
    if not analysis or not analysis.get("bins"):
        return []
    r = "n/a" if analysis.get("r") is None else f"{analysis['r']:.3f}"
    lines = [
        "",
        f"**Hallucination by distractor similarity** ({analysis.get('embedding')}; {analysis.get('measure')}; "
        f"Pearson r with 1+ hallucination = {r} over {analysis.get('examples_used', 0)} examples)",
        "",
        "| Similarity | n | Halluc. rate (%) | 1+ halluc. (%) | Accuracy (%) |",
        "|---|---|---|---|---|",
    ]
    for b in analysis["bins"]:
        lines.append(
            f"| {b['low']:.3f}–{b['high']:.3f} | {b['n']} | {_pct(b, 'hallucination_rate')} | "
            f"{_pct(b, 'hallucination_1plus')} | {_pct(b, 'accuracy')} |"
        )
    return lines


def _header(first: list[str], *, perception: bool = False) -> list[str]:
    names = ["Accuracy (%)", "Halluc. rate (%)"] if perception else [title for title, _ in _COLUMNS]
    cols = first + ["n"] + names + ["Parse fail. (%)"]
    return ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]


def scored_lines(results: dict) -> list[str]:
    """How much was really scored (answers, unparseable share, refused requests) and, past the allowed share of
    unparseable answers, the warning in bold."""
    warning = (results.get("scored") or {}).get("warning") or check_parsed(results, 1.0, allow=True)
    return ["", scored_line(results)] + ([f"**{warning}**"] if warning else [])


def render_markdown_table(results: dict | Sequence[dict], *, breakdowns: bool = False) -> str:
    """A markdown table: one line per run (its name, model, backend, split), ± bootstrap standard errors; for
    one run, the line of how much was scored (:func:`scored_lines`).

    With ``breakdowns`` (single run), tables by real/synthetic, by objects per image and by number of common
    objects follow.
    """
    runs = [results] if isinstance(results, dict) else list(results)
    if not runs:
        return "(no results)"
    perception = all(r.get("task") == "perception" for r in runs)
    lines = _header(["Run", "Model", "Backend", "Split"], perception=perception)
    for r in runs:
        split = str(r.get("dataset", {}).get("split", "?"))
        if len({run.get("task") for run in runs}) > 1:
            split += f" ({r.get('task', '?')})"
        label = [run_name(r), str(r.get("model", "?")), str(r.get("backend", "?")), split]
        lines.append(_row(label, r.get("metrics", {}).get("overall", {}), perception=perception))
    if len(runs) == 1:
        lines += scored_lines(runs[0])
    if breakdowns and len(runs) == 1:
        metrics = runs[0].get("metrics", {})
        for title, key in (
            ("Source", "by_source"),
            ("Objects per image", "by_num_objects"),
            ("Common objects", "by_num_common"),
        ):
            groups = metrics.get(key)
            if not groups:
                continue
            lines += ["", f"**By {title.lower()}**", ""] + _header([title], perception=perception)
            lines += [_row([name], group, perception=perception) for name, group in groups.items()]
        sim = runs[0].get("object_similarity")
        if sim:
            r = "n/a" if sim.get("r") is None else f"{sim['r']:.3f}"
            p = "" if sim.get("p_value") is None else f", p = {sim['p_value']:.3g}"
            lines += [
                "",
                f"Object similarity ({sim.get('embedding')}): Pearson r = {r}{p} over {sim.get('examples_used', 0)} "
                "examples with 2+ common objects.",
            ]
        lines += hallucination_similarity_lines(runs[0].get("hallucination_similarity"))
        skipped = runs[0].get("skipped")
        if skipped:
            lines += ["", f"Skipped rows: {skipped} (see results.json `skipped_rows`)."]
    return "\n".join(lines)


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
