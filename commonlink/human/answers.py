"""A person's answers file (what the study page exports), read and checked against the release, and scored like
a model: :class:`HumanBackend` answers each request from the file in the model's own answer format, so the eval
task that scores models (:func:`commonlink.human.items.eval_task`) runs unchanged and writes a normal run folder.

The file is JSON lines: a header ``{"format": "commonlink-human-answers", "version": 1, "study", "source",
"fingerprint", "split", "spec", "annotator", ...}`` then one line per answered question ``{"unit", "item",
"answer": [choice indices], "ms"}``. A file from another release or split, a malformed line, an unknown item, an
answer that is not a valid pick, or a chain step answered after the chain ended is refused, naming the line.
Only *finished* units are scored (every question answered; a chain ended or played to its last step); the
others are listed as unfinished.
"""

from __future__ import annotations

import json
import os
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from commonlink.errors import CommonlinkError, InputError
from commonlink.eval.backends import BASELINES
from commonlink.eval.backends.base import BackendInfo, GenerationRequest, GenerationSettings, RequestFailure
from commonlink.eval.evaluator import RunOptions
from commonlink.eval.outputs import evaluate
from commonlink.fileio import atomic_write_json, jsonl_lines, parse_jsonl_line, sha256_file
from commonlink.human.items import StudySpec, StudyUnit, eval_task, study_units
from commonlink.human.study import ANSWERS_FORMAT, FORMAT_VERSION

_FIX = "Export the answers again from the study page (Export answers); do not edit the file."


@dataclass
class Answer:
    unit: str
    item: str
    answer: list[int]
    ms: int
    line: int


@dataclass
class HumanAnswers:
    path: Path
    header: dict
    answers: dict[str, Answer] = field(default_factory=dict)  #: by item (request id)

    @property
    def annotator(self) -> str:
        return self.header["annotator"]

    @property
    def spec(self) -> StudySpec:
        return StudySpec.from_dict(self.header["spec"])


def is_human_answers(path: str | os.PathLike) -> bool:
    """Whether ``path`` starts with a human answers header (what ``eval score`` checks first)."""
    path = Path(path)
    if not path.is_file() or path.suffix.lower() not in (".jsonl", ".json", ".ndjson", ""):
        return False
    try:
        first = next(jsonl_lines(path), None)
        header = json.loads(first[1]) if first is not None else None
    except (CommonlinkError, ValueError):  # not UTF-8 or not JSON: not ours; the other readers say what it is
        return False
    return isinstance(header, dict) and header.get("format") == ANSWERS_FORMAT


def _header(path: Path, lineno: int, line: str) -> dict:
    header = parse_jsonl_line(path, lineno, line, fix=_FIX)
    if header.get("format") != ANSWERS_FORMAT:
        raise InputError(f"{path}, line {lineno}: not a human answers header (format {header.get('format')!r}).", _FIX)
    if header.get("version") != FORMAT_VERSION:
        raise InputError(
            f"{path}, line {lineno}: answers format version {header.get('version')!r}; this toolkit reads "
            f"version {FORMAT_VERSION}.",
            "Score it with the toolkit version that built the study.",
        )
    for key in ("study", "fingerprint", "split", "spec", "annotator"):
        if key not in header:
            raise InputError(f"{path}, line {lineno}: the header lacks {key!r}.", _FIX)
    name = header["annotator"]
    if not isinstance(name, str) or not name.strip():
        raise InputError(f"{path}, line {lineno}: no annotator name.", _FIX)
    if name in BASELINES:
        raise InputError(
            f"{path}: the annotator is called {name!r}, the name of a baseline; tables could not tell them apart.",
            "Rename the annotator in the study page and export again.",
        )
    return header


