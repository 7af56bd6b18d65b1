"""Association chains as episodes (Labyrinth of Links §4): every active chain advances in lockstep, one batch
of selections and one of deductions a step; a chain's memory learns from its own answers and the chain ends at
its first wrong selection (see :mod:`commonlink.kinds.association.task` for the protocol).

The warm-up follows the protocol (:func:`paper_schedule`): under ``paper`` (the authors' harness) 3 steps per
concept, answered by the model's own deduction, then the scored chain from a fresh concept-1 query; under
``strict`` the chain's marked warm-up steps, whose memory learns the gold concept."""

from __future__ import annotations

from dataclasses import dataclass, field

from commonlink.errors import InputError
from commonlink.kinds.association.format import PLAN_CONCEPT_1, PLAN_CONCEPT_2
from commonlink.kinds.association.memory import MemoryBase
from commonlink.kinds.association.requests import (
    PAPER_WARMUP_PER_CONCEPT,
    Asker,
    AssociationSettings,
    deduction_request,
    image_name,
    protocol_gold,
    read_deduction,
    read_selection,
    selection_request,
)
from commonlink.progress import make_progress


def paper_schedule(chain, per_concept: int = PAPER_WARMUP_PER_CONCEPT) -> tuple[list[int], int]:
    """``(warm-up step indices, first scored step)`` of ``chain`` under the paper protocol (the harness's
    ``few_shot_num`` = 3 example steps per concept, eval_multistep.py).

    * synchronous: the harness draws a fresh query for each warm-up step and for the scored chain, so the
      warm-up takes every other step (0, 2, 4: the skipped steps' positives, never shown, are the next fresh
      queries) and scoring starts at step 6;
    * asynchronous: the first ``per_concept`` concept-1 steps of the chain's plan (0-2), then the first
      ``per_concept`` concept-2 steps after them (4-6: the first one's query is the skipped bridge's positive,
      a fresh bridge image, as in the harness); scoring starts where the next concept-1 run starts (8), a fresh
      query (the skipped bridge's positive), so the scored order is 1,1,1,b,2,2,2,b and its first step is on
      concept 1, never a bridge.

    Steps in between are skipped (no request); they only supply images. A chain too short for this is an error
    that says how long it must be."""
    plan = chain.plan
    if chain.kind == "synchronous" or len(chain.concepts) == 1:
        warmup = list(range(0, 2 * per_concept, 2))
        first = 2 * per_concept
    else:
        ones = [t for t, code in enumerate(plan) if code == PLAN_CONCEPT_1][:per_concept]
        after = ones[-1] if ones else len(plan)
        twos = [t for t, code in enumerate(plan) if code == PLAN_CONCEPT_2 and t > after][:per_concept]
        warmup = ones + twos
        last = warmup[-1] if warmup else len(plan)
        first = next(
            (t for t in range(last + 2, len(plan)) if plan[t] == PLAN_CONCEPT_1 and plan[t - 1] != PLAN_CONCEPT_1),
            len(plan),
        )
        if len(ones) < per_concept or len(twos) < per_concept:
            first = len(plan)
    if first >= len(plan):
        need = 2 * per_concept + 1 if len(chain.concepts) == 1 else "a full period after 3 steps on each concept"
        raise InputError(
            f"Chain {chain.id} ({len(plan)} steps, plan {plan[:16]!r}{'...' if len(plan) > 16 else ''}) is too short "
            f"for the paper protocol's warm-up ({per_concept} steps per concept, then a fresh concept-1 query): it "
            f"needs {need} steps.",
            "Build the chains with more --max-steps, or run with --protocol strict.",
        )
    return warmup, first


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
    warmup: list[int] = field(default_factory=list)  #: paper protocol: warm-up steps still to ask (step indices)


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
        run.log.append(
            {
                "chain": chain.id,
                "step": step.index,
                "warmup": True,
                "concept": step.concept,
                "candidates": [c.id for c in step.candidates],
                "answer": step.answer,
                "choice": step.answer,
                "correct": True,
                "deduction": [step.concept],
                "memory": run.memory.snapshot(),
            }
        )
        run.t += 1


def _warmup_entry(run: _ChainRun, step) -> dict:
    return {
        "chain": run.chain.id,
        "step": step.index,
        "warmup": True,
        "concept": step.concept,
        "bridge": step.bridge,
        "candidates": [c.id for c in step.candidates],
        "answer": step.answer,
        "choice": step.answer,
        "correct": True,
    }


def _paper_warmup(runs: list[_ChainRun], asker: Asker, settings: AssociationSettings) -> None:
    """The paper protocol's warm-up, in lockstep: each warm-up step's selection is forced (no request) and the
    model deduces what the query and the positive share; that deduction, right or wrong, goes into the memory
    (with ``deduction`` off, the gold concept does). Warm-up deductions are logged, never scored."""
    while pending := [r for r in runs if r.warmup and not r.ended]:
        steps = [r.chain.steps[r.warmup.pop(0)] for r in pending]
        if not settings.deduction:
            for run, step in zip(pending, steps):
                _remember(run, step, [step.concept])
                run.log.append(
                    {**_warmup_entry(run, step), "deduction": [step.concept], "memory": run.memory.snapshot()}
                )
            continue
        requests = [_deduction_request(r, s, asker, settings) for r, s in zip(pending, steps)]
        for run, step, request, outputs in zip(pending, steps, requests, asker.ask(requests)):
            gold = protocol_gold(step.gold, run.chain.concepts, settings)
            concepts, ok = read_deduction(
                outputs, gold, run.chain.options, settings, seed=asker.seed, request_id=request.id
            )
            _remember(run, step, concepts or [])
            run.log.append(
                {
                    **_warmup_entry(run, step),
                    "deduction": concepts,
                    "deduction_gold": gold,
                    "deduction_correct": ok,
                    "deduction_outputs": outputs,
                    "memory": run.memory.snapshot(),
                }
            )


