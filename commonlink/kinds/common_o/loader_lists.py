"""The list-valued string fields of a Common-O row, read whatever their encoding, and cross-checked.

The published ``facebook/Common-O`` stores ``choices``, ``ground_truth_objects``, ``objects_1`` and
``objects_2`` as *strings* whose encoding is not documented. :func:`read_list_text` accepts

* a JSON list (``["apple", "keys"]``) or a Python literal (``['apple', 'keys']``, ``('apple', 'keys')``,
  ``'apple', 'keys'``): exact, quoted names;
* the paper's bracketed, unquoted form (``[silver grater, No objects are in common, mallard (fake duck)]``,
  as Table 7 prints it) and plain comma-separated text (``apple, keys``): names may hold parentheses,
  apostrophes and hyphens, but a comma inside a name cannot be told from a separator;
* lettered text (``A. apple, B. keys``): the letters cut the items, so commas inside names are safe.

Unquoted comma lists are therefore *readings*, not values: :func:`decode_row_lists` takes every way of
grouping the comma pieces that fits the row's counts (``num_choices``, ``num_ground_truth_objects``,
``num_objects_image_1/2``), checks each against the question's lettered choices, the ``answer`` column and
the ground truth (names or letters: ``B, D, E`` as the paper's Table 7 prints answers), and keeps the
reading the row supports. A row that stays ambiguous, or whose columns contradict each other, is refused
with a :class:`SchemaError` naming the row, the field and the value: a mis-read row is never scored.
"""

from __future__ import annotations

import ast
import itertools
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

from commonlink.constants import NO_COMMON_OBJECTS
from commonlink.errors import SchemaError
from commonlink.kinds.common_o.format import letters, question_choice_text, split_lettered

MAX_LIST_TEXT = 100_000  # longer "list" strings are refused rather than parsed (literal_eval cost)
#: At most this many groupings of one field's comma pieces are tried (C(pieces-1, count-1)).
MAX_READINGS = 2_000
#: At most this many combinations of the fields' readings are checked for one row.
MAX_COMBINATIONS = 20_000
_LETTER_PREFIX = re.compile(r"^\(?([A-Z]{1,2})[.)]\s+(.*)$", re.S)
_LETTERED_START = re.compile(r"^\[?\(?A[.)]\s")
_LETTER_ITEM = re.compile(r"^[(\[]?([A-Z]{1,2})[.)\]]?$")
_FIX_ENCODING = 'Write the list as JSON (e.g. ["apple", "keys"]) or as comma-separated names (apple, keys).'


@dataclass
class ListText:
    """One list field as read: exact ``items`` (quoted or lettered encodings), or comma ``segments`` whose
    grouping is open (unquoted encodings)."""

    encoding: str  #: "list" | "empty" | "json" | "python" | "bracketed" | "comma" | "lettered"
    items: list[str] | None = None
    segments: list[str] = field(default_factory=list)

    @property
    def exact(self) -> bool:
        return self.items is not None

    def plain(self) -> list[str]:
        """The reading without any grouping: every comma separates two names."""
        return list(self.items) if self.items is not None else [s.strip() for s in self.segments]

    def readings(self, count: int | None) -> list[list[str]] | None:
        """Every reading with ``count`` names (the plain reading alone when ``count`` is None); ``[]`` when
        none has that many; None when there are too many groupings to try."""
        if self.items is not None:
            return [list(self.items)] if count is None or len(self.items) == count else []
        n = len(self.segments)
        if count is None or count == n:
            return [self.plain()]
        if count < 1 or count > n:
            return []
        if math.comb(n - 1, count - 1) > MAX_READINGS:
            return None
        out = []
        for cuts in itertools.combinations(range(1, n), count - 1):
            bounds = (0, *cuts, n)
            out.append([",".join(self.segments[a:b]).strip() for a, b in zip(bounds, bounds[1:])])
        return out


def _excerpt(text: str, limit: int = 120) -> str:
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")


