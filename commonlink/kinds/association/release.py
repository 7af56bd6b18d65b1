"""Association release: chain files -> a folder ``datasets.load_dataset(RELEASE_DIR, CONFIG)`` opens.

Layout (one parquet folder per config, split ``test``)::

    RELEASE_DIR/README.md                       card: configs block, concepts, pool sizes, counts, settings
    RELEASE_DIR/manifest.json                   kind "association", parts (configs), sha256/size of every file
    RELEASE_DIR/images/test-00000-of-0000N.parquet        id, image (Image), labels, width, height, origin, name
    RELEASE_DIR/single_step/test-*.parquet      tasks that reference images by id
    RELEASE_DIR/deduction/test-*.parquet
    RELEASE_DIR/synchronous/test-*.parquet      one row per chain; per-step lists of image ids
    RELEASE_DIR/asynchronous/test-*.parquet

Each image is stored once, however many steps use it (a 500-step chain would otherwise repeat its images
about a thousand times). Images keep their original bytes unless they carry metadata (EXIF, GPS, XMP,
comments), which is stripped by the ingestion cleaner; crops are encoded fresh (JPEG for JPEG sources, else
PNG). The build is staged in a hidden folder and renamed into place; rerunning with the same inputs keeps
the existing release.
"""

from __future__ import annotations

import functools
import io
import json
import os
from collections.abc import Iterator, Sequence
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from commonlink.catalog.ingest import clean_image
from commonlink.errors import InputError, SchemaError
from commonlink.fileio import (
    read_jsonl,
    sha256_bytes,
)
from commonlink.formats.catalog import CatalogRecord, catalog_file, iter_catalog
from commonlink.formats.meta import verify_data_file
from commonlink.images import check_image, open_image
from commonlink.kinds.association.card import render_association_card
from commonlink.kinds.association.format import (
    IMAGE_TABLE_TASK,
    IMAGES_CONFIG,
    IMAGES_FILENAME,
    SPLIT,
    TASKS,
    ImageFetcher,
    LabelledImage,
    association_features,
    read_chain_meta,
    read_image_table,
)
from commonlink.kinds.common_o.image_reader import CatalogImageReader
from commonlink.progress import track
from commonlink.release.licences import ImageCredit, LicenceLedger, credit_row_fields, with_credit_columns
from commonlink.release.parallel import check_workers, ordered_map
from commonlink.release.shards import ShardWriter
from commonlink.release.staging import (
    DEFAULT_RELEASE_OPTIONS,
    ReleaseOptions,
    ReleaseResult,
    StagedRelease,
    build_staged_release,
    without_local_paths,
)


@dataclass
class _ChainInput:
    path: Path
    meta: dict
    task: str
    table: list[LabelledImage]
    sha256: str


def _read_inputs(
    chain_files: Sequence[str | os.PathLike],
    empty: list[str] | None = None,
    *,
    catalog_root: str | os.PathLike | None = None,
) -> list[_ChainInput]:
    """The task files to release, in task order; files without rows are left out and named in ``empty``
    (datasets.load_dataset cannot open a config without rows)."""
    inputs, seen = [], {}
    tables: dict[tuple[Path, str | None], list[LabelledImage]] = {}  # the task files of one build share one table
    empty = [] if empty is None else empty
    for file in chain_files:
        path = Path(file)
        if not path.is_file():
            raise InputError(
                f"Chain file {path} not found.", "Make chain files with `commonlink chains SOURCE --out DIR`."
            )
        meta = read_chain_meta(path, allow_image_table=True)
        task = meta["task"]
        if task == IMAGE_TABLE_TASK:
            continue  # images.jsonl passed along with the task files (e.g. OUT/*.jsonl): read through them
        if task in seen:
            raise InputError(
                f"Two inputs hold {task} tasks ({seen[task]} and {path}).",
                "Pass one chain file per task type (single_step, deduction, synchronous, asynchronous).",
            )
        sha256 = verify_data_file(path, meta)
        seen[task] = path
        if meta.get("rows") == 0:
            empty.append(task)
            continue
        key = ((path.parent / meta.get("images_file", IMAGES_FILENAME)).resolve(), meta.get("images_sha256"))
        if key not in tables:
            tables[key] = read_image_table(
                path, meta, catalog_root=catalog_root
            )  # hashed against the meta, then parsed: once per table
        inputs.append(_ChainInput(path, meta, task, tables[key], sha256))
    if not inputs and empty:
        raise InputError(
            f"The task file(s) given have no rows ({', '.join(empty)}); a release needs at least one task.",
            "Rebuild with `commonlink chains` (see its notes on why no task was built), or pass other task files.",
        )
    if not inputs:
        raise InputError(
            "Only the image table was given, no task files.",
            "Pass the TASK.jsonl files written by `commonlink chains` (e.g. OUT/*.jsonl).",
        )
    return sorted(inputs, key=lambda inp: TASKS.index(inp.task))


