"""Real-photo ingestion: photos + a label manifest -> an image catalog (docs/formats.md).

For every manifest line the photo is checked (inside the photos folder, on disk, labelled with known object
names, decodable, big enough, not a duplicate), turned upright with its EXIF orientation, stripped of all
metadata and stored in the catalog at its original resolution (:mod:`commonlink.catalog.photo_cleaning` says
how each format is encoded).

The image id is the first 16 hex characters of the stored file's sha256. Each record keeps, in ``extra``,
the source file, its sha256, size and modification time and the perceptual hash, so re-running skips known
photos without decoding them, and adding photos and re-running adds only the new ones. Work is saved every
``checkpoint_every`` changes by appending to a journal with one fsync a batch, and folded into ``catalog.jsonl``
(rewritten atomically) with a bounded total cost (:mod:`commonlink.catalog.ingest_log`), at the end and when
the run is interrupted; a run killed outright leaves a consistent catalog and a journal that the next run
replays, so the finished work is kept.

The report types live in :mod:`commonlink.catalog.ingest_report`, the near-duplicate index in
:mod:`commonlink.catalog.phash_index`.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from PIL import Image

from commonlink.catalog.ingest_log import CatalogJournal, journal_file, replay_journal
from commonlink.catalog.ingest_report import (
    REASONS,
    REPORT_FILENAME,
    IngestReport,
    NearDuplicatePair,
    Refusal,
)
from commonlink.catalog.labels import ManifestEntry, read_manifest
from commonlink.catalog.phash_index import PerceptualHashIndex
from commonlink.catalog.photo_cleaning import CleanImage, clean_image
from commonlink.catalog.vocabulary import Vocabulary, likely_typos, normalise_name
from commonlink.constants import DEFAULT_MIN_PIXELS
from commonlink.errors import CommonlinkError, InputError
from commonlink.fileio import (
    atomic_write_bytes,
    atomic_write_json,
    remove_stale_temp_files,
    safe_join,
    sha256_bytes,
)
from commonlink.formats.catalog import (
    ATTRIBUTION_FIELDS,
    FILE_STAMP_KEY,
    CatalogRecord,
    catalog_file,
    catalog_lock,
    file_stamp,
    iter_catalog,
)
from commonlink.images import open_image
from commonlink.progress import track

IMAGES_SUBDIR = "images"
DEFAULT_NEAR_DUPLICATE_DISTANCE = 4
DEFAULT_CHECKPOINT_EVERY = 100
#: Suffixes looked at when listing photos that are on disk but not in the manifest.
PHOTO_SUFFIXES = frozenset(
    {".jpg", ".jpeg", ".png", ".webp", ".heic", ".heif", ".avif", ".tif", ".tiff", ".bmp", ".gif"}
)


# ------------------------------------------------------------------------------------------------------
# Ingestion
# ------------------------------------------------------------------------------------------------------
def default_scene(file: str, image_id: str) -> str:
    """Scene id when the manifest gives none: the photo's folder; a top-level photo is a scene of its own,
    named by its image id (stable when the file is renamed)."""
    parent = str(PurePosixPath(file).parent)
    return parent if parent not in ("", ".") else f"photo-{image_id}"


def build_vocabulary(entries: list[ManifestEntry], existing: list[CatalogRecord]) -> Vocabulary:
    """The vocabulary used without ``--vocabulary``: every name in the manifest and the existing catalog."""
    vocab = Vocabulary()
    vocab.update(name for record in existing for name in record.objects)
    vocab.update(name for entry in entries for name in entry.objects if normalise_name(name))
    return vocab


def ingest_photos(
    photos_dir: str | os.PathLike,
    manifest: str | os.PathLike,
    catalog_dir: str | os.PathLike,
    *,
    vocabulary: Vocabulary | str | os.PathLike | None = None,
    min_pixels: int = DEFAULT_MIN_PIXELS,
    near_duplicate_distance: int = DEFAULT_NEAR_DUPLICATE_DISTANCE,
    allow_near_duplicates: bool = False,
    checkpoint_every: int = DEFAULT_CHECKPOINT_EVERY,
    progress: bool = False,
) -> IngestReport:
    """Ingest the photos a manifest lists into ``catalog_dir``; returns the report (also written to disk).

    ``vocabulary`` is a :class:`Vocabulary`, a vocabulary file, or None (then the names in the manifest and
    the existing catalog are the vocabulary, and misspellings cannot be refused, only flagged as
    ``possible_typos``).
    """
    photos_root = Path(photos_dir)
    catalog_root = Path(catalog_dir)
    if not photos_root.is_dir():
        raise InputError(f"Photos folder not found: {photos_root}", "Pass the folder that holds your photos.")
    if photos_root.resolve() == catalog_root.resolve():
        raise InputError(
            "The catalog folder (--out) is the photos folder.", "Write the catalog to a folder of its own."
        )
    if min_pixels < 0 or near_duplicate_distance < 0 or checkpoint_every < 1:
        raise InputError(
            "--min-pixels and --near-duplicate-distance must be >= 0, --checkpoint-every >= 1.",
            "Pass non-negative numbers.",
        )
    entries = read_manifest(manifest)
    if not entries:
        raise InputError(f"The manifest {manifest} lists no photos.", "Add one line per photo: file,objects.")

    if vocabulary is None:
        vocab, vocab_note = (
            None,
            "names in the manifest and the existing catalog (no vocabulary file: typos cannot be refused)",
        )
    elif isinstance(vocabulary, Vocabulary):
        vocab, vocab_note = vocabulary, f"given ({len(vocabulary)} names)"
    else:
        vocab, vocab_note = Vocabulary.from_file(vocabulary), str(Path(vocabulary).resolve())
    with catalog_lock(catalog_root, what="commonlink ingest"):
        return _ingest_locked(
            photos_root,
            Path(manifest),
            catalog_root,
            entries,
            vocab,
            vocab_note,
            min_pixels,
            near_duplicate_distance,
            allow_near_duplicates,
            checkpoint_every,
            progress,
        )


def _ingest_locked(
    photos_root: Path,
    manifest: Path,
    catalog_root: Path,
    entries: list[ManifestEntry],
    vocab: Vocabulary | None,
    vocab_note: str,
    min_pixels: int,
    near_duplicate_distance: int,
    allow_near_duplicates: bool,
    checkpoint_every: int,
    progress: bool,
) -> IngestReport:
    remove_stale_temp_files(catalog_root / IMAGES_SUBDIR)  # half-written images of a killed run (we hold the lock)
    existing = _load_catalog(catalog_root, checkpoint_every)
    names_from_data = vocab is None
    if vocab is None:
        vocab = build_vocabulary(entries, existing)

    report = IngestReport(
        photos_dir=str(photos_root.resolve()),
        manifest=str(manifest.resolve()),
        catalog_dir=str(catalog_root.resolve()),
        options={
            "min_pixels": min_pixels,
            "near_duplicate_distance": near_duplicate_distance,
            "allow_near_duplicates": allow_near_duplicates,
            "checkpoint_every": checkpoint_every,
        },
        vocabulary=vocab_note,
    )
    run = _IngestRun(
        photos_root,
        catalog_root,
        entries,
        existing,
        vocab,
        report,
        min_pixels,
        near_duplicate_distance,
        allow_near_duplicates,
        checkpoint_every,
    )
    run.execute(progress=progress)
    report.unlisted = _unlisted_photos(photos_root, entries, exclude=[catalog_root, manifest])
    report.folder_scenes = _large_folder_scenes(entries, run.records.values())
    if names_from_data:
        counts = Counter(name for record in run.records.values() for name in record.objects)
        report.possible_typos = likely_typos(dict(counts))
    report.catalog_size = len(run.records)
    atomic_write_json(catalog_root / REPORT_FILENAME, report.to_json())
    return report


#: A scene taken from a folder (no ``scene`` in the manifest) with this many photos or more is worth a warning: two
#: photos of one scene are never paired, so a folder of unrelated photos loses most of its pairs.
LARGE_FOLDER_SCENE = 10


def _large_folder_scenes(entries: list[ManifestEntry], records) -> dict[str, int]:
    """Folder -> photo count, for scenes that came from a folder name alone and hold many photos."""
    undeclared = {entry.file for entry in entries if entry.scene is None}
    folders = {str(PurePosixPath(file).parent) for file in undeclared} - {"", "."}
    counts = Counter(record.scene_id for record in records if record.scene_id in folders)
    return {folder: n for folder, n in sorted(counts.items()) if n >= LARGE_FOLDER_SCENE}


def _load_catalog(catalog_root: Path, batch: int) -> list[CatalogRecord]:
    """The catalog's records, with a killed run's journal replayed and folded in (so this run starts clean)."""
    records = {r.id: r for r in iter_catalog(catalog_root)} if catalog_file(catalog_root).is_file() else {}
    if journal_file(catalog_root).is_file():
        replay_journal(catalog_root, records)
        CatalogJournal(catalog_root, len(records), batch=batch).fold(records)
    return list(records.values())


@dataclass
class _Incoming:
    """A photo that passed the checks on its file, ready to be stored: its manifest line, canonical labels and
    scene, the facts of its source file, and the cleaned image."""

    entry: ManifestEntry
    objects: list[str]
    scene: str | None
    source_sha: str
    stat: os.stat_result
    clean: CleanImage


class _IngestRun:
    """State of one ingestion run (kept in one place so checkpoints see a consistent picture)."""

    def __init__(
        self,
        photos_root: Path,
        catalog_root: Path,
        entries: list[ManifestEntry],
        existing: list[CatalogRecord],
        vocab: Vocabulary,
        report: IngestReport,
        min_pixels: int,
        near_distance: int,
        allow_near: bool,
        checkpoint_every: int,
    ):
        self.photos_root, self.catalog_root, self.entries = photos_root, catalog_root, entries
        self.vocab, self.report = vocab, report
        self.min_pixels, self.near_distance, self.allow_near = min_pixels, near_distance, allow_near
        self.checkpoint_every = checkpoint_every
        self.records: dict[str, CatalogRecord] = {r.id: r for r in existing}  # insertion order = catalog order
        self.by_source_sha = {r.extra["source_sha256"]: r for r in existing if r.extra.get("source_sha256")}
        # Photos are known by (photos folder, path in it): two batches may both hold an IMG_0001.jpg.
        self.here = str(photos_root.resolve())
        self.by_source = {_source_key(r): r for r in existing if r.extra.get("source_file")}
        self.manifest_files = {e.file for e in entries}
        self.phashes = PerceptualHashIndex()
        for r in existing:
            if r.extra.get("phash"):
                self.phashes.add(r.extra["phash"], self._display(r), r.id)
        self.claimed: dict[str, str] = {}  # source sha256 -> manifest file that claimed it in this run
        self.seen_files: dict[str, int] = {}  # manifest file -> first line
        self.replaced_paths: list[str] = []  # image files of records replaced by a changed photo
        self.journal = CatalogJournal(catalog_root, len(existing), batch=checkpoint_every)

    # -- driver ------------------------------------------------------------------------------------------
    def execute(self, *, progress: bool) -> None:
        try:
            for entry in track(self.entries, "Ingesting photos", unit="photos", disable=not progress):
                refusal = self._ingest_one(entry)
                if refusal is not None:
                    self.report.refused.append(refusal)
                self.journal.checkpoint(self.records)
        finally:
            # Also on Ctrl-C or an unexpected error: every record in memory has its image on disk already.
            self.journal.flush()
            if self.journal.logged or not catalog_file(self.catalog_root).is_file():
                self.journal.fold(self.records)
        self._remove_replaced_images()

    def _remove_replaced_images(self) -> None:
        in_use = {r.path for r in self.records.values()}
        for rel in self.replaced_paths:
            if rel not in in_use:
                (self.catalog_root / rel).unlink(missing_ok=True)

    # -- one manifest line -----------------------------------------------------------------------------
    def _ingest_one(self, entry: ManifestEntry) -> Refusal | None:
        def refuse(reason: str, detail: str, **kw) -> Refusal:
            return Refusal(file=entry.file, line=entry.line, reason=reason, detail=detail, **kw)

        if entry.file in self.seen_files:
            return refuse(
                "listed_twice",
                f"also listed on line {self.seen_files[entry.file]}; the first line was used. "
                "Merge the two lines into one.",
            )
        self.seen_files[entry.file] = entry.line
        try:
            path = safe_join(self.photos_root, entry.file)
        except InputError as exc:
            return refuse("path_escapes", f"{exc.problem} {exc.fix}")
        if not path.is_file():
            return refuse("missing", f"{path} does not exist. Fix the file name in the manifest or copy the photo in.")
        objects, refusal = self._canonical_objects(entry, refuse)
        if refusal is not None:
            return refusal
        scene = entry.scene  # None: decided once the image id is known (default_scene)

        stat = path.stat()
        known = self.by_source.get((self.here, entry.file))
        if (
            known is not None
            and known.extra.get("source_size") == stat.st_size
            and known.extra.get("source_mtime_ns") == stat.st_mtime_ns
        ):
            # Fast path: the file is unchanged since the last run; no hashing, no decoding.
            self.claimed[known.extra.get("source_sha256", "")] = entry.file
            self._refresh_labels(known, entry, objects, scene)
            return None
        data = path.read_bytes()
        source_sha = sha256_bytes(data)
        if source_sha in self.claimed:
            return refuse(
                "exact_duplicate",
                f"same bytes as {self.claimed[source_sha]!r}. Remove one of the two.",
                other=self.claimed[source_sha],
            )
        known = self.by_source_sha.get(source_sha)
        if known is not None:
            if self._is_same_photo(known, entry.file):
                # The same photo (maybe moved or renamed): keep the record, refresh labels and file facts.
                self.claimed[source_sha] = entry.file
                moved_from = self._update_source(known, entry.file, stat)
                self._refresh_labels(known, entry, objects, scene, moved_from=moved_from)
                return None
            other = self._display(known)
            return refuse(
                "exact_duplicate",
                f"same bytes as {other!r}, already in the catalog. Remove one of the two.",
                other=other,
            )

        try:
            img = open_image(data, what=entry.file)
            if img.width * img.height < self.min_pixels:
                return refuse(
                    "too_small",
                    f"{img.width}x{img.height} = {img.width * img.height:,} pixels, under the "
                    f"minimum of {self.min_pixels:,}. Use a larger photo or lower --min-pixels.",
                )
            clean = clean_image(img)
        except (InputError, OSError, ValueError) as exc:
            if isinstance(exc.__cause__, (Image.DecompressionBombError, Image.DecompressionBombWarning)):
                return refuse("too_large", f"{exc.problem} {exc.fix}")
            problem = exc.problem if isinstance(exc, CommonlinkError) else f"{entry.file}: cannot decode ({exc})"
            return refuse("corrupt", f"{problem} Re-export the photo or remove it from the manifest.")
        return self._store(_Incoming(entry, objects, scene, source_sha, stat, clean), refuse)

    def _store(self, photo: _Incoming, refuse) -> Refusal | None:
        """Duplicate checks on the cleaned image, then write it and its record."""
        entry, clean, source_sha = photo.entry, photo.clean, photo.source_sha
        digest = sha256_bytes(clean.data)
        image_id = digest[:16]
        previous = self.by_source.get((self.here, entry.file))  # an older version of this very photo, if any
        if previous is not None and previous.id == image_id:
            # Only metadata changed (e.g. GPS edited): same stored image, refresh the file facts.
            self.by_source_sha.pop(previous.extra.get("source_sha256", ""), None)
            self.by_source_sha[source_sha] = previous
            self.claimed[source_sha] = entry.file
            previous.extra["source_sha256"] = source_sha
            self._update_source(previous, entry.file, photo.stat)
            self._refresh_labels(previous, entry, photo.objects, photo.scene)
            return None
        if image_id in self.records:
            other = self._display(self.records[image_id])
            return refuse(
                "exact_duplicate",
                f"same pixels as {other!r} once metadata is removed. Remove one of the two.",
                other=other,
            )
        # An edited photo is not a near-duplicate of its own older version.
        near = self.phashes.nearest(clean.phash, exclude=previous.id if previous is not None else None)
        if near is not None and near[0] <= self.near_distance:
            distance, other_file, other_id = near
            self.report.near_duplicates.append(
                NearDuplicatePair(other_file, other_id, entry.file, image_id, distance, kept_both=self.allow_near)
            )
            if not self.allow_near:
                other = self.records.get(other_id)
                if entry.scene is not None and other is not None and other.scene_id == entry.scene:
                    # Views of one scene shot from nearly the same spot look alike; they are never paired anyway.
                    return refuse(
                        "near_duplicate",
                        f"perceptual hash within {distance} bits of {other_file!r}, which the manifest declares as "
                        f"another view of the same scene {entry.scene!r} (views {other.view!r} and {entry.view!r}). "
                        "Pass --allow-near-duplicates to keep both views (two views of one scene are never paired "
                        "with each other), or remove one.",
                        other=other_file,
                    )
                return refuse(
                    "near_duplicate",
                    f"perceptual hash within {distance} bits of {other_file!r}. Remove one, "
                    "or pass --allow-near-duplicates to keep both.",
                    other=other_file,
                )

        record = self._write_image(photo, digest)
        if previous is not None:
            # The photo under this name changed since the last run: the new version replaces the old record.
            self.records.pop(previous.id, None)
            self.journal.drop(previous.id)
            self.by_source_sha.pop(previous.extra.get("source_sha256", ""), None)
            self.phashes.remove(previous.id)
            self.replaced_paths.append(previous.path)
            self.report.updated.append(
                {"file": entry.file, "id": image_id, "change": f"photo changed (was {previous.id})"}
            )
        else:
            self.report.added.append({"file": entry.file, "id": image_id})
        self.records[image_id] = record
        self.by_source[(self.here, entry.file)] = record
        self.by_source_sha[source_sha] = record
        self.claimed[source_sha] = entry.file
        self.phashes.add(clean.phash, entry.file, image_id)
        self.journal.set(record)
        return None

    def _write_image(self, photo: _Incoming, digest: str) -> CatalogRecord:
        """Write the cleaned image into the catalog and make its record (not yet added to the run)."""
        entry, clean, stat = photo.entry, photo.clean, photo.stat
        image_id = digest[:16]
        rel_path = f"{IMAGES_SUBDIR}/{image_id}{clean.suffix}"
        image_file = self.catalog_root / rel_path
        atomic_write_bytes(image_file, clean.data, fsync=False)  # image first: a record never lacks its file
        self.journal.image_written(image_file)  # made durable with its batch, before the batch's records
        stamp = file_stamp(image_file)  # lets `catalog merge` trust sha256 while the file is unchanged
        return CatalogRecord(
            id=image_id,
            path=rel_path,
            objects=photo.objects,
            source="real",
            scene_id=photo.scene or default_scene(entry.file, image_id),
            width=clean.width,
            height=clean.height,
            sha256=digest,
            background=entry.background,
            view=entry.view,
            license=entry.license,
            author=entry.author,
            source_url=entry.source_url,
            extra={
                "source_dir": self.here,
                "source_file": entry.file,
                "source_sha256": photo.source_sha,
                "source_size": stat.st_size,
                "source_mtime_ns": stat.st_mtime_ns,
                "source_format": clean.source_format,
                "phash": clean.phash,
                FILE_STAMP_KEY: stamp,
                **({"manifest": entry.extra} if entry.extra else {}),
            },
        )

    def _canonical_objects(self, entry: ManifestEntry, refuse) -> tuple[list[str], Refusal | None]:
        if not entry.objects:
            return [], refuse(
                "no_objects", "the objects column is empty. List the objects in the photo, separated by ';'."
            )
        objects: list[str] = []
        unknown: dict[str, list[str]] = {}
        for name in entry.objects:
            canonical = self.vocab.canonical(name)
            if canonical is None:
                unknown[name] = self.vocab.suggest(name)
            elif canonical not in objects:
                objects.append(canonical)
        if unknown:
            parts = [
                f"{name!r} (did you mean {' or '.join(repr(s) for s in sugg)}?)"
                if sugg
                else f"{name!r} (no close name)"
                for name, sugg in unknown.items()
            ]
            return [], refuse(
                "unknown_object",
                f"unknown object name(s): {', '.join(parts)}. Fix the manifest or add the name to the vocabulary file.",
                suggestions=unknown,
            )
        return objects, None

    def _refresh_labels(
        self,
        record: CatalogRecord,
        entry: ManifestEntry,
        objects: list[str],
        scene: str | None,
        moved_from: str | None = None,
    ) -> None:
        """Bring a known photo's labels up to date with the manifest; count it as updated or unchanged."""
        scene = scene or default_scene(entry.file, record.id)
        changes = [
            name
            for name, old, new in (
                ("objects", record.objects, objects),
                ("scene", record.scene_id, scene),
                ("background", record.background, entry.background),
                ("view", record.view, entry.view),
                *((name, getattr(record, name), getattr(entry, name)) for name in ATTRIBUTION_FIELDS),
            )
            if old != new
        ]
        if moved_from is not None:
            changes.append(f"moved from {moved_from!r}")
        if not changes:
            self.report.unchanged += 1
            return
        record.objects, record.scene_id, record.background, record.view = objects, scene, entry.background, entry.view
        record.license, record.author, record.source_url = entry.license, entry.author, entry.source_url
        self.report.updated.append({"file": entry.file, "id": record.id, "change": "; ".join(changes)})
        self.journal.set(record)

    def _display(self, record: CatalogRecord) -> str:
        """How the report names a record's photo: its manifest path, or the full path for another folder."""
        folder, file = _source_key(record)
        if file is None:
            return record.path
        return file if folder == self.here else str(Path(folder or ".") / file)

    def _is_same_photo(self, known: CatalogRecord, file: str) -> bool:
        """Is ``file`` (same bytes as ``known``) that photo, moved or renamed, rather than a second copy?"""
        folder, old_file = _source_key(known)
        if (folder, old_file) == (self.here, file):
            return True
        if folder == self.here and old_file not in self.manifest_files:
            return True  # renamed within this folder: the manifest no longer names the old file
        return not (folder and old_file and (Path(folder) / old_file).is_file())  # the old file is gone: moved

    def _update_source(self, record: CatalogRecord, file: str, stat: os.stat_result) -> str | None:
        """Record the photo's current place, size and mtime; returns the old place when it moved."""
        old_key, new_key = _source_key(record), (self.here, file)
        moved_from = self._display(record) if old_key != new_key else None
        if moved_from is not None:
            self.by_source.pop(old_key, None)
            self.by_source[new_key] = record
        if moved_from is not None or (record.extra.get("source_size"), record.extra.get("source_mtime_ns")) != (
            stat.st_size,
            stat.st_mtime_ns,
        ):
            self.journal.set(record)  # keep the fast path working on the next run (serialised at flush time)
        record.extra.update(
            source_dir=self.here, source_file=file, source_size=stat.st_size, source_mtime_ns=stat.st_mtime_ns
        )
        return moved_from


