"""The association protocol (Labyrinth of Links §3–5, appendix A.2): single-step, deduction and chains.

How a chain is run (synchronous or asynchronous):

* warm-up steps (marked in the chain, default 3) are answered correctly by force: no model call, the memory
  learns the gold concept of the step;
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

With several models (``--moe``), each request goes to every model and the majority answer is taken: the
candidate most models picked (a tie goes to the first model's pick), and the concepts more than half of the
models named (none: the first parseable model's answer).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from commonlink import constants
from commonlink.errors import InputError
from commonlink.eval.association_memory import CHAINM_WINDOW, MEMORY_KINDS, MemoryBase
from commonlink.eval.association_memory import image_name as memory_name
from commonlink.eval.association_prompts import (
    deduction_prompt,
    parse_concepts,
    parse_selection,
    prompt_text,
    selection_prompt,
)
from commonlink.eval.backends import (
    Backend,
    GenerationRequest,
    GenerationSettings,
    RequestFailure,
)
from commonlink.eval.cache import (
    CACHE_FILENAME,
    CachedGenerator,
    PredictionCache,
    run_key,
)
from commonlink.eval.report.html import report_beside_run
from commonlink.eval.metrics import N_BOOTSTRAP, chain_metrics, ratio_metrics
from commonlink.eval.report.tables import render_association_table
from commonlink.eval.results import (
    lmms_eval_metrics,
    results_header,
    timing,
    write_lmms_eval_files,
)
from commonlink.eval.runner import open_backends
from commonlink.fileio import atomic_write, atomic_write_json, atomic_write_text
from commonlink.loaders.association import open_association
from commonlink.progress import make_progress

PROTOCOL_VERSION = "association-v1"
CHAIN_CONFIGS = ("synchronous", "asynchronous")
SELECTION_CHOICES = ["Image1", "Image2"]


@dataclass
class AssociationSettings:
    """Protocol settings (all recorded in results.json and in the cache key)."""

    memory: str = "structm"  #: nom | structm | nlm | chainm
    repetition: float = 1.0  #: memory weight added when an entry is seen again
    forgetting: float = 0.2  #: memory weight removed from every other entry each step
    max_steps: int = 500  #: scored steps after which a chain stops (counted as a full-length chain)
    deduction: bool = True  #: run the deduction step after each correct selection (chains)
    chainm_window: int = CHAINM_WINDOW  #: ChainM subchains kept in memory (the harness: 5; 0 = all)

    def __post_init__(self) -> None:
        if self.memory not in MEMORY_KINDS:
            raise InputError(f"--memory {self.memory!r} is not a memory strategy.", f"Use one of: {', '.join(MEMORY_KINDS)}.")
        if self.max_steps < 1:
            raise InputError("--max-steps must be at least 1.")


# ------------------------------------------------------------------------------------------ naming images
def image_name(image, options: Sequence[str]) -> str:
    """How the memory names an image: its source name (OCL object such as "sandwich", Pangea action phrase),
    else "unnamed image" (association_memory.image_name). ``options`` is kept for callers' signatures."""
    return memory_name(image)


def deduction_correct(predicted: list[str] | None, gold: Sequence[str]) -> bool:
    """A deduction is correct when it names at least one concept and every concept it names is truly shared."""
    return bool(predicted) and set(predicted) <= set(gold)


# ------------------------------------------------------------------------------------------ model calls
class Asker:
    """Sends batches of requests to one or more models, each behind the prediction cache (one
    :class:`CachedGenerator` per model); several models are combined by majority vote by the caller."""

    def __init__(self, backends: list[Backend], cache: PredictionCache, settings: GenerationSettings, run_keys: list[str], batch_size: int):
        self.generators = [CachedGenerator(b, cache, settings, run, batch_size) for b, run in zip(backends, run_keys)]
        self.requests_sent = 0  #: requests asked of the protocol (one per request, whatever the number of models)

    @property
    def generated(self) -> int:
        return sum(g.generated for g in self.generators)

    @property
    def cached(self) -> int:
        return sum(g.cached for g in self.generators)

    @property
    def failures(self) -> int:
        return sum(g.failures for g in self.generators)

    def ask(self, requests: list[GenerationRequest]) -> list[list[str | None]]:
        """Per request, the output of each model (``None`` where the backend failed on it)."""
        self.requests_sent += len(requests)
        per_model = [generator.answer(requests) for generator in self.generators]
        return [[None if isinstance(out[i], RequestFailure) else out[i] for out in per_model] for i in range(len(requests))]


