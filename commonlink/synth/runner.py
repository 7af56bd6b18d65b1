"""The scene loop behind ``commonlink synth``: plan, render, check visibility, write, resume, scale out.

Layout of a synthetic catalog folder::

    CATALOG_DIR/synth_config.json            toolkit version, seed, options, asset file hash
    CATALOG_DIR/catalog.jsonl                rebuilt from the finished scene folders at the end of every run
    CATALOG_DIR/scenes/scene_000012/plan.json       the scene plan (+ visibility per view)
    CATALOG_DIR/scenes/scene_000012/view_0.png      lit RGB render of camera 0
    CATALOG_DIR/scenes/scene_000012/mask_0.png      instance ids (0 = none, k + 1 = plan object k)
    CATALOG_DIR/scenes/scene_000012/records.jsonl   this scene's catalog records

Each scene is written to a temporary folder and renamed into place, so a scene folder is either complete or
absent; a rerun skips finished scenes and rebuilds ``catalog.jsonl`` from them (kill it anywhere, rerun, and the
catalog is complete with nothing duplicated). Scene ``i`` depends only on (job, i): shards (``i % n``), local
worker processes and Ray tasks all produce the same files. What a job is (:class:`~commonlink.synth.job.SynthJob`)
and the record ``synth_config.json`` holds are in :mod:`commonlink.synth.job`; one scene's planning, rendering and
folder, and the catalog rebuilt from the scene folders, in :mod:`commonlink.synth.scenes`.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import shutil
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from commonlink import __version__
from commonlink.constants import AREA_BAND
from commonlink.errors import InputError, MissingDependencyError
from commonlink.fileio import atomic_write_json
from commonlink.formats.meta import utc_now
from commonlink.progress import make_progress
from commonlink.synth.assets import AssetCatalog, load_assets
from commonlink.synth.job import SYNTH_CONFIG_FILE, SynthJob, changed_options
from commonlink.synth.scenes import (
    SCENES_DIR,
    AreaTally,
    clean_stale_temp_dirs,
    is_scene_done,
    rebuild_catalog,
    render_scene,
)

EXECUTORS = ("local", "ray")


@dataclass
class SynthSummary:
    out_dir: str
    scenes_in_shard: int
    scenes_rendered: int
    scenes_skipped: int
    views_written: int
    catalog_records: int
    resampled_scenes: int
    elapsed_s: float
    shard: tuple[int, int] = (0, 1)
    #: Over every scene in the catalog: (object, view) pairs planned, inside the area band, and hidden.
    object_views: int = 0
    in_band: int = 0
    hidden: int = 0
    area_band: tuple[float, float] = AREA_BAND

    @property
    def in_band_share(self) -> float:
        return self.in_band / self.object_views if self.object_views else 0.0

    @property
    def hidden_share(self) -> float:
        return self.hidden / self.object_views if self.object_views else 0.0


# --- paths and bookkeeping ---------------------------------------------------------------------------------


def shard_indices(scenes: int, shard: tuple[int, int]) -> list[int]:
    i, n = shard
    return list(range(i, scenes, n))


def asset_licenses(catalog: AssetCatalog) -> dict[str, int]:
    """{licence: number of assets} of an asset file (``"unknown"`` where an asset records none), for the card."""
    counts = Counter(asset.license or "unknown" for asset in catalog.assets)
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def _check_or_write_config(out_dir: Path, job: SynthJob, catalog: AssetCatalog, overwrite: bool) -> None:
    path = out_dir / SYNTH_CONFIG_FILE
    content = job.content(catalog)
    if path.is_file():
        previous = json.loads(path.read_text(encoding="utf-8"))
        changed = changed_options(previous.get("config", {}), content)
        if changed:
            if not overwrite:
                raise InputError(
                    f"{out_dir} holds scenes made with different options ({', '.join(changed)} changed).",
                    "Rerun with the same options to resume, choose another --out folder, or add --overwrite to delete "
                    "the existing scenes and start again.",
                )
            shutil.rmtree(out_dir / SCENES_DIR, ignore_errors=True)
            with contextlib.suppress(FileNotFoundError):
                (out_dir / "catalog.jsonl").unlink()
    atomic_write_json(
        path,
        {
            "kind": "commonlink_synth",
            "toolkit_version": __version__,
            "seed": job.seed,
            "config": content,
            "assets_file": catalog.path,
            "assets": len(catalog.assets),
            "asset_licenses": asset_licenses(catalog),
            # per object, so `release build` checks the licences of the assets its renders show (release/licences.py)
            "asset_license_by_object": {asset.name: asset.license for asset in catalog.assets},
            "scenes": job.scenes,
            "updated": utc_now(),
        },
    )


# --- executors ---------------------------------------------------------------------------------------------

_WORKER_STATE: dict = {}


def _render_task(out_dir: str, job: SynthJob, index: int) -> dict:
    """Render one scene in a worker process, reusing that process's renderer across its tasks."""
    if _WORKER_STATE.get("job") != job:
        if _WORKER_STATE.get("renderer") is not None:
            _WORKER_STATE["renderer"].close()
        catalog = load_assets(job.assets)
        _WORKER_STATE.update(job=job, catalog=catalog, renderer=job.open_renderer(catalog))
    result = render_scene(out_dir, job, _WORKER_STATE["catalog"], _WORKER_STATE["renderer"], index)
    return {"index": index, **result}


