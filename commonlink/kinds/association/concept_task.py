"""Concept perception (Labyrinth of Links App. B, Table 4) as an eval task: the grid of four task complexities
under four prompt strategies, over any association source.

The rows are the *single-step* tasks of an association build (``commonlink chains`` over an OCL-style pickle, a
Pangea pickle, a labelled catalog, an HF dataset or a manifest) or release: an original (query) image and two
candidates, one sharing the task's concept with it -- the paper's "one query image and two candidate images with
one correct" (§5.1.1). Per row and strategy the model is asked

* a selection with the **Task Instruction** (the concept named) and one with the **Meta Instruction** (Table 3's
  question instruction, which explains the decision); each alone is *individual perception*;
* a **deduction** on the original image and the true positive (Table 3's deduction prompt) offering two
  concepts: the task's and one (seeded) that the two images do not share, so guessing succeeds 1 in 2 as the
  paper's Random row (0.25 = 0.5 x 0.5) implies. *Combination perception* (w/ DedPo) succeeds when the
  selection and the deduction both do.

Strategies (:mod:`commonlink.kinds.association.concept_prompts`): Normal; ComKnow (knowledge of the concepts in front);
One-shot (a solved example first, drawn seeded from another row of the same concept, its images included);
CoT (the example with its reasoning, and the answer asked on a last ``Answer:`` line). Results are laid out as
Table 4: success ratio per strategy x complexity (and, over several runs, per model); ``results.md`` holds it.
"""

from __future__ import annotations

import functools
import hashlib
import os
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from commonlink.errors import InputError
from commonlink.eval.backends.base import GenerationRequest, GenerationSettings
from commonlink.eval.outputs import evaluate_with
from commonlink.eval.report.tables import scored_lines
from commonlink.eval.table_cells import md_cell
from commonlink.eval.task import Task, TaskRun
from commonlink.fileio import atomic_write_json, atomic_write_text, write_jsonl
from commonlink.kinds.association.concept_prompts import (
    COMPLEXITIES,
    COMPLEXITY_TITLES,
    RANDOM_SUCCESS,
    STRATEGIES,
    STRATEGY_TITLES,
    concept_deduction_prompt,
    concept_selection_prompt,
)
from commonlink.kinds.association.loader import open_association
from commonlink.kinds.association.memory import image_name as memory_name
from commonlink.kinds.association.metrics import ratio_metrics
from commonlink.kinds.association.prompts import (
    parse_concepts,
    parse_selection,
    prompt_text,
)
from commonlink.kinds.association.task import DEDUCTION_RULES, deduction_correct
from commonlink.seeding import rng_for

PROTOCOL_VERSION = "concept-perception-v1"
_EXAMPLE_STRATEGIES = ("one-shot", "cot")


# ------------------------------------------------------------------------------------------ rows
@dataclass
class ConceptRow:
    """One row of the grid: the single-step task, its One-shot/CoT example task, the two concepts offered to the
    deduction (and the example's), and whether images are to be decoded (not for the baselines)."""

    task: object
    example: object | None
    offered: list[str]
    images: bool = True


class ConceptSplit:
    """The single-step tasks of an association source, each with its example and deduction options (seeded)."""

    def __init__(self, split, seed: int, needs_example: bool):
        self.split, self.seed, self.needs_example = split, seed, needs_example
        self.fingerprint, self.source_name, self.revision = split.fingerprint, split.source_name, split.revision
        self.by_concept: dict[str, list[int]] = defaultdict(list)
        for i in range(len(split)) if needs_example else ():
            self.by_concept[split.get(i).concept].append(i)
        if needs_example and len(split) < 2:
            raise InputError(
                "One-shot and CoT need a second task to draw the example from; the source has one.",
                "Build more single-step tasks (--single-steps), or run --strategy normal,comknow.",
            )

    def __len__(self) -> int:
        return len(self.split)

    def example_index(self, i: int, concept: str) -> int:
        """Another row of the same concept (any other row when the concept has one), seeded by row."""
        pool = [j for j in self.by_concept.get(concept, []) if j != i] or [j for j in range(len(self.split)) if j != i]
        return pool[int(rng_for(self.seed, "concept-perception", "example", i).integers(0, len(pool)))]

    def get(self, i: int, images: bool = True) -> ConceptRow:
        task = self.split.get(i)
        example = self.split.get(self.example_index(i, task.concept)) if self.needs_example else None
        return ConceptRow(task, example, offered_concepts(task, self.seed), images)