def _row(path: Path, lineno: int, line: str) -> Answer:
    row = parse_jsonl_line(path, lineno, line, fix=_FIX)
    item, unit, answer, ms = row.get("item"), row.get("unit"), row.get("answer"), row.get("ms")
    if not isinstance(item, str) or not isinstance(unit, str):
        raise InputError(f"{path}, line {lineno}: 'item' and 'unit' must be text.", _FIX)
    if not isinstance(answer, list) or not all(isinstance(k, int) and not isinstance(k, bool) for k in answer):
        raise InputError(f"{path}, line {lineno}: 'answer' must be a list of choice numbers.", _FIX)
    if not isinstance(ms, int) or isinstance(ms, bool) or ms < 0:
        raise InputError(f"{path}, line {lineno}: 'ms' (answering time) must be a whole number >= 0.", _FIX)
    return Answer(unit, item, answer, ms, lineno)


def read_answers(path: str | os.PathLike) -> HumanAnswers:
    """The header and answers of an answers file, each line checked for shape (see the module doc)."""
    path = Path(path)
    lines = jsonl_lines(path)
    first = next(lines, None)
    if first is None:
        raise InputError(f"{path} is empty.", _FIX)
    out = HumanAnswers(path, _header(path, *first))
    for lineno, line in lines:
        answer = _row(path, lineno, line)
        if answer.item in out.answers:
            raise InputError(
                f"{path}, line {lineno}: item {answer.item} is answered twice (first on line "
                f"{out.answers[answer.item].line}).",
                _FIX,
            )
        out.answers[answer.item] = answer
    return out


def _check_answer(answers: HumanAnswers, answer: Answer, question) -> None:
    where = f"{answers.path}, line {answer.line}"
    picked = answer.answer
    if not picked or len(set(picked)) != len(picked) or any(not 0 <= k < len(question.choices) for k in picked):
        raise InputError(f"{where}: answer {picked} is not a pick among the {len(question.choices)} choices.", _FIX)
    if not question.multi and len(picked) != 1:
        raise InputError(f"{where}: item {answer.item} takes one choice, the answer has {len(picked)}.", _FIX)


def finished_units(answers: HumanAnswers, units: list[StudyUnit]) -> tuple[list[StudyUnit], list[str]]:
    """(units to score, ids of units begun but not finished), every answer checked against its question."""
    by_item = {q.id: (u, q) for u in units for q in u.questions}
    for answer in answers.answers.values():
        if answer.item not in by_item:
            raise InputError(
                f"{answers.path}, line {answer.line}: item {answer.item} is not a question of this split.",
                "Score the file against the release and split its study was built from (--data, --split).",
            )
        unit, question = by_item[answer.item]
        if answer.unit != unit.id:
            raise InputError(
                f"{answers.path}, line {answer.line}: item {answer.item} belongs to {unit.id}, not {answer.unit}.", _FIX
            )
        _check_answer(answers, answer, question)
    done, unfinished = [], []
    for unit in units:
        given = [answers.answers.get(q.id) for q in unit.questions]
        if not any(given):
            continue
        if unit.chain:
            ended = next(
                (k for k, (a, q) in enumerate(zip(given, unit.questions)) if a and not q.is_correct(a.answer)), None
            )
            stop = len(unit.questions) if ended is None else ended + 1
            late = [a for a in given[stop:] if a]
            if late:
                raise InputError(
                    f"{answers.path}, line {late[0].line}: {unit.id} answers a step after the chain ended (wrong "
                    f"answer on line {given[ended].line}).",
                    _FIX,
                )
            complete = all(given[:stop])
        else:
            complete = all(given)
        (done if complete else unfinished).append(unit if complete else unit.id)
    return done, unfinished


class HumanBackend:
    """Answers a task's requests from a person's answers, written as a model writes them (the parser reads them)."""

    takes_options = False

    def __init__(self, answers: HumanAnswers, units: list[StudyUnit]):
        self.generate_seconds = 0.0
        self.questions = {q.id: q for u in units for q in u.questions}
        self.answers = answers
        self.info = BackendInfo(
            backend="human",
            model=answers.annotator,
            fingerprint=f"human:{sha256_file(answers.path)[:16]}",
            batch_invariant=True,
            default_batch_size=256,
            uses_images=False,
        )

    def generate(self, requests: list[GenerationRequest], settings: GenerationSettings) -> list[str | RequestFailure]:
        out: list[str | RequestFailure] = []
        for request in requests:
            given = self.answers.answers.get(request.id)
            if given is None:
                out.append(RequestFailure(f"not answered by {self.answers.annotator}"))
            else:
                out.append(self.questions[request.id].answer_text(given.answer))
        return out

    def close(self) -> None:
        pass


