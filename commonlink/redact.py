"""Masking credentials in URLs before they reach a message, a log line or a result file.

A URL may carry a secret in its user-info (``https://user:token@host``), its query (``?token=...`` or a bare
``?SECRET``), its fragment (``#token=...``) or a path segment after a credential word (``/token/SECRET/``);
``HF_ENDPOINT`` and ``--base-url`` are such URLs. :func:`redact_url` masks one URL.

:func:`redact_text` is the one masker for every text that can carry a server's body or a URL (Hub errors, the
OpenAI path's errors, and, at the CLI, every error message): every URL in it as above, ``Bearer`` / ``Basic`` /
``token`` credentials (``Authorization: Basic <base64 of user:token>`` included), known token shapes (``hf_...``,
``sk-...``, GitHub's ``ghp_...``), and every secret the environment holds (the values of variables named like
``*TOKEN*``, ``*KEY*``, ``*SECRET*``, ``*PASSWORD*``, and the user-info of ``HF_ENDPOINT``), also when base64-encoded
as Basic authentication sends them.
"""

from __future__ import annotations

import base64
import os
import re
from collections.abc import Iterable
from urllib.parse import urlsplit, urlunsplit

MASK = "***"
# scheme://... up to whitespace or a quote/bracket that ends a URL quoted inside a message.
_URL = re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>`]+")
# Words that make a path segment name a credential: the segment after it is one (``/token/SECRET/``,
# ``/api-key/SECRET``). Matched against the segment's parts split at - _ . so ``tokenizer`` does not count.
_CREDENTIAL_WORDS = {
    "token",
    "tokens",
    "secret",
    "password",
    "passwd",
    "key",
    "apikey",
    "auth",
    "credential",
    "credentials",
    "signature",
    "sig",
    "session",
    "bearer",
}


def redact_url(url: str) -> str:
    """``url`` without what may be a credential: ``user:password@`` and every query value become ``***``."""
    try:
        parts = urlsplit(url)
    except ValueError:  # e.g. an unbalanced '[' in the host: mask everything after the scheme
        scheme, _, _ = url.partition("://")
        return f"{scheme}://{MASK}"
    netloc = parts.netloc
    if "@" in netloc:
        netloc = f"{MASK}@" + netloc.rsplit("@", 1)[1]
    return urlunsplit(
        (parts.scheme, netloc, _redact_path(parts.path), _redact_query(parts.query), _redact_query(parts.fragment))
    )


def _redact_query(query: str) -> str:
    """Every value of ``k=v`` masked, and every bare item (``?SECRET``) masked whole; keys are kept."""
    items = [item.partition("=") for item in re.split(r"[&;]", query)] if query else []
    return "&".join(f"{key}={MASK}" if sep else (MASK if key else "") for key, sep, _ in items)


def _redact_path(path: str) -> str:
    segments = path.split("/")
    for i in range(1, len(segments)):
        if segments[i] and _CREDENTIAL_WORDS & set(re.split(r"[-_.]", segments[i - 1].lower())):
            segments[i] = MASK
    return "/".join(segments)


#: ``Bearer X`` / ``Basic X`` (an Authorization header's scheme and credentials of 8 or more characters).
_AUTH_SCHEME = re.compile(r"\b(Bearer|bearer|BEARER|Basic|BASIC)(\s+)[A-Za-z0-9._~+/=-]{8,}")
#: Shapes of access tokens: Hugging Face, OpenAI and friends (``sk-...``), GitHub.
_TOKEN_SHAPES = re.compile(r"\b(?:hf_[A-Za-z0-9]{16,}|sk-[A-Za-z0-9_-]{16,}|gh[pousr]_[A-Za-z0-9]{20,})")
#: Environment variables whose values are secrets.
_SECRET_VARIABLE = re.compile(r"TOKEN|KEY|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)
_MIN_SECRET = 8  #: shorter values are not masked by value (they would mask ordinary words)


def environment_secrets() -> list[str]:
    """The secrets the environment holds: values of variables named like a secret, and the user-info (and its
    password) of ``HF_ENDPOINT``; each with its base64 forms, as Basic authentication sends them."""
    values = [v for k, v in os.environ.items() if _SECRET_VARIABLE.search(k) and len(v) >= _MIN_SECRET]
    endpoint = os.environ.get("HF_ENDPOINT", "")
    if "@" in endpoint.partition("://")[2].split("/", 1)[0]:
        userinfo = endpoint.partition("://")[2].split("/", 1)[0].rsplit("@", 1)[0]
        values += [userinfo, userinfo.partition(":")[2]]
    return [v for v in values if len(v) >= _MIN_SECRET]


def _with_encodings(secrets: Iterable[str]) -> list[str]:
    found = set()
    for secret in secrets:
        if not secret or len(secret) < _MIN_SECRET:
            continue
        found.add(secret)
        data = secret.encode()
        # base64 of anything + the secret (``user:TOKEN`` as Basic authentication sends it): whatever comes before,
        # the secret's bytes from the next 3-byte boundary on encode the same; the last group may differ
        for skip in range(3):
            encoded = base64.b64encode(data[skip:]).decode()
            if len(encoded) > 8:
                found.add(encoded[:-4])
    return sorted(found, key=len, reverse=True)  # the longest first: a secret inside another is masked whole


def redact_text(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` without credentials: every URL passed through :func:`redact_url`, Authorization credentials
    (``Bearer X``, ``Basic X``), known token shapes, and ``secrets`` plus :func:`environment_secrets` (and their
    base64 forms) masked as ``***``."""
    text = str(text)
    for secret in _with_encodings([*secrets, *environment_secrets()]):
        text = text.replace(secret, MASK)
    if "://" in text:
        text = _URL.sub(lambda m: redact_url(m.group(0)), text)
    text = _AUTH_SCHEME.sub(lambda m: f"{m.group(1)}{m.group(2)}{MASK}", text)
    return _TOKEN_SHAPES.sub(MASK, text)


__all__ = ["MASK", "environment_secrets", "redact_text", "redact_url"]
