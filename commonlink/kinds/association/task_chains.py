"""Association chains as episodes (Labyrinth of Links §4): every active chain advances in lockstep, one batch
of selections and one of deductions a step; a chain's memory learns from its own answers and the chain ends at
its first wrong selection (see :mod:`commonlink.kinds.association.task` for the protocol)."""

from __future__ import annotations

from dataclasses import dataclass, field

from commonlink.kinds.association.memory import MemoryBase
from commonlink.kinds.association.prompts import parse_concepts, parse_selection
from commonlink.kinds.association.requests import (
    Asker,
    AssociationSettings,
    deduction_correct,
    deduction_request,
    image_name,
    majority_concepts,
    majority_selection,
    selection_request,
)
from commonlink.progress import make_progress


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


def _start_chain(chain, settings: AssociationSettings) -> _ChainRun:
    """A fresh run of ``chain`` with an empty memory, past its warm-up steps."""
    memory = MemoryBase(
        settings.memory,
        settings.repetition,
        settings.forgetting,
        concept_kind=chain.concept_kind,
        chainm_window=settings.chainm_window,
    )
    run = _ChainRun(chain, memory)
    _skip_warmup(run)
    if run.t >= len(chain.steps):
        run.ended = "exhausted"
    return run


def _judge_selection(run: _ChainRun, step, outputs: list[str | None]) -> dict:
    """Score one step's selection: log it, and end the chain unless the majority picked the right candidate."""
    choice = majority_selection([parse_selection(o) if o is not None else None for o in outputs])
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
        "correct": choice == step.answer,
        "outputs": outputs,
    }
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


def _select(
    active: list[_ChainRun], steps: list, asker: Asker, settings: AssociationSettings
) -> list[tuple[_ChainRun, object, dict]]:
    """Ask every active chain's selection in one batch; the correct ones that await a deduction are returned
    (with deduction off, the memory learns the gold concept at once)."""
    selections = asker.ask(
        [
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
            )
            for r, s in zip(active, steps)
        ]
    )
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


def _deduce(to_deduce: list[tuple[_ChainRun, object, dict]], asker: Asker, settings: AssociationSettings) -> None:
    """Ask the deductions in one batch; the deduced concepts (right or wrong) go into each chain's memory."""
    outputs_list = asker.ask(
        [
            deduction_request(
                r.chain.id,
                s.index,
                s.query,
                s.positive,
                r.chain.concept_kind,
                r.chain.options,
                pixels=asker.pixels,
                strategy=settings.strategy,
            )
            for r, s, _ in to_deduce
        ]
    )
    for (run, step, entry), outputs in zip(to_deduce, outputs_list):
        options = run.chain.options
        concepts = majority_concepts(
            [
                parse_concepts(o, options, answer_only=settings.strategy == "cot") if o is not None else None
                for o in outputs
            ],
            options,
        )
        ok = deduction_correct(concepts, step.gold, settings.deduction_rule)
        run.deductions += 1
        run.deductions_correct += ok
        _remember(run, step, concepts or [])
        entry.update(
            {
                "deduction": concepts,
                "deduction_gold": step.gold,
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
