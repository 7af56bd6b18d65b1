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
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from commonlink import __version__, constants
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
    BatchState,
    GenerationRequest,
    GenerationSettings,
    LazyBackend,
    RequestFailure,
    generate_resilient,
)
from commonlink.eval.cache import CACHE_FILENAME, PredictionCache, row_key, run_key
from commonlink.eval.html_report import report_beside_run
from commonlink.eval.metrics import N_BOOTSTRAP, bootstrap
from commonlink.fileio import atomic_write, atomic_write_json, atomic_write_text
from commonlink.formats.meta import utc_now
from commonlink.loaders.association import open_association
from commonlink.progress import make_progress

PROTOCOL_VERSION = "association-v1"
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
class _Asker:
    """Sends batches of requests to one or more backends through the prediction cache; majority votes."""

    def __init__(self, backends: list[Backend], cache: PredictionCache, settings: GenerationSettings, run_keys: list[str], batch_size: int):
        self.backends = backends
        self.cache = cache
        self.settings = settings
        self.run_keys = run_keys
        self.states = [BatchState(batch_size=max(1, batch_size)) for _ in backends]
        self.requests_sent = 0  #: requests asked of the protocol (one per request, whatever the number of models)
        self.generated = 0
        self.cached = 0
        self.failures = 0

    def ask(self, requests: list[GenerationRequest]) -> list[list[str | None]]:
        """Per request, the output of each model (``None`` where the backend failed on it)."""
        self.requests_sent += len(requests)
        answers: list[list[str | None]] = [[None] * len(self.backends) for _ in requests]
        for m, (backend, run, state) in enumerate(zip(self.backends, self.run_keys, self.states)):
            todo = []
            for i, request in enumerate(requests):
                hit = self.cache.get(row_key(run, request.id))
                if hit is None:
                    todo.append(i)
                else:
                    answers[i][m] = hit
                    self.cached += 1
            if not todo:
                continue
            outputs = generate_resilient(backend, [requests[i] for i in todo], self.settings, state)
            fresh = []
            for i, output in zip(todo, outputs):
                if isinstance(output, RequestFailure):
                    self.failures += 1
                    continue
                answers[i][m] = output
                fresh.append((row_key(run, requests[i].id), requests[i].id, output))
                self.generated += 1
            self.cache.add(fresh)
        return answers


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


def _skip_warmup(run: _ChainRun, options: list[str]) -> None:
    """Apply the forced-correct warm-up steps at the current position (no model call)."""
    chain = run.chain
    while run.t < len(chain.steps) and chain.steps[run.t].warmup:
        step = chain.steps[run.t]
        # The builder guarantees the positive carries the step's concept, so that is the correct deduction.
        run.memory.update(image_name(step.query, options), image_name(step.positive, options), [step.concept])
        run.log.append({"chain": chain.id, "step": step.index, "warmup": True, "concept": step.concept,
                        "candidates": [c.id for c in step.candidates], "answer": step.answer, "choice": step.answer,
                        "correct": True, "deduction": [step.concept], "memory": run.memory.snapshot()})
        run.t += 1


