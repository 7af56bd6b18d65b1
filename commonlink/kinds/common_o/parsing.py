"""Reading a model's answer to a Common-O question: the engine's lettered-choice parser
(:mod:`commonlink.eval.parsing`, whose module doc lists the rules), where "none" / "no objects (in common)" pick
the "No objects are in common" choice."""

from __future__ import annotations

from commonlink.constants import NO_COMMON_OBJECTS
from commonlink.eval.parsing import ParsedAnswer, parse_choice_answer

__all__ = ["parse_common_o_answer"]


def parse_common_o_answer(text: str, choices: list[str]) -> ParsedAnswer:
    """The letters a model chose for a Common-O question (see :mod:`commonlink.eval.parsing` for the rules)."""
    return parse_choice_answer(text, choices, none_choice=NO_COMMON_OBJECTS)
