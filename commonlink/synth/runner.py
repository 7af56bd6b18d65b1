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
catalog is complete with nothing duplicated). Scene ``i`` depends only on (seed, i): shards (``i % n``), local
worker processes and Ray tasks all produce the same files. One scene's planning, rendering and folder, and the
catalog rebuilt from the scene folders, are in :mod:`commonlink.synth.scenes`.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import shutil
import socket
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

from commonlink import __version__
from commonlink.constants import AREA_BAND, MAX_IMAGE_PIXELS
from commonlink.errors import InputError, MissingDependencyError
from commonlink.fileio import atomic_write_json, pid_alive
from commonlink.formats.meta import utc_now
from commonlink.progress import make_progress
from commonlink.synth.assets import AssetCatalog, load_assets
from commonlink.synth.plan import DEFAULT_SET_SIZE, PLAN_VERSION, PlanConfig
from commonlink.synth.render.base import Renderer
from commonlink.synth.render.offline import OfflineRenderer, check_sources
from commonlink.synth.render.unreal_check import (
    refuse_placeholder_classes,
    require_project_ready,
)
from commonlink.synth.render.unrealcv import UnrealCVBackend
from commonlink.synth.scenes import SCENES_DIR, AreaTally, is_scene_done, rebuild_catalog, render_scene
from commonlink.synth.visibility import default_min_visible_pixels

SYNTH_CONFIG_FILE = "synth_config.json"
BACKENDS = ("offline", "unrealcv")
EXECUTORS = ("local", "ray")


@dataclass
class SynthConfig:
    """Everything that decides what ``commonlink synth`` renders."""

    scenes: int
    objects: tuple[int, int] = (3, 7)
    views: int = 4
    resolution: tuple[int, int] = (512, 512)
    seed: int = 0
    backend: str = "offline"
    assets: str | None = None  #: asset file; None = the built-in one
    min_visible_pixels: int | None = None  #: None = 0.05% of the image (at least 16 px)
    max_hidden_share: float = 0.25  #: re-sample a plan when more (object, view) pairs than this are hidden
    #: Object area band (fraction of the image; Common-O reports 2-22%) and the share of a scene's (object, view)
    #: pairs that must fall in it; a plan below it is re-sampled. None: no area gate.
    area_band: tuple[float, float] | None = AREA_BAND
    min_in_band: float | None = None  #: None: 0.8 for scenes of up to 7 objects, 0.55 for more (see min_in_band_for)
    max_yaw: float = 15.0  #: objects' yaw range, +- degrees (180: any direction)
    max_attempts: int = 5  #: plans tried per scene before keeping the best one
    unrealcv_host: str = "127.0.0.1"
    unrealcv_port: int = 9000
    unrealcv_timeout: float = 60.0  #: seconds to wait for a reply (not part of the output's options)
    unrealcv_connect_timeout: float = 10.0  #: seconds to wait for a session to start
    mask_tolerance: int = 3  #: colour tolerance when reading Unreal object masks
    shadows: bool = False  #: offline: shadow-mapped sunlight (slower) instead of soft contact shadows
    set_size: int = DEFAULT_SET_SIZE  #: scenes planned together from one object pool (1: independent scenes)
    set_pool: int | None = None  #: objects in a set's pool; None: twice the upper object count
    set_share: float = 1.0  #: share of sets planned as sets (the others' scenes draw their objects on their own)

    def __post_init__(self) -> None:
        self.objects = tuple(self.objects)  # type: ignore[assignment]
        self.resolution = tuple(self.resolution)  # type: ignore[assignment]
        if self.assets is not None:  # worker processes and Ray tasks may run in another directory
            self.assets = str(Path(self.assets).resolve())
        if self.scenes < 0:
            raise InputError(f"--scenes {self.scenes}: must be >= 0.", "e.g. --scenes 100.")
        if self.backend not in BACKENDS:
            raise InputError(
                f"--backend {self.backend!r} is not one of {', '.join(BACKENDS)}.",
                "Use --backend offline or --backend unrealcv.",
            )
        if not 0.0 <= self.max_hidden_share <= 1.0:
            raise InputError(
                f"--max-hidden {self.max_hidden_share}: must be between 0 and 1.", "e.g. --max-hidden 0.25."
            )
        if self.area_band is not None:
            self.area_band = tuple(float(v) for v in self.area_band)  # type: ignore[assignment]
            low, high = self.area_band
            if not 0.0 <= low < high <= 1.0:
                raise InputError(
                    f"--area-band {low}-{high}: need 0 <= LOW < HIGH <= 1 (fractions of the image).",
                    "e.g. --area-band 0.02-0.22, or --area-band off to drop the gate.",
                )
        if self.min_in_band is not None and not 0.0 <= self.min_in_band <= 1.0:
            raise InputError(f"--min-in-band {self.min_in_band}: must be between 0 and 1.", "e.g. --min-in-band 0.7.")
        if self.max_attempts < 1:
            raise InputError(f"--max-attempts {self.max_attempts}: must be >= 1.", "e.g. --max-attempts 5.")
        if self.min_visible_pixels is not None and self.min_visible_pixels < 1:
            raise InputError(
                f"--min-visible-pixels {self.min_visible_pixels}: must be at least 1 pixel.",
                "Leave it out for the default (0.05% of the image, at least 16), or e.g. --min-visible-pixels 50.",
            )
        width, height = self.resolution
        if width < 1 or height < 1 or width * height > MAX_IMAGE_PIXELS:
            raise InputError(
                f"--resolution {width}x{height}: each side must be at least 1 and the image at most "
                f"{MAX_IMAGE_PIXELS:,} pixels (the pixel cap every commonlink image reader enforces).",
                "e.g. --resolution 512x512 or 1024x768 (raise COMMONLINK_MAX_IMAGE_PIXELS for bigger renders).",
            )

    @property
    def pixel_threshold(self) -> int:
        if self.min_visible_pixels is not None:
            return int(self.min_visible_pixels)
        return default_min_visible_pixels(*self.resolution)

    def plan_config(self) -> PlanConfig:
        return PlanConfig(
            min_objects=self.objects[0],
            max_objects=self.objects[1],
            views=self.views,
            width=self.resolution[0],
            height=self.resolution[1],
            max_yaw_deg=self.max_yaw,
            set_size=self.set_size,
            set_pool=self.set_pool,
            set_share=self.set_share,
        )

    def content(self, catalog: AssetCatalog) -> dict:
        """The options that change the output (a resumed run must match them); not the scene count or the
        server address."""
        return {
            "plan_version": PLAN_VERSION,
            "objects": list(self.objects),
            "views": self.views,
            "resolution": list(self.resolution),
            "seed": self.seed,
            "backend": self.backend,
            "assets_sha256": catalog.sha256,
            "min_visible_pixels": self.pixel_threshold,
            "max_hidden_share": self.max_hidden_share,
            "max_attempts": self.max_attempts,
            "mask_tolerance": self.mask_tolerance,
            "shadows": self.shadows,
            "area_band": list(self.area_band) if self.area_band else None,
            "min_in_band": self.min_in_band,
            "max_yaw": self.max_yaw,
            "set_size": self.set_size,
            "set_pool": self.set_pool,
            "set_share": self.set_share,
        }


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


