"""Plan a Hub push without touching the network: check a release folder against its manifest and list what
pushing it as a version sends (``commonlink release push --dry-run`` prints the plan).

:func:`plan_push` checks the repo id and version, that the folder has its card and manifest, that every file the
manifest lists is there with its recorded size and sha256, and that the manifest's version is the one asked for;
:mod:`commonlink.release.hub` then publishes the plan.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from commonlink import __version__
from commonlink.errors import InputError, SchemaError
from commonlink.fileio import sha256_bytes, sha256_file
from commonlink.formats.release import (
    CARD_FILENAME,
    MANIFEST_FILENAME,
    check_version,
    manifest_units,
    read_release_manifest,
)
from commonlink.progress import track
from commonlink.release.card_info import unanswered_questions
from commonlink.release.hub_card import ReleaseFile

_REPO_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")


@dataclass
class PushPlan:
    """What a push will send (built without any network call; ``--dry-run`` prints it)."""

    release_dir: Path
    repo_id: str
    version: str
    tag: str
    commit_message: str
    commit_description: str
    files: list[ReleaseFile]
    units: dict[str, dict]  #: the manifest's parts (splits or configs): {name: {"rows", "files"}}
    kind: str
    message: str | None
    manifest: dict = field(default_factory=dict)  #: the manifest the files were checked against (read once)
    card_text: str = ""  #: the release's card, as checked against the manifest
    unanswered: list[str] = field(default_factory=list)  #: publisher questions the card still marks (keys)

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    def rows_summary(self) -> str:
        return rows_summary(self.units)


def check_repo_id(repo_id: str) -> str:
    """``repo_id`` when it is ORG/NAME and passes huggingface_hub's own repo-id rules (no '--' or '..', no '-' or
    '.' at either end, at most 96 characters), so a push never fails on the name after its checks."""
    reason = None
    if not _REPO_ID_RE.match(repo_id or ""):
        reason = "it must be ORG/NAME"
    else:
        from huggingface_hub.errors import HFValidationError
        from huggingface_hub.utils import validate_repo_id

        try:
            validate_repo_id(repo_id)
        except HFValidationError as exc:
            reason = str(exc).rstrip(".")
    if reason:
        raise InputError(
            f"--repo {repo_id!r} is not a Hub repo id ({reason}).",
            "Write it as ORG/NAME, e.g. --repo my-lab/common-o-extra.",
        )
    return repo_id


def rows_summary(units: dict[str, dict]) -> str:
    return ", ".join(f"{name}: {int(info.get('rows', 0)):,}" for name, info in units.items()) or "-"


def read_manifest(release_dir: Path) -> dict:
    """The release's manifest (clear errors from the release builder's reader), with its ``files`` table."""
    manifest = read_release_manifest(release_dir)
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict):
        raise SchemaError(
            f"{release_dir / MANIFEST_FILENAME}: no 'files' table.",
            "Rebuild the release with `commonlink release build`.",
        )
    return manifest


def plan_push(
    release_dir: str | os.PathLike, repo_id: str, version: str, *, message: str | None = None, progress: bool = False
) -> PushPlan:
    """Check a release folder and list what pushing it as ``version`` sends. Makes no network call.

    Every file is hashed here (sha256, checked against the manifest); the push hashes the files it sends once
    more as it commits them.
    """
    root = Path(release_dir)
    check_repo_id(repo_id)
    check_version(version)
    if not root.is_dir():
        raise InputError(
            f"Release folder {root} does not exist.", "Pass the --out folder of `commonlink release build`."
        )
    manifest = read_manifest(root)
    if not (root / CARD_FILENAME).is_file():
        raise InputError(
            f"{root} has no {CARD_FILENAME} (the dataset card).", "Rebuild the release with `commonlink release build`."
        )
    built_version = manifest.get("version")
    if built_version not in (None, "", version):
        raise InputError(
            f"{root} was built as version {built_version!r} but --version is {version!r}.",
            f"Push it with --version {built_version}, or rebuild with `commonlink release build ... --version "
            f"{version}`.",
        )
    files: list[ReleaseFile] = []
    problems: list[str] = []
    listed = sorted(manifest["files"].items())
    for rel, info in track(listed, "Checking files against the manifest", unit="files", disable=not progress):
        if rel in (MANIFEST_FILENAME,) or rel.startswith("/") or ".." in rel.split("/"):
            continue
        path = root / rel
        if not path.is_file():
            problems.append(f"{rel}: missing")
            continue
        size = path.stat().st_size
        digest = sha256_file(path)
        if size != info.get("size") or digest != info.get("sha256"):
            problems.append(f"{rel}: content differs from the manifest")
            continue
        files.append(ReleaseFile(rel, size, digest, source=path))
    if problems:
        shown = "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more" if len(problems) > 5 else "")
        raise InputError(
            f"{root} does not match its manifest: {shown}.",
            "Rebuild the release (`commonlink release build ... --overwrite`) instead of editing its files; to change "
            "only the card, `commonlink release card DIR --card-info FILE` rewrites it and keeps the manifest true.",
        )
    # the card and manifest are pushed as built in memory (hub_card): keep the bytes that were checked
    card_bytes = (root / CARD_FILENAME).read_bytes()
    if CARD_FILENAME in manifest["files"] and sha256_bytes(card_bytes) != manifest["files"][CARD_FILENAME].get(
        "sha256"
    ):
        raise InputError(
            f"{root} does not match its manifest: {CARD_FILENAME}: content differs from the manifest.",
            "Change a card with `commonlink release card DIR --card-info FILE` (or rebuild), not by hand.",
        )
    files = [f for f in files if f.path != CARD_FILENAME] + [ReleaseFile.of_bytes(CARD_FILENAME, card_bytes)]
    files.append(ReleaseFile.of_bytes(MANIFEST_FILENAME, (root / MANIFEST_FILENAME).read_bytes()))
    card_text = card_bytes.decode("utf-8")
    units = manifest_units(manifest)
    kind = str(manifest.get("kind") or "common_o")
    title = f"Release {version}" + (f": {message}" if message else "")
    description = (
        f"{manifest.get('name') or repo_id} {version} ({kind}); rows: {rows_summary(units)}; "
        f"built with commonlink {manifest.get('toolkit_version') or '?'}, pushed with commonlink {__version__}."
    )
    return PushPlan(
        root,
        repo_id,
        version,
        version,
        title.splitlines()[0][:200],
        description,
        sorted(files, key=lambda f: f.path),
        units,
        kind,
        message,
        manifest,
        card_text,
        unanswered_questions(card_text),
    )


__all__ = ["PushPlan", "check_repo_id", "plan_push", "read_manifest", "rows_summary"]
