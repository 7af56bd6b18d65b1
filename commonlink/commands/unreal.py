"""``commonlink unreal check``: preflight of the running Unreal project against an asset file."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from commonlink.commands._common import console, progress_shown, reports_errors
from commonlink.commands._options import AssetsOpt, ConnectTimeoutOpt, HostOpt, JsonOpt, PortOpt, QuietOpt, TimeoutOpt
from commonlink.errors import InputError
from commonlink.synth.assets import load_assets
from commonlink.synth.render.unreal_check import check_project, refuse_placeholder_classes


def _triple(values) -> str:
    return "-" if values is None else " x ".join(f"{v:.1f}" for v in values)


@reports_errors
def check(
    asset_file: AssetsOpt = None,
    old_asset_file: Path | None = typer.Option(None, "--asset-file", hidden=True, help="Old name of --assets."),
    host: HostOpt = "127.0.0.1",
    port: PortOpt = 9000,
    as_json: JsonOpt = False,
    connect_timeout: ConnectTimeoutOpt = 10.0,
    timeout: TimeoutOpt = 60.0,
    quiet: QuietOpt = False,
) -> None:
    """Check a running Unreal game (Play pressed, UnrealCV plugin listening) against an asset file.

    Spawns every class of the asset file once at the origin, reads its bounds, shows it alone to a camera to see that
    it is drawn in object masks, destroys it, and reports every class the game cannot spawn (missing, or not loaded:
    the plugin only finds classes in memory), every size or pivot that differs from the asset file, and every class
    missing from masks. Exit status 1 when anything is wrong. `commonlink synth --backend unrealcv`
    runs the same check before rendering.
    """

    asset_file = asset_file or old_asset_file
    if asset_file is None:
        raise InputError("No asset file given.", "Pass --assets FILE (written by tools/unreal/commonlink_import.py).")
    catalog = load_assets(asset_file)
    refuse_placeholder_classes(catalog)
    report = check_project(
        host,
        port,
        catalog,
        timeout=timeout,
        connect_timeout=connect_timeout,
        progress=progress_shown(as_json or quiet),
    )
    if as_json:
        typer.echo(json.dumps(report.to_json(), indent=2))
    else:
        table = Table(
            title=escape(
                f"{report.scene} at {host}:{port}, UnrealCV {report.plugin_version}, {report.level_actors} level actors"
            )
        )
        for column in ("class", "kind", "name", "status", "measured cm", "asset file cm", "problem"):
            table.add_column(column, overflow="fold")
        for c in report.classes:
            style = {"ok": "green", "missing": "red", "mismatch": "yellow"}[c.status]
            table.add_row(
                escape(c.ue_class),
                c.kind,
                escape(c.name),
                f"[{style}]{c.status}[/]",
                _triple(c.measured_size_cm),
                _triple(c.expected_size_cm),
                escape(c.reply or "; ".join(c.problems)),
            )
        console.print(table)
        console.print(escape(report.describe()), highlight=False, soft_wrap=True)
        if not report.ok:
            console.print(escape(f"Fix: {report.fix(str(asset_file))}"), highlight=False, soft_wrap=True)
    if not report.ok:
        raise typer.Exit(1)
