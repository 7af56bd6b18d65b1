"""The datasheet questions only the publisher can answer, and the card-info file that answers them.

A build answers every datasheet question it can from the data; six it cannot (who made and funded the set,
sensitive data, who collected it and under what review, consent, restrictions, who maintains it). Those stay
marked on the card with :data:`PUBLISHER_TO_FILL` until the publisher answers them in a small YAML file::

    commonlink release card-info --template --out card-info.yaml    # one key per question, the question as a comment
    commonlink release build PAIRS... --out DIR --card-info card-info.yaml
    commonlink release card DIR --card-info card-info.yaml          # later: rewrite the card only, manifest kept true

Answers are the publisher's words shown as plain text (every Markdown character escaped, paragraphs kept), so an
answer can never add a heading, a link or a row to the card's Versions table.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

from commonlink.errors import InputError
from commonlink.formats.card import markdown_text

PUBLISHER_TO_FILL = "Not recorded by the build; the publisher should state it here before release."


@dataclass(frozen=True)
class PublisherQuestion:
    key: str  #: the key in the card-info file
    section: str  #: the datasheet section it belongs to
    question: str  #: as shown in bold on the card


PUBLISHER_QUESTIONS: tuple[PublisherQuestion, ...] = (
    PublisherQuestion("creators_and_funding", "Motivation", "Who created the dataset? Who funded its creation?"),
    PublisherQuestion("sensitive_data", "Composition", "Does it contain confidential or sensitive data?"),
    PublisherQuestion(
        "collection_process", "Collection Process", "Who was involved, over what timeframe, with what ethical review?"
    ),
    PublisherQuestion("consent", "Collection Process", "Were individuals notified or did they consent?"),
    PublisherQuestion("restrictions", "Distribution", "Any third-party or export restrictions?"),
    PublisherQuestion("maintainers", "Maintenance", "Who maintains it, and how can they be contacted?"),
)
#: Asked only when answered (a card without it says nothing of human validation): the figure
#: ``commonlink human agreement`` prints as its card sentence (docs/human.md).
HUMAN_VALIDATION = PublisherQuestion(
    "human_validation", "Composition", "Were the labels validated by people, and how well did they agree?"
)
QUESTIONS_BY_KEY = {q.key: q for q in (*PUBLISHER_QUESTIONS, HUMAN_VALIDATION)}
_TEMPLATE_HINTS = {
    "creators_and_funding": "e.g. The Example Lab at Example University; funded by grant X.",
    "sensitive_data": "e.g. No: every photo was checked by hand for people, faces, screens and documents.",
    "collection_process": "e.g. Photographed by two lab members in March 2026; approved by the ethics board (ref 123).",
    "consent": "e.g. No people appear in the images; the photographed rooms belong to the photographers.",
    "restrictions": "e.g. None beyond the license.",
    "maintainers": "e.g. The Example Lab, datasets@example.org; issues on the Hub repo's Community tab.",
    "human_validation": "optional: the card sentence `commonlink human agreement` prints (docs/human.md).",
}


def card_info_template() -> str:
    """The YAML file ``release card-info --template`` writes: each question as a comment above an empty key."""
    out = [
        "# Answers to the datasheet questions a build cannot answer from the data (commonlink release card-info).",
        "# Write each answer as plain text after its key (use `|` for several lines); leave a key empty to keep",
        "# the question marked as unanswered. Then: commonlink release build ... --card-info THIS_FILE",
        "# (or, for a release already built: commonlink release card RELEASE_DIR --card-info THIS_FILE).",
        "",
    ]
    for q in (*PUBLISHER_QUESTIONS, HUMAN_VALIDATION):
        out += [f"# {q.section}: {q.question}", f"#   {_TEMPLATE_HINTS[q.key]}", f"{q.key}:", ""]
    return "\n".join(out)


#: The largest card-info file read (its answers are a few paragraphs each), in bytes.
CARD_INFO_MAX_BYTES = 256 * 1024
#: The longest answer, in characters.
MAX_ANSWER_CHARS = 20_000


def read_card_info(path: str | os.PathLike) -> dict[str, str]:
    """The answers in a card-info file: ``{key: text}`` for every question answered (empty keys left out).
    Files over :data:`CARD_INFO_MAX_BYTES` and YAML nested too deep to read are refused with a clear error."""
    path = Path(path)
    fix = "Start from `commonlink release card-info --template --out FILE` and fill in the answers."
    if not path.is_file():
        raise InputError(f"--card-info {path}: no such file.", fix)
    size = path.stat().st_size
    if size > CARD_INFO_MAX_BYTES:
        raise InputError(
            f"--card-info {path} is {size:,} bytes; a card-info file holds at most {CARD_INFO_MAX_BYTES:,} bytes.", fix
        )
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise InputError(f"--card-info {path}: not readable YAML ({exc}).", fix) from None
    except RecursionError:  # the YAML reader recurses once per level of nesting
        raise InputError(
            f"--card-info {path}: its YAML is nested too deeply to read; answers are text, not nested lists or "
            "mappings.",
            fix,
        ) from None
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise InputError(f"--card-info {path}: not a mapping of question keys to answers.", fix)
    return check_card_info(data, where=f"--card-info {path}")


def check_card_info(data: Mapping, *, where: str = "card info") -> dict[str, str]:
    """Answers keyed by question, checked: known keys only, each answer text; empty answers dropped."""
    unknown = sorted(str(k) for k in data if k not in QUESTIONS_BY_KEY)
    if unknown:
        raise InputError(
            f"{where}: unknown key(s) {', '.join(unknown)}.",
            f"The keys are: {', '.join(QUESTIONS_BY_KEY)} (see `commonlink release card-info --template`).",
        )
    answers = {}
    for key, value in data.items():
        if value is None or (isinstance(value, str) and not value.strip()):
            continue
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise InputError(
                f"{where}: the answer to {key!r} is a {type(value).__name__}, not text.",
                f'Write it as text, e.g. {key}: "..." (use `|` for several lines).',
            )
        answers[key] = str(value).strip()
        if len(answers[key]) > MAX_ANSWER_CHARS:
            raise InputError(
                f"{where}: the answer to {key!r} is {len(answers[key]):,} characters long; the most is "
                f"{MAX_ANSWER_CHARS:,}.",
                "Shorten it (link to a longer document from the answer).",
            )
    return {key: answers[key] for key in QUESTIONS_BY_KEY if key in answers}


def answer_markdown(text: str) -> str:
    """A publisher's answer as Markdown that shows exactly its words: paragraphs (blank lines) kept, every
    line's markup escaped, lines of one paragraph joined by a space."""
    paragraphs = [p for p in re.split(r"\n\s*\n", text.strip()) if p.strip()]
    return "\n\n".join(
        " ".join(markdown_text(line.strip()) for line in p.splitlines() if line.strip()) for p in paragraphs
    )