def majority_selection(votes: list[int | None]) -> int | None:
    counted = Counter(v for v in votes if v is not None)
    if not counted:
        return None
    best = max(counted.values())
    tied = {v for v, n in counted.items() if n == best}
    return next(v for v in votes if v in tied)  # first model's pick among the tied


def majority_concepts(votes: list[list[str] | None], options: Sequence[str]) -> list[str] | None:
    parsed = [v for v in votes if v is not None]
    if not parsed:
        return None
    counts = Counter(c for v in parsed for c in set(v))
    winners = [o for o in options if counts[o] * 2 > len(parsed)]
    return winners or parsed[0]


def _request_id(kind: str, task_id: str, step: int, segments, images) -> str:
    """Identify a request by task, step and its exact content (prompt text with memory, image ids)."""
    digest = hashlib.sha256((prompt_text(segments) + "\0" + "\0".join(i.id for i in images)).encode("utf-8")).hexdigest()[:16]
    return f"{task_id}/{step}/{kind}/{digest}"


def selection_request(task_id: str, step: int, query, candidates, concept_kind: str, memory: MemoryBase) -> GenerationRequest:
    segments = selection_prompt(concept_kind, memory.render())
    images = [query, *candidates]
    return GenerationRequest(
        id=_request_id("select", task_id, step, segments, images),
        images=[img.image for img in images],
        prompt=segments,
        choices=list(SELECTION_CHOICES),
        multi_select=False,
    )


def deduction_request(task_id: str, step: int, image_1, image_2, concept_kind: str, options: list[str]) -> GenerationRequest:
    segments = deduction_prompt(concept_kind, options)
    return GenerationRequest(
        id=_request_id("deduce", task_id, step, segments, [image_1, image_2]),
        images=[image_1.image, image_2.image],
        prompt=segments,
        choices=list(options),
        multi_select=True,
    )


# ------------------------------------------------------------------------------------------ chains
@dataclass
class _ChainRun:
    chain: object
    memory: MemoryBase
    t: int = 0  #: index of the next step
    length: int = 0  #: correct scored steps so far
    scored: int = 0
    deductions: int = 0
    deductions_correct: int = 0
    ended: str = ""  #: "" while active; "wrong", "unparseable", "failed", "max_steps", "exhausted"
    log: list[dict] = field(default_factory=list)


def _remember(run: _ChainRun, step, concepts: list[str]) -> None:
    """Teach the chain's memory that the step's query and positive share ``concepts``."""
    options = run.chain.options
    run.memory.update(image_name(step.query, options), image_name(step.positive, options), concepts)


def _skip_warmup(run: _ChainRun) -> None:
    """Apply the forced-correct warm-up steps at the current position (no model call)."""
    chain = run.chain
    while run.t < len(chain.steps) and chain.steps[run.t].warmup:
        step = chain.steps[run.t]
        # The builder guarantees the positive carries the step's concept, so that is the correct deduction.
        _remember(run, step, [step.concept])
        run.log.append({"chain": chain.id, "step": step.index, "warmup": True, "concept": step.concept,
                        "candidates": [c.id for c in step.candidates], "answer": step.answer, "choice": step.answer,
                        "correct": True, "deduction": [step.concept], "memory": run.memory.snapshot()})
        run.t += 1