def _image_indices(row: dict, task: str) -> Iterator[int]:
    if task == "single_step":
        yield row["query"]
        yield from row["memory"]
        yield from row["candidates"]
    elif task == "deduction":
        yield row["image_1"]
        yield row["image_2"]
    else:
        yield row["start"]
        yield from row["positive"]
        yield from row["negative"]


def _referenced_images(inputs: list[_ChainInput], progress: bool) -> dict[str, LabelledImage]:
    """Every image some task uses, by id (checked consistent across inputs)."""

    images: dict[str, LabelledImage] = {}
    for inp in inputs:
        used = np.zeros(len(inp.table), dtype=bool)
        for row in track(
            read_jsonl(inp.path), f"scan {inp.path.name}", total=inp.meta.get("rows"), unit="rows", disable=not progress
        ):
            idx = np.fromiter(_image_indices(row, inp.task), dtype=np.int64)
            if len(idx) and (idx.min() < 0 or idx.max() >= len(inp.table)):
                raise SchemaError(
                    f"{inp.path}: task {row.get('id')} names an image index outside images.jsonl.",
                    "Rebuild the chain files.",
                )
            used[idx] = True
        for i in np.flatnonzero(used):
            img = inp.table[int(i)]
            other = images.get(img.id)
            if other is not None and (other.labels != img.labels or other.crop != img.crop):
                raise SchemaError(
                    f"Image {img.id} has different labels or crops in {inp.path.name} and another input.",
                    "Build every chain file of a release from one source with one `commonlink chains` run.",
                )
            images[img.id] = img
    return images


_METADATA_KEYS = ("exif", "xmp", "XML:com.adobe.xmp", "comment", "photoshop")


def stored_size(data: bytes) -> tuple[int, int]:
    """(width, height) from an encoded image's header (no pixel decoding)."""
    with Image.open(io.BytesIO(data)) as probe:
        return probe.size


def source_image_bytes(fetcher: ImageFetcher, img: LabelledImage, reader: CatalogImageReader | None = None) -> bytes:
    """The bytes of ``img``'s source file, checked as Common-O releases check theirs: a file is read only from
    inside its catalog (or manifest or image folder; a symbolic link out of it is refused), and its sha256 must be
    the one recorded when the chains were built (:func:`commonlink.kinds.association.format.read_file_origin`)."""
    origin = img.origin
    what = f"Image {img.id}"
    data, path = fetcher.original_bytes(origin, what=what)  # a file: only from inside its folder, sha256 checked
    if data is None:
        if path is None:
            raise InputError(f"{what}: its source row has no image.", "Rebuild the chain files from a complete source.")
        data = path.read_bytes()  # a Hugging Face dataset's image kept as a file of that dataset
    recorded = origin.get("sha256")
    if recorded and sha256_bytes(data) != recorded:
        raise InputError(
            f"{what}: {path or 'its source'} changed since the chain files were built (its sha256 is not the one in "
            f"{IMAGES_FILENAME}), so its labels may no longer describe it.",
            "Restore the original file, or rebuild the chain files "
            "(`commonlink chains ... --overwrite`) and then the release.",
        )
    return data


