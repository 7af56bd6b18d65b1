"""The ``FILE.meta.json`` sidecar that every pairs and chain file carries.

A sidecar says what its file is (``kind``), which toolkit version and seed made it and from what options;
``release build`` reads it to choose the builder and records it in the release. One path rule, one reader,
one writer, one clock.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
from pathlib import Path

from commonlink.errors import InputError, SchemaError
from commonlink.fileio import atomic_write_json

#: ``kind`` of a Common-O pairs file (``commonlink pairs``).
COMMON_O_PAIRS_KIND = "common_o_pairs"
#: ``kind`` of an association chain file or image table (``commonlink chains``).
ASSOCIATION_CHAINS_KIND = "association_chains"
KINDS = (COMMON_O_PAIRS_KIND, ASSOCIATION_CHAINS_KIND)


def utc_now() -> str:
    """The creation time recorded in sidecars, manifests and results (UTC, whole seconds, ISO 8601)."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def meta_path(data_file: str | os.PathLike) -> Path:
    """``FILE.meta.json`` beside ``FILE``."""
    return Path(f"{os.fspath(data_file)}.meta.json")


def data_fingerprint(data_file: str | os.PathLike) -> tuple[str, int]:
    """``(sha256, rows)`` of a JSON-lines file in one pass (rows: non-blank lines)."""
    digest = hashlib.sha256()
    rows = 0
    with open(data_file, "rb") as handle:
        for line in handle:
            digest.update(line)
            rows += bool(line.strip())
    return digest.hexdigest(), rows


def write_meta(data_file: str | os.PathLike, meta: dict) -> dict:
    """Write the sidecar of ``data_file`` atomically, with the file's ``sha256`` and ``rows``; returns what it
    wrote (callers that need the sha256 take it from there instead of hashing the file again).

    Written after the data file, so the fingerprint is of the file as it now is: a later reader (a rerun,
    ``release build``) checks the file against it with :func:`verify_data_file`.
    """
    sha256, rows = data_fingerprint(data_file)
    written = {**meta, "sha256": sha256, "rows": rows}
    atomic_write_json(meta_path(data_file), written)
    return written


def data_file_problem(
    data_file: str | os.PathLike, meta: dict, fingerprint: tuple[str, int] | None = None
) -> str | None:
    """Why ``data_file`` is not the file its sidecar ``meta`` describes (``None`` when it is).

    Compares the sha256 and the row count the sidecar records; a sidecar from before they were recorded is
    checked on its ``count`` alone. ``fingerprint`` is the file's :func:`data_fingerprint` when already read.
    """
    sha256, rows = fingerprint or data_fingerprint(data_file)
    expected_rows = meta.get("rows", meta.get("count"))
    if isinstance(expected_rows, int) and rows != expected_rows:
        return f"it has {rows} rows where its sidecar {meta_path(data_file).name} records {expected_rows}"
    if meta.get("sha256") and meta["sha256"] != sha256:
        return (
            f"its content differs from what its sidecar {meta_path(data_file).name} records (sha256; "
            f"{rows} rows, as recorded)"
        )
    return None


def verify_data_file(data_file: str | os.PathLike, meta: dict) -> str:
    """``data_file``'s sha256 (read once: callers that record it need not hash the file again); a
    :class:`SchemaError` naming ``data_file`` when it was truncated or edited after its sidecar was written."""
    fingerprint = data_fingerprint(data_file)
    problem = data_file_problem(data_file, meta, fingerprint)
    if problem:
        raise SchemaError(
            f"{data_file} was changed after it was built: {problem}.",
            "Rebuild it with the command that made it (`commonlink pairs ... --overwrite`, or `commonlink chains` "
            "into the same --out), or restore the original file.",
        )
    return fingerprint[0]


def read_meta(
    data_file: str | os.PathLike, *, fix: str = "Regenerate the file with `commonlink pairs` or `commonlink chains`."
) -> dict:
    """The sidecar of ``data_file`` (a dict with a ``kind``); clear errors when the file or sidecar is missing or
    broken."""
    path = Path(data_file)
    if not path.is_file():
        raise InputError(
            f"{path} not found.", "Check the path; make one with `commonlink pairs` or `commonlink chains`."
        )
    sidecar = meta_path(path)
    if not sidecar.is_file():
        raise InputError(
            f"{path} has no sidecar {sidecar.name}, so its kind, seed and split are unknown.",
            "Use files written by `commonlink pairs` or `commonlink chains` (they write the .meta.json next to the "
            "file).",
        )
    meta = load_sidecar(sidecar, fix=fix)
    if "kind" not in meta:
        raise SchemaError(f"{sidecar}: no 'kind' field.", fix)
    return meta


def load_sidecar(sidecar: str | os.PathLike, *, fix: str) -> dict:
    """A sidecar file as a JSON object whose ``kind`` (when present) is a string; a :class:`SchemaError` naming
    the file for text that is not UTF-8 or not JSON, a value that is not an object, or a ``kind`` of another type."""
    sidecar = Path(sidecar)
    try:
        meta = json.loads(sidecar.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise SchemaError(f"{sidecar}: not UTF-8 text ({exc.reason} at byte {exc.start}).", fix) from exc
    except json.JSONDecodeError as exc:
        raise SchemaError(f"{sidecar}: not valid JSON ({exc}).", fix) from exc
    if not isinstance(meta, dict):
        raise SchemaError(f"{sidecar}: expected a JSON object, got {type(meta).__name__}.", fix)
    if "kind" in meta and not isinstance(meta["kind"], str):
        raise SchemaError(
            f"{sidecar}: 'kind' must be a string such as {COMMON_O_PAIRS_KIND!r}, got {json.dumps(meta['kind'])}.", fix
        )
    return meta


__all__ = [
    "ASSOCIATION_CHAINS_KIND",
    "COMMON_O_PAIRS_KIND",
    "KINDS",
    "data_file_problem",
    "data_fingerprint",
    "load_sidecar",
    "meta_path",
    "read_meta",
    "utc_now",
    "verify_data_file",
    "write_meta",
]
