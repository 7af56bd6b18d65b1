"""Streaming, size-capped parquet shards named the way ``datasets.push_to_hub`` names them.

Rows go in one at a time and leave in row groups of modest size, so memory stays flat however many rows a
split has (only the current row group is held). A new shard starts when the next row would push the current
one past ``max_shard_bytes``. Shards are written under hidden temporary names and renamed to their final
``{prefix}-{i:05d}-of-{n:05d}.parquet`` names on :meth:`ShardWriter.close`, when ``n`` is known; an error or
:meth:`ShardWriter.abort` removes the temporary files, so a folder never holds a half-written split.

The parquet schema carries the ``datasets`` features in its ``huggingface`` metadata key, so
``datasets.load_dataset`` reads the exact feature types back (``Image()`` columns decode to PIL)::

    features = Features({"image": Image(), "label": Value("string")})
    with ShardWriter(out_dir / "data", "main", features, max_shard_bytes=500 * 2**20) as writer:
        for path, label in items:
            writer.write({"image": path, "label": label})   # Image values: bytes, a file path, or {bytes, path}
    writer.shards   # [ShardInfo(path=.../data/main-00000-of-00002.parquet, rows=..., bytes=...), ...]
"""

from __future__ import annotations

import contextlib
import operator
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from commonlink.errors import InputError, SchemaError

DEFAULT_MAX_SHARD_BYTES = 500 * 1024 * 1024
#: A row group ends at this many rows or this many payload bytes, whichever comes first: a few big photos make a
#: small group (readers fetch little for one row), many small images share one (per-group costs stay low).
DEFAULT_ROW_GROUP_ROWS = 1000
DEFAULT_ROW_GROUP_BYTES = 32 * 1024 * 1024
#: String columns worth dictionary-encoding (few distinct values); other strings are written plain.
DICTIONARY_STRING_COLUMNS = frozenset(
    {"question_template", "answer_type", "real_or_synthetic", "split", "source", "concept", "concept_kind"}
)

_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?i?B?)?\s*$", re.I)
_UNITS = {
    "": 1,
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "KIB": 2**10,
    "MIB": 2**20,
    "GIB": 2**30,
    "TIB": 2**40,
}


def parse_size(text: str | int, *, option: str = "--max-shard-size") -> int:
    """``"500MB"`` -> 500_000_000, ``"64KiB"`` -> 65_536, ``1000`` -> 1000 (bytes)."""
    if isinstance(text, int):
        value = text
    else:
        match = _SIZE_RE.match(str(text))
        unit = (match.group(2) or "").upper() if match else ""
        if unit and not unit.endswith("B"):
            unit += "B"
        if not match or unit not in _UNITS:
            raise InputError(
                f"{option} {text!r} is not a size.", f"Write a number with an optional unit, e.g. {option} 500MB."
            )
        value = int(float(match.group(1)) * _UNITS[unit])
    if value <= 0:
        raise InputError(f"{option} must be positive, got {text!r}.", f"e.g. {option} 500MB.")
    return value


def shard_name(prefix: str, index: int, count: int) -> str:
    """``main-00003-of-00011.parquet`` (the ``datasets.push_to_hub`` naming)."""
    return f"{prefix}-{index:05d}-of-{count:05d}.parquet"


def existing_shards(out_dir: str | os.PathLike, prefix: str) -> list[Path]:
    """Final-named shards of ``prefix`` already in ``out_dir``."""
    pattern = re.compile(rf"^{re.escape(prefix)}-\d{{5}}-of-\d{{5}}\.parquet$")
    folder = Path(out_dir)
    return sorted(p for p in folder.iterdir() if pattern.match(p.name)) if folder.is_dir() else []


@dataclass
class ShardInfo:
    path: Path  #: final path (after close)
    rows: int
    bytes: int  #: size of the parquet file on disk
    data_bytes: int  #: uncompressed payload estimate (what the ``dataset_info`` ``num_bytes`` reports)


