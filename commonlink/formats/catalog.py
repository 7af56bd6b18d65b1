"""The image catalog: a folder with ``catalog.jsonl`` and the image files it names (docs/formats.md).

Real-photo ingestion and scene synthesis write catalogs; the pair and chain builders read them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import unicodedata
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from itertools import repeat
from pathlib import Path

from commonlink.constants import CATALOG_FILENAME
from commonlink.errors import InputError, SchemaError
from commonlink.fileio import (
    atomic_write,
    jsonl_lines,
    parse_jsonl_line,
    read_jsonl,
    remove_stale_temp_files,
    safe_join,
)
from commonlink.formats.licences import LICENCES, accepted_ids
from commonlink.locks import output_lock

SOURCES = ("real", "synthetic")


@dataclass
class CatalogRecord:
    """One image of a catalog."""

    id: str  #: stable, content-derived (e.g. first 16 hex chars of the image sha256)
    path: str  #: relative to the catalog folder
    objects: list[str]  #: canonical object names visible in the image
    source: str  #: "real" | "synthetic"
    scene_id: str
    width: int
    height: int
    sha256: str
    background: str | None = None
    view: str | None = None
    object_area: dict[str, float] | None = None  #: {object name: fraction of the image}, where known
    #: Where known (the ingest manifest's optional columns): the image's licence id (``formats.licences``), who
    #: must be credited, and where the original is published. Left out of the JSON when unknown.
    license: str | None = None
    author: str | None = None
    source_url: str | None = None
    extra: dict = field(default_factory=dict)  #: anything else a writer wants to keep (e.g. plan file)

    def to_json(self) -> dict:
        # Field by field with copies of the containers, not dataclasses.asdict: its deep copy was most of the cost
        # of writing a catalog (0.3 ms a record). Values nested inside ``extra`` are shared, not copied.
        data = {name: _copied(getattr(self, name)) for name in _field_order(type(self))}
        if not data["extra"]:
            data.pop("extra")
        for name in _OPTIONAL_FIELDS:
            if data[name] is None:
                data.pop(name)
        return data

    @classmethod
    def from_json(cls, data: dict, *, where: str = "catalog") -> CatalogRecord:
        problem = record_problem(data)
        if problem is not None:
            raise SchemaError(f"{where}: {problem[0]}", problem[1])
        data = nfc_labels(data)
        known = _field_names(cls)
        if data.keys() <= known:  # the usual record: no unknown keys (saves two passes on every catalog line)
            kwargs = dict(data)
            extra = dict(kwargs.pop("extra", {}) or {})
        else:
            kwargs = {k: v for k, v in data.items() if k in known}
            extra = dict(kwargs.pop("extra", {}) or {})
            extra.update({k: v for k, v in data.items() if k not in known})
        return cls(**kwargs, extra=extra)


#: Fields written only when set (catalogs without them keep their bytes).
_OPTIONAL_FIELDS = ("object_area", "license", "author", "source_url")
#: The attribution fields of a record, in the order releases add their columns.
ATTRIBUTION_FIELDS = ("license", "author", "source_url")
REQUIRED_FIELDS = ("id", "path", "objects", "source", "scene_id", "width", "height", "sha256")
_REQUIRED = frozenset(REQUIRED_FIELDS)
_FIX_LINE = "Fix that line, or rebuild the catalog with commonlink."


#: Invisible characters that reorder the text around them (e.g. U+202E makes "gnp.exe" read "exe.png").
_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def label_problem(text: str) -> str | None:
    """What makes ``text`` unfit as a label or name shown on one line (a card row, a prompt), or None: a line
    break, another control character, or a bidirectional control."""
    for char in text:
        category = unicodedata.category(char)
        if char in "\r\n\x0b\x0c\x85\u2028\u2029":
            return f"a line break (U+{ord(char):04X})"
        if category == "Cc":
            return f"a control character (U+{ord(char):04X})"
        if char in _BIDI:
            return f"a bidirectional control (U+{ord(char):04X}), which reorders the text around it"
    return None


def record_label_problem(record: CatalogRecord) -> str | None:
    """The first label of a record (object names, scene, background, view) that :func:`label_problem` refuses,
    described with the field it is in; None when every label is fit."""
    fields = [("objects", name) for name in record.objects]
    fields += [
        (key, value) for key in ("scene_id", "background", "view") if isinstance(value := getattr(record, key), str)
    ]
    for key, value in fields:
        problem = label_problem(value)
        if problem:
            return f"{key} {value!r} holds {problem}"
    return None


def record_problem(data: dict) -> tuple[str, str | None] | None:
    """What is wrong with a catalog record as read from JSON, as ``(problem, fix)``, or None when it is valid
    (the checks of :meth:`CatalogRecord.from_json`; the first problem found)."""
    if not data.keys() >= _REQUIRED:
        missing = [k for k in REQUIRED_FIELDS if k not in data]
        return f"missing field(s) {', '.join(missing)}.", "Rebuild the catalog with commonlink."
    if data["source"] not in SOURCES:
        return f"source must be one of {SOURCES}, got {data['source']!r}.", None
    objects = data["objects"]
    if not isinstance(objects, list) or not all(map(isinstance, objects, repeat(str))):
        return "'objects' must be a list of strings.", None
    for key in ("id", "path", "sha256"):
        value = data[key]
        if not isinstance(value, str) or not value:
            return f"'{key}' must be a non-empty string, got {value!r}.", _FIX_LINE
    for key in ("width", "height"):
        value = data[key]
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            return f"'{key}' must be a whole number of pixels, got {value!r}.", _FIX_LINE
    if "license" in data or "author" in data or "source_url" in data:
        return _attribution_problem(data)
    return None


def _attribution_problem(data: dict) -> tuple[str, str | None] | None:
    for key in ATTRIBUTION_FIELDS:
        value = data.get(key)
        if value is not None and (not isinstance(value, str) or not value or label_problem(value)):
            return f"{key!r} must be one line of text, got {value!r}.", _FIX_LINE
    licence = data.get("license")
    if licence is not None and licence not in LICENCES:
        return (
            f"license {licence!r} is not a licence id.",
            f"Write one of {accepted_ids()} (lower case), or re-ingest from a manifest with a license column.",
        )
    return None


def nfc_labels(data: dict) -> dict:
    """``data`` (a valid catalog record as JSON) with its object names in Unicode NFC, duplicates dropped: the
    same label written composed (``café``) and decomposed (``cafe`` + U+0301) in a catalog not made by
    ``ingest`` is one label, not two choices that look the same. ASCII names (almost all) cost one check."""
    objects = data["objects"]
    area = data.get("object_area")
    if all(map(str.isascii, objects)) and (not isinstance(area, dict) or all(map(str.isascii, area))):
        return data
    data = dict(data)
    data["objects"] = list(dict.fromkeys(unicodedata.normalize("NFC", name) for name in objects))
    if isinstance(area, dict):
        data["object_area"] = {unicodedata.normalize("NFC", name): value for name, value in area.items()}
    return data


def _copied(value):
    return value.copy() if isinstance(value, (list, dict)) else value


@functools.cache
def _field_order(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


@functools.cache
def _field_names(cls: type) -> frozenset[str]:
    """The field names of a record dataclass (``dataclasses.fields`` costs more than the rest of a record's check)."""
    return frozenset(f.name for f in dataclasses.fields(cls))


def catalog_file(catalog_dir: str | os.PathLike) -> Path:
    return Path(catalog_dir) / CATALOG_FILENAME


def _existing_catalog_file(catalog_dir: str | os.PathLike) -> Path:
    path = catalog_file(catalog_dir)
    if not path.is_file():
        raise InputError(
            f"{catalog_dir} is not an image catalog (no {CATALOG_FILENAME}).",
            "Create one with `commonlink ingest` (photos) or `commonlink synth` (renders).",
        )
    return path


def iter_catalog(catalog_dir: str | os.PathLike) -> Iterator[CatalogRecord]:
    """Stream the records of a catalog folder."""
    path = _existing_catalog_file(catalog_dir)
    for lineno, row in enumerate(read_jsonl(path), start=1):
        yield CatalogRecord.from_json(row, where=f"{path}, line {lineno}")


def iter_catalog_rows(catalog_dir: str | os.PathLike) -> Iterator[dict]:
    """Stream the records of a catalog folder as JSON objects, with every check of :func:`iter_catalog` (the
    same errors) but no :class:`CatalogRecord` built: for a reader that needs a few fields of every record."""
    path = _existing_catalog_file(catalog_dir)
    for lineno, (file_line, text) in enumerate(jsonl_lines(path), start=1):  # lineno counts records, as above
        yield catalog_row(path, file_line, text, record_no=lineno)


def catalog_row(path: Path, file_line: int, text: str, *, record_no: int | None = None) -> dict:
    """One line of ``catalog.jsonl`` as :func:`iter_catalog_rows` yields it: parsed, checked, object names in NFC
    (``record_no``: the record's number for the error, default the file line)."""
    row = parse_jsonl_line(path, file_line, text)
    problem = record_problem(row)
    if problem is not None:
        raise SchemaError(f"{path}, line {record_no or file_line}: {problem[0]}", problem[1])
    return nfc_labels(row)


def read_catalog(catalog_dir: str | os.PathLike) -> list[CatalogRecord]:
    return list(iter_catalog(catalog_dir))


def write_catalog(catalog_dir: str | os.PathLike, records: Iterable[CatalogRecord]) -> int:
    """Atomically (re)write ``catalog.jsonl``; returns the number of records."""
    count = 0
    with atomic_write(catalog_file(catalog_dir), "w") as handle:
        for record in records:
            handle.write(json.dumps(record.to_json(), ensure_ascii=False) + "\n")
            count += 1
    return count


#: ``extra`` key: ``[size, mtime_ns]`` of the image file when its ``sha256`` was taken. While the file's size
#: and modification time still match, readers that would re-hash it (``catalog merge``) may trust ``sha256``.
FILE_STAMP_KEY = "file_stamp"


def file_stamp(path: str | os.PathLike) -> list[int]:
    """The ``[size, mtime_ns]`` stamp of a file (see :data:`FILE_STAMP_KEY`)."""
    st = os.stat(path)
    return [st.st_size, st.st_mtime_ns]


def stamp_matches(record: CatalogRecord | dict, st: os.stat_result) -> bool:
    """Whether a record's file stamp equals the size and mtime in ``st`` (False when the record has none)."""
    extra = record.extra if isinstance(record, CatalogRecord) else record.get("extra") or {}
    stamp = extra.get(FILE_STAMP_KEY)
    return isinstance(stamp, list) and len(stamp) == 2 and stamp == [st.st_size, st.st_mtime_ns]


def image_path(catalog_dir: str | os.PathLike, record: CatalogRecord) -> Path:
    """Absolute path of a record's image; refuses paths escaping the catalog folder."""
    try:
        return safe_join(catalog_dir, record.path)
    except InputError as exc:
        raise outside_link_error(catalog_dir, record.path) or exc from None


def outside_link_error(catalog_dir: str | os.PathLike, relative: str) -> InputError | None:
    """The error for a catalog file that is a symbolic link leading out of the catalog (None if it is not one)."""
    link = Path(catalog_dir) / relative
    if os.path.isabs(relative) or ".." in Path(relative).parts or not link.is_symlink():
        return None
    return InputError(
        f"{link} is a symbolic link to {os.path.realpath(link)}, which escapes the catalog {catalog_dir} "
        "(`catalog merge --link symlink` makes such links); commonlink reads only files inside a catalog.",
        "Merge again with --link copy or --link hardlink into a new folder, and use that catalog.",
    )


# --- writer lock (added with ingest / catalog merge) -------------------------------------------------------
LOCK_FILENAME = ".catalog.lock"


@contextlib.contextmanager
def catalog_lock(catalog_dir: str | os.PathLike, *, what: str = "commonlink") -> Iterator[None]:
    """Hold the writer lock of a catalog folder while rewriting it, so two writers cannot lose records.

    :func:`commonlink.locks.output_lock` on ``<catalog>/.catalog.lock``; while it is held, temporary files
    that killed writers left in the folder are removed. A folder created only to hold the lock is removed again
    when the run wrote nothing (e.g. refused its input).
    """
    folder = Path(catalog_dir)
    if folder.exists() and not folder.is_dir():
        raise InputError(
            f"{folder} is a file, not a catalog folder.", "Pick a folder path (new, or an existing catalog)."
        )
    created = not folder.exists()
    try:
        with output_lock(folder, what=what, lock_file=folder / LOCK_FILENAME):
            remove_stale_temp_files(folder)
            yield
    finally:
        if created and folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()
