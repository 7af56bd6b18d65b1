"""The association protocol (Labyrinth of Links §3–5, appendix A.2): single-step, deduction and chains, as one
eval task (:class:`AssociationTask`, run by :func:`commonlink.eval.outputs.evaluate`) that drives its own
episode loop over the evaluator's cached backends.

Two protocols (``AssociationSettings.protocol``; docs/eval.md "Association protocols"): ``paper`` (default), what
the authors' harness did, and ``strict``, this project's stricter choices. How a chain is run (synchronous or
asynchronous):

* warm-up: under ``paper`` 3 steps per concept (asynchronous: 3 on concept 1, then 3 on concept 2), the
  selection forced, the memory taken from the model's own deduction, then the scored chain restarts from a
  fresh concept-1 query in the order 1,1,1,b,2,2,2,b (:func:`.association_chains.paper_schedule`); under
  ``strict`` the steps marked warm-up in the chain (default 3) are answered correctly by force with no model
  call, the memory learns the gold concept of the step, and scoring starts at the next step;
* every scored step costs at most two model requests: a *selection* (which candidate shares the concept with
  the query, with the memory context in the prompt) and, after a correct selection, a *deduction* (which
  concepts the query and the selected image share, no memory); the deduced concepts go into the memory, so a
  wrong deduction does not end the chain but corrupts what later steps see;
* the chain ends at the first wrong (or unparseable) selection, or after ``max_steps`` scored steps; its
  length is the number of correct scored steps.

Chains advance in *lockstep*: the selections of every active chain at the same step form one batch, and so do
the deductions, so a GPU stays busy. Each chain's prompts depend only on its own history, so the results equal
running the chains one by one whenever the backend's outputs do not depend on the batch (greedy decoding;
see ``BackendInfo.batch_invariant``).

Every answer goes through the prediction cache (keyed by the run settings and the full prompt text and image
ids of the request), so a killed run, rerun, replays the cached answers and continues where it stopped.

With several models (``--moe``), each request goes to every model and the answers are combined: under ``paper``
by the harness's word vote (the most frequent word of all answers, a tie drawn at random, seeded per request);
under ``strict`` the candidate most models picked (a tie goes to the first model's pick), and the concepts more
than half of the models named (none: the first parseable model's answer).

Modules: :mod:`.association_requests` (settings, requests, the asker, majority votes, deduction rules),
:mod:`.association_chains` (the lockstep episode loop of chains); this one runs single-step and deduction
tasks, a config a group at a time, and is the eval task; its names stay importable from here.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from commonlink import constants
from commonlink.errors import InputError
from commonlink.eval.backends.base import GenerationRequest, GenerationSettings
from commonlink.eval.cache import CACHE_FILENAME, PredictionCache
from commonlink.eval.estimate import RequestEstimate
from commonlink.eval.evaluator import RunOptions
from commonlink.eval.outputs import evaluate
from commonlink.eval.results import lmms_eval_metrics, timing, write_lmms_eval_files
from commonlink.eval.task import Task, TaskRun
from commonlink.fileio import atomic_write, atomic_write_json, atomic_write_text
from commonlink.kinds.association.loader import open_association
from commonlink.kinds.association.metrics import chain_metrics, ratio_metrics
from commonlink.kinds.association.requests import (
    ASSOCIATION_DEDUCTION_RULES,
    DEDUCTION_RULES,
    HARNESS_RULE,
    PROTOCOLS,
    Asker,
    AssociationSettings,
    deduction_correct,
    deduction_request,
    image_name,
    majority_concepts,
    majority_selection,
    protocol_gold,
    read_deduction,
    read_selection,
    selection_request,
)
from commonlink.kinds.association.tables import render_association_table
from commonlink.kinds.association.task_chains import chain_summary, run_chains

PROTOCOL_VERSION = "association-v1"
CHAIN_CONFIGS = ("synchronous", "asynchronous")
#: characters of an association prompt, for the estimate of what a run sends (the memory grows along a chain)
PROMPT_CHARS = 600


# ------------------------------------------------------------------------------------------ single step, deduction
def single_step_selection(task, settings: AssociationSettings, *, pixels: bool = True) -> GenerationRequest:
    """The selection request of a single-step task: the task's fixed, correct memory in the prompt, then the
    query and the two candidates (also what the lmms-eval and VLMEvalKit exports show the model)."""
    memory = settings.new_memory(task.concept_kind)
    names = [image_name(m, task.options) for m in task.memory]
    # The fixed memory links consecutive memory examples through their shared concept.
    links = [(a, task.memory_concept, b) for a, b in zip(names, names[1:])] or [
        (n, task.memory_concept, n) for n in names
    ]
    memory.seed_fixed(links)
    return selection_request(
        task.id,
        0,
        task.query,
        task.candidates,
        task.concept_kind,
        memory,
        pixels=pixels,
        strategy=settings.strategy,
        options=task.options,
        image_size=settings.image_size,
    )


def _deduction(task, image_1, image_2, asker: Asker, settings: AssociationSettings) -> GenerationRequest:
    """The deduction request of a single-step or deduction task (one step, 0) on two of its images."""
    return deduction_request(
        task.id,
        0,
        image_1,
        image_2,
        task.concept_kind,
        task.options,
        pixels=asker.pixels,
        strategy=settings.strategy,
        image_size=settings.image_size,
    )


def run_single_step(tasks: list, asker: Asker, settings: AssociationSettings) -> list[dict]:
    """Each task: a selection with the task's fixed correct memory, then a deduction on (query, positive)."""
    selection_requests, deduction_requests = [], []
    for task in tasks:
        selection_requests.append(single_step_selection(task, settings, pixels=asker.pixels))
        deduction_requests.append(_deduction(task, task.query, task.positive, asker, settings))
    selections = asker.ask(selection_requests)
    deductions = asker.ask(deduction_requests) if settings.deduction else [[None] for _ in tasks]
    records = []
    for task, sel, ded, sel_request, ded_request in zip(
        tasks, selections, deductions, selection_requests, deduction_requests
    ):
        choice, correct, _ = read_selection(sel, task.answer, settings, seed=asker.seed, request_id=sel_request.id)
        shared = [o for o in task.options if o in set(task.query.labels) & set(task.positive.labels)]
        gold = protocol_gold(shared, [task.concept], settings)
        concepts, ok = read_deduction(ded, gold, task.options, settings, seed=asker.seed, request_id=ded_request.id)
        records.append(
            {
                "id": task.id,
                "concept": task.concept,
                "candidates": [c.id for c in task.candidates],
                "answer": task.answer,
                "choice": choice,
                "correct": correct,
                "failed": all(o is None for o in sel),
                "unparseable": choice is None and not correct and not all(o is None for o in sel),
                "deduction": concepts,
                "deduction_gold": gold,
                "deduction_correct": ok,
                "outputs": sel,
                "deduction_outputs": ded,
            }
        )
    return records