def _check_origin(answers: HumanAnswers, split, spec_split: str) -> None:
    header = answers.header
    if header["fingerprint"] != split.fingerprint:
        raise InputError(
            f"{answers.path}: the answers are for another release (data fingerprint {header['fingerprint']}; "
            f"{split.source_name} [{spec_split}] has {split.fingerprint}).",
            "Score it against the release its study was built from (--data).",
        )


def default_run_dir(answers: HumanAnswers) -> Path:
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", answers.annotator).strip("-") or "annotator"
    return Path("eval-runs") / f"human-{answers.spec.task}-{answers.spec.split}-{slug}"


def _human_record(answers: HumanAnswers, done: list[StudyUnit], unfinished: list[str]) -> dict:
    times = [a.ms for a in answers.answers.values()]
    return {
        "annotator": answers.annotator,
        "answers_file": str(answers.path.resolve()),
        "answers_sha256": sha256_file(answers.path),
        "study": answers.header["study"],
        "items_answered": len(times),
        "units_scored": len(done),
        "unfinished_units": unfinished,
        "answer_ms": {
            "median": statistics.median(times) if times else None,
            "mean": round(statistics.fmean(times), 1) if times else None,
            "total": sum(times),
        },
    }


def _may_replace(out: Path, annotator: str) -> bool:
    """A folder that holds this annotator's earlier scoring is rescored in place; any other run is kept."""
    results = out / "results.json"
    if not results.is_file():
        return False
    try:
        head = json.loads(results.read_text(encoding="utf-8"))
    except ValueError:
        return False
    model = head.get("model", (head.get("models") or [None])[0])
    return head.get("backend") == "human" and model == annotator


def score_answers(
    path: str | os.PathLike,
    data: str | os.PathLike,
    split: str | None,
    *,
    revision: str | None = None,
    out_dir: str | os.PathLike | None = None,
    seed: int = 0,
    n_boot: int = 1000,
    run_name: str | None = None,
) -> tuple[dict, Path]:
    """Score a person's answers file against ``data``'s ``split`` (None: the split the file names); returns
    (results, run folder)."""
    answers = read_answers(path)
    spec = answers.spec
    split = answers.header["split"] if split is None else split
    if answers.header["split"] != split:
        raise InputError(
            f"{answers.path}: the answers are for split {answers.header['split']!r}, not {split!r}.",
            f"Score it with --split {answers.header['split']} (and the release its study was built from).",
        )
    dataset, units = study_units(data, spec, revision=revision, pixels=False)
    _check_origin(answers, dataset, split)
    done, unfinished = finished_units(answers, units)
    if not done:
        raise InputError(
            f"{answers.path}: no unit is finished ({len(unfinished)} begun), so nothing can be scored.",
            "Let the annotator finish at least one question (a chain: until it ends), then export again.",
        )
    out = Path(out_dir) if out_dir is not None else default_run_dir(answers)
    options = RunOptions(
        models=[answers.annotator],
        backend="human",
        out_dir=out,
        backend_instances=[HumanBackend(answers, units)],
        indices=sorted(u.row for u in done),
        seed=seed,
        n_boot=n_boot,
        progress=False,
        run_name=run_name or answers.annotator,
        overwrite=_may_replace(out, answers.annotator),
    )
    results = evaluate(eval_task(data, spec, revision), options)
    results["human"] = _human_record(answers, done, unfinished)
    atomic_write_json(out / "results.json", results)
    return results, out


__all__ = [
    "Answer",
    "HumanAnswers",
    "HumanBackend",
    "default_run_dir",
    "finished_units",
    "is_human_answers",
    "read_answers",
    "score_answers",
]