def release_image_bytes(fetcher: ImageFetcher, img: LabelledImage, reader: CatalogImageReader | None = None) -> bytes:
    """Bytes to store for ``img``: the original file when it is clean, else a re-encode without metadata."""
    data = source_image_bytes(fetcher, img, reader)
    path = img.origin.get("path")
    if img.crop is not None:
        full = open_image(data, what=f"image {img.id}")
        source_format = full.format
        crop = full.crop(tuple(img.crop))
        buf = io.BytesIO()
        if source_format == "JPEG":
            crop.convert("RGB" if crop.mode not in ("RGB", "L") else crop.mode).save(buf, format="JPEG", quality=95)
        else:
            crop.save(buf, format="PNG")
        return buf.getvalue()
    try:
        with Image.open(io.BytesIO(data)) as probe:
            # PNG text chunks (tEXt/zTXt/iTXt) can hold anything: captions, places, names
            dirty = (
                bool(probe.getexif())
                or any(key in probe.info for key in _METADATA_KEYS)
                or bool(getattr(probe, "text", None))
            )
    except Exception as exc:  # Pillow names a BytesIO object, not the file: name the image and its file
        where = f"Image {img.id} ({path})" if path else f"Image {img.id} ({json.dumps(img.origin, sort_keys=True)})"
        raise InputError(
            f"{where}: not a readable image (corrupt or unknown format: {type(exc).__name__}).",
            "Fix or remove it from the source, then build the chain files again.",
        ) from exc
    if not dirty:
        # decoded, so a truncated, oversized or replaced file is refused rather than published
        check_image(data, what=f"Image {img.id}" + (f" ({path})" if path else ""), size=(img.width, img.height))
        return data
    return clean_image(open_image(data, what=f"image {img.id}")).data


def _origin_text(origin: dict) -> str:
    """Origin without local folder names (the release gets published)."""
    public = dict(origin)
    for key in ("path", "dataset", "catalog"):
        value = public.get(key)
        if isinstance(value, str) and os.path.isabs(value):
            public[key] = os.path.basename(value.rstrip("/\\"))
    return json.dumps(public, sort_keys=True)


def _task_rows(inp: _ChainInput, ids: list[str], options: list[str], concept_kind: str) -> Iterator[dict]:
    def image_id(i: int) -> str:
        return ids[i]

    for row in read_jsonl(inp.path):
        if inp.task == "single_step":
            yield {
                "id": row["id"],
                "concept": row["concept"],
                "concept_kind": concept_kind,
                "query": image_id(row["query"]),
                "memory": [image_id(i) for i in row["memory"]],
                "memory_concept": row.get("memory_concept", row["concept"]),
                "candidates": [image_id(i) for i in row["candidates"]],
                "answer": int(row["answer"]),
                "options": options,
            }
        elif inp.task == "deduction":
            yield {
                "id": row["id"],
                "concept": row["concept"],
                "concept_kind": concept_kind,
                "image_1": image_id(row["image_1"]),
                "image_2": image_id(row["image_2"]),
                "options": options,
                "gold": list(row["gold"]),
            }
        else:
            yield {
                "id": row["id"],
                "kind": row.get("kind", inp.task),
                "concepts": list(row["concepts"]),
                "concept_kind": concept_kind,
                "start": image_id(row["start"]),
                "positive": [ids[i] for i in row["positive"]],
                "negative": [ids[i] for i in row["negative"]],
                "answer": list(row["answer"]),
                "plan": row["plan"],
                "warmup": int(row["warmup"]),
                "num_steps": int(row.get("num_steps", len(row["positive"]))),
                "options": options,
            }