def run_deduction(tasks: list, asker: Asker, settings: AssociationSettings) -> list[dict]:
    requests = [_deduction(t, t.image_1, t.image_2, asker, settings) for t in tasks]
    records = []
    for task, request, out in zip(tasks, requests, asker.ask(requests)):
        # a deduction task has no chain concepts of its own: its gold is every option both images carry
        concepts, ok = read_deduction(out, task.gold, task.options, settings, seed=asker.seed, request_id=request.id)
        records.append(
            {
                "id": task.id,
                "concept": task.concept,
                "deduction": concepts,
                "deduction_gold": task.gold,
                "deduction_correct": ok,
                "failed": all(o is None for o in out),
                "unparseable": concepts is None and not all(o is None for o in out),
                "outputs": out,
            }
        )
    return records


# ------------------------------------------------------------------------------------------ entry point
#: Images in the largest request of the protocol: a selection shows the query and two candidates.
IMAGES_PER_ASSOCIATION_REQUEST = 3
#: lmms-eval task name of the single-step config (the one a harness can score sample by sample).
LMMS_TASK = "association_single_step"


@dataclass
class AssociationOutcome:
    """What a run of one config produced: chain summaries (chains) or per-task records (the others), and the
    request counts of the :class:`Asker` that ran it."""

    summaries: list[dict] = field(default_factory=list)
    records: list[dict] = field(default_factory=list)
    asker: Asker | None = None


