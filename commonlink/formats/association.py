"""The association file contract shared by the chain builder, the release builder, the loaders and eval.

A chain folder holds ``images.jsonl`` (the image table: one :class:`LabelledImage` a line) and one
``<task>.jsonl`` per task type, each with a ``.meta.json`` sidecar of kind ``association_chains``. Rows refer to
images by their index in the table. A release stores the same tables as parquet configs (``images`` plus one
config per task, split ``test``) whose features :func:`association_features` gives.

An image's ``origin`` says where its pixels are, so the release step (possibly on another machine) can fetch
them again:

* ``{"type": "file", "path": "/abs/image.jpg", "catalog": "/abs", "sha256": ...}`` -- an image file of a folder
  (a catalog, a manifest folder, the ``--image-root`` of OCL and Pangea): ``catalog`` is the folder the file must
  stay in and ``sha256`` is recorded when the chains are built. A file is read (by release build, eval, export,
  review) only from inside its folder (a symbolic link out of it is refused) and only with that sha256; a table
  naming a file outside every folder, or none, is refused when read (:func:`checked_file_origin`). The image
  table stores such a folder relative to the table's own folder and ``path`` inside it (``"catalog":
  "../catalogs/real", "path": "images/x.jpg"``; ``formats.catalog_refs``); in memory both are absolute, and older
  tables store absolute paths;
* ``{"type": "hf", "dataset": "<path or repo id>", "split": "train", "row": 12, "column": "image",
  "config": null}`` -- a row of a Hugging Face dataset.

``crop`` is ``[x1, y1, x2, y2]`` in pixels (left, top, right, bottom; right/bottom exclusive, as in
``PIL.Image.crop``) or ``None`` for the whole image.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageOps

from commonlink.errors import InputError, SchemaError
from commonlink.fileio import read_jsonl, safe_join, sha256_bytes, sha256_file
from commonlink.formats.catalog import outside_link_error
from commonlink.formats.catalog_refs import CatalogResolver, origin_for_file
from commonlink.formats.meta import ASSOCIATION_CHAINS_KIND, load_sidecar, meta_path
from commonlink.images import open_image

TASKS = ("single_step", "deduction", "synchronous", "asynchronous")
IMAGES_FILENAME = "images.jsonl"
IMAGE_TABLE_TASK = "image_table"  #: the ``task`` of images.jsonl's sidecar (not a task file)
#: plan characters of a chain step: on concept 1, on concept 2, bridge (from the pool sharing both)
PLAN_CONCEPT_1, PLAN_CONCEPT_2, PLAN_BRIDGE = "1", "2", "b"
#: The split every association release config uses.
SPLIT = "test"
#: The release config holding the image table.
IMAGES_CONFIG = "images"


@dataclass
class LabelledImage:
    """One sample of a labelled image set (an image, or an object crop of one)."""

    id: str  #: stable id (catalog id, or a hash of where the sample comes from)
    labels: list[str]  #: the sample's concepts (deduplicated, in source order)
    width: int  #: of the crop when ``crop`` is set
    height: int
    origin: dict  #: where the pixels are (see module docstring)
    crop: list[int] | None = None  #: [x1, y1, x2, y2] or None
    #: what the image shows, for memory and review text: the OCL object name ("sandwich"), the Pangea action
    #: phrase; images without one are named by their labels when chains are built (:func:`name_unnamed`)
    name: str | None = None

    @property
    def pixels(self) -> int:
        return self.width * self.height

    def to_json(self, file_path: str | os.PathLike | None = None) -> dict:
        """As a line of ``file_path`` (the image table): a catalog image's origin relative to that file."""
        origin = origin_for_file(self.origin, file_path) if file_path is not None else self.origin
        return {
            "id": self.id,
            "labels": self.labels,
            "width": self.width,
            "height": self.height,
            "origin": origin,
            "crop": self.crop,
            "name": self.name,
        }

    @classmethod
    def from_json(cls, data: dict, resolver: CatalogResolver | None = None) -> LabelledImage:
        """From a line of an image table; ``resolver`` (of that file) makes catalog origins absolute again."""
        origin = dict(data["origin"])
        return cls(
            id=data["id"],
            labels=list(data["labels"]),
            width=int(data["width"]),
            height=int(data["height"]),
            origin=resolver.origin(origin) if resolver is not None else origin,
            crop=list(data["crop"]) if data.get("crop") else None,
            name=data.get("name") or None,
        )


