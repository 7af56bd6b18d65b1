"""What every release builder shares: its options, option checks, the staging folder and its atomic swap into place,
the file table of the manifest, reuse of an identical finished build, and publishable (path-free) records.

A build writes into a hidden folder beside ``--out`` and renames it into place only when complete, so a
killed build never leaves a half-written release where a finished one is expected.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import os
import shutil
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from commonlink import __version__, registry
from commonlink.errors import InputError
from commonlink.fileio import atomic_write_json, atomic_write_text, pid_alive, sha256_file
from commonlink.formats.meta import utc_now
from commonlink.formats.release import (
    CARD_FILENAME,
    DEFAULT_LICENSE,
    DEFAULT_VERSION,
    MANIFEST_FILENAME,
    check_license,
    check_name,
    check_version,
    manifest_units,
    read_release_manifest,
)
from commonlink.release.card_info import check_card_info
from commonlink.release.licences import DEFAULT_LICENCE_CHECK, check_licence_mode
from commonlink.release.parallel import check_workers
from commonlink.release.shards import DEFAULT_MAX_SHARD_BYTES

#: ``kind`` of the manifest of each release builder (the registered kinds).
RELEASE_KINDS = tuple(registry.KINDS)


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
    #: the publisher's answers to the datasheet questions a build cannot answer (``card_info.py``), as
    #: ``((key, answer), ...)``; ``--card-info FILE``
    card_info: tuple[tuple[str, str], ...] = ()
    #: ``--licence-check``: "refuse" a build whose images' or assets' licences the release licence cannot carry,
    #: or "warn" and build it (``release/licences.py``)
    licence_check: str = DEFAULT_LICENCE_CHECK
    #: processes that read, hash and verify the rows' images (``--workers``; None: every usable CPU); not
    #: recorded: the release is byte-identical whatever the number
    workers: int | None = None

    def __post_init__(self) -> None:
        check_options(license=self.license, version=self.version, name=self.name or None)
        check_licence_mode(self.licence_check)
        if self.workers is not None:
            check_workers(self.workers)
        if isinstance(self.card_info, Mapping):  # given as a dict: keep the frozen record hashable
            object.__setattr__(self, "card_info", tuple(check_card_info(self.card_info).items()))

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

    def card_fields(self) -> dict[str, Any]:
        """What every kind's card renderer takes from these options (and the toolkit version), as keywords."""
        return {
            "name": self.name,
            "version": self.version,
            "license": self.license,
            "toolkit_version": __version__,
            "card_info": dict(self.card_info),
        }

    def recorded(self) -> dict[str, Any]:
        """What the manifest's ``config`` (and so the build key) records of these options: what shapes the
        release's bytes and card; ``overwrite``, ``progress`` and ``catalog_root`` do not (nor card info when there
        is none, so builds without it keep their build key); ``workers`` neither."""
        recorded = {
            "name": self.name,
            "version": self.version,
            "license": self.license,
            "max_shard_bytes": int(self.max_shard_bytes),
        }
        if self.card_info:
            recorded["card_info"] = dict(self.card_info)
        if self.licence_check != DEFAULT_LICENCE_CHECK:
            recorded["licence_check"] = self.licence_check
        return recorded


def build_key_of(config: Mapping[str, Any], toolkit_version: str) -> str:
    """The key a finished build is recognised by: the toolkit version and the recorded configuration."""
    return hashlib.sha256(json.dumps([toolkit_version, config], sort_keys=True, default=str).encode()).hexdigest()


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
    return _entries(root, set(listed) | {MANIFEST_FILENAME})


def _entries(root: Path, keep: set[str]) -> list[str]:
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


#: What each part of a release records in the manifest (``parts``): rows, shard files and the Hub's two sizes.
PART_FIELDS = ("rows", "files", "num_bytes", "download_size")