def run_config(
    split,
    indices: list[int],
    config: str,
    asker: Asker,
    settings: AssociationSettings,
    *,
    group_size: int,
    log_path: Path | None,
    progress: bool,
) -> AssociationOutcome:
    """Run the tasks of one config a group at a time (chains in lockstep within a group), streaming the
    per-step log to ``log_path``, so memory stays flat however many chains a config has."""
    outcome = AssociationOutcome(asker=asker)
    chains = config in CHAIN_CONFIGS
    with contextlib.ExitStack() as stack:
        log_file = stack.enter_context(atomic_write(log_path)) if log_path is not None else None
        for first in range(0, len(indices), group_size):
            tasks = [split.get(i) for i in indices[first : first + group_size]]
            if chains:
                chain_runs = run_chains(tasks, asker, settings, progress=progress)
                outcome.summaries.extend(chain_summary(r) for r in chain_runs)
                entries = [e for r in chain_runs for e in r.log]
            elif config == "single_step":
                entries = run_single_step(tasks, asker, settings)
                outcome.records.extend(entries)
            else:
                entries = run_deduction(tasks, asker, settings)
                outcome.records.extend(entries)
            if log_file is not None:
                log_file.write("".join(json.dumps(e, ensure_ascii=False) + "\n" for e in entries))
    return outcome


def config_metrics(
    config: str, outcome: AssociationOutcome, settings: AssociationSettings, *, seed: int, n_boot: int
) -> tuple[dict, int]:
    """(metrics, scored steps) of a finished run: chain lengths for chains, success ratios otherwise."""
    if config in CHAIN_CONFIGS:
        return chain_metrics(outcome.summaries, seed=seed, n_boot=n_boot), sum(r["scored"] for r in outcome.summaries)
    if config == "single_step":  # without the deduction step there is no deduction ratio (not 0%)
        fields = ["correct", "deduction_correct"] if settings.deduction else ["correct"]
    else:
        fields = ["deduction_correct"]
    return ratio_metrics(outcome.records, fields, seed=seed, n_boot=n_boot), len(outcome.records)


def write_association_run(run) -> None:
    """The files of an association run: results.json, results.md, steps.jsonl or predictions.jsonl."""
    write_association_outputs(run.out_dir, run.results, run.outcome)