def _clean_stale_temp_dirs(scenes_root: Path) -> None:
    """Remove temporary scene folders left by killed runs of this host (live processes keep theirs)."""
    host = socket.gethostname()
    for tmp in scenes_root.glob(".tmp-scene_*"):
        parts = tmp.name.rsplit("-", 2)
        if len(parts) != 3 or parts[1] != host:
            continue
        with contextlib.suppress(ValueError):
            pid = int(parts[2])
            if pid == os.getpid() or not pid_alive(pid):
                shutil.rmtree(tmp, ignore_errors=True)


def asset_licenses(catalog: AssetCatalog) -> dict[str, int]:
    """{licence: number of assets} of an asset file (``"unknown"`` where an asset records none), for the card."""
    counts = Counter(asset.license or "unknown" for asset in catalog.assets)
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def _check_or_write_config(out_dir: Path, config: SynthConfig, catalog: AssetCatalog, overwrite: bool) -> None:
    path = out_dir / SYNTH_CONFIG_FILE
    content = config.content(catalog)
    if path.is_file():
        previous = json.loads(path.read_text(encoding="utf-8"))
        old = previous.get("config", {})
        if old != content:
            if not overwrite:
                changed = sorted(k for k in set(old) | set(content) if old.get(k) != content.get(k))
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
            "seed": config.seed,
            "config": content,
            "assets_file": catalog.path,
            "assets": len(catalog.assets),
            "asset_licenses": asset_licenses(catalog),
            "scenes": config.scenes,
            "updated": utc_now(),
        },
    )


# --- backends ----------------------------------------------------------------------------------------------


def open_backend(config: SynthConfig, catalog: AssetCatalog) -> Renderer:
    """The renderer ``config.backend`` names (see :class:`commonlink.synth.render.Renderer`)."""
    width, height = config.resolution
    if config.backend == "offline":
        return OfflineRenderer(width, height, catalog, shadows=config.shadows)
    backend = UnrealCVBackend(
        config.unrealcv_host,
        config.unrealcv_port,
        catalog,
        width=width,
        height=height,
        mask_tolerance=config.mask_tolerance,
        timeout=config.unrealcv_timeout,
        connect_timeout=config.unrealcv_connect_timeout,
    )
    # Refuse placeholder classes, then every class the game lacks (all at once), before rendering anything; on the
    # session the renders then use (a Linux game serves one TCP session per run).
    try:
        require_project_ready(config.unrealcv_host, config.unrealcv_port, catalog, connection=backend.connection)
    except BaseException:
        backend.close()
        raise
    return backend


