"""Object-area statistics of an image catalog (``commonlink stats``; Common-O paper §3.1).

For every image it finds the best measurement the catalog allows, stores it in the catalog (atomically) and
summarises the area fractions per source and per object:

=============  ======================================================  ==========================================
method         when                                                    stored as
=============  ======================================================  ==========================================
``mask``       a render with an instance mask (exact pixel counts)     ``object_area`` {name: fraction}
``sam-prompt`` a photo with ``extra.boxes`` / ``extra.points``         ``object_area`` {name: fraction} (prompted
               and a SAM model                                         names only)
``sam-auto``   a photo with names only and a SAM model                 ``extra.estimated_object_areas`` [fractions,
                                                                       largest first], not tied to names
``given``      ``object_area`` already in the record (e.g. written by  left as it is
               the renderer without a mask file)
=============  ======================================================  ==========================================

Each measured record also gets ``extra.area_method`` and, for SAM, ``extra.area_model``
(``<model type>:<checkpoint hash>``). SAM results are cached in ``CATALOG/.stats_cache.jsonl`` keyed by the
image's content hash, the method, the model and its settings, so a rerun only measures new or changed images,
and an interrupted run resumes where it stopped (each result is appended as soon as it is known).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from commonlink import __version__
from commonlink.catalog.sam_masks import (
    AreaEstimate,
    AutoMaskSettings,
    estimate_automatic,
    estimate_prompted,
    prepare_image,
    prompts_for,
)
from commonlink.errors import InputError, SchemaError
from commonlink.fileio import atomic_write, atomic_write_json, safe_join, sha256_file
from commonlink.formats.catalog import (
    CatalogRecord,
    catalog_file,
    catalog_lock,
    image_path,
    read_catalog,
    write_catalog,
)
from commonlink.formats.meta import utc_now
from commonlink.images import open_image
from commonlink.progress import track

CACHE_FILENAME = ".stats_cache.jsonl"
SUMMARY_FILENAME = "stats_summary.json"
#: What the paper measured with SAM on Common-O (§3.1): objects cover 2–22% of the image.
PAPER_AREA_RANGE = (0.02, 0.22)


@dataclass
class ObjectStats:
    """What :func:`compute_object_stats` did and found."""

    summary: dict[str, Any]
    measured: dict[str, int] = field(default_factory=dict)  #: images per method
    cached: int = 0  #: SAM results reused from the cache
    computed: int = 0  #: SAM results computed in this run
    not_measured: list[str] = field(default_factory=list)  #: ids of images no method could measure
    needs_sam: int = 0  #: images that only SAM could measure but no model was given


# ----------------------------------------------------------------------------------------------- masks


def mask_area_fractions(mask: np.ndarray, id_to_name: dict[int, str]) -> dict[str, float]:
    """Exact area fraction of each named instance in an instance-id mask (``H x W`` integers).

    Several ids may map to one name (their pixels add up); names with no visible pixel get 0.0.
    """
    if mask.ndim != 2:
        raise SchemaError(f"Instance mask must be a 2-D array of ids, got shape {mask.shape}.")
    ids, counts = np.unique(mask, return_counts=True)
    per_id = dict(zip(ids.tolist(), counts.tolist()))
    total = float(mask.size)
    pixels: dict[str, int] = {}
    for ident, name in id_to_name.items():
        pixels[name] = pixels.get(name, 0) + per_id.get(int(ident), 0)
    return {name: count / total for name, count in pixels.items()}


def read_instance_mask(path: Path) -> np.ndarray:
    """An instance-id mask image as a 2-D integer array (8/16-bit grey, or RGB packed as 0xRRGGBB)."""
    img = open_image(path, what=f"mask {path}", keep_depth=True)
    if img.mode in ("RGB", "RGBA"):
        rgb = np.asarray(img.convert("RGB"), dtype=np.uint32)
        return (rgb[..., 0] << 16) | (rgb[..., 1] << 8) | rgb[..., 2]
    if img.mode == "P":
        return np.asarray(img)  # palette index is the id
    return np.asarray(img).astype(np.int64)


def mask_for(catalog_dir: Path, record: CatalogRecord) -> tuple[Path, dict[int, str]] | None:
    """The instance mask of a rendered image and its id -> name map, when the catalog names one.

    ``extra.mask`` is the mask's path relative to the catalog; the ids come from ``extra.mask_ids``
    (``{id: name}``) or, as ``commonlink synth`` writes them, ``extra.planned_objects`` (id ``k + 1`` is
    ``planned_objects[k]``; planned objects not visible enough to be listed in ``objects`` are left out).
    """
    extra = record.extra
    rel = extra.get("mask")
    if not rel:
        return None
    where = f"catalog record {record.id}"
    ids = extra.get("mask_ids")
    if ids is not None:
        if not isinstance(ids, dict):
            raise SchemaError(f"{where}: extra.mask_ids must map instance ids to object names.")
        try:
            id_to_name = {int(k): str(v) for k, v in ids.items()}
        except (TypeError, ValueError):
            raise SchemaError(
                f"{where}: extra.mask_ids keys must be integer instance ids, got {list(ids)[:3]}."
            ) from None
        unknown = sorted(set(id_to_name.values()) - set(record.objects))
        if unknown:
            raise SchemaError(
                f"{where}: extra.mask_ids names {unknown}, which are not in 'objects'.",
                "Rebuild the catalog with `commonlink synth`.",
            )
    elif isinstance(extra.get("planned_objects"), list):
        listed = set(record.objects)
        id_to_name = {k + 1: str(name) for k, name in enumerate(extra["planned_objects"]) if name in listed}
    else:
        raise SchemaError(
            f"{where}: extra.mask is set but no instance ids are named (extra.mask_ids or extra.planned_objects).",
            "Rebuild the catalog with `commonlink synth`.",
        )
    return safe_join(catalog_dir, rel), id_to_name


# ----------------------------------------------------------------------------------------------- cache


class StatsCache:
    """Append-only JSON-lines cache of SAM results; tolerant of a torn last line after a crash."""

    def __init__(self, catalog_dir: Path):
        self.path = Path(catalog_dir) / CACHE_FILENAME
        self.entries: dict[str, dict] = {}
        if self.path.is_file():
            with self.path.open("r", encoding="utf-8") as handle:
                for line in handle:
                    try:
                        row = json.loads(line)
                        self.entries[row["key"]] = row["result"]
                    except (json.JSONDecodeError, KeyError, TypeError):
                        continue  # a line cut short by an interrupted run: that image is simply redone
        self._handle = None

    def get(self, key: str) -> AreaEstimate | None:
        found = self.entries.get(key)
        return AreaEstimate.from_json(found) if found else None

    def put(self, key: str, result: AreaEstimate) -> None:
        self.entries[key] = result.to_json()
        if self._handle is None:
            self._handle = self.path.open("a", encoding="utf-8")
        self._handle.write(json.dumps({"key": key, "result": result.to_json()}) + "\n")
        self._handle.flush()

    def close(self, *, compact: bool = True) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None
        if compact and self.entries:
            with atomic_write(self.path, "w") as handle:
                for key, result in self.entries.items():
                    handle.write(json.dumps({"key": key, "result": result}) + "\n")


def cache_key(image_sha256: str, method: str, model_id: str, detail: Any) -> str:
    detail_hash = hashlib.sha256(json.dumps(detail, sort_keys=True).encode()).hexdigest()[:12]
    return f"{image_sha256}|{method}|{model_id}|{detail_hash}"


# ----------------------------------------------------------------------------------------------- main pass


def compute_object_stats(
    catalog_dir: str | os.PathLike,
    *,
    sam: Any = None,
    load_sam: Callable[[], Any] | None = None,
    model_id: str = "",
    settings: AutoMaskSettings = AutoMaskSettings(),
    progress: bool = True,
) -> ObjectStats:
    """Measure object areas of every image of a catalog, store them in it, and write ``stats_summary.json``.

    ``sam`` is a ``segment_anything.modeling.Sam`` (or pass ``load_sam``, called only when some image really
    needs the model, e.g. not when everything is cached). ``model_id`` names the model in the cache and in the
    stored fields; change it whenever the weights change. Without a model, photos keep whatever earlier runs
    stored and the rest are counted in ``needs_sam``.
    """
    catalog_dir = Path(catalog_dir)
    if (sam is not None or load_sam is not None) and not model_id:
        raise InputError("A SAM model was given without a model_id.", "Pass model_id (e.g. 'vit_b:<checkpoint hash>').")
    if not catalog_file(catalog_dir).is_file():
        read_catalog(catalog_dir)  # raises the catalog module's "not an image catalog" error
    # the whole read-measure-rewrite pass holds the writer lock, so records added meanwhile cannot be lost
    with catalog_lock(catalog_dir, what="commonlink stats"):
        return _compute_locked(
            catalog_dir, sam=sam, load_sam=load_sam, model_id=model_id, settings=settings, progress=progress
        )


def _compute_locked(
    catalog_dir: Path,
    *,
    sam: Any,
    load_sam: Callable[[], Any] | None,
    model_id: str,
    settings: AutoMaskSettings,
    progress: bool,
) -> ObjectStats:
    records = read_catalog(catalog_dir)
    cache = StatsCache(catalog_dir)
    result = ObjectStats(summary={})
    model_holder = {"sam": sam}

    def model():
        if model_holder["sam"] is None:
            model_holder["sam"] = load_sam() if load_sam is not None else None
        return model_holder["sam"]

    have_model = sam is not None or load_sam is not None
    completed = False
    try:
        for record in track(records, "Measuring object areas", unit="images", disable=not progress):
            method = _measure(catalog_dir, record, cache, result, model if have_model else None, model_id, settings)
            if method:
                result.measured[method] = result.measured.get(method, 0) + 1
            else:
                result.not_measured.append(record.id)
        completed = True
    finally:
        # keep partial results: store what was measured so far, then let the error/interrupt go on
        cache.close(compact=completed)
        write_catalog(catalog_dir, records)
    result.summary = summarise(
        records,
        config={
            "model_id": model_id or None,
            "auto_mask_settings": settings.__dict__ if have_model else None,
        },
    )
    result.summary["images"]["cached_sam_results"] = result.cached
    result.summary["images"]["computed_sam_results"] = result.computed
    atomic_write_json(catalog_dir / SUMMARY_FILENAME, result.summary)
    return result


def _measure(
    catalog_dir: Path,
    record: CatalogRecord,
    cache: StatsCache,
    result: ObjectStats,
    model: Callable[[], Any] | None,
    model_id: str,
    settings: AutoMaskSettings,
) -> str | None:
    """Measure one record in place; return the method used (None when nothing could measure it)."""
    extra = record.extra
    where = f"catalog record {record.id} ({record.path})"
    located = mask_for(catalog_dir, record)
    if located is not None:
        mask_path, id_to_name = located
        areas = mask_area_fractions(read_instance_mask(mask_path), id_to_name)
        record.object_area = {name: areas.get(name, 0.0) for name in record.objects if name in areas}
        _set_method(record, "mask", None)
        return "mask"
    prompts = prompts_for(extra, record.objects, where=where)
    if not prompts and record.object_area is not None:
        # areas tied to names that did not come from us (e.g. the renderer without a mask file): keep them
        if extra.get("area_method") not in ("mask", "sam-prompt"):
            extra["area_method"] = "given"
        return extra["area_method"]
    if model is None:
        earlier = extra.get("area_method")
        if (prompts and earlier == "sam-prompt") or (not prompts and earlier == "sam-auto"):
            return earlier  # measured by an earlier run: keep it
        result.needs_sam += 1
        return None
    path = image_path(catalog_dir, record)
    if not path.is_file():
        raise InputError(f"{where}: image file not found at {path}.", "Restore the file or rebuild the catalog.")
    digest = sha256_file(path)
    if prompts:
        key = cache_key(digest, "sam-prompt", model_id, prompts)
    else:
        key = cache_key(digest, "sam-auto", model_id, {"settings": settings.key(), "n": len(record.objects)})
    estimate = cache.get(key)
    if estimate is None:
        image, scale = prepare_image(open_image(path, what=where))
        sam = model()
        if prompts:
            estimate = estimate_prompted(sam, image, prompts, scale=scale)
        else:
            estimate = estimate_automatic(sam, image, len(record.objects), settings)
        cache.put(key, estimate)
        result.computed += 1
    else:
        result.cached += 1
    if estimate.method == "sam-prompt":
        record.object_area = {**(record.object_area or {}), **(estimate.object_area or {})}
        extra.pop("estimated_object_areas", None)
    else:
        extra["estimated_object_areas"] = list(estimate.estimated_areas or [])
        extra["sam_candidate_masks"] = estimate.candidates
    _set_method(record, estimate.method, model_id)
    return estimate.method


def _set_method(record: CatalogRecord, method: str, model_id: str | None) -> None:
    record.extra["area_method"] = method
    if model_id:
        record.extra["area_model"] = model_id
    else:
        record.extra.pop("area_model", None)


# ----------------------------------------------------------------------------------------------- summary


def describe(values: list[float]) -> dict[str, float | int | None]:
    """count, mean, median, p5, p95, min, max of area fractions (None when empty)."""
    if not values:
        return {"count": 0, "mean": None, "median": None, "p5": None, "p95": None, "min": None, "max": None}
    arr = np.asarray(values, dtype=float)
    return {
        "count": int(arr.size),
        "mean": float(arr.mean()),
        "median": float(np.median(arr)),
        "p5": float(np.percentile(arr, 5)),
        "p95": float(np.percentile(arr, 95)),
        "min": float(arr.min()),
        "max": float(arr.max()),
    }


def record_areas(record: CatalogRecord) -> list[float]:
    """Every area fraction known for a record: named ones, else SAM's unnamed estimates."""
    if record.object_area:
        return [float(v) for v in record.object_area.values()]
    return [float(v) for v in record.extra.get("estimated_object_areas") or []]


