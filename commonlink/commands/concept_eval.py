"""``commonlink eval concept``: the concept-perception grid (Labyrinth of Links App. B, Table 4) for one or more
models, each a :class:`commonlink.kinds.association.concept_task.ConceptPerceptionTask` run by the evaluator; prints
the grid in Table 4's layout."""

from __future__ import annotations

import json

import typer

from commonlink.commands._common import console, reports_errors
from commonlink.commands._options import (
    BackendArgOpt,
    BackendOpt,
    BatchSizeOpt,
    BootstrapOpt,
    CatalogRootOpt,
    ConcurrencyOpt,
    DataOpt,
    DeductionRuleOpt,
    GenArgOpt,
    LimitOpt,
    MaxNewTokensOpt,
    MaxPixelsOpt,
    ModelsOpt,
    OptionalOutOpt,
    QuietOpt,
    RevisionOpt,
    RunNamesOpt,
    SeedOpt,
    StrategyOpt,
    SystemPromptOpt,
    TemperatureOpt,
    TopPOpt,
    TrustRemoteCodeOpt,
)
from commonlink.commands.eval import cli_run_options, generation_settings, run_backend, run_task
from commonlink.errors import InputError
from commonlink.eval.backends import GenerationSettings
from commonlink.eval.backends.base import DEFAULT_MAX_PIXELS
from commonlink.eval.evaluator import default_out_dir
from commonlink.eval.metrics import N_BOOTSTRAP
from commonlink.fileio import atomic_write_text
from commonlink.kinds.association.concept_prompts import COMPLEXITIES, STRATEGIES
from commonlink.kinds.association.concept_task import ConceptPerceptionTask, render_table4

ALL_STRATEGIES = ",".join(STRATEGIES)
ALL_COMPLEXITIES = ",".join(COMPLEXITIES)


def _split(value: str | None) -> list[str] | None:
    return [v.strip() for v in value.split(",") if v.strip()] if value else None


@reports_errors
def concept(
    data: DataOpt = ...,
    model: ModelsOpt = ...,
    backend: BackendOpt = None,
    strategy: StrategyOpt = ALL_STRATEGIES,
    complexity: str = typer.Option(
        ALL_COMPLEXITIES,
        "--complexity",
        help="Task complexities, comma-separated: task (TaskInstr), meta (MetaInstr), task+ded, meta+ded (w/ DedPo).",
    ),
    deduction_rule: DeductionRuleOpt = "all-shared",
    out: OptionalOutOpt = None,
    revision: RevisionOpt = None,
    batch_size: BatchSizeOpt = None,
    limit: LimitOpt = None,
    max_new_tokens: MaxNewTokensOpt = GenerationSettings.max_new_tokens,
    temperature: TemperatureOpt = 0.0,
    top_p: TopPOpt = 1.0,
    seed: SeedOpt = 0,
    max_pixels: MaxPixelsOpt = DEFAULT_MAX_PIXELS,
    system_prompt: SystemPromptOpt = None,
    gen_arg: GenArgOpt = None,
    backend_arg: BackendArgOpt = None,
    trust_remote_code: TrustRemoteCodeOpt = False,
    concurrency: ConcurrencyOpt = None,
    bootstrap: BootstrapOpt = N_BOOTSTRAP,
    quiet: QuietOpt = False,
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
    generation = generation_settings(
        max_new_tokens, temperature, top_p, seed, max_pixels, system_prompt=system_prompt, gen_args=gen_arg
    )
    backend = run_backend(model, backend, backend_arg, trust_remote_code=trust_remote_code, concurrency=concurrency)
    out = out or default_out_dir("grid", "+".join(model), backend, task="concept")
    runs = []
    for name in model:
        task = ConceptPerceptionTask(
            data,
            strategies=_split(strategy),
            complexities=_split(complexity),
            revision=revision,
            deduction_rule=deduction_rule,
            seed=seed,
            catalog_root=catalog_root,
        )
        folder = out / default_out_dir("grid", name, backend, task="concept").name if len(model) > 1 else out
        runs.append(
            run_task(
                task,
                folder,
                cli_run_options(
                    [name],
                    backend,
                    folder,
                    generation,
                    batch_size=batch_size,
                    limit=limit,
                    backend_arg=backend_arg,
                    trust_remote_code=trust_remote_code,
                    concurrency=concurrency,
                    seed=seed,
                    bootstrap=bootstrap,
                    quiet=quiet,
                    run_name=run_name[len(runs)] if run_name else None,
                    report=False,
                ),
            )
        )
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