class AssociationTask(Task):
    """One association config (single_step, deduction, synchronous, asynchronous) as an eval task.

    Chains are episodes: a step's prompt holds the memory built from the previous answers, so this task drives
    its own loop (:func:`run_config`: groups of tasks, chains in lockstep) over the evaluator's cached backends
    instead of the row loop; several models (``--moe``) vote on every answer."""

    writer = staticmethod(write_association_run)

    images_per_request = IMAGES_PER_ASSOCIATION_REQUEST
    several_models = True
    shardable = False

    def __init__(
        self,
        data: str | os.PathLike,
        config: str,
        *,
        settings: AssociationSettings | None = None,
        revision: str | None = None,
        group_size: int = 512,
        catalog_root: str | os.PathLike | None = None,
    ):
        if group_size < 1:
            raise InputError(f"--group-size {group_size} must be at least 1.")
        self.data, self.config, self.revision, self.group_size = data, config, revision, group_size
        self.catalog_root = catalog_root  #: chain files: where their catalogs are now (``--catalog-root``)
        self.settings = settings or AssociationSettings()
        self.name = self.description = f"association/{config}"

    def default_settings(self, seed: int) -> GenerationSettings:
        return GenerationSettings(seed=seed, max_new_tokens=64)

    def open(self):
        return open_association(self.data, self.config, revision=self.revision, catalog_root=self.catalog_root)

    def check_backends(self, infos) -> None:
        if any(i.model == "none" for i in infos):
            raise InputError(
                "The 'none' baseline has no meaning for association tasks.", "Use --model random for a chance baseline."
            )
        if len(infos) > 1 and not self.settings.paper and self.settings.deduction_rule == HARNESS_RULE:
            raise InputError(
                "--deduction-rule harness reads one answer text; the strict protocol's vote of several models gives "
                "parsed concepts, not a text.",
                "Use --protocol paper (the harness's word vote) or another --deduction-rule.",
            )

    def estimate(self, dataset, indices: list[int], settings: GenerationSettings, models: int) -> RequestEstimate:
        """An upper bound for chains (every step up to --max-steps answered, warm-up steps sent no request), exact
        counts for single-step and deduction: a selection sends the query and two candidates, a deduction two
        images; prompts at about :data:`PROMPT_CHARS` characters (the memory grows along a chain)."""
        deduce = self.settings.deduction and self.config != "deduction"
        if self.config in CHAIN_CONFIGS:
            steps = sum(min(dataset.steps_of(i), self.settings.max_steps) for i in indices)
        else:
            steps = len(indices)
        selections = 0 if self.config == "deduction" else steps
        deductions = steps if (deduce or self.config == "deduction") else 0
        requests = (selections + deductions) * models
        images = (3 * selections + 2 * deductions) * models
        return RequestEstimate(
            requests, images, requests * PROMPT_CHARS, settings.max_new_tokens, bound=self.config in CHAIN_CONFIGS
        )

    def limit_rows(self, dataset, indices: list[int], limit: int) -> list[int]:
        """``--limit`` draws across the concepts (pairs): the rows are taken in turn from each concept's rows
        (the files hold them concept by concept, so the first rows would all be of one), in row order."""
        by_group: dict[str, list[int]] = {}
        for i in indices:
            by_group.setdefault(dataset.group_of(i), []).append(i)
        chosen: list[int] = []
        for depth in range(max((len(v) for v in by_group.values()), default=0)):
            chosen += [rows[depth] for rows in by_group.values() if depth < len(rows)][: limit - len(chosen)]
            if len(chosen) >= limit:
                break
        kept = set(chosen)
        self.limit_note = (
            f"--limit {limit}: {len(chosen)} of {len(indices)} tasks drawn across {len(by_group)} concept(s), in "
            f"turn ({', '.join(f'{g}: {sum(r in kept for r in v)}' for g, v in by_group.items())})"
        )
        return sorted(chosen)

    def key_parts(self, dataset, info, settings: GenerationSettings) -> dict:
        return self.common_key_parts(
            dataset,
            info,
            settings,
            task=f"association/{self.config}",
            protocol=PROTOCOL_VERSION,
            # the pixels the model sees: resized images are other requests (a strict run keeps its old keys)
            **({"image_size": self.settings.image_size} if self.settings.image_size else {}),
        )

    def open_cache(self, out_dir, run_keys, shard, *, overwrite: bool) -> PredictionCache:
        # One cache file for every model of a --moe run (each under its own run key), so no other-run check here.
        if out_dir is not None:
            return PredictionCache(Path(out_dir) / CACHE_FILENAME)
        return PredictionCache(constants.COMMONLINK_HOME / "predictions" / f"assoc-{run_keys[0]}.jsonl")

    def run(self, run: TaskRun) -> AssociationOutcome:
        asker = Asker(run.backends, run.cache, run.settings, run.run_keys, run.batch_size)
        log_name = "steps.jsonl" if self.config in CHAIN_CONFIGS else "predictions.jsonl"
        return run_config(
            run.dataset,
            run.indices,
            self.config,
            asker,
            self.settings,
            group_size=self.group_size,
            log_path=run.out_dir / log_name if run.out_dir is not None else None,
            progress=run.progress,
        )

    def results(self, run: TaskRun, outcome: AssociationOutcome) -> dict:
        split, asker = run.dataset, outcome.asker
        metrics, scored_steps = config_metrics(self.config, outcome, self.settings, seed=run.seed, n_boot=run.n_boot)
        return {
            "protocol": PROTOCOL_VERSION,
            "association_protocol": self.settings.protocol,
            "protocol_rules": self.settings.rules(),
            "association": asdict(self.settings),
            "dataset": {
                "source": split.source_name,
                "config": self.config,
                "revision": split.revision,
                "fingerprint": split.fingerprint,
                "tasks_in_config": len(split),
                "tasks_run": len(run.indices),
                **({"limit": self.limit_note} if getattr(self, "limit_note", None) else {}),
            },
            "metrics": metrics,
            "requests": {
                "total": asker.requests_sent,
                "scored_steps": scored_steps,
                "per_scored_step": round(asker.requests_sent / scored_steps, 4) if scored_steps else None,
                "generated": asker.generated,
                "from_cache": asker.cached,
                "failed": asker.failures,
            },
            "timing": timing(run.wall_s, run.generate_s, from_cache=asker.cached, generated=asker.generated),
        }


