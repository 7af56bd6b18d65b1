"""Fixed sentences a card may say about its images only when nothing the build knows contradicts them.

The datasheet's publisher questions (sensitive data, consent) carry a default sentence of what the toolkit's
images are meant to be ("meant to show objects only, without people, logos or private information"). That
sentence is a claim: it is shown only when the publisher has not answered the question (an answer replaces it:
the publisher's words are the card's) and when no label of the release contradicts it (a release of photos
with ``person`` labels never says it shows no people). :func:`claim` picks the sentence, :func:`card_conflicts`
says, for the build to warn, where the labels contradicted a default and what the card shows instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from commonlink.formats.card import markdown_text

__all__ = ["PEOPLE_LABELS", "PRIVATE_LABELS", "card_conflicts", "claim", "contradicting_labels"]

#: Labels that name people (a claim of "no people" is contradicted by any of them).
PEOPLE_LABELS = frozenset(
    "person people man woman men women boy girl child children kid baby human face pedestrian player rider "
    "passenger worker".split()
)
#: Labels that name logos or private information (screens, documents, plates, cards).
PRIVATE_LABELS = frozenset(
    {"logo", "document", "passport", "id card", "credit card", "license plate", "licence plate", "screen"}
)
#: What each default sentence claims, by publisher-question key.
_CLAIMS = {
    "sensitive_data": (PEOPLE_LABELS | PRIVATE_LABELS, "people, logos or private information"),
    "consent": (PEOPLE_LABELS, "people"),
}


def contradicting_labels(stats: Mapping[str, Any], labels: frozenset[str]) -> list[tuple[str, int]]:
    """``(label, images)`` of the release's object labels that are in ``labels`` (case-insensitive)."""
    return [(str(n), int(c)) for n, c in stats.get("object_frequency", []) if str(n).strip().lower() in labels]


def claim(stats: Mapping[str, Any], card_info: Mapping[str, str] | None, key: str, default: str) -> str:
    """The build's sentence before the answer to publisher question ``key``: ``default`` when neither the
    publisher's answer nor the labels contradict it; "" when the publisher answered; the labels that contradict
    it, stated as facts, otherwise."""
    if (card_info or {}).get(key):
        return ""
    found = contradicting_labels(stats, _CLAIMS[key][0]) if key in _CLAIMS else []
    if not found:
        return default
    listed = ", ".join(f"{markdown_text(n)} ({c:,} images)" for n, c in found[:5])
    return f"The labels name {_CLAIMS[key][1]}: {listed}."


def card_conflicts(stats: Mapping[str, Any], card_info: Mapping[str, str] | None) -> list[str]:
    """Warnings for the build: where a default sentence was left out because the labels contradict it."""
    out = []
    for key, (labels, what) in _CLAIMS.items():
        found = contradicting_labels(stats, labels)
        if found:
            names = ", ".join(f"{n} ({c} images)" for n, c in found[:5])
            shown = "the publisher's answer" if (card_info or {}).get(key) else "the labels and a request to answer it"
            out.append(
                f"The labels name {what} ({names}): the card does not say the images have none; it shows {shown} "
                f"for '{key}' (answer it in --card-info)."
            )
    return out