def publisher_answer(card_info: Mapping[str, str] | None, key: str, known: str = "") -> str:
    """The card's answer to the publisher question ``key``: what the build knows (``known``), then the
    publisher's answer, or :data:`PUBLISHER_TO_FILL` when there is none."""
    if key not in QUESTIONS_BY_KEY:
        raise KeyError(key)
    answer = (card_info or {}).get(key)
    return " ".join(filter(None, [known.strip(), answer_markdown(answer) if answer else PUBLISHER_TO_FILL]))


def human_validation_rows(card_info: Mapping[str, str] | None) -> list[tuple[str, str]]:
    """The card's (question, answer) on human validation: one row when the publisher answered it, else none."""
    answer = (card_info or {}).get(HUMAN_VALIDATION.key)
    return [(HUMAN_VALIDATION.question, answer_markdown(answer))] if answer else []


def unanswered_questions(card_text: str) -> list[str]:
    """The publisher questions a card still shows as unanswered (by key), in datasheet order."""
    found = []
    for q in PUBLISHER_QUESTIONS:
        at = card_text.find(f"**{q.question}**")
        if at < 0:
            continue
        following = card_text.find("**", at + len(q.question) + 4)
        if PUBLISHER_TO_FILL in card_text[at : following if following > 0 else len(card_text)]:
            found.append(q.key)
    return found


def publisher_section(card_info: Mapping[str, str] | None, *, heading: str = "## About this release") -> str:
    """The six publisher questions as a card section, for release kinds without a full datasheet."""
    out = [heading, ""]
    for q in PUBLISHER_QUESTIONS:
        out += [f"**{q.question}**", "", publisher_answer(card_info, q.key), ""]
    for question, answer in human_validation_rows(card_info):
        out += [f"**{question}**", "", answer, ""]
    return "\n".join(out)


__all__ = [
    "CARD_INFO_MAX_BYTES",
    "MAX_ANSWER_CHARS",
    "HUMAN_VALIDATION",
    "PUBLISHER_QUESTIONS",
    "PUBLISHER_TO_FILL",
    "QUESTIONS_BY_KEY",
    "PublisherQuestion",
    "answer_markdown",
    "card_info_template",
    "check_card_info",
    "human_validation_rows",
    "publisher_answer",
    "publisher_section",
    "read_card_info",
    "unanswered_questions",
]
