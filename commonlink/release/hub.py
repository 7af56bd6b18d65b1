"""Publish release folders as versions of a Hugging Face Hub dataset repo, and list those versions.

A version is one commit on ``main`` holding the release's files (shards, card, figures, manifest) plus a git tag
named after the version (``1.2.0``), so ``datasets.load_dataset(repo, revision="1.2.0")`` and
``commonlink.loaders.load_common_o(repo, split, revision="1.2.0")`` read exactly that version forever.

How a push goes (every step through the real ``huggingface_hub`` client):

1. Local checks, no network: the folder has ``README.md`` and ``manifest.json``, every file the manifest lists is
   there with its recorded sha256 and size, and the manifest's version equals ``--version``.
2. Token: ``HF_TOKEN`` or the ``huggingface_hub`` login cache; ``whoami`` checks it before anything is uploaded.
   The token is never printed or logged.
3. The repo is created when missing. If the version tag exists, the push stops unless the tag already holds
   exactly this release (then there is nothing to do) or ``force=True`` (the tag is moved, with a warning).
4. The files on ``main`` are compared with the release by hash (LFS sha256 or git blob id): only files that
   differ are sent, stale shards of the release's splits (and stale figures) are deleted, all in **one commit**
   whose parent is the ``main`` head that was compared (a concurrent push makes it fail instead of mixing).
   Large files go through Git LFS; the LFS batch API skips objects the Hub already has, so a rerun after an
   interrupted push sends only what is missing.
5. The commit is tagged with the version.

The card pushed is the release's ``README.md`` with a ``## Versions`` table (version, date, rows per split,
message) carried over from the card on the Hub and updated with this version. The release folder itself is not
modified (its manifest keeps matching it).

``--endpoint`` goes to ``HfApi(endpoint=...)`` for every call made here. ``datasets`` and the loaders read the
endpoint from ``HF_ENDPOINT`` when they are imported; set it in the environment to load from a private Hub.
Servers without Xet storage need ``HF_HUB_DISABLE_XET=1`` (also read at import).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from commonlink import __version__
from commonlink.errors import (
    BackendError,
    CommonlinkError,
    InputError,
    MissingDependencyError,
    SchemaError,
)
from commonlink.fileio import sha256_bytes, sha256_file
from commonlink.formats.card import markdown_table
from commonlink.formats.release import (
    CARD_FILENAME,
    MANIFEST_FILENAME,
    check_version,
    is_version,
    read_release_manifest,
    version_key,
)
from commonlink.progress import track
from commonlink.redact import redact_text, redact_url

if TYPE_CHECKING:  # pragma: no cover
    from huggingface_hub import HfApi

REPO_TYPE = "dataset"
VERSIONS_HEADING = "## Versions"
_REPO_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
_VERSION_COLUMNS = ("version", "date", "rows", "message")


# ---------------------------------------------------------------------------------------------------------------
# records


@dataclass
class ReleaseFile:
    """One file of the release as it will be stored in the repo."""

    path: str  #: path in the repo (= relative path in the release folder)
    size: int
    sha256: str
    source: Path | None = None  #: file on disk; None when ``content`` holds the bytes (the card)
    content: bytes | None = None

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
    units: dict[str, dict]  #: manifest splits (Common-O) or configs (association): {name: {"rows", "files"}}
    kind: str
    message: str | None

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    def rows_summary(self) -> str:
        return rows_summary(self.units)


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
# local planning (no network)


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
        raise InputError(f"--repo {repo_id!r} is not a Hub repo id ({reason}).", "Write it as ORG/NAME, e.g. --repo my-lab/common-o-extra.")
    return repo_id


def rows_summary(units: dict[str, dict]) -> str:
    return ", ".join(f"{name}: {int(info.get('rows', 0)):,}" for name, info in units.items()) or "-"


def read_manifest(release_dir: Path) -> dict:
    """The release's manifest (clear errors from the release builder's reader), with its ``files`` table."""
    manifest = read_release_manifest(release_dir)
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict):
        raise SchemaError(
            f"{release_dir / MANIFEST_FILENAME}: no 'files' table.", "Rebuild the release with `commonlink release build`."
        )
    return manifest


def plan_push(
    release_dir: str | os.PathLike, repo_id: str, version: str, *, message: str | None = None, progress: bool = False
) -> PushPlan:
    """Check a release folder and list what pushing it as ``version`` sends. Makes no network call.

    Every file is hashed once here (sha256, checked against the manifest); the push reuses those hashes.
    """
    root = Path(release_dir)
    check_repo_id(repo_id)
    check_version(version)
    if not root.is_dir():
        raise InputError(f"Release folder {root} does not exist.", "Pass the --out folder of `commonlink release build`.")
    manifest = read_manifest(root)
    if not (root / CARD_FILENAME).is_file():
        raise InputError(f"{root} has no {CARD_FILENAME} (the dataset card).", "Rebuild the release with `commonlink release build`.")
    built_version = manifest.get("version")
    if built_version not in (None, "", version):
        raise InputError(
            f"{root} was built as version {built_version!r} but --version is {version!r}.",
            f"Push it with --version {built_version}, or rebuild with `commonlink release build ... --version {version}`.",
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
            "Rebuild the release (`commonlink release build ... --overwrite`) instead of editing its files.",
        )
    if CARD_FILENAME not in {f.path for f in files}:
        card = root / CARD_FILENAME  # older manifests may not list the card: take it as it is
        files.append(ReleaseFile(CARD_FILENAME, card.stat().st_size, sha256_file(card), source=card))
    manifest_path = root / MANIFEST_FILENAME
    files.append(ReleaseFile(MANIFEST_FILENAME, manifest_path.stat().st_size, sha256_file(manifest_path), source=manifest_path))
    units = manifest.get("splits") or manifest.get("configs") or {}
    kind = str(manifest.get("kind") or "common_o")
    title = f"Release {version}" + (f": {message}" if message else "")
    description = (
        f"{manifest.get('name') or repo_id} {version} ({kind}); rows: {rows_summary(units)}; "
        f"built with commonlink {manifest.get('toolkit_version') or '?'}, pushed with commonlink {__version__}."
    )
    return PushPlan(root, repo_id, version, version, title.splitlines()[0][:200], description,
                    sorted(files, key=lambda f: f.path), units, kind, message)


# ---------------------------------------------------------------------------------------------------------------
# the card's Versions table


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
    following = re.search(r"^#{1,2} ", text[match.end():], flags=re.M)
    end = match.end() + following.start() if following else len(text)
    return match.start(), end


def read_versions_table(card_text: str) -> list[dict[str, str]]:
    """Rows of a card's ``## Versions`` table as ``{version, date, rows, message}`` dicts."""
    span = _versions_section(card_text)
    if span is None:
        return []
    rows = []
    for line in card_text[span[0]:span[1]].splitlines():
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
        f"`load_dataset(\"{repo_id}\", revision=\"X.Y.Z\")` reads exactly that version.\n\n"
        f"{table}\n"
    )
    span = _versions_section(card_text)
    if span is None:
        return card_text.rstrip("\n") + "\n\n" + section
    tail = card_text[span[1]:]
    return card_text[: span[0]] + section + ("\n" + tail if tail else "")


