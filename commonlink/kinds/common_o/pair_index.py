"""The catalogs as a compact index for pair sampling, and the second pass that reads the records of the images used.

Pass 1 (:func:`build_index`) streams every catalog once and keeps, per eligible image, its object ids (CSR),
source, scene code and where its record is: a few bytes an image, never records. Pass 2
(:func:`read_image_entries`) streams the catalogs again and parses only the lines of the images used.
"""

from __future__ import annotations

import os
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from commonlink.constants import NO_COMMON_OBJECTS
from commonlink.errors import InputError, SchemaError
from commonlink.fileio import jsonl_lines
from commonlink.formats.catalog import (
    SOURCES,
    CatalogRecord,
    catalog_file,
    catalog_row,
    image_path,
    iter_catalog_rows,
)
from commonlink.kinds.common_o.pair_rows import ImageFields

# ----------------------------------------------------------------------------------------------------------
# Pass 1: a compact index of the eligible images
# ----------------------------------------------------------------------------------------------------------


@dataclass
class CatalogIndex:
    catalogs: list[Path]  #: absolute catalog folders, in the order given
    vocab: list[str]  #: object names, sorted; object ids index this list
    source_vocab: dict[str, np.ndarray]  #: object ids seen in each source (all images, eligible or not)
    images_read: int
    duplicates_skipped: int
    # one entry per eligible image:
    catalog_index: np.ndarray  #: int32
    row_index: np.ndarray  #: int64, row number within the catalog file (0-based, blank lines skipped)
    source: np.ndarray  #: uint8, index into SOURCES
    scene: np.ndarray  #: int64, global scene code (scene ids are compared across catalogs, per source)
    obj_ptr: np.ndarray  #: int64, CSR pointers into obj_ids
    obj_ids: np.ndarray  #: int32, object ids (distinct per image, sorted)
    image_ids: list[str]  #: record ids, to check that pass 2 reads the same catalog

    def object_names(self, g: int) -> list[str]:
        return list(map(self.vocab.__getitem__, self.obj_ids[self.obj_ptr.item(g) : self.obj_ptr.item(g + 1)].tolist()))


def resolve_catalogs(catalog_dirs: Sequence[str | os.PathLike]) -> list[Path]:
    if not catalog_dirs:
        raise InputError(
            "No catalog folder given.",
            "Pass one or more catalog folders (made by `commonlink ingest` or `commonlink synth`).",
        )
    seen: dict[Path, None] = {}
    for raw in catalog_dirs:
        path = Path(raw).expanduser().resolve()
        if not catalog_file(path).is_file():
            raise InputError(
                f"{raw} is not an image catalog (no {catalog_file(path).name} in it).",
                "Create one with `commonlink ingest` (photos) or `commonlink synth` (renders), or fix the path.",
            )
        seen.setdefault(path, None)  # the same folder twice counts once
    return list(seen)


def build_index(catalogs: list[Path], object_range: tuple[int, int], progress) -> CatalogIndex:
    lo, hi = object_range
    name_ids: dict[str, int] = {}
    scene_codes: dict[tuple[int, str], int] = {}
    seen_ids: set[str] = set()
    source_objs: list[set[int]] = [set() for _ in SOURCES]
    # typed arrays, not lists: a few bytes an image instead of a Python int object each
    cat_idx = array("i")
    row_idx = array("q")
    src = array("B")
    scene = array("q")
    counts = array("q")
    obj_flat = array("i")
    image_ids: list[str] = []
    images_read = duplicates = 0
    task = progress.add_task("reading catalogs", total=None)
    # bound methods: this loop runs once per catalog line
    add_seen, new_id, name_id, scene_code = seen_ids.add, image_ids.append, name_ids.setdefault, scene_codes.setdefault
    for ci, folder in enumerate(catalogs):
        for row, record in enumerate(iter_catalog_rows(folder)):
            images_read += 1
            if images_read % 1024 == 0:  # batched: a rich update per record costs more than the record
                progress.advance(task, 1024)
            image_id = record["id"]
            if image_id in seen_ids:  # the same image listed twice (e.g. overlapping catalogs): keep the first
                duplicates += 1
                continue
            add_seen(image_id)
            names = set(record["objects"])
            if NO_COMMON_OBJECTS in names:
                raise SchemaError(
                    f"{catalog_file(folder)}, row {row + 1}: object name {NO_COMMON_OBJECTS!r} is reserved for the "
                    "answer choice.",
                    "Rename that object in the catalog.",
                )
            s = SOURCES.index(record["source"])
            try:
                ids = sorted(map(name_ids.__getitem__, names))
            except KeyError:  # a new object name: ids in order of first appearance
                ids = sorted([name_id(n, len(name_ids)) for n in names])
            source_objs[s].update(ids)
            if not lo <= len(ids) <= hi:
                continue
            cat_idx.append(ci)
            row_idx.append(row)
            src.append(s)
            scene.append(scene_code((s, str(record["scene_id"])), len(scene_codes)))
            counts.append(len(ids))
            obj_flat.extend(ids)
            new_id(image_id)
    # Object ids in name order, so that the output does not depend on which catalog named an object first.
    vocab = sorted(name_ids)
    remap = np.empty(len(name_ids), dtype=np.int32)
    for new, name in enumerate(vocab):
        remap[name_ids[name]] = new
    obj_ids = remap[np.frombuffer(obj_flat, dtype=np.int32)] if obj_flat else np.zeros(0, dtype=np.int32)
    obj_ptr = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(np.frombuffer(counts, dtype=np.int64), out=obj_ptr[1:])
    if len(obj_ids):  # keep ids sorted per image after the remap: one sort by (image, id)
        image_of = np.repeat(np.arange(len(counts)), np.frombuffer(counts, dtype=np.int64))
        obj_ids = obj_ids[np.lexsort((obj_ids, image_of))]
    source_vocab = {
        name: np.sort(remap[np.fromiter(source_objs[s], dtype=np.int64)])
        if source_objs[s]
        else np.zeros(0, dtype=np.int32)
        for s, name in enumerate(SOURCES)
    }
    return CatalogIndex(
        catalogs=catalogs,
        vocab=vocab,
        source_vocab=source_vocab,
        images_read=images_read,
        duplicates_skipped=duplicates,
        catalog_index=np.array(cat_idx, dtype=np.int32),
        row_index=np.array(row_idx, dtype=np.int64),
        source=np.array(src, dtype=np.uint8),
        scene=np.array(scene, dtype=np.int64),
        obj_ptr=obj_ptr,
        obj_ids=obj_ids.astype(np.int32, copy=False),
        image_ids=image_ids,
    )