def _start_chain(chain, settings: AssociationSettings) -> _ChainRun:
    """A fresh run of ``chain`` with an empty memory: under strict past its warm-up steps; under paper at its
    first scored step, with the warm-up steps to ask first (:func:`paper_schedule`)."""
    run = _ChainRun(chain, settings.new_memory(chain.concept_kind))
    if settings.paper:
        run.warmup, run.t = paper_schedule(chain)
    else:
        _skip_warmup(run)
    if run.t >= len(chain.steps):
        run.ended = "exhausted"
    return run


def _judge_selection(
    run: _ChainRun, step, outputs: list[str | None], settings: AssociationSettings, *, seed: int, request_id: str
) -> dict:
    """Score one step's selection: log it, and end the chain unless the answer picked the right candidate (the
    protocol's reading and vote: :func:`read_selection`)."""
    choice, correct, _ = read_selection(outputs, step.answer, settings, seed=seed, request_id=request_id)
    run.scored += 1
    entry = {
        "chain": run.chain.id,
        "step": step.index,
        "warmup": False,
        "concept": step.concept,
        "bridge": step.bridge,
        "candidates": [c.id for c in step.candidates],
        "answer": step.answer,
        "choice": choice,
        "correct": correct,
        "outputs": outputs,
    }
    run.log.append(entry)
    if all(o is None for o in outputs):
        run.ended = "failed"
    elif correct:
        pass
    elif choice is None:
        run.ended = "unparseable"
    else:
        run.ended = "wrong"
    if not run.ended:
        run.length += 1
    return entry


def _deduction_request(run: _ChainRun, step, asker: Asker, settings: AssociationSettings):
    return deduction_request(
        run.chain.id,
        step.index,
        step.query,
        step.positive,
        run.chain.concept_kind,
        run.chain.options,
        pixels=asker.pixels,
        strategy=settings.strategy,
        image_size=settings.image_size,
    )


def _select(
    active: list[_ChainRun], steps: list, asker: Asker, settings: AssociationSettings
) -> list[tuple[_ChainRun, object, dict]]:
    """Ask every active chain's selection in one batch; the correct ones that await a deduction are returned
    (with deduction off, the memory learns the gold concept at once)."""
    requests = [
        selection_request(
            r.chain.id,
            s.index,
            s.query,
            s.candidates,
            r.chain.concept_kind,
            r.memory,
            pixels=asker.pixels,
            strategy=settings.strategy,
            options=r.chain.options,
            image_size=settings.image_size,
        )
        for r, s in zip(active, steps)
    ]
    to_deduce = []
    for run, step, request, outputs in zip(active, steps, requests, asker.ask(requests)):
        entry = _judge_selection(run, step, outputs, settings, seed=asker.seed, request_id=request.id)
        if run.ended:
            continue
        if settings.deduction:
            to_deduce.append((run, step, entry))
        else:
            _remember(run, step, [step.concept])
            entry["memory"] = run.memory.snapshot()
    return to_deduce


def _deduce(to_deduce: list[tuple[_ChainRun, object, dict]], asker: Asker, settings: AssociationSettings) -> None:
    """Ask the deductions in one batch; the deduced concepts (right or wrong) go into each chain's memory."""
    requests = [_deduction_request(r, s, asker, settings) for r, s, _ in to_deduce]
    for (run, step, entry), request, outputs in zip(to_deduce, requests, asker.ask(requests)):
        gold = protocol_gold(step.gold, run.chain.concepts, settings)
        concepts, ok = read_deduction(
            outputs, gold, run.chain.options, settings, seed=asker.seed, request_id=request.id
        )
        run.deductions += 1
        run.deductions_correct += ok
        _remember(run, step, concepts or [])
        entry.update(
            {
                "deduction": concepts,
                "deduction_gold": gold,
                "deduction_correct": ok,
                "deduction_outputs": outputs,
                "memory": run.memory.snapshot(),
            }
        )


def _advance(run: _ChainRun, settings: AssociationSettings) -> None:
    """Move a chain that is still going to its next scored step, ending it at ``max_steps`` or its last step."""
    if run.ended:
        return
    run.t += 1
    if not settings.paper:
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
        _deduce(to_deduce, asker, settings)
    for run in active:
        _advance(run, settings)


def run_chains(chains: list, asker: Asker, settings: AssociationSettings, *, progress: bool = True) -> list[_ChainRun]:
    """Run chains in lockstep (one batch per step for selections, one for deductions)."""
    runs = [_start_chain(chain, settings) for chain in chains]
    _paper_warmup(runs, asker, settings)
    with make_progress("steps", disable=not progress) as bars:
        task = bars.add_task("association chains (active)", total=len(runs))
        while active := [r for r in runs if not r.ended]:
            bars.update(
                task,
                completed=len(runs) - len(active),
                description=f"chains: {len(active)} active, step {min(r.scored for r in active) + 1}",
            )
            _run_step(active, asker, settings)
        bars.update(task, completed=len(runs))
    return runs


def chain_summary(run: _ChainRun) -> dict:
    """What the metrics need of a finished chain (the chain itself and its log can then be dropped)."""
    return {
        "chain": run.chain.id,
        "group": "+".join(run.chain.concepts),
        "length": run.length,
        "scored": run.scored,
        "deductions": run.deductions,
        "deductions_correct": run.deductions_correct,
        "ended": run.ended,
    }
