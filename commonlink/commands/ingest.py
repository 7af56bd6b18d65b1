"""``commonlink ingest``: real photos + a label manifest -> an image catalog."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from commonlink.catalog.ingest import (
    DEFAULT_CHECKPOINT_EVERY,
    DEFAULT_NEAR_DUPLICATE_DISTANCE,
    REPORT_FILENAME,
    IngestReport,
    ingest_photos,
)
from commonlink.commands._common import console, progress_shown, reports_errors
from commonlink.commands._options import ManifestOpt, MinPixelsOpt, OutOpt, QuietOpt, StrictIngestOpt
from commonlink.constants import DEFAULT_MIN_PIXELS
from commonlink.errors import InputError

_SHOWN_ROWS = 50  # longer lists are in ingest_report.json


@reports_errors
def ingest(
    photos_dir: Path = typer.Argument(..., help="Folder holding the photos (the manifest's paths are relative to it)."),
    manifest: ManifestOpt = ...,
    out: OutOpt = ...,
    vocabulary: Path | None = typer.Option(
        None,
        "--vocabulary",
        help="Object names, one a line, optionally `name: synonym1, synonym2`. Without it the vocabulary is the "
        "manifest's own names plus the existing catalog's, so misspelt names CANNOT be refused (they are only "
        "flagged as possible typos).",
    ),
    min_pixels: MinPixelsOpt = DEFAULT_MIN_PIXELS,
    near_duplicate_distance: int = typer.Option(
        DEFAULT_NEAR_DUPLICATE_DISTANCE,
        "--near-duplicate-distance",
        help="Two photos whose 64-bit perceptual hashes differ in at most this many bits are near-duplicates (0 = "
        "only identical hashes).",
    ),
    allow_near_duplicates: bool = typer.Option(
        False, "--allow-near-duplicates", help="Keep near-duplicates (they are still reported as pairs)."
    ),
    checkpoint_every: int = typer.Option(
        DEFAULT_CHECKPOINT_EVERY,
        "--checkpoint-every",
        help="Save the work after this many changes (appended to a journal with one fsync; catalog.jsonl is rewritten "
        "with a bounded total cost), so an interruption keeps the work done.",
    ),
    strict: StrictIngestOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Ingest labelled photos into an image catalog (--out: the catalog folder to create or add to, catalog.jsonl +
    images/).

    Each photo is turned upright (EXIF orientation), stripped of all metadata (EXIF, GPS, XMP, comments; the
    colour profile is kept) and stored at full resolution: JPEG stays JPEG, HEIC/HEIF becomes JPEG (quality 95),
    PNG/WebP/others become PNG. Refused photos (too small, corrupt, missing, path outside PHOTOS_DIR, no or unknown
    object names, exact or near duplicates) are listed with the reason, and in OUT/ingest_report.json. Re-running
    is safe: known photos are skipped, new ones added, changed labels updated.
    """
    report = ingest_photos(
        photos_dir,
        manifest,
        out,
        vocabulary=vocabulary,
        min_pixels=min_pixels,
        near_duplicate_distance=near_duplicate_distance,
        allow_near_duplicates=allow_near_duplicates,
        checkpoint_every=checkpoint_every,
        progress=progress_shown(quiet),
    )
    print_ingest_report(report)
    counts = report.counts()
    if report.refused and not (counts["added"] or counts["updated"] or counts["unchanged"]):
        # every listed photo was refused: a script must not go on with an empty (or unchanged) catalog
        raise InputError(
            f"no photo was ingested: all {counts['refused']} photo(s) the manifest lists were refused (reasons above "
            f"and in {Path(report.catalog_dir) / REPORT_FILENAME}).",
            "Fix the refused photos or their labels (or lower --min-pixels), then run again.",
        )
    if strict and report.refused:
        raise typer.Exit(2)


def print_ingest_report(report: IngestReport) -> None:
    counts = report.counts()
    if report.refused:
        table = Table(title=f"Refused photos ({len(report.refused)})", show_lines=False)
        table.add_column("file", overflow="fold")
        table.add_column("line", justify="right")
        table.add_column("reason")
        table.add_column("detail", overflow="fold")
        for refusal in report.refused[:_SHOWN_ROWS]:
            table.add_row(escape(refusal.file), str(refusal.line), refusal.reason, escape(refusal.detail))
        console.print(table)
        if len(report.refused) > _SHOWN_ROWS:
            console.print(f"... and {len(report.refused) - _SHOWN_ROWS} more (see {REPORT_FILENAME}).")
    if report.near_duplicates:
        table = Table(title=f"Near-duplicate pairs ({len(report.near_duplicates)})")
        for column in ("photo", "near-duplicate of", "distance", "kept"):
            table.add_column(column, overflow="fold")
        for pair in report.near_duplicates[:_SHOWN_ROWS]:
            table.add_row(
                escape(pair.file_b), escape(pair.file_a), str(pair.distance), "both" if pair.kept_both else "first only"
            )
        console.print(table)
    if report.unlisted:
        shown = escape(", ".join(report.unlisted[:10]) + (" ..." if len(report.unlisted) > 10 else ""))
        console.print(
            f"[yellow]{len(report.unlisted)} photo(s) on disk are not in the manifest:[/] {shown}", highlight=False
        )
    if report.folder_scenes:
        shown = escape(", ".join(f"{folder!r} ({n} photos)" for folder, n in list(report.folder_scenes.items())[:10]))
        console.print(
            f"[yellow]The manifest gives no scene, so each folder became one scene:[/] {shown}. Two photos of one "
            "scene are never paired with each other; add a `scene` column (one scene per place photographed) unless "
            "each folder really is one scene.",
            highlight=False,
        )
    if report.possible_typos:
        pairs = escape(", ".join(f"{rare!r} ~ {common!r}" for rare, common in report.possible_typos[:10]))
        console.print(f"[yellow]Possible misspellings (pass --vocabulary to refuse them):[/] {pairs}", highlight=False)
    console.print(
        f"[bold]{counts['added']} added[/], {counts['updated']} updated, {counts['unchanged']} already in the catalog, "
        f"{counts['refused']} refused; the catalog now holds {counts['catalog_size']} image(s).\n"
        f"Catalog: {escape(str(Path(report.catalog_dir)))}  Report: "
        f"{escape(str(Path(report.catalog_dir) / REPORT_FILENAME))}",
        highlight=False,
    )