def _source_key(record: CatalogRecord) -> tuple[str | None, str | None]:
    return record.extra.get("source_dir"), record.extra.get("source_file")


def _unlisted_photos(photos_root: Path, entries: list[ManifestEntry], *, exclude: list[Path]) -> list[str]:
    """Photos under ``photos_root`` that no manifest line names (relative paths, sorted)."""
    listed = {os.path.normpath(photos_root.resolve() / e.file) for e in entries}
    excluded = [p.resolve() for p in exclude]
    out: list[str] = []
    for dirpath, dirnames, filenames in os.walk(photos_root):
        here = Path(dirpath).resolve()
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and (here / d).resolve() not in excluded)
        for name in sorted(filenames):
            if name.startswith(".") or Path(name).suffix.lower() not in PHOTO_SUFFIXES:
                continue
            full = here / name
            if os.path.normpath(full) not in listed and full.resolve() not in excluded:
                out.append((Path(dirpath) / name).relative_to(photos_root).as_posix())
    return out


__all__ = [
    "REASONS",
    "REPORT_FILENAME",
    "CleanImage",
    "IngestReport",
    "NearDuplicatePair",
    "PerceptualHashIndex",
    "Refusal",
    "build_vocabulary",
    "clean_image",
    "default_scene",
    "ingest_photos",
]
