"""``commonlink synth``: render synthetic scenes into an image catalog."""

from __future__ import annotations

from pathlib import Path

import typer

from commonlink.commands._common import console, parse_range, parse_resolution, reports_errors, shows_progress
from commonlink.commands._options import (
    AssetsOpt,
    ConnectTimeoutOpt,
    HostOpt,
    ObjectsOpt,
    OldProgressOpt,
    OutOpt,
    OverwriteOpt,
    PortOpt,
    QuietOpt,
    RendererOpt,
    ResolutionOpt,
    SeedOpt,
    ShardOpt,
    TimeoutOpt,
    WorkersOpt,
)
from commonlink.errors import parse_two
from commonlink.locks import output_lock
from commonlink.sharding import parse_shard
from commonlink.synth.job import SceneChecks, SynthJob
from commonlink.synth.plan import PlanConfig
from commonlink.synth.render import renderer_settings
from commonlink.synth.runner import synthesize


def _parse_band(text: str) -> tuple[float, float] | None:
    if text.strip().lower() in ("off", "none", ""):
        return None
    fix = "e.g. --area-band 0.02-0.22, or --area-band off."
    return parse_two(text, "-", float, f"--area-band {text!r} is not LOW-HIGH.", fix)


@reports_errors
def synth(
    out: OutOpt = ...,
    scenes: int = typer.Option(..., "--scenes", help="Number of scenes (each gives --views images)."),
    objects: ObjectsOpt = "3-7",
    views: int = typer.Option(4, "--views", help="Cameras per scene."),
    resolution: ResolutionOpt = "512x512",
    seed: SeedOpt = 0,
    backend: RendererOpt = "offline",
    assets: AssetsOpt = None,
    min_visible_pixels: int | None = typer.Option(
        None,
        "--min-visible-pixels",
        help="Pixels an object needs to count as present (default 0.05% of the image, at least 16).",
    ),
    max_hidden: float = typer.Option(
        0.25, "--max-hidden", help="Re-sample a scene when more than this share of (object, view) pairs is hidden."
    ),
    max_attempts: int = typer.Option(5, "--max-attempts", help="Plans tried per scene before keeping the best one."),
    area_band: str = typer.Option(
        "0.02-0.22",
        "--area-band",
        help="Object area band, LOW-HIGH fractions of the image (Common-O: 2-22%), or 'off' for no area gate.",
    ),
    min_in_band: float | None = typer.Option(
        None,
        "--min-in-band",
        help="Re-sample a scene when fewer than this share of its (object, view) pairs fall in --area-band (default "
        "0.8 for scenes of up to 7 objects, 0.55 for more).",
    ),
    max_yaw: float = typer.Option(
        15.0, "--max-yaw", help="Objects' random yaw, +- degrees (slight by default; 180 = any direction)."
    ),
    set_size: int = typer.Option(
        4,
        "--set-size",
        help="Scenes planned as one set from one object pool (pairs within a set share 0..N objects; 1: independent "
        "scenes).",
    ),
    set_pool: int | None = typer.Option(
        None, "--set-pool", help="Objects in a set's pool (default: twice the upper --objects bound)."
    ),
    set_share: float = typer.Option(
        1.0,
        "--set-share",
        help="Share of sets planned as sets (the rest: independent scenes); scales the within-set pairs, which share "
        "the most objects.",
    ),
    shadows: bool = typer.Option(
        False, "--shadows", help="Offline: shadow-mapped sunlight (about 3.5x the CPU) instead of soft contact shadows."
    ),
    shard: ShardOpt = None,
    workers: WorkersOpt = 1,
    executor: str = typer.Option("local", "--executor", help="local (this machine) or ray (tasks on a Ray cluster)."),
    ray_address: str | None = typer.Option(
        None, "--ray-address", help="Ray cluster address (default: start a local Ray instance)."
    ),
    host: HostOpt = "127.0.0.1",
    port: PortOpt = 9000,
    connect_timeout: ConnectTimeoutOpt = 10.0,
    timeout: TimeoutOpt = 60.0,
    overwrite: OverwriteOpt = False,
    quiet: QuietOpt = False,
    progress: OldProgressOpt = None,
) -> None:
    """Render synthetic multi-object scenes (Common-O §3.1) into an image catalog with `source: synthetic`.

    Each scene puts N distinct assets on a 4x4 floor grid (slight random rotation, size-normalised), lights it and
    renders `--views` cameras with instance masks; an object is listed for an image only when enough of it is
    visible. --out: the catalog folder to write (created); scene i depends only on (--seed, i). Scenes are written
    atomically; rerun the same command to resume. --host, --port, --connect-timeout and --timeout apply to
    --backend unrealcv. Join shards with `commonlink catalog merge`.
    """

    low, high = parse_range(objects, option="--objects")
    width, height = parse_resolution(resolution)
    sets = {"set_size": set_size, "set_pool": set_pool, "set_share": set_share}
    checks = {"min_visible_pixels": min_visible_pixels, "max_hidden_share": max_hidden, "max_attempts": max_attempts}
    # Each renderer takes its own options (--shadows: offline; --host, --port and the timeouts: unrealcv).
    renderer = {"shadows": shadows, "host": host, "port": port, "timeout": timeout, "connect_timeout": connect_timeout}
    job = SynthJob(
        scenes=scenes,
        seed=seed,
        assets=str(assets) if assets is not None else None,
        plan=PlanConfig(low, high, views, width, height, max_yaw_deg=max_yaw, **sets),
        checks=SceneChecks(area_band=_parse_band(area_band), min_in_band=min_in_band, **checks),
        renderer=renderer_settings(backend, **renderer),
    )
    part = parse_shard(shard) or (0, 1)
    # One run per output (per shard when sharded: shards of one folder run side by side).
    lock_file = None if part == (0, 1) else out.parent / f".{out.name}.shard-{part[0]}-of-{part[1]}.lock"
    with output_lock(out, what="commonlink synth", lock_file=lock_file):
        summary = synthesize(
            out,
            job,
            shard=part,
            workers=workers,
            executor=executor,
            ray_address=ray_address,
            overwrite=overwrite,
            progress=shows_progress(quiet, progress),
        )
    shard_note = f" (shard {summary.shard[0]}/{summary.shard[1]})" if summary.shard[1] > 1 else ""
    console.print(
        f"Scenes{shard_note}: {summary.scenes_rendered} rendered, {summary.scenes_skipped} already done "
        f"({summary.resampled_scenes} re-sampled); {summary.views_written} images in {summary.elapsed_s:.1f} s."
    )
    low, high = summary.area_band
    console.print(
        f"Object areas: {100 * summary.in_band_share:.1f}% of {summary.object_views} (object, view) pairs in "
        f"{100 * low:g}-{100 * high:g}% of the image; {100 * summary.hidden_share:.2f}% hidden."
    )
    console.print(f"Catalog: {summary.catalog_records} images in {Path(summary.out_dir) / 'catalog.jsonl'}")