def release_manifest(
    *,
    kind: str,
    part_type: str,
    parts: Mapping[str, Mapping[str, Any]],
    options: ReleaseOptions,
    seed: Any,
    build_key: str,
    config: Mapping[str, Any],
    stats: Mapping[str, Any],
    files: Mapping[str, dict],
    figures: Mapping[str, str] | None = None,
    toolkit_version: str,
) -> dict:
    """``manifest.json`` of a release, one shape for every kind: ``parts`` (``{name: {"rows", "files",
    "num_bytes", "download_size"}}``) are the kind's ``part_type`` ("split" for Common-O, "config" for association).
    Releases built before this shape list them under ``splits`` or ``configs``; readers go through
    :func:`commonlink.formats.release.manifest_units`, which reads all three."""
    return {
        "toolkit_version": toolkit_version,
        "name": options.name,
        "version": options.version,
        "kind": kind,
        "seed": seed,
        "build_key": build_key,
        "created": utc_now(),
        "config": dict(config),
        "part_type": part_type,
        "parts": {name: {k: info[k] for k in PART_FIELDS} for name, info in parts.items()},
        "stats": dict(stats),
        "figures": dict(figures or {}),
        "files": dict(files),
    }


def is_release_manifest(manifest: dict) -> bool:
    """Whether a manifest was written by ``release build`` (a kind, a build key and a file table)."""
    return (
        manifest.get("kind") in RELEASE_KINDS
        and isinstance(manifest.get("build_key"), str)
        and isinstance(manifest.get("files"), dict)
    )


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
            + (
                f" (its {MANIFEST_FILENAME} was not written by `commonlink release build`)"
                if manifest_path.is_file()
                else ""
            )
            + f": {_listing(foreign_entries(out_dir, {}))}.",
            "Pick a new or empty folder (commonlink never deletes files it did not write, --overwrite included).",
        )
    foreign = foreign_entries(out_dir, manifest["files"])
    if foreign:
        raise InputError(
            f"--out {out_dir} is a release, but also holds files its manifest does not list: {_listing(foreign)}.",
            "Move those files out of the folder (--overwrite replaces "
            "only what commonlink wrote), or pick another --out.",
        )
    problems = verify_release(out_dir)
    if manifest.get("build_key") == build_key and not problems:
        return ReleaseResult(
            out_dir=out_dir,
            kind=manifest.get("kind", "common_o"),
            splits=manifest_units(manifest),
            files=manifest.get("files", {}),
            figures=manifest.get("figures", {}),
            notes=["The folder already holds this exact release (same inputs and options); kept as is."],
            reused=True,
        )
    if not overwrite and manifest.get("build_key") == build_key:
        raise InputError(
            f"--out {out_dir} holds this release (same inputs and options), "
            f"but its files no longer match its manifest: {_listing(problems)}.",
            "Pass --overwrite to build it again (replacing the changed files), or restore those files.",
        )
    if not overwrite:
        raise InputError(
            f"--out {out_dir} already holds a different release "
            f"({manifest.get('name')!r} version {manifest.get('version')!r}).",
            "Pick another folder, or pass --overwrite to replace it.",
        )
    return None


def _listing(entries: list[str], shown: int = 20) -> str:
    more = len(entries) - shown
    return ", ".join(entries[:shown]) + (f" and {more} more" if more > 0 else "")


#: The marker file inside every staging folder a build makes (``.OUT.building-PID-TOKEN``, and the old release
#: moved aside as ``.OUT.old-PID-TOKEN``): the writer's pid, its process start time and the folder's token.
#: Clean-up removes only folders whose marker matches their name, so a user's folder that happens to match the
#: name pattern is never deleted; the start time tells a killed build from a live process that reused its pid.
STAGING_MARKER = ".commonlink-staging"


