"""Joining image catalogs (e.g. render shards from several machines, or photo batches) into one.

:func:`merge_catalogs` plans everything before it writes anything:

1. every record of every input catalog (and of the output catalog, when it exists already) is read;
2. records are de-duplicated by ``id`` and by ``sha256``: the same image described the same way is kept once;
   the same image described differently (other objects, scene, size...) is a *conflict*, and the merge is
   refused with the list of conflicts, before any file is touched;
3. every image must exist in its catalog folder; a missing one refuses the merge too;
4. images are copied (or hard-/symbolic-linked) into the output folder under their final names (nothing names
   them before step 6, and a re-run replaces a partial one) and, by default, checked
   against the record's sha256: hashed while copying, unless the record's file stamp (``extra.file_stamp``,
   size and mtime when the hash was taken; ingest writes it) still matches the file, then the recorded sha256 is
   trusted (``rehash=True`` hashes every file anyway). A copy keeps its source's mtime, so the stamp carries over
   to the merged catalog. An image whose relative path is already taken by another image is stored as
   ``<folder>/<id><suffix>`` instead;
5. files a record names in ``extra`` (:data:`SIDECAR_KEYS`: a render's instance mask and scene plan) come
   along with their image, so ``commonlink stats`` still finds the exact masks after a merge;
6. the files written are fsynced as one batch (not one fsync each), then ``catalog.jsonl`` is written,
   atomically.

An interrupted merge therefore leaves the output catalog as it was (plus some image files that the next run
finds already in place, or replaces when a kill left one half-written), and re-running the same merge changes
nothing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import hashlib
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from commonlink.errors import InputError, SchemaError
from commonlink.fileio import (
    fsync_files,
    make_temp_beside,
    naming_path,
    remove_stale_temp_files,
    safe_join,
    sha256_file,
)
from commonlink.formats.catalog import (
    FILE_STAMP_KEY,
    CatalogRecord,
    catalog_file,
    catalog_lock,
    iter_catalog,
    record_label_problem,
    stamp_matches,
    write_catalog,
)
from commonlink.progress import track

LINK_MODES = ("copy", "hardlink", "symlink")
#: Record fields that must agree for two records of the same image to be the same record.
IDENTITY_FIELDS = ("sha256", "objects", "source", "scene_id", "width", "height", "background", "view", "object_area")
_MAX_LISTED = 10
#: ``extra`` keys holding paths (relative to the catalog) of files that belong with a record's image.
SIDECAR_KEYS = ("mask", "plan")


@dataclass
class MergeReport:
    out_dir: str
    sources: list[str]
    link: str
    already_present: int = 0  #: records the output catalog held before
    added: int = 0  #: new records
    duplicates: int = 0  #: records skipped because an identical one was already taken
    images_written: int = 0  #: image files copied/linked
    images_in_place: int = 0  #: image files already present from an earlier (maybe interrupted) run
    hashes_reused: int = 0  #: images whose recorded sha256 was trusted (file stamp unchanged), not re-hashed
    renamed: list[dict] = field(default_factory=list)  #: {catalog, id, from, to} for paths that collided
    sidecars_written: int = 0  #: masks and plans copied with their images
    fell_back_to_copy: int = 0  #: hard links that crossed file systems and were copied instead

    @property
    def total(self) -> int:
        return self.already_present + self.added


@dataclass
class _Planned:
    record: CatalogRecord  #: as it will be written (path maybe changed)
    source_image: Path
    origin: str  #: "<catalog dir>, line n" for messages
    sidecars: list[tuple[Path, str]] = field(default_factory=list)  #: (source file, destination path in out)


class _Joiner:
    """:func:`safe_join` for many paths under one root, resolving each folder once: ``safe_join`` walks every
    component of every path (an lstat each), which was a third of a merge's time. A path that needs care (``..``,
    absolute, a symbolic link as the file itself) goes through ``safe_join`` whole, with its errors."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._folders: dict[str, Path] = {}

    def __call__(self, relative: str) -> Path:
        head, _, name = relative.rpartition("/")
        if not name or os.path.isabs(relative) or "\\" in relative or ".." in relative.split("/") or name == ".":
            return safe_join(self.root, relative)
        folder = self._folders.get(head)
        if folder is None:
            try:
                folder = self._folders[head] = safe_join(self.root, head or ".")
            except InputError:
                return safe_join(self.root, relative)  # the error names the whole path
        candidate = folder / name
        return safe_join(self.root, relative) if candidate.is_symlink() else candidate

    def source(self, relative: str, where: str, missing: list[str]) -> Path | None:
        """The file ``relative`` names in a catalog being merged (``where``: the line that names it), or None,
        listed in ``missing``, when it is not there; a path leaving the catalog is refused."""
        try:
            path = self(relative)
        except InputError as exc:
            fix = "Rebuild that catalog; its files must stay inside it."
            raise SchemaError(f"{where}: {exc.problem}", fix) from None
        if not path.is_file():
            missing.append(f"{path} ({where})")
            return None
        return path


