"""Is a ``--data`` / ``--model`` value a local path or a Hub id? Say so at once when it is neither.

A value that is not an existing path is read as a Hub id. Left to ``datasets`` or ``transformers``, a typo such as
``typo-folder/rel`` costs ~25 s of download retries and ends in an error about a file or the network; one metadata
request (``HfApi.dataset_info`` / ``model_info``, no retries) tells at once whether the Hub has it, and the error
names both the local path tried and the Hub's answer. When the Hub cannot be reached (``HF_HUB_OFFLINE=1``
included: then it is not asked) a copy in the local Hugging Face caches is accepted, as datasets and transformers
fall back to it.
"""

from __future__ import annotations

import os
from pathlib import Path

from commonlink.errors import InputError

#: Seconds to wait for the Hub's answer about a repo (one request).
LOOKUP_TIMEOUT_S = 15.0


def hub_offline() -> bool:
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


def _endpoint() -> str:
    from huggingface_hub import constants

    return constants.ENDPOINT


def _not_found(text: str, kind: str, option: str, reason: str) -> InputError:
    tried = Path(text).expanduser().absolute()
    return InputError(
        f"{option} {text}: there is no such local path ({tried}), and it is not a Hub {kind} either: {reason}.",
        f"Check the path (relative paths start from {Path.cwd()}), or the repo id (owner/name), your token "
        "(HF_TOKEN or `hf auth login`) and HF_ENDPOINT.",
    )


def lookup_reason(repo_id: str, kind: str, revision: str | None = None) -> tuple[str | None, bool]:
    """(why the Hub does not serve ``repo_id``, a ``"dataset"`` or ``"model"``, or None when it does; whether the
    Hub answered at all). A missing revision of an existing repo is an :class:`InputError` at once."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    if hub_offline():
        return "HF_HUB_OFFLINE=1 is set, so the Hub was not asked", False
    info = HfApi().dataset_info if kind == "dataset" else HfApi().model_info
    try:
        info(repo_id, revision=revision, timeout=LOOKUP_TIMEOUT_S)
    except GatedRepoError:
        return f"{repo_id} is gated on {_endpoint()}: accept its terms on its page, then log in with that account", True
    except RevisionNotFoundError:  # the repo is there: not a path question
        raise InputError(
            f"{repo_id}: revision {revision!r} not found on {_endpoint()}.",
            "List the versions with `commonlink release versions REPO`.",
        ) from None
    except RepositoryNotFoundError:
        return (
            f"{_endpoint()} has no {kind} {repo_id} (or it is private and the token given, if any, cannot see it)",
            True,
        )
    except HfHubHTTPError as exc:
        return f"the Hub at {_endpoint()} answered {exc}", True
    except Exception as exc:  # noqa: BLE001 - network errors of httpx/requests, whichever huggingface_hub uses
        return f"the Hub at {_endpoint()} could not be reached ({type(exc).__name__}: {exc})", False
    return None, True


def in_local_cache(repo_id: str, kind: str) -> bool:
    """Whether the Hugging Face caches hold a copy that datasets / transformers fall back to without the Hub."""
    from huggingface_hub import constants

    if (Path(constants.HF_HUB_CACHE) / f"{kind}s--{repo_id.replace('/', '--')}").is_dir():
        return True
    if kind == "dataset":
        from datasets import config

        return (Path(config.HF_DATASETS_CACHE) / repo_id.replace("/", "___")).is_dir()
    return False


def require_hub_repo(text: str, kind: str, revision: str | None = None, *, option: str) -> None:
    """``text`` is no existing path: refuse it at once unless the Hub has that ``kind`` of repo, or (Hub out of
    reach, offline mode included) a cached copy exists."""
    reason, answered = lookup_reason(text, kind, revision)
    if reason is None or (not answered and in_local_cache(text, kind)):
        return
    if not answered:
        reason += ", and the local Hugging Face cache has no copy"
    raise _not_found(text, kind, option, reason)


def require_hub_dataset(text: str, revision: str | None = None, *, option: str = "--data") -> None:
    require_hub_repo(text, "dataset", revision, option=option)


def require_hub_model(text: str, revision: str | None = None, *, option: str = "--model") -> None:
    if not os.path.exists(os.path.expanduser(text)):
        require_hub_repo(text, "model", revision, option=option)
