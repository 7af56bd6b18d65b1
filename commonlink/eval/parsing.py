"""Reading a model's answer to a lettered multiple-choice question (and to a yes/no question).

The prompt asks for a last line ``Answer: <letters>``; the rules are ours (README, section *eval*, lists them):

1. Reasoning is dropped: every closed ``<think>...</think>`` block, and everything before a lone ``</think>``
   (chat templates that open the block in the prompt). An unterminated ``<think>`` means the generation was
   cut off while reasoning: the output is unparseable. (One left-to-right scan: time linear in the output.)
2. Markdown and LaTeX wrappers are removed (``**``, ``__``, backticks, ``#``, ``\\boxed{}``, ``\\text{}``).
3. The answer is the text after the *last* ``Answer:`` marker (any case; ``Final answer:``, ``answer is``
   too), on its line, or on the next non-empty line when that line is empty. A prose ``answer is`` (no colon)
   whose text does not parse yields to the last ``Answer:`` line. Without any marker, the last non-empty line
   is tried and must parse entirely.
4. Remarks are dropped before anything is matched: a parenthesised or bracketed remark that is not a letter
   group and not part of a choice name (``Answer: D, E (the silver knife is not in image 2)`` is D, E, not a
   hallucinated "silver knife"; ``mallard (fake duck)`` stays a name).
5. Inside the answer, choice *names* are matched first (longest first, case-insensitive, whole words), so
   ``Answer: apple, keys`` works; ``none`` / ``no objects (in common)`` pick the task's none-answer choice
   (``none_choice``, e.g. "No objects are in common"). What remains must be letters of the choices (any case,
   with or without commas: ``A, C``, ``A C``, or ``;``, ``/``, ``|``, ``&``, ``and``; with
   ``A.``/``(A)``/``[A]``/``<A>`` decorations, so the template echoed back as ``Answer: <A> <C>`` is A, C).
   ``a``/``an``/``the`` next to matched names are articles.
6. A sentence after the letters (``Answer: D, E. The knife is only in image 1``, ``Answer: D, E - because``)
   is a remark: when the whole payload does not parse, its part before the first sentence break is tried.
7. Any other leftover word, or a letter beyond the choices, makes the output unparseable: it is scored as a
   wrong, empty prediction and flagged with the reason (nothing is guessed).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field

from commonlink.formats.choices import letters as letter_labels


@dataclass
class ParsedAnswer:
    """Letters a model chose (in choice order), or ``ok=False`` with the reason it could not be read."""

    letters: list[str] = field(default_factory=list)
    ok: bool = False
    error: str | None = None
    #: "answer_line" when an ``Answer:`` marker was found, "last_line" for the bare-line fallback.
    found_in: str | None = None


_OPEN, _CLOSE = "<think>", "</think>"
# Patterns over whitespace runs are linear: runs are taken possessively (``\s*+``: no backtracking into a run)
# and a pattern that starts with a run starts only at the run's first character (``(?<!\s)``), so a run of n
# spaces is read O(1) times, not once from each of its n positions (40,000 spaces took 11 s before).
_MARKER = re.compile(r"answer\s*+(?:is\s*+)?[:：]|answer\s++is\b", re.I)
#: The marker the prompt asks for (with a colon); prose "... answer is ..." is only a weaker marker.
_FORMAL_MARKER = re.compile(r"answer\s*+(?:is\s*+)?[:：]", re.I)
_WRAPPERS = re.compile(r"\\(?:boxed|text|textbf|mathrm)\s*+\{([^{}]*)\}")
_NONE_PHRASES = re.compile(
    r"(?<![a-z0-9])(?:no\s++(?:common\s++)?objects?(?:\s++(?:are\s++)?in\s++common)?|nothing\s++in\s++common|none)(?![a-z0-9])",
    re.I,
)
_SEPARATORS = re.compile(r"[,;/|&+\s]+")
_FILLER = {"and", "option", "options", "choice", "choices", "letter", "letters"}
_DECORATION = ".:)(][}{><'\"*"
_ARTICLES = {"a", "an", "the"}
#: Where a remark after the answer starts: a sentence break, a dash between spaces, "because".
# (case-insensitive only where it matters: an ignore-case dash class costs 25x per whitespace character)
_REMARK_START = re.compile(r"[.!?]\s++(?=[A-Za-z]{2})|\s[-\u2013\u2014]+\s|(?<!\s)\s++(?i:because)\b")


def _drop_think_blocks(text: str) -> str:
    """Every closed ``<think>...</think>`` block replaced by a newline (leftmost first, non-nested, like the
    regex ``<think>.*?</think>``), in one scan: each position is looked at a bounded number of times, so
    100,000 repeated tags cost as much as reading them (a regex retries from every unclosed tag: quadratic)."""
    lower = text.lower()
    parts, pos = [], 0
    while True:
        start = lower.find(_OPEN, pos)
        if start < 0:
            break
        end = lower.find(_CLOSE, start + len(_OPEN))
        if end < 0:
            break  # unclosed: kept (and reported by the caller); no later block can close either
        parts.append(text[pos:start])
        parts.append("\n")
        pos = end + len(_CLOSE)
    parts.append(text[pos:])
    return "".join(parts)


def strip_reasoning(text: str) -> tuple[str, str | None]:
    """Drop ``<think>`` blocks; returns (remaining text, error) where error names an unterminated block."""
    body = _drop_think_blocks(text)
    lower = body.lower()
    if "</think>" in lower:  # the template opened the block: the answer follows the last close tag
        body = body[lower.rindex("</think>") + len("</think>") :]
        lower = body.lower()
    if "<think>" in lower:
        return body[: lower.index("<think>")], "unterminated <think> block (generation cut off while reasoning)"
    return body, None


def _clean_markdown(text: str) -> str:
    for _ in range(3):  # nested \boxed{\text{A}}
        text = _WRAPPERS.sub(r"\1", text)
    text = text.replace("**", " ").replace("__", " ").replace("`", " ")
    return re.sub(r"(?m)^[ \t]*#+[ \t]*", "", text)


def _answer_payload(text: str, marker: re.Pattern = _MARKER) -> tuple[str | None, str | None]:
    """(payload, where) from the last ``Answer:`` marker, or from the last non-empty line."""
    matches = list(marker.finditer(text))
    if matches:
        rest = text[matches[-1].end() :]
        lines = rest.split("\n")
        payload = lines[0].strip()
        if not payload:
            payload = next((ln.strip() for ln in lines[1:] if ln.strip()), "")
        return payload, "answer_line"
    lines = [ln.strip() for ln in text.split("\n") if ln.strip()]
    return (lines[-1], "last_line") if lines else (None, None)


@functools.lru_cache(maxsize=4096)  # a split repeats its few hundred object names on every row
def _name_pattern(name: str) -> re.Pattern:
    return re.compile(r"(?<![A-Za-z0-9])" + re.escape(name) + r"(?![A-Za-z0-9])", re.I)


def _unwrap_letter_group(match: re.Match) -> str:
    """``(A)``, ``[A, C]`` keep their letters; any other bracketed text is a remark and is dropped."""
    inner = match.group(1) if match.group(1) is not None else match.group(2)
    tokens = [t for t in _SEPARATORS.split(inner) if t.strip(_DECORATION)]
    if tokens and all(re.fullmatch(r"[A-Za-z]{1,2}", t.strip(_DECORATION)) for t in tokens):
        return f" {inner} "
    return " "


@functools.lru_cache(maxsize=1024)  # a split has few distinct choice lists; every row's answer is read against one
def _choice_layout(choices: tuple[str, ...]) -> tuple[list[str], list[int], list[int], dict[str, int]]:
    """(letters, choice order, bracketed choices, lower-case letter -> choice) of a choice list.

    Names longest first, so "glass cup" wins over "cup" and names with spaces stay whole. Names holding
    brackets ("mallard (fake duck)") go before remarks are dropped; all others after, so that a remark
    ("(the silver knife is not in image 2)") never counts as naming a choice."""
    labels = letter_labels(len(choices))
    order = sorted(range(len(choices)), key=lambda k: -len(choices[k]))
    bracketed = [k for k in order if any(ch in choices[k] for ch in "()[]")]
    return labels, order, bracketed, {label.lower(): k for k, label in enumerate(labels)}


def parse_choice_letters(payload: str, choices: list[str], *, none_choice: str | None = None) -> ParsedAnswer:
    """Parse the text after ``Answer:`` against the lettered ``choices`` (rules 4, 5 and 7 of the module doc);
    ``none_choice``: the choice that "none" / "no objects" phrases pick when it is among ``choices``."""
    labels, order, bracketed, by_label = _choice_layout(tuple(choices))
    picked: set[int] = set()
    rest = payload
    for idx in bracketed:
        rest = _take_name(rest, idx, choices, picked)
    # "(A)" / "[B]" keep their letter; other parenthesised remarks are explanations, not answers.
    rest = re.sub(r"\(([^()]*)\)|\[([^\[\]]*)\]", _unwrap_letter_group, rest)
    for idx in order:
        if idx not in bracketed:
            rest = _take_name(rest, idx, choices, picked)
    if none_choice is not None and none_choice in choices and _NONE_PHRASES.search(rest):
        picked.add(choices.index(none_choice))
        rest = _NONE_PHRASES.sub(" ", rest)
    names_matched = bool(picked)
    for raw in _SEPARATORS.split(rest):
        token = raw.strip(_DECORATION)
        if not token:
            continue
        if token.lower() in _FILLER:
            continue
        if names_matched and (token == "a" or token.lower() in _ARTICLES - {"a"}):
            continue  # "a spoon and the fork": articles, not choice A
        if re.fullmatch(r"[A-Za-z]", token) or (len(choices) > 26 and re.fullmatch(r"[A-Za-z]{2}", token)):
            k = by_label.get(token.lower())
            if k is None:
                return ParsedAnswer(
                    error=f"letter {token!r} is not one of the {len(choices)} choices ({labels[0]}-{labels[-1]})"
                )
            picked.add(k)
            continue
        return ParsedAnswer(error=f"unexpected text {token!r} in the answer")
    if not picked:
        return ParsedAnswer(error="the answer is empty")
    return ParsedAnswer(letters=[labels[k] for k in sorted(picked)], ok=True)


def _take_name(rest: str, idx: int, choices: list[str], picked: set[int]) -> str:
    pattern = _name_pattern(choices[idx])
    if pattern.search(rest):
        picked.add(idx)
        rest = pattern.sub(" ", rest)
    return rest


def _parse_payload(payload: str, choices: list[str], none_choice: str | None) -> ParsedAnswer:
    """The whole payload, else (rule 6) its part before a remark sentence, when that part parses."""
    # Each whitespace run becomes one space (one str pass): the name, remark and letter rules all treat a run
    # like one space, and a 40,000-character run is then not scanned again by each choice's name pattern.
    payload = " ".join(payload.split())
    parsed = parse_choice_letters(payload, choices, none_choice=none_choice)
    if not parsed.ok:
        remark = _REMARK_START.search(payload)
        if remark is not None and remark.start() > 0:
            head = parse_choice_letters(payload[: remark.start()], choices, none_choice=none_choice)
            if head.ok:
                return head
    return parsed


def parse_choice_answer(text: str, choices: list[str], *, none_choice: str | None = None) -> ParsedAnswer:
    """The letters a model chose for a lettered multiple-choice question (see the module doc for the rules);
    ``none_choice``: the choice that "none" / "no objects" phrases pick (rule 5)."""
    if not isinstance(text, str) or not text.strip():
        return ParsedAnswer(error="empty output")
    body, think_error = strip_reasoning(text)
    body = _clean_markdown(body)
    payload, where = _answer_payload(body)
    if payload is None:
        return ParsedAnswer(error=think_error or "no answer line")
    parsed = _parse_payload(payload, choices, none_choice)
    if not parsed.ok and where == "answer_line":
        # "Answer: A, C\nI hope this answer is helpful.": a prose marker that does not parse yields to the
        # last Answer: line the prompt asked for.
        formal, _ = _answer_payload(body, _FORMAL_MARKER) if _FORMAL_MARKER.search(body) else (None, None)
        if formal is not None and formal != payload:
            retry = _parse_payload(formal, choices, none_choice)
            if retry.ok:
                parsed = retry
    if not parsed.ok and where == "last_line":
        parsed.error = think_error or f"no 'Answer:' line, and the last line does not parse ({parsed.error})"
    parsed.found_in = where if parsed.ok else None
    return parsed


_YES_NO = re.compile(r"(?<![a-z])(yes|no)(?![a-z])", re.I)


def parse_yes_no(text: str) -> bool | None:
    """``True`` for yes, ``False`` for no, ``None`` when neither (or both, undecided) can be read.

    Reasoning blocks and markdown are dropped; an ``Answer:`` payload wins; otherwise the output's first word
    decides when it is yes/no, else the last yes/no in the text (a conclusion after reasoning).
    """
    if not isinstance(text, str):
        return None
    body, think_error = strip_reasoning(text)
    if think_error:
        return None
    body = _clean_markdown(body).strip()
    for marker in (_MARKER, _FORMAL_MARKER):  # a prose "answer is" without yes/no yields to the Answer: line
        matches = list(marker.finditer(body))
        if matches:
            found = _YES_NO.search(body[matches[-1].end() :].strip())
            if found:
                return found.group(1).lower() == "yes"
    if _MARKER.search(body):
        return None
    first = re.match(r"\W*(yes|no)(?![a-z])", body, re.I)
    if first:
        return first.group(1).lower() == "yes"
    found = _YES_NO.findall(body)
    return None if not found else found[-1].lower() == "yes"
