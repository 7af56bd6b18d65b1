"""Prompts and answer parsing of the association protocol (paper appendix A.2, Table 3).

A prompt is a list of *segments*: plain strings and :class:`ImageSlot` markers saying where each image goes,
so that backends with interleaved image/text chat templates place the images exactly as the paper does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from commonlink.eval.parsing import strip_reasoning


@dataclass(frozen=True)
class ImageSlot:
    """Placeholder for the ``index``-th image of a request."""

    index: int


Segment = str | ImageSlot

def selection_prompt(concept_kind: str, memory_context: str) -> list[Segment]:
    """Association step: memory context, question instruction, the three images, output instruction."""
    head = f"{memory_context}\n" if memory_context else ""
    return [
        head
        + "Determine the relationship between the original image and the candidate images, and select the images "
        f"with the same {concept_kind} as the original image. Original image:",
        ImageSlot(0),
        ". Candidate images: Image1:",
        ImageSlot(1),
        ", Image2:",
        ImageSlot(2),
        ". Your response should be direct and exclusively only include one of the following items. "
        "Options: [Image1, Image2].",
    ]


def deduction_prompt(concept_kind: str, options: list[str]) -> list[Segment]:
    """Deduction step: name the concept shared by the original and the selected image (no memory)."""
    listed = ", ".join(f"'{o}'" for o in options)
    return [
        f"Generate the common {concept_kind} between the original image and selected images. Original image:",
        ImageSlot(0),
        ". Selected image: ",
        ImageSlot(1),
        f". Your response should only include shared {concept_kind} in the following options. Options:[{listed}]",
    ]


def prompt_text(segments: list[Segment], image_token: str = "<image>") -> str:
    """The prompt as one string with ``image_token`` where the images go (for logs and cache keys)."""
    return "".join(image_token if isinstance(s, ImageSlot) else s for s in segments)


# Whitespace runs are taken possessively (``\s*+``): two optional runs around an optional separator would
# otherwise be retried at every split of a long run ("image" + 30,000 spaces took 8 s).
_IMAGE_CHOICE = re.compile(r"\b(?:image|img|candidate)\s*+[_#-]?\s*+([12])\b|\b(first|second)\s++(?:candidate\s++)?image\b", re.I)
# An "Answer:" line: at a line start (the breaks of str.splitlines), blanks within the line only. Found by one
# search over the whole text instead of splitting it into lines (40,000 newlines made 40,000 strings).
_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
_ANSWER_LINE = re.compile(rf"(?:^|(?<=[{_BREAKS}]))[^\S{_BREAKS}]*+(?:final[^\S{_BREAKS}]++)?answer[^\S{_BREAKS}]*+[:：]", re.I)
_LINE_END = re.compile(f"[{_BREAKS}]")
_BARE_CHOICE = re.compile(r"\s*+\[?\s*+([12])\s*+\]?\s*+\.?\s*+")


def _strip_reasoning(text: str) -> str:
    # Same rules as Common-O: closed <think> blocks and everything before a lone </think> (a template that opens
    # the block in the prompt) are dropped; after an unterminated <think> (cut off) nothing is an answer.
    body, _ = strip_reasoning(text)
    return body.replace("*", " ").replace("`", " ")


def parse_selection(text: str) -> int | None:
    """Index (0 or 1) of the candidate the model picked, or ``None`` when unparseable or ambiguous.

    Accepts ``Image1``, ``Image 2``, ``image_2``, ``**Image2**``, ``the second image``, a bare ``1``/``2``;
    the last ``Answer:`` line wins when present. Naming both candidates is ambiguous (None).
    """
    body = _strip_reasoning(text)
    last = None
    for last in _ANSWER_LINE.finditer(body):
        pass
    if last is not None:  # the last Answer: line wins: its text after the colon
        end = _LINE_END.search(body, last.end())
        body = body[last.end() : end.start() if end else len(body)]
    found = set()
    for match in _IMAGE_CHOICE.finditer(body):
        if match.group(1):
            found.add(int(match.group(1)) - 1)
        else:
            found.add(0 if match.group(2).lower() == "first" else 1)
    if not found:
        bare = _BARE_CHOICE.fullmatch(body)
        if bare:
            found.add(int(bare.group(1)) - 1)
    return found.pop() if len(found) == 1 else None


def parse_concepts(text: str, options: list[str]) -> list[str] | None:
    """Options named in the answer (case-insensitive, whole words), in option order; ``None`` if none."""
    body = _strip_reasoning(text).lower()
    picked = [o for o in options if re.search(r"(?<![a-z])" + re.escape(o.lower()) + r"(?![a-z])", body)]
    return picked or None
