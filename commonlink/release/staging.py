"""What every release builder shares: its options, option checks, the staging folder and its atomic swap into place,
the file table of the manifest, reuse of an identical finished build, and publishable (path-free) records.

A build writes into a hidden folder beside ``--out`` and renames it into place only when complete, so a
killed build never leaves a half-written release where a finished one is expected.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import uuid
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Iterator

from commonlink.errors import InputError
from commonlink.fileio import pid_alive, sha256_file
from commonlink.formats.release import (
    DEFAULT_LICENSE,
    DEFAULT_VERSION,
    MANIFEST_FILENAME,
    check_license,
    check_name,
    check_version,
    read_release_manifest,
)
from commonlink.release.shards import DEFAULT_MAX_SHARD_BYTES

#: ``kind`` of the manifest of each release builder.
RELEASE_KINDS = ("common_o", "association")


@dataclass
class ReleaseResult:
    """What a build produced (returned by the release builders)."""

    out_dir: Path
    kind: str  #: "common_o" | "association"
    splits: dict[str, dict]  #: {split or config: {"rows": n, "files": [relative paths]}}
    files: dict[str, dict]  #: {relative path: {"sha256", "size"}}
    figures: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  #: warnings worth printing (e.g. figures skipped)
    reused: bool = False  #: the folder already held this exact build; nothing was rewritten


def check_options(*, license: str, version: str, name: str | None = None) -> None:
    """Refuse at build time what ``release push`` would refuse later (and a name the card cannot show)."""
    check_license(license)
    check_version(version)
    check_name(name)


@dataclass(frozen=True)
class ReleaseOptions:
    """How to build a release (the flags of ``commonlink release build``), the same for every builder.

    Checked when made: what ``release push`` would refuse later is refused before any input is read.
    """

    name: str | None = None  #: the card's title (default, or when empty: the release folder's name)
    version: str = DEFAULT_VERSION  #: X.Y.Z, recorded in the card and manifest; the Hub tag on push
    license: str = DEFAULT_LICENSE  #: Hub license id shown on the card
    max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES  #: largest parquet shard
    overwrite: bool = False  #: replace a different release already in the folder (only what commonlink wrote)
    progress: bool = True  #: show progress bars
    #: where the inputs' catalogs are looked up instead of where the files name them (``--catalog-root``;
    #: formats.catalog_refs); not recorded: it changes no byte of the release
    catalog_root: str | os.PathLike | None = None

    def __post_init__(self) -> None:
        check_options(license=self.license, version=self.version, name=self.name or None)

    def with_changes(self, **changes: Any) -> ReleaseOptions:
        """A copy with some fields changed; an unknown field name is a ``TypeError`` that lists the fields."""
        known = [f.name for f in fields(self)]
        unknown = sorted(set(changes) - set(known))
        if unknown:
            raise TypeError(f"unknown release option(s) {', '.join(unknown)}; the options are {', '.join(known)}")
        return replace(self, **changes)

    def named_for(self, out_dir: Path) -> ReleaseOptions:
        """These options with the name defaulted to the release folder's name (``out_dir`` resolved)."""
        return self if self.name else replace(self, name=out_dir.name)

    def recorded(self) -> dict[str, Any]:
        """What the manifest's ``config`` (and so the build key) records of these options: what shapes the
        release's bytes and card; ``overwrite``, ``progress`` and ``catalog_root`` do not."""
        return {"name": self.name, "version": self.version, "license": self.license, "max_shard_bytes": int(self.max_shard_bytes)}


#: The options of a build given none (a frozen record, so one instance serves every default).
DEFAULT_RELEASE_OPTIONS = ReleaseOptions()


def hash_files(root: Path) -> dict[str, dict]:
    """``{relative path: {"sha256", "size"}}`` of every file under ``root`` but the manifest and hidden files."""
    files = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = path.relative_to(root).as_posix()
        if rel == MANIFEST_FILENAME or any(part.startswith(".") for part in path.relative_to(root).parts):
            continue
        files[rel] = {"sha256": sha256_file(path), "size": path.stat().st_size}
    return files


def verify_release(release_dir: str | os.PathLike) -> list[str]:
    """Problems found comparing a release folder with its manifest (empty list: every file matches)."""
    root = Path(release_dir)
    manifest = read_release_manifest(root)
    problems = []
    listed = manifest.get("files") or {}
    for rel, info in listed.items():
        path = root / rel
        if not path.is_file():
            problems.append(f"{rel}: missing")
        elif path.stat().st_size != info.get("size") or sha256_file(path) != info.get("sha256"):
            problems.append(f"{rel}: content differs from the manifest")
    for rel in hash_files(root) if root.is_dir() else {}:
        if rel not in listed:
            problems.append(f"{rel}: not in the manifest")
    return problems


def foreign_entries(root: Path, listed: dict) -> list[str]:
    """Everything under ``root`` that the manifest's ``listed`` files do not account for: files (relative paths,
    hidden ones included) and empty folders (with a trailing ``/``)."""
    keep = set(listed) | {MANIFEST_FILENAME}
    found = []
    for folder, dirs, names in os.walk(root):
        rel_folder = Path(folder).relative_to(root)
        links = [d for d in dirs if os.path.islink(os.path.join(folder, d))]  # never walked: name them
        found += [(rel_folder / d).as_posix() for d in sorted(links)]
        dirs[:] = sorted(d for d in dirs if d not in links)
        found += [(rel_folder / n).as_posix() for n in sorted(names) if (rel_folder / n).as_posix() not in keep]
        if not dirs and not names and rel_folder != Path("."):
            found.append(rel_folder.as_posix() + "/")
    return found