def _version_row(plan: PushPlan, date: str) -> dict[str, str]:
    return {"version": plan.version, "date": date, "rows": plan.rows_summary(), "message": (plan.message or "").strip()}


def build_card(plan: PushPlan, remote_card: str | None) -> ReleaseFile:
    """The card to push: the release's card plus the Versions table merged from the card on the Hub.

    A row the Hub card already has for this version keeps its date, so a rerun of an interrupted push produces
    the same bytes (and so the same commit content).
    """
    local = (plan.release_dir / CARD_FILENAME).read_text(encoding="utf-8")
    rows = {r["version"]: r for r in read_versions_table(local)}
    if remote_card:
        rows.update({r["version"]: r for r in read_versions_table(remote_card)})
    date = rows.get(plan.version, {}).get("date") or _dt.datetime.now(_dt.timezone.utc).date().isoformat()
    rows[plan.version] = _version_row(plan, date)
    content = card_with_version(local, list(rows.values()), plan.repo_id).encode("utf-8")
    return ReleaseFile(CARD_FILENAME, len(content), sha256_bytes(content), content=content)


# ---------------------------------------------------------------------------------------------------------------
# Hub access


def _network_error(exc: BaseException) -> bool:
    names = {cls.__name__ for cls in type(exc).__mro__}
    return bool(names & {"TransportError", "NetworkError", "ConnectError", "TimeoutException", "RemoteProtocolError"}) or isinstance(exc, ConnectionError)


