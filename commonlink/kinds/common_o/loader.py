"""Read Common-O splits — our release folders and the published ``facebook/Common-O`` — as typed examples.

One loader serves both because our releases use the published columns and types (docs/formats.md). The
published list columns (``choices``, ``ground_truth_objects``, ``objects_1``, ``objects_2``) are *strings*
whose encoding is not documented: :mod:`commonlink.kinds.common_o.loader_lists` reads every plausible encoding
(JSON, Python literal, the paper's bracketed unquoted form, comma-separated, lettered), takes ground truth
as names or letters, cross-checks each row with ``answer``, ``num_choices``, ``num_ground_truth_objects`` and
the question, and raises :class:`SchemaError` naming the row, the field and the value when a row is
ambiguous or contradicts itself.

Sources:

* a local folder (a release folder, or any folder of parquet shards) or a single ``.parquet`` file: read
  directly with pyarrow, one row group in memory at a time (no copy into the ``datasets`` cache);
* a Hub repo id (``owner/name``): ``datasets.load_dataset(repo, split=..., revision=...)``.

Images are decoded with :func:`commonlink.images.open_image` (pixel cap, clear errors), never by ``datasets``.

    >>> for ex in load_common_o("facebook/Common-O", "main"):
    ...     ex.image_1, ex.choices, ex.ground_truth
"""

from __future__ import annotations

import bisect
import glob
import hashlib
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from commonlink.errors import InputError, SchemaError, check_at_least
from commonlink.fileio import memoised_by_file_stats, safe_join
from commonlink.formats.card import read_card_metadata
from commonlink.images import load_opened_image, open_image_lazily
from commonlink.kinds.common_o.example import CommonOExample
from commonlink.kinds.common_o.format import (
    PROVENANCE_COLUMNS,
    REQUIRED_COLUMNS,
    common_o_question,
)
from commonlink.kinds.common_o.loader_batch import decode_batch_lists
from commonlink.kinds.common_o.loader_lists import decode_row_lists, parse_list_field
from commonlink.loaders.hub_ids import require_hub_dataset

__all__ = ["CommonOSplit", "load_common_o", "open_common_o", "parse_list_field"]

#: ``CommonOSplit._example`` without ``lists``: the row's list fields are not read yet.
_UNREAD = object()

# ------------------------------------------------------------------------------------------------ row sources


class _ParquetRows:
    """Random and sequential access to the rows of local parquet files, one row group in memory at a time."""

    def __init__(self, files: list[Path], root: Path):
        import pyarrow.parquet as pq

        self.files = files
        self.root = root
        self._index: list[tuple[int, int, int, int]] = []  # (file index, row group, first global row, rows)
        start = 0
        self.columns: list[str] | None = None
        for file_idx, path in enumerate(files):
            try:
                meta = pq.ParquetFile(path).metadata
                names = pq.read_schema(path).names
            except Exception as exc:  # pyarrow raises several types for broken files
                raise InputError(
                    f"{path}: not a readable parquet file ({exc}).", "Rebuild or re-download the file."
                ) from exc
            if self.columns is None:
                self.columns = names
            elif names != self.columns:
                raise SchemaError(
                    f"{path}: columns {names} differ from those of {files[0].name} ({self.columns}).",
                    "All shards of one split must have the same columns; rebuild the release.",
                )
            for rg in range(meta.num_row_groups):
                n = meta.row_group(rg).num_rows
                self._index.append((file_idx, rg, start, n))
                start += n
        self._len = start
        self._starts = [entry[2] for entry in self._index]
        # the row group last read, per kind of read: whole rows, or text only (no image columns)
        self._cached: dict[bool, tuple[int, list[dict]]] = {}
        self._text_columns = [c for c in self.columns or [] if c not in _IMAGE_COLUMNS]

    def __len__(self) -> int:
        return self._len

    def _group(self, group: int, images: bool = True) -> list[dict]:
        import pyarrow.parquet as pq

        cached = self._cached.get(images)
        whole = self._cached.get(True)
        if not images and whole is not None and whole[0] == group:  # the whole rows are at hand: no second read
            return whole[1]
        if cached is None or cached[0] != group:
            file_idx, rg, _, _ = self._index[group]
            columns = None if images else self._text_columns  # the image bytes are most of a row group
            table = pq.ParquetFile(self.files[file_idx]).read_row_group(rg, columns=columns)
            self._cached[images] = cached = (group, table.to_pylist())
        return cached[1]

    def row(self, i: int, images: bool = True) -> dict:
        """Row ``i``; ``images=False`` leaves the image columns out (not read from the file at all)."""
        group = bisect.bisect_right(self._starts, i) - 1
        return self._group(group, images)[i - self._index[group][2]]

    def iter_batches(self, batch_size: int, *, text_only: bool = False) -> Iterator[list[dict]]:
        """The rows in order, ``batch_size`` at a time, streamed (one batch in memory, not a whole row group: a
        row group of images is tens of MB, and reading it whole is slower too); ``text_only``: no image columns."""
        import pyarrow.parquet as pq

        columns = self._text_columns if text_only else None
        for path in self.files:
            # memory-mapped: the image bytes go from the page cache into the batch without a read buffer between
            for batch in pq.ParquetFile(path, memory_map=True).iter_batches(
                batch_size=batch_size, columns=columns, use_threads=False
            ):
                yield _batch_rows(batch.to_pydict())

    def fingerprint(self) -> str:
        return memoised_by_file_stats("data-fingerprints.json", list(self.files), self._hash_files)

    def _hash_files(self) -> str:
        digest = hashlib.sha256()
        for path in self.files:
            digest.update(
                path.relative_to(self.root).as_posix().encode()
                if path.is_relative_to(self.root)
                else path.name.encode()
            )
            with open(path, "rb") as handle:
                while chunk := handle.read(1 << 20):
                    digest.update(chunk)
        return digest.hexdigest()[:32]