# --- executors ---------------------------------------------------------------------------------------------

_WORKER_STATE: dict = {}


def _render_task(out_dir: str, config_json: dict, index: int) -> dict:
    """Render one scene in a worker process, reusing that process's renderer across its tasks."""
    key = json.dumps(config_json, sort_keys=True)
    if _WORKER_STATE.get("key") != key:
        if _WORKER_STATE.get("backend") is not None:
            _WORKER_STATE["backend"].close()
        config = SynthConfig(**config_json)
        catalog = load_assets(config.assets)
        _WORKER_STATE.update(key=key, config=config, catalog=catalog, backend=open_backend(config, catalog))
    result = render_scene(out_dir, _WORKER_STATE["config"], _WORKER_STATE["catalog"], _WORKER_STATE["backend"], index)
    return {"index": index, **result}


def _pool_task(args: tuple) -> dict:
    return _render_task(*args)


def _run_local(out_dir: Path, config: SynthConfig, catalog: AssetCatalog, todo: list[int], on_done) -> None:
    backend = open_backend(config, catalog)
    try:
        for index in todo:
            on_done({"index": index, **render_scene(out_dir, config, catalog, backend, index)})
    finally:
        backend.close()


def _run_pool(
    out_dir: Path, config: SynthConfig, todo: list[int], workers: int, scenes_per_process: int, on_done
) -> None:
    # "spawn": a fresh interpreter per worker, never a fork of a process holding an OpenGL context. Workers are
    # replaced after `scenes_per_process` scenes so that long runs cannot accumulate memory.
    context = multiprocessing.get_context("spawn")
    tasks = [(str(out_dir), asdict(config), index) for index in todo]
    with context.Pool(workers, maxtasksperchild=scenes_per_process) as pool:
        try:
            for result in pool.imap_unordered(_pool_task, tasks):
                on_done(result)
        except BaseException:
            pool.terminate()
            raise


def _run_ray(out_dir: Path, config: SynthConfig, todo: list[int], ray_address: str | None, on_done) -> None:
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
        config_json = asdict(config)
        pending: list = []
        queue = list(todo)
        while queue or pending:
            while queue and len(pending) < window:  # bounded in flight: memory stays flat for huge runs
                pending.append(remote.remote(str(out_dir), config_json, queue.pop(0)))
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                on_done(ray.get(ref))
    finally:
        if started_here:
            ray.shutdown()


def synthesize(
    out_dir: str | os.PathLike,
    config: SynthConfig,
    *,
    shard: tuple[int, int] = (0, 1),
    workers: int = 1,
    executor: str = "local",
    ray_address: str | None = None,
    overwrite: bool = False,
    progress: bool = True,
    scenes_per_process: int = 50,
) -> SynthSummary:
    """Render ``config.scenes`` scenes (this shard's part) into the catalog folder ``out_dir``; resumable."""
    started = time.perf_counter()
    out = Path(out_dir)
    if executor not in EXECUTORS:
        raise InputError(
            f"--executor {executor!r} is not one of {', '.join(EXECUTORS)}.", "Use --executor local or --executor ray."
        )
    if workers < 1:
        raise InputError(f"--workers {workers}: must be >= 1.", "e.g. --workers 4.")
    if config.backend == "unrealcv" and (workers > 1 or executor == "ray"):
        raise InputError(
            "The UnrealCV plugin serves one client at a time, so --backend unrealcv runs in one process.",
            "Drop --workers/--executor ray, or start several Unreal instances and give each a --shard I/N "
            "and its --port.",
        )
    catalog = load_assets(config.assets)
    config.plan_config().check(catalog)
    # Before the output folder is touched: assets the chosen renderer could not draw.
    if config.backend == "unrealcv":
        refuse_placeholder_classes(catalog)
    else:
        check_sources(catalog)
    if out.exists() and not out.is_dir():
        raise InputError(f"--out {out} exists and is not a folder.", "Choose a folder path for the catalog.")
    (out / SCENES_DIR).mkdir(parents=True, exist_ok=True)
    _check_or_write_config(out, config, catalog, overwrite)
    (out / SCENES_DIR).mkdir(parents=True, exist_ok=True)
    _clean_stale_temp_dirs(out / SCENES_DIR)

    indices = shard_indices(config.scenes, shard)
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
                _run_ray(out, config, todo, ray_address, on_done)
            elif todo and workers > 1:
                _run_pool(out, config, todo, workers, scenes_per_process, on_done)
            elif todo:
                _run_local(out, config, catalog, todo, on_done)
        except BaseException:
            # Stopped (error, Ctrl-C): still list the scenes finished so far; a rerun renders the rest.
            with contextlib.suppress(Exception):
                rebuild_catalog(out)
            raise
    tally = AreaTally(band=config.area_band or AREA_BAND)
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
