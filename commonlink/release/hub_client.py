"""Talking to the Hub through ``huggingface_hub``: the client, the token check, reading a revision's files, and
Hub errors turned into messages that say what failed and what to do (the Hub's own reason kept, never the token).
"""

from __future__ import annotations

import contextlib
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from commonlink import __version__
from commonlink.errors import (
    BackendError,
    CommonlinkError,
    InputError,
    MissingDependencyError,
)
from commonlink.progress import library_bars_off
from commonlink.redact import redact_text, redact_url

if TYPE_CHECKING:  # pragma: no cover
    from huggingface_hub import HfApi

REPO_TYPE = "dataset"
#: The most of the Hub's reason a message quotes (a validation error can list many fields).
_REASON_LIMIT = 1500


def hub_progress_bars(shown: bool) -> contextlib.AbstractContextManager:
    """huggingface_hub's own tqdm bars (upload, download) only where ours are shown and stderr is a terminal: off
    one, tqdm writes every refresh as a line into the log. ``HF_HUB_DISABLE_PROGRESS_BARS`` set either way wins."""
    from huggingface_hub import constants, utils

    if (shown and sys.stderr.isatty()) or constants.HF_HUB_DISABLE_PROGRESS_BARS is not None:
        return contextlib.nullcontext()
    return library_bars_off(utils)


def hub_reason(exc: BaseException) -> str:
    """The Hub's own words for a refusal, every line of them (``HfHubHTTPError.server_message``; ``str(exc)``
    may open with a bare "Bad request:" line and carry them further down), on one line."""
    server = (getattr(exc, "server_message", None) or "").strip()
    text = server or str(exc).strip()
    lines = [
        line.strip()
        for line in text.splitlines()
        if line.strip() and line.strip().rstrip(":") not in ("Bad request", "Bad Request")
    ]
    reason = " ".join(lines) or type(exc).__name__
    return reason if len(reason) <= _REASON_LIMIT else reason[:_REASON_LIMIT] + " ..."


def _network_error(exc: BaseException) -> bool:
    names = {cls.__name__ for cls in type(exc).__mro__}
    return bool(
        names & {"TransportError", "NetworkError", "ConnectError", "TimeoutException", "RemoteProtocolError"}
    ) or isinstance(exc, ConnectionError)


def _status(exc: BaseException) -> int | None:
    response = getattr(exc, "response", None)
    return getattr(response, "status_code", None)


def translate_hub_error(
    exc: BaseException, *, endpoint: str, repo_id: str | None = None, doing: str
) -> CommonlinkError:
    """A Hub client exception -> a :class:`CommonlinkError` saying what failed and what to do (never the token)."""
    status = _status(exc)
    detail = hub_reason(exc)
    # HF_ENDPOINT / --endpoint may carry user:password@ or ?token=, and the server may echo them (or the token,
    # or its Authorization header) in its body: never in a message
    netloc = urlsplit(endpoint).netloc
    userinfo = netloc.rsplit("@", 1)[0] if "@" in netloc else ""
    endpoint, detail = redact_url(endpoint), redact_text(detail, (userinfo, userinfo.partition(":")[2]))
    if "xet" in detail.lower():
        return BackendError(
            f"{doing}: the Hub at {endpoint} does not offer Xet storage, which huggingface_hub uses by default "
            f"({detail}).",
            "Set HF_HUB_DISABLE_XET=1 in the environment (read when huggingface_hub is imported) and rerun; large "
            "files then go through Git LFS.",
        )
    if detail.startswith("Invalid metadata in README.md"):  # huggingface_hub's ValueError after /api/validate-yaml
        return InputError(
            f"{doing}: the Hub refused the card's metadata ({detail}).",
            "Correct the card's YAML header (e.g. rebuild with a license id the Hub lists: --license cc-by-4.0), then "
            "push again; nothing was uploaded.",
        )
    if _network_error(exc):
        return BackendError(
            f"{doing}: cannot reach the Hub at {endpoint} ({type(exc).__name__}: {detail}).",
            "Check the network or --endpoint, then rerun the same command: files already uploaded are not sent again.",
        )
    if status == 401:
        return InputError(
            f"{doing}: the Hub at {endpoint} rejected the token (401 Unauthorized).",
            f"Create a token with write access at {endpoint}/settings/tokens "
            "and set HF_TOKEN, or run `hf auth login --force`.",
        )
    if status == 403:
        return InputError(
            f"{doing}: the token has no write access to {repo_id or 'this repo'} (403 Forbidden).",
            "Use a token with write access to that user or organisation, or push to a namespace you own.",
        )
    if status == 404 and repo_id:
        return InputError(
            f"{doing}: {repo_id} was not found on {endpoint}.", "Check the repo id (ORG/NAME) and the endpoint."
        )
    if status == 412:
        return BackendError(
            f"{doing}: {repo_id} changed on the Hub while pushing (someone else committed).",
            "Rerun the same command; it compares with the new head and sends only what is missing.",
        )
    if status == 409:
        return BackendError(
            f"{doing}: the Hub answered 409 Conflict ({detail}).",
            "Another commit to this repo was in progress (or the same tag was just created by another push): wait a "
            "moment and rerun the same command; it compares with the new state and sends only what is missing.",
        )
    if status is not None and status >= 500:
        return BackendError(
            f"{doing}: the Hub at {endpoint} failed ({status} server error).",
            "Rerun the same command: files already uploaded are not sent again, and a commit that already landed is "
            "only tagged. If it keeps failing, check the Hub's status page or the endpoint.",
        )
    return BackendError(
        f"{doing}: the Hub answered {status or 'an error'} ({detail}).",
        "Check the repo id and endpoint, then rerun the command.",
    )


def hub_api(endpoint: str | None, token: str | bool | None) -> HfApi:
    try:
        from huggingface_hub import HfApi
    except ImportError as exc:  # pragma: no cover - huggingface_hub is a core dependency
        raise MissingDependencyError("huggingface_hub", "all", "Publishing to the Hub") from exc
    return HfApi(endpoint=endpoint, token=token, library_name="commonlink", library_version=__version__)


def resolve_endpoint(endpoint: str | None) -> str:
    if endpoint:
        if not re.match(r"^https?://", endpoint):
            raise InputError(
                f"--endpoint {endpoint!r} is not an http(s) URL.", "e.g. --endpoint https://huggingface.co"
            )
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
            f"Create a write token at {redact_url(endpoint)}/settings/tokens, "
            "then `export HF_TOKEN=...` or run `hf auth login`.",
        )
    try:
        who = api.whoami(token=token)
    except Exception as exc:
        raise translate_hub_error(exc, endpoint=endpoint, doing="Checking the token") from None
    return str(who.get("name") or "?")


def remote_files(api: HfApi, repo_id: str, revision: str) -> dict[str, Any]:
    from huggingface_hub.hf_api import RepoFile

    return {
        entry.path: entry
        for entry in api.list_repo_tree(repo_id, recursive=True, revision=revision, repo_type=REPO_TYPE)
        if isinstance(entry, RepoFile)
    }


def read_remote_text(api: HfApi, repo_id: str, path: str, revision: str) -> str | None:
    from huggingface_hub.errors import EntryNotFoundError

    try:
        local = api.hf_hub_download(repo_id, path, repo_type=REPO_TYPE, revision=revision)
    except EntryNotFoundError:
        return None
    return Path(local).read_text(encoding="utf-8")


__all__ = [
    "REPO_TYPE",
    "hub_api",
    "hub_reason",
    "read_remote_text",
    "remote_files",
    "require_token",
    "resolve_endpoint",
    "translate_hub_error",
]
