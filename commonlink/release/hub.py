"""Publish release folders as versions of a Hugging Face Hub dataset repo, and list those versions.

A version is one commit holding the release's files (shards, card, figures, manifest) plus a git tag named after
the version (``1.2.0``), so ``datasets.load_dataset(repo, revision="1.2.0")`` and
``commonlink.loaders.load_common_o(repo, split, revision="1.2.0")`` read exactly that version forever.
``main`` always holds the highest version (semantic-version order).

How a push goes (every step through the real ``huggingface_hub`` client):

1. The release folder's writer lock is taken for the whole push (a ``release build`` into the folder is refused
   until the push ends). Local checks, no network: the folder has ``README.md`` and ``manifest.json``, every file
   the manifest lists is there with its recorded sha256 and size, the manifest's version equals ``--version``;
   datasheet questions the card still marks unanswered are reported (``strict``: refused).
2. Token: ``HF_TOKEN`` or the ``huggingface_hub`` login cache; ``whoami`` checks it before anything is uploaded.
   The token is never printed or logged.
3. The repo is created when missing. If the version tag exists, the push stops unless the tag already holds
   exactly this release (then there is nothing to do) or ``force=True`` (the tag is moved, with a warning).
4. Where the commit goes: on ``main`` when the version is at least the one ``main`` holds (its manifest's
   version); an older version is committed on a side branch ``release-X.Y.Z`` started from ``main``, tagged, and
   the branch deleted, so ``main`` stays on the highest version (``move_main=True`` commits it on ``main`` on
   purpose). The files of the base commit are compared with the release by hash (LFS sha256 or git blob id):
   only files that differ are sent, stale shards of the release's splits (and stale figures) are deleted, all in
   **one commit** whose parent is the head that was compared; if another push moved it meanwhile, the Hub
   refuses (412) and the push starts over from the new head (so interleaved pushes never leave ``main`` on an
   older version). Every file is opened and hashed once more as the commit is made, and compared with the
   manifest: a file changed since the build stops the push before anything is sent.
   Large files go through Git LFS; the LFS batch API skips objects the Hub already has, so a rerun after an
   interrupted push sends only what is missing.
5. The commit is tagged with the version.

The card and manifest pushed are built by :mod:`commonlink.release.hub_card` (repo id in the usage examples, the
Versions table, the manifest listing that card); the release folder itself is not modified.

``--endpoint`` goes to ``HfApi(endpoint=...)`` for every call made here. ``datasets`` and the loaders read the
endpoint from ``HF_ENDPOINT`` when they are imported; set it in the environment to load from a private Hub.
Servers without Xet storage need ``HF_HUB_DISABLE_XET=1`` (also read at import).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from commonlink.errors import BackendError, CommonlinkError, InputError
from commonlink.fileio import sha256_bytes, sha256_file
from commonlink.formats.release import (
    CARD_FILENAME,
    MANIFEST_FILENAME,
    check_version,
    is_version,
    manifest_units,
    version_key,
)
from commonlink.locks import output_lock
from commonlink.redact import redact_url
from commonlink.release.card_info import PUBLISHER_QUESTIONS
from commonlink.release.hub_card import (
    ReleaseFile,
    card_with_version,
    published_card,
    published_manifest,
    read_versions_table,
)
from commonlink.release.hub_client import (
    REPO_TYPE,
    hub_api,
    hub_progress_bars,
    read_remote_text,
    remote_files,
    require_token,
    resolve_endpoint,
    translate_hub_error,
)
from commonlink.release.hub_plan import PushPlan, check_repo_id, plan_push, read_manifest, rows_summary

if TYPE_CHECKING:  # pragma: no cover
    from huggingface_hub import HfApi

#: How many times a push starts over when another commit moved the branch under it (Hub answer 412).
_ATTEMPTS = 3


# ---------------------------------------------------------------------------------------------------------------
# records


@dataclass
class PushResult:
    """What a push did."""

    repo_id: str
    version: str
    commit: str  #: the commit the version tag points at
    url: str  #: repo URL on the endpoint
    repo_created: bool
    uploaded: list[str] = field(default_factory=list)  #: paths added or changed by the commit
    deleted: list[str] = field(default_factory=list)  #: paths removed by the commit
    unchanged: list[str] = field(default_factory=list)  #: paths already on the Hub with the same content
    already_published: bool = False  #: the tag already held exactly this release; nothing was sent
    tag_moved: bool = False  #: ``force`` moved an existing tag
    main_moved: bool = True  #: the commit went on ``main`` (False: an older version, only tagged)
    notes: list[str] = field(default_factory=list)


@dataclass
class VersionInfo:
    """One published version (a tag that reads as a version)."""

    version: str
    commit: str
    date: _dt.datetime | None
    rows: dict[str, int]
    message: str


# ---------------------------------------------------------------------------------------------------------------
# pushing


def push_release(
    release_dir: str | os.PathLike,
    repo_id: str,
    version: str,
    *,
    private: bool = False,
    endpoint: str | None = None,
    message: str | None = None,
    force: bool = False,
    token: str | None = None,
    progress: bool = False,
    move_main: bool = False,
    strict: bool = False,
) -> PushResult:
    """Publish ``release_dir`` as ``version`` of the dataset repo ``repo_id`` (see the module docstring).

    ``strict`` refuses a card that still marks datasheet questions as unanswered; ``move_main`` puts an older
    version on ``main`` on purpose."""
    root = Path(release_dir).expanduser().resolve()
    if not root.is_dir():  # before the lock, which would create its file beside a folder that is not there
        raise InputError(
            f"Release folder {root} does not exist.", "Pass the --out folder of `commonlink release build`."
        )
    with output_lock(root, what="commonlink release push"):  # the one a `release build` into root takes
        plan = plan_push(root, repo_id, version, message=message, progress=progress)
        notes = _unanswered_notes(plan, strict)
        endpoint = resolve_endpoint(endpoint)
        api = hub_api(endpoint, token)
        require_token(api, endpoint)  # before anything is created or uploaded
        with hub_progress_bars(progress):
            result = _Publisher(api, plan, endpoint, force=force, move_main=move_main).publish(private=private)
    result.notes[:0] = notes
    return result


def _unanswered_notes(plan: PushPlan, strict: bool) -> list[str]:
    if not plan.unanswered:
        return []
    questions = "; ".join(q.question for q in PUBLISHER_QUESTIONS if q.key in plan.unanswered)
    text = (
        f"the card still marks {len(plan.unanswered)} datasheet question(s) as unanswered "
        f"({', '.join(plan.unanswered)}: {questions})"
    )
    fix = (
        "Answer them in a card-info file (`commonlink release card-info --template --out card-info.yaml`), then "
        f"`commonlink release card {plan.release_dir} --card-info card-info.yaml` and push again."
    )
    if strict:
        raise InputError(f"--strict: {text}.", fix)
    return [f"{text[0].upper()}{text[1:]}. {fix}"]


class _Publisher:
    """One push against the Hub: where the commit goes, what it sends, the tag."""

    def __init__(self, api: HfApi, plan: PushPlan, endpoint: str, *, force: bool, move_main: bool) -> None:
        self.api, self.plan, self.endpoint = api, plan, endpoint
        self.force, self.move_main = force, move_main
        self.repo_id = plan.repo_id
        self.doing = f"Pushing {plan.release_dir} to {plan.repo_id}"

    def publish(self, *, private: bool) -> PushResult:
        try:
            created = not self.api.repo_exists(self.repo_id, repo_type=REPO_TYPE)
            url = str(self.api.create_repo(self.repo_id, repo_type=REPO_TYPE, private=private, exist_ok=True))
            for attempt in range(_ATTEMPTS):
                try:
                    return self._attempt(PushResult(self.repo_id, self.plan.version, "", url, created))
                except Exception as exc:  # 412: another commit moved the branch since it was read: start over
                    if getattr(getattr(exc, "response", None), "status_code", None) != 412 or attempt == _ATTEMPTS - 1:
                        raise
        except CommonlinkError:
            raise
        except Exception as exc:
            raise translate_hub_error(exc, endpoint=self.endpoint, repo_id=self.repo_id, doing=self.doing) from None
        raise AssertionError("unreachable")  # pragma: no cover

    def _attempt(self, result: PushResult) -> PushResult:
        plan = self.plan
        refs = self.api.list_repo_refs(self.repo_id, repo_type=REPO_TYPE)
        heads = {r.name: r.target_commit for r in refs.branches}
        tags = {r.name: r.target_commit for r in refs.tags}
        head = heads.get("main")
        if head is None:
            raise BackendError(
                f"{self.repo_id} has no main branch on {redact_url(self.endpoint)}.",
                "Create it on the Hub, then rerun.",
            )
        result.commit = head
        if plan.tag in tags and self._already_published(tags[plan.tag], result):
            tagged_card = read_remote_text(self.api, self.repo_id, CARD_FILENAME, tags[plan.tag])
            if tagged_card and tags[plan.tag] != head:  # a rerun after an interrupted out-of-order push
                self._list_on_main(head, tagged_card, result)
            return result
        branch, base = self._target_branch(head, heads, result)
        remote = remote_files(self.api, self.repo_id, base)
        target = self._target_files(read_remote_text(self.api, self.repo_id, CARD_FILENAME, base))
        changed = [f for f in target if not _same_content(f, remote.get(f.path))]
        stale = _stale_paths(plan, remote)
        result.unchanged = sorted(f.path for f in target if f not in changed)
        result.commit = self._commit(branch, base, changed, stale) if changed or stale else base
        result.uploaded, result.deleted = sorted(f.path for f in changed), stale
        if plan.tag in tags:
            self.api.delete_tag(self.repo_id, tag=plan.tag, repo_type=REPO_TYPE)
            result.tag_moved = True
        self.api.create_tag(
            self.repo_id, tag=plan.tag, revision=result.commit, tag_message=plan.commit_message, repo_type=REPO_TYPE
        )
        if branch != "main":
            self.api.delete_branch(self.repo_id, branch=branch, repo_type=REPO_TYPE)  # the tag keeps the commit
            card = next(f for f in target if f.path == CARD_FILENAME)
            self._list_on_main(head, card.content.decode("utf-8"), result)
        others = _unreferenced_data(plan, remote, stale)
        if others:
            result.notes.append(
                "Data files on the Hub that this release does not list were kept (older splits or configs): "
                + ", ".join(others[:5])
                + (" ..." if len(others) > 5 else "")
            )
        return result

    def _list_on_main(self, head: str, version_card: str, result: PushResult) -> None:
        """An older version (committed on a side branch) listed in the Versions table of the card ``main`` shows:
        one commit of main's card and manifest (the card's new sha256) on top of ``head``; main's data and version
        stay. Nothing is committed when main's card already lists the version as pushed."""
        from huggingface_hub import CommitOperationAdd

        version = self.plan.version
        main_card = read_remote_text(self.api, self.repo_id, CARD_FILENAME, head)
        main_manifest = read_remote_text(self.api, self.repo_id, MANIFEST_FILENAME, head)
        row = {r["version"]: r for r in read_versions_table(version_card)}.get(version)
        if not main_card or not main_manifest or row is None:
            return
        rows = {r["version"]: r for r in read_versions_table(main_card)}
        if rows.get(version) == row:
            return
        rows[version] = row
        card = ReleaseFile.of_bytes(
            CARD_FILENAME, card_with_version(main_card, list(rows.values()), self.repo_id).encode("utf-8")
        )
        manifest = published_manifest(json.loads(main_manifest), repo_id=self.repo_id, card=card)
        try:
            self.api._validate_yaml(card.content.decode("utf-8"), repo_type=REPO_TYPE)  # type: ignore[union-attr]
            self.api.create_commit(
                self.repo_id,
                [CommitOperationAdd(path_in_repo=f.path, path_or_fileobj=f.content) for f in (card, manifest)],
                commit_message=f"List version {version} in the card's Versions table",
                repo_type=REPO_TYPE,
                revision="main",
                parent_commit=head,
            )
        except Exception as exc:  # noqa: BLE001 - the version is published; only main's card lags (said so)
            result.notes.append(
                f"main's card could not list {version} yet ({type(exc).__name__}: main moved meanwhile?); rerun the "
                "same push to add it."
            )
            return
        result.notes.append(f"main's card now lists {version} in its Versions table (main's data is unchanged).")

    def _target_files(self, remote_card: str | None) -> list[ReleaseFile]:
        """The files the version holds: shards and figures as built, the card and manifest as published."""
        plan = self.plan
        card = published_card(
            plan.card_text,
            repo_id=self.repo_id,
            version=plan.version,
            rows_summary=plan.rows_summary(),
            message=plan.message,
            remote_card=remote_card,
        )
        manifest = published_manifest(plan.manifest, repo_id=self.repo_id, card=card)
        return [f for f in plan.files if f.path not in (CARD_FILENAME, MANIFEST_FILENAME)] + [card, manifest]

    def _already_published(self, tagged: str, result: PushResult) -> bool:
        """True when the tag holds exactly this release; an error when it holds other content (unless ``force``)."""
        tagged_files = remote_files(self.api, self.repo_id, tagged)
        target = self._target_files(read_remote_text(self.api, self.repo_id, CARD_FILENAME, tagged))
        if all(_same_content(f, tagged_files.get(f.path)) for f in target):
            result.commit, result.already_published, result.unchanged = tagged, True, [f.path for f in target]
            return True
        if not self.force:
            raise InputError(
                f"Version {self.plan.tag} of {self.repo_id} is already published (commit {tagged[:12]}) with different "
                "content; published versions are never changed.",
                "Push under a new version number (e.g. bump X.Y.Z), or pass --force to move the tag "
                "(anyone who loaded the old version will get different data).",
            )
        result.notes.append(
            f"--force: tag {self.plan.tag} moved away from commit {tagged[:12]}; anyone who loaded "
            f"{self.plan.tag} before will now get different data."
        )
        return False

    def _target_branch(self, head: str, heads: dict[str, str], result: PushResult) -> tuple[str, str]:
        """(branch, base commit) the version is committed on: ``main``, or a side branch for an older version."""
        version = self.plan.version
        on_main = _version_at(self.api, self.repo_id, head)
        if on_main is None or version_key(version) >= version_key(on_main):
            return "main", head
        if self.move_main:
            result.notes.append(
                f"--move-main: main moves from version {on_main} back to {version}; "
                f"`load_dataset({self.repo_id!r})` without a revision now reads {version}."
            )
            return "main", head
        result.main_moved = False
        result.notes.append(
            f"main stays on version {on_main}, the highest published; {version} is older, so it was only "
            f"tagged (load it with revision={version!r}). Pass --move-main to put it on main on purpose."
        )
        branch = f"release-{version}"
        if branch not in heads:  # a rerun after an interrupted push finds its branch and finishes on it
            self.api.create_branch(self.repo_id, branch=branch, revision=head, repo_type=REPO_TYPE)
            return branch, head
        return branch, heads[branch]

    def _commit(self, branch: str, base: str, changed: list[ReleaseFile], stale: list[str]) -> str:
        """One commit on ``branch`` (parent ``base``): the card's metadata checked by the Hub first, large files
        uploaded and checked against the manifest, then the commit; nothing is committed when a check fails."""
        from huggingface_hub import CommitOperationAdd

        card = next((f for f in changed if f.path == CARD_FILENAME), None)
        if card is not None:  # what create_commit asks first (POST /api/validate-yaml), before any upload here
            self.api._validate_yaml(card.content.decode("utf-8"), repo_type=REPO_TYPE)  # type: ignore[union-attr]
        operations = _operations(changed, stale, self.plan)
        additions = [op for op in operations if isinstance(op, CommitOperationAdd)]
        self.api.preupload_lfs_files(self.repo_id, additions=additions, repo_type=REPO_TYPE, revision=branch)
        _check_uploaded(additions, self.plan)
        commit = self.api.create_commit(
            self.repo_id,
            operations,
            commit_message=self.plan.commit_message,
            commit_description=self.plan.commit_description,
            repo_type=REPO_TYPE,
            revision=branch,
            parent_commit=base,
        )
        return commit.oid


