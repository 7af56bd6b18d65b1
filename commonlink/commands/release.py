"""`commonlink release build`: pairs (or chain) files -> a release folder (parquet shards + card + manifest)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from commonlink.commands._common import console, err_console, reports_errors, shows_progress
from commonlink.commands._options import (
    CardInfoOpt,
    CatalogRootOpt,
    OldProgressOpt,
    OptionalOutOpt,
    OptionalVersionOpt,
    OutOpt,
    OverwriteOpt,
    QuietOpt,
    VersionOpt,
    WorkersOpt,
)
from commonlink.errors import InputError
from commonlink.fileio import atomic_write_text
from commonlink.formats.release import CARD_FILENAME, DEFAULT_LICENSE, DEFAULT_VERSION
from commonlink.release.build import ReleaseOptions, build_release
from commonlink.release.card_info import (
    card_info_template,
    read_card_info,
    unanswered_questions,
)
from commonlink.release.card_rebuild import rebuild_card
from commonlink.release.licences import DEFAULT_LICENCE_CHECK
from commonlink.release.shards import parse_size


@reports_errors
def build(
    inputs: list[Path] = typer.Argument(
        ...,
        help="Pairs files from `commonlink pairs` (one split each; files sharing a split need distinct example ids), "
        "or chain files from `commonlink chains`.",
    ),
    out: OutOpt = ...,
    name: str | None = typer.Option(None, "--name", help="Pretty name shown on the card (default: the folder name)."),
    version: VersionOpt = DEFAULT_VERSION,
    license: str = typer.Option(
        DEFAULT_LICENSE,
        "--license",
        help="Hub license id for the card, e.g. cc-by-4.0, mit (default: the Common-O paper's license).",
    ),
    max_shard_size: str = typer.Option(
        "500MB",
        "--max-shard-size",
        help="Largest parquet shard, e.g. 500MB, 64MiB (shards are named {split}-00000-of-0000N.parquet).",
    ),
    overwrite: OverwriteOpt = False,
    card_info: CardInfoOpt = None,
    licence_check: str = typer.Option(
        DEFAULT_LICENCE_CHECK,
        "--licence-check",
        help="refuse: stop when an image's or 3D asset's licence is one the --license cannot carry (e.g. a "
        "cc-by-nc-4.0 photo in a cc-by-4.0 release; rules in docs/release.md); warn: build anyway and list them.",
    ),
    quiet: QuietOpt = False,
    progress: OldProgressOpt = None,
    catalog_root: CatalogRootOpt = None,
    workers: WorkersOpt = None,
) -> None:
    """Write a release folder from pairs files: parquet shards in the published Common-O schema, a Hub dataset card
    (YAML metadata + datasheet + figures) and manifest.json (sha256 of every file, toolkit version, seed, config),
    into --out (README.md, manifest.json, data/, figures/).

    The folder loads with plain `datasets.load_dataset(OUT)` and with `commonlink.kinds.common_o.loader.load_common_o`.
    """
    answers = tuple(read_card_info(card_info).items()) if card_info is not None else ()
    options = ReleaseOptions(
        name=name,
        version=version,
        license=license,
        max_shard_bytes=parse_size(max_shard_size),
        overwrite=overwrite,
        progress=shows_progress(quiet, progress),
        catalog_root=catalog_root,
        card_info=answers,
        licence_check=licence_check,
        workers=workers,
    )
    result = build_release(inputs, out, options)
    table = Table(title=f"{'Kept' if result.reused else 'Built'} {result.kind} release in {result.out_dir}")
    table.add_column("split / config")
    table.add_column("rows", justify="right")
    table.add_column("files")
    for split, info in result.splits.items():
        files = info.get("files", [])
        table.add_row(
            split,
            f"{info.get('rows', 0):,}",
            files[0] if len(files) == 1 else f"{len(files)} shards ({files[0]} ...)" if files else "-",
        )
    console.print(table)
    if result.figures:
        console.print(f"Figures: {', '.join(result.figures.values())}")
    for note in result.notes:
        err_console.print(f"[yellow]Note:[/] {escape(note)}", highlight=False)
    _report_unanswered(unanswered_questions((Path(result.out_dir) / CARD_FILENAME).read_text(encoding="utf-8")))


def _report_unanswered(keys: list[str]) -> None:
    if keys:
        err_console.print(
            f"[yellow]Note:[/] the card still marks {len(keys)} datasheet question(s) as unanswered "
            f"({', '.join(keys)}). Answer them in a card-info file "
            "(`commonlink release card-info --template --out card-info.yaml`), then "
            "`commonlink release card DIR --card-info card-info.yaml`; `release push` warns (refuses with --strict) "
            "until then.",
            highlight=False,
            soft_wrap=True,
        )


@reports_errors
def card_info(
    template: bool = typer.Option(
        False,
        "--template",
        help="Write the template: one key per question the build cannot answer, the question as a comment.",
    ),
    out: OptionalOutOpt = None,
    overwrite: OverwriteOpt = False,
) -> None:
    """The card-info file: the publisher's answers to the datasheet questions a build cannot answer from the data
    (creators and funding, sensitive data, collection process and review, consent, restrictions, maintainers).

    --out: the file to write (default: print it); an existing one is replaced only with --overwrite.
    """
    if not template:
        raise InputError(
            "Nothing to do: `release card-info` writes the template.",
            "Run `commonlink release card-info --template --out card-info.yaml`.",
        )
    text = card_info_template()
    if out is None:
        console.print(text, markup=False, highlight=False, soft_wrap=True)
        return
    if out.exists() and not overwrite:
        raise InputError(
            f"{out} exists; it may hold answers already.", "Pick another --out, or pass --overwrite to replace it."
        )
    atomic_write_text(out, text)
    console.print(
        f"Wrote {out}: fill in the answers, then `commonlink release build ... --card-info {out}`.", highlight=False
    )


@reports_errors
def card(
    release_dir: Path = typer.Argument(..., help="Release folder written by `commonlink release build`."),
    card_info: CardInfoOpt = ...,
    version: OptionalVersionOpt = None,
) -> None:
    """Rewrite a built release's card with new card info, keeping its manifest true (no hand edits: a card that
    differs from the manifest is refused by `release push`). Shards and figures are not touched. With --version
    the release gets that version too (a card fix pushed as a new version, without a rebuild)."""
    left = rebuild_card(release_dir, read_card_info(card_info), version=version)
    again = f" as version {version}" if version else ""
    console.print(f"Rewrote the card of {release_dir}{again} and updated its manifest.", highlight=False)
    _report_unanswered(left)
