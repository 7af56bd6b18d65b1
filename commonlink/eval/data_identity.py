"""Which data a run was made on, as its results.json records it: what ``eval compare``, ``eval report`` and
``eval score`` match runs on (never a row id alone: two releases both have a ``main`` split whose rows are
``main-00000000``...).

A run's data identity is its task, its split (or association config) and the data's **fingerprint** (a hash of
the split's files for local data, the ``datasets`` fingerprint for Hub data); a results file written before the
fingerprint was recorded, or scored without the data (``eval score`` without ``--data``), falls back to its
source and revision and is shown as such.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["data_identity", "data_label", "data_split"]


def data_split(results: dict) -> str:
    """The split (Common-O, perception) or config (association) a run covered."""
    data = results.get("dataset") or {}
    return str(data.get("split") or data.get("config") or "?")


def data_identity(results: dict) -> tuple[str, str, str]:
    """``(task, split or config, data)``: runs are ranked together only when these agree. ``data`` is the
    fingerprint when recorded, else ``source@revision`` prefixed with ``unverified:``."""
    data = results.get("dataset") or {}
    fingerprint = data.get("fingerprint")
    if fingerprint:
        which = f"fingerprint:{fingerprint}"
    else:
        which = f"unverified:{data.get('source') or '?'}@{data.get('revision') or '-'}"
    return (str(results.get("task") or "?"), data_split(results), which)


def data_label(results: dict) -> str:
    """A short name of the data for a table cell: ``SOURCE[@REVISION] #FINGERPRINT8`` (a local source shows its
    folder's name), or ``SOURCE (fingerprint unknown)``."""
    data = results.get("dataset") or {}
    source = str(data.get("source") or "?")
    if source.startswith(("/", ".", "~")) or "\\" in source or source.count("/") > 1:
        source = Path(source).name or source
    if data.get("revision"):
        source += f"@{data['revision']}"
    fingerprint = data.get("fingerprint")
    return f"{source} #{str(fingerprint)[:8]}" if fingerprint else f"{source} (fingerprint unknown)"
