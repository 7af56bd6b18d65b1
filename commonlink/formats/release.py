"""The release folder contract shared by the builders, the Hub publisher and the loaders.

A release folder holds ``README.md`` (the dataset card), ``manifest.json`` (sha256 and size of every file,
toolkit version, seed, configuration, ``kind``) and the parquet shards. One version rule applies everywhere:
``release build`` refuses what ``release push`` would refuse, so a built release can always be pushed.
"""

from __future__ import annotations

import json
import os
import re
import unicodedata
from pathlib import Path

from commonlink.errors import InputError, SchemaError

MANIFEST_FILENAME = "manifest.json"
CARD_FILENAME = "README.md"
DEFAULT_LICENSE = "cc-by-nc-4.0"  # the license of the Common-O paper's release (its datasheet, §10)
DEFAULT_VERSION = "1.0.0"

# Semantic versioning: X.Y.Z, optional -pre-release and +build parts. Versions become git tags on the Hub.
_VERSION_RE = re.compile(r"^\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?(?:\+[0-9A-Za-z.-]+)?$")
_LICENSE_RE = re.compile(r"^[a-z0-9][a-z0-9.\-+]*$")


def is_version(version: str | None) -> bool:
    return bool(_VERSION_RE.match(version or ""))


def check_version(version: str) -> str:
    """``version`` if it is X.Y.Z (semantic versioning), else an :class:`InputError` saying how to write it."""
    if not is_version(version):
        raise InputError(
            f"--version {version!r} is not a version number.",
            "Use semantic versioning X.Y.Z (e.g. --version 1.0.0; pre-releases like 1.1.0-rc1 are fine).",
        )
    return version


def version_key(version: str) -> tuple:
    """Sort key: 1.10.0 after 1.9.0; a pre-release (1.0.0-rc1) before its release (1.0.0)."""
    core, _, pre = version.split("+", 1)[0].partition("-")
    numbers = tuple(int(p) if p.isdigit() else 0 for p in core.split("."))
    return numbers + ((0, pre) if pre else (1, ""))


def check_license(license: str) -> str:
    if not _LICENSE_RE.match(license or ""):
        raise InputError(
            f"--license {license!r} is not a Hub license id.",
            "Use an id like cc-by-4.0, cc-by-nc-4.0, mit, apache-2.0 or other.",
        )
    return license


def check_name(name: str | None) -> str | None:
    """``--name`` is shown as the card's title and ``pretty_name``: one line of printable text."""
    if name is None:
        return None
    if not name.strip():
        raise InputError("--name is empty.", "Give a short title, e.g. --name 'Common-O extra', or leave --name out.")
    bad = sorted({f"U+{ord(c):04X}" for c in name if unicodedata.category(c) == "Cc"})  # line breaks, tabs, NUL...
    if bad:
        what = "a line break" if any(c in name for c in "\r\n") else "control characters"
        raise InputError(
            f"--name {name!r} holds {what} ({', '.join(bad)}); the name is the card's one-line title.",
            "Write the name on one line, e.g. --name 'My set'.",
        )
    return name


def read_release_manifest(release_dir: str | os.PathLike) -> dict:
    """The folder's ``manifest.json``; clear errors when it is not a release folder."""
    path = Path(release_dir) / MANIFEST_FILENAME
    if not path.is_file():
        raise InputError(
            f"{release_dir} is not a release folder (no {MANIFEST_FILENAME}).",
            "Build one with `commonlink release build`.",
        )
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise SchemaError(f"{path}: not valid JSON ({exc}).", "Rebuild the release.") from exc
    if not isinstance(manifest, dict):
        raise SchemaError(f"{path}: not a JSON object.", "Rebuild the release with `commonlink release build`.")
    return manifest


def manifest_units(manifest: dict) -> dict[str, dict]:
    """The parts of a release a manifest lists, ``{name: {"rows", "files", ...}}``, whichever the kind: ``parts``
    (every release built now), or, in releases built before that shape (published ones exist), ``splits``
    (Common-O) or ``configs`` (association)."""
    units = manifest.get("parts") or manifest.get("splits") or manifest.get("configs") or {}
    return units if isinstance(units, dict) else {}


__all__ = [
    "CARD_FILENAME",
    "DEFAULT_LICENSE",
    "DEFAULT_VERSION",
    "MANIFEST_FILENAME",
    "check_license",
    "check_name",
    "check_version",
    "is_version",
    "manifest_units",
    "read_release_manifest",
    "version_key",
]