class _DatasetRows:
    """Rows of a ``datasets.Dataset`` with image columns left undecoded (we decode with the pixel cap)."""

    def __init__(self, dataset):
        from datasets import Image

        for name, feature in dataset.features.items():
            if isinstance(feature, Image):
                dataset = dataset.cast_column(name, Image(decode=False))
        self.dataset = dataset
        self.columns = list(dataset.column_names)

    def __len__(self) -> int:
        return len(self.dataset)

    def row(self, i: int) -> dict:
        return self.dataset[i]

    def iter_batches(self, batch_size: int) -> Iterator[list[dict]]:
        for batch in self.dataset.iter(batch_size=batch_size):
            yield _batch_rows(batch)

    def fingerprint(self) -> str:
        return str(self.dataset._fingerprint)


# ---------------------------------------------------------------------------------------------------- the split


class CommonOSplit:
    """One split of a Common-O dataset: ``len(split)``, ``split.get(i)``, ``for example in split``.

    ``source_name`` is the folder, file or repo id it was opened from; ``revision`` the Hub revision asked for
    (``None`` for local data); ``fingerprint`` a stable hash of the data (file contents for local data, the
    ``datasets`` fingerprint for Hub data) that eval uses to key its prediction cache.
    """

    def __init__(
        self,
        rows: _ParquetRows | _DatasetRows,
        *,
        split: str,
        source_name: str,
        revision: str | None,
        root: Path | None = None,
    ):
        self._rows = rows
        self.split = split
        self.source_name = source_name
        self.revision = revision
        self._root = root
        self._fingerprint: str | None = None
        missing = [c for c in REQUIRED_COLUMNS if c not in (rows.columns or [])]
        if missing and len(rows):
            raise SchemaError(
                f"{source_name} (split {split!r}) lacks the column(s) {', '.join(missing)}; it has {rows.columns}.",
                "Point to a Common-O dataset (published facebook/Common-O or a `commonlink release build` folder).",
            )

    @property
    def fingerprint(self) -> str:
        if self._fingerprint is None:
            self._fingerprint = self._rows.fingerprint()
        return self._fingerprint

    @property
    def columns(self) -> list[str]:
        return list(self._rows.columns or [])

    def __len__(self) -> int:
        return len(self._rows)

    def __repr__(self) -> str:
        return f"CommonOSplit({self.source_name!r}, split={self.split!r}, rows={len(self)})"

    def get(self, i: int, *, images: bool = True) -> CommonOExample:
        """Row ``i`` as a typed example; ``images=False`` skips decoding (``image_1``/``image_2`` are None), for
        callers that only need the text fields (e.g. an eval resuming from its cache)."""
        if not 0 <= i < len(self):
            raise IndexError(f"row {i} out of range for split {self.split!r} with {len(self)} rows")
        text_only = not images and isinstance(self._rows, _ParquetRows)
        row = self._rows.row(i, images=False) if text_only else self._rows.row(i)
        return self._example(i, row, images=images)

    def __getitem__(self, i: int) -> CommonOExample:
        return self.get(i)

    def __iter__(self) -> Iterator[CommonOExample]:
        """Every row in order, as :meth:`iter_batches` reads them (same examples, same errors at the same row)."""
        yield from self._examples(_READ_BATCH, images=True)

    def iter_batches(self, batch_size: int = 64, *, images: bool = True) -> Iterator[list[CommonOExample]]:
        """Every row in order, ``batch_size`` examples at a time (the last batch may be shorter); ``images=False``
        leaves the image columns unread (``image_1``/``image_2`` are None).

        Rows are streamed ``batch_size`` at a time from the files; each batch's list fields are read and
        cross-checked at once (:func:`~commonlink.kinds.common_o.loader_batch.decode_batch_lists`) and its images
        opened (format, pixel cap) and decoded. A batch holding a row that fails a check raises that row's
        error (the same :class:`SchemaError` / :class:`InputError` as :meth:`get`) instead of being returned."""
        check_at_least("batch_size", batch_size, 1, "e.g. batch_size=64.")  # now, not at the first next()
        return self._batched(batch_size, images)

    def _batched(self, batch_size: int, images: bool) -> Iterator[list[CommonOExample]]:
        batch: list[CommonOExample] = []
        for example in self._examples(batch_size, images=images):
            batch.append(example)
            if len(batch) == batch_size:
                yield batch
                batch = []
        if batch:
            yield batch

    def _examples(self, batch_size: int, *, images: bool) -> Iterator[CommonOExample]:
        """The examples in order, read ``batch_size`` rows at a time: each batch's list fields read at once (the
        fast path leaves any row it does not take, and every failing row, to the per-row path), each row's images
        opened and decoded in its turn, on this thread, so every row's error is raised in its turn.

        Decoding here rather than on a worker thread a few rows ahead is measured (benchmarks/bench_loaders.py, 2
        cores): the worker overlapped little (Pillow holds the GIL for most of opening and loading a PNG, and a
        thread that wants the GIL back waits out the switch interval) and cost about 10% more CPU."""
        if not images and isinstance(self._rows, _ParquetRows):
            batches = self._rows.iter_batches(batch_size, text_only=True)  # the image bytes are not read at all
        else:
            batches = self._rows.iter_batches(batch_size)
        start = 0
        for rows in batches:
            for k, (row, lists) in enumerate(zip(rows, decode_batch_lists(rows))):
                yield self._example(start + k, row, images=images, lists=lists)
            start += len(rows)

    def raw_row(self, i: int) -> dict:
        """Row ``i`` as stored (image columns as ``{"bytes", "path"}``), for tools that re-export data."""
        return self._rows.row(i)

    def parquet_files(self) -> list[Path]:
        """The parquet shards the split is read from, in row order (none for a split read through ``datasets``):
        for tools that re-export the rows as stored, a row group at a time."""
        return list(self._rows.files) if isinstance(self._rows, _ParquetRows) else []

    # -- decoding

    def _example(self, i: int, row: dict, *, images: bool = True, lists: Any = _UNREAD) -> CommonOExample:
        """Row ``i`` as an example; ``lists``: its list fields as the fast path read them (None: a row it does not
        take; left out: read here, the fast path first)."""
        if lists is _UNREAD:
            lists = decode_batch_lists([row])[0]
        if lists is None:  # not a row the fast path takes: the per-row path gives its result or its error
            lists = decode_row_lists(row, row_label=f"{i} of {self.source_name}")
        source = str(row.get("real_or_synthetic") or "").strip().lower()
        question = row.get("question")
        has_question = isinstance(question, str) and bool(question.strip())
        extra = {k: row[k] for k in PROVENANCE_COLUMNS if k in row and k != "id" and row[k] is not None}
        for key in ("answer", "question_template", "answer_type"):
            if row.get(key) is not None:
                extra[key] = row[key]
        extra.update(
            list_encodings=lists.encodings, ground_truth_as=lists.ground_truth_as, answer_checked=lists.answer_checked
        )
        if lists.notes:
            extra["list_notes"] = lists.notes
        if images:
            image_1, image_2 = _load_pair(self._open_pair(row, i))
        else:
            image_1 = image_2 = None
        return CommonOExample(
            id=str(row["id"]) if row.get("id") else f"{self.split}-{i}",
            image_1=image_1,
            image_2=image_2,
            choices=lists.choices,
            ground_truth=lists.ground_truth,
            answer_letters=lists.answer_letters,
            question=question if has_question else common_o_question(lists.choices),
            question_source="dataset" if has_question else "built",
            source=source,
            objects_1=lists.objects_1,
            objects_2=lists.objects_2,
            num_objects_image_1=_int_or(row.get("num_objects_image_1"), len(lists.objects_1)),
            num_objects_image_2=_int_or(row.get("num_objects_image_2"), len(lists.objects_2)),
            split=self.split,
            row_index=i,
            extra=extra,
        )

    def _open_pair(self, row: dict, i: int) -> list | InputError:
        """Both images of a row opened (header checked, pixels not decoded), or the error to raise for the row."""
        try:
            return [self._open_image(row, i, "image_1"), self._open_image(row, i, "image_2")]
        except InputError as exc:
            return exc

    def _open_image(self, row: dict, i: int, field: str):
        value = row.get(field)
        what = f"{self.source_name} split {self.split!r} row {i}, field {field!r}"
        if isinstance(value, dict):
            data, path = value.get("bytes"), value.get("path")
        elif isinstance(value, (bytes, bytearray)):
            data, path = bytes(value), None
        else:
            data, path = None, None
        if data:
            return open_image_lazily(bytes(data), what=what)
        if path and self._root is not None:
            try:
                local = safe_join(self._root, path)
            except InputError:
                # A row must not make us read files outside its release (e.g. an absolute path to a private image).
                raise InputError(
                    f"{what}: the image has no bytes and its path {path!r} points outside the release; not read.",
                    "Rebuild the release; images must be embedded as bytes.",
                ) from None
            return open_image_lazily(local, what=what)
        raise InputError(
            f"{what}: no image bytes in the row.", "Rebuild the release; images must be embedded as bytes."
        )