def process_start(pid: int) -> str | None:
    """When process ``pid`` started (clock ticks since boot, from ``/proc``), or None where unknown."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    fields_after_name = stat.rsplit(")", 1)[-1].split()
    return fields_after_name[19] if len(fields_after_name) > 19 else None  # field 22 of the whole line


def _staging_name(out_dir: Path, kind: str) -> tuple[Path, str]:
    token = uuid.uuid4().hex[:16]
    return out_dir.parent / f".{out_dir.name}.{kind}-{os.getpid()}-{token}", token


def _mark(folder: Path, token: str) -> None:
    atomic_write_json(
        folder / STAGING_MARKER, {"pid": os.getpid(), "started": process_start(os.getpid()), "token": token}
    )


class StrangerFilesError(InputError):
    """Something appeared in ``--out`` while the command ran: the swap refused, and kept it."""


def swap_into_place(tmp_dir: Path, out_dir: Path, *, found_at_start: list[str] | None = None) -> None:
    """Rename the finished build over ``out_dir``; the old folder is moved aside and deleted only when it holds
    nothing but what was there when the command started (``found_at_start``: its entries then, ``None``: it did
    not exist), i.e. only what the command was allowed to replace. The check is made on the folder once it has
    been renamed aside (so nothing can slip in after it); when something appeared, the old folder is put back as
    it is, stranger included, and a :class:`StrangerFilesError` names what appeared."""
    with contextlib.suppress(FileNotFoundError):
        (tmp_dir / STAGING_MARKER).unlink()  # the release itself carries no marker
    old = None
    if out_dir.exists():
        old, token = _staging_name(out_dir, "old")
        os.rename(out_dir, old)
        appeared = sorted(set(_entries(old, set())) - set(found_at_start or []))
        if appeared:
            _put_back(old, out_dir, appeared)
        with contextlib.suppress(OSError):  # unmarked, a leftover is kept (never deleted by guess)
            _mark(old, token)
    try:
        os.rename(tmp_dir, out_dir)
    except BaseException:
        if old is not None:
            with contextlib.suppress(FileNotFoundError):
                (old / STAGING_MARKER).unlink()
            os.rename(old, out_dir)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _put_back(old: Path, out_dir: Path, appeared: list[str]) -> None:
    try:
        os.rename(old, out_dir)
        kept = f"--out {out_dir} is left as it was"
    except OSError:  # yet another folder took the name meanwhile: ours stays aside, unmarked (never deleted)
        kept = f"what --out {out_dir} held is kept in {old}"
    raise StrangerFilesError(
        f"Files appeared in --out {out_dir} while this command ran, and commonlink never deletes files it did not "
        f"write: {_listing(appeared)}. Nothing was replaced; {kept}.",
        "Let whatever writes into that folder finish (or move those files out), then rerun the same command; or "
        "pick another --out.",
    )


def _is_stale_staging(folder: Path) -> bool:
    """Whether ``folder`` is a staging folder a build made (its marker matches its name) whose build is gone:
    its pid is not running, or runs a process started at another time (the pid was reused)."""
    marker_path = folder / STAGING_MARKER
    if folder.is_symlink() or not folder.is_dir() or marker_path.is_symlink() or not marker_path.is_file():
        return False
    try:
        marker = json.loads(marker_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if not isinstance(marker, dict):
        return False
    pid, token = marker.get("pid"), marker.get("token")
    if not (isinstance(pid, int) and isinstance(token, str) and token and folder.name.endswith(f"-{pid}-{token}")):
        return False
    if not pid_alive(pid):
        return True
    started = process_start(pid)
    return started is not None and marker.get("started") is not None and started != marker.get("started")


def remove_stale_staging(out_dir: Path) -> list[Path]:
    """Remove the ``.OUT.building-*`` and ``.OUT.old-*`` folders that killed builds of ``out_dir`` left beside it.

    Only folders carrying a build's marker (:data:`STAGING_MARKER`) that matches their name are removed, and
    only when that build is gone (see :func:`_is_stale_staging`); anything else with such a name is left alone.
    """
    removed = []
    for kind in ("building", "old"):
        for folder in out_dir.parent.glob(f".{glob.escape(out_dir.name)}.{kind}-*"):
            if _is_stale_staging(folder):
                shutil.rmtree(folder, ignore_errors=True)
                removed.append(folder)
    return removed


@contextlib.contextmanager
def stage_release(out_dir: Path) -> Iterator[Path]:
    """A fresh hidden, marked staging folder beside ``out_dir``; swapped into place when the block ends normally,
    removed when it raises (or is interrupted). Staging folders of killed builds are removed first. The swap
    replaces only what ``out_dir`` held when the block started (:func:`swap_into_place`): the caller checks that
    state first (empty, or a release whose manifest lists all of it)."""
    remove_stale_staging(out_dir)
    # what --out holds now (checked by the caller as replaceable: empty, or a release of only what it lists)
    found_at_start = _entries(out_dir, set()) if out_dir.is_dir() else None
    tmp_dir, token = _staging_name(out_dir, "building")
    tmp_dir.mkdir(parents=True)
    try:
        _mark(tmp_dir, token)
        yield tmp_dir
        swap_into_place(tmp_dir, out_dir, found_at_start=found_at_start)
    except BaseException:
        shutil.rmtree(tmp_dir, ignore_errors=True)
        raise


@dataclass
class StagedRelease:
    """What a kind's builder wrote into the staging folder (its shards and figures), for the engine to finish."""

    parts: dict[str, dict]  #: {split or config: {"rows", "files", "num_bytes", "download_size"}}
    stats: dict[str, Any]  #: the manifest's ``stats``
    card: str  #: the dataset card (README.md) text
    figures: dict[str, str] = field(default_factory=dict)