def offered_concepts(task, seed: int) -> list[str]:
    """The deduction's two options: the task's concept and one the original and the positive do not share."""
    shared = set(task.query.labels) & set(task.positive.labels)
    others = [o for o in task.options if o not in shared] or [o for o in task.options if o != task.concept]
    if not others:
        raise InputError(
            f"Task {task.id}: its build has one concept; the deduction needs a second to offer.",
            "Build tasks over two or more concepts.",
        )
    rng = rng_for(seed, "concept-perception", "offered", task.id)
    pair = [task.concept, others[int(rng.integers(0, len(others)))]]
    return pair if rng.integers(0, 2) else pair[::-1]


def _name(image) -> str:
    """An example image as the one-shot text calls it: "a chair" for a source name, the label description
    ("the image with a red circle") as it stands."""
    name = memory_name(image)
    return name if name.startswith("the image with") or not name[:1].isalpha() else f"a {name}"


# ------------------------------------------------------------------------------------------ requests
def _request_id(task_id: str, strategy: str, kind: str, segments, image_ids: Sequence[str]) -> str:
    digest = hashlib.sha256((prompt_text(segments) + "\0" + "\0".join(image_ids)).encode("utf-8")).hexdigest()[:16]
    return f"{task_id}/{strategy}/{kind}/{digest}"


def _request(
    task_id: str, strategy: str, kind: str, segments, images: Sequence, pixels: bool, choices
) -> GenerationRequest:
    return GenerationRequest(
        id=_request_id(task_id, strategy, kind, segments, [img.id for img in images]),
        images=[img.image if pixels else None for img in images],
        prompt=segments,
        choices=list(choices),
        multi_select=kind == "deduce",
    )


def row_requests(
    row: ConceptRow, strategies: Sequence[str], instructions: Sequence[str], deduction: bool
) -> list[tuple[GenerationRequest, dict]]:
    """Every request of one row: per strategy, a selection per instruction and (for w/ DedPo) one deduction."""
    task, example, kind = row.task, row.example, row.task.concept_kind
    base = {
        "id": task.id,
        "concept": task.concept,
        "answer": task.answer,
        "offered": row.offered,
        "gold": [o for o in row.offered if o in set(task.query.labels) & set(task.positive.labels)],
    }
    items = []
    for strategy in strategies:
        shot = strategy in _EXAMPLE_STRATEGIES
        sel_example = (
            {
                "names": [_name(example.query), *(_name(c) for c in example.candidates)],
                "answer": example.answer,
                "concept": example.concept,
            }
            if shot
            else None
        )
        for instruction in instructions:
            segments = concept_selection_prompt(instruction, strategy, kind, task.concept, task.options, sel_example)
            images = [*([example.query, *example.candidates] if shot else []), task.query, *task.candidates]
            items.append(
                (
                    _request(
                        task.id, strategy, f"select-{instruction}", segments, images, row.images, ["Image1", "Image2"]
                    ),
                    {**base, "strategy": strategy, "kind": "select", "instruction": instruction},
                )
            )
        if deduction:
            ded_example = (
                {"names": [_name(example.query), _name(example.positive)], "concept": example.concept} if shot else None
            )
            segments = concept_deduction_prompt(strategy, kind, row.offered, ded_example)
            images = [*([example.query, example.positive] if shot else []), task.query, task.positive]
            items.append(
                (
                    _request(task.id, strategy, "deduce", segments, images, row.images, row.offered),
                    {**base, "strategy": strategy, "kind": "deduce"},
                )
            )
    return items


def score_request(meta: dict, output: str, rule: str) -> dict:
    """One predictions.jsonl record: the request's facts, the raw output, its parse and whether it is right."""
    record = {**meta, "raw_output": output}
    if meta["kind"] == "select":
        choice = parse_selection(output) if isinstance(output, str) else None
        record.update(choice=choice, correct=choice == meta["answer"], unparseable=choice is None)
    else:
        named = parse_concepts(output, list(meta["offered"]), answer_only=True) if isinstance(output, str) else None
        record.update(deduction=named, correct=deduction_correct(named, meta["gold"], rule), unparseable=named is None)
    return record


