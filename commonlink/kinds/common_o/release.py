"""Build a release folder (parquet shards + dataset card + manifest) from pairs files.

Layout written (contracts; ``datasets.load_dataset(RELEASE_DIR)`` reads it with no custom code)::

    RELEASE_DIR/README.md                               Hub dataset card: YAML metadata + datasheet
    RELEASE_DIR/manifest.json                           sha256/size of every file, toolkit version, seed, config
    RELEASE_DIR/data/{split}-{i:05d}-of-{n:05d}.parquet published facebook/Common-O columns + provenance
    RELEASE_DIR/figures/*.png                           figures linked from the card

Rows are streamed: each pairs row is read, its two image files are read and written into the current row
group, and only light per-row metadata is kept (for statistics and figures), so memory does not grow with
image count. The folder is built under a hidden temporary name next to ``RELEASE_DIR`` and renamed into
place at the end; an existing release is only replaced with ``overwrite=True``, and rebuilding the same
inputs with the same options finds the finished release and keeps it.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
from collections import defaultdict
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from commonlink.constants import NO_COMMON_OBJECTS
from commonlink.errors import InputError, SchemaError
from commonlink.fileio import (
    read_jsonl,
    sha256_bytes,
)
from commonlink.formats.catalog import (
    CatalogRecord,
)
from commonlink.formats.catalog_refs import CatalogResolver
from commonlink.formats.meta import (
    COMMON_O_PAIRS_KIND,
    meta_path,
    read_meta,
    verify_data_file,
)
from commonlink.kinds.common_o.datasheet import render_common_o_card
from commonlink.kinds.common_o.figures import write_common_o_figures
from commonlink.kinds.common_o.format import common_o_features, letters
from commonlink.kinds.common_o.image_reader import CatalogImageReader
from commonlink.kinds.common_o.release_stats import CommonOStatsAccumulator
from commonlink.progress import track
from commonlink.release.card_claims import card_conflicts
from commonlink.release.licences import LicenceLedger, credit_row_fields, with_credit_columns
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

#: The image columns of a row (each gets ``_license``, ``_author``, ``_source_url`` columns when credits are known).
IMAGE_COLUMNS = ("image_1", "image_2")
#: Stored in every row's ``answer_type``: the model picks every correct letter among the choices.
ANSWER_TYPE = "multiple_choice"

log = logging.getLogger(__name__)


# ------------------------------------------------------------------------------------------------ Common-O


@dataclass
class _Input:
    path: Path
    meta: dict
    split: str
    sha256: str


def build_common_o_release(
    pairs_files: list[str | os.PathLike],
    out_dir: str | os.PathLike,
    options: ReleaseOptions = DEFAULT_RELEASE_OPTIONS,
) -> ReleaseResult:
    """Write a Common-O release folder from pairs files (one split per file's meta ``split``)."""
    out_dir = Path(out_dir).expanduser().resolve()
    options = options.named_for(out_dir)
    inputs = _read_inputs(pairs_files)
    seed = _common_seed(inputs)
    config = {
        "kind": "common_o",
        **options.recorded(),
        "answer_type": ANSWER_TYPE,
        "inputs": [
            {
                "file": inp.path.name,
                "sha256": inp.sha256,
                "split": inp.split,
                "count": inp.meta.get("count"),
                "seed": inp.meta.get("seed"),
                "toolkit_version": inp.meta.get("toolkit_version"),
                "config": without_local_paths(inp.meta.get("config", {})),
            }
            for inp in inputs
        ],
    }
    ledger, notes = _licence_check(inputs, options, config)
    write = functools.partial(_write_common_o, inputs=inputs, options=options, seed=seed, config=config, ledger=ledger)
    return build_staged_release(
        out_dir, options, kind="common_o", part_type="split", config=config, seed=seed, write=write, notes=notes
    )


def _write_common_o(
    tmp_dir: Path, *, inputs: list[_Input], options: ReleaseOptions, seed: Any, config: dict, ledger: LicenceLedger
):
    """The splits' shards, the figures and the card of a Common-O release, written into ``tmp_dir``."""
    shards = _SplitShards(
        tmp_dir / "data",
        common_o_features(),
        max_shard_bytes=options.max_shard_bytes,
        progress=options.progress,
        catalog_root=options.catalog_root,
        ledger=ledger,
        workers=check_workers(options.workers),
    )
    for split in dict.fromkeys(inp.split for inp in inputs):
        shards.write_split(split, [inp for inp in inputs if inp.split == split])

    figures = write_common_o_figures(
        dict(shards.rows_by_split), tmp_dir / "figures", seed=seed if isinstance(seed, int) else 0
    )
    summary = shards.summary()
    _mark_unreached_counts(summary, inputs)
    for conflict in card_conflicts(summary, dict(options.card_info)):
        log.warning(conflict)
    splits = shards.splits
    card = render_common_o_card(
        **options.card_fields(),
        splits=splits,
        stats=summary,
        figures=figures,
        features=shards.features,
        seed=seed,
        config=config,
    )
    return StagedRelease(parts=splits, stats=summary, card=card, figures=figures)


class _SplitShards:
    """Streams the pairs rows of each split into parquet shards, keeping per-split statistics and the light
    metadata the figures need (no image bytes); ids must be unique across the whole release."""

    def __init__(
        self,
        data_dir: Path,
        features,
        *,
        max_shard_bytes: int,
        progress: bool,
        catalog_root=None,
        ledger: LicenceLedger | None = None,
        workers: int = 1,
    ) -> None:
        self.data_dir, self.max_shard_bytes, self.progress = data_dir, max_shard_bytes, progress
        # the images' licence, author and source become columns when some image records one (release/licences.py)
        self.ledger = ledger if ledger is not None and ledger.has_columns else None
        self.features = with_credit_columns(features, IMAGE_COLUMNS) if self.ledger else features
        self.catalog_root, self.workers = catalog_root, workers
        self.stats = CommonOStatsAccumulator()
        self.rows_by_split: dict[str, list[dict]] = defaultdict(list)
        self.splits: dict[str, dict] = {}
        self._compact = _CompactRows()
        self._seen_ids: dict[str, str] = {}
        self._first_uses = FirstUses()
        self._credits = ledger

    def summary(self) -> dict:
        """The release statistics (``CommonOStatsAccumulator.summary``), with the images' credits where known."""
        summary = self.stats.summary()
        credits = self._credits.summary() if self._credits is not None else None
        if credits is not None:
            summary["image_credits"] = credits
        return summary

    def write_split(self, split: str, split_inputs: list[_Input]) -> None:
        with ShardWriter(self.data_dir, split, self.features, max_shard_bytes=self.max_shard_bytes) as writer:
            for inp in split_inputs:
                total = inp.meta.get("count") if isinstance(inp.meta.get("count"), int) else None
                located = map(CatalogResolver(inp.path, self.catalog_root).pairs_row, read_jsonl(inp.path))
                # files read, hashed and decoded in worker processes; rows come back in file order
                items = (
                    (row, split, _where(inp.path, number, row), self._first_uses(row))
                    for number, row in enumerate(located, start=1)
                )
                built = ordered_map(published_item, items, setup=CatalogImageReader, workers=self.workers)
                with closing(built):  # an error here stops the worker processes at once
                    label = f"{split}: {inp.path.name}"
                    for (row, _, where, _), record in track(
                        built, label, total=total, unit="rows", disable=not self.progress
                    ):
                        writer.write(self._unique(record, where, row))
                        self.stats.add(split, row)
                        self.rows_by_split[split].append(self._compact.row(row))
        if writer.rows_written == 0:
            raise InputError(
                f"Split {split!r} has no rows ({', '.join(inp.path.name for inp in split_inputs)} empty); "
                "datasets.load_dataset cannot open an empty split.",
                "Sample pairs into the file first (`commonlink pairs --count N`), or leave it out.",
            )
        self.splits[split] = {
            "rows": writer.rows_written,
            "files": [f"data/{s.path.name}" for s in writer.shards],
            "num_bytes": sum(s.data_bytes for s in writer.shards),
            "download_size": sum(s.bytes for s in writer.shards),
        }

    def _unique(self, record: dict, where: str, row: dict) -> dict:
        if record["id"] in self._seen_ids:
            raise SchemaError(
                f"{where}: example id {record['id']!r} is already used by {self._seen_ids[record['id']]}.",
                "Ids must be unique in a release, and `commonlink pairs` numbers them {split}-{index} whatever the "
                "seed: sample one file per split (one `commonlink pairs` run with the total --count), or drop the "
                "duplicate file.",
            )
        self._seen_ids[record["id"]] = where
        if self.ledger is not None:
            for key in IMAGE_COLUMNS:
                record.update(credit_row_fields(self.ledger.credit(row[key]["catalog"], row[key]["id"]), key))
        return record


def _where(path: Path, number: int, row: dict) -> str:
    return f"{path}, row {number}" + (f" (id {row.get('id')})" if row.get("id") else "")


def published_item(reader: CatalogImageReader, item: tuple[dict, str, str, tuple[bool, bool]]) -> dict:
    """:func:`published_row` of one ``(row, split, where, verify)`` (a worker's task; ``reader``: its process's)."""
    row, split, where, verify = item
    return published_row(row, split=split, where=where, reader=reader, verify=verify)


class FirstUses:
    """Which images of a row no earlier row of the build used (by catalog and id): only those are decoded, so an
    image is verified once per build, in whichever worker gets the row of its first use."""

    def __init__(self) -> None:
        self._seen: set[tuple[str, str]] = set()

    def __call__(self, row: dict) -> tuple[bool, bool]:
        return self._first(row.get("image_1")), self._first(row.get("image_2"))

    def _first(self, image: Any) -> bool:
        key = (image.get("catalog"), image.get("id")) if isinstance(image, dict) else None
        if not (key and all(isinstance(part, str) for part in key)):
            return True  # a malformed entry: published_row refuses it anyway
        if key in self._seen:
            return False
        self._seen.add(key)
        return True


@functools.lru_cache(maxsize=1 << 16)
def _json_list(items: tuple[str, ...]) -> str:
    return json.dumps(list(items), ensure_ascii=False)


def published_row(
    row: dict,
    *,
    split: str,
    where: str,
    reader: CatalogImageReader | None = None,
    verify: tuple[bool, bool] = (True, True),
) -> dict:
    """One pairs-file row -> one parquet row (published Common-O columns + provenance), images as file bytes.

    Pass one ``reader`` for a whole build: it resolves each catalog folder once instead of once a file.
    ``verify``: whether to decode each image (False: an earlier row of the build, in another process, did).
    """
    for key in ("id", "image_1", "image_2", "choices", "ground_truth", "answer", "question", "source"):
        if key not in row:
            raise SchemaError(f"{where}: missing field {key!r}.", "Regenerate the pairs file with `commonlink pairs`.")
    if row.get("split") not in (None, split):
        raise SchemaError(
            f"{where}: row split {row['split']!r} differs from the file's split {split!r} (meta).",
            "Regenerate the pairs file.",
        )
    choices, truth = row["choices"], row["ground_truth"]
    if not isinstance(choices, list) or not choices or not all(isinstance(c, str) and c for c in choices):
        raise SchemaError(f"{where}: 'choices' must be a non-empty list of names.")
    position = {c: i for i, c in enumerate(choices)}
    if len(position) != len(choices):
        raise SchemaError(f"{where}: 'choices' repeats a name ({choices}).")
    if not isinstance(truth, list) or not truth or any(t not in position for t in truth):
        raise SchemaError(f"{where}: ground truth {truth} not among the choices.", "Regenerate the pairs file.")
    labels = letters(len(choices))
    expected = {labels[position[t]] for t in truth}
    given = {part.strip() for part in str(row["answer"]).split(",")}
    if given != expected:
        raise SchemaError(
            f"{where}: answer {row['answer']!r} does not match the ground truth letters "
            f"{', '.join(sorted(expected))!r}.",
            "Regenerate the pairs file; answer and ground_truth must agree.",
        )
    if row["source"] not in ("real", "synthetic"):
        raise SchemaError(f"{where}: source must be 'real' or 'synthetic', got {row['source']!r}.")
    check_row_types(row, where)
    reader = reader or CatalogImageReader()
    images, objects = [], []
    for key, decode in zip(("image_1", "image_2"), verify):
        image = row[key]
        record = checked_image_record(image, key=key, source=row["source"], where=where, reader=reader)
        data = reader.read(image["catalog"], image["path"], what=f"{where}: {key}")
        if sha256_bytes(data) != record.sha256:
            # The labels in the pairs row describe the image that was sampled; publishing other pixels under
            # them would publish wrong ground truth.
            raise SchemaError(
                f"{where}: {key} file {image['path']} in {image['catalog']} changed after the pairs were sampled "
                "(sha256 differs).",
                "Restore the original image, or rebuild the catalog and sample the pairs again.",
            )
        if decode:
            reader.verify_image(data, record, what=f"{where}: {key} file {image['path']} in {image['catalog']}")
        images.append({"bytes": data, "path": os.path.basename(image["path"])})
        objects.append(image["objects"])
    common = [t for t in truth if t != NO_COMMON_OBJECTS]
    return {
        "image_1": images[0],
        "image_2": images[1],
        "question": str(row["question"]),
        "answer": str(row["answer"]),
        "objects_1": _json_list(tuple(objects[0])),
        "objects_2": _json_list(tuple(objects[1])),
        "num_objects_image_1": len(objects[0]),
        "num_objects_image_2": len(objects[1]),
        "question_template": str(row.get("question_template") or ""),
        "answer_type": ANSWER_TYPE,
        "choices": _json_list(tuple(choices)),
        "num_choices": len(choices),
        "num_ground_truth_objects": len(common),
        "real_or_synthetic": row["source"],
        "ground_truth_objects": _json_list(tuple(truth)),
        "id": str(row["id"]),
        "image_1_id": _str_or_none(row["image_1"].get("id")),
        "image_2_id": _str_or_none(row["image_2"].get("id")),
        "scene_1_id": _str_or_none(row["image_1"].get("scene_id")),
        "scene_2_id": _str_or_none(row["image_2"].get("scene_id")),
        "view_1": _str_or_none(row["image_1"].get("view")),
        "view_2": _str_or_none(row["image_2"].get("view")),
    }


def check_row_types(row: dict, where: str) -> None:
    """The row's own fields have the types the published schema needs (never ``None`` stored as ``"None"``)."""
    for key in ("id", "question", "answer"):
        if not isinstance(row[key], str) or not row[key]:
            raise SchemaError(
                f"{where}: {key!r} must be a non-empty string, got {row[key]!r}.",
                "Regenerate the pairs file with `commonlink pairs`.",
            )
    if row.get("question_template") is not None and not isinstance(row["question_template"], str):
        raise SchemaError(
            f"{where}: 'question_template' must be a string, got {row['question_template']!r}.",
            "Regenerate the pairs file.",
        )


def checked_image_record(image: Any, *, key: str, source: str, where: str, reader: CatalogImageReader) -> CatalogRecord:
    """The catalog record an ``image_N`` entry names, after checking that the entry agrees with it (id, path,
    objects, sha256, size, source): the release publishes the entry's labels as ground truth."""
    fix = "Sample the pairs again from the current catalog (`commonlink pairs ... --overwrite`)."
    if not isinstance(image, dict) or not image.get("catalog") or not image.get("path"):
        raise SchemaError(f"{where}: {key} needs 'catalog' and 'path'.", "Regenerate the pairs file.")
    for field_name in ("catalog", "path", "id"):
        if not isinstance(image.get(field_name), str) or not image[field_name]:
            raise SchemaError(
                f"{where}: {key} {field_name!r} must be a non-empty string, got {image.get(field_name)!r}.", fix
            )
    objects = image.get("objects")
    if not isinstance(objects, list) or not all(isinstance(o, str) and o for o in objects):
        raise SchemaError(f"{where}: {key} 'objects' must be a list of object names, got {objects!r}.", fix)
    record = reader.record(image["catalog"], image["id"], what=f"{where}: {key}")
    if record.path != image["path"]:
        raise SchemaError(
            f"{where}: {key} path {image['path']!r} is not the path {record.path!r} the catalog records for id "
            f"{record.id!r}.",
            fix,
        )
    if sorted(objects) != sorted(record.objects):
        raise SchemaError(
            f"{where}: {key} objects {objects} differ from the catalog record of {record.id!r} ({record.objects}).", fix
        )
    for field_name, expected in (("sha256", record.sha256), ("width", record.width), ("height", record.height)):
        if image.get(field_name) is not None and image[field_name] != expected:
            raise SchemaError(
                f"{where}: {key} {field_name} {image[field_name]!r} differs from the catalog record ({expected!r}).",
                fix,
            )
    if record.source != source:
        raise SchemaError(
            f"{where}: {key} is a {record.source} image in its catalog, but the row says {source!r}.", fix
        )
    return record


# ------------------------------------------------------------------------------------------------ internals


def _licence_check(inputs: list[_Input], options: ReleaseOptions, config: dict) -> tuple[LicenceLedger, list[str]]:
    """The credits of every image the pairs files name, checked against the release licence (release/licences.py)
    before a row is written, and the build's notes; records their digest in ``config`` (the build key) where some
    image has one. Malformed rows are skipped here and refused by the build."""
    ledger = _licence_ledger(inputs, options.catalog_root)
    if ledger.digest():  # only when some image records a credit: other builds keep their key
        config["image_credits"] = ledger.digest()
    return ledger, ledger.check(options.license, options.licence_check)


def _licence_ledger(inputs: list[_Input], catalog_root) -> LicenceLedger:
    ledger, reader = LicenceLedger(), CatalogImageReader()
    for inp in inputs:
        resolver = CatalogResolver(inp.path, catalog_root)
        for number, row in enumerate(map(resolver.pairs_row, read_jsonl(inp.path)), start=1):
            for key in IMAGE_COLUMNS:
                image = row.get(key)
                if (
                    isinstance(image, dict)
                    and isinstance(image.get("catalog"), str)
                    and isinstance(image.get("id"), str)
                ):
                    what = f"{inp.path}, row {number}: {key}"
                    ledger.add(image["catalog"], reader.record(image["catalog"], image["id"], what=what))
    return ledger


def _mark_unreached_counts(summary: dict, inputs: list[_Input]) -> None:
    """Per split, the numbers of common objects 0..K (K from the pairs files' options) that no row has: the card
    says so, so that a split that could not reach them never passes for one that did."""
    for split, info in summary["splits"].items():
        k_max = max(
            (int(inp.meta.get("config", {}).get("max_common") or 0) for inp in inputs if inp.split == split), default=0
        )
        histogram = (info.get("common_objects_per_example") or {}).get("histogram") or {}
        info["max_common"] = k_max
        info["common_objects_missing"] = [k for k in range(k_max + 1) if not histogram.get(str(k))]


def _read_inputs(pairs_files: list[str | os.PathLike]) -> list[_Input]:
    inputs = []
    seen = set()
    for raw in pairs_files:
        path = Path(raw).expanduser().resolve()
        if path in seen:
            raise InputError(f"{path} is given twice.", "Pass each pairs file once.")
        seen.add(path)
        meta = read_meta(path)
        if meta["kind"] != COMMON_O_PAIRS_KIND:
            raise InputError(
                f"{path} is a {meta['kind']!r} file, not Common-O pairs.", "Pass files written by `commonlink pairs`."
            )
        split = str(meta.get("split") or "")
        if not re.fullmatch(r"\w+", split):
            raise SchemaError(
                f"{meta_path(path)}: split {split!r} is not a valid split name (letters, digits, '_').",
                "Regenerate the pairs with `commonlink pairs --split NAME`.",
            )
        inputs.append(_Input(path=path, meta=meta, split=split, sha256=verify_data_file(path, meta)))
    return inputs


def _common_seed(inputs: list[_Input]) -> Any:
    """The inputs' seed, or {input file name: seed} when they differ (names only: the card gets published)."""
    names = [inp.path.name for inp in inputs]
    if len(set(names)) < len(names):
        names = [f"{inp.path.parent.name}/{inp.path.name}" for inp in inputs]
    if len(set(names)) < len(names):
        names = [f"{i + 1}: {name}" for i, name in enumerate(names)]
    seeds = {name: inp.meta.get("seed") for name, inp in zip(names, inputs)}
    distinct = {json.dumps(s) for s in seeds.values()}
    return next(iter(seeds.values())) if len(distinct) == 1 else seeds


class _CompactRows:
    """Pairs rows as the figures need them, held for the whole build: no question text, one shared dict per
    distinct image and one string object per distinct name, so memory grows slowly with the number of rows."""

    _IMAGE_KEYS = ("catalog", "id", "path", "source", "scene_id", "view", "background", "objects", "object_area")

    def __init__(self) -> None:
        self._strings: dict[str, str] = {}
        self._images: dict[tuple, dict] = {}

    def _name(self, text: Any) -> Any:
        return self._strings.setdefault(text, text) if isinstance(text, str) else text

    def _image(self, image: dict) -> dict:
        key = (image.get("catalog"), image.get("id") or image.get("path"))
        shared = self._images.get(key)
        if shared is None:
            shared = {k: self._name(image[k]) for k in self._IMAGE_KEYS if k in image and k != "objects"}
            shared["objects"] = [self._name(o) for o in image.get("objects") or []]
            self._images[key] = shared
        return shared

    def row(self, row: dict) -> dict:
        return {
            "id": row["id"],
            "split": self._name(row.get("split")),
            "source": self._name(row["source"]),
            "image_1": self._image(row["image_1"]),
            "image_2": self._image(row["image_2"]),
            "choices": [self._name(c) for c in row["choices"]],
            "ground_truth": [self._name(t) for t in row["ground_truth"]],
            "answer": self._name(row["answer"]),
        }


def _str_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


__all__ = [
    "ANSWER_TYPE",
    "CatalogImageReader",
    "CommonOStatsAccumulator",
    "FirstUses",
    "build_common_o_release",
    "check_row_types",
    "checked_image_record",
    "published_item",
    "published_row",
]