# Sampling pairs of one source

# ----------------------------------------------------------------------------------------------------------


def read_image_entries(index: CatalogIndex, images: np.ndarray, check_files: bool) -> dict[int, ImageFields]:
    """Stream the catalogs once more and return the ``image_N`` fields of each image in ``images`` (global
    indices; repeats allowed), keyed by global index.

    One entry per image used, however many rows use it (the rows copy it when they are built). Records were
    validated in pass 1; the id check catches a catalog rewritten in between.
    """
    used = np.unique(images)
    used = used[np.lexsort((index.row_index[used], index.catalog_index[used]))]
    used_catalog = index.catalog_index[used]
    used_row = index.row_index[used]
    entries: dict[int, ImageFields] = {}
    missing: list[str] = []
    shared = {name: name for name in index.vocab}
    for ci in np.unique(used_catalog).tolist():
        folder = index.catalogs[ci]
        folder_text = str(folder)
        path = catalog_file(folder)
        pos, end = np.searchsorted(used_catalog, [ci, ci + 1]).tolist()
        # only the lines of used images are parsed (pass 1 checked every line of this file)
        for row, (lineno, line) in enumerate(jsonl_lines(path)):
            if pos == end:
                break
            if row != used_row.item(pos):
                continue
            data = catalog_row(path, lineno, line)  # as pass 1 read it (iter_catalog_rows)
            g = used.item(pos)
            if data.get("id") != index.image_ids[g]:
                raise InputError(
                    f"{path} changed while pairs were being sampled (row {row + 1} is now image {data.get('id')!r}).",
                    "Rerun `commonlink pairs` once the catalog is no longer being written.",
                )
            try:
                if check_files and not _image_exists(folder, folder_text, data["path"]):
                    missing.append(str(folder / data["path"]))
            except InputError as exc:  # a path escaping the catalog: say which record holds it
                raise InputError(f"{path}, line {lineno}: {exc.problem}", exc.fix) from None
            entries[g] = _image_entry(folder_text, data, shared)
            pos += 1
        if pos < end:
            raise InputError(f"{path} got shorter while pairs were being sampled.", "Rerun `commonlink pairs`.")
    if missing:
        shown = ", ".join(sorted(missing)[:5])
        raise InputError(
            f"{len(missing)} image file(s) named by the catalogs are missing, e.g. {shown}.",
            "Restore the files, or rebuild the catalog so that it lists only images that exist.",
        )
    return entries


def _image_exists(folder: Path, folder_text: str, relative: str) -> bool:
    # Plain relative paths are the norm and need one stat; anything else goes through safe_join (via
    # image_path), which refuses absolute paths and '..' with a clear error. Symlinks that lead out of the
    # catalog are refused by image_path when the release build opens the image.
    # (The substring test first: building a Path for every image costs more than the stat.)
    if os.path.isabs(relative) or (".." in relative and ".." in Path(relative).parts):
        return image_path(folder, CatalogRecord("", relative, [], "real", "", 0, 0, "")).is_file()
    return os.path.isfile(os.path.join(folder_text, relative))


def _image_entry(folder: str, record: dict, shared: dict[str, str]) -> ImageFields:
    """The ``image_N`` fields of a row, from a catalog record (rows build their own dict from it for each use).

    ``shared`` maps repeated short strings (object names, backgrounds, views) to one string object each, so
    that thousands of images do not hold thousands of copies of "apple".
    """
    area = record.get("object_area")
    view, background = record.get("view"), record.get("background")
    return ImageFields(
        catalog=folder,
        id=record["id"],
        path=record["path"],
        scene_id=record["scene_id"],
        view=shared.setdefault(view, view) if isinstance(view, str) else view,
        background=shared.setdefault(background, background) if isinstance(background, str) else background,
        objects=tuple(map(shared.setdefault, record["objects"], record["objects"])),
        area_names=tuple(map(shared.setdefault, area, area)) if area is not None else None,
        area_values=tuple(area.values()) if area is not None else None,
        width=record["width"],
        height=record["height"],
        sha256=record["sha256"],
    )