# ------------------------------------------------------------------------------------------ Table 4
def grid_records(records: Sequence[dict], complexities: Sequence[str]) -> dict[str, list[dict]]:
    """Per strategy, one record per task with a ``<complexity>_correct`` field per complexity (ratio_metrics' input)."""
    by_key: dict[tuple[str, str], dict] = {}
    for r in records:
        entry = by_key.setdefault(
            (r["strategy"], r["id"]), {"concept": r["concept"], "failed": False, "unparseable": False}
        )
        part = f"select-{r['instruction']}" if r["kind"] == "select" else "deduce"
        entry[part] = bool(r["correct"])
        entry["unparseable"] |= bool(r["unparseable"])
    out: dict[str, list[dict]] = defaultdict(list)
    for (strategy, _), e in by_key.items():
        row = {"concept": e["concept"], "failed": e["failed"], "unparseable": e["unparseable"]}
        for c in complexities:
            instruction = c.split("+")[0]
            row[f"{c}_correct"] = e.get(f"select-{instruction}", False) and (
                e.get("deduce", False) if c.endswith("+ded") else True
            )
        out[strategy].append(row)
    return out


def table4(
    records: Sequence[dict], strategies: Sequence[str], complexities: Sequence[str], *, seed: int, n_boot: int
) -> dict:
    """``{strategy: {complexity: {"success_ratio", "se", "n"}}}``: the average over concepts of the per-concept
    success ratios (as the association success ratios), with bootstrap standard errors."""
    grouped = grid_records(records, complexities)
    table = {}
    for strategy in strategies:
        metrics = ratio_metrics(
            grouped.get(strategy, []), [f"{c}_correct" for c in complexities], seed=seed, n_boot=n_boot
        )
        per_concept = metrics["per_concept"]
        table[strategy] = {}
        for c in complexities:
            label = f"{c}_success_ratio"
            ses = [v[f"{label}_se"] for v in per_concept.values()]
            table[strategy][c] = {
                "success_ratio": metrics["summary"][f"avg_{label}"],
                "n": metrics["summary"]["n"],
                "se": (sum(s * s for s in ses) ** 0.5 / len(ses)) if ses else None,
            }
    return table


def render_table4(runs: Sequence[dict]) -> str:
    """Markdown in Table 4's layout: Model | Strategy | the complexities (Individual, then Combination perception),
    a Random row first; one block of strategy rows per run (model)."""
    complexities = list(runs[0]["concept_perception"]["complexities"]) if runs else list(COMPLEXITIES)
    individual = [c for c in complexities if "+" not in c]
    head = [
        "| Model | Strategy | " + " | ".join(COMPLEXITY_TITLES[c] for c in complexities) + " |",
        "|---|---|" + "---|" * len(complexities),
        "| | | "
        + " | ".join(("Individual Perception" if c in individual else "Combination Perception") for c in complexities)
        + " |",
        "| | Random | " + " | ".join(f"{RANDOM_SUCCESS[c]:g}" for c in complexities) + " |",
    ]
    lines = list(head)
    for run in runs:
        model = run.get("model") or "+".join(m.get("model", "?") for m in run.get("models", []))
        for k, (strategy, cells) in enumerate(run["metrics"]["table"].items()):
            values = []
            for c in complexities:
                v = cells[c]["success_ratio"]
                values.append("-" if v is None else f"{v:.3f}")
            first = f"| {md_cell(model)} |" if k == 0 else "| |"
            lines.append(f"{first} {STRATEGY_TITLES[strategy]} | " + " | ".join(values) + " |")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------ the task
def _choices(values: Sequence[str] | None, known: Sequence[str], what: str) -> list[str]:
    chosen = list(dict.fromkeys(values or known))
    unknown = [v for v in chosen if v not in known]
    if unknown or not chosen:
        raise InputError(
            f"--{what} {', '.join(unknown) or '(none)'}: not one of {', '.join(known)}.",
            f"Use any of: {', '.join(known)}.",
        )
    return [v for v in known if v in chosen]  # the paper's order


def write_concept_perception_run(run) -> None:
    """The files of a concept-perception run: predictions.jsonl, results.json and results.md (the paper's Table 4
    and how much was scored)."""
    write_jsonl(run.out_dir / f"predictions{run.suffix}.jsonl", run.outcome.records)
    atomic_write_json(run.out_dir / f"results{run.suffix}.json", run.results)
    table = render_table4([run.results]) + "\n".join(scored_lines(run.results)[1:]) + "\n"
    atomic_write_text(run.out_dir / f"results{run.suffix}.md", table)