def _version_at(api: HfApi, repo_id: str, revision: str) -> str | None:
    """The version whose manifest ``revision`` holds (None: no manifest, or no version in it)."""
    text = read_remote_text(api, repo_id, MANIFEST_FILENAME, revision)
    try:
        version = json.loads(text).get("version") if text else None
    except (json.JSONDecodeError, AttributeError):
        return None
    return version if isinstance(version, str) and is_version(version) else None


def _same_content(local: ReleaseFile, remote: Any) -> bool:
    if remote is None or remote.size != local.size:
        return False
    if remote.lfs is not None:
        return remote.lfs.sha256 == local.sha256
    return remote.blob_id == local.git_blob_id()


def _stale_paths(plan: PushPlan, remote: dict[str, Any]) -> list[str]:
    """Remote shards of the release's splits (and figures) that the release does not have any more."""
    ours = {f.path for f in plan.files}
    stale = set()
    for unit, info in plan.units.items():
        for rel in info.get("files", []):
            folder = rel.rsplit("/", 1)[0] if "/" in rel else ""
            for path in remote:
                if path in ours or not path.endswith(".parquet"):
                    continue
                parent, _, name = path.rpartition("/")
                if parent == folder and (name.startswith(f"{unit}-") or folder.split("/")[-1] == unit):
                    stale.add(path)
    stale.update(p for p in remote if p.startswith("figures/") and p not in ours)
    return sorted(stale)