def _differences(a: CatalogRecord, b: CatalogRecord) -> list[str]:
    return [
        f"{name}: {getattr(a, name)!r} vs {getattr(b, name)!r}"
        for name in IDENTITY_FIELDS
        if getattr(a, name) != getattr(b, name)
    ]


def merge_catalogs(
    sources: list[str | os.PathLike],
    out_dir: str | os.PathLike,
    *,
    link: str = "copy",
    verify: bool = True,
    rehash: bool = False,
    progress: bool = False,
) -> MergeReport:
    """Merge ``sources`` into ``out_dir`` (created, or extended when it is a catalog already).

    ``verify`` checks every image against its record's sha256, trusting it where the record's file stamp still
    matches the file; ``rehash`` hashes every image even then."""
    if link not in LINK_MODES:
        raise InputError(f"Unknown link mode {link!r}.", f"Use one of: {', '.join(LINK_MODES)}.")
    if not sources:
        raise InputError("No catalogs to merge.", "Name one or more catalog folders.")
    out = Path(out_dir)
    out_resolved = out.resolve()
    unique_sources: list[Path] = []
    for src in map(Path, sources):
        if not catalog_file(src).is_file():
            raise InputError(
                f"{src} is not an image catalog (no catalog.jsonl).",
                "Pass folders written by `commonlink ingest` or `commonlink synth`.",
            )
        if src.resolve() not in [s.resolve() for s in unique_sources] and src.resolve() != out_resolved:
            unique_sources.append(src)
    report = MergeReport(out_dir=str(out_resolved), sources=[str(s.resolve()) for s in unique_sources], link=link)
    with catalog_lock(out, what="commonlink catalog merge"):
        return _merge_locked(unique_sources, out, report, link=link, verify=verify, rehash=rehash, progress=progress)


def _merge_locked(
    unique_sources: list[Path], out: Path, report: MergeReport, *, link: str, verify: bool, rehash: bool, progress: bool
) -> MergeReport:
    existing = list(iter_catalog(out)) if catalog_file(out).is_file() else []
    report.already_present = len(existing)
    planned, conflicts, missing = _plan(existing, out, unique_sources, report)
    if conflicts:
        listed = "\n  ".join(conflicts[:_MAX_LISTED]) + (
            f"\n  ... and {len(conflicts) - _MAX_LISTED} more" if len(conflicts) > _MAX_LISTED else ""
        )
        raise InputError(
            f"{len(conflicts)} conflicting record(s): the same image is described differently:\n  {listed}",
            "Relabel or remove one record of each pair (or leave one catalog out), then merge again. "
            "Nothing was written.",
        )
    if missing:
        listed = "\n  ".join(missing[:_MAX_LISTED]) + (
            f"\n  ... and {len(missing) - _MAX_LISTED} more" if len(missing) > _MAX_LISTED else ""
        )
        raise InputError(
            f"{len(missing)} image file(s) named in the catalogs are missing:\n  {listed}",
            "Copy the images back, or rebuild that catalog. Nothing was written.",
        )

    join = _Joiner(out)
    destinations = [join(item.record.path) for item in planned]
    for folder in {dest.parent for dest in destinations}:
        folder.mkdir(parents=True, exist_ok=True)
        remove_stale_temp_files(folder)  # left by a killed merge (we hold the catalog lock)
    written: list[Path] = []  # fsynced as one batch before the catalog names them
    for item, dest in track(
        zip(planned, destinations), "Merging images", total=len(planned), unit="images", disable=not progress
    ):
        _transfer(item, dest, link=link, verify=verify, rehash=rehash, report=report, written=written)
        for source_file, rel in item.sidecars:
            _copy_sidecar(source_file, join(rel), report, written)
    fsync_files(written)
    write_catalog(out, [*existing, *(item.record for item in planned)])
    report.added = len(planned)
    return report