def _as_string_list(values: list, *, where: str, shown: Any) -> list[str]:
    out = []
    for item in values:
        if not isinstance(item, str):
            raise SchemaError(
                f"{where}: list {_excerpt(str(shown))} holds a {type(item).__name__}, expected only strings."
            )
        item = item.strip()
        if not item:
            raise SchemaError(f"{where}: list {_excerpt(str(shown))} holds an empty name.")
        out.append(item)
    return out


def _unquoted_ok(inner: str) -> bool:
    """Whether the inside of ``[...]`` can be unquoted names: no quotes (an apostrophe between letters, as in
    ``children's book``, is part of a name), no nested brackets or braces."""
    if any(ch in inner for ch in '"[]{}'):
        return False
    return all(
        0 < m.start() < len(inner) - 1 and inner[m.start() - 1].isalnum() and inner[m.start() + 1].isalnum()
        for m in re.finditer("'", inner)
    )


def _segments(text: str, *, where: str, shown: str) -> list[str]:
    segments = text.split(",")
    if any(not s.strip() for s in segments):
        raise SchemaError(
            f"{where}: comma-separated list {_excerpt(shown)} has an empty item.",
            "Remove the doubled or trailing comma.",
        )
    return segments


def read_list_text(text: Any, *, row: int | str, field: str) -> ListText:
    """Read one list field (see the module doc); :class:`SchemaError` naming ``row`` and ``field`` when the
    value fits no encoding (a broken ``[...]``, a JSON object, a list of non-strings, an empty item)."""
    where = f"row {row}, field {field!r}"
    if isinstance(text, (list, tuple)):  # already a list (e.g. a Sequence feature)
        return ListText("list", _as_string_list(list(text), where=where, shown=text))
    if text is None:
        raise SchemaError(
            f"{where}: value is missing (null).", "Every list field needs a value; use '[]' for an empty list."
        )
    if not isinstance(text, str):
        raise SchemaError(f"{where}: expected a string holding a list, got {type(text).__name__}.")
    stripped = text.strip()
    if not stripped:
        return ListText("empty", [])
    if len(stripped) > MAX_LIST_TEXT:
        raise SchemaError(f"{where}: list text is {len(stripped):,} characters long (limit {MAX_LIST_TEXT:,}).")
    if _LETTERED_START.match(stripped):
        lettered = split_lettered(stripped[1:-1] if stripped[0] == "[" and stripped[-1] == "]" else stripped)
        if lettered is not None:
            return ListText("lettered", _as_string_list(lettered, where=where, shown=stripped))
    if stripped[0] in "[(":
        try:
            return ListText("json", _checked_list(json.loads(stripped), where=where, shown=stripped))
        except (ValueError, RecursionError):  # RecursionError: nesting deeper than the decoder's limit
            pass
        inner = stripped[1:-1]
        if stripped[0] == "[" and stripped[-1] == "]" and "'" not in stripped and inner.strip() and _unquoted_ok(inner):
            # no quote at all: not a Python literal of names (and literal_eval's parse is the costly part)
            return ListText("bracketed", segments=_segments(inner, where=where, shown=stripped))
        try:
            value = ast.literal_eval(stripped)  # Python-literal lists: ['a', 'b'] — literal_eval only, never eval
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            if stripped[0] == "[" and stripped[-1] == "]" and inner.strip() and _unquoted_ok(inner):
                return ListText("bracketed", segments=_segments(inner, where=where, shown=stripped))
            raise SchemaError(
                f"{where}: {_excerpt(stripped)} looks like a list but is neither valid JSON, a Python literal nor "
                "a bracketed list of unquoted names.",
                _FIX_ENCODING,
            ) from None
        return ListText("python", _checked_list(value, where=where, shown=stripped))
    if stripped[0] == "{":
        raise SchemaError(
            f"{where}: {_excerpt(stripped)} is an object, not a JSON list, a Python-literal list or "
            "comma-separated names.",
            _FIX_ENCODING,
        )
    segments = stripped.split(",")
    quoted = any(s.strip()[:1] in "\"'" or s.strip()[-1:] in "\"'" for s in segments if s.strip())
    if quoted or any(ch in stripped for ch in "[]{}"):
        # Quoted names without brackets ("'apple', 'keys'") are a Python tuple literal. Other text with brackets
        # or quotes around names is not plain comma-separated names and would be misread, so it is refused.
        try:
            value = ast.literal_eval(f"[{stripped}]")
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            raise SchemaError(
                f"{where}: {_excerpt(stripped)} is not a JSON list, a Python-literal list or comma-separated names.",
                _FIX_ENCODING,
            ) from None
        return ListText("python", _as_string_list(value, where=where, shown=stripped))
    return ListText("comma", segments=_segments(stripped, where=where, shown=stripped))


