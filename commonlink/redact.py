"""Masking credentials in URLs before they reach a message, a log line or a result file.

A URL may carry a secret in its user-info (``https://user:token@host``), its query (``?token=...`` or a bare
``?SECRET``), its fragment (``#token=...``) or a path segment after a credential word (``/token/SECRET/``);
``HF_ENDPOINT`` and ``--base-url`` are such URLs. :func:`redact_url` masks one URL, :func:`redact_text` every
URL inside a message; the CLI passes every error message through :func:`redact_text`.
"""

from __future__ import annotations

import re
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


def redact_text(text: str) -> str:
    """``text`` with every URL in it passed through :func:`redact_url`."""
    if "://" not in text:
        return text
    return _URL.sub(lambda m: redact_url(m.group(0)), text)


__all__ = ["MASK", "redact_text", "redact_url"]
