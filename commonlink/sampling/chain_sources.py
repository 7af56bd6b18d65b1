"""Labelled image sets the chain builder reads (paper §3: any dataset whose samples carry label sets).

Every source becomes a list of :class:`LabelledImage`: a stable id, the label set (the *concepts*), the image
size (of the crop when there is one) and an ``origin`` saying where the pixels come from, so that the release
step (possibly on another machine) can fetch them again:

* ``{"type": "file", "path": "/abs/image.jpg"}`` -- an image file (catalogs, manifest folders, OCL, Pangea);
* ``{"type": "hf", "dataset": "<path or repo id>", "split": "train", "row": 12, "column": "image",
  "config": null}`` -- a row of a Hugging Face dataset.

``crop`` is ``[x1, y1, x2, y2]`` in pixels (left, top, right, bottom; right/bottom exclusive, as in
``PIL.Image.crop``) or ``None`` for the whole image.

Readers:

* :func:`read_catalog_source` -- an image catalog folder; labels are ``objects`` or any list field;
* :func:`read_hf_source` -- a dataset saved with ``save_to_disk``, a local data folder, or a Hub repo id, with an
  image column and a label column (``ClassLabel`` and ``Sequence(ClassLabel)`` decoded to names);
* :func:`read_manifest_source` -- a folder of images with a CSV/JSONL manifest (the ingestion formats);
* :func:`read_ocl_source` / :func:`read_pangea_source` -- the OCL and Pangea annotation pickles
  (docs/sampling.md), read in :mod:`commonlink.sampling.pickle_sources`.

:func:`read_source` picks the reader (:func:`detect_source_type` when the type is ``auto``); what the readers
share (:class:`SourceReport`, ids, label cleaning) is in :mod:`commonlink.sampling.source_common`.
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

from PIL import Image

from commonlink.catalog.labels import read_manifest
from commonlink.constants import CATALOG_FILENAME
from commonlink.errors import InputError, SchemaError
from commonlink.fileio import safe_join, sha256_file
from commonlink.formats.association import (
    LabelledImage,
    image_bytes_or_path,
    is_saved_hf_dataset,
    load_hf_dataset,
)
from commonlink.formats.catalog import image_path, iter_catalog
from commonlink.sampling.pickle_sources import read_label_names, read_ocl_source, read_pangea_source
from commonlink.sampling.source_common import SourceReport, clean_labels, image_size, keep_usable, stable_id

SOURCE_TYPES = ("catalog", "hf", "manifest", "ocl", "pangea")
MANIFEST_NAMES = ("manifest.csv", "manifest.jsonl", "labels.csv", "labels.jsonl")


# ---------------------------------------------------------------------------------------------- catalogs
def read_catalog_source(
    catalog_dir: str | os.PathLike, *, labels_field: str = "objects", min_pixels: int = 0
) -> tuple[list[LabelledImage], SourceReport]:
    """Samples of an image catalog; labels from ``objects`` or any list field of the records."""

    catalog_dir = Path(catalog_dir).resolve()
    report = SourceReport(str(catalog_dir), "catalog")
    images = []
    for record in iter_catalog(catalog_dir):
        report.read += 1
        if labels_field == "objects":
            labels = record.objects
        else:
            labels = (
                getattr(record, labels_field, None)
                if labels_field in ("background", "view", "scene_id")
                else record.extra.get(labels_field)
            )
            if labels is None:
                raise SchemaError(
                    f"{catalog_dir}: record {record.id} has no field {labels_field!r}.",
                    "Pass --labels-field objects, or a list field every record has.",
                )
            if isinstance(labels, str):
                labels = [labels]
        images.append(
            LabelledImage(
                id=record.id,
                labels=clean_labels(labels),
                width=int(record.width),
                height=int(record.height),
                origin={
                    "type": "file",
                    "path": str(image_path(catalog_dir, record)),
                    "catalog": str(catalog_dir),
                    "relative": record.path,
                    "sha256": record.sha256,
                },
            )
        )
    return keep_usable(images, report, min_pixels), report


# ---------------------------------------------------------------------------------------------- manifests
def find_manifest(folder: Path) -> Path | None:
    for name in MANIFEST_NAMES:
        if (folder / name).is_file():
            return folder / name
    return None


def read_manifest_source(
    folder: str | os.PathLike, *, manifest: str | os.PathLike | None = None, min_pixels: int = 0
) -> tuple[list[LabelledImage], SourceReport]:
    """A folder of images with a manifest (``file,objects`` CSV or JSONL, the ingestion formats)."""

    folder = Path(folder).resolve()
    manifest_path = Path(manifest) if manifest else find_manifest(folder)
    if manifest_path is None:
        raise InputError(
            f"{folder}: no manifest found (looked for {', '.join(MANIFEST_NAMES)}).",
            "Pass the CSV/JSONL that lists the images with --manifest.",
        )
    report = SourceReport(str(folder), "manifest")
    images = []
    for entry in read_manifest(manifest_path):
        report.read += 1
        path = safe_join(folder, entry.file)
        width, height = image_size(path, what=f"{manifest_path}, line {entry.line}")
        rel = path.relative_to(folder).as_posix()
        images.append(
            LabelledImage(
                id=stable_id(f"manifest:{rel}"),
                labels=clean_labels(entry.objects),
                width=width,
                height=height,
                origin={
                    "type": "file",
                    "path": str(path),
                    "catalog": str(folder),
                    "relative": entry.file,
                    "sha256": sha256_file(path),
                },
            )
        )
    return keep_usable(images, report, min_pixels), report


# ---------------------------------------------------------------------------------------------- HF datasets
def label_decoder(feature: Any, *, column: str):
    """A function turning a label-column value into a list of names (ClassLabel ids decoded)."""
    import datasets

    def names_of(class_label):
        return lambda value: class_label.int2str(int(value))

    if isinstance(feature, datasets.ClassLabel):
        to_name = names_of(feature)
        return lambda value: [] if value is None or value < 0 else [to_name(value)]
    inner = None
    list_types = tuple(
        t
        for t in (
            getattr(datasets, "List", None),
            getattr(datasets, "LargeList", None),
            getattr(datasets, "Sequence", None),
        )
        if isinstance(t, type)
    )
    if isinstance(feature, list_types):
        inner = feature.feature
    elif isinstance(feature, (list, tuple)) and feature:
        inner = feature[0]
    if inner is not None:
        if isinstance(inner, datasets.ClassLabel):
            to_name = names_of(inner)
            return lambda values: [to_name(v) for v in (values or []) if v is not None and v >= 0]
        if isinstance(inner, datasets.Value) and inner.dtype in ("string", "large_string"):
            return lambda values: list(values or [])
        if isinstance(inner, datasets.Value):
            return lambda values: [str(v) for v in (values or [])]
    if isinstance(feature, datasets.Value):
        if feature.dtype in ("string", "large_string"):
            return lambda value: [] if value is None else [value]
        return lambda value: [] if value is None else [str(value)]
    raise SchemaError(
        f"Label column {column!r} has type {feature}, which is not a label or a list of labels.",
        "Pass --labels-column naming a ClassLabel, string, or list column.",
    )


def read_hf_source(
    dataset: str,
    *,
    image_column: str = "image",
    labels_column: str = "labels",
    split: str | None = None,
    config: str | None = None,
    min_pixels: int = 0,
    batch_size: int = 256,
    name_column: str | None = None,
) -> tuple[list[LabelledImage], SourceReport]:
    """Rows of a Hugging Face dataset with an image column and a label(-list) column; ``name_column`` (a string
    column such as an object or caption field) names each image for memory and review text."""
    import datasets

    ds, split = load_hf_dataset(dataset, split, config)
    columns = list(ds.features)
    wanted = [("--image-column", image_column), ("--labels-column", labels_column)]
    if name_column is not None:
        wanted.append(("--name-column", name_column))
    for option, column in wanted:
        if column not in columns:
            raise InputError(
                f"{dataset}: no column {column!r} (columns: {', '.join(columns)}).", f"Pass {option} NAME."
            )
    if not isinstance(ds.features[image_column], datasets.Image):
        raise SchemaError(
            f"{dataset}: column {image_column!r} is {ds.features[image_column]}, not an Image.",
            "Pass --image-column naming the image column.",
        )
    decode = label_decoder(ds.features[labels_column], column=labels_column)
    ds = ds.select_columns([c for _, c in wanted]).cast_column(image_column, datasets.Image(decode=False))
    dataset_ref = str(Path(dataset).resolve()) if Path(dataset).exists() else dataset
    report = SourceReport(dataset_ref, "hf")
    images = []
    row = 0
    for batch in ds.iter(batch_size=batch_size):
        names = batch[name_column] if name_column is not None else [None] * len(batch[image_column])
        for value, labels, name in zip(batch[image_column], batch[labels_column], names):
            data, path = image_bytes_or_path(value)
            what = f"{dataset} row {row}"
            if data is not None:
                try:
                    with Image.open(io.BytesIO(data)) as img:
                        width, height = img.size
                except Exception as exc:
                    raise InputError(
                        f"{what}: image bytes are not a readable image ({exc}).", "Fix or drop that row."
                    ) from exc
            elif path:
                width, height = image_size(Path(path), what=what)
            else:
                raise SchemaError(f"{what}: empty image.", "Fix or drop that row.")
            origin = {
                "type": "hf",
                "dataset": dataset_ref,
                "config": config,
                "split": split,
                "row": row,
                "column": image_column,
            }
            images.append(
                LabelledImage(
                    id=stable_id(f"hf:{dataset_ref}:{config}:{split}:{row}"),
                    labels=clean_labels(decode(labels)),
                    width=int(width),
                    height=int(height),
                    origin=origin,
                    name=(str(name).strip() or None) if name is not None else None,
                )
            )
            row += 1
    report.read = row
    return keep_usable(images, report, min_pixels), report


# ---------------------------------------------------------------------------------------------- dispatch
def detect_source_type(source: str) -> str:
    """Guess the kind of SOURCE: catalog folder, saved/loadable HF dataset, manifest folder, or a pickle."""
    path = Path(source)
    if path.is_dir():
        if (path / CATALOG_FILENAME).is_file():
            return "catalog"
        if is_saved_hf_dataset(path):
            return "hf"
        if find_manifest(path) is not None:
            return "manifest"
        return "hf"  # a data folder datasets.load_dataset can read
    if path.is_file():
        if path.suffix.lower() in (".pkl", ".pickle"):
            raise InputError(
                f"{source} is a pickle: say whether it is OCL or Pangea.",
                "Pass --source-type ocl or --source-type pangea.",
            )
        raise InputError(
            f"{source} is a file, not a catalog, dataset or image folder.",
            "Pass a catalog folder, a Hugging Face dataset, a folder with a manifest, or an OCL/Pangea pickle "
            "with --source-type.",
        )
    if "/" in source and not source.startswith((".", "/")):
        return "hf"  # looks like a Hub repo id
    raise InputError(f"Source not found: {source}", "Check the path (or pass a Hub repo id).")


def read_source(
    source: str,
    *,
    source_type: str = "auto",
    min_pixels: int = 0,
    labels_field: str = "objects",
    image_column: str = "image",
    labels_column: str = "labels",
    split: str | None = None,
    hf_config: str | None = None,
    manifest: str | None = None,
    image_root: str | None = None,
    ocl_labels: str = "attr",
    pangea_labels: str = "node",
    label_names: str | None = None,
    object_names: str | None = None,
    name_column: str | None = None,
) -> tuple[list[LabelledImage], SourceReport]:
    """Read any supported source into labelled images, dropping unlabelled ones and those under ``min_pixels``."""
    kind = detect_source_type(source) if source_type == "auto" else source_type
    if kind not in SOURCE_TYPES:
        raise InputError(f"Unknown source type {source_type!r}.", f"Use one of: auto, {', '.join(SOURCE_TYPES)}.")
    if kind == "catalog":
        return read_catalog_source(source, labels_field=labels_field, min_pixels=min_pixels)
    if kind == "hf":
        return read_hf_source(
            source,
            image_column=image_column,
            labels_column=labels_column,
            split=split,
            config=hf_config,
            min_pixels=min_pixels,
            name_column=name_column,
        )
    if kind == "manifest":
        return read_manifest_source(source, manifest=manifest, min_pixels=min_pixels)
    names = read_label_names(label_names)
    root = image_root or str(Path(source).resolve().parent)
    if kind == "ocl":
        return read_ocl_source(
            source,
            image_root=root,
            labels=ocl_labels,
            label_names=names,
            min_pixels=min_pixels,
            object_names=read_label_names(object_names),
        )
    return read_pangea_source(source, image_root=root, labels=pangea_labels, label_names=names, min_pixels=min_pixels)


#: What the labels of each source kind are, for prompts (OCL: by --ocl-labels); a preset's kind wins.
_CONCEPT_KINDS = {
    "catalog": "object",
    "manifest": "object",
    "hf": "label",
    "pangea": "action",
    "ocl": {"attr": "attribute", "aff": "affordance", "both": "attribute or affordance"},
}


def default_concept_kind(source_type: str, ocl_labels: str = "attr", preset_kind: str | None = None) -> str:
    """The ``concept_kind`` a build records when none is given: the preset's, else the source kind's."""
    if preset_kind is not None:
        return preset_kind
    kind = _CONCEPT_KINDS.get(source_type, "concept")
    return kind.get(ocl_labels, "concept") if isinstance(kind, dict) else kind