def _checked_list(value: Any, *, where: str, shown: str) -> list[str]:
    if not isinstance(value, (list, tuple)):
        raise SchemaError(f"{where}: {_excerpt(shown)} is a {type(value).__name__}, not a list.")
    return _as_string_list(list(value), where=where, shown=shown)


def parse_list_field(text: Any, *, row: int | str, field: str) -> list[str]:
    """One list field, read without the rest of its row: every comma separates two names (see
    :func:`decode_row_lists` for reading a whole row, where counts settle commas inside names)."""
    return read_list_text(text, row=row, field=field).plain()


def strip_letter_prefixes(choices: list[str]) -> list[str]:
    """``["A. apple", "B. keys"]`` -> ``["apple", "keys"]`` when *every* choice carries its own letter."""
    expected = letters(len(choices))
    matches = [_LETTER_PREFIX.match(c) for c in choices]
    if choices and all(m and m.group(1) == label for m, label in zip(matches, expected)):
        return [m.group(2).strip() for m in matches]  # type: ignore[union-attr]
    return choices


# ------------------------------------------------------------------------------------------------- whole rows


@dataclass
class RowLists:
    """The list fields of one row, read and cross-checked."""

    choices: list[str]
    ground_truth: list[str]  #: names in letter order, or [NO_COMMON_OBJECTS]
    answer_letters: list[str]
    objects_1: list[str]
    objects_2: list[str]
    encodings: dict[str, str]  #: field -> encoding read
    ground_truth_as: str  #: "names" | "letters"
    answer_checked: bool  #: the ``answer`` column was read and agrees (False: absent or not readable)
    notes: list[str] = field(default_factory=list)  #: how an ambiguous split was settled


def count_value(value: Any) -> int | None:
    if value is None or isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        return None
    try:
        number = int(value)
    except (TypeError, ValueError):
        return None
    return number if number >= 0 else None


def _letter_items(items: list[str]) -> list[str] | None:
    """``["B", "D", "E"]`` / ``["B D E"]`` / ``["(B)"]`` -> letters, or None when an item is not a letter."""
    out = []
    for item in items:
        for token in item.split():
            match = _LETTER_ITEM.match(token.strip(".,;"))
            if match is None:
                return None
            out.append(match.group(1))
    return out or None


class Mismatch(Exception):
    """A reading of a row that its other columns contradict (the reason is the message)."""


def _choice_lookup(choices: list[str]) -> tuple[list[str], set[str], dict[str, int], dict[str, int]]:
    """What :func:`_truth_indices` looks names up in: the letters, the case-folded names, and each name's first
    index as written and case-folded (made once a row: its ground truth and its answer both use it)."""
    exact = {c: k for k, c in reversed(list(enumerate(choices)))}
    lowered = {c.casefold(): k for k, c in reversed(list(enumerate(choices)))}
    return letters(len(choices)), set(lowered), exact, lowered


def _truth_indices(items: list[str], choices: list[str], field: str, lookup=None) -> tuple[list[int], str]:
    """Indices of the ground truth (names or letters) within ``choices``; raises Mismatch with the reason.
    ``lookup``: :func:`_choice_lookup` of ``choices`` when the caller has made it already."""
    if not items:
        items = [NO_COMMON_OBJECTS]
    labels, folded, exact, lowered = lookup or _choice_lookup(choices)
    as_letters = _letter_items(items)
    if as_letters is not None and not any(item.casefold() in folded for item in items):
        unknown = [x for x in as_letters if x not in labels]
        if unknown:
            raise Mismatch(
                f"{field} {unknown[0]!r} is not one of the {len(choices)} choice letters ({labels[0]}-{labels[-1]})"
            )
        return sorted({labels.index(x) for x in as_letters}), "letters"
    indices = []
    for name in items:
        k = exact.get(name, lowered.get(name.casefold()))
        if k is None:
            raise Mismatch(f"{field} {name!r} is not one of the choices {choices}")
        indices.append(k)
    return sorted(set(indices)), "names"