def _with_article(label: str) -> str:
    return f"{'an' if label[:1].lower() in 'aeiou' else 'a'} {label}"


def describe_labels(labels: Sequence[str]) -> str:
    """An image named by what it shows: "the image with a red circle and a blue square" (labels in order)."""
    items = [_with_article(label) for label in labels] or ["no label"]
    listed = items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]
    return f"the image with {listed}"


def name_unnamed(images: Sequence[LabelledImage]) -> list[LabelledImage]:
    """The images, each one without a source name named by its labels; images that would get the same name are
    numbered ("... (2)", in id order), so every name is distinct and memory never merges two images."""
    taken = {img.name for img in images if img.name}
    described: dict[str, list[LabelledImage]] = {}
    for img in sorted((img for img in images if not img.name), key=lambda img: img.id):
        described.setdefault(describe_labels(img.labels), []).append(img)
    names: dict[str, str] = {}
    for text, group in described.items():
        for number, img in enumerate(group, 1):
            name = text if len(group) == 1 and text not in taken else f"{text} ({number})"
            names[img.id] = name
    return [
        img
        if img.name
        else LabelledImage(img.id, img.labels, img.width, img.height, img.origin, img.crop, names[img.id])
        for img in images
    ]


def step_concept_codes(plan: str) -> np.ndarray:
    """Per step, which chain concept (0 or 1) the positive shares with the query.

    A bridge step carries the concept of the run before it (its query comes from that run).
    """
    chars = np.frombuffer(plan.encode("ascii"), dtype=np.uint8)
    value = (chars == ord(PLAN_CONCEPT_2)).astype(np.int8)
    on_run = (chars == ord(PLAN_CONCEPT_1)) | (chars == ord(PLAN_CONCEPT_2))
    # each step takes the value of the last run character at or before it (forward fill, vectorised)
    last = (
        np.maximum.accumulate(np.where(on_run, np.arange(len(plan)), -1)) if len(plan) else np.zeros(0, dtype=np.int64)
    )
    return np.where(last >= 0, value[np.maximum(last, 0)], 0).astype(np.int8)


def task_file(out_dir: str | os.PathLike, task: str) -> Path:
    return Path(out_dir) / f"{task}.jsonl"


def is_saved_hf_dataset(path: Path) -> bool:
    return path.is_dir() and any(
        (path / name).is_file() for name in ("dataset_info.json", "state.json", "dataset_dict.json")
    )


def load_hf_dataset(dataset: str, split: str | None, config: str | None):
    """Load ``dataset`` (save_to_disk folder, data folder or repo id); returns (Dataset, split name)."""
    import datasets

    path = Path(dataset)
    try:
        if is_saved_hf_dataset(path):
            loaded = datasets.load_from_disk(str(path))
        else:
            loaded = datasets.load_dataset(dataset, config) if config else datasets.load_dataset(dataset)
    except FileNotFoundError as exc:
        raise InputError(
            f"Hugging Face dataset {dataset!r} not found ({exc}).",
            "Pass a folder saved with save_to_disk, a data folder, or a Hub repo id you have cached.",
        ) from exc
    except Exception as exc:  # datasets raises many types (DatasetNotFoundError, ConnectionError, ...)
        if isinstance(exc, InputError):
            raise
        raise InputError(
            f"Could not load the Hugging Face dataset {dataset!r}: {exc}",
            "Check the path or repo id (and that it is cached when offline).",
        ) from exc
    if isinstance(loaded, (datasets.DatasetDict, dict)):
        names = list(loaded)
        if split is None:
            if len(names) == 1:
                split = names[0]
            elif "train" in names:
                split = "train"
            else:
                raise InputError(f"{dataset} has splits {names}; which one?", "Pass --split NAME.")
        if split not in loaded:
            raise InputError(
                f"{dataset} has no split {split!r} (it has {names}).", f"Pass --split with one of {names}."
            )
        return loaded[split], split
    return loaded, split or str(getattr(loaded, "split", None) or "train")


def image_bytes_or_path(value: Any) -> tuple[bytes | None, str | None]:
    if isinstance(value, dict):
        return value.get("bytes"), value.get("path")
    if isinstance(value, str):
        return None, value
    return None, None


