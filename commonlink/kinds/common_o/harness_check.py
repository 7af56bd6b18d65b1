"""Answers of another harness (or of an earlier run) matched to the rows of the data they are scored against,
and refused when they were made on other data.

``eval score`` matches each answer to its row by id (``doc_id``/``index`` is the row's position when the file
names no id) and then checks the row against what the file says it asked: the target text (lmms-eval's
``target``: the answer letters), the prompt sent (every choice of the row must appear in it), or the choices and
ground truth the file carries. A file made on another split or release (``main-00000003`` is a row of every
release's ``main``) is refused, naming what differs, instead of being scored silently wrong. The split is read
from the file's name where it says it (lmms-eval ``..._samples_common_o_challenge.jsonl``, VLMEvalKit
``MODEL_CommonO_Challenge.xlsx``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from commonlink.errors import InputError
from commonlink.kinds.common_o.harness_files import HarnessAnswers

__all__ = ["file_split", "match_answers", "row_mismatch"]

#: mismatches quoted in the refusal
_QUOTED = 3


def file_split(path: Path, read: HarnessAnswers, split: str | None) -> str:
    """The split to score against: ``split`` (``--split``) if given, else the one the file's name says, else
    ``main``; a ``split`` the file's name contradicts is refused."""
    if read.split and split and read.split != split:
        raise InputError(
            f"{path} is the {read.kind} file of {read.task} (split {read.split!r}), not of split {split!r}.",
            f"Leave out --split (it is read from the file's name), or pass --split {read.split}.",
        )
    return split or read.split or "main"


def row_mismatch(example, answer: dict, facts: dict | None = None) -> str | None:
    """What differs between the data's row and what the file says it asked (None when they agree)."""
    letters = ", ".join(example.answer_letters)
    target = answer.get("target")
    if target is not None and str(target).strip() != letters:
        return f"target {str(target)!r} in the file, {letters!r} in the data"
    prompt = answer.get("prompt")
    if prompt:
        missing = [c for c in example.choices if c not in prompt]
        if missing:
            return f"the prompt sent does not list the data's choice(s) {', '.join(map(repr, missing[:3]))}"
    if facts:
        if facts.get("choices") is not None and list(facts["choices"]) != list(example.choices):
            return f"choices {list(facts['choices'])} in the file, {list(example.choices)} in the data"
        truth = facts.get("ground_truth_letters")
        if truth is not None and list(truth) != list(example.answer_letters):
            return f"answer {', '.join(truth)!r} in the file, {letters!r} in the data"
    return None


def refuse_mismatches(path: Path, mismatches: Sequence[tuple[str, str]], total: int, data, split: str) -> None:
    """Refuse a file whose answers were asked about other rows than the data's (``(row, what differs)``)."""
    if not mismatches:
        return
    quoted = "; ".join(f"{row}: {what}" for row, what in mismatches[:_QUOTED])
    raise InputError(
        f"{path}: {len(mismatches)} of {total} answers do not match their rows in {data} split {split!r} ({quoted}); "
        "the file was made on other data (another split or release).",
        "Score it against the data and split the harness ran on (--data, --split, --revision).",
    )


def match_answers(path: Path, read: HarnessAnswers, dataset, data, split: str) -> list[tuple[object, dict]]:
    """``(row, answer)`` for every answer: by id when the file names one, else by position (``doc_id`` /
    ``index``); refused when an answer's row is not in the split or differs from what the file asked."""
    by_id: dict[str, int] | None = None
    matched, mismatches = [], []
    for answer in read.answers:
        if answer["id"] is not None:
            if by_id is None:
                by_id = {dataset.get(i, images=False).id: i for i in range(len(dataset))}
            row = by_id.get(str(answer["id"]))
            if row is None:
                raise InputError(
                    f"{path}: id {answer['id']} is not a row of {data} split {split!r}.",
                    "Score against the dataset and split the harness ran on (--data, --split).",
                )
        else:
            row = answer["row"]
            if not 0 <= row < len(dataset):
                raise InputError(
                    f"{path}: doc_id/index {row} is not a row of {data} split {split!r} ({len(dataset)} rows).",
                    "Score against the dataset and split the harness ran on.",
                )
        example = dataset.get(row, images=False)
        what = row_mismatch(example, answer, answer.get("facts"))
        if what is not None:
            mismatches.append((f"doc_id {answer['row']}" if answer["id"] is None else f"id {answer['id']}", what))
        matched.append((example, answer))
    refuse_mismatches(path, mismatches, len(read.answers), data, split)
    return matched