def _pool_task(args: tuple) -> dict:
    return _render_task(*args)


def _run_local(out_dir: Path, job: SynthJob, catalog: AssetCatalog, todo: list[int], on_done) -> None:
    renderer = job.open_renderer(catalog)
    try:
        for index in todo:
            on_done({"index": index, **render_scene(out_dir, job, catalog, renderer, index)})
    finally:
        renderer.close()


def _run_pool(out_dir: Path, job: SynthJob, todo: list[int], workers: int, scenes_per_process: int, on_done) -> None:
    # "spawn": a fresh interpreter per worker, never a fork of a process holding an OpenGL context. Workers are
    # replaced after `scenes_per_process` scenes so that long runs cannot accumulate memory.
    context = multiprocessing.get_context("spawn")
    tasks = [(str(out_dir), job, index) for index in todo]
    with context.Pool(workers, maxtasksperchild=scenes_per_process) as pool:
        try:
            for result in pool.imap_unordered(_pool_task, tasks):
                on_done(result)
        except BaseException:
            pool.terminate()
            raise


def _run_ray(out_dir: Path, job: SynthJob, todo: list[int], ray_address: str | None, on_done) -> None:
    try:
        import ray
    except ImportError as exc:
        raise MissingDependencyError("ray", "ray", "--executor ray") from exc
    started_here = False
    if not ray.is_initialized():
        ray.init(address=ray_address, include_dashboard=False, logging_level="WARNING", log_to_driver=False)
        started_here = True
    try:
        remote = ray.remote(num_cpus=1, max_retries=2)(_render_task)
        window = max(2, 2 * int(ray.cluster_resources().get("CPU", 1)))
        pending: list = []
        queue = list(todo)
        while queue or pending:
            while queue and len(pending) < window:  # bounded in flight: memory stays flat for huge runs
                pending.append(remote.remote(str(out_dir), job, queue.pop(0)))
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                on_done(ray.get(ref))
    finally:
        if started_here:
            ray.shutdown()


def synthesize(
    out_dir: str | os.PathLike,
    job: SynthJob,
    *,
    shard: tuple[int, int] = (0, 1),
    workers: int = 1,
    executor: str = "local",
    ray_address: str | None = None,
    overwrite: bool = False,
    progress: bool = True,
    scenes_per_process: int = 50,
) -> SynthSummary:
    """Render ``job.scenes`` scenes (this shard's part) into the catalog folder ``out_dir``; resumable."""
    started = time.perf_counter()
    out = Path(out_dir)
    if executor not in EXECUTORS:
        raise InputError(
            f"--executor {executor!r} is not one of {', '.join(EXECUTORS)}.", "Use --executor local or --executor ray."
        )
    if workers < 1:
        raise InputError(f"--workers {workers}: must be >= 1.", "e.g. --workers 4.")
    job.renderer.check_processes(workers, executor)
    catalog = load_assets(job.assets)
    job.plan.check(catalog)
    job.renderer.check_assets(catalog)  # before the output folder is touched: assets the renderer could not draw
    if out.exists() and not out.is_dir():
        raise InputError(f"--out {out} exists and is not a folder.", "Choose a folder path for the catalog.")
    (out / SCENES_DIR).mkdir(parents=True, exist_ok=True)
    _check_or_write_config(out, job, catalog, overwrite)
    (out / SCENES_DIR).mkdir(parents=True, exist_ok=True)
    clean_stale_temp_dirs(out)

    indices = shard_indices(job.scenes, shard)
    todo = [i for i in indices if not is_scene_done(out, i)]
    counts = {"rendered": 0, "views": 0, "resampled": 0}
    label = "Rendering scenes" + (f" (shard {shard[0]}/{shard[1]})" if shard[1] > 1 else "")
    with make_progress("scenes", disable=not progress) as bar:
        task = bar.add_task(label, total=len(todo))

        def on_done(result: dict) -> None:
            if not result.get("skipped"):
                counts["rendered"] += 1
                counts["views"] += result["views"]
                counts["resampled"] += int(result["attempts"] > 1)
            bar.advance(task)

        try:
            if todo and executor == "ray":
                _run_ray(out, job, todo, ray_address, on_done)
            elif todo and workers > 1:
                _run_pool(out, job, todo, workers, scenes_per_process, on_done)
            elif todo:
                _run_local(out, job, catalog, todo, on_done)
        except BaseException:
            # Stopped (error, Ctrl-C): still list the scenes finished so far; a rerun renders the rest.
            with contextlib.suppress(Exception):
                rebuild_catalog(out)
            raise
    tally = AreaTally(band=job.checks.area_band or AREA_BAND)
    records = rebuild_catalog(out, tally)
    return SynthSummary(
        out_dir=str(out),
        scenes_in_shard=len(indices),
        scenes_rendered=counts["rendered"],
        scenes_skipped=len(indices) - len(todo),
        views_written=counts["views"],
        catalog_records=records,
        resampled_scenes=counts["resampled"],
        elapsed_s=round(time.perf_counter() - started, 3),
        shard=shard,
        object_views=tally.object_views,
        in_band=tally.in_band,
        hidden=tally.hidden,
        area_band=tally.band,
    )
