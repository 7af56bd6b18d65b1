"""The Markdown table of Common-O and perception runs (``results.md``, the eval commands' summaries): accuracy and
hallucination rates ± bootstrap SE, and for one run its breakdowns and similarity analyses."""

from __future__ import annotations

from collections.abc import Sequence

from commonlink.eval.report.tables import pct, scored_lines
from commonlink.eval.run_names import run_name
from commonlink.eval.table_cells import md_cell

__all__ = ["common_o_markdown", "hallucination_similarity_lines"]


_COLUMNS = [
    ("Accuracy (%)", "accuracy"),
    ("Halluc. rate (%)", "hallucination_rate"),
    ("1+ halluc. (%)", "hallucination_1plus"),
    ("2+ halluc. (%)", "hallucination_2plus"),
]


def _row(label: list[str], group: dict, *, perception: bool = False) -> str:
    if perception:
        cells = [pct(group, "accuracy"), pct(group, "hallucination_rate")]
    else:
        cells = [pct(group, key) for _, key in _COLUMNS]
    cells.append(pct(group, "parse_failure_rate", se=False))
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
            f"| {b['low']:.3f}–{b['high']:.3f} | {b['n']} | {pct(b, 'hallucination_rate')} | "
            f"{pct(b, 'hallucination_1plus')} | {pct(b, 'accuracy')} |"
        )
    return lines


def _header(first: list[str], *, perception: bool = False) -> list[str]:
    names = ["Accuracy (%)", "Halluc. rate (%)"] if perception else [title for title, _ in _COLUMNS]
    cols = first + ["n"] + names + ["Parse fail. (%)"]
    return ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]


def common_o_markdown(runs: Sequence[dict], breakdowns: bool = False) -> str:
    """A markdown table: one line per run (its name, model, backend, split), ± bootstrap standard errors; for
    one run, the line of how much was scored (:func:`scored_lines`).

    With ``breakdowns`` (single run), tables by real/synthetic, by objects per image and by number of common
    objects follow.
    """
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