def _unreferenced_data(plan: PushPlan, remote: dict[str, Any], stale: list[str]) -> list[str]:
    ours = {f.path for f in plan.files}
    return sorted(p for p in remote if p.endswith(".parquet") and p not in ours and p not in stale)


#: Files up to this size are read into memory when committed (sent as the bytes that were checked); larger ones
#: are uploaded from disk and checked by the hash of what was uploaded. The Hub's limit for non-LFS files.
_IN_MEMORY_BYTES = 10 * 1024 * 1024


def _operations(changed: list[ReleaseFile], stale: list[str], plan: PushPlan) -> list:
    """The commit's operations; a file up to :data:`_IN_MEMORY_BYTES` is read now and checked against the manifest
    (what is sent is what was checked)."""
    from huggingface_hub import CommitOperationAdd, CommitOperationDelete

    ops: list = []
    for f in changed:
        if f.content is None and f.size <= _IN_MEMORY_BYTES:
            data = f.source.read_bytes()  # type: ignore[union-attr]
            _check_against_manifest(plan, f.path, sha256_bytes(data))
            ops.append(CommitOperationAdd(path_in_repo=f.path, path_or_fileobj=data))
        else:
            ops.append(
                CommitOperationAdd(
                    path_in_repo=f.path, path_or_fileobj=f.content if f.content is not None else str(f.source)
                )
            )
    ops.extend(CommitOperationDelete(path_in_repo=p) for p in stale)
    return ops