#: The columns holding the two images (left unread when only the text fields are wanted).
_IMAGE_COLUMNS = frozenset({"image_1", "image_2"})
#: Rows read from the files at a time when iterating row by row.
_READ_BATCH = 64


def _load_pair(opened: list | InputError) -> list:
    """Decode both images opened by ``CommonOSplit._open_pair`` (or raise its error, in the row's turn)."""
    if isinstance(opened, InputError):
        raise opened
    return [load_opened_image(img, label) for img, label in opened]


def _batch_rows(columns: dict[str, list]) -> list[dict]:
    """A batch given as columns (``{name: values}``) as a list of row dicts."""
    keys = list(columns)
    return [dict(zip(keys, values)) for values in zip(*columns.values())]


def _int_or(value: Any, default: int) -> int:
    try:
        return int(value) if value is not None else default
    except (TypeError, ValueError):
        return default


# ------------------------------------------------------------------------------------------------ opening data


class _RowList:
    """Rows already in memory (one row handed over by an evaluation harness)."""

    def __init__(self, rows: list[dict]):
        self._rows = rows
        self.columns = list(rows[0]) if rows else []

    def __len__(self) -> int:
        return len(self._rows)

    def row(self, i: int) -> dict:
        return self._rows[i]

    def iter_batches(self, batch_size: int) -> Iterator[list[dict]]:
        for start in range(0, len(self._rows), batch_size):
            yield self._rows[start : start + batch_size]

    def fingerprint(self) -> str:
        return "rows"


