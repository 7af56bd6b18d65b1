"""The list fields of a batch of Common-O rows, read and cross-checked at once: the loader's fast path.

:func:`commonlink.kinds.common_o.loader_lists.decode_row_lists` reads every plausible encoding of a row's list
fields and settles comma groupings by trying every reading; that generality costs about 0.2 ms a row even when
the row is plain JSON, as every row of our releases is. :func:`decode_batch_lists` reads a batch of rows and, for
each row whose four list fields are JSON lists of names and whose question is the paper's template for exactly
those choices (or absent), runs the same checks directly: the counts, the question's choices, the ground truth
and ``answer`` against the choices (``check_reading``, the very function the per-row path uses). Its result for such a
row equals :func:`decode_row_lists`'s (tests/test_loader_batch.py compares them on rows of every encoding).

Any other row -- another encoding, a question in other words, a count or a cross-check that fails -- gets
``None``: the caller decodes it with :func:`decode_row_lists`, so a bad row is refused with exactly the message
the per-row path gives, in its turn.
"""

from __future__ import annotations

import json
import re
from typing import Any

from commonlink.errors import SchemaError
from commonlink.kinds.common_o.format import common_o_question
from commonlink.kinds.common_o.loader_lists import (
    MAX_LIST_TEXT,
    MAX_READINGS,
    ListText,
    Mismatch,
    RowLists,
    answer_text,
    check_reading,
    count_value,
    read_list_text,
    row_lists_of,
)

__all__ = ["decode_batch_lists"]

#: Anything that could be read as a choice letter (``A.``, ``B)``, ``AB.``). Choices holding none cannot cut
#: the question's lettered list anywhere but at its own letters, nor carry their own letter prefixes, so for
#: them "the question is the template built from the choices" is exactly "the question's choices agree".
_LETTER_LIKE = re.compile(r"[A-Z]{1,2}[.)]")
_LIST_FIELDS = ("choices", "ground_truth_objects", "objects_1", "objects_2")
_JSON_ENCODINGS = dict.fromkeys(_LIST_FIELDS, "json")
#: ``json.loads`` reads with this scanner (strict, the C one when present) once it has checked its argument.
_SCAN = json.JSONDecoder().scan_once


def decode_batch_lists(rows: list[dict]) -> list[RowLists | None]:
    """Each row's list fields read and cross-checked (as :func:`decode_row_lists` would), or ``None`` for a row
    the fast path does not take (decode it with :func:`decode_row_lists`: that gives its result or its error)."""
    answers: dict[tuple[str, int | None], tuple[ListText | None, list]] = {}  # answer texts repeat: read once
    # One search over the whole batch's choices instead of one per name: text without a backslash (a JSON escape
    # could spell a letter) and without anything letter-like has no letter-like name in it either.
    texts = [row.get("choices") for row in rows]
    joined = "\n".join(t for t in texts if type(t) is str)
    letter_free = "\\" not in joined and _LETTER_LIKE.search(joined) is None
    return [_fast_row_lists(row, answers, letter_free) for row in rows]


def _json_names(text: Any) -> list[str] | None:
    """The names of a JSON list field exactly as ``read_list_text`` reads them, or None for any other value."""
    if type(text) is not str:
        return None
    stripped = text.strip()
    if stripped[:1] != "[" or len(stripped) > MAX_LIST_TEXT:
        return None
    try:  # the decoder's scanner: json.loads without its wrapping (a value that ends where the text ends)
        value, end = _SCAN(stripped, 0)
    except (ValueError, RecursionError, StopIteration):
        return None
    if end != len(stripped) or type(value) is not list:
        return None
    names = []
    for item in value:
        if type(item) is not str:
            return None
        item = item.strip()
        if not item:
            return None
        names.append(item)
    return names


def _answer_readings(value: Any, num_truth: int | None, memo: dict) -> tuple[ListText | None, list]:
    """The ``answer`` column as read (None when it is not a list) and its readings, as decode_row_lists takes
    them."""
    key = (value, num_truth) if type(value) is str else None
    if key is not None and key in memo:
        return memo[key]
    answer_list = None
    raw = answer_text(value)
    if raw is not None:
        try:
            answer_list = read_list_text(raw, row="answer", field="answer")
        except SchemaError:
            answer_list = None  # free text: not used for checking
    readings: list = [None]
    if answer_list is not None:
        readings = (answer_list.readings(num_truth if num_truth else None) or [answer_list.plain()])[:MAX_READINGS]
    if key is not None:
        memo[key] = (answer_list, readings)
    return answer_list, readings


def _fast_row_lists(row: dict, answers: dict, letter_free: bool) -> RowLists | None:
    names = [_json_names(row.get(name)) for name in _LIST_FIELDS]
    if None in names:
        return None
    choices, truth_items, objects_1, objects_2 = names
    if not letter_free and any(_LETTER_LIKE.search(c) for c in choices):
        return None
    question = row.get("question")
    question_count = None
    if isinstance(question, str) and question:
        # the template read back gives the choices exactly only with two or more of them (split_lettered)
        if len(choices) < 2 or question != common_o_question(choices):
            return None
        question_count = len(choices)
    num_choices = count_value(row.get("num_choices"))
    count = num_choices if num_choices else question_count
    if count is not None and len(choices) != count:
        return None
    num_truth = count_value(row.get("num_ground_truth_objects"))
    answer_list, answer_readings = _answer_readings(row.get("answer"), num_truth, answers)
    if len(answer_readings) != 1:  # several groupings of the answer's commas: settled the per-row way
        return None
    try:
        chosen = check_reading(choices, truth_items, answer_readings[0], objects_1, objects_2, num_truth)
    except Mismatch:
        return None  # the per-row path raises the row's error, worded as it words it
    encodings = dict(_JSON_ENCODINGS)
    if answer_list is not None:
        encodings["answer"] = answer_list.encoding
    return row_lists_of(chosen, encodings)