def association_features(config: str):
    """``datasets.Features`` of one release config."""
    from datasets import Features, Image, List, Value

    text, ids = Value("string"), List(Value("string"))
    if config == IMAGES_CONFIG:
        return Features(
            {
                "id": text,
                "image": Image(),
                "labels": ids,
                "width": Value("int32"),
                "height": Value("int32"),
                "crop": List(Value("int32")),
                "origin": text,
                "name": text,
            }
        )
    if config == "single_step":
        return Features(
            {
                "id": text,
                "concept": text,
                "concept_kind": text,
                "query": text,
                "memory": ids,
                "memory_concept": text,
                "candidates": ids,
                "answer": Value("int32"),
                "options": ids,
            }
        )
    if config == "deduction":
        return Features(
            {
                "id": text,
                "concept": text,
                "concept_kind": text,
                "image_1": text,
                "image_2": text,
                "options": ids,
                "gold": ids,
            }
        )
    if config in ("synchronous", "asynchronous"):
        return Features(
            {
                "id": text,
                "kind": text,
                "concepts": ids,
                "concept_kind": text,
                "start": text,
                "positive": ids,
                "negative": ids,
                "answer": List(Value("int8")),
                "plan": text,
                "warmup": Value("int32"),
                "num_steps": Value("int32"),
                "options": ids,
            }
        )
    raise InputError(f"Unknown association config {config!r}.")


# ---------------------------------------------------------------------------------------------- reading back
def read_chain_meta(chain_file: str | os.PathLike, *, allow_image_table: bool = False) -> dict:
    """The meta sidecar of a chain file; errors say what is wrong and how to get a valid one."""
    mp = meta_path(chain_file)
    if not mp.is_file():
        raise InputError(
            f"{chain_file} has no meta sidecar ({mp.name}).", "Pass the .jsonl files written by `commonlink chains`."
        )
    meta = load_sidecar(mp, fix="Rebuild the chain files with `commonlink chains`.")
    if allow_image_table and meta.get("kind") == ASSOCIATION_CHAINS_KIND and meta.get("task") == IMAGE_TABLE_TASK:
        return meta
    if meta.get("kind") != ASSOCIATION_CHAINS_KIND or meta.get("task") not in TASKS:
        raise SchemaError(
            f"{mp}: kind {meta.get('kind')!r} / task {meta.get('task')!r} is not an association chain file.",
            "Pass the .jsonl files written by `commonlink chains`.",
        )
    return meta


def read_image_table(
    chain_file: str | os.PathLike, meta: dict | None = None, *, catalog_root: str | os.PathLike | None = None
) -> list[LabelledImage]:
    """The image table next to a chain file (``images.jsonl``), checked against the meta's hash; catalog
    images are found relative to the table, or under ``catalog_root`` (``--catalog-root``)."""
    meta = meta or read_chain_meta(chain_file)
    path = Path(chain_file).parent / meta.get("images_file", IMAGES_FILENAME)
    if not path.is_file():
        raise InputError(
            f"{chain_file}: its image table {path} is missing.",
            "Keep images.jsonl next to the chain files, or rebuild them.",
        )
    if meta.get("images_sha256") and sha256_file(path) != meta["images_sha256"]:
        raise SchemaError(
            f"{path} does not match {meta_path(chain_file).name} (it was rewritten by another build).",
            "Rebuild all chain files of this folder with one `commonlink chains` run.",
        )
    resolver = CatalogResolver(path, catalog_root)
    table = [LabelledImage.from_json(row, resolver) for row in read_jsonl(path)]
    for img in table:  # every file checked to lie inside its folder before any is read (or sent)
        if img.origin.get("type") == "file":
            checked_file_origin(img.origin, what=f"{path}: image {img.id}")
    return table


_REBUILD_CHAINS = (
    "Rebuild the chain files with `commonlink chains` from a catalog, a manifest folder or an --image-root: "
    "commonlink reads (and sends to a model) only images inside the folders a chain folder names."
)


