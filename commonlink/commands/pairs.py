"""``commonlink pairs``: image catalogs -> a Common-O pairs file (two images, lettered choices, ground truth)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from commonlink.commands._common import console, parse_range, progress_shown, reports_errors
from commonlink.commands._options import ObjectsOpt, OutOpt, OverwriteOpt, QuietOpt, SeedOpt, SplitOpt
from commonlink.errors import InputError
from commonlink.formats.meta import meta_path
from commonlink.kinds.common_o.k_from import copy_k_distribution
from commonlink.kinds.common_o.pairs import PairsConfig, make_pairs_file


@reports_errors
def pairs(
    catalogs: list[Path] = typer.Argument(
        ..., metavar="CATALOG_DIR", help="One or more image catalog folders (each with catalog.jsonl)."
    ),
    out: OutOpt = ...,
    split: SplitOpt = "main",
    count: int | None = typer.Option(
        None,
        "--count",
        "-n",
        show_default=False,
        help="Number of examples to sample (with --k-from: the split's size).",
    ),
    objects: ObjectsOpt = None,
    max_common: int | None = typer.Option(
        None, "--max-common", help="Common-object counts range over 0..K (default K = the upper --objects bound)."
    ),
    common_distribution: str = typer.Option(
        "paper",
        "--common-distribution",
        help="How counts 0..K are spread: paper (the default: Figure 7's random sample, smoothed, none 11.4%; see "
        "docs/sampling.md), none=P (share P with nothing in common, the rest even), uniform, or weights w0,w1,...,wK.",
    ),
    k_from: str = typer.Option(
        None,
        "--k-from",
        metavar="RELEASE_OR_REPO",
        help="Copy the k distribution of this Common-O split (a release folder, parquet file or Hub dataset such as "
        "facebook/Common-O; the split named by --split) as exact counts per k; --count defaults to its size.",
    ),
    distractors: str = typer.Option(
        "one-image",
        "--distractors",
        help="one-image (objects in only one image first, then any other) or co-occurring (objects that co-occur "
        "with the true ones in the catalog, in proportion to how often: the paper's hallucination driver, §4.2).",
    ),
    choices: int = typer.Option(
        8,
        "--choices",
        help="Lettered choices per example (8 as in the paper); k + 2 when the k common objects leave no room for a "
        "distractor.",
    ),
    max_uses: int | None = typer.Option(
        None,
        "--max-uses",
        help="Most examples one image may appear in (default: 3x the average the request needs, at least 3).",
    ),
    real_fraction: float | None = typer.Option(
        None,
        "--real-fraction",
        help="Share of real-photo examples (default: 0 for challenge; for main 0.45 as the paper when both sources "
        "are present, else the one source).",
    ),
    seed: SeedOpt = 0,
    overwrite: OverwriteOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Sample Common-O examples (paper §3.1-3.2) from image catalogs.

    Both images of an example come from the same source (real or synthetic) and different scenes; the number
    of common objects follows --common-distribution; choices are the common objects, distractors (objects in
    one image first, then objects in neither) and "No objects are in common", shuffled and lettered. --out: the pairs
    file to write (JSON lines; a PAIRS_FILE.meta.json sidecar is written beside it); the same catalogs and --seed
    give the same file. Then: `commonlink release build PAIRS_FILE --out RELEASE_DIR`.
    """
    config = PairsConfig(
        split=split,
        count=count,
        objects=parse_range(objects, option="--objects") if objects else None,
        max_common=max_common,
        choices=choices,
        max_uses=max_uses,
        real_fraction=real_fraction,
        seed=seed,
        common_distribution=common_distribution,
        distractors=distractors,
    )
    if k_from is not None:
        config = copy_k_distribution(config, k_from, count_given=count is not None)
    elif count is None:
        raise InputError("--count is required (or --k-from, which takes another split's size).", "e.g. --count 1000.")
    result = make_pairs_file(catalogs, out, config, overwrite=overwrite, progress=progress_shown(quiet))
    if result.kept:
        console.print(
            f"{escape(str(out))} was already built from these catalogs with these settings; kept it.", highlight=False
        )
        print_stats(result.stats)
        return
    print_stats(result.stats)
    console.print(
        escape(f"Wrote {result.stats['examples']:,} examples to {out} (+ {meta_path(out).name})."),
        highlight=False,
        soft_wrap=True,
    )
    console.print(escape(f"Next: commonlink release build {out} --out RELEASE_DIR"), highlight=False, soft_wrap=True)


def print_stats(stats: dict) -> None:
    """The statistics summary: examples per common-object count and per source, choices, image reuse."""
    sources = list(stats["by_source"])
    table = Table(title=f"Common objects per example ({stats['split']}, {stats['examples']:,} examples)")
    table.add_column("common objects", justify="right")
    table.add_column("requested", justify="right")
    table.add_column("sampled", justify="right")
    for name in sources:
        table.add_column(name, justify="right")
    for k, requested in stats["common_objects_requested"].items():
        table.add_row(
            "none" if k == "0" else k,
            f"{requested:,}",
            f"{stats['common_objects'][k]:,}",
            *(f"{stats['by_source'][name]['common_objects'][k]:,}" for name in sources),
        )
    console.print(table)

    table = Table(title="Sources")
    for column in ("source", "examples", "eligible", "used", "uses max", "uses mean", "cap"):
        table.add_column(column, justify="left" if column == "source" else "right")
    for name in sources:
        s = stats["by_source"][name]
        table.add_row(
            name,
            f"{s['examples']:,}",
            f"{s['eligible_images']:,}",
            f"{s['images_used']:,}",
            str(s["image_uses_max"]),
            f"{s['image_uses_mean']:.2f}",
            str(s["max_uses"]),
        )
    console.print(table)
    share = stats["real_fraction"]
    console.print(
        f"Real share {share['achieved']:.1%} (requested {share['requested']:.1%}); "
        f"{stats['images_read']:,} images read from {stats['catalogs']} catalog(s), objects "
        f"{stats['objects'][0]}-{stats['objects'][1]}"
        + (
            f", {stats['duplicate_images_skipped']:,} duplicate image(s) skipped"
            if stats["duplicate_images_skipped"]
            else ""
        )
        + ".",
        highlight=False,
    )
    per_choice = ", ".join(f"{n:,} with {c}" for c, n in stats["choices_per_example"].items())
    console.print(f"Choices per example: {per_choice}; image reuse max {stats['image_uses_max']}.", highlight=False)
    floors = stats["baselines"]
    console.print(
        f"Baselines (the floor a model must beat): `none` {floors['none']:.1%}, `random` {floors['random']:.1%} "
        f"expected accuracy (distractors: {stats.get('distractors', 'one-image')}).",
        highlight=False,
        markup=False,
    )
    if stats["common_objects_missing"]:
        console.print(
            f"[bold red]NOT REACHED:[/] no example has {', '.join(map(str, stats['common_objects_missing']))} "
            f"object(s) in common (allowed 0-{stats['max_common']}); their share went to the other counts (notes "
            "below).",
            highlight=False,
            soft_wrap=True,
        )
    for note in stats["notes"]:
        console.print(f"[yellow]Note:[/] {escape(note)}", highlight=False, soft_wrap=True)