def _start_chain(chain, settings: AssociationSettings) -> _ChainRun:
    """A fresh run of ``chain`` with an empty memory, past its warm-up steps."""
    memory = MemoryBase(settings.memory, settings.repetition, settings.forgetting, concept_kind=chain.concept_kind,
                        chainm_window=settings.chainm_window)
    run = _ChainRun(chain, memory)
    _skip_warmup(run)
    if run.t >= len(chain.steps):
        run.ended = "exhausted"
    return run


def _judge_selection(run: _ChainRun, step, outputs: list[str | None]) -> dict:
    """Score one step's selection: log it, and end the chain unless the majority picked the right candidate."""
    choice = majority_selection([parse_selection(o) if o is not None else None for o in outputs])
    run.scored += 1
    entry = {"chain": run.chain.id, "step": step.index, "warmup": False, "concept": step.concept, "bridge": step.bridge,
             "candidates": [c.id for c in step.candidates], "answer": step.answer, "choice": choice,
             "correct": choice == step.answer, "outputs": outputs}
    run.log.append(entry)
    if all(o is None for o in outputs):
        run.ended = "failed"
    elif choice is None:
        run.ended = "unparseable"
    elif choice != step.answer:
        run.ended = "wrong"
    else:
        run.length += 1
    return entry


def _select(active: list[_ChainRun], steps: list, asker: Asker, settings: AssociationSettings) -> list[tuple[_ChainRun, object, dict]]:
    """Ask every active chain's selection in one batch; the correct ones that await a deduction are returned
    (with deduction off, the memory learns the gold concept at once)."""
    selections = asker.ask([
        selection_request(r.chain.id, s.index, s.query, s.candidates, r.chain.concept_kind, r.memory) for r, s in zip(active, steps)
    ])
    to_deduce = []
    for run, step, outputs in zip(active, steps, selections):
        entry = _judge_selection(run, step, outputs)
        if run.ended:
            continue
        if settings.deduction:
            to_deduce.append((run, step, entry))
        else:
            _remember(run, step, [step.concept])
            entry["memory"] = run.memory.snapshot()
    return to_deduce


def _deduce(to_deduce: list[tuple[_ChainRun, object, dict]], asker: Asker) -> None:
    """Ask the deductions in one batch; the deduced concepts (right or wrong) go into each chain's memory."""
    outputs_list = asker.ask([
        deduction_request(r.chain.id, s.index, s.query, s.positive, r.chain.concept_kind, r.chain.options) for r, s, _ in to_deduce
    ])
    for (run, step, entry), outputs in zip(to_deduce, outputs_list):
        options = run.chain.options
        concepts = majority_concepts([parse_concepts(o, options) if o is not None else None for o in outputs], options)
        ok = deduction_correct(concepts, step.gold)
        run.deductions += 1
        run.deductions_correct += ok
        _remember(run, step, concepts or [])
        entry.update({"deduction": concepts, "deduction_gold": step.gold, "deduction_correct": ok,
                      "deduction_outputs": outputs, "memory": run.memory.snapshot()})


def _advance(run: _ChainRun, settings: AssociationSettings) -> None:
    """Move a chain that is still going to its next scored step, ending it at ``max_steps`` or its last step."""
    if run.ended:
        return
    run.t += 1
    _skip_warmup(run)
    if run.scored >= settings.max_steps:
        run.ended = "max_steps"
    elif run.t >= len(run.chain.steps):
        run.ended = "exhausted"


def _run_step(active: list[_ChainRun], asker: Asker, settings: AssociationSettings) -> None:
    """One lockstep step of every active chain: a batch of selections, then a batch of deductions."""
    steps = [r.chain.steps[r.t] for r in active]
    to_deduce = _select(active, steps, asker, settings)
    if to_deduce:
        _deduce(to_deduce, asker)
    for run in active:
        _advance(run, settings)