def example_from_row(row: dict, index: int = 0, *, split: str = "main", images: bool = True) -> CommonOExample:
    """Decode one row of the published schema as given by ``datasets`` (what lmms-eval and VLMEvalKit hand their
    task code): the same checks and decoding as :func:`open_common_o`. ``images=False`` for rows without pixels."""
    if not images:  # harnesses drop the image columns from the rows they score
        row = {"image_1": None, "image_2": None, **row}
    return CommonOSplit(_RowList([row]), split=split, source_name="row", revision=None)._example(
        index, row, images=images
    )


def open_common_o(path_or_repo_id: str | os.PathLike, split: str, revision: str | None = None) -> CommonOSplit:
    """Open one split of a local folder / parquet file, or of a Hub dataset repo (``owner/name``)."""
    path = Path(path_or_repo_id).expanduser()
    if path.exists():
        if revision is not None:
            raise InputError(
                f"--revision {revision!r} was given for the local path {path}; revisions apply to Hub repos only.",
                "Drop the revision, or check out that version of the folder.",
            )
        files, root = _local_split_files(path, split)
        return CommonOSplit(_ParquetRows(files, root), split=split, source_name=str(path), revision=None, root=root)
    text = str(path_or_repo_id)
    if not re.fullmatch(r"[\w.\-]+(/[\w.\-]+)?", text):
        raise InputError(
            f"{text!r} is neither an existing folder/file nor a Hub dataset id.",
            "Give a release folder, a .parquet file, or a repo id like facebook/Common-O.",
        )
    require_hub_dataset(text, revision)  # at once, instead of ~25 s of download retries ending in a ConnectionError
    return _open_hub(text, split, revision)