def _plan(
    existing: list[CatalogRecord], out: Path, sources: list[Path], report: MergeReport
) -> tuple[list[_Planned], list[str], list[str]]:
    by_id = {r.id: (r, f"{out}") for r in existing}
    by_sha = {r.sha256: (r, f"{out}") for r in existing}
    used_paths = {PurePosixPath(r.path).as_posix(): r.sha256 for r in existing}
    sidecar_sources: dict[str, Path] = {}  # destination path -> the source file that claimed it
    for r in existing:  # the output's own masks and plans are claimed too: a later merge must not overwrite them
        for key in SIDECAR_KEYS:
            if isinstance(r.extra.get(key), str):
                sidecar_sources[PurePosixPath(r.extra[key]).as_posix()] = out / r.extra[key]
    planned: list[_Planned] = []
    conflicts: list[str] = []
    missing: list[str] = []
    for src in sources:
        join = _Joiner(src)
        for lineno, record in enumerate(iter_catalog(src), start=1):
            origin = f"{src}, line {lineno}"
            if problem := record_label_problem(record):  # would break the line of a card or prompt it is shown on
                raise SchemaError(
                    f"{origin}: {problem}.",
                    "Fix that label in the catalog (one line, no control characters), then merge again.",
                )
            same = by_id.get(record.id) or by_sha.get(record.sha256)
            if same is not None:
                other, other_origin = same
                diffs = _differences(other, record)
                if other.id != record.id:
                    diffs.insert(0, f"id: {other.id!r} vs {record.id!r}")
                    # Same bytes under two ids: harmless when everything else agrees.
                    diffs = diffs if len(diffs) > 1 else []
                if diffs:
                    conflicts.append(f"image {record.id} ({origin}) vs ({other_origin}): " + "; ".join(diffs))
                else:
                    report.duplicates += 1
                continue
            source_image = join.source(record.path, origin, missing)
            if source_image is None:
                continue
            rel = PurePosixPath(record.path).as_posix()
            if used_paths.get(rel, record.sha256) != record.sha256:
                moved = (PurePosixPath(rel).parent / f"{record.id}{PurePosixPath(rel).suffix}").as_posix()
                if moved in used_paths:
                    moved = (
                        PurePosixPath(rel).parent / f"{record.id}-{record.sha256[:12]}{PurePosixPath(rel).suffix}"
                    ).as_posix()
                report.renamed.append({"catalog": str(src), "id": record.id, "from": rel, "to": moved})
                rel = moved
            used_paths[rel] = record.sha256
            extra = dict(record.extra)
            sidecars = _plan_sidecars(record, extra, join, origin, used_paths, sidecar_sources, missing)
            merged = dataclasses.replace(record, path=rel, extra=extra)  # validated when read
            planned.append(_Planned(record=merged, source_image=source_image, origin=origin, sidecars=sidecars))
            by_id[record.id] = (merged, origin)
            by_sha[record.sha256] = (merged, origin)
    return planned, conflicts, missing


def _plan_sidecars(
    record: CatalogRecord,
    extra: dict,
    join: _Joiner,
    origin: str,
    used_paths: dict[str, str],
    sidecar_sources: dict[str, Path],
    missing: list[str],
) -> list[tuple[Path, str]]:
    """Where a record's masks and scene plan go in the output; updates ``extra`` to point there and claims the
    destinations in ``sidecar_sources`` (a file of other bytes already there makes it take a name of its own)."""
    sidecars: list[tuple[Path, str]] = []
    for key in SIDECAR_KEYS:
        value = extra.get(key)
        if not isinstance(value, str):
            continue
        source_file = join.source(value, f"extra.{key} of {origin}", missing)
        if source_file is None:
            continue
        dest_rel = PurePosixPath(value).as_posix()
        claimed = sidecar_sources.get(dest_rel)
        if (claimed is not None and not _same_bytes(claimed, source_file)) or (
            claimed is None and dest_rel in used_paths
        ):
            dest_rel = (PurePosixPath(dest_rel).parent / f"{record.id}-{PurePosixPath(dest_rel).name}").as_posix()
        sidecar_sources[dest_rel] = source_file
        extra[key] = dest_rel
        sidecars.append((source_file, dest_rel))
    return sidecars


def _same_bytes(a: Path, b: Path) -> bool:
    """Same file, or two files with the same content (a scene plan shared by the views of a scene)."""
    if a == b:
        return True
    try:
        return a.stat().st_size == b.stat().st_size and sha256_file(a) == sha256_file(b)
    except OSError:
        return False