def build_association_release(
    chain_files: Sequence[str | os.PathLike],
    out_dir: str | os.PathLike,
    options: ReleaseOptions = DEFAULT_RELEASE_OPTIONS,
) -> ReleaseResult:
    """Write an association release folder (layout in the module docstring)."""
    if not chain_files:
        raise InputError("No chain files given.", "Pass the .jsonl files written by `commonlink chains`.")
    out_dir = Path(out_dir).expanduser().resolve()
    options = options.named_for(out_dir)
    empty: list[str] = []
    inputs = _read_inputs(chain_files, empty, catalog_root=options.catalog_root)
    notes = [
        f"{task}: the task file has no rows, so the release has no {task} config (datasets cannot load an empty one)."
        for task in empty
    ]
    first = inputs[0].meta
    concept_options = list(first.get("options") or [])
    concept_kind = first.get("concept_kind", "concept")
    seeds = sorted({json.dumps(inp.meta.get("seed")) for inp in inputs})
    seed = inputs[0].meta.get("seed") if len(seeds) == 1 else [inp.meta.get("seed") for inp in inputs]
    config = _release_config(inputs, options)
    catalogs: dict[str, dict[str, CatalogRecord]] = {}  # each catalog read once for the two credit passes
    digest = _image_credits({img.id: img for inp in inputs for img in inp.table}, catalogs)[1].digest()
    if digest:  # a licence fixed in a catalog makes a new build; builds without credits keep their key
        config["image_credits"] = digest
    write = functools.partial(
        _write_association,
        inputs=inputs,
        options=options,
        seed=seed,
        concepts=(concept_options, concept_kind),
        catalogs=catalogs,
        notes=notes,
    )
    return build_staged_release(
        out_dir, options, kind="association", part_type="config", config=config, seed=seed, write=write, notes=notes
    )


def _write_association(
    tmp_dir: Path,
    *,
    inputs: list[_ChainInput],
    options: ReleaseOptions,
    seed: Any,
    concepts: tuple[list[str], str],
    catalogs: dict[str, dict[str, CatalogRecord]],
    notes: list[str],
) -> StagedRelease:
    """The images config, one config per task file and the card of an association release, into ``tmp_dir``."""
    images = _referenced_images(inputs, options.progress)
    credits, ledger = _image_credits(images, catalogs)
    notes += ledger.check(options.license, options.licence_check)  # the caller's list: the result's notes
    configs: dict[str, dict] = {}
    features_by_config: dict[str, Any] = {}
    image_bytes = _write_images(tmp_dir, images, options, configs, features_by_config, credits)
    for inp in inputs:
        ids = [img.id for img in inp.table]
        features = features_by_config[inp.task] = association_features(inp.task)
        with ShardWriter(tmp_dir / inp.task, SPLIT, features, max_shard_bytes=options.max_shard_bytes) as writer:
            rows = _task_rows(inp, ids, *concepts)
            for row in track(rows, inp.task, total=inp.meta.get("rows"), unit="rows", disable=not options.progress):
                writer.write(row)
        configs[inp.task] = _config_info(writer, inp.task)
    stats = _release_stats(inputs, len(images), image_bytes)
    if ledger.summary() is not None:
        stats["image_credits"] = ledger.summary()
    card = render_association_card(
        **options.card_fields(), configs=configs, features=features_by_config, stats=stats, seed=seed
    )
    return StagedRelease(parts=configs, stats=stats, card=card)


def _release_config(inputs: list[_ChainInput], options: ReleaseOptions) -> dict:
    """The build's recorded configuration (the manifest's ``config``; its hash is the build key)."""
    return {
        "kind": "association",
        **options.recorded(),
        "inputs": [
            {
                "file": inp.path.name,
                "task": inp.task,
                "sha256": inp.sha256,
                "rows": inp.meta.get("rows"),
                "seed": inp.meta.get("seed"),
                "toolkit_version": inp.meta.get("toolkit_version"),
                "config": without_local_paths(inp.meta.get("config", {})),
            }
            for inp in inputs
        ],
    }