def is_release_manifest(manifest: dict) -> bool:
    """Whether a manifest was written by ``release build`` (a kind, a build key and a file table)."""
    return (manifest.get("kind") in RELEASE_KINDS and isinstance(manifest.get("build_key"), str)
            and isinstance(manifest.get("files"), dict))


def reuse_or_refuse(out_dir: Path, build_key: str, *, overwrite: bool) -> ReleaseResult | None:
    """The finished release in ``out_dir`` when it is this exact build; ``None`` when the build may proceed;
    an :class:`InputError` when ``out_dir`` holds something else that may not be replaced.

    ``--overwrite`` replaces only what this toolkit wrote: a folder whose manifest is a release manifest and
    lists every file in it. Anything else in the folder is refused, naming the files commonlink did not write.
    """
    if not out_dir.exists():
        return None
    if not out_dir.is_dir():
        raise InputError(f"--out {out_dir} is a file.", "Pick a folder path for the release.")
    if not any(out_dir.iterdir()):
        return None
    manifest_path = out_dir / MANIFEST_FILENAME
    manifest = read_release_manifest(out_dir) if manifest_path.is_file() else {}
    if not is_release_manifest(manifest):
        raise InputError(
            f"--out {out_dir} already holds files that are not a commonlink release"
            + (f" (its {MANIFEST_FILENAME} was not written by `commonlink release build`)" if manifest_path.is_file() else "")
            + f": {_listing(foreign_entries(out_dir, {}))}.",
            "Pick a new or empty folder (commonlink never deletes files it did not write, --overwrite included).",
        )
    foreign = foreign_entries(out_dir, manifest["files"])
    if foreign:
        raise InputError(
            f"--out {out_dir} is a release, but also holds files its manifest does not list: {_listing(foreign)}.",
            "Move those files out of the folder (--overwrite replaces only what commonlink wrote), or pick another --out.",
        )
    if manifest.get("build_key") == build_key and not verify_release(out_dir):
        return ReleaseResult(
            out_dir=out_dir, kind=manifest.get("kind", "common_o"), splits=manifest.get("splits", {}),
            files=manifest.get("files", {}), figures=manifest.get("figures", {}),
            notes=["The folder already holds this exact release (same inputs and options); kept as is."], reused=True,
        )
    if not overwrite:
        raise InputError(
            f"--out {out_dir} already holds a different release ({manifest.get('name')!r} version {manifest.get('version')!r}).",
            "Pick another folder, or pass --overwrite to replace it.",
        )
    return None


def _listing(entries: list[str], shown: int = 20) -> str:
    more = len(entries) - shown
    return ", ".join(entries[:shown]) + (f" and {more} more" if more > 0 else "")


def swap_into_place(tmp_dir: Path, out_dir: Path) -> None:
    """Rename the finished build over ``out_dir`` (the old folder is moved aside first, then deleted)."""
    old = None
    if out_dir.exists():
        old = out_dir.parent / f".{out_dir.name}.old-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        os.rename(out_dir, old)
    try:
        os.rename(tmp_dir, out_dir)
    except BaseException:
        if old is not None:
            os.rename(old, out_dir)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def remove_stale_staging(out_dir: Path) -> list[Path]:
    """Remove the ``.OUT.building-*`` and ``.OUT.old-*`` folders that killed builds of ``out_dir`` left beside it.

    Folders named with the pid of a running process are kept (a build in progress); older names without a pid
    are from killed builds of earlier versions.
    """
    removed = []
    for kind in ("building", "old"):
        for folder in out_dir.parent.glob(f".{glob.escape(out_dir.name)}.{kind}-*"):
            tag = folder.name.rsplit(f".{kind}-", 1)[1]
            pid, _, rest = tag.partition("-")
            if rest and pid.isdigit() and (int(pid) == os.getpid() or pid_alive(int(pid))):
                continue
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


@contextlib.contextmanager
def stage_release(out_dir: Path) -> Iterator[Path]:
    """A fresh hidden staging folder beside ``out_dir``; swapped into place when the block ends normally,
    removed when it raises (or is interrupted). Staging folders of killed builds are removed first."""
    remove_stale_staging(out_dir)
    tmp_dir = out_dir.parent / f".{out_dir.name}.building-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp_dir.mkdir(parents=True)
    try:
        yield tmp_dir
        swap_into_place(tmp_dir, out_dir)
    except BaseException:
        shutil.rmtree(tmp_dir, ignore_errors=True)
        raise


def without_local_paths(value: Any) -> Any:
    """Absolute paths -> their last component: the card and manifest get published, local folder names should not."""
    if isinstance(value, dict):
        return {k: without_local_paths(v) for k, v in value.items()}
    if isinstance(value, list):
        return [without_local_paths(v) for v in value]
    if isinstance(value, str) and os.path.isabs(value):
        return os.path.basename(value.rstrip("/\\")) or value
    return value


__all__ = [
    "DEFAULT_RELEASE_OPTIONS", "RELEASE_KINDS", "ReleaseOptions", "ReleaseResult", "check_options", "foreign_entries", "hash_files", "is_release_manifest",
    "remove_stale_staging", "reuse_or_refuse", "stage_release", "swap_into_place",
    "verify_release", "without_local_paths",
]
