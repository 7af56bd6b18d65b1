"""What `commonlink ingest` reports: refusals with their reasons, near-duplicate pairs, counts
(``ingest_report.json`` in the catalog folder; docs/formats.md)."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field

from commonlink import __version__
from commonlink.formats.meta import utc_now

REPORT_FILENAME = "ingest_report.json"

# Refusal reasons (the `reason` field of the report); the text says what to do about each.
REASONS = {
    "path_escapes": "the manifest path leaves the photos folder",
    "listed_twice": "the same file is listed more than once",
    "missing": "the file is not on disk",
    "no_objects": "no object names given",
    "unknown_object": "object name(s) not in the vocabulary",
    "corrupt": "not a readable image (corrupt, truncated or unknown format)",
    "too_small": "fewer pixels than --min-pixels",
    "too_large": "more pixels than the decoding cap (COMMONLINK_MAX_IMAGE_PIXELS)",
    "exact_duplicate": "identical to another photo",
    "near_duplicate": "perceptually almost identical to another photo",
}


@dataclass
class Refusal:
    """A manifest line that was not ingested, and why."""

    file: str
    line: int
    reason: str  #: a key of :data:`REASONS`
    detail: str  #: one sentence naming the problem and the fix
    other: str | None = None  #: the other file, for duplicates
    suggestions: dict[str, list[str]] | None = None  #: unknown name -> closest known names


@dataclass
class NearDuplicatePair:
    file_a: str  #: the photo already accepted
    id_a: str
    file_b: str  #: the later photo
    id_b: str
    distance: int  #: Hamming distance of the 64-bit perceptual hashes
    kept_both: bool


@dataclass
class IngestReport:
    photos_dir: str
    manifest: str
    catalog_dir: str
    options: dict
    vocabulary: str  #: the vocabulary file, or a note that the manifest's own names were used
    added: list[dict] = field(default_factory=list)  #: {file, id}
    updated: list[dict] = field(default_factory=list)  #: {file, id, change}
    unchanged: int = 0
    refused: list[Refusal] = field(default_factory=list)
    near_duplicates: list[NearDuplicatePair] = field(default_factory=list)
    unlisted: list[str] = field(default_factory=list)  #: photos on disk that the manifest does not name
    possible_typos: list[tuple[str, str]] = field(default_factory=list)  #: (rare name, common name)
    #: folder -> photos, for scenes that came from a folder (no ``scene`` column) and hold many photos
    folder_scenes: dict[str, int] = field(default_factory=dict)
    catalog_size: int = 0

    def counts(self) -> dict[str, int]:
        return {
            "manifest_lines": len(self.added) + len(self.updated) + self.unchanged + len(self.refused),
            "added": len(self.added),
            "updated": len(self.updated),
            "unchanged": self.unchanged,
            "refused": len(self.refused),
            "near_duplicate_pairs": len(self.near_duplicates),
            "unlisted": len(self.unlisted),
            "catalog_size": self.catalog_size,
        }

    def to_json(self) -> dict:
        return {
            "kind": "commonlink_ingest_report",
            "toolkit_version": __version__,
            "created": utc_now(),
            "photos_dir": self.photos_dir,
            "manifest": self.manifest,
            "catalog_dir": self.catalog_dir,
            "vocabulary": self.vocabulary,
            "options": self.options,
            "counts": self.counts(),
            "refused_by_reason": dict(Counter(r.reason for r in self.refused)),
            "reason_meanings": {reason: REASONS[reason] for reason in dict.fromkeys(r.reason for r in self.refused)},
            "added": self.added,
            "updated": self.updated,
            "refused": [asdict(r) for r in self.refused],
            "near_duplicates": [asdict(p) for p in self.near_duplicates],
            "unlisted": self.unlisted,
            "possible_typos": [list(p) for p in self.possible_typos],
            "folder_scenes": self.folder_scenes,
        }


__all__ = ["REASONS", "REPORT_FILENAME", "IngestReport", "NearDuplicatePair", "Refusal"]
