"""``commonlink demo``: the whole flow on embedded defaults (render → pairs → release → load → score)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape

from commonlink.commands._common import console, parse_resolution, reports_errors
from commonlink.commands._options import OutOpt, QuietOpt, ResolutionOpt, SeedOpt, WorkersOpt
from commonlink.commands.eval import report_line
from commonlink.demo import k_spread_lines, run_demo
from commonlink.eval.report.tables import render_markdown_table


@reports_errors
def demo(
    out: OutOpt = Path("commonlink-demo"),
    seed: SeedOpt = 0,
    scale: float = typer.Option(
        1.0, "--scale", min=0.05, help="Multiply the number of scenes and examples (1.0: 40 scenes, 180 examples)."
    ),
    resolution: ResolutionOpt = "384x384",
    workers: WorkersOpt = 1,
    quiet: QuietOpt = False,
) -> None:
    """Render a small synthetic set with the offline renderer, sample Common-O pairs for both splits, build a
    release that `datasets.load_dataset` opens, score the random and none baselines on it, and write an HTML
    report of their predictions with the images (one page per split). --out: the folder for everything the demo
    writes (rerun to continue)."""

    result = run_demo(
        out,
        seed=seed,
        scale=scale,
        resolution=parse_resolution(resolution, example="384x384"),
        workers=workers,
        progress=not quiet,
        log=lambda msg: console.print(f"[bold cyan]{escape(msg)}[/]", highlight=False, soft_wrap=True),
    )
    console.print()
    console.print(render_markdown_table(result.results), highlight=False, markup=False, soft_wrap=True)
    console.print()
    console.print("[bold]Common objects per example (k spread) and floors[/]")
    for split, stats in result.pair_stats.items():
        for line in k_spread_lines(split, stats):
            console.print(escape(line), highlight=False, soft_wrap=True)
    console.print()
    console.print("[bold]Where everything went[/]")
    for split, path in result.catalogs.items():
        console.print(f"  image catalog ({split}): {path}/catalog.jsonl  (renders in {path}/scenes/)", soft_wrap=True)
    for split, path in result.pairs.items():
        console.print(f"  pairs ({split}): {path}", soft_wrap=True)
    rows = ", ".join(f"{split} {n} rows" for split, n in result.rows.items())
    console.print(
        f"  release: {result.release}  (README.md card, figures/, data/*.parquet; load_dataset gives {rows})",
        soft_wrap=True,
    )
    for name, path in result.eval_runs.items():
        console.print(
            f"  eval ({name}): {path}/results.json, predictions.jsonl, results.md, report.html", soft_wrap=True
        )
    for split, summary in result.reports.items():
        console.print(
            f"  report ({split}, baselines side by side): {report_line(summary)}", highlight=False, soft_wrap=True
        )
    console.print(
        f"\nNext: `commonlink eval commono --data {result.release} --split main --model <your model>`", soft_wrap=True
    )
