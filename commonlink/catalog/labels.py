"""Reading the label manifest a person writes next to their photos (docs/formats.md).

Two formats:

* CSV with a header row: ``file,objects[,scene,background,view,license,author,source_url]``; ``objects`` holds
  names separated by ``;``. ``license`` is a licence id (``formats.licences``; case does not matter, ``licence``
  is accepted as the column name too), ``author`` who must be credited, ``source_url`` where the original is.
* JSON lines: one object a line with the same keys; ``objects`` is a list (a ``;``-separated string is
  accepted too).

Structural problems (no ``file`` column, a line that is not JSON, a row without a file name) raise a
:class:`~commonlink.errors.SchemaError` naming the line. Problems with a single photo's *labels* (an empty
object list, an unknown name) are not decided here: the entry is returned as written and the caller (ingest,
the chain builder) refuses it with a per-file reason.
"""

from __future__ import annotations

import csv
import os
from dataclasses import dataclass, field
from pathlib import Path

from commonlink.errors import InputError, SchemaError
from commonlink.fileio import read_jsonl_numbered
from commonlink.formats.catalog import label_problem
from commonlink.formats.licences import check_licence_id

#: Columns with a meaning; any other column is kept in :attr:`ManifestEntry.extra`.
KNOWN_COLUMNS = ("file", "objects", "scene", "background", "view", "license", "author", "source_url")
#: Other spellings of a column name.
COLUMN_ALIASES = {"licence": "license"}
OBJECT_SEPARATOR = ";"
_JSONL_SUFFIXES = (".jsonl", ".ndjson", ".json")


@dataclass
class ManifestEntry:
    """One labelled photo, as written in the manifest (names not yet normalised)."""

    file: str  #: path relative to the photos folder, as written
    objects: list[str]  #: object names as written (stripped, empty pieces dropped); may be empty
    scene: str | None = None
    background: str | None = None
    view: str | None = None
    license: str | None = None  #: normalised licence id (``formats.licences``)
    author: str | None = None
    source_url: str | None = None
    line: int = 0  #: 1-based line number in the manifest (the CSV header is line 1)
    extra: dict = field(default_factory=dict)  #: columns/keys the manifest has beyond the known ones


def read_manifest(path: str | os.PathLike) -> list[ManifestEntry]:
    """Read a CSV or JSONL manifest; the format is chosen by suffix, else by the first character."""
    path = Path(path)
    if not path.is_file():
        raise InputError(
            f"Manifest not found: {path}", "Pass the CSV or JSONL file that lists your photos with --manifest."
        )
    try:
        if _looks_like_jsonl(path):
            return _read_jsonl_manifest(path)
        return _read_csv_manifest(path)
    except UnicodeDecodeError as exc:
        raise SchemaError(
            f"{path}: not UTF-8 text (byte {exc.start} cannot be decoded).",
            "Save the manifest as UTF-8 (in a spreadsheet: 'CSV UTF-8').",
        ) from None
    except csv.Error as exc:  # e.g. a field over the csv module's limit (131,072 characters): an unclosed quote
        raise SchemaError(
            f"{path}: not a readable CSV manifest ({exc}).",
            'Check for a quote (") that is opened and never closed, or a field that is far too long; '
            "each line is file,objects[,scene,background,view].",
        ) from None


def split_objects(text: str) -> list[str]:
    """``"apple; Keys ;"`` -> ``["apple", "Keys"]`` (stripped, empty pieces dropped)."""
    return [piece.strip() for piece in text.split(OBJECT_SEPARATOR) if piece.strip()]


def _looks_like_jsonl(path: Path) -> bool:
    suffix = path.suffix.lower()
    if suffix in _JSONL_SUFFIXES:
        return True
    if suffix == ".csv":
        return False
    with path.open("r", encoding="utf-8-sig", errors="replace") as handle:
        for line in handle:
            if line.strip():
                return line.lstrip().startswith("{")
    return False


def _optional_text(value: object) -> str | None:
    if value is None:
        return None
    text = str(value).strip()
    return text or None


def _read_csv_manifest(path: Path) -> list[ManifestEntry]:
    entries: list[ManifestEntry] = []
    # utf-8-sig: spreadsheets often save a byte-order mark in front of the header.
    with path.open("r", encoding="utf-8-sig", newline="") as handle:
        reader = csv.DictReader(handle)
        header = [_column_name(h) for h in (reader.fieldnames or [])]
        if not header:
            raise SchemaError(
                f"{path}: the manifest is empty.", "Write a header line `file,objects` and one line per photo."
            )
        _refuse_duplicates(path, header, reader.fieldnames or [], lineno=1)
        missing = [c for c in ("file", "objects") if c not in header]
        if missing:
            raise SchemaError(
                f"{path}, line 1: the header has no {' or '.join(repr(m) for m in missing)} column "
                f"(found: {', '.join(repr(h) for h in header)}).",
                "The first line must name the columns: file,objects[,scene,background,view,license,author,source_url].",
            )
        reader.fieldnames = header
        for row in reader:
            lineno = reader.line_num
            if None in row:
                raise SchemaError(
                    f"{path}, line {lineno}: more values than columns ({row[None]!r} left over).",
                    "Separate object names with ';' (not ','), or quote the field.",
                )
            if not any((v or "").strip() for v in row.values()):
                continue  # blank line
            entries.append(
                _entry_from_mapping(row, path=path, lineno=lineno, objects=split_objects(row.get("objects") or ""))
            )
    return entries


