"""``commonlink eval concept``: the concept-perception grid (Labyrinth of Links App. B, Table 4) for one or more
models, each a :class:`commonlink.kinds.association.concept_task.ConceptPerceptionTask` run by the evaluator; prints
the grid in Table 4's layout."""

from __future__ import annotations

import json

import typer

from commonlink.commands._common import console, reports_errors
from commonlink.commands._options import (
    CatalogRootOpt,
    DataOpt,
    DeductionRuleOpt,
    LimitOpt,
    ModelsOpt,
    OptionalOutOpt,
    RevisionOpt,
    RunNamesOpt,
    StrategyOpt,
    expand_option_groups,
)
from commonlink.commands.eval import ModelRun, run_task
from commonlink.errors import InputError
from commonlink.eval.evaluator import default_out_dir
from commonlink.eval.scored import scored_line
from commonlink.fileio import atomic_write_text
from commonlink.kinds.association.concept_prompts import COMPLEXITIES, STRATEGIES
from commonlink.kinds.association.concept_task import ConceptPerceptionTask, render_table4

ALL_STRATEGIES = ",".join(STRATEGIES)
ALL_COMPLEXITIES = ",".join(COMPLEXITIES)


def _print_scored(results: dict) -> None:
    console.print(scored_line(results), highlight=False, markup=False)


def _split(value: str | None) -> list[str] | None:
    return [v.strip() for v in value.split(",") if v.strip()] if value else None


@reports_errors
@expand_option_groups
def concept(
    data: DataOpt = ...,
    model: ModelsOpt = ...,
    run: ModelRun = ModelRun(),
    strategy: StrategyOpt = ALL_STRATEGIES,
    complexity: str = typer.Option(
        ALL_COMPLEXITIES,
        "--complexity",
        help="Task complexities, comma-separated: task (TaskInstr), meta (MetaInstr), task+ded, meta+ded (w/ DedPo).",
    ),
    deduction_rule: DeductionRuleOpt = "all-shared",
    out: OptionalOutOpt = None,
    revision: RevisionOpt = None,
    limit: LimitOpt = None,
    catalog_root: CatalogRootOpt = None,
    run_name: RunNamesOpt = None,
) -> None:
    """Concept perception (paper App. B): success ratio per model x strategy x task complexity, as Table 4.

    --model: repeat it for one Table 4 block per model (the same --backend for every one), with one --run-name per
    --model in order (default: the model). --strategy: comma-separated. --out: default eval-runs/concept-...; one
    subfolder per model; rerun to resume. --limit counts single-step tasks.
    """
    if run_name and len(run_name) != len(model):
        raise InputError(
            f"{len(run_name)} --run-name for {len(model)} --model.",
            "Give one --run-name per --model (in the same order), or none.",
        )
    backend = run.backend_name(model)
    out = out or default_out_dir("grid", "+".join(model), backend, task="concept", data=data)
    runs = []
    for name in model:
        task = ConceptPerceptionTask(
            data,
            strategies=_split(strategy),
            complexities=_split(complexity),
            revision=revision,
            deduction_rule=deduction_rule,
            seed=run.seed,
            catalog_root=catalog_root,
        )
        folder = out / default_out_dir("grid", name, backend, task="concept").name if len(model) > 1 else out
        name_of_run = run_name[len(runs)] if run_name else None
        options = run.options([name], folder, backend=backend, run_name=name_of_run, limit=limit, report=False)
        runs.append(run_task(task, folder, options, show=_print_scored))
    if run.dry_run:
        return
    table = render_table4(runs)
    if len(model) > 1:
        atomic_write_text(out / "table4.md", table)
        atomic_write_text(
            out / "table4.json",
            json.dumps([{"model": r.get("model"), "table": r["metrics"]["table"]} for r in runs], indent=1),
        )
    console.print(table, highlight=False, markup=False, soft_wrap=True)
    console.print(
        f"Wrote {out}: results.json, predictions.jsonl and results.md"
        + (" per model, and table4.md" if len(model) > 1 else "")
        + "."
    )