def run_chains(chains: list, asker: Asker, settings: AssociationSettings, *, show_progress: bool = True) -> list[_ChainRun]:
    """Run chains in lockstep (one batch per step for selections, one for deductions)."""
    runs = [_start_chain(chain, settings) for chain in chains]
    with make_progress("steps", disable=not show_progress) as progress:
        task = progress.add_task("association chains (active)", total=len(runs))
        while active := [r for r in runs if not r.ended]:
            progress.update(task, completed=len(runs) - len(active),
                            description=f"chains: {len(active)} active, step {min(r.scored for r in active) + 1}")
            _run_step(active, asker, settings)
        progress.update(task, completed=len(runs))
    return runs


def chain_summary(run: _ChainRun) -> dict:
    """What the metrics need of a finished chain (the chain itself and its log can then be dropped)."""
    return {"chain": run.chain.id, "group": "+".join(run.chain.concepts), "length": run.length, "scored": run.scored,
            "deductions": run.deductions, "deductions_correct": run.deductions_correct, "ended": run.ended}


# ------------------------------------------------------------------------------------------ single step, deduction
def single_step_selection(task, settings: AssociationSettings) -> GenerationRequest:
    """The selection request of a single-step task: the task's fixed, correct memory in the prompt, then the
    query and the two candidates (also what the lmms-eval and VLMEvalKit exports show the model)."""
    memory = MemoryBase(settings.memory, settings.repetition, settings.forgetting, concept_kind=task.concept_kind,
                        chainm_window=settings.chainm_window)
    names = [image_name(m, task.options) for m in task.memory]
    # The fixed memory links consecutive memory examples through their shared concept.
    links = [(a, task.memory_concept, b) for a, b in zip(names, names[1:])] or [(n, task.memory_concept, n) for n in names]
    memory.seed_fixed(links)
    return selection_request(task.id, 0, task.query, task.candidates, task.concept_kind, memory)


def run_single_step(tasks: list, asker: Asker, settings: AssociationSettings) -> list[dict]:
    """Each task: a selection with the task's fixed correct memory, then a deduction on (query, positive)."""
    selection_requests, deduction_requests = [], []
    for task in tasks:
        selection_requests.append(single_step_selection(task, settings))
        deduction_requests.append(deduction_request(task.id, 0, task.query, task.positive, task.concept_kind, task.options))
    selections = asker.ask(selection_requests)
    deductions = asker.ask(deduction_requests) if settings.deduction else [[None] for _ in tasks]
    records = []
    for task, sel, ded in zip(tasks, selections, deductions):
        choice = majority_selection([parse_selection(o) if o is not None else None for o in sel])
        gold = [o for o in task.options if o in set(task.query.labels) & set(task.positive.labels)]
        concepts = majority_concepts([parse_concepts(o, task.options) if o is not None else None for o in ded], task.options)
        records.append({"id": task.id, "concept": task.concept, "candidates": [c.id for c in task.candidates], "answer": task.answer,
                        "choice": choice, "correct": choice == task.answer, "failed": all(o is None for o in sel),
                        "unparseable": choice is None and not all(o is None for o in sel),
                        "deduction": concepts, "deduction_gold": gold, "deduction_correct": deduction_correct(concepts, gold),
                        "outputs": sel, "deduction_outputs": ded})
    return records


def run_deduction(tasks: list, asker: Asker) -> list[dict]:
    outputs = asker.ask([deduction_request(t.id, 0, t.image_1, t.image_2, t.concept_kind, t.options) for t in tasks])
    records = []
    for task, out in zip(tasks, outputs):
        concepts = majority_concepts([parse_concepts(o, task.options) if o is not None else None for o in out], task.options)
        records.append({"id": task.id, "concept": task.concept, "deduction": concepts, "deduction_gold": task.gold,
                        "deduction_correct": deduction_correct(concepts, task.gold), "failed": all(o is None for o in out),
                        "unparseable": concepts is None and not all(o is None for o in out), "outputs": out})
    return records


