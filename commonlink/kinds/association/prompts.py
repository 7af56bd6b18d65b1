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

#: Ours (CoT strategy): the reasoning first, the answer on a last ``Answer:`` line.
COT_SELECTION_OUTPUT = (
    "Think step by step: first say what the original image and each candidate image show, then give "
    "your choice on the last line as 'Answer: Image1' or 'Answer: Image2'."
)
COT_DEDUCTION_OUTPUT = (
    "Think step by step: first say what the two images show, then give the shared {kind} on the last line "
    "as 'Answer: <{kind}>'."
)


def selection_prompt(concept_kind: str, memory_context: str, *, preamble: str = "", cot: bool = False) -> list[Segment]:
    """Association step: memory context, question instruction, the three images, output instruction. ``preamble``:
    a strategy's text in front (ComKnow, a worked example); ``cot``: the answer asked after the reasoning, on a last
    ``Answer:`` line (:mod:`commonlink.kinds.association.concept_prompts`)."""
    head = preamble + (f"{memory_context}\n" if memory_context else "")
    output = (
        COT_SELECTION_OUTPUT
        if cot
        else (
            "Your response should be direct and exclusively only include one of the following "
            "items. Options: [Image1, Image2]."
        )
    )
    return [
        head + "Determine the relationship between the original image and the candidate images, and select the images "
        f"with the same {concept_kind} as the original image. Original image:",
        ImageSlot(0),
        ". Candidate images: Image1:",
        ImageSlot(1),
        ", Image2:",
        ImageSlot(2),
        ". " + output,
    ]


def deduction_prompt(concept_kind: str, options: list[str], *, preamble: str = "", cot: bool = False) -> list[Segment]:
    """Deduction step: name the concept shared by the original and the selected image (no memory); ``preamble``
    and ``cot`` as for :func:`selection_prompt`."""
    listed = ", ".join(f"'{o}'" for o in options)
    output = (
        COT_DEDUCTION_OUTPUT.format(kind=concept_kind) + f" Options:[{listed}]"
        if cot
        else f"Your response should only include shared {concept_kind} in the following options. Options:[{listed}]"
    )
    return [
        f"{preamble}Generate the common {concept_kind} between the original image and selected images. Original image:",
        ImageSlot(0),
        ". Selected image: ",
        ImageSlot(1),
        f". {output}",
    ]


def prompt_text(segments: list[Segment], image_token: str = "<image>") -> str:
    """The prompt as one string with ``image_token`` where the images go (for logs and cache keys)."""
    return "".join(image_token if isinstance(s, ImageSlot) else s for s in segments)


# Whitespace runs are taken possessively (``\s*+``): two optional runs around an optional separator would
# otherwise be retried at every split of a long run ("image" + 30,000 spaces took 8 s).
_IMAGE_CHOICE = re.compile(
    r"\b(?:image|img|candidate)\s*+[_#-]?\s*+([12])\b|\b(first|second)\s++(?:candidate\s++)?image\b", re.I
)
# An "Answer:" line: at a line start (the breaks of str.splitlines), blanks within the line only. Found by one
# search over the whole text instead of splitting it into lines (40,000 newlines made 40,000 strings).
_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
_ANSWER_LINE = re.compile(
    rf"(?:^|(?<=[{_BREAKS}]))[^\S{_BREAKS}]*+(?:final[^\S{_BREAKS}]++)?answer[^\S{_BREAKS}]*+[:：]", re.I
)
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
    answer_lines = list(_ANSWER_LINE.finditer(body))
    last = answer_lines[-1] if answer_lines else None
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


def answer_line(text: str) -> str:
    """The payload of the last ``Answer:`` line when there is one (a CoT answer), else the whole text."""
    lines = [ln for ln in text.splitlines() if re.match(r"\s*(final\s+)?answer\s*[:：]", ln, re.IGNORECASE)]
    return re.split(r"[:：]", lines[-1], maxsplit=1)[1] if lines else text


def parse_concepts(text: str, options: list[str], *, answer_only: bool = False) -> list[str] | None:
    """Options named in the answer (case-insensitive, whole words), in option order; ``None`` if none. With
    ``answer_only`` (CoT), only the last ``Answer:`` line counts when there is one: the reasoning names others."""
    body = _strip_reasoning(text)
    body = (answer_line(body) if answer_only else body).lower()
    picked = [o for o in options if re.search(r"(?<![a-z])" + re.escape(o.lower()) + r"(?![a-z])", body)]
    return picked or None
