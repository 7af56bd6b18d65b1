"""The ``FILE.meta.json`` sidecar that every pairs and chain file carries.

A sidecar says what its file is (``kind``), which toolkit version and seed made it and from what options;
``release build`` reads it to choose the builder and records it in the release. One path rule, one reader,
one writer, one clock.
"""

from __future__ import annotations

import datetime as _dt
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


def write_meta(data_file: str | os.PathLike, meta: dict) -> Path:
    """Write the sidecar of ``data_file`` atomically; returns its path."""
    path = meta_path(data_file)
    atomic_write_json(path, meta)
    return path


def read_meta(data_file: str | os.PathLike, *, fix: str = "Regenerate the file with `commonlink pairs` or `commonlink chains`.") -> dict:
    """The sidecar of ``data_file`` (a dict with a ``kind``); clear errors when the file or sidecar is missing or broken."""
    path = Path(data_file)
    if not path.is_file():
        raise InputError(f"{path} not found.", "Check the path; make one with `commonlink pairs` or `commonlink chains`.")
    sidecar = meta_path(path)
    if not sidecar.is_file():
        raise InputError(
            f"{path} has no sidecar {sidecar.name}, so its kind, seed and split are unknown.",
            "Use files written by `commonlink pairs` or `commonlink chains` (they write the .meta.json next to the file).",
        )
    try:
        meta = json.loads(sidecar.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise SchemaError(f"{sidecar}: not valid JSON ({exc}).", fix) from exc
    if not isinstance(meta, dict) or "kind" not in meta:
        raise SchemaError(f"{sidecar}: no 'kind' field.", fix)
    return meta


__all__ = ["ASSOCIATION_CHAINS_KIND", "COMMON_O_PAIRS_KIND", "KINDS", "meta_path", "read_meta", "utc_now", "write_meta"]