def checked_file_origin(origin: dict, *, what: str) -> tuple[str, str]:
    """``(folder, path inside it)`` of a file origin: it must name its catalog (or image folder), lie inside it
    and carry the ``sha256`` recorded when the chains were built; an error otherwise (nothing is read)."""
    folder, path, digest = origin.get("catalog"), origin.get("path"), origin.get("sha256")
    if not isinstance(path, str) or not path:
        raise SchemaError(f"{what}: its file origin names no path.", _REBUILD_CHAINS)
    if not isinstance(folder, str) or not folder:
        raise SchemaError(
            f"{what}: the file {path} is outside every catalog (the table names none for it).", _REBUILD_CHAINS
        )
    inside = os.path.relpath(os.path.abspath(path), os.path.abspath(folder))
    if inside == os.curdir or inside.split(os.sep, 1)[0] == os.pardir:
        raise SchemaError(f"{what}: the file {path} is outside its catalog {folder}.", _REBUILD_CHAINS)
    if not isinstance(digest, str) or not digest:
        raise SchemaError(f"{what}: no sha256 is recorded for the file {path}.", _REBUILD_CHAINS)
    return folder, inside


def read_file_origin(origin: dict, *, what: str) -> bytes:
    """The bytes of a file origin, read only from inside its folder (a symbolic link out of it is refused) and
    only when they have the recorded sha256."""
    folder, inside = checked_file_origin(origin, what=what)
    try:
        data = safe_join(folder, inside).read_bytes()
    except InputError as exc:  # a symbolic link leaving the folder
        exc = outside_link_error(folder, inside) or exc
        raise InputError(f"{what}: {exc.problem}", exc.fix) from None
    except FileNotFoundError:
        raise InputError(
            f"{what}: file {origin['path']} is gone since the chain files were built.",
            "Restore the file, or rebuild the chain files.",
        ) from None
    if sha256_bytes(data) != origin["sha256"]:
        raise InputError(
            f"{what}: {origin['path']} changed since the chain files were built (its sha256 is not the one in "
            f"{IMAGES_FILENAME}), so its labels may no longer describe it; it is not read.",
            "Restore the original file, or rebuild the chain files (`commonlink chains ... --overwrite`).",
        )
    return data


# ---------------------------------------------------------------------------------------------- pixels
def with_sha256(origin: dict) -> dict:
    """``origin`` with the ``sha256`` of its file recorded (computed when missing; origins of images inside a
    Hugging Face dataset, and of files that are not there, are returned as they are)."""
    if origin.get("type") != "file" or origin.get("sha256"):
        return origin
    try:
        return {**origin, "sha256": sha256_file(origin["path"])}
    except FileNotFoundError:  # nothing to record; a release of it says the file is gone
        return origin


class ImageFetcher:
    """Fetches the pixels of a :class:`LabelledImage` origin (keeps HF datasets open between calls)."""

    def __init__(self) -> None:
        self._datasets: dict[tuple, Any] = {}

    def _hf_value(self, origin: dict) -> Any:
        import datasets

        key = (origin["dataset"], origin.get("config"), origin["split"], origin["column"])
        ds = self._datasets.get(key)
        if ds is None:
            ds, _ = load_hf_dataset(origin["dataset"], origin["split"], origin.get("config"))
            ds = ds.select_columns([origin["column"]]).cast_column(origin["column"], datasets.Image(decode=False))
            self._datasets[key] = ds
        return ds[int(origin["row"])][origin["column"]]

    def original_bytes(self, origin: dict, *, what: str = "image") -> tuple[bytes | None, Path | None]:
        """(bytes, None) for in-dataset images, (bytes, path) for files (read only from inside their catalog, with
        the recorded sha256: :func:`read_file_origin`)."""
        if origin["type"] == "file":
            return read_file_origin(origin, what=what), Path(origin["path"])
        if origin["type"] == "hf":
            data, path = image_bytes_or_path(self._hf_value(origin))
            return (data, None) if data is not None else (None, Path(path) if path else None)
        raise SchemaError(
            f"Unknown image origin type {origin.get('type')!r}.", "Rebuild the chain files with commonlink chains."
        )

    def open(self, origin: dict, crop: Sequence[int] | None = None, *, what: str = "image") -> Image.Image:
        """The decoded image (pixel cap enforced), cropped when ``crop`` is set."""
        data, path = self.original_bytes(origin, what=what)
        source: Any = data if data is not None else path
        if source is None:
            raise InputError(f"{what}: the dataset row has no image.")
        img = open_image(source, what=what)
        if crop:
            # Boxes are in the file's own pixel coordinates (as annotation tools store them): no EXIF rotation.
            return img.crop(tuple(int(v) for v in crop))
        # Whole images are shown upright, as the release stores them (EXIF orientation applied).
        return ImageOps.exif_transpose(img)