def answer_text(value: Any) -> str | None:
    if not isinstance(value, str) or not value.strip():
        return None
    return re.sub(r"^\s*(?:final\s+)?answer\s*:\s*", "", value.strip(), flags=re.I)


@dataclass
class _Candidate:
    choices: list[str]
    truth: list[int]
    truth_as: str
    answer_ok: bool
    objects_1: list[str]
    objects_2: list[str]
    score: tuple


def decode_row_lists(row: dict, *, row_label: str) -> RowLists:
    """Read and cross-check the list fields of one row (see the module doc). ``row_label`` names the row in
    errors (``"3 of data/main"`` gives ``row 3 of data/main, field 'choices': ...``)."""
    where = f"row {row_label}"
    num_choices = count_value(row.get("num_choices"))
    num_truth = count_value(row.get("num_ground_truth_objects"))
    texts, answer_list = _read_row_texts(row, row_label)
    question_items, question_exact = _question_choices(row, row_label, num_choices)
    choice_readings, groupings = _choice_readings(
        row, where, texts["choices"], num_choices, question_items, question_exact
    )

    truth_count = num_truth if num_truth else None
    truth_readings = texts["ground_truth_objects"].readings(truth_count) or [texts["ground_truth_objects"].plain()]
    objects_readings = {}
    for name, count_field in (("objects_1", "num_objects_image_1"), ("objects_2", "num_objects_image_2")):
        readings = texts[name].readings(count_value(row.get(count_field)) or None)
        objects_readings[name] = readings or [texts[name].plain()]  # counts of objects only settle groupings
    answer_readings: list[list[str] | None] = [None]
    if answer_list is not None:
        answer_readings = answer_list.readings(truth_count) or [answer_list.plain()]
        answer_readings = answer_readings[:MAX_READINGS]

    chosen = _settle(row, where, choice_readings, truth_readings, answer_readings, objects_readings, num_truth)
    notes = []
    if groupings > 1 or len(truth_readings) > 1:
        notes.append("comma grouping settled by the row's question, counts and cross-checks")
    encodings = {name: text.encoding for name, text in texts.items()}
    if answer_list is not None:
        encodings["answer"] = answer_list.encoding
    return row_lists_of(chosen, encodings, notes)


def row_lists_of(chosen: _Candidate, encodings: dict[str, str], notes: list[str] | None = None) -> RowLists:
    """The :class:`RowLists` of the reading a row settled on (shared with the batch path, loader_batch)."""
    labels = letters(len(chosen.choices))
    return RowLists(
        choices=chosen.choices,
        ground_truth=[chosen.choices[k] for k in chosen.truth],
        answer_letters=[labels[k] for k in chosen.truth],
        objects_1=chosen.objects_1,
        objects_2=chosen.objects_2,
        encodings=encodings,
        ground_truth_as=chosen.truth_as,
        answer_checked=chosen.answer_ok,
        notes=notes or [],
    )


def _read_row_texts(row: dict, row_label: str) -> tuple[dict[str, ListText], ListText | None]:
    """The row's four list fields as read, and its ``answer`` column when it reads as a list (else None)."""
    texts = {}
    for name in ("choices", "ground_truth_objects", "objects_1", "objects_2"):
        if name in ("objects_1", "objects_2") and row.get(name) is None:
            texts[name] = ListText("empty", [])
            continue
        texts[name] = read_list_text(row.get(name), row=row_label, field=name)
    answer_list = None
    answer_raw = answer_text(row.get("answer"))
    if answer_raw is not None:
        try:
            answer_list = read_list_text(answer_raw, row=row_label, field="answer")
        except SchemaError:
            answer_list = None  # free text: not used for checking (recorded as answer_checked=False)
    return texts, answer_list