def run_chains(chains: list, asker: _Asker, settings: AssociationSettings, *, show_progress: bool = True) -> list[_ChainRun]:
    """Run chains in lockstep (one batch per step for selections, one for deductions)."""
    runs = []
    for chain in chains:
        run = _ChainRun(chain, MemoryBase(settings.memory, settings.repetition, settings.forgetting, concept_kind=chain.concept_kind,
                                    chainm_window=settings.chainm_window))
        _skip_warmup(run, chain.options)
        if run.t >= len(chain.steps):
            run.ended = "exhausted"
        runs.append(run)
    with make_progress("steps", disable=not show_progress) as progress:
        task = progress.add_task("association chains (active)", total=len(runs))
        while True:
            active = [r for r in runs if not r.ended]
            if not active:
                break
            progress.update(task, completed=len(runs) - len(active), description=f"chains: {len(active)} active, step {min(r.scored for r in active) + 1}")
            steps = [r.chain.steps[r.t] for r in active]
            selections = asker.ask([
                selection_request(r.chain.id, s.index, s.query, s.candidates, r.chain.concept_kind, r.memory) for r, s in zip(active, steps)
            ])
            to_deduce: list[tuple[_ChainRun, object, dict]] = []
            for run, step, outputs in zip(active, steps, selections):
                votes = [parse_selection(o) if o is not None else None for o in outputs]
                choice = majority_selection(votes)
                run.scored += 1
                entry = {"chain": run.chain.id, "step": step.index, "warmup": False, "concept": step.concept, "bridge": step.bridge,
                         "candidates": [c.id for c in step.candidates], "answer": step.answer, "choice": choice,
                         "correct": choice == step.answer, "outputs": outputs}
                if all(o is None for o in outputs):
                    run.ended = "failed"
                elif choice is None:
                    run.ended = "unparseable"
                elif choice != step.answer:
                    run.ended = "wrong"
                else:
                    run.length += 1
                    if settings.deduction:
                        to_deduce.append((run, step, entry))
                    else:
                        run.memory.update(image_name(step.query, run.chain.options), image_name(step.positive, run.chain.options), [step.concept])
                        entry["memory"] = run.memory.snapshot()
                run.log.append(entry)
            if to_deduce:
                outputs_list = asker.ask([
                    deduction_request(r.chain.id, s.index, s.query, s.positive, r.chain.concept_kind, r.chain.options) for r, s, _ in to_deduce
                ])
                for (run, step, entry), outputs in zip(to_deduce, outputs_list):
                    concepts = majority_concepts([parse_concepts(o, run.chain.options) if o is not None else None for o in outputs], run.chain.options)
                    ok = deduction_correct(concepts, step.gold)
                    run.deductions += 1
                    run.deductions_correct += ok
                    run.memory.update(image_name(step.query, run.chain.options), image_name(step.positive, run.chain.options), concepts or [])
                    entry.update({"deduction": concepts, "deduction_gold": step.gold, "deduction_correct": ok,
                                  "deduction_outputs": outputs, "memory": run.memory.snapshot()})
            for run in active:
                if run.ended:
                    continue
                run.t += 1
                _skip_warmup(run, run.chain.options)
                if run.scored >= settings.max_steps:
                    run.ended = "max_steps"
                elif run.t >= len(run.chain.steps):
                    run.ended = "exhausted"
        progress.update(task, completed=len(runs))
    return runs


def chain_summary(run: _ChainRun) -> dict:
    """What the metrics need of a finished chain (the chain itself and its log can then be dropped)."""
    return {"chain": run.chain.id, "group": "+".join(run.chain.concepts), "length": run.length, "scored": run.scored,
            "deductions": run.deductions, "deductions_correct": run.deductions_correct, "ended": run.ended}


def chain_metrics(summaries: list[dict], *, seed: int, n_boot: int) -> dict:
    """Max | mean chain length per concept (pair), their averages, and bootstrap SE of each mean.

    A chain that ended because the backend failed (no answer at all, e.g. a request that ran out of memory
    alone) says nothing about the model: it is counted under ``failed`` and left out of the lengths; a rerun
    retries it (failures are not cached).
    """
    groups: dict[str, list[dict]] = defaultdict(list)
    for summary in summaries:
        groups[summary["group"]].append(summary)
    per_concept = {}
    for name in sorted(groups):
        scored = [r for r in groups[name] if r["ended"] != "failed"]
        lengths = np.array([r["length"] for r in scored], dtype=float)
        _, se = bootstrap(lengths, seed=seed, key=f"chains/{name}", n_boot=n_boot)
        deductions = sum(r["deductions"] for r in scored)
        per_concept[name] = {
            "chains": len(lengths),
            "failed": len(groups[name]) - len(scored),
            "max_steps": int(lengths.max()) if len(lengths) else None,
            "mean_steps": float(lengths.mean()) if len(lengths) else None,
            "mean_steps_se": float(se[0]) if len(lengths) else None,
            "deduction_success_ratio": (sum(r["deductions_correct"] for r in scored) / deductions) if deductions else None,
            "ended": dict(Counter(r["ended"] for r in groups[name])),
        }
    measured = [v for v in per_concept.values() if v["chains"]]
    summary = {
        "concepts": len(per_concept),
        "chains": sum(v["chains"] for v in per_concept.values()),
        "failed_chains": sum(v["failed"] for v in per_concept.values()),
        "avg_max_steps": float(np.mean([v["max_steps"] for v in measured])) if measured else None,
        "avg_mean_steps": float(np.mean([v["mean_steps"] for v in measured])) if measured else None,
    }
    return {"summary": summary, "per_concept": per_concept}


# ------------------------------------------------------------------------------------------ single step, deduction
def run_single_step(tasks: list, asker: _Asker, settings: AssociationSettings) -> list[dict]:
    """Each task: a selection with the task's fixed correct memory, then a deduction on (query, positive)."""
    selection_requests, deduction_requests = [], []
    for task in tasks:
        memory = MemoryBase(settings.memory, settings.repetition, settings.forgetting, concept_kind=task.concept_kind,
                            chainm_window=settings.chainm_window)
        names = [image_name(m, task.options) for m in task.memory]
        # The fixed memory links consecutive memory examples through their shared concept.
        links = [(a, task.memory_concept, b) for a, b in zip(names, names[1:])] or [(n, task.memory_concept, n) for n in names]
        memory.seed_fixed(links)
        selection_requests.append(selection_request(task.id, 0, task.query, task.candidates, task.concept_kind, memory))
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


