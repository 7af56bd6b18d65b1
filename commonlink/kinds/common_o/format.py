"""The Common-O row contract: the published ``facebook/Common-O`` columns and features, the paper's prompts
(§3.2, verbatim) and the choice lettering they use.

Shared by the pair builder (which stores the question in the dataset, as the published split does) and by
the eval module. Keep this module free of heavy imports.
"""

from __future__ import annotations

import re
from typing import Any

from commonlink.formats.choices import letters

#: For models trained on multi-image input (paper §3.2, first prompt).
MULTI_IMAGE_PROMPT = (
    "Which objects are present in both images? Select all choices that are true: {}. "
    "You can think of your answer in any way (e.g. step-by-step) but for the last line of your response, "
    "respond only in this format \u2018Answer: <letter 1> <letter 2> <letter 3>\u2019, "
    "e.g. \u2018Answer: A, B, C\u2019."
)

#: For single-image models that receive the two images concatenated side by side (paper §3.2, second prompt).
CONCAT_IMAGE_PROMPT = "There are two images provided, one on the left and the other on the right. " + MULTI_IMAGE_PROMPT

#: Single-image perception baseline (paper §3.2, verbatim).
PERCEPTION_PROMPT = "Is {} in this image?"
#: Wording added after the paper's perception question only when asked for (``--yes-no-hint``).
YES_NO_HINT = " Answer yes or no."

QUESTION_TEMPLATE_ID = "which_objects_in_both_v1"


def format_choices(choices: list[str]) -> str:
    """``A. apple, B. keys, ...``: the lettered list inserted into the prompt."""
    return ", ".join([f"{letter}. {choice}" for letter, choice in zip(letters(len(choices)), choices)])


def common_o_question(choices: list[str], *, concat: bool = False) -> str:
    template = CONCAT_IMAGE_PROMPT if concat else MULTI_IMAGE_PROMPT
    return template.format(format_choices(choices))


#: The sentence the paper's second prompt adds in front of the first one (§3.2).
CONCAT_PREFIX = CONCAT_IMAGE_PROMPT[: len(CONCAT_IMAGE_PROMPT) - len(MULTI_IMAGE_PROMPT)]


def concat_question(question: str) -> str:
    """The paper's side-by-side prompt for a row's own question: its left/right sentence, then the question."""
    return question if question.startswith(CONCAT_PREFIX) else CONCAT_PREFIX + question


def question_choice_text(question: str) -> str | None:
    """The text the paper's template put in place of ``{}`` when ``question`` follows either template
    exactly (the lettered choices, however they were written), else None."""
    for template in (CONCAT_IMAGE_PROMPT, MULTI_IMAGE_PROMPT):
        prefix, suffix = template.split("{}")
        if len(question) > len(prefix) + len(suffix) and question.startswith(prefix) and question.endswith(suffix):
            return question[len(prefix) : len(question) - len(suffix)]
    return None


_FIRST_LETTER = re.compile(r"(?:^|(?<=[\s:(\[]))\(?A[.)]\s+")


def split_lettered(text: str, count: int | None = None) -> list[str] | None:
    """``"A. apple, B. paring knife, wooden handle, C. keys"`` -> ``["apple", "paring knife, wooden handle",
    "keys"]``: items cut at the letter markers (``A.``, ``A)``, ``(A)``), so commas inside names stay.

    With ``count``, exactly that many markers must follow one another; without it, as many as are found.
    Returns None when the text holds no such sequence (fewer than two markers, or fewer than ``count``).
    The last item runs to the end of ``text``: callers cut a trailing sentence themselves.
    """
    first = _FIRST_LETTER.search(text)
    if first is None:
        return None
    labels = letters(count if count else 702)
    items: list[str] = []
    pos = first.end()
    for label in labels[1:]:
        marker = re.compile(r"[,;]?\s+\(?" + label + r"[.)]\s+")
        found = marker.search(text, pos)
        if found is None:
            break
        items.append(text[pos : found.start()].strip())
        pos = found.end()
    items.append(text[pos:].strip())
    if len(items) < 2 or (count and len(items) != count):
        return None
    return items


#: Columns of the published facebook/Common-O parquet files, in their order, with their ``datasets`` types.
PUBLISHED_COLUMNS: dict[str, str] = {
    "image_1": "image",
    "image_2": "image",
    "question": "string",
    "answer": "string",
    "objects_1": "string",
    "objects_2": "string",
    "num_objects_image_1": "int64",
    "num_objects_image_2": "int64",
    "question_template": "string",
    "answer_type": "string",
    "choices": "string",
    "num_choices": "int64",
    "num_ground_truth_objects": "int64",
    "real_or_synthetic": "string",
    "ground_truth_objects": "string",
}
#: Provenance columns our releases add after the published ones (all strings).
PROVENANCE_COLUMNS: tuple[str, ...] = ("id", "image_1_id", "image_2_id", "scene_1_id", "scene_2_id", "view_1", "view_2")
#: The columns a row must have for the loader to make an example of it.
REQUIRED_COLUMNS: tuple[str, ...] = ("image_1", "image_2", "choices", "ground_truth_objects")


def common_o_features(*, provenance: bool = True):
    """The ``datasets.Features`` of a Common-O split (published columns, then our provenance columns)."""
    from datasets import Features, Image, Value

    spec: dict[str, Any] = {}
    for name, kind in PUBLISHED_COLUMNS.items():
        spec[name] = Image() if kind == "image" else Value(kind)
    if provenance:
        for name in PROVENANCE_COLUMNS:
            spec[name] = Value("string")
    return Features(spec)