def _read_jsonl_manifest(path: Path) -> list[ManifestEntry]:
    entries: list[ManifestEntry] = []
    fix = (
        "Write one JSON object a line (JSON lines, not one JSON array), e.g. "
        '{"file": "a.jpg", "objects": ["apple", "keys"]}.'
    )
    for lineno, row in read_jsonl_numbered(path, fix=fix):
        keys = [_column_name(str(k)) for k in row]
        _refuse_duplicates(path, keys, list(row), lineno=lineno)
        row = dict(zip(keys, row.values()))
        raw_objects = row.get("objects")
        if raw_objects is None:
            objects: list[str] = []
        elif isinstance(raw_objects, str):
            objects = split_objects(raw_objects)
        elif isinstance(raw_objects, list) and all(isinstance(o, str) for o in raw_objects):
            objects = [o.strip() for o in raw_objects if o.strip()]
        else:
            raise SchemaError(
                f"{path}, line {lineno}: 'objects' must be a list of names, got {raw_objects!r}.",
                'Write it as e.g. "objects": ["apple", "keys"].',
            )
        entries.append(_entry_from_mapping(row, path=path, lineno=lineno, objects=objects))
    return entries


def _column_name(written: str | None) -> str:
    name = written.strip().lower() if written else ""
    return COLUMN_ALIASES.get(name, name)


def _refuse_duplicates(path: Path, names: list[str], written: list, *, lineno: int) -> None:
    """Two columns (keys) with one name (compared stripped and case-folded) would let one silently replace the
    other's values: refused, naming the column and where it appears."""
    seen: dict[str, int] = {}
    for position, name in enumerate(names):
        if not name:
            continue  # unnamed columns (trailing commas) carry nothing
        if name in seen:
            first = seen[name]
            raise SchemaError(
                f"{path}, line {lineno}: the column {name!r} appears twice ({written[first]!r} at position "
                f"{first + 1} and {written[position]!r} at position {position + 1}); one would silently replace the "
                "other's values.",
                f"Keep one {name!r} column: merge the two (object names separated by ';') or rename the other.",
            )
        seen[name] = position


def _entry_from_mapping(row: dict, *, path: Path, lineno: int, objects: list[str]) -> ManifestEntry:
    file = _optional_text(row.get("file"))
    if file is None:
        raise SchemaError(
            f"{path}, line {lineno}: no file name.", "Give every line the photo's path relative to the photos folder."
        )
    extra = {k: v for k, v in row.items() if k not in KNOWN_COLUMNS and k and v not in (None, "")}
    _refuse_unfit_labels(
        path,
        lineno,
        [
            ("file", file),
            *(("objects", o) for o in objects),
            *(
                (key, str(row[key]))
                for key in ("scene", "background", "view", "author", "source_url")
                if row.get(key) is not None
            ),
        ],
    )
    licence = _optional_text(row.get("license"))
    if licence is not None:
        licence = check_licence_id(licence, where=f"{path}, line {lineno}").lower()
    source_url = _optional_text(row.get("source_url"))
    if source_url is not None and not source_url.lower().startswith(("http://", "https://")):
        raise SchemaError(
            f"{path}, line {lineno}: source_url {source_url!r} is not a web address.",
            "Write the page the photo was taken from (https://...), or leave the column empty.",
        )
    return ManifestEntry(
        file=file.replace("\\", "/"),
        objects=objects,
        scene=_optional_text(row.get("scene")),
        background=_optional_text(row.get("background")),
        view=_optional_text(row.get("view")),
        license=licence,
        author=_optional_text(row.get("author")),
        source_url=source_url,
        line=lineno,
        extra=extra,
    )


def _refuse_unfit_labels(path: Path, lineno: int, values: list[tuple[str, str]]) -> None:
    """Labels end up on one line of a card, a prompt, a table: a line break or control character in one would
    break that line (or forge another), so the manifest line holding it is refused."""
    for key, value in values:
        problem = label_problem(value)
        if problem:
            raise SchemaError(
                f"{path}, line {lineno}: {key} {value!r} holds {problem}.",
                "Write each name on one line, without control characters (check for a quoted field that spans lines).",
            )