def _check_uploaded(ops: list, plan: PushPlan) -> None:
    """After the large files are uploaded: the sha256 ``huggingface_hub`` computed of each (from the bytes it sent
    through Xet, or read for the LFS upload the server checks against it) must be the manifest's."""
    for op in ops:
        if getattr(op, "upload_info", None) is not None and not isinstance(op.path_or_fileobj, bytes):
            digest = op.upload_info.sha256.hex() if op.upload_info.is_hashed else sha256_file(op.path_or_fileobj)
            _check_against_manifest(plan, op.path_in_repo, digest)


def _check_against_manifest(plan: PushPlan, path: str, digest: str) -> None:
    if digest != plan.manifest.get("files", {}).get(path, {}).get("sha256"):
        raise InputError(
            f"{plan.release_dir / path} changed after the push checked it (its sha256 no longer matches "
            f"{MANIFEST_FILENAME}); nothing was committed, so version {plan.version} does not mix two builds.",
            "Let whatever is writing the release folder finish (or rebuild it), then push again.",
        )


# ---------------------------------------------------------------------------------------------------------------
# listing versions


def list_versions(repo_id: str, *, endpoint: str | None = None, token: str | None = None) -> list[VersionInfo]:
    """Tags of ``repo_id`` that read as versions, newest first, with commit date, rows per split and message."""
    check_repo_id(repo_id)
    endpoint = resolve_endpoint(endpoint)
    api = hub_api(endpoint, token)
    doing = f"Listing versions of {repo_id}"
    try:
        refs = api.list_repo_refs(repo_id, repo_type=REPO_TYPE)
        versions = []
        for ref in refs.tags:
            if not is_version(ref.name):
                continue
            commits = api.list_repo_commits(repo_id, repo_type=REPO_TYPE, revision=ref.target_commit)
            top = commits[0] if commits else None
            rows: dict[str, int] = {}
            manifest_text = read_remote_text(api, repo_id, MANIFEST_FILENAME, ref.target_commit)
            if manifest_text:
                with_rows = json.loads(manifest_text)
                units = manifest_units(with_rows)
                rows = {name: int(info.get("rows", 0)) for name, info in units.items()}
            title = top.title if top else ""
            message = re.sub(rf"^Release {re.escape(ref.name)}:?\s*", "", title)
            versions.append(VersionInfo(ref.name, ref.target_commit, top.created_at if top else None, rows, message))
    except CommonlinkError:
        raise
    except Exception as exc:
        raise translate_hub_error(exc, endpoint=endpoint, repo_id=repo_id, doing=doing) from None
    return sorted(versions, key=lambda v: version_key(v.version), reverse=True)


__all__ = [
    "REPO_TYPE",
    "PushPlan",
    "PushResult",
    "ReleaseFile",
    "VersionInfo",
    "card_with_version",
    "check_repo_id",
    "check_version",
    "hub_api",
    "list_versions",
    "plan_push",
    "push_release",
    "read_manifest",
    "read_versions_table",
    "require_token",
    "resolve_endpoint",
    "rows_summary",
    "translate_hub_error",
    "version_key",
]
