"""Masking credentials in URLs before they reach a message, a log line or a result file.

A URL may carry a secret in its user-info (``https://user:token@host``) or its query (``?token=...``);
``HF_ENDPOINT`` and ``--base-url`` are such URLs. :func:`redact_url` masks one URL, :func:`redact_text` every
URL inside a message; the CLI passes every error message through :func:`redact_text`.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

MASK = "***"
# scheme://... up to whitespace or a quote/bracket that ends a URL quoted inside a message.
_URL = re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>`]+")


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
    query = parts.query
    if query:
        query = urlencode([(k, MASK) for k, _ in parse_qsl(query, keep_blank_values=True)], safe="*")
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def redact_text(text: str) -> str:
    """``text`` with every URL in it passed through :func:`redact_url`."""
    if "://" not in text:
        return text
    return _URL.sub(lambda m: redact_url(m.group(0)), text)


__all__ = ["MASK", "redact_text", "redact_url"]
