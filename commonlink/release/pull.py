"""``release pull``: download one published version of a Hub dataset repo into a folder and verify it.

The version's ``manifest.json`` (as ``release push`` published it: the card listed as pushed) names every file of
the release with its sha256 and size; exactly those files are downloaded at the version's tag, checked, and the
folder is renamed into place only when every file matches. A file that does not match is named and nothing is
left in ``--out``. The result is a release folder like the one ``release build`` wrote (``release push`` can
publish it again, ``datasets.load_dataset(OUT)`` reads it).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from commonlink.errors import CommonlinkError, InputError, SchemaError
from commonlink.fileio import sha256_file
from commonlink.formats.release import (
    CARD_FILENAME,
    MANIFEST_FILENAME,
    check_version,
    read_release_manifest,
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
from commonlink.release.staging import stage_release


@dataclass
class PullResult:
    repo_id: str
    version: str
    out_dir: Path
    files: int  #: files downloaded and verified (manifest included)
    total_bytes: int
    notes: list[str]


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
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise InputError(f"--out {out} exists and is not an empty folder.", "Pick a new folder for the download.")
    endpoint = resolve_endpoint(endpoint)
    api = hub_api(endpoint, token)
    doing = f"Downloading {repo_id} version {version}"
    # one bar per file from huggingface_hub would interleave with ours, which counts the files
    with output_lock(out, what="commonlink release pull"), stage_release(out) as tmp, hub_progress_bars(False):
        try:
            tagged = {ref.name for ref in api.list_repo_refs(repo_id, repo_type=REPO_TYPE).tags}
            if version not in tagged:
                raise InputError(
                    f"{repo_id} has no version {version} (tags: {', '.join(sorted(tagged)) or 'none'}).",
                    f"List the versions with `commonlink release versions {repo_id}`.",
                )
            _download(api, repo_id, version, MANIFEST_FILENAME, tmp)
            manifest = read_release_manifest(tmp)
            listed = manifest.get("files")
            if not isinstance(listed, dict) or not listed:
                raise SchemaError(
                    f"{repo_id} version {version}: its {MANIFEST_FILENAME} lists no files.",
                    "The version was not published by `commonlink release "
                    "push`; download it with huggingface_hub instead.",
                )
            for rel in track(sorted(listed), "Downloading", unit="files", disable=not progress):
                _download(api, repo_id, version, _safe_relative(rel), tmp)
        except CommonlinkError:
            raise
        except Exception as exc:
            raise translate_hub_error(exc, endpoint=endpoint, repo_id=repo_id, doing=doing) from None
        notes = _verify(tmp, listed, manifest, where=f"{repo_id} version {version}")
    total = sum(int(info.get("size", 0)) for info in listed.values())
    return PullResult(repo_id, version, out, len(listed) + 1, total, notes)


def _safe_relative(rel: str) -> str:
    if rel.startswith("/") or ".." in rel.split("/") or "\\" in rel:
        raise SchemaError(
            f"The manifest lists the path {rel!r}, which would leave the download folder.",
            "Do not use this version; report it to its publisher.",
        )
    return rel


def _download(api, repo_id: str, version: str, rel: str, folder: Path) -> None:
    api.hf_hub_download(repo_id, rel, repo_type=REPO_TYPE, revision=version, local_dir=folder)


def _verify(folder: Path, listed: dict, manifest: dict, *, where: str) -> list[str]:
    """Check every listed file's size and sha256; an error naming the ones that differ (nothing is kept)."""
    shutil.rmtree(folder / ".cache", ignore_errors=True)  # huggingface_hub's bookkeeping for local_dir downloads
    problems, notes = [], []
    for rel, info in listed.items():
        path = folder / rel
        if path.stat().st_size == info.get("size") and sha256_file(path) == info.get("sha256"):
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