def _question_choices(row: dict, row_label: str, num_choices: int | None) -> tuple[list[str] | None, bool]:
    """The question's own lettered choices, and whether they are exact: exact when it follows the paper's
    template; otherwise letters found in its wording give them, its last item running on into the question."""
    question = row.get("question") if isinstance(row.get("question"), str) else ""
    middle = question_choice_text(question) if question else None
    if middle is not None:
        try:
            q = read_list_text(middle, row=row_label, field="question")
        except SchemaError:
            return None, False
        return (q.items, True) if q.exact else (None, False)
    if question:
        return split_lettered(question, num_choices), False
    return None, False


def _choice_readings(
    row: dict,
    where: str,
    choice_text: ListText,
    num_choices: int | None,
    question_items: list[str] | None,
    question_exact: bool,
) -> tuple[list[list[str]], int]:
    """The readings of ``choices`` that fit ``num_choices`` (or the question's count) and agree with the
    question, and how many groupings its commas allowed; :class:`SchemaError` when none fits."""
    count = num_choices if num_choices else (len(question_items) if question_exact and question_items else None)
    readings = choice_text.readings(count)
    if readings is None:
        raise SchemaError(
            f"{where}, field 'choices': {_excerpt(_shown(row['choices']))} has too many ways to group its commas "
            f"into {count} names.",
            "Store the choices as a JSON list.",
        )
    if not readings and not num_choices:
        raise _contradicting_question(row, where, question_items)
    if not readings:
        raise SchemaError(
            f"{where}, field 'choices': {_excerpt(_shown(row['choices']))} holds {len(choice_text.plain())} names, "
            f"but num_choices is {num_choices}.",
            "Fix num_choices or the choices list (a JSON list keeps commas inside names).",
        )
    groupings = len(readings)
    readings = [strip_letter_prefixes(r) for r in readings]
    if question_items:
        # A question in the paper's template gives the choices exactly; letters found in other wording give
        # them up to where the last one ends, so there only agreement is used (to pick a grouping), never refusal.
        agreeing = [r for r in readings if _same_names(r, question_items, loose_last=not question_exact)]
        if agreeing:
            readings = agreeing
        elif question_exact:
            raise _contradicting_question(row, where, question_items)
    return readings, groupings


def _contradicting_question(row: dict, where: str, question_items: list[str] | None) -> SchemaError:
    return SchemaError(
        f"{where}: the question lists the choices {question_items}, but field 'choices' holds "
        f"{_excerpt(_shown(row['choices']))}.",
        "The row contradicts itself; fix the question or the choices (or drop the row).",
    )


def _settle(
    row: dict,
    where: str,
    choice_readings: list[list[str]],
    truth_readings: list[list[str]],
    answer_readings: list[list[str] | None],
    objects_readings: dict[str, list[list[str]]],
    num_truth: int | None,
) -> _Candidate:
    """Check every combination of the fields' readings and keep the one the row supports best;
    :class:`SchemaError` when none passes, or when the best ones disagree on choices or truth."""
    sizes = [
        len(choice_readings),
        len(truth_readings),
        len(answer_readings),
        len(objects_readings["objects_1"]),
        len(objects_readings["objects_2"]),
    ]
    if math.prod(sizes) > MAX_COMBINATIONS:
        raise SchemaError(
            f"{where}: its unquoted lists can be grouped in too many ways ({math.prod(sizes):,}) to settle which "
            "is meant.",
            "Store the list fields as JSON lists.",
        )
    candidates: list[_Candidate] = []
    first_error: str | None = None
    for choices, truth_items, answer_items, o1, o2 in itertools.product(
        choice_readings, truth_readings, answer_readings, objects_readings["objects_1"], objects_readings["objects_2"]
    ):
        try:
            candidates.append(check_reading(choices, truth_items, answer_items, o1, o2, num_truth))
        except Mismatch as exc:
            first_error = first_error or str(exc)
    if not candidates:
        raise SchemaError(
            f"{where}: {first_error}.",
            "Every ground-truth object must be one of the choices and agree with answer and "
            "num_ground_truth_objects; fix or drop the row.",
        )
    best = max(c.score for c in candidates)
    top = [c for c in candidates if c.score == best]
    outcomes = {(tuple(c.choices), tuple(c.truth)) for c in top}
    if len(outcomes) > 1:
        fields = [
            f
            for f, readings in (("choices", choice_readings), ("ground_truth_objects", truth_readings))
            if len(readings) > 1
        ] or ["choices"]
        shown = "; ".join(f"field {f!r} = {_excerpt(_shown(row.get(f)))}" for f in fields)
        options = sorted(outcomes)[:3]
        raise SchemaError(
            f"{where}: ambiguous list ({shown}): a comma may separate two names or belong to one, and the row's "
            f"counts, question, answer and object lists do not settle it (e.g. {[list(o[0]) for o in options][:2]}).",
            "Store the list fields as JSON lists (names keep their commas), or drop the row.",
        )
    return top[0]


