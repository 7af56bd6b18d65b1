"""``release pull``: download one published version of a Hub dataset repo into a folder and verify it.

The version's ``manifest.json`` (as ``release push`` published it: the card listed as pushed) names every file of
the release with its sha256 and size; exactly those files are downloaded at the commit the version's tag points
at (resolved once, so a same-named branch or a tag moved meanwhile cannot mix files), checked, and the folder is
renamed into place only when every file matches. The repo is untrusted input: the manifest is schema-checked
before any of it is used (:func:`check_pulled_manifest`). A file that does not match is named and nothing is
left in ``--out``. The result is a release folder like the one ``release build`` wrote (``release push`` can
publish it again, ``datasets.load_dataset(OUT)`` reads it).
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from commonlink.errors import CommonlinkError, InputError, SchemaError
from commonlink.fileio import sha256_file
from commonlink.formats.release import (
    CARD_FILENAME,
    MANIFEST_FILENAME,
    check_version,
)
from commonlink.locks import output_lock
from commonlink.progress import track
from commonlink.release.hub_client import (
    REPO_TYPE,
    hub_api,
    hub_progress_bars,
    resolve_endpoint,
    translate_hub_error,
)
from commonlink.release.hub_plan import check_repo_id
from commonlink.release.staging import stage_release, verify_release


@dataclass
class PullResult:
    repo_id: str
    version: str
    out_dir: Path
    files: int  #: files downloaded and verified (manifest included)
    total_bytes: int
    notes: list[str]
    #: ``--out`` already held this very version, every file matching: nothing was downloaded but its manifest
    up_to_date: bool = False


def pull_release(
    repo_id: str,
    version: str,
    out_dir: str | os.PathLike,
    *,
    endpoint: str | None = None,
    token: str | None = None,
    progress: bool = False,
) -> PullResult:
    """Download version ``version`` of ``repo_id`` into ``out_dir`` (new or empty) and verify it against its
    manifest."""
    check_repo_id(repo_id)
    check_version(version)
    out = Path(out_dir).expanduser().resolve()
    endpoint = resolve_endpoint(endpoint)
    api = hub_api(endpoint, token)
    doing = f"Downloading {repo_id} version {version}"
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        # an earlier pull of this version is verified again and left as it is; anything else is not touched
        return _already_pulled(api, repo_id, version, out, endpoint=endpoint, doing=doing)
    # one bar per file from huggingface_hub would interleave with ours, which counts the files
    with output_lock(out, what="commonlink release pull"), stage_release(out) as tmp, hub_progress_bars(False):
        where = f"{repo_id} version {version}"
        rel = MANIFEST_FILENAME
        try:
            # every file from this one commit: no same-named branch, no tag moved meanwhile
            commit = _version_commit(api, repo_id, version)
            _download(api, repo_id, commit, rel, tmp, where=where)
            manifest = check_pulled_manifest(tmp / MANIFEST_FILENAME, repo_id=repo_id, version=version)
            listed = manifest["files"]
            for rel in track(sorted(listed), "Downloading", unit="files", disable=not progress):
                _download(api, repo_id, commit, rel, tmp, where=where)
        except CommonlinkError:
            raise
        except OSError as exc:
            if not _local_os_error(exc):
                raise translate_hub_error(exc, endpoint=endpoint, repo_id=repo_id, doing=doing) from None
            # a full or read-only disk here, not the Hub: named by its place in --out (not the staging folder)
            raise OSError(exc.errno, exc.strerror or str(exc), str(out / rel)) from None
        except Exception as exc:
            raise translate_hub_error(exc, endpoint=endpoint, repo_id=repo_id, doing=doing) from None
        notes = _verify(tmp, listed, manifest, where=where)
    total = sum(info["size"] for info in listed.values())
    return PullResult(repo_id, version, out, len(listed) + 1, total, notes)


def _version_commit(api, repo_id: str, version: str) -> str:
    """The commit the tag of ``version`` points at (an :class:`InputError` listing the tags where there is none)."""
    tags = {ref.name: ref.target_commit for ref in api.list_repo_refs(repo_id, repo_type=REPO_TYPE).tags}
    if version not in tags:
        raise InputError(
            f"{repo_id} has no version {version} (tags: {', '.join(sorted(tags)) or 'none'}).",
            f"List the versions with `commonlink release versions {repo_id}`.",
        )
    return tags[version]


def _already_pulled(api, repo_id: str, version: str, out: Path, *, endpoint: str, doing: str) -> PullResult:
    """``--out`` is not empty: up to date when it holds exactly this version (its manifest the one the version's
    tag points at, every file matching it, nothing else there); refused, and left untouched, otherwise."""

    pick = "Pick a new (or empty) folder for the download; nothing in --out was changed."
    local = out / MANIFEST_FILENAME
    if not out.is_dir() or not local.is_file():
        raise InputError(f"--out {out} exists and is not an empty folder (nor a pulled release).", pick)
    where = f"{repo_id} version {version}"
    with tempfile.TemporaryDirectory(prefix="commonlink-pull-") as scratch:
        try:
            commit = _version_commit(api, repo_id, version)
            _download(api, repo_id, commit, MANIFEST_FILENAME, Path(scratch), where=where)
        except CommonlinkError:
            raise
        except Exception as exc:
            raise translate_hub_error(exc, endpoint=endpoint, repo_id=repo_id, doing=doing) from None
        remote = check_pulled_manifest(Path(scratch) / MANIFEST_FILENAME, repo_id=repo_id, version=version)
        same_manifest = (Path(scratch) / MANIFEST_FILENAME).read_bytes() == local.read_bytes()
    if not same_manifest:
        raise InputError(
            f"--out {out} holds another release than {where} (its {MANIFEST_FILENAME} differs from the version's).",
            pick,
        )
    problems = verify_release(out)
    if problems:
        raise InputError(
            f"--out {out} holds {where}, but not as published: {'; '.join(problems[:5])}"
            + (f" (and {len(problems) - 5} more)" if len(problems) > 5 else "")
            + ".",
            "Pull into a new folder (nothing in --out was changed), or remove the folder and pull again.",
        )
    listed = remote["files"]
    total = sum(info["size"] for info in listed.values())
    return PullResult(repo_id, version, out, len(listed) + 1, total, [], up_to_date=True)


_DONT_USE = "Do not use this version; report it to its publisher."
_SHA256 = re.compile(r"[0-9a-f]{64}")


def check_pulled_manifest(path: Path, *, repo_id: str, version: str) -> dict:
    """The downloaded ``manifest.json`` of ``repo_id`` version ``version``, checked as untrusted input before any
    of it is used: a JSON object naming this version (and this repo, where it records one) whose ``files`` maps
    safe relative paths (no hidden or reserved names, nothing leaving the folder) to ``{"sha256", "size"}``."""
    where = f"{repo_id} version {version}: its {MANIFEST_FILENAME}"
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise SchemaError(f"{where} is not valid JSON ({exc}).", _DONT_USE) from None
    if not isinstance(manifest, dict):
        raise SchemaError(f"{where} is not a JSON object.", _DONT_USE)
    if manifest.get("version") != version:
        raise SchemaError(
            f"{where} is a release of version {manifest.get('version')!r}, not the {version!r} that was asked for.",
            _DONT_USE,
        )
    recorded_repo = manifest.get("repo_id", repo_id)  # pushes before the card named its repo recorded none
    if not isinstance(recorded_repo, str) or recorded_repo.casefold() != repo_id.casefold():
        raise SchemaError(
            f"{where} is a release of the repo {recorded_repo!r}, not of {repo_id!r} that was asked for.", _DONT_USE
        )
    listed = manifest.get("files")
    if not isinstance(listed, dict):
        raise SchemaError(f"{where}: its 'files' is not a JSON object ({type(listed).__name__}).", _DONT_USE)
    if not listed:
        raise SchemaError(
            f"{where} lists no files.",
            "The version was not published by `commonlink release push`; download it with huggingface_hub instead.",
        )
    for rel, info in listed.items():
        _safe_relative(rel, where)
        if not isinstance(info, dict):
            raise SchemaError(f"{where}: its 'files' entry {rel!r} is not a JSON object.", _DONT_USE)
        size, digest = info.get("size"), info.get("sha256")
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise SchemaError(f"{where}: {rel}: its 'size' is not a whole number ({size!r}).", _DONT_USE)
        if not isinstance(digest, str) or not _SHA256.fullmatch(digest):
            raise SchemaError(f"{where}: {rel}: its 'sha256' is not 64 hex digits ({digest!r}).", _DONT_USE)
    return manifest


def _safe_relative(rel: str, where: str) -> str:
    """``rel`` when it names a file a release can hold: relative, inside the folder, no hidden part (``.cache``,
    the staging marker ``.commonlink-staging``: a release build lists no hidden file), not the manifest itself."""
    parts = rel.split("/")
    if (
        not rel
        or rel.startswith("/")
        or "\\" in rel
        or any(part in ("", ".", "..") or part.startswith(".") for part in parts)
        or rel == MANIFEST_FILENAME
        or any(ord(c) < 32 for c in rel)
    ):
        raise SchemaError(
            f"{where} lists the path {rel!r}, which a release cannot hold (hidden, reserved, the manifest itself, "
            "or leaving the download folder).",
            _DONT_USE,
        )
    return rel


def _local_os_error(exc: OSError) -> bool:
    """Whether ``exc`` is about the local disk (full, read-only, no permission), not the network or the Hub."""
    from huggingface_hub.errors import EntryNotFoundError

    if isinstance(exc, (ConnectionError, TimeoutError, EntryNotFoundError)):
        return False
    return exc.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", -1), errno.EROFS, errno.EACCES, errno.EPERM)


def _download(api, repo_id: str, commit: str, rel: str, folder: Path, *, where: str) -> None:
    from huggingface_hub.errors import RemoteEntryNotFoundError

    try:
        api.hf_hub_download(repo_id, rel, repo_type=REPO_TYPE, revision=commit, local_dir=folder)
    except RemoteEntryNotFoundError:
        raise SchemaError(
            f"{where}: {rel} is missing from the repo at the version's commit {commit[:12]}"
            + ("" if rel == MANIFEST_FILENAME else f" (its {MANIFEST_FILENAME} lists it)")
            + ".",
            "Do not use this version; ask the publisher to push it again (nothing was kept)."
            if rel != MANIFEST_FILENAME
            else "The version was not published by `commonlink release push`; download it with huggingface_hub.",
        ) from None


def _verify(folder: Path, listed: dict, manifest: dict, *, where: str) -> list[str]:
    """Check every listed file's size and sha256; an error naming the ones that differ (nothing is kept)."""
    shutil.rmtree(folder / ".cache", ignore_errors=True)  # huggingface_hub's bookkeeping for local_dir downloads
    problems, notes = [], []
    for rel, info in listed.items():
        path = folder / rel
        if path.stat().st_size == info["size"] and sha256_file(path) == info["sha256"]:
            continue
        if rel == CARD_FILENAME and "repo_id" not in manifest:
            # pushed by a commonlink that added the Versions table without listing the card as pushed
            notes.append(
                f"{CARD_FILENAME} differs from the manifest (published before pushes listed the card as pushed)."
            )
            continue
        problems.append(rel)
    if problems:
        raise SchemaError(
            f"{where}: {len(problems)} file(s) do not match the version's manifest: {', '.join(problems[:10])}.",
            "Do not use this download; ask the publisher to push the version again (nothing was kept).",
        )
    return notes


__all__ = ["PullResult", "pull_release"]