def evaluate_association(
    data: str | os.PathLike,
    config: str,
    models: Sequence[str] = ("random",),
    backend: str = "transformers",
    out_dir: str | os.PathLike | None = None,
    *,
    settings: AssociationSettings | None = None,
    generation: GenerationSettings | None = None,
    revision: str | None = None,
    group_size: int = 512,
    catalog_root: str | os.PathLike | None = None,
    **run_options,
) -> dict:
    """Score one or more models (majority vote when several) on one association config; returns results
    (:class:`AssociationTask` run by :func:`commonlink.eval.outputs.evaluate`; ``run_options``: its
    :class:`RunOptions` fields, e.g. ``batch_size``, ``limit``, ``backend_options``, ``backend_instances``,
    ``seed``, ``n_boot``, ``progress``, ``report``).

    ``data`` is an association release folder, a Hub repo id, or the chain files written by
    ``commonlink chains`` (``catalog_root``: where their catalogs are now). Outputs (when ``out_dir`` is given):
    ``results.json``, ``steps.jsonl`` (per-step log with memory snapshots) or ``predictions.jsonl``,
    ``results.md``; rerunning continues from the cache there.
    ``group_size`` tasks are loaded and run together (the chains of a group advance in lockstep): it bounds
    memory and is the most requests one step of chains can send at once. With ``report`` (the default),
    ``report.html`` is written there too.
    """
    task = AssociationTask(
        data, config, settings=settings, revision=revision, group_size=group_size, catalog_root=catalog_root
    )
    return evaluate(
        task, RunOptions(models=list(models), backend=backend, out_dir=out_dir, settings=generation, **run_options)
    )


def write_association_outputs(out: Path, results: dict, outcome: AssociationOutcome) -> None:
    """results.json and results.md (the per-step log is streamed during the run); for single-step, the run in
    lmms-eval's convention as well (doc_id = task number, filtered = the parsed choice)."""
    atomic_write_json(out / "results.json", results)
    atomic_write_text(out / "results.md", render_association_table(results))
    if results["dataset"]["config"] == "single_step":
        summary = results["metrics"]["summary"]
        metrics = lmms_eval_metrics(
            summary, {"acc": "avg_success_ratio", "deduction_acc": "avg_deduction_success_ratio"}
        )
        samples = (
            {
                "doc_id": n,
                "doc": {"id": r["id"], "concept": r["concept"], "candidates": r["candidates"]},
                "target": f"Image{r['answer'] + 1}",
                "prompt": r["id"],
                "response": (r["outputs"] or [None])[0],
                "filtered": None if r["choice"] is None else f"Image{r['choice'] + 1}",
                "scores": {"acc": float(r["correct"])},
            }
            for n, r in enumerate(outcome.records)
        )
        write_lmms_eval_files(out, LMMS_TASK, results, metrics, samples)


__all__ = [
    "ASSOCIATION_DEDUCTION_RULES",
    "CHAIN_CONFIGS",
    "DEDUCTION_RULES",
    "PROTOCOLS",
    "IMAGES_PER_ASSOCIATION_REQUEST",
    "LMMS_TASK",
    "PROTOCOL_VERSION",
    "Asker",
    "AssociationOutcome",
    "AssociationSettings",
    "AssociationTask",
    "chain_summary",
    "config_metrics",
    "deduction_correct",
    "deduction_request",
    "evaluate_association",
    "image_name",
    "majority_concepts",
    "majority_selection",
    "run_chains",
    "run_config",
    "run_deduction",
    "run_single_step",
    "selection_request",
    "single_step_selection",
    "write_association_outputs",
]