def run_deduction(tasks: list, asker: _Asker) -> list[dict]:
    outputs = asker.ask([deduction_request(t.id, 0, t.image_1, t.image_2, t.concept_kind, t.options) for t in tasks])
    records = []
    for task, out in zip(tasks, outputs):
        concepts = majority_concepts([parse_concepts(o, task.options) if o is not None else None for o in out], task.options)
        records.append({"id": task.id, "concept": task.concept, "deduction": concepts, "deduction_gold": task.gold,
                        "deduction_correct": deduction_correct(concepts, task.gold), "failed": all(o is None for o in out),
                        "unparseable": concepts is None and not all(o is None for o in out), "outputs": out})
    return records


def ratio_metrics(records: list[dict], fields: Sequence[str], *, seed: int, n_boot: int) -> dict:
    """Success ratios per concept (and their average over concepts), with bootstrap SE.

    Tasks the backend failed on (no answer at all) are counted under ``failed`` and left out of the ratios;
    a rerun retries them.
    """
    failed = Counter(r["concept"] for r in records if r.get("failed"))
    records = [r for r in records if not r.get("failed")]
    groups: dict[str, list[dict]] = defaultdict(list)
    for record in records:
        groups[record["concept"]].append(record)
    per_concept = {}
    for name in sorted(groups):
        values = np.array([[float(r[f]) for f in fields] for r in groups[name]])
        _, se = bootstrap(values, seed=seed, key=f"ratio/{name}", n_boot=n_boot)
        per_concept[name] = {"n": len(groups[name]), "failed": failed.get(name, 0), "unparseable": sum(r["unparseable"] for r in groups[name])}
        for j, f in enumerate(fields):
            label = f.replace("correct", "success_ratio")
            per_concept[name][label] = float(values[:, j].mean())
            per_concept[name][f"{label}_se"] = float(se[j])
    summary = {"n": len(records), "failed": sum(failed.values()),
               "unparseable_rate": (sum(r["unparseable"] for r in records) / len(records)) if records else None}
    for f in fields:
        label = f.replace("correct", "success_ratio")
        summary[f"avg_{label}"] = float(np.mean([v[label] for v in per_concept.values()])) if per_concept else None
    return {"summary": summary, "per_concept": per_concept}