class ConceptPerceptionTask(Task):
    """The concept-perception grid over the single-step tasks of an association source (see the module doc)."""

    writer = staticmethod(write_concept_perception_run)

    name = "concept_perception"
    description = "concept perception"
    writes_report = False  # the HTML report knows Common-O and association runs; results.md holds Table 4

    def __init__(
        self,
        data: str | os.PathLike,
        *,
        strategies: Sequence[str] | None = None,
        complexities: Sequence[str] | None = None,
        revision: str | None = None,
        deduction_rule: str = "all-shared",
        seed: int = 0,
        catalog_root: str | os.PathLike | None = None,
    ):
        self.data, self.revision, self.seed = data, revision, seed
        self.catalog_root = catalog_root  #: chain files: where their catalogs are now (``--catalog-root``)
        self.strategies = _choices(strategies, STRATEGIES, "strategy")
        self.complexities = _choices(complexities, COMPLEXITIES, "complexity")
        if deduction_rule not in DEDUCTION_RULES:
            raise InputError(
                f"--deduction-rule {deduction_rule!r} is not a rule.", f"Use one of: {', '.join(DEDUCTION_RULES)}."
            )
        self.deduction_rule = deduction_rule
        self.instructions = [i for i in ("task", "meta") if any(c.split("+")[0] == i for c in self.complexities)]
        self.deduction = any(c.endswith("+ded") for c in self.complexities)
        self.images_per_request = 6 if set(self.strategies) & set(_EXAMPLE_STRATEGIES) else 3

    def open(self) -> ConceptSplit:
        return ConceptSplit(
            open_association(self.data, "single_step", revision=self.revision, catalog_root=self.catalog_root),
            self.seed,
            needs_example=bool(set(self.strategies) & set(_EXAMPLE_STRATEGIES)),
        )

    def check_backends(self, infos) -> None:
        if any(i.model == "none" for i in infos):
            raise InputError(
                "The 'none' baseline has no meaning for concept perception.",
                "Use --model random for a chance baseline.",
            )

    def key_parts(self, dataset, info, settings: GenerationSettings) -> dict:
        return self.common_key_parts(
            dataset,
            info,
            settings,
            task=self.name,
            protocol=PROTOCOL_VERSION,
            strategies=self.strategies,
            complexities=self.complexities,
            seed=self.seed,
        )

    def requests(self, row: ConceptRow) -> list[tuple[GenerationRequest, dict]]:
        return row_requests(row, self.strategies, self.instructions, self.deduction)

    def score(self, meta: dict, output: str) -> dict:
        return score_request(meta, output, self.deduction_rule)

    def results(self, run: TaskRun, outcome) -> dict:
        split = run.dataset
        return {
            "protocol": PROTOCOL_VERSION,
            "concept_perception": {
                "strategies": self.strategies,
                "complexities": self.complexities,
                "deduction_rule": self.deduction_rule,
                "seed": self.seed,
                "random": {c: RANDOM_SUCCESS[c] for c in self.complexities},
            },
            "dataset": {
                "source": split.source_name,
                "config": "single_step",
                "revision": split.revision,
                "fingerprint": split.fingerprint,
                "tasks_in_config": len(split),
                "tasks_run": len(run.indices),
            },
            "metrics": {
                "table": table4(outcome.records, self.strategies, self.complexities, seed=run.seed, n_boot=run.n_boot)
            },
            "parsing": {
                "answers": len(outcome.records),
                "unparseable": sum(bool(r.get("unparseable")) for r in outcome.records),
            },
            **run.outcome_fields(outcome),
        }


def evaluate_concept_perception(
    data: str | os.PathLike,
    model: str = "random",
    backend: str = "transformers",
    out_dir: str | os.PathLike | None = None,
    *,
    seed: int = 0,
    **options,
) -> dict:
    """Run the concept-perception grid for one model (``options``: :class:`ConceptPerceptionTask`'s keyword
    arguments ``strategies``, ``complexities``, ``revision``, ``deduction_rule``, ``catalog_root`` (where the
    catalogs of chain files are now), and :class:`RunOptions` fields; ``seed`` seeds both)."""
    return evaluate_with(
        functools.partial(ConceptPerceptionTask, data, seed=seed),
        options,
        models=[model],
        backend=backend,
        out_dir=out_dir,
        seed=seed,
    )
