"""OCL and Pangea annotation pickles as labelled images (docs/sampling.md), loaded with
:mod:`commonlink.kinds.association.safe_pickle`: :func:`read_ocl_source` (one crop per annotated object),
:func:`read_pangea_source` (one image per record), and :func:`read_label_names` for the id -> name lists both use.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from commonlink.errors import InputError, SchemaError
from commonlink.fileio import loads_user_json, read_user_text, safe_join, sha256_file
from commonlink.kinds.association.format import LabelledImage
from commonlink.kinds.association.safe_pickle import safe_load
from commonlink.kinds.association.source_common import SourceReport, clean_labels, image_size, keep_usable, stable_id


def read_label_names(path: str | os.PathLike | None) -> list[str] | None:
    """An id -> name list: a JSON list, or a text file with one name a line (line i = id i)."""
    if path is None:
        return None
    path = Path(path)
    text = read_user_text(path, "Label names file", "Pass a JSON list or a text file with one name a line.")
    if text.lstrip().startswith("["):
        fix = 'Write a JSON list (["metal", "wooden"]) or one name a line.'
        names = loads_user_json(text, path, fix, problem="starts like a JSON list but is not valid JSON")
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


def _file_origin(image_root: Path, path: Path) -> dict:
    """An image file under ``--image-root``, named with that folder and its sha256 (images are read only from
    inside their folder, and only with the bytes they had when the chains were built)."""
    return {
        "type": "file",
        "path": str(path),
        "catalog": str(image_root),
        "relative": path.relative_to(image_root).as_posix(),
        "sha256": sha256_file(path),
    }


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
                    labels=clean_labels(names),
                    width=x2 - x1,
                    height=y2 - y1,
                    origin=_file_origin(image_root, path),
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
    return keep_usable(images, report, min_pixels), report


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
                labels=clean_labels(names),
                width=width,
                height=height,
                origin=_file_origin(image_root, path),
                name=phrase,
            )
        )
    return keep_usable(images, report, min_pixels), report