def summarise(records: list[CatalogRecord], *, config: dict | None = None) -> dict[str, Any]:
    """Area-fraction distribution per source and per object (named areas only), plus coverage counts."""
    per_source: dict[str, list[float]] = {}
    per_object: dict[str, list[float]] = {}
    by_method: dict[str, int] = {}
    unmeasured = 0
    no_object_mask = 0  # sam-auto images where no mask passed the size/nesting filters
    for record in records:
        values = record_areas(record)
        per_source.setdefault(record.source, []).extend(values)
        for name, value in (record.object_area or {}).items():
            per_object.setdefault(name, []).append(float(value))
        method = record.extra.get("area_method") or ("given" if record.object_area is not None else None)
        if method:
            by_method[method] = by_method.get(method, 0) + 1
            no_object_mask += method == "sam-auto" and not values
        else:
            unmeasured += 1
    lo, hi = PAPER_AREA_RANGE
    all_values = [v for values in per_source.values() for v in values]
    return {
        "toolkit_version": __version__,
        "created": utc_now(),
        "config": config or {},
        "images": {
            "total": len(records),
            "measured_by_method": dict(sorted(by_method.items())),
            "not_measured": unmeasured,
            "sam_auto_without_object_masks": no_object_mask,
        },
        "paper_range": {
            "low": lo,
            "high": hi,
            "share_within": (sum(lo <= v <= hi for v in all_values) / len(all_values)) if all_values else None,
        },
        "per_source": {source: describe(values) for source, values in sorted(per_source.items())},
        "per_object": {name: describe(values) for name, values in sorted(per_object.items())},
        "notes": (
            "per_source includes SAM's automatic estimates (unnamed, extra.estimated_object_areas); "
            "per_object uses only areas tied to names (render masks, prompted SAM, given)."
        ),
    }