def _write_images(
    tmp_dir: Path,
    images: dict[str, LabelledImage],
    options: ReleaseOptions,
    configs: dict[str, dict],
    features_by_config: dict[str, Any],
    credits: dict[str, ImageCredit] | None = None,
) -> int:
    """The images config (every image once, by id) written into ``tmp_dir``, recorded in ``configs`` and
    ``features_by_config``; returns the bytes of image data stored. With ``credits`` (image id -> credit, when some
    image records one) the config gets ``license``, ``author`` and ``source_url`` columns."""
    features = association_features(IMAGES_CONFIG)
    if credits:
        features = with_credit_columns(features, [""])
    features_by_config[IMAGES_CONFIG] = features
    image_bytes = 0
    ordered = (images[image_id] for image_id in sorted(images))
    workers = check_workers(options.workers)
    with (
        ShardWriter(tmp_dir / IMAGES_CONFIG, SPLIT, features, max_shard_bytes=options.max_shard_bytes) as writer,
        closing(ordered_map(_stored_image, ordered, setup=_image_state, workers=workers)) as stored,
    ):
        for img, (data, width, height) in track(
            stored, "images", total=len(images), unit="images", disable=not options.progress
        ):
            image_bytes += len(data)
            writer.write(
                {
                    "id": img.id,
                    "image": {"bytes": data, "path": None},
                    "labels": img.labels,
                    "width": width,
                    "height": height,
                    "crop": img.crop,
                    "origin": _origin_text(img.origin),
                    "name": img.name,
                    **(credit_row_fields(credits.get(img.id, _NO_CREDIT), "") if credits else {}),
                }
            )
    configs[IMAGES_CONFIG] = _config_info(writer, IMAGES_CONFIG)
    return image_bytes


_NO_CREDIT = ImageCredit(name="", source="real")


def _image_credits(
    images: dict[str, LabelledImage], by_path: dict[str, dict[str, CatalogRecord]]
) -> tuple[dict[str, ImageCredit], LicenceLedger]:
    """The credits of the images that come from an image catalog (a crop has its photo's), by image id, and the
    ledger of them all (release/licences.py); the dict is empty when no image records a credit. ``by_path``
    caches each catalog's records by path."""
    ledger, credits = LicenceLedger(), {}
    for image_id, img in images.items():
        folder, path = img.origin.get("catalog"), img.origin.get("path")
        if img.origin.get("type") != "file" or not isinstance(folder, str) or not isinstance(path, str):
            continue
        if folder not in by_path:
            by_path[folder] = {r.path: r for r in iter_catalog(folder)} if catalog_file(folder).is_file() else {}
        relative = os.path.relpath(path, folder).replace(os.sep, "/")
        record = by_path[folder].get(relative)
        if record is not None:
            credits[image_id] = ledger.add(folder, record)
    return (credits if ledger.has_columns else {}), ledger


def _image_state() -> tuple[ImageFetcher, CatalogImageReader]:
    return ImageFetcher(), CatalogImageReader()


def _stored_image(state: tuple[ImageFetcher, CatalogImageReader], img: LabelledImage) -> tuple[bytes, int, int]:
    """The bytes to store for ``img`` and their (width, height) (a worker's task; ``state``: its process's)."""
    fetcher, reader = state
    data = release_image_bytes(fetcher, img, reader)
    width, height = stored_size(data)  # the stored image is upright: EXIF-rotated photos swap sides
    return data, width, height


def _release_stats(inputs: list[_ChainInput], images: int, image_bytes: int) -> dict:
    """What the card reports and the manifest's ``stats`` holds: the build's concepts, counts and settings (from
    the first task file's meta: the task files of one build share them)."""
    first = inputs[0].meta
    return {
        "concepts": first.get("concepts", []),
        "pairs": first.get("pairs", []),
        "options": list(first.get("options") or []),
        "concept_kind": first.get("concept_kind", "concept"),
        "counts": {inp.task: inp.meta.get("rows") for inp in inputs},
        "steps": {inp.task: inp.meta.get("steps") for inp in inputs if inp.task in ("synchronous", "asynchronous")},
        "images": images,
        "image_bytes": image_bytes,
        "source": without_local_paths(first.get("source") or {}),
        "construction": without_local_paths(first.get("config", {})),
        "verification": first.get("verification"),
        "images_without_disjoint_negative": first.get("images_without_disjoint_negative", 0),
    }


def _config_info(writer: ShardWriter, config: str) -> dict:
    return {
        "rows": writer.rows_written,
        "files": [f"{config}/{s.path.name}" for s in writer.shards],
        "num_bytes": sum(s.data_bytes for s in writer.shards),
        "download_size": sum(s.bytes for s in writer.shards),
    }