# ------------------------------------------------------------------------------------------ entry point
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
    split = open_association(data, config, revision=revision)
    indices = list(range(len(split)))[: limit if limit is not None else None]
    own = backend_instances is None
    backends = list(backend_instances) if backend_instances is not None else [LazyBackend(backend, m, **(backend_options or {})) for m in models]
    try:
        infos = [b.info for b in backends]
        if any(i.model == "none" for i in infos):
            raise InputError("The 'none' baseline has no meaning for association tasks.", "Use --model random for a chance baseline.")
        runs = [
            run_key(task=f"association/{config}", protocol=PROTOCOL_VERSION, dataset=split.fingerprint, model=i.fingerprint,
                    backend=i.backend, settings=generation.to_dict(),
                    **({"backend_options": i.output_options} if getattr(i, "output_options", None) else {}))
            for i in infos
        ]
        cache_root = Path(out_dir) if out_dir is not None else None

        cache_path = cache_root / CACHE_FILENAME if cache_root else constants.COMMONLINK_HOME / "predictions" / f"assoc-{runs[0]}.jsonl"
        asker = _Asker(backends, PredictionCache(cache_path), generation, runs, batch_size or min(i.default_batch_size for i in infos))
        start = time.perf_counter()
        chains = config in ("synchronous", "asynchronous")
        log_name = "steps.jsonl" if chains else "predictions.jsonl"
        # Tasks are loaded and run a group at a time (chains in lockstep within a group), and the per-step log is
        # streamed to disk, so memory stays flat however many chains a config has.
        summaries: list[dict] = []
        records: list[dict] = []
        with contextlib.ExitStack() as stack:
            log_file = stack.enter_context(atomic_write(Path(out_dir) / log_name)) if out_dir is not None else None
            for first in range(0, len(indices), group_size):
                tasks = [split.get(i) for i in indices[first : first + group_size]]
                if chains:
                    chain_runs = run_chains(tasks, asker, settings, show_progress=show_progress)
                    summaries.extend(chain_summary(r) for r in chain_runs)
                    entries = [e for r in chain_runs for e in r.log]
                elif config == "single_step":
                    entries = run_single_step(tasks, asker, settings)
                    records.extend(entries)
                else:
                    entries = run_deduction(tasks, asker)
                    records.extend(entries)
                if log_file is not None:
                    log_file.write("".join(json.dumps(e, ensure_ascii=False) + "\n" for e in entries))
        if chains:
            metrics = chain_metrics(summaries, seed=seed, n_boot=n_boot)
            scored_steps = sum(r["scored"] for r in summaries)
        else:
            if config == "single_step":  # without the deduction step there is no deduction ratio (not 0%)
                fields = ["correct", "deduction_correct"] if settings.deduction else ["correct"]
            else:
                fields = ["deduction_correct"]
            metrics = ratio_metrics(records, fields, seed=seed, n_boot=n_boot)
            scored_steps = len(records)
        wall = time.perf_counter() - start
        generate_s = sum(b.generate_seconds for b in backends)
        infos = [b.info for b in backends]  # a lazy backend knows its dtype/device once loaded
    finally:
        if own:
            for b in backends:
                b.close()
    results = {
        "task": f"association/{config}",
        "protocol": PROTOCOL_VERSION,
        "toolkit_version": __version__,
        "created": utc_now(),
        "models": [i.model for i in infos],
        "model_fingerprints": [i.fingerprint for i in infos],
        "backend": infos[0].backend,
        "backend_details": [i.details for i in infos],
        "moe": len(infos) > 1,
        "association": asdict(settings),
        "generation": generation.to_dict(),
        "seed": seed,
        "bootstrap_resamples": n_boot,
        "dataset": {"source": split.source_name, "config": config, "revision": split.revision, "fingerprint": split.fingerprint,
                    "tasks_in_config": len(split), "tasks_run": len(indices)},
        "metrics": metrics,
        "requests": {"total": asker.requests_sent, "scored_steps": scored_steps,
                     "per_scored_step": round(asker.requests_sent / scored_steps, 4) if scored_steps else None,
                     "generated": asker.generated, "from_cache": asker.cached, "failed": asker.failures},
        "timing": {"wall_s": round(wall, 4), "generate_s": round(generate_s, 4)},
    }
    if out_dir is not None:
        out = Path(out_dir)
        atomic_write_json(out / "results.json", results)
        atomic_write_text(out / "results.md", render_association_table(results))
        if report:
            report_beside_run(out, dataset=split)
    return results


def render_association_table(results: dict) -> str:
    """Markdown table of per-concept metrics (chains: max | mean steps; others: success ratios)."""
    metrics = results["metrics"]
    title = f"{results['task']} — {', '.join(results['models'])} ({results['backend']}, memory {results['association']['memory']})"
    lines = [f"### {title}", ""]
    per = metrics["per_concept"]
    if results["task"].endswith(("synchronous", "asynchronous")):
        lines += ["| concept | chains | max | mean ± SE | deduction |", "|---|---|---|---|---|"]
        for name, v in per.items():
            ded = "-" if v["deduction_success_ratio"] is None else f"{v['deduction_success_ratio']:.3f}"
            mean = "-" if v["mean_steps"] is None else f"{v['mean_steps']:.2f} ± {v['mean_steps_se']:.2f}"
            lines.append(f"| {name} | {v['chains']} | {'-' if v['max_steps'] is None else v['max_steps']} | {mean} | {ded} |")
        s = metrics["summary"]
        if s["avg_max_steps"] is not None:
            lines.append(f"| **average** | {s['chains']} | {s['avg_max_steps']:.2f} | {s['avg_mean_steps']:.2f} | |")
    else:
        fields = [k for k in next(iter(per.values()), {}) if k.endswith("success_ratio")]
        lines += ["| concept | n | " + " | ".join(fields) + " |", "|---|---|" + "---|" * len(fields)]
        for name, v in per.items():
            lines.append(f"| {name} | {v['n']} | " + " | ".join(f"{v[f]:.3f} ± {v[f + '_se']:.3f}" for f in fields) + " |")
        s = metrics["summary"]
        lines.append("| **average** | " + str(s["n"]) + " | " + " | ".join(f"{s['avg_' + f]:.3f}" for f in fields) + " |")
    req = results["requests"]
    lines += ["", f"Model requests: {req['total']} for {req['scored_steps']} scored steps ({req['per_scored_step']} a step)."]
    failed = metrics["summary"].get("failed_chains") or metrics["summary"].get("failed") or 0
    if failed:
        lines.append(f"**{failed} task(s) got no answer from the backend and are left out of the metrics; rerun to retry them.**")
    return "\n".join(lines) + "\n"
