"""Typed examples yielded by the loaders (shared by builders, loaders and eval)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class CommonOExample:
    """One Common-O example: two images, lettered choices, the ground-truth set of common objects."""

    id: str  #: our provenance id, or "<split>-<row index>" for published rows without one
    image_1: Any  #: PIL.Image.Image
    image_2: Any  #: PIL.Image.Image
    choices: list[str]  #: in letter order (choices[0] is "A")
    ground_truth: list[str]  #: objects in both images, or [NO_COMMON_OBJECTS]
    answer_letters: list[str]  #: letters of ``ground_truth`` within ``choices``, sorted
    question: (
        str  #: the row's own question when it has one (sent verbatim), else the paper's prompt built from the choices
    )
    source: str  #: "real" | "synthetic"
    objects_1: list[str]
    objects_2: list[str]
    num_objects_image_1: int
    num_objects_image_2: int
    split: str = ""
    row_index: int = -1
    question_source: str = "built"  #: "dataset" (the row's question column) or "built" (common_o_question)
    extra: dict = field(default_factory=dict)  #: provenance columns (image ids, scene/view ids) when present
