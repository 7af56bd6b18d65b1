"""What a person is asked in a human study: the requests a model is sent for a release split, built by the same
functions the eval uses, with the correct answer of each.

A *unit* is what a person answers as a whole and what an annotator's sample is drawn from: a Common-O row (one
question), a perception row (one yes/no question per choice object and image), a single-step association task (the
selection, then the deduction when it is on), a deduction task, or a chain. A chain's questions are its scored steps
along the path a model that answers every step correctly walks: the prompt of step k holds the memory that path
builds (:func:`commonlink.kinds.association.task_chains.run_chains` plays the chain here against an oracle that answers
each step right), and a wrong answer ends the chain, as it ends a model's. Chains are studied without the deduction
step: with it, the memory would learn the person's own deduced concepts, so later prompts could not be written in
advance; the model run they are compared with must use ``--no-deduction`` (the study header records the settings).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Any

from commonlink.constants import NO_COMMON_OBJECTS
from commonlink.errors import InputError
from commonlink.eval.backends.base import GenerationRequest, GenerationSettings, message_parts
from commonlink.eval.imaging import cap_pixels
from commonlink.kinds.association.loader import open_association
from commonlink.kinds.association.requests import protocol_gold
from commonlink.kinds.association.task import (
    CHAIN_CONFIGS,
    AssociationSettings,
    AssociationTask,
    deduction_correct,
    deduction_request,
    run_chains,
    single_step_selection,
)
from commonlink.kinds.association.task_chains import paper_schedule
from commonlink.kinds.common_o.format import letters
from commonlink.kinds.common_o.perception import PerceptionTask
from commonlink.kinds.common_o.task import CommonOTask

#: Association configs a study can be built from (``--split``); any other split is a Common-O or perception one.
ASSOCIATION_CONFIGS = ("single_step", "deduction", *CHAIN_CONFIGS)
TASKS = ("auto", "commono", "perception", "association")


@dataclass
class StudyQuestion:
    """One request as a person sees it, with the choices and what counts as correct."""

    id: str  #: the request id (the key its answer is filed under, and how the scorer finds it)
    parts: list[tuple[str, Any]]  #: ("image", PIL image as the model gets it) / ("text", str), in prompt order
    choices: list[str]
    multi: bool  #: several choices may be picked
    lettered: bool  #: choices are answered by letter (Common-O)
    gold: list[int]  #: indices of the correct choice(s)
    rule: str = "exact"  #: exact | a deduction rule (requests.ASSOCIATION_DEDUCTION_RULES)

    def is_correct(self, picked: list[int]) -> bool:
        if self.rule == "exact":
            return sorted(picked) == sorted(self.gold)
        return deduction_correct(
            [self.choices[k] for k in picked],
            [self.choices[k] for k in self.gold],
            self.rule,
            text=self.answer_text(picked) if picked else "",  # the harness rule reads the answer as a model writes it
        )

    def answer_text(self, picked: list[int]) -> str:
        """The answer as a model writes it, so it goes through the same parser and scorer as a model's."""
        if self.lettered:
            labels = letters(len(self.choices))
            return "Answer: " + ", ".join(labels[k] for k in sorted(picked))
        if not self.multi:
            choice = self.choices[picked[0]]
            return choice.capitalize() if choice.lower() in ("yes", "no") else choice
        return ", ".join(self.choices[k] for k in sorted(picked))


@dataclass
class StudyUnit:
    id: str
    row: int  #: the row of the split (what the eval's row selection takes)
    chain: bool  #: questions are steps: each shown only after the previous one was answered right
    questions: list[StudyQuestion] = field(default_factory=list)


@dataclass
class StudySpec:
    """What the study is built from; recorded in the page and in every answers file, so scoring rebuilds it."""

    task: str  #: commono | perception | association
    split: str  #: the Common-O split or the association config
    image_protocol: str = "shorter-side-384"
    question: str = "dataset"
    yes_no_hint: bool = False
    association: dict = field(default_factory=dict)  #: AssociationSettings fields
    max_pixels: int = GenerationSettings.max_pixels

    def to_dict(self) -> dict:
        return {
            "task": self.task,
            "split": self.split,
            "image_protocol": self.image_protocol,
            "question": self.question,
            "yes_no_hint": self.yes_no_hint,
            "association": dict(self.association),
            "max_pixels": self.max_pixels,
        }

    @classmethod
    def from_dict(cls, data: dict) -> StudySpec:
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        if known.get("association") and "protocol" not in known["association"]:
            # a study written before the association protocols ran what is now the strict one
            known["association"] = {**known["association"], "protocol": "strict"}
        return cls(**known)


def study_spec(
    split: str,
    task: str = "auto",
    *,
    image_protocol: str = "shorter-side-384",
    question: str = "dataset",
    yes_no_hint: bool = False,
    settings: AssociationSettings | None = None,
) -> StudySpec:
    """The study's settings, checked: ``task`` auto is association for an association config, else Common-O."""
    if task not in TASKS:
        raise InputError(f"--task {task!r} is not a study task.", f"Use one of: {', '.join(TASKS)}.")
    if task == "auto":
        task = "association" if split in ASSOCIATION_CONFIGS else "commono"
    if task == "association" and split not in ASSOCIATION_CONFIGS:
        raise InputError(
            f"--split {split!r} is not an association config.", f"Use one of: {', '.join(ASSOCIATION_CONFIGS)}."
        )
    association = {}
    if task == "association":
        settings = settings or AssociationSettings()
        if split in CHAIN_CONFIGS and settings.deduction:
            settings = replace(settings, deduction=False)  # see the module doc: chains are played without it
        association = {
            k: getattr(settings, k) for k in AssociationSettings.__dataclass_fields__
        }  # the settings the scorer runs
    return StudySpec(task, split, image_protocol, question, yes_no_hint, association)