def load_common_o(
    path_or_repo_id: str | os.PathLike, split: str, revision: str | None = None
) -> Iterator[CommonOExample]:
    """Yield the examples of one split (see :func:`open_common_o`)."""
    yield from open_common_o(path_or_repo_id, split, revision)


def _open_hub(repo_id: str, split: str, revision: str | None) -> CommonOSplit:
    import datasets

    try:
        dataset = datasets.load_dataset(repo_id, split=split, revision=revision)
    except ValueError as exc:
        if "split" in str(exc).lower():
            raise InputError(
                f"{repo_id}: no split {split!r} ({exc}).", "Pick one of the splits the error lists."
            ) from exc
        raise
    except FileNotFoundError as exc:  # datasets' DatasetNotFoundError, also raised for an unknown revision
        if revision is not None and "revision" in str(exc).lower():
            raise InputError(
                f"{repo_id}: revision {revision!r} not found ({exc}).",
                "List the versions with `commonlink release versions REPO`.",
            ) from exc
        raise InputError(
            f"{repo_id}: dataset not found ({exc}).", "Check the repo id, your token and HF_ENDPOINT."
        ) from exc
    except OSError as exc:  # huggingface_hub's RevisionNotFoundError and other HTTP errors
        if type(exc).__name__ == "RevisionNotFoundError":
            raise InputError(
                f"{repo_id}: revision {revision!r} not found.",
                "List the versions with `commonlink release versions REPO`.",
            ) from exc
        raise
    return CommonOSplit(_DatasetRows(dataset), split=split, source_name=repo_id, revision=revision)


def _local_split_files(path: Path, split: str) -> tuple[list[Path], Path]:
    """The parquet files of ``split`` under ``path`` (card ``configs`` first, then the usual file naming)."""
    if path.is_file():
        if path.suffix != ".parquet":
            raise InputError(f"{path} is not a .parquet file.", "Give a release folder or a parquet file.")
        return [path], path.parent
    root = path
    files = _files_from_card(root, split)
    if files is None:
        patterns = [
            f"data/{split}-*.parquet",
            f"data/{split}.parquet",
            f"{split}-*.parquet",
            f"{split}.parquet",
            f"{split}/*.parquet",
            f"*/{split}-*.parquet",
            f"**/{split}/*.parquet",
        ]
        files = []
        for pattern in patterns:
            files = sorted(Path(p) for p in glob.glob(str(root / pattern), recursive=True))
            if files:
                break
    files = [f for f in files if not f.name.startswith(".")]
    if not files:
        available = sorted(_splits_in(root))
        raise InputError(
            f"{root}: no parquet files for split {split!r}"
            + (f" (splits found: {', '.join(available)})." if available else "."),
            "Pick an existing split, or build one with `commonlink release build`.",
        )
    return files, root


def _files_from_card(root: Path, split: str) -> list[Path] | None:
    """Files named by the README ``configs`` block for ``split`` (default config), or None without a block."""
    readme = root / "README.md"
    if not readme.is_file():
        return None

    metadata = read_card_metadata(readme.read_text(encoding="utf-8"))
    configs = metadata.get("configs") if isinstance(metadata, dict) else None
    if not isinstance(configs, list) or not configs:
        return None
    config = next((c for c in configs if isinstance(c, dict) and c.get("config_name", "default") == "default"), None)
    if config is None:
        config = configs[0] if isinstance(configs[0], dict) else None
    data_files = (config or {}).get("data_files")
    if not isinstance(data_files, list):
        return None
    for entry in data_files:
        if isinstance(entry, dict) and entry.get("split") == split:
            patterns = entry.get("path")
            patterns = [patterns] if isinstance(patterns, str) else list(patterns or [])
            files: list[Path] = []
            for pattern in patterns:
                files.extend(Path(p) for p in glob.glob(str(root / pattern), recursive=True))
            return sorted(set(files))
    return []


def _splits_in(root: Path) -> set[str]:
    names = set()
    for p in root.rglob("*.parquet"):
        if p.name.startswith("."):
            continue
        match = re.match(r"(.+?)-\d{5}-of-\d{5}\.parquet$", p.name)
        names.add(match.group(1) if match else p.stem)
    return names
