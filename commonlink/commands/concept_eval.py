"""``commonlink eval concept``: the concept-perception grid (Labyrinth of Links App. B, Table 4) for one or more
models, each a :class:`commonlink.eval.concept_perception.ConceptPerceptionTask` run by the evaluator; prints
the grid in Table 4's layout."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from commonlink.commands._common import CATALOG_ROOT_HELP, console, reports_errors
from commonlink.commands.eval import (
    ALLOW_UNPARSEABLE,
    BACKEND_ARG,
    BOOTSTRAP,
    CONCURRENCY,
    DRY_RUN,
    GEN_ARG,
    MAX_PIXELS,
    MAX_UNPARSEABLE,
    QUIET,
    REVISION,
    SEED,
    SYSTEM_PROMPT,
    TEMPERATURE,
    TOP_P,
    TRUST_REMOTE_CODE,
    cli_run_options,
    generation_settings,
    run_backend,
    run_task,
)
from commonlink.errors import InputError
from commonlink.eval.association import DEDUCTION_RULES
from commonlink.eval.backends import GenerationSettings
from commonlink.eval.concept_perception import ConceptPerceptionTask, render_table4
from commonlink.eval.concept_prompts import COMPLEXITIES, STRATEGIES
from commonlink.eval.evaluator import default_out_dir
from commonlink.eval.scored import scored_line
from commonlink.fileio import atomic_write_text
from commonlink.formats.catalog_refs import CATALOG_ROOT_OPTION

ALL_STRATEGIES = ",".join(STRATEGIES)
ALL_COMPLEXITIES = ",".join(COMPLEXITIES)


def _split(value: str | None) -> list[str] | None:
    return [v.strip() for v in value.split(",") if v.strip()] if value else None


@reports_errors
def concept(
    data: str = typer.Option(
        ...,
        "--data",
        help="Association release folder, Hub repo id, or the chain-files folder of `commonlink chains` (its "
        "single-step tasks are the rows).",
    ),
    model: list[str] = typer.Option(
        ..., "--model", help="Model id/folder, or 'random'; repeat for one Table 4 block per model."
    ),
    backend: str | None = typer.Option(
        None,
        "--backend",
        show_default=False,
        help="transformers (default) | vllm | openai (the same for every --model).",
    ),
    strategy: str = typer.Option(
        ALL_STRATEGIES, "--strategy", help=f"Strategies, comma-separated: {', '.join(STRATEGIES)}."
    ),
    complexity: str = typer.Option(
        ALL_COMPLEXITIES,
        "--complexity",
        help="Task complexities, comma-separated: task (TaskInstr), meta (MetaInstr), task+ded, meta+ded (w/ DedPo).",
    ),
    deduction_rule: str = typer.Option(
        "all-shared",
        "--deduction-rule",
        help=f"When a deduction counts: {', '.join(DEDUCTION_RULES)} (see docs/eval.md).",
    ),
    out: Path = typer.Option(
        None,
        "--out",
        "-o",
        help="Output folder (default eval-runs/concept-...); one subfolder per model; rerun to resume.",
    ),
    revision: str = REVISION,
    batch_size: int = typer.Option(None, "--batch-size", min=1, help="Requests per model call."),
    limit: int = typer.Option(None, "--limit", min=1, help="Only the first N single-step tasks."),
    max_new_tokens: int = typer.Option(
        GenerationSettings.max_new_tokens, "--max-new-tokens", help="Generation length cap (CoT needs room)."
    ),
    temperature: float = TEMPERATURE,
    top_p: float = TOP_P,
    seed: int = SEED,
    max_pixels: int = MAX_PIXELS,
    system_prompt: str = SYSTEM_PROMPT,
    gen_arg: list[str] = GEN_ARG,
    backend_arg: list[str] = BACKEND_ARG,
    trust_remote_code: bool = TRUST_REMOTE_CODE,
    concurrency: int = CONCURRENCY,
    bootstrap: int = BOOTSTRAP,
    quiet: bool = QUIET,
    catalog_root: Path | None = typer.Option(None, CATALOG_ROOT_OPTION, help=CATALOG_ROOT_HELP),
    run_name: list[str] = typer.Option(
        [], "--run-name", help="What tables and reports call each run (one per --model, in order; default: the model)."
    ),
    max_unparseable_share: float = MAX_UNPARSEABLE,
    allow_unparseable: bool = ALLOW_UNPARSEABLE,
    dry_run: bool = DRY_RUN,
) -> None:
    """Concept perception (paper App. B): success ratio per model x strategy x task complexity, as Table 4."""
    if run_name and len(run_name) != len(model):
        raise InputError(
            f"{len(run_name)} --run-name for {len(model)} --model.",
            "Give one --run-name per --model (in the same order), or none.",
        )
    generation = generation_settings(
        max_new_tokens, temperature, top_p, seed, max_pixels, system_prompt=system_prompt, gen_args=gen_arg
    )
    backend = run_backend(model, backend, backend_arg, trust_remote_code=trust_remote_code, concurrency=concurrency)
    out = out or default_out_dir("grid", "+".join(model), backend, task="concept", data=data)
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
                    max_unparseable_share=max_unparseable_share,
                    allow_unparseable=allow_unparseable,
                    dry_run=dry_run,
                ),
                show=lambda results: console.print(scored_line(results), highlight=False, markup=False),
            )
        )
    if dry_run:
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
