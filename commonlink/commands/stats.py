"""``commonlink stats``: object-area statistics of an image catalog (exact masks for renders, SAM for photos)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from commonlink.catalog.areas import SUMMARY_FILENAME, compute_object_stats
from commonlink.catalog.sam_masks import (
    AutoMaskSettings,
    check_device_name,
    checkpoint_fingerprint,
    checkpoint_help,
    load_sam,
)
from commonlink.commands._common import console, err_console, reports_errors
from commonlink.commands._options import QuietOpt
from commonlink.errors import InputError


@reports_errors
def stats(
    catalog_dir: Path = typer.Argument(..., help="Image catalog folder (with catalog.jsonl).", show_default=False),
    sam_checkpoint: Path | None = typer.Option(
        None,
        "--sam-checkpoint",
        help="Segment Anything checkpoint (.pth) used to measure real photos. Never downloaded for you.",
    ),
    sam_model: str = typer.Option(
        "vit_b", "--sam-model", help="SAM architecture of the checkpoint: vit_b, vit_l or vit_h."
    ),
    device: str = typer.Option("cpu", "--device", help="Where SAM runs: cpu or cuda."),
    points_per_side: int = typer.Option(
        32, "--points-per-side", min=1, help="SAM automatic masks: grid of points per image side."
    ),
    min_area: float = typer.Option(
        0.005, "--min-area", min=0.0, max=1.0, help="Smallest plausible object mask, as a fraction of the image."
    ),
    max_area: float = typer.Option(
        0.40, "--max-area", min=0.0, max=1.0, help="Largest plausible object mask, as a fraction of the image."
    ),
    per_object: int = typer.Option(
        20, "--show-objects", min=0, help="Objects listed in the printed per-object table (all are saved)."
    ),
    quiet: QuietOpt = False,
) -> None:
    """Measure how much of each image its objects cover; store it in the catalog and summarise it.

    Renders are measured exactly from their instance masks. Real photos need Segment Anything: with box or
    point prompts in the catalog (extra.boxes / extra.points) areas are tied to object names; otherwise SAM's
    automatic masks give unnamed estimates (extra.estimated_object_areas). Results are cached per image in
    CATALOG/.stats_cache.jsonl; the summary is saved to CATALOG/stats_summary.json.
    """

    check_device_name(device)
    settings = AutoMaskSettings(points_per_side=points_per_side, min_fraction=min_area, max_fraction=max_area)
    loader = None
    model_id = ""
    if sam_checkpoint is not None:
        if not sam_checkpoint.is_file():
            raise InputError(f"SAM checkpoint not found: {sam_checkpoint}.", checkpoint_help(sam_model))
        model_id = f"{sam_model}:{checkpoint_fingerprint(sam_checkpoint)}"

        def loader():
            console.print(escape(f"Loading SAM {sam_model} from {sam_checkpoint} on {device} ..."))
            return load_sam(sam_checkpoint, sam_model, device)

    result = compute_object_stats(
        catalog_dir, load_sam=loader, model_id=model_id, settings=settings, progress=not quiet
    )
    _print_summary(result.summary, per_object)
    measured = ", ".join(f"{method}: {n}" for method, n in sorted(result.measured.items())) or "none"
    console.print(
        f"Measured images by method: {measured}; SAM results cached {result.cached}, computed {result.computed}.",
        soft_wrap=True,
    )
    console.print(
        f"Catalog updated; summary saved to {escape(str(Path(catalog_dir) / SUMMARY_FILENAME))}", soft_wrap=True
    )
    if result.needs_sam:
        err_console.print(
            f"[yellow]{result.needs_sam} photo(s) were not measured: they need a SAM checkpoint.[/]", soft_wrap=True
        )
        err_console.print(checkpoint_help(sam_model), highlight=False, soft_wrap=True)


def _pct(value) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _print_summary(summary: dict, per_object: int) -> None:
    if not any(row["count"] for row in summary["per_source"].values()):
        console.print("No object areas are known yet for this catalog.")
        return
    table = Table(title="Object area fraction by source", title_justify="left")
    for column in ("source", "values", "mean", "median", "p5", "p95", "min", "max"):
        table.add_column(column, justify="left" if column == "source" else "right")
    for source, row in summary["per_source"].items():
        table.add_row(
            escape(source), str(row["count"]), *(_pct(row[k]) for k in ("mean", "median", "p5", "p95", "min", "max"))
        )
    console.print(table)
    share = summary["paper_range"]["share_within"]
    if share is not None:
        console.print(f"Share of areas within the paper's 2–22% range: {100 * share:.0f}%")
    if per_object and summary["per_object"]:
        rows = sorted(summary["per_object"].items(), key=lambda item: -item[1]["count"])[:per_object]
        objects = Table(
            title=f"Per object (named areas; {len(rows)} of {len(summary['per_object'])})", title_justify="left"
        )
        for column in ("object", "images", "mean", "median", "p5", "p95"):
            objects.add_column(column, justify="left" if column == "object" else "right")
        for name, row in rows:
            objects.add_row(escape(name), str(row["count"]), *(_pct(row[k]) for k in ("mean", "median", "p5", "p95")))
        console.print(objects)