def _shown(value: Any) -> str:
    return value if isinstance(value, str) else repr(value)


def _same_names(a: list[str], b: list[str], *, loose_last: bool = False) -> bool:
    """Same names in the same order (case-insensitive); ``loose_last``: ``b``'s last item may run on."""
    if len(a) != len(b) or not a:
        return False
    head = all(x.strip().casefold() == y.strip().casefold() for x, y in zip(a[:-1], b[:-1]))
    last_a, last_b = a[-1].strip().casefold(), b[-1].strip().casefold()
    return head and (last_b.startswith(last_a) if loose_last else last_a == last_b)


def check_reading(choices, truth_items, answer_items, o1, o2, num_truth) -> _Candidate:
    """One reading of a row checked: choices distinct, the ground truth (and ``answer``, when it names choices)
    among them and agreeing with ``num_ground_truth_objects``; :class:`Mismatch` with the reason otherwise."""
    if not choices:
        raise Mismatch("field 'choices': the list of choices is empty")
    folded = [c.casefold() for c in choices]
    if len(set(folded)) != len(folded):
        duplicate = next(c for k, c in enumerate(choices) if folded.index(c.casefold()) != k)
        raise Mismatch(f"field 'choices' names {duplicate!r} twice")
    lookup = _choice_lookup(choices)
    truth, truth_as = _truth_indices(truth_items, choices, "field 'ground_truth_objects':", lookup)
    none_index = folded.index(NO_COMMON_OBJECTS.casefold()) if NO_COMMON_OBJECTS.casefold() in folded else None
    if none_index is not None and none_index in truth and len(truth) > 1:
        raise Mismatch(f"field 'ground_truth_objects' lists objects and {NO_COMMON_OBJECTS!r} together")
    n_objects = 0 if truth == [none_index] else len(truth)
    if num_truth is not None and num_truth != n_objects and not (n_objects == 0 and num_truth == 1):
        raise Mismatch(
            f"num_ground_truth_objects is {num_truth} but field 'ground_truth_objects' names {n_objects} object(s)"
        )
    answer_ok = False
    if answer_items is not None:
        try:
            answer, _ = _truth_indices(answer_items, choices, "field 'answer':", lookup)
        except Mismatch:
            answer = None  # an answer that names no choice (free text) is not used
        if answer is not None:
            if answer != truth:
                labels = letters(len(choices))
                raise Mismatch(
                    f"field 'answer' gives {', '.join(labels[k] for k in answer)} but field 'ground_truth_objects' "
                    f"gives {', '.join(labels[k] for k in truth)}"
                )
            answer_ok = True
    # Soft evidence, used only to choose between groupings: the truth is what both object lists share, and
    # the choice names appear in the object lists.
    score = (0, 0)
    if o1 or o2:
        shared = {x.casefold() for x in o1} & {x.casefold() for x in o2}
        truth_names = {folded[k] for k in truth if k != none_index}
        in_objects = {x.casefold() for x in (*o1, *o2)}
        score = (int(truth_names == (shared & set(folded))), sum(c in in_objects for c in folded))
    return _Candidate(list(choices), truth, truth_as, answer_ok, list(o1), list(o2), (answer_ok, *score))
