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
  (docs/sampling.md), loaded with :mod:`commonlink.sampling.safe_pickle`.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from PIL import Image

from commonlink.catalog.labels import read_manifest
from commonlink.constants import CATALOG_FILENAME
from commonlink.errors import InputError, SchemaError
from commonlink.fileio import safe_join
from commonlink.formats.association import (
    LabelledImage,
    image_bytes_or_path,
    is_saved_hf_dataset,
    load_hf_dataset,
)
from commonlink.formats.catalog import image_path, iter_catalog
from commonlink.sampling.safe_pickle import safe_load

SOURCE_TYPES = ("catalog", "hf", "manifest", "ocl", "pangea")
MANIFEST_NAMES = ("manifest.csv", "manifest.jsonl", "labels.csv", "labels.jsonl")


@dataclass
class SourceReport:
    """What a reader kept and what it dropped (goes into the chain file's meta)."""

    source: str
    source_type: str
    read: int = 0  #: samples found in the source
    kept: int = 0
    dropped_small: int = 0  #: under --min-pixels
    dropped_unlabelled: int = 0
    dropped_bad_box: int = 0  #: OCL boxes with no area inside the image
    notes: list[str] = field(default_factory=list)


def stable_id(key: str) -> str:
    """16 hex characters derived from a description of where a sample comes from."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:16]


def _clean_labels(labels: Iterable[Any]) -> list[str]:
    seen: dict[str, None] = {}
    for label in labels:
        text = str(label).strip()
        if text:
            seen.setdefault(text, None)
    return list(seen)


def image_size(path: Path, *, what: str) -> tuple[int, int]:
    """(width, height) from the image header only (no decoding)."""
    if not path.is_file():
        raise InputError(f"{what}: image file not found: {path}", "Check --image-root / the paths in the annotations.")
    try:
        with Image.open(path) as img:
            return img.size
    except Exception as exc:  # PIL raises many types for unreadable files
        raise InputError(f"{what}: {path} is not a readable image ({exc}).", "Re-export or remove the file.") from exc


def _keep(images: list[LabelledImage], report: SourceReport, min_pixels: int) -> list[LabelledImage]:
    kept = []
    for img in images:
        if not img.labels:
            report.dropped_unlabelled += 1
        elif img.pixels < min_pixels:
            report.dropped_small += 1
        else:
            kept.append(img)
    report.kept = len(kept)
    return kept


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
                labels=_clean_labels(labels),
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
    return _keep(images, report, min_pixels), report


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
                labels=_clean_labels(entry.objects),
                width=width,
                height=height,
                origin={"type": "file", "path": str(path), "catalog": str(folder), "relative": entry.file},
            )
        )
    return _keep(images, report, min_pixels), report


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
                    labels=_clean_labels(decode(labels)),
                    width=int(width),
                    height=int(height),
                    origin=origin,
                    name=(str(name).strip() or None) if name is not None else None,
                )
            )
            row += 1
    report.read = row
    return _keep(images, report, min_pixels), report


# ---------------------------------------------------------------------------------------------- pickles
def read_label_names(path: str | os.PathLike | None) -> list[str] | None:
    """An id -> name list: a JSON list, or a text file with one name a line (line i = id i)."""
    if path is None:
        return None
    path = Path(path)
    if not path.is_file():
        raise InputError(f"Label names file not found: {path}", "Pass a JSON list or a text file with one name a line.")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise SchemaError(
            f"{path}: not UTF-8 text (byte {exc.start} cannot be decoded).", "Save the label names as UTF-8."
        ) from None
    if text.lstrip().startswith("["):
        try:
            names = json.loads(text)
        except json.JSONDecodeError as exc:
            raise SchemaError(
                f"{path}: starts like a JSON list but is not valid JSON ({exc.msg}, line {exc.lineno}).",
                'Write a JSON list (["metal", "wooden"]) or one name a line.',
            ) from None
        if not isinstance(names, list):
            raise SchemaError(f"{path}: expected a JSON list of names.")
        return [str(n) for n in names]
    lines = [line.strip() for line in text.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    if "" in lines:  # ids are line numbers: dropping the line would give every later id the wrong name
        raise SchemaError(
            f"{path}, line {lines.index('') + 1}: empty, but line i names id i.",
            "Put a name on every line up to the last id (e.g. unused_7), or write a JSON list.",
        )
    return lines


def _name_labels(ids: Any, *, names: Sequence[str] | None, prefix: str, what: str) -> list[str]:
    if ids is None:
        return []
    if not isinstance(ids, (list, tuple, set, frozenset)):
        raise SchemaError(f"{what}: expected a list of label ids, got {type(ids).__name__}.")
    out = []
    for value in ids:
        if isinstance(value, str):
            out.append(value)
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value:
            raise SchemaError(f"{what}: label id {value!r} is not an integer or a name.")
        index = int(value)
        if names is None:
            out.append(f"{prefix}_{index}")
        elif 0 <= index < len(names):
            out.append(names[index])
        else:
            raise SchemaError(
                f"{what}: label id {index} is outside the names list ({len(names)} names).",
                "Pass the names file that matches these annotations with --label-names.",
            )
    return out


def _resolve_image(image_root: Path, parts: Sequence[str], *, what: str) -> Path:
    """First existing candidate under ``image_root`` (e.g. ``dataset/image`` then ``image``)."""
    tried = []
    for rel in parts:
        path = safe_join(image_root, rel)
        if path.is_file():
            return path
        tried.append(str(path))
    raise InputError(
        f"{what}: image not found (tried {', '.join(tried)}).",
        "Pass the folder that holds the images with --image-root.",
    )


def _pickled_records(pickle_path: str | os.PathLike, expected: str, fix: str) -> list:
    """The record list of an annotation pickle (a dict's values count as the list), loaded safely."""

    data = safe_load(pickle_path)
    if isinstance(data, dict):
        data = list(data.values())
    if not isinstance(data, (list, tuple)):
        raise SchemaError(f"{pickle_path}: expected a list of {expected}, got {type(data).__name__}.", fix)
    return list(data)


def _object_name(value: Any, names: Sequence[str] | None, *, what: str) -> str | None:
    """An object's name: the string itself, or an id looked up in ``names``; None when there is none."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value:
        raise SchemaError(f"{what}: object {value!r} is neither a name nor an integer id.")
    if names is None:
        return None  # an id is not a name: the image stays unnamed (the reader notes it once)
    if not 0 <= int(value) < len(names):
        raise SchemaError(
            f"{what}: object id {int(value)} is outside the object names list ({len(names)} names).",
            "Pass the --object-names file that matches these annotations.",
        )
    return names[int(value)]


def read_ocl_source(
    pickle_path: str | os.PathLike,
    *,
    image_root: str | os.PathLike,
    labels: str = "attr",
    label_names: Sequence[str] | None = None,
    min_pixels: int = 0,
    object_names: Sequence[str] | None = None,
) -> tuple[list[LabelledImage], SourceReport]:
    """OCL annotations: a list of ``{name, objects: [{obj, attr: [ids], aff: [ids], box}]}``.

    Each object becomes one sample: the crop of its box (``[x1, y1, x2, y2]`` in pixels, clipped to the image)
    labelled with its attribute ids (``labels="attr"``), affordance ids (``"aff"``) or both, named through
    ``label_names`` or as ``attr_<id>`` / ``aff_<id>``. ``--min-pixels`` applies to the crop. The object's
    ``obj`` (a category name such as ``sandwich``, or an id named through ``object_names``) becomes the
    sample's ``name``: memory and review text call the image by it, as the paper's examples do.
    """
    if labels not in ("attr", "aff", "both"):
        raise InputError(f"--ocl-labels must be attr, aff or both, not {labels!r}.")
    image_root = Path(image_root).resolve()
    data = _pickled_records(pickle_path, "image records", "Pass an OCL annotation pickle (list of {name, objects}).")
    report = SourceReport(str(Path(pickle_path).resolve()), "ocl")
    images = []
    for i, entry in enumerate(data):
        what = f"{pickle_path}, record {i}"
        if not isinstance(entry, dict) or "name" not in entry or "objects" not in entry:
            raise SchemaError(f"{what}: expected a dict with 'name' and 'objects'.")
        path = _resolve_image(image_root, [str(entry["name"])], what=what)
        width, height = image_size(path, what=what)
        for k, obj in enumerate(entry["objects"] or []):
            report.read += 1
            owhat = f"{what}, object {k}"
            if not isinstance(obj, dict) or "box" not in obj:
                raise SchemaError(f"{owhat}: expected a dict with a 'box'.")
            box = obj["box"]
            if not isinstance(box, (list, tuple)) or len(box) != 4 or not all(isinstance(v, (int, float)) for v in box):
                raise SchemaError(f"{owhat}: box must be [x1, y1, x2, y2] numbers, got {box!r}.")
            x1, y1, x2, y2 = (int(round(float(v))) for v in box)
            x1, x2 = max(0, min(x1, width)), max(0, min(x2, width))
            y1, y2 = max(0, min(y1, height)), max(0, min(y2, height))
            if x2 <= x1 or y2 <= y1:
                report.dropped_bad_box += 1
                continue
            names: list[str] = []
            if labels in ("attr", "both"):
                names += _name_labels(obj.get("attr"), names=label_names, prefix="attr", what=f"{owhat} attr")
            if labels in ("aff", "both"):
                names += _name_labels(obj.get("aff"), names=label_names, prefix="aff", what=f"{owhat} aff")
            crop = [x1, y1, x2, y2]
            images.append(
                LabelledImage(
                    id=stable_id(f"ocl:{entry['name']}:{k}:{crop}"),
                    labels=_clean_labels(names),
                    width=x2 - x1,
                    height=y2 - y1,
                    origin={"type": "file", "path": str(path)},
                    crop=crop,
                    name=_object_name(obj.get("obj"), object_names, what=f"{owhat} obj"),
                )
            )
    unnamed = sum(1 for img in images if img.name is None)
    if unnamed:
        report.notes.append(
            f"{unnamed} object(s) have no name (obj missing, or an id without --object-names): "
            "memory names them by their labels ('the image with ...')"
        )
    return _keep(images, report, min_pixels), report


def read_pangea_source(
    pickle_path: str | os.PathLike,
    *,
    image_root: str | os.PathLike,
    labels: str = "node",
    label_names: Sequence[str] | None = None,
    min_pixels: int = 0,
) -> tuple[list[LabelledImage], SourceReport]:
    """Pangea annotations: tuples ``(dataset, image, action_labels, node_labels)``.

    The image is looked up as ``<image_root>/<dataset>/<image>``, then ``<image_root>/<image>``. Labels are the
    VerbNet node labels (``labels="node"``, the default: the paper's action concepts ``hit``, ``run``... are
    nodes), the action labels (``"action"``) or both; ids are named via ``label_names`` or as ``action_<id>`` /
    ``node_<id>``; names given as strings are used as they are. The action labels, joined by spaces, become
    the sample's ``name`` (as in the authors' harness).
    """
    if labels not in ("action", "node", "both"):
        raise InputError(f"--pangea-labels must be action, node or both, not {labels!r}.")
    image_root = Path(image_root).resolve()
    data = _pickled_records(
        pickle_path, "(dataset, image, action_labels, node_labels) tuples", "Pass a Pangea annotation pickle."
    )
    report = SourceReport(str(Path(pickle_path).resolve()), "pangea")
    images = []
    for i, entry in enumerate(data):
        what = f"{pickle_path}, record {i}"
        report.read += 1
        if not isinstance(entry, (list, tuple)) or len(entry) != 4:
            raise SchemaError(
                f"{what}: expected a 4-tuple (dataset, image, action_labels, node_labels), got {entry!r:.80}."
            )
        dataset, image, action_ids, node_ids = entry
        path = _resolve_image(image_root, [f"{dataset}/{image}", str(image)], what=what)
        width, height = image_size(path, what=what)
        actions = _name_labels(action_ids, names=label_names, prefix="action", what=f"{what} action_labels")
        names: list[str] = []
        if labels in ("action", "both"):
            names += actions
        if labels in ("node", "both"):
            names += _name_labels(node_ids, names=label_names, prefix="node", what=f"{what} node_labels")
        # The authors' harness calls a Pangea image by its action phrase (" ".join(action_labels)).
        phrase = " ".join(a for a in (str(x).strip() for x in actions) if a) or None
        images.append(
            LabelledImage(
                id=stable_id(f"pangea:{dataset}/{image}"),
                labels=_clean_labels(names),
                width=width,
                height=height,
                origin={"type": "file", "path": str(path)},
                name=phrase,
            )
        )
    return _keep(images, report, min_pixels), report


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