def open_split(data: str | os.PathLike, spec: StudySpec, revision: str | None = None):
    """The split (Common-O, perception: the Common-O rows) or association config the study is built from."""
    if spec.task == "association":
        return open_association(data, spec.split, revision=revision)
    return eval_task(data, spec, revision).open()


def eval_task(data: str | os.PathLike, spec: StudySpec, revision: str | None = None):
    """The eval task that scores the study's answers (the one a model is scored by)."""
    if spec.task == "commono":
        return CommonOTask(
            data, spec.split, revision=revision, image_protocol=spec.image_protocol, question=spec.question
        )
    if spec.task == "perception":
        return PerceptionTask(
            data, spec.split, revision=revision, image_protocol=spec.image_protocol, yes_no_hint=spec.yes_no_hint
        )
    return AssociationTask(data, spec.split, settings=AssociationSettings(**spec.association), revision=revision)


def _question(request: GenerationRequest, gold: list[int], spec: StudySpec, *, rule: str = "exact") -> StudyQuestion:
    parts = [
        ("image", cap_pixels(value, spec.max_pixels)) if kind == "image" else ("text", value)
        for kind, value in message_parts(request)
    ]
    choices = list(request.choices or [])
    lettered = request.multi_select and NO_COMMON_OBJECTS in choices
    return StudyQuestion(request.id, parts, choices, request.multi_select, lettered, gold, rule)


class _ChainOracle:
    """Stands in for the :class:`~commonlink.kinds.association.requests.Asker` of one chain: answers each
    selection right (``Image1``/``Image2``), keeping the requests, so the chain walks its all-correct path (its
    scored steps as the protocol runs them: under paper from :func:`paper_schedule`'s first scored step)."""

    def __init__(self, chain, pixels: bool, settings: AssociationSettings):
        self.pixels = pixels
        self.seed = 0  # the Asker's vote seed: one answer a step here, so no vote ever draws
        scored = chain.steps[paper_schedule(chain)[1] :] if settings.paper else [s for s in chain.steps if not s.warmup]
        self.answers = iter([s.answer for s in scored])
        self.requests: list[tuple[GenerationRequest, int]] = []

    def ask(self, requests: list[GenerationRequest]) -> list[list[str]]:
        out = []
        for request in requests:
            answer = next(self.answers)
            self.requests.append((request, answer))
            out.append([f"Image{answer + 1}"])
        return out


def _association_unit(task, row: int, spec: StudySpec, pixels: bool) -> StudyUnit:
    settings = AssociationSettings(**spec.association)
    if spec.split in CHAIN_CONFIGS:
        oracle = _ChainOracle(task, pixels, settings)
        run_chains([task], oracle, settings, progress=False)
        return StudyUnit(task.id, row, True, [_question(r, [a], spec) for r, a in oracle.requests])
    if spec.split == "deduction":
        image_1, image_2, gold = task.image_1, task.image_2, list(task.gold)
        questions = []
    else:
        selection = single_step_selection(task, settings, pixels=pixels)
        questions = [_question(selection, [task.answer], spec)]
        image_1, image_2 = task.query, task.positive
        shared = [o for o in task.options if o in set(task.query.labels) & set(task.positive.labels)]
        gold = protocol_gold(shared, [task.concept], settings)  # what the scorer counts, as for a model
    if spec.split == "deduction" or settings.deduction:
        request = deduction_request(
            task.id, 0, image_1, image_2, task.concept_kind, task.options, pixels=pixels, strategy=settings.strategy
        )
        gold_k = [k for k, o in enumerate(request.choices) if o in gold]
        questions.append(_question(request, gold_k, spec, rule=settings.deduction_rule))
    return StudyUnit(task.id, row, False, questions)


def _common_o_unit(task, example, spec: StudySpec) -> StudyUnit:
    questions = []
    for request, meta in task.requests(example):
        if spec.task == "perception":
            gold = [request.choices.index("yes" if meta["present"] else "no")]
        else:
            gold = sorted(request.choices.index(t) for t in meta["ground_truth"])
        questions.append(_question(request, gold, spec))
    return StudyUnit(example.id, example.row_index, False, questions)


def iter_units(split, data: str | os.PathLike, spec: StudySpec, rows, *, revision: str | None = None, pixels=True):
    """The units of ``rows`` of the opened ``split``, one at a time, with the requests a model would be sent
    (``pixels=False``: without decoding images, for scoring: request ids depend on image ids only)."""
    if spec.task == "association":
        for i in rows:
            yield _association_unit(split.get(i), i, spec, pixels)
        return
    task = eval_task(data, spec, revision)
    for i in rows:
        yield _common_o_unit(task, split.get(i, images=pixels), spec)


def study_units(data: str | os.PathLike, spec: StudySpec, *, revision: str | None = None, pixels: bool = True):
    """``(split, units)``: every unit of the split, in row order (see :func:`iter_units`)."""
    split = open_split(data, spec, revision)
    return split, list(iter_units(split, data, spec, range(len(split)), revision=revision, pixels=pixels))


__all__ = [
    "ASSOCIATION_CONFIGS",
    "TASKS",
    "StudyQuestion",
    "StudySpec",
    "StudyUnit",
    "eval_task",
    "iter_units",
    "open_split",
    "study_spec",
    "study_units",
]