def _status(exc: BaseException) -> int | None:
    response = getattr(exc, "response", None)
    return getattr(response, "status_code", None)


def translate_hub_error(exc: BaseException, *, endpoint: str, repo_id: str | None = None, doing: str) -> CommonlinkError:
    """A Hub client exception -> a :class:`CommonlinkError` saying what failed and what to do (never the token)."""
    status = _status(exc)
    # The Hub's own words (HfHubHTTPError.server_message) say what it refused; str(exc) may open with a bare
    # "Bad request:" line and carry them further down.
    server = (getattr(exc, "server_message", None) or "").strip()
    detail = server.splitlines()[0] if server else str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    # HF_ENDPOINT / --endpoint may carry user:password@ or ?token=: never in a message
    endpoint, detail = redact_url(endpoint), redact_text(detail)
    if "xet" in detail.lower():
        return BackendError(
            f"{doing}: the Hub at {endpoint} does not offer Xet storage, which huggingface_hub uses by default "
            f"({detail}).",
            "Set HF_HUB_DISABLE_XET=1 in the environment (read when huggingface_hub is imported) and rerun; large "
            "files then go through Git LFS.",
        )
    if _network_error(exc):
        return BackendError(
            f"{doing}: cannot reach the Hub at {endpoint} ({type(exc).__name__}: {detail}).",
            "Check the network or --endpoint, then rerun the same command: files already uploaded are not sent again.",
        )
    if status == 401:
        return InputError(
            f"{doing}: the Hub at {endpoint} rejected the token (401 Unauthorized).",
            f"Create a token with write access at {endpoint}/settings/tokens and set HF_TOKEN, or run `hf auth login --force`.",
        )
    if status == 403:
        return InputError(
            f"{doing}: the token has no write access to {repo_id or 'this repo'} (403 Forbidden).",
            "Use a token with write access to that user or organisation, or push to a namespace you own.",
        )
    if status == 404 and repo_id:
        return InputError(f"{doing}: {repo_id} was not found on {endpoint}.", "Check the repo id (ORG/NAME) and the endpoint.")
    if status == 412:
        return BackendError(
            f"{doing}: {repo_id} changed on the Hub while pushing (someone else committed).",
            "Rerun the same command; it compares with the new head and sends only what is missing.",
        )
    if status is not None and status >= 500:
        return BackendError(
            f"{doing}: the Hub at {endpoint} failed ({status} server error).",
            "Rerun the same command: files already uploaded are not sent again, and a commit that already landed is "
            "only tagged. If it keeps failing, check the Hub's status page or the endpoint.",
        )
    return BackendError(f"{doing}: the Hub answered {status or 'an error'} ({detail}).", "Check the repo id and endpoint, then rerun the command.")