class ShardWriter:
    """Write rows of one split into size-capped parquet shards (see the module docstring).

    ``out_dir``: folder of the shards (e.g. ``RELEASE_DIR/data``); ``prefix``: the split name;
    ``features``: a ``datasets.Features`` (column order and types; rows must have exactly these keys);
    ``max_shard_bytes``: cap on a shard's payload (a single larger row still gets its own shard);
    ``overwrite``: replace final shards of the same prefix already in ``out_dir`` (refused otherwise);
    ``compression``: codec of every column but the image bytes, which get ``image_compression`` (default none:
    JPEG/PNG bytes are compressed already).
    """

    def __init__(
        self,
        out_dir: str | os.PathLike,
        prefix: str,
        features: Any,
        *,
        max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES,
        row_group_rows: int = DEFAULT_ROW_GROUP_ROWS,
        row_group_bytes: int = DEFAULT_ROW_GROUP_BYTES,
        compression: str = "snappy",
        image_compression: str = "none",
        overwrite: bool = False,
    ):
        from datasets import Image

        if not re.fullmatch(r"\w+", prefix):
            raise InputError(
                f"Split name {prefix!r} may only contain letters, digits and '_'.", "Rename the split, e.g. 'main'."
            )
        self.out_dir = Path(out_dir)
        self.prefix = prefix
        self.features = features
        self.schema = features.arrow_schema  # carries {"huggingface": {"info": {"features": ...}}} metadata
        self.columns = list(features)
        self._column_set = set(self.columns)
        self.image_columns = {name for name, feat in features.items() if isinstance(feat, Image)}
        self.max_shard_bytes = int(max_shard_bytes)
        self.row_group_rows = max(1, int(row_group_rows))
        self.row_group_bytes = max(1, int(row_group_bytes))
        self.compression = compression
        self.overwrite = overwrite
        self.shards: list[ShardInfo] = []
        self._stale = existing_shards(self.out_dir, prefix)
        if self._stale and not overwrite:
            raise InputError(
                f"{self.out_dir} already holds shards of split {prefix!r} ({self._stale[0].name}, ...).",
                "Write into an empty folder, or pass overwrite=True (--overwrite) to replace them.",
            )
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self._temp_paths: list[Path] = []
        self._shard_rows: list[int] = []
        self._shard_data_bytes: list[int] = []
        self._writer = None
        self._is_image = [name in self.image_columns for name in self.columns]
        self._buffer_bytes = 0  # payload of the rows in self._rows
        self._current_bytes = 0  # payload written or buffered into the current shard
        self._closed = False
        # Dictionary encoding and min/max statistics are useless on image bytes and cost time: keep them for
        # the other (short string / int) columns only.
        self._plain_columns = [c for c in self.columns if c not in self.image_columns]
        self._image_names = [c for c in self.columns if c in self.image_columns]
        string_like = {"string", "large_string"}
        self._string_names = [c for c in self._plain_columns if str(self.schema.field(c).type) in string_like]
        self._small_bytes_per_row = 64 * len(self._plain_columns)  # first guess until a row group is measured
        #: Dictionary encoding pays off only on columns that repeat values (labels, templates, counts); on long
        #: per-row text (questions, choice lists) it is built, found useless and dropped, row group after row group.
        self.dictionary_columns = [
            c for c in self._plain_columns if c not in set(self._string_names) or c in DICTIONARY_STRING_COLUMNS
        ]
        self._column_count = len(self.columns)
        self._take = _values_getter(self.columns)
        self._image_indexes = [i for i, name in enumerate(self.columns) if name in self.image_columns]
        self._rows: list[tuple] = []  # the current row group (value tuples), split into columns by _flush
        #: Image payloads are JPEG/PNG files, compressed already: a second codec pass over them costs time (a
        #: third of the write at 64 px) and saves nothing, so their bytes are stored as they are.
        self._column_compression = {
            ".".join(path): image_compression if path[0] in self.image_columns and path[-1] == "bytes" else compression
            for path in _leaf_paths(self.schema)
        }

    # -- writing

    def write(self, row: dict) -> None:
        """Add one row (a dict with exactly the feature columns)."""
        # The per-row path is kept short (it runs once a row; everything else runs once a row group): the row's
        # values are taken in column order as one tuple (a single C call, and a copy: the caller may reuse its
        # dict), image sizes are counted exactly, the small columns are estimated from the last row group and
        # corrected in _flush, where Arrow measures them in one go.
        try:
            values = self._take(row)
        except (KeyError, TypeError):  # a column missing, or not a mapping
            values = None
        if values is None or len(row) != self._column_count or self._closed:  # same length, none missing: exact
            self._refuse(row)
        size = self._small_bytes_per_row
        for index in self._image_indexes:
            value = values[index]
            if value.__class__ is not dict or value.get("bytes") is None:
                value = _encode_image(value, column=self.columns[index])
                values = (*values[:index], value, *values[index + 1 :])
            size += len(value["bytes"])
        if (
            self._current_bytes + size > self.max_shard_bytes
            and self._writer is not None
            and (self._rows or self._current_rows())
        ):
            self._finish_shard()
        if self._writer is None:
            self._open_shard()
        # Rows are kept as tuples and turned into columns once per row group (one zip), which costs far less
        # per row than appending to every column here.
        rows = self._rows
        rows.append(values)
        self._buffer_bytes += size
        self._current_bytes += size
        if len(rows) >= self.row_group_rows or self._buffer_bytes >= self.row_group_bytes:
            self._flush()

    def _refuse(self, row: Any) -> None:
        if self._closed:
            raise RuntimeError("ShardWriter is closed")
        if not isinstance(row, Mapping):
            raise SchemaError(
                f"Row for split {self.prefix!r} must be a dict of the feature columns, got {type(row).__name__}.",
                "Give every feature column and nothing else.",
            )
        missing = [c for c in self.columns if c not in row]
        unknown = [c for c in row if c not in self._column_set]
        raise SchemaError(
            f"Row for split {self.prefix!r} does not match the features: "
            f"missing {missing or 'none'}, unknown {unknown or 'none'}.",
            "Give every feature column and nothing else.",
        )

    @property
    def rows_written(self) -> int:
        return sum(self._shard_rows) + len(self._rows)

    def close(self) -> list[ShardInfo]:
        """Finish the last shard and rename every shard to its final ``-of-{n:05d}`` name."""
        if self._closed:
            return self.shards
        try:
            if self._writer is None and not self._temp_paths:
                # An empty split still gets one shard carrying the schema (note: `datasets` cannot load an
                # empty split, so release builders refuse them before publishing).
                self._open_shard()
            if self._writer is not None:
                self._finish_shard()
            count = len(self._temp_paths)
            finals = [self.out_dir / shard_name(self.prefix, i, count) for i in range(count)]
            for old in self._stale:
                if old not in finals:
                    old.unlink(missing_ok=True)
            for tmp, final, rows, data_bytes in zip(self._temp_paths, finals, self._shard_rows, self._shard_data_bytes):
                size = tmp.stat().st_size
                os.replace(tmp, final)
                self.shards.append(ShardInfo(path=final, rows=rows, bytes=size, data_bytes=data_bytes))
            self._temp_paths = []
        except BaseException:
            self.abort()
            raise
        self._closed = True
        return self.shards

    def abort(self) -> None:
        """Drop everything written so far (temporary files removed; final files untouched)."""
        if self._writer is not None:
            with contextlib.suppress(Exception):
                self._writer.close()
            self._writer = None
        for tmp in self._temp_paths:
            tmp.unlink(missing_ok=True)
        self._temp_paths = []
        self._closed = True

    def __enter__(self) -> ShardWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    # -- internals

    def _current_rows(self) -> int:
        return self._shard_rows[-1] if self._shard_rows else 0

    def _open_shard(self) -> None:
        import pyarrow.parquet as pq

        tmp = self.out_dir / f".{self.prefix}-{len(self._temp_paths):05d}.parquet.{os.getpid()}.tmp"
        self._temp_paths.append(tmp)
        self._shard_rows.append(0)
        self._shard_data_bytes.append(0)
        self._current_bytes = 0
        self._writer = pq.ParquetWriter(
            tmp,
            self.schema,
            compression=self._column_compression,
            use_dictionary=self.dictionary_columns,
            write_statistics=self._plain_columns,
        )

    def _flush(self) -> None:
        import pyarrow as pa

        rows = self._rows
        if not rows or self._writer is None:
            return
        arrays = []
        for field, values, is_image in zip(self.schema, zip(*rows), self._is_image):
            if is_image:
                # Building the {bytes, path} struct from two flat arrays is much faster than from dicts.
                arrays.append(
                    pa.StructArray.from_arrays(
                        [
                            pa.array([v["bytes"] for v in values], pa.binary()),
                            pa.array([v.get("path") for v in values], pa.string()),
                        ],
                        fields=list(field.type),
                    )
                )
            else:
                arrays.append(pa.array(values, field.type))
        table = pa.Table.from_arrays(arrays, schema=self.schema)
        count = len(rows)
        image_payload = sum(table.column(name).chunk(0).field(0).nbytes for name in self._image_names)
        small = table.nbytes - image_payload  # offsets, paths and every non-image column
        correction = small - count * self._small_bytes_per_row
        self._current_bytes += correction
        self._shard_rows[-1] += count
        self._shard_data_bytes[-1] += self._buffer_bytes + correction
        self._small_bytes_per_row = max(1, small // count)
        self._writer.write_table(table, row_group_size=count)
        self._rows = []
        self._buffer_bytes = 0

    def _finish_shard(self) -> None:
        self._flush()
        if self._writer is not None:
            self._writer.close()  # a zero-row shard keeps the schema and has no row group
            self._writer = None


def _values_getter(columns: list[str]):
    """row dict -> tuple of its values in ``columns`` order (KeyError for a missing column)."""
    if len(columns) > 1:
        return operator.itemgetter(*columns)  # one C call a row
    return lambda row: tuple(row[name] for name in columns)  # itemgetter of one key returns a bare value


def _leaf_paths(schema) -> list[tuple[str, ...]]:
    """Parquet column paths of an Arrow schema, as Parquet spells them (``image.bytes``, ``crop.list.element``).

    Asked of Parquet itself (the schema of an empty file written to memory): a per-column compression dict
    silently leaves any column it does not name exactly uncompressed.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    sink = pa.BufferOutputStream()
    pq.ParquetWriter(sink, schema).close()
    parquet_schema = pq.ParquetFile(pa.BufferReader(sink.getvalue())).schema
    return [tuple(parquet_schema.column(i).path.split(".")) for i in range(len(parquet_schema))]


def _encode_image(value: Any, *, column: str) -> dict:
    """Image column value -> ``{"bytes", "path"}`` (the ``datasets`` Image storage), reading files as needed."""
    if isinstance(value, dict) and "bytes" in value:
        data, path = value.get("bytes"), value.get("path")
        if data is None and path:
            data = _read_file(path, column=column)
            path = os.path.basename(str(path))
        return {"bytes": data, "path": path}
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"bytes": bytes(value), "path": None}
    if isinstance(value, (str, os.PathLike)):
        return {"bytes": _read_file(value, column=column), "path": os.path.basename(str(value))}
    raise SchemaError(
        f"Column {column!r}: expected image bytes, a file path or {{'bytes', 'path'}}, got {type(value).__name__}.",
        "Pass the encoded image file, not a decoded image.",
    )


def _read_file(path: str | os.PathLike, *, column: str) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except FileNotFoundError:
        raise InputError(
            f"Column {column!r}: image file {path} not found.", "Check the path, or rebuild its catalog."
        ) from None