def _transfer(
    item: _Planned, dest: Path, *, link: str, verify: bool, rehash: bool, report: MergeReport, written: list[Path]
) -> None:
    """Put one image at its path in the output; fsynced later with the whole batch.

    Written under its final name, not a temporary one (a rename per image was most of a merge's cost beyond a
    plain copy): no record names the path until ``catalog.jsonl`` is written, after the batch's fsync, so a
    reader never sees a partial image; a killed merge may leave one, which the next run finds not in place and
    replaces. Whatever is at the path already is unlinked first, never written through (it may be a link into
    another catalog)."""
    expected = item.record.sha256
    source_stat = os.stat(item.source_image)
    trusted = not rehash and stamp_matches(item.record, source_stat)  # the recorded sha256 still describes the file
    present = _already_in_place(item, dest, source_stat, trusted=trusted)
    if present:
        report.images_in_place += 1
        return
    if present is not None:
        with contextlib.suppress(FileNotFoundError):
            dest.unlink()
    try:
        actual = _put(item.source_image, dest, source_stat, link=link, hashing=verify and not trusted, report=report)
        if verify and not trusted:
            actual = actual or sha256_file(item.source_image)
            if actual != expected:
                raise SchemaError(
                    f"{item.origin}: the image {item.source_image} does not match the record's sha256 "
                    f"({actual[:16]}... vs {expected[:16]}...): it was changed or damaged after the catalog was "
                    "written.",
                    "Rebuild that catalog (or restore the image); pass --no-verify only if you know the file is right.",
                )
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            dest.unlink()
        raise
    report.hashes_reused += trusted and verify
    if verify and link != "symlink":  # a copy keeps its source's mtime: the stamp describes it too
        item.record.extra[FILE_STAMP_KEY] = [source_stat.st_size, source_stat.st_mtime_ns]
    written.append(dest)
    report.images_written += 1


def _already_in_place(item: _Planned, dest: Path, source_stat: os.stat_result, *, trusted: bool) -> bool | None:
    """The image is there already: the source itself, or a copy left by an interrupted run (same stamp when the
    hash is trusted, else the same sha256). None when nothing is at the path (not even a dangling link)."""
    try:
        dest_stat = os.stat(dest)
    except FileNotFoundError:
        return None if not os.path.lexists(dest) else False
    if (dest_stat.st_dev, dest_stat.st_ino) == (source_stat.st_dev, source_stat.st_ino):
        return True
    if dest.is_symlink():
        return False
    if trusted and stamp_matches(item.record, dest_stat):
        return True
    return sha256_file(dest) == item.record.sha256


def _put(
    source: Path, dest: Path, source_stat: os.stat_result, *, link: str, hashing: bool, report: MergeReport
) -> str | None:
    """Copy or link ``source`` to the free path ``dest``; returns the sha256 when it was computed on the way."""
    if link == "symlink":
        os.symlink(source.resolve(), dest)
        return None
    if link == "hardlink":
        try:
            os.link(source, dest)
            return None
        except OSError as exc:
            if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK):
                raise
            report.fell_back_to_copy += 1  # other file system: copy instead
            hashing = True
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o600)
    return _copy_into(source, fd, dest, source_stat, hashing=hashing)


def _copy_into(source: Path, fd: int, tmp: Path, source_stat: os.stat_result, *, hashing: bool) -> str | None:
    """Copy ``source``'s bytes, permissions and times into the open file ``fd`` (``tmp``) and close it (not fsynced:
    the caller fsyncs the batch); returns the sha256 of the bytes when ``hashing``."""
    digest = hashlib.sha256() if hashing else None
    times = (source_stat.st_atime_ns, source_stat.st_mtime_ns)
    with_fd = os.utime in os.supports_fd and hasattr(os, "fchmod")
    try:
        with open(source, "rb") as fin:
            while chunk := fin.read(1 << 20):
                if digest is not None:
                    digest.update(chunk)
                view = memoryview(chunk)
                while view:
                    try:
                        view = view[os.write(fd, view) :]
                    except OSError as exc:  # a full disk names no file: name the one being made
                        raise naming_path(exc, tmp) from exc
        if with_fd:
            os.fchmod(fd, stat.S_IMODE(source_stat.st_mode))
            os.utime(fd, ns=times)
    finally:
        os.close(fd)
    if not with_fd:  # Windows
        os.chmod(tmp, stat.S_IMODE(source_stat.st_mode))
        os.utime(tmp, ns=times)
    return digest.hexdigest() if digest is not None else None


def _copy_sidecar(src: Path, dest: Path, report: MergeReport, written: list[Path]) -> None:
    """Copy a mask or plan next to its merged image (atomically; skipped when identical bytes are there)."""
    if dest.is_file() and (dest.resolve() == src.resolve() or sha256_file(dest) == sha256_file(src)):
        return
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = make_temp_beside(dest)
    try:
        _copy_into(src, fd, Path(tmp_name), os.stat(src), hashing=False)
        os.replace(tmp_name, dest)
        written.append(dest)
        report.sidecars_written += 1
    finally:
        if os.path.exists(tmp_name):
            os.unlink(tmp_name)
