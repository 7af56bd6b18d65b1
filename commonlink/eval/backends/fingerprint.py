"""Identify model weights for the prediction cache: hub commit, or a content hash of a local folder."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from commonlink import constants
from commonlink.fileio import atomic_write_json

_MEMO_NAME = "model-hashes.json"


def model_fingerprint(name_or_path: str, revision: str | None = None) -> str:
    """A string that changes whenever the weights (or processor/template files) change.

    * local folder: SHA-256 over every file's relative path and content (memoised by path, size and
      modification time under ``COMMONLINK_HOME`` so a 16 GB checkpoint is hashed once);
    * Hub id: ``name@<commit>``: the commit the Hub serves for the revision now (what ``from_pretrained`` is
      about to download; so a first download does not change the fingerprint under a run), else - offline, or
      the Hub unreachable - the commit of the local snapshot, else ``name@<revision or main>`` (unresolved; the
      cache then trusts the revision name).
    """
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        return "sha256:" + _hash_folder(path)
    if path.is_file():
        return "sha256:" + _hash_files(path.parent, [path])
    commit = _remote_commit(name_or_path, revision) or _cached_commit(name_or_path, revision)
    return f"{name_or_path}@{commit or revision or 'main'}"


def _hash_folder(root: Path) -> str:
    files = sorted(
        p
        for p in root.rglob("*")
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(root).parts)
    )
    return _hash_files(root, files)


def _hash_files(root: Path, files: list[Path]) -> str:
    memo_path = constants.COMMONLINK_HOME / _MEMO_NAME
    try:
        memo = json.loads(memo_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        memo = {}
    digest = hashlib.sha256()
    changed = False
    for path in files:
        stat = path.stat()
        key = f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}"
        file_hash = memo.get(key)
        if file_hash is None:
            h = hashlib.sha256()
            with open(path, "rb") as handle:
                while chunk := handle.read(1 << 22):
                    h.update(chunk)
            file_hash = memo[key] = h.hexdigest()
            changed = True
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + file_hash.encode() + b"\n")
    if changed:
        try:
            atomic_write_json(memo_path, memo)
        except OSError:
            pass  # the memo only saves time
    return digest.hexdigest()[:32]


def _remote_commit(repo_id: str, revision: str | None) -> str | None:
    """The commit the Hub serves for ``revision`` (None offline, for a non-Hub name, or on any error)."""
    if revision and len(revision) == 40 and all(c in "0123456789abcdef" for c in revision):
        return revision  # already a commit
    try:
        from huggingface_hub import HfApi
        from huggingface_hub import constants as hub_constants
    except ImportError:  # pragma: no cover - huggingface_hub is a core dependency
        return None
    if hub_constants.HF_HUB_OFFLINE:
        return None
    try:
        return HfApi().model_info(repo_id, revision=revision, timeout=10).sha
    except Exception:  # noqa: BLE001 - unreachable, gated, not a repo id: fall back to the local cache
        return None


def _cached_commit(repo_id: str, revision: str | None) -> str | None:
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:  # pragma: no cover - huggingface_hub is a core dependency
        return None
    try:
        found = try_to_load_from_cache(repo_id, "config.json", revision=revision)
    except Exception:  # noqa: BLE001 - malformed ids etc.: just unresolved
        return None
    if isinstance(found, str):
        parts = Path(found).parts
        if "snapshots" in parts:
            return parts[parts.index("snapshots") + 1]
    return None