# ------------------------------------------------------------------------------------------ entry point
#: Images in the largest request of the protocol: a selection shows the query and two candidates.
IMAGES_PER_ASSOCIATION_REQUEST = 3
#: lmms-eval task name of the single-step config (the one a harness can score sample by sample).
LMMS_TASK = "association_single_step"


def association_run_keys(infos, config: str, split, generation: GenerationSettings) -> list[str]:
    """The cache key of each model of a run (see :mod:`commonlink.eval.cache`)."""
    return [
        run_key(task=f"association/{config}", protocol=PROTOCOL_VERSION, dataset=split.fingerprint, model=i.fingerprint,
                backend=i.backend, settings=generation.to_dict(),
                **({"backend_options": i.output_options} if getattr(i, "output_options", None) else {}))
        for i in infos
    ]


def association_cache(out_dir, run: str) -> PredictionCache:
    if out_dir is not None:
        return PredictionCache(Path(out_dir) / CACHE_FILENAME)
    return PredictionCache(constants.COMMONLINK_HOME / "predictions" / f"assoc-{run}.jsonl")


@dataclass
class AssociationOutcome:
    """What a run of one config produced: chain summaries (chains) or per-task records (the others)."""

    summaries: list[dict] = field(default_factory=list)
    records: list[dict] = field(default_factory=list)


def run_config(split, indices: list[int], config: str, asker: Asker, settings: AssociationSettings, *, group_size: int,
               log_path: Path | None, show_progress: bool) -> AssociationOutcome:
    """Run the tasks of one config a group at a time (chains in lockstep within a group), streaming the
    per-step log to ``log_path``, so memory stays flat however many chains a config has."""
    outcome = AssociationOutcome()
    chains = config in CHAIN_CONFIGS
    with contextlib.ExitStack() as stack:
        log_file = stack.enter_context(atomic_write(log_path)) if log_path is not None else None
        for first in range(0, len(indices), group_size):
            tasks = [split.get(i) for i in indices[first : first + group_size]]
            if chains:
                chain_runs = run_chains(tasks, asker, settings, show_progress=show_progress)
                outcome.summaries.extend(chain_summary(r) for r in chain_runs)
                entries = [e for r in chain_runs for e in r.log]
            elif config == "single_step":
                entries = run_single_step(tasks, asker, settings)
                outcome.records.extend(entries)
            else:
                entries = run_deduction(tasks, asker)
                outcome.records.extend(entries)
            if log_file is not None:
                log_file.write("".join(json.dumps(e, ensure_ascii=False) + "\n" for e in entries))
    return outcome