def hub_api(endpoint: str | None, token: str | bool | None) -> HfApi:
    try:
        from huggingface_hub import HfApi
    except ImportError as exc:  # pragma: no cover - huggingface_hub is a core dependency
        raise MissingDependencyError("huggingface_hub", "all", "Publishing to the Hub") from exc
    return HfApi(endpoint=endpoint, token=token, library_name="commonlink", library_version=__version__)


def resolve_endpoint(endpoint: str | None) -> str:
    if endpoint:
        if not re.match(r"^https?://", endpoint):
            raise InputError(f"--endpoint {endpoint!r} is not an http(s) URL.", "e.g. --endpoint https://huggingface.co")
        return endpoint.rstrip("/")
    from huggingface_hub import constants

    return constants.ENDPOINT.rstrip("/")


def require_token(api: HfApi, endpoint: str) -> str:
    """The user name the token belongs to; a clear error when there is no token or the Hub rejects it."""
    from huggingface_hub import get_token

    token = api.token if isinstance(api.token, str) else get_token()
    if not token:
        raise InputError(
            "No Hugging Face token found (HF_TOKEN is unset and there is no `hf auth login` cache).",
            f"Create a write token at {redact_url(endpoint)}/settings/tokens, then `export HF_TOKEN=...` or run `hf auth login`.",
        )
    try:
        who = api.whoami(token=token)
    except Exception as exc:
        raise translate_hub_error(exc, endpoint=endpoint, doing="Checking the token") from None
    return str(who.get("name") or "?")


def _remote_files(api: HfApi, repo_id: str, revision: str) -> dict[str, Any]:
    from huggingface_hub.hf_api import RepoFile

    return {
        entry.path: entry
        for entry in api.list_repo_tree(repo_id, recursive=True, revision=revision, repo_type=REPO_TYPE)
        if isinstance(entry, RepoFile)
    }


def _same_content(local: ReleaseFile, remote: Any) -> bool:
    if remote is None or remote.size != local.size:
        return False
    if remote.lfs is not None:
        return remote.lfs.sha256 == local.sha256
    return remote.blob_id == local.git_blob_id()