def build_staged_release(
    out_dir: Path,
    options: ReleaseOptions,
    *,
    kind: str,
    part_type: str,
    config: Mapping[str, Any],
    seed: Any,
    write: Callable[[Path], StagedRelease],
    notes: list[str] | None = None,
) -> ReleaseResult:
    """The build every kind shares: keep the finished release when ``out_dir`` holds this exact build (``config``
    hashed with the toolkit version), else refuse what may not be replaced, stage a fresh folder, let the kind
    ``write`` its parts into it, then add the card and the manifest and swap it into place. ``notes`` go on the
    result either way."""
    build_key = build_key_of(config, __version__)
    reused = reuse_or_refuse(out_dir, build_key, overwrite=options.overwrite)
    if reused is not None:
        reused.notes = list(notes) if notes is not None else reused.notes
        return reused
    with stage_release(out_dir) as tmp_dir:
        staged = write(tmp_dir)
        atomic_write_text(tmp_dir / CARD_FILENAME, staged.card)
        files = hash_files(tmp_dir)
        manifest = release_manifest(
            kind=kind,
            part_type=part_type,
            parts=staged.parts,
            options=options,
            seed=seed,
            build_key=build_key,
            config=config,
            stats=staged.stats,
            files=files,
            figures=staged.figures,
            toolkit_version=__version__,
        )
        atomic_write_json(tmp_dir / MANIFEST_FILENAME, manifest)
    return ReleaseResult(
        out_dir=out_dir,
        kind=kind,
        splits=manifest["parts"],
        files=files,
        figures=dict(staged.figures),
        notes=list(notes or []),
    )


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
    "DEFAULT_RELEASE_OPTIONS",
    "PART_FIELDS",
    "RELEASE_KINDS",
    "STAGING_MARKER",
    "StrangerFilesError",
    "ReleaseOptions",
    "ReleaseResult",
    "StagedRelease",
    "build_key_of",
    "build_staged_release",
    "check_options",
    "foreign_entries",
    "hash_files",
    "is_release_manifest",
    "process_start",
    "release_manifest",
    "remove_stale_staging",
    "reuse_or_refuse",
    "stage_release",
    "swap_into_place",
    "verify_release",
    "without_local_paths",
]
