"""One scene of a synthetic catalog, and the catalog made from the finished ones.

:func:`render_scene` plans scene ``i`` of a :class:`~commonlink.synth.job.SynthJob` (re-sampling while the job's
:class:`~commonlink.synth.job.SceneChecks` fail), renders it and writes its folder atomically (a temporary folder
renamed into place, ``records.jsonl`` written last); :func:`rebuild_catalog` rewrites ``catalog.jsonl`` from every
finished scene folder. The loop over scenes, shards and executors is :mod:`commonlink.synth.runner`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path

import numpy as np
from PIL import Image

from commonlink import __version__
from commonlink.constants import AREA_BAND
from commonlink.errors import InputError
from commonlink.fileio import atomic_write_json, pid_alive, read_jsonl, sha256_bytes, write_jsonl
from commonlink.formats.catalog import CatalogRecord, catalog_lock, write_catalog
from commonlink.synth.assets import AssetCatalog
from commonlink.synth.job import SynthJob
from commonlink.synth.plan import plan_scene
from commonlink.synth.render import Renderer
from commonlink.synth.visibility import band_counts, hidden_share, object_areas

SCENES_DIR = "scenes"


def scene_dir(out_dir: str | os.PathLike, index: int) -> Path:
    return Path(out_dir) / SCENES_DIR / f"scene_{index:06d}"


def is_scene_done(out_dir: str | os.PathLike, index: int) -> bool:
    return (scene_dir(out_dir, index) / "records.jsonl").is_file()


def clean_stale_temp_dirs(out_dir: str | os.PathLike) -> None:
    """Remove temporary scene folders (see :func:`render_scene`) left by killed runs of this host (live processes
    keep theirs)."""
    host = socket.gethostname()
    for tmp in (Path(out_dir) / SCENES_DIR).glob(".tmp-scene_*"):
        parts = tmp.name.rsplit("-", 2)
        if len(parts) != 3 or parts[1] != host:
            continue
        with contextlib.suppress(ValueError):
            pid = int(parts[2])
            if pid == os.getpid() or not pid_alive(pid):
                shutil.rmtree(tmp, ignore_errors=True)


def _png_bytes(array: np.ndarray) -> bytes:
    buffer = BytesIO()
    if array.ndim == 2:
        image = (
            Image.fromarray(array.astype(np.uint8))
            if array.max(initial=0) < 256
            else Image.fromarray(array.astype(np.uint16))
        )
    else:
        image = Image.fromarray(array)
    image.save(buffer, format="PNG", compress_level=1)
    return buffer.getvalue()


def plan_and_render(job: SynthJob, catalog: AssetCatalog, renderer: Renderer, index: int):
    """Plan scene ``index``, render it, and re-sample (at most ``max_attempts`` plans) while the job's checks
    fail; returns (plan, views, attempts) for the best plan seen."""
    checks = job.checks
    threshold = job.pixel_threshold
    # A renderer that can draw the masks alone (the offline one) is judged on them, and draws the shaded pass
    # once, for the plan it keeps: a re-sampled attempt then costs a mask pass, not a whole render.
    masks_first = hasattr(renderer, "render_masks") and hasattr(renderer, "render_colour")
    best = None
    for attempt in range(checks.max_attempts):
        plan = plan_scene(job.plan, catalog, job.seed, index, attempt)
        views = None if masks_first else renderer.render(plan)
        instances = renderer.render_masks(plan) if masks_first else [v.instance for v in views]
        share = hidden_share(instances, len(plan.objects), threshold)
        in_band = 1.0
        if checks.area_band is not None:
            inside, total = band_counts(instances, len(plan.objects), checks.area_band)
            in_band = inside / total if total else 1.0
        if best is None or in_band - share > best[4] - best[3]:
            best = (plan, views, instances, share, in_band)
        if share <= checks.max_hidden_share and in_band >= checks.min_in_band_for(len(plan.objects)):
            break
    plan, views, instances, share, in_band = best  # type: ignore[misc]
    if views is None:
        views = renderer.render_colour(plan, instances)
    plan.extra.update({"attempts": attempt + 1, "hidden_share": round(share, 4), "min_visible_pixels": threshold})
    if checks.area_band is not None:
        plan.extra.update({"area_band": list(checks.area_band), "in_band_share": round(in_band, 4)})
    return plan, views, attempt + 1


def render_scene(
    out_dir: str | os.PathLike, job: SynthJob, catalog: AssetCatalog, renderer: Renderer, index: int
) -> dict:
    """Render scene ``index`` into its folder (atomically); returns {"views", "attempts"}."""
    out_dir = Path(out_dir)
    final = scene_dir(out_dir, index)
    if is_scene_done(out_dir, index):
        return {"views": 0, "attempts": 0, "skipped": True}
    plan, views, attempts = plan_and_render(job, catalog, renderer, index)
    threshold = job.pixel_threshold
    names = [o.name for o in plan.objects]
    floor = plan.floor.material
    rel_scene = f"{SCENES_DIR}/{final.name}"

    tmp = final.parent / f".tmp-{final.name}-{socket.gethostname()}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        records = []
        per_view = []
        # PNG compression releases the GIL: encode the scene's images on two threads.
        with ThreadPoolExecutor(2) as pool:
            encoded = list(pool.map(_png_bytes, [a for v in views for a in (v.rgb, v.instance)]))
        for k, (view, camera) in enumerate(zip(views, plan.cameras)):
            image = encoded[2 * k]
            (tmp / f"view_{k}.png").write_bytes(image)
            (tmp / f"mask_{k}.png").write_bytes(encoded[2 * k + 1])
            areas = object_areas(view.instance, names, threshold)
            digest = sha256_bytes(image)
            per_view.append({"view": k, "visible": list(areas), "object_area": areas})
            records.append(
                CatalogRecord(
                    id=digest[:16],
                    path=f"{rel_scene}/view_{k}.png",
                    objects=list(areas),
                    source="synthetic",
                    scene_id=plan.scene_id,
                    width=int(view.rgb.shape[1]),
                    height=int(view.rgb.shape[0]),
                    sha256=digest,
                    background=floor,
                    view=str(k),
                    object_area=areas,
                    extra={
                        "mask": f"{rel_scene}/mask_{k}.png",
                        "plan": f"{rel_scene}/plan.json",
                        "backend": job.renderer.name,
                        "planned_objects": names,
                        "camera": {
                            "azimuth": camera.azimuth,
                            "elevation": camera.elevation,
                            "distance_cm": camera.distance,
                        },
                    },
                ).to_json()
            )
        plan_json = plan.to_json()
        plan_json["visibility"] = per_view
        plan_json["toolkit_version"] = __version__
        atomic_write_json(tmp / "plan.json", plan_json)
        write_jsonl(tmp / "records.jsonl", records)  # written last: its presence marks the scene complete
        if final.exists() and not is_scene_done(out_dir, index):
            shutil.rmtree(final)  # an incomplete folder not made by this code (renames are atomic): replace it
        try:
            os.rename(tmp, final)
        except OSError:
            if not is_scene_done(out_dir, index):
                raise
            shutil.rmtree(tmp, ignore_errors=True)  # another process finished this scene meanwhile: keep theirs
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return {"views": len(views), "attempts": attempts, "skipped": False}


@dataclass
class AreaTally:
    """(object, view) pairs of a catalog's renders: planned, inside the area band, hidden (not listed)."""

    band: tuple[float, float] = AREA_BAND
    object_views: int = 0
    in_band: int = 0
    hidden: int = 0

    def add(self, record: CatalogRecord) -> None:
        planned = list(record.extra.get("planned_objects") or record.objects)
        areas = record.object_area or {}
        low, high = self.band
        self.object_views += len(planned)
        self.hidden += sum(1 for name in planned if name not in areas)
        self.in_band += sum(1 for name in planned if low <= areas.get(name, 0.0) <= high)


def rebuild_catalog(out_dir: str | os.PathLike, tally: AreaTally | None = None) -> int:
    """(Re)write ``catalog.jsonl`` from every finished scene folder, in scene order; returns the record count.
    ``tally``, when given, counts the object areas of every record on the way."""
    root = Path(out_dir) / SCENES_DIR
    folders = sorted(p for p in root.glob("scene_*") if (p / "records.jsonl").is_file()) if root.is_dir() else []

    def records():
        for folder in folders:
            for row in read_jsonl(folder / "records.jsonl"):
                record = CatalogRecord.from_json(row, where=str(folder / "records.jsonl"))
                if tally is not None:
                    tally.add(record)
                yield record

    # Shards may share one folder: take the catalog writer lock, waiting for a sibling shard's rebuild.
    deadline = time.monotonic() + 120
    while True:
        try:
            with catalog_lock(out_dir, what="commonlink synth"):
                if tally is not None:
                    tally.object_views = tally.in_band = tally.hidden = 0
                return write_catalog(out_dir, records())
        except InputError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
