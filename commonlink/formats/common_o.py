"""Prompts of the Common-O paper (§3.2), verbatim, and the choice lettering they use.

Shared by the pair builder (which stores the question in the dataset, as the published split does) and by
the eval module. Keep this module free of heavy imports.
"""

from __future__ import annotations

import string

#: For models trained on multi-image input (paper §3.2, first prompt).
MULTI_IMAGE_PROMPT = (
    "Which objects are present in both images? Select all choices that are true: {}. "
    "You can think of your answer in any way (e.g. step-by-step) but for the last line of your response, "
    "respond only in this format \u2018Answer: <letter 1> <letter 2> <letter 3>\u2019, e.g. \u2018Answer: A, B, C\u2019."
)

#: For single-image models that receive the two images concatenated side by side (paper §3.2, second prompt).
CONCAT_IMAGE_PROMPT = "There are two images provided, one on the left and the other on the right. " + MULTI_IMAGE_PROMPT

#: Single-image perception baseline (paper §3.2).
PERCEPTION_PROMPT = "Is {} in this image? Answer yes or no."

QUESTION_TEMPLATE_ID = "which_objects_in_both_v1"


def letters(n: int) -> list[str]:
    """A, B, ..., Z, AA, AB, ... for ``n`` choices."""
    out = []
    for i in range(n):
        label = ""
        k = i
        while True:
            label = string.ascii_uppercase[k % 26] + label
            k = k // 26 - 1
            if k < 0:
                break
        out.append(label)
    return out


def format_choices(choices: list[str]) -> str:
    """``A. apple, B. keys, ...``: the lettered list inserted into the prompt."""
    return ", ".join(f"{letter}. {choice}" for letter, choice in zip(letters(len(choices)), choices))


def common_o_question(choices: list[str], *, concat: bool = False) -> str:
    template = CONCAT_IMAGE_PROMPT if concat else MULTI_IMAGE_PROMPT
    return template.format(format_choices(choices))
