"""What a push publishes beside the shards: the card with the repo id and a ``## Versions`` table, and the manifest
that vouches for it.

The release folder is never modified by a push. The card pushed is the release's card with the repo id written
into its usage examples (in place of :data:`~commonlink.formats.card.REPO_PLACEHOLDER`) and its ``## Versions``
table (version, date, rows per split, message) merged from the card on the Hub. The manifest pushed is the
release's manifest with ``repo_id`` and the pushed card's sha256 and size, so a download of the version
(``release pull``) verifies every file against it, the card included.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

from commonlink.fileio import sha256_bytes
from commonlink.formats.card import REPO_PLACEHOLDER, markdown_table
from commonlink.formats.release import (
    CARD_FILENAME,
    MANIFEST_FILENAME,
    is_version,
    version_key,
)

VERSIONS_HEADING = "## Versions"
_VERSION_COLUMNS = ("version", "date", "rows", "message")


@dataclass
class ReleaseFile:
    """One file of the release as it will be stored in the repo."""

    path: str  #: path in the repo (= relative path in the release folder)
    size: int
    sha256: str
    source: Path | None = None  #: file on disk; None when ``content`` holds the bytes (card, manifest)
    content: bytes | None = None

    @classmethod
    def of_bytes(cls, path: str, content: bytes) -> ReleaseFile:
        return cls(path, len(content), sha256_bytes(content), content=content)

    def git_blob_id(self) -> str:
        """The git object id of the file (what the Hub reports for files not stored with LFS)."""
        digest = hashlib.sha1(b"blob %d\0" % self.size)
        if self.content is not None:
            digest.update(self.content)
        else:
            with open(self.source, "rb") as handle:  # type: ignore[arg-type]
                while chunk := handle.read(1 << 20):
                    digest.update(chunk)
        return digest.hexdigest()


def _split_cells(line: str) -> list[str]:
    inner = line.strip()
    inner = inner[1:] if inner.startswith("|") else inner
    inner = inner[:-1] if inner.endswith("|") and not inner.endswith("\\|") else inner
    # cells were written by markdown_table (markdown_text): undo its backslash escapes to get the text back
    return [re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", c.strip()) for c in re.split(r"(?<!\\)\|", inner)]


def _versions_section(text: str) -> tuple[int, int] | None:
    """(start, end) character span of the ``## Versions`` section (heading included), or None."""
    match = re.search(rf"^{re.escape(VERSIONS_HEADING)}[ \t]*$", text, flags=re.M)
    if not match:
        return None
    following = re.search(r"^#{1,2} ", text[match.end() :], flags=re.M)
    end = match.end() + following.start() if following else len(text)
    return match.start(), end


def read_versions_table(card_text: str) -> list[dict[str, str]]:
    """Rows of a card's ``## Versions`` table as ``{version, date, rows, message}`` dicts."""
    span = _versions_section(card_text)
    if span is None:
        return []
    rows = []
    for line in card_text[span[0] : span[1]].splitlines():
        if not line.strip().startswith("|"):
            continue
        cells = _split_cells(line)
        if not cells or cells[0].lower() == "version" or set(cells[0]) <= set("-: "):
            continue
        cells = (cells + [""] * len(_VERSION_COLUMNS))[: len(_VERSION_COLUMNS)]
        rows.append(dict(zip(_VERSION_COLUMNS, cells)))
    return rows


def card_with_version(card_text: str, rows: list[dict[str, str]], repo_id: str = "REPO") -> str:
    """``card_text`` with its ``## Versions`` section replaced by (or appended as) a table of ``rows``."""

    ordered = sorted(rows, key=lambda r: version_key(r["version"]) if is_version(r["version"]) else (-1,), reverse=True)
    table = markdown_table(list(_VERSION_COLUMNS), [[r.get(c, "") for c in _VERSION_COLUMNS] for r in ordered])
    section = (
        f"{VERSIONS_HEADING}\n\nEach version is a git tag of this repo: "
        f'`load_dataset("{repo_id}", revision="X.Y.Z")` reads exactly that version.\n\n'
        f"{table}\n"
    )
    span = _versions_section(card_text)
    if span is None:
        return card_text.rstrip("\n") + "\n\n" + section
    tail = card_text[span[1] :]
    return card_text[: span[0]] + section + ("\n" + tail if tail else "")


def with_repo_id(card_text: str, repo_id: str) -> str:
    """The card's usage examples naming ``repo_id`` instead of the placeholder the build writes."""
    return card_text.replace(json.dumps(REPO_PLACEHOLDER), json.dumps(repo_id))


def published_card(
    local_card: str, *, repo_id: str, version: str, rows_summary: str, message: str | None, remote_card: str | None
) -> ReleaseFile:
    """The card to push: the release's card naming the repo, with the Versions table merged from the Hub's card.

    A row the Hub card already has for this version keeps its date, so a rerun of an interrupted push produces
    the same bytes (and so the same commit content).
    """
    rows = {r["version"]: r for r in read_versions_table(local_card)}
    if remote_card:
        rows.update({r["version"]: r for r in read_versions_table(remote_card)})
    date = rows.get(version, {}).get("date") or _dt.datetime.now(_dt.timezone.utc).date().isoformat()
    rows[version] = {"version": version, "date": date, "rows": rows_summary, "message": (message or "").strip()}
    text = card_with_version(with_repo_id(local_card, repo_id), list(rows.values()), repo_id)
    return ReleaseFile.of_bytes(CARD_FILENAME, text.encode("utf-8"))


def published_manifest(manifest: dict, *, repo_id: str, card: ReleaseFile) -> ReleaseFile:
    """The manifest to push: the release's, naming the repo and listing the card as pushed."""
    files = {**manifest.get("files", {}), CARD_FILENAME: {"sha256": card.sha256, "size": card.size}}
    published = {**manifest, "repo_id": repo_id, "files": files}
    return ReleaseFile.of_bytes(
        MANIFEST_FILENAME, (json.dumps(published, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
    )


__all__ = [
    "VERSIONS_HEADING",
    "ReleaseFile",
    "card_with_version",
    "published_card",
    "published_manifest",
    "read_versions_table",
    "with_repo_id",
]