def config_metrics(config: str, outcome: AssociationOutcome, settings: AssociationSettings, *, seed: int, n_boot: int) -> tuple[dict, int]:
    """(metrics, scored steps) of a finished run: chain lengths for chains, success ratios otherwise."""
    if config in CHAIN_CONFIGS:
        return chain_metrics(outcome.summaries, seed=seed, n_boot=n_boot), sum(r["scored"] for r in outcome.summaries)
    if config == "single_step":  # without the deduction step there is no deduction ratio (not 0%)
        fields = ["correct", "deduction_correct"] if settings.deduction else ["correct"]
    else:
        fields = ["deduction_correct"]
    return ratio_metrics(outcome.records, fields, seed=seed, n_boot=n_boot), len(outcome.records)


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
    batch_size: int | None = None,
    limit: int | None = None,
    backend_options: dict | None = None,
    backend_instances: Sequence[Backend] | None = None,
    seed: int = 0,
    n_boot: int = N_BOOTSTRAP,
    group_size: int = 512,
    show_progress: bool = True,
    report: bool = True,
    catalog_root: str | os.PathLike | None = None,
) -> dict:
    """Score one or more models (majority vote when several) on one association config; returns results.

    ``data`` is an association release folder, a Hub repo id, or the chain files written by
    ``commonlink chains``. Outputs (when ``out_dir`` is given): ``results.json``, ``steps.jsonl`` (per-step log
    with memory snapshots) or ``predictions.jsonl``, ``results.md``; rerunning continues from the cache there.
    ``group_size`` tasks are loaded and run together (the chains of a group advance in lockstep): it bounds
    memory and is the most requests one step of chains can send at once. With ``report`` (the default),
    ``report.html`` is written there too.
    """

    if group_size < 1:
        raise InputError(f"--group-size {group_size} must be at least 1.")
    settings = settings or AssociationSettings()
    generation = generation or GenerationSettings(seed=seed, max_new_tokens=64)
    split = open_association(data, config, revision=revision, catalog_root=catalog_root)
    indices = list(range(len(split)))[: limit if limit is not None else None]
    with open_backends(backend_instances, backend, models, backend_options, images_per_request=IMAGES_PER_ASSOCIATION_REQUEST) as backends:
        infos = [b.info for b in backends]
        if any(i.model == "none" for i in infos):
            raise InputError("The 'none' baseline has no meaning for association tasks.", "Use --model random for a chance baseline.")
        runs = association_run_keys(infos, config, split, generation)
        asker = Asker(backends, association_cache(out_dir, runs[0]), generation, runs, batch_size or min(i.default_batch_size for i in infos))
        start = time.perf_counter()
        log_name = "steps.jsonl" if config in CHAIN_CONFIGS else "predictions.jsonl"
        outcome = run_config(split, indices, config, asker, settings, group_size=group_size,
                             log_path=Path(out_dir) / log_name if out_dir is not None else None, show_progress=show_progress)
        metrics, scored_steps = config_metrics(config, outcome, settings, seed=seed, n_boot=n_boot)
        wall = time.perf_counter() - start
        generate_s = sum(b.generate_seconds for b in backends)
        infos = [b.info for b in backends]  # a lazy backend knows its dtype/device once loaded
    results = results_header(f"association/{config}", infos, generation, seed=seed, n_boot=n_boot, several_models=True)
    results.update({
        "protocol": PROTOCOL_VERSION,
        "association": asdict(settings),
        "dataset": {"source": split.source_name, "config": config, "revision": split.revision, "fingerprint": split.fingerprint,
                    "tasks_in_config": len(split), "tasks_run": len(indices)},
        "metrics": metrics,
        "requests": {"total": asker.requests_sent, "scored_steps": scored_steps,
                     "per_scored_step": round(asker.requests_sent / scored_steps, 4) if scored_steps else None,
                     "generated": asker.generated, "from_cache": asker.cached, "failed": asker.failures},
        "timing": timing(wall, generate_s, from_cache=asker.cached, generated=asker.generated),
    })
    if out_dir is not None:
        write_association_outputs(Path(out_dir), results, outcome)
        if report:
            report_beside_run(Path(out_dir), dataset=split)
    return results


def write_association_outputs(out: Path, results: dict, outcome: AssociationOutcome) -> None:
    """results.json and results.md (the per-step log is streamed during the run); for single-step, the run in
    lmms-eval's convention as well (doc_id = task number, filtered = the parsed choice)."""
    atomic_write_json(out / "results.json", results)
    atomic_write_text(out / "results.md", render_association_table(results))
    if results["dataset"]["config"] == "single_step":
        summary = results["metrics"]["summary"]
        metrics = lmms_eval_metrics(summary, {"acc": "avg_success_ratio", "deduction_acc": "avg_deduction_success_ratio"})
        samples = ({"doc_id": n, "doc": {"id": r["id"], "concept": r["concept"], "candidates": r["candidates"]}, "target": f"Image{r['answer'] + 1}",
                    "prompt": r["id"], "response": (r["outputs"] or [None])[0], "filtered": None if r["choice"] is None else f"Image{r['choice'] + 1}",
                    "scores": {"acc": float(r["correct"])}}
                   for n, r in enumerate(outcome.records))
        write_lmms_eval_files(out, LMMS_TASK, results, metrics, samples)
