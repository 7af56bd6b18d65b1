"""``commonlink catalog merge`` and ``commonlink catalog info``."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from commonlink.catalog.info import catalog_summary
from commonlink.catalog.merge import LINK_MODES, merge_catalogs
from commonlink.commands._common import console, progress_shown, reports_errors
from commonlink.commands._options import JsonOpt, OutOpt, QuietOpt


@reports_errors
def merge(
    catalogs: list[Path] = typer.Argument(..., help="Catalog folders to join (each with a catalog.jsonl)."),
    out: OutOpt = ...,
    link: str = typer.Option(
        "copy",
        "--link",
        help=f"How images get into OUT: {', '.join(LINK_MODES)} (hardlink falls back to copy across file systems).",
    ),
    verify: bool = typer.Option(
        True,
        "--verify/--no-verify",
        help="Check each image against its record's sha256 while copying (the recorded hash is trusted while the "
        "file's size and mtime match the record's file stamp).",
    ),
    rehash: bool = typer.Option(
        False, "--rehash", help="Hash every image while verifying, even where its file stamp is unchanged."
    ),
    quiet: QuietOpt = False,
) -> None:
    """Join catalogs (e.g. render shards from several machines) into one: --out, created, or extended when it is
    a catalog already.

    Records are de-duplicated by id and sha256; the same image described differently in two catalogs is a
    conflict and the merge is refused (nothing is written). Images are copied atomically, catalog.jsonl is
    written last and atomically; re-running the same merge changes nothing.
    """
    report = merge_catalogs(catalogs, out, link=link, verify=verify, rehash=rehash, progress=progress_shown(quiet))
    for item in report.renamed[:10]:
        console.print(
            f"[yellow]path taken:[/] {escape(item['catalog'])}: {escape(item['from'])} stored as {escape(item['to'])}",
            highlight=False,
        )
    if len(report.renamed) > 10:
        console.print(f"... and {len(report.renamed) - 10} more renamed paths.")
    console.print(
        f"[bold]{report.added} record(s) added[/], {report.duplicates} duplicate(s) skipped, "
        f"{report.already_present} already in {escape(str(out))}; {report.images_written} image(s) "
        f"{'copied' if link == 'copy' else 'linked'}"
        + (f" ({report.fell_back_to_copy} copied: other file system)" if report.fell_back_to_copy else "")
        + f". The catalog holds {report.total} image(s).",
        highlight=False,
    )


@reports_errors
def info(
    catalog_dir: Path = typer.Argument(..., help="Catalog folder (with catalog.jsonl)."),
    top: int = typer.Option(10, "--top", min=0, help="How many of the most frequent objects to list."),
    as_json: JsonOpt = False,
    check_files: bool = typer.Option(
        True, "--check-files/--no-check-files", help="Check that every image file exists."
    ),
) -> None:
    """Print counts for a catalog: images, sources, scenes, objects per image, top objects."""
    summary = catalog_summary(catalog_dir, top=top, check_files=check_files)
    if as_json:
        typer.echo(json.dumps(summary, indent=2, ensure_ascii=False))
        return
    table = Table(title=escape(f"Catalog {catalog_dir}"), show_header=False)
    table.add_column("what")
    table.add_column("count", overflow="fold")
    per_image = summary["objects_per_image"]
    rows = [
        ("images", str(summary["images"])),
        ("sources", ", ".join(f"{k} {v}" for k, v in summary["sources"].items()) or "-"),
        (
            "scenes",
            f"{summary['scenes']} (" + ", ".join(f"{k} {v}" for k, v in summary["scenes_by_source"].items()) + ")",
        ),
        ("backgrounds / views", f"{summary['backgrounds']} / {summary['views']}"),
        ("distinct objects", str(summary["distinct_objects"])),
        ("objects per image", f"min {per_image['min']}, mean {per_image['mean']}, max {per_image['max']}"),
        ("objects per image histogram", ", ".join(f"{k}: {v}" for k, v in per_image["histogram"].items()) or "-"),
        ("images with object areas", str(summary["images_with_object_area"])),
        ("pixels per image", f"{summary['pixels']['min']:,} - {summary['pixels']['max']:,}"),
    ]
    if summary["missing_images"] is not None:
        rows.append(("missing image files", str(len(summary["missing_images"]))))
    for row in rows:
        table.add_row(*(escape(cell) for cell in row))
    console.print(table)
    if summary["top_objects"]:
        top_table = Table(title=f"Top {len(summary['top_objects'])} objects")
        top_table.add_column("object")
        top_table.add_column("images", justify="right")
        for name, count in summary["top_objects"]:
            top_table.add_row(escape(name), str(count))
        console.print(top_table)
    if summary["missing_images"]:
        console.print(
            f"[red]Missing image files:[/] {escape(', '.join(summary['missing_images'][:10]))}", highlight=False
        )
        raise typer.Exit(1)