def _read_remote_text(api: HfApi, repo_id: str, path: str, revision: str) -> str | None:
    from huggingface_hub.errors import EntryNotFoundError

    try:
        local = api.hf_hub_download(repo_id, path, repo_type=REPO_TYPE, revision=revision)
    except EntryNotFoundError:
        return None
    return Path(local).read_text(encoding="utf-8")


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
) -> PushResult:
    """Publish ``release_dir`` as ``version`` of the dataset repo ``repo_id`` (see the module docstring)."""
    plan = plan_push(release_dir, repo_id, version, message=message, progress=progress)
    endpoint = resolve_endpoint(endpoint)
    api = hub_api(endpoint, token)
    require_token(api, endpoint)  # before anything is created or uploaded

    doing = f"Pushing {plan.release_dir} to {repo_id}"
    try:
        created = not api.repo_exists(repo_id, repo_type=REPO_TYPE)
        repo_url = api.create_repo(repo_id, repo_type=REPO_TYPE, private=private, exist_ok=True)
        refs = api.list_repo_refs(repo_id, repo_type=REPO_TYPE)
    except Exception as exc:
        raise translate_hub_error(exc, endpoint=endpoint, repo_id=repo_id, doing=doing) from None
    heads = {r.name: r.target_commit for r in refs.branches}
    tags = {r.name: r.target_commit for r in refs.tags}
    head = heads.get("main")
    if head is None:
        raise BackendError(f"{repo_id} has no main branch on {redact_url(endpoint)}.", "Create it on the Hub, then rerun.")
    result = PushResult(repo_id, version, head, str(repo_url), created)

    try:
        if plan.tag in tags:
            tagged = tags[plan.tag]
            tagged_files = _remote_files(api, repo_id, tagged)
            card = build_card(plan, _read_remote_text(api, repo_id, CARD_FILENAME, tagged))
            target = [f for f in plan.files if f.path != CARD_FILENAME] + [card]
            if all(_same_content(f, tagged_files.get(f.path)) for f in target):
                result.commit, result.already_published = tagged, True
                result.unchanged = [f.path for f in target]
                return result
            if not force:
                raise InputError(
                    f"Version {plan.tag} of {repo_id} is already published (commit {tagged[:12]}) with different "
                    "content; published versions are never changed.",
                    "Push under a new version number (e.g. bump X.Y.Z), or pass --force to move the tag "
                    "(anyone who loaded the old version will get different data).",
                )
            result.notes.append(
                f"--force: tag {plan.tag} moved away from commit {tagged[:12]}; anyone who loaded {plan.tag} before "
                "will now get different data."
            )

        remote = _remote_files(api, repo_id, head)
        card = build_card(plan, _read_remote_text(api, repo_id, CARD_FILENAME, head))
        target = [f for f in plan.files if f.path != CARD_FILENAME] + [card]
        changed = [f for f in target if not _same_content(f, remote.get(f.path))]
        stale = _stale_paths(plan, remote)
        result.unchanged = sorted(f.path for f in target if f not in changed)
        if changed or stale:
            commit = api.create_commit(
                repo_id,
                _operations(changed, stale),
                commit_message=plan.commit_message,
                commit_description=plan.commit_description,
                repo_type=REPO_TYPE,
                revision="main",
                parent_commit=head,
            )
            result.commit = commit.oid
        else:
            result.commit = head  # an earlier, interrupted run already committed this release
        result.uploaded = sorted(f.path for f in changed)
        result.deleted = stale
        if plan.tag in tags:
            api.delete_tag(repo_id, tag=plan.tag, repo_type=REPO_TYPE)
            result.tag_moved = True
        api.create_tag(repo_id, tag=plan.tag, revision=result.commit, tag_message=plan.commit_message, repo_type=REPO_TYPE)
    except CommonlinkError:
        raise
    except Exception as exc:
        raise translate_hub_error(exc, endpoint=endpoint, repo_id=repo_id, doing=doing) from None
    others = _unreferenced_data(plan, remote, stale)
    if others:
        result.notes.append(
            "Data files on the Hub that this release does not list were kept (older splits or configs): "
            + ", ".join(others[:5]) + (" ..." if len(others) > 5 else "")
        )
    return result


def _unreferenced_data(plan: PushPlan, remote: dict[str, Any], stale: list[str]) -> list[str]:
    ours = {f.path for f in plan.files}
    return sorted(p for p in remote if p.endswith(".parquet") and p not in ours and p not in stale)


def _operations(changed: list[ReleaseFile], stale: list[str]) -> list:
    from huggingface_hub import CommitOperationAdd, CommitOperationDelete

    ops: list = []
    for f in changed:
        op = CommitOperationAdd(path_in_repo=f.path, path_or_fileobj=f.content if f.content is not None else str(f.source))
        op.upload_info.sha256 = bytes.fromhex(f.sha256)  # already hashed while checking the manifest
        ops.append(op)
    ops.extend(CommitOperationDelete(path_in_repo=p) for p in stale)
    return ops


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
            manifest_text = _read_remote_text(api, repo_id, MANIFEST_FILENAME, ref.target_commit)
            if manifest_text:
                with_rows = json.loads(manifest_text)
                units = with_rows.get("splits") or with_rows.get("configs") or {}
                rows = {name: int(info.get("rows", 0)) for name, info in units.items()}
            title = top.title if top else ""
            message = re.sub(rf"^Release {re.escape(ref.name)}:?\s*", "", title)
            versions.append(VersionInfo(ref.name, ref.target_commit, top.created_at if top else None, rows, message))
    except CommonlinkError:
        raise
    except Exception as exc:
        raise translate_hub_error(exc, endpoint=endpoint, repo_id=repo_id, doing=doing) from None
    return sorted(versions, key=lambda v: version_key(v.version), reverse=True)
