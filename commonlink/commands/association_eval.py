"""``commonlink eval association``: thin CLI over :class:`commonlink.kinds.association.task.AssociationTask` and the
evaluator."""

from __future__ import annotations

import json
from pathlib import Path

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
    MaxStepsOpt,
    ModelsOpt,
    NoReportOpt,
    OptionalOutOpt,
    QuietOpt,
    RevisionOpt,
    RunNameOpt,
    SeedOpt,
    StrategyOpt,
    SystemPromptOpt,
    TemperatureOpt,
    TopPOpt,
    TrustRemoteCodeOpt,
)
from commonlink.commands.eval import (
    cli_run_options,
    generation_settings,
    print_fresh_report,
    run_backend,
    run_task,
)
from commonlink.errors import BackendError, InputError
from commonlink.eval.backends.base import DEFAULT_MAX_PIXELS
from commonlink.eval.evaluator import default_out_dir
from commonlink.eval.metrics import N_BOOTSTRAP
from commonlink.kinds.association.task import AssociationSettings, AssociationTask


@reports_errors
def association(
    data: DataOpt = ...,
    config: str = typer.Option(..., "--config", help="single_step | deduction | synchronous | asynchronous."),
    model: ModelsOpt = ...,
    moe: bool = typer.Option(
        False, "--moe", help="Mixture of experts: ask every --model and take the majority answer at each step."
    ),
    backend: BackendOpt = None,
    memory: str = typer.Option(
        "structm",
        "--memory",
        help="Memory base: nom (none), structm (concept -> objects dict), nlm (sentences), chainm (obj->concept->obj "
        "subchains concatenated, last 5 kept).",
    ),
    repetition: float = typer.Option(1.0, "--repetition", help="Memory weight added when an entry is seen again."),
    forgetting: float = typer.Option(
        0.2, "--forgetting", help="Memory weight every other entry loses each step (dropped at 0)."
    ),
    chainm_window: int = typer.Option(
        5,
        "--chainm-window",
        min=0,
        help="ChainM: subchains kept (the authors' harness: 5; 0 = all, as the paper words it).",
    ),
    max_steps: MaxStepsOpt = 500,
    no_deduction: bool = typer.Option(
        False, "--no-deduction", help="Skip the deduction step (the memory then learns the gold concept)."
    ),
    strategy: StrategyOpt = "normal",
    deduction_rule: DeductionRuleOpt = "all-shared",
    out: OptionalOutOpt = None,
    revision: RevisionOpt = None,
    batch_size: BatchSizeOpt = None,
    limit: LimitOpt = None,
    group_size: int = typer.Option(
        512,
        "--group-size",
        min=1,
        help="Tasks loaded and run together (chains of a group advance in lockstep); bounds memory.",
    ),
    max_new_tokens: MaxNewTokensOpt = 64,
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
    no_report: NoReportOpt = False,
    catalog_root: CatalogRootOpt = None,
    run_name: RunNameOpt = None,
) -> None:
    """Score models on association tasks (paper protocol): success ratios, or max | mean chain length.

    --model: repeat it with --moe to combine several models (the same --backend for every one; vllm is told 3 images
    a request). --out: the run folder (default eval-runs/association-CONFIG-MODEL-BACKEND); rerun it to resume.
    --limit counts tasks or chains; --batch-size requests per model call (chains advance in lockstep: one step of
    every active chain is one batch).
    """

    if len(model) > 1 and not moe:
        raise InputError(
            f"{len(model)} --model options given without --moe.",
            "Add --moe to combine them by majority vote, or give one --model.",
        )
    if moe and len(model) < 2:
        raise InputError("--moe needs at least two --model options.", "e.g. --model A --model B --model C --moe")
    settings = AssociationSettings(
        memory=memory,
        repetition=repetition,
        forgetting=forgetting,
        max_steps=max_steps,
        deduction=not no_deduction,
        chainm_window=chainm_window,
        deduction_rule=deduction_rule,
        strategy=strategy,
    )
    generation = generation_settings(
        max_new_tokens, temperature, top_p, seed, max_pixels, system_prompt=system_prompt, gen_args=gen_arg
    )
    backend = run_backend(model, backend, backend_arg, trust_remote_code=trust_remote_code, concurrency=concurrency)
    out = out or default_out_dir(config, "+".join(model), backend, task="association")
    task = AssociationTask(
        data, config, settings=settings, revision=revision, group_size=group_size, catalog_root=catalog_root
    )
    run_task(
        task,
        out,
        cli_run_options(
            model,
            backend,
            out,
            generation,
            batch_size=batch_size,
            limit=limit,
            backend_arg=backend_arg,
            trust_remote_code=trust_remote_code,
            concurrency=concurrency,
            seed=seed,
            bootstrap=bootstrap,
            quiet=quiet,
            run_name=run_name,
            report=not no_report,
        ),
    )
    console.print((out / "results.md").read_text(encoding="utf-8"), highlight=False, markup=False)
    console.print(f"Wrote {out}/results.json, the per-step log and results.md.")
    print_fresh_report(out)
    fail_if_no_request_answered(json.loads((out / "results.json").read_text(encoding="utf-8")), out)


def fail_if_no_request_answered(results: dict, out: Path) -> None:
    """An association run in which every request failed (refused by an API, a dead server) scored nothing: it fails,
    as ``eval commono`` does, instead of exiting 0 with chains that all ended at their first step."""
    requests = results.get("requests") or {}
    if requests.get("failed") and not (requests.get("generated") or requests.get("from_cache")):
        raise BackendError(
            f"No request was answered: all {requests['failed']} failed, so no step was scored.",
            f"Check the model name, endpoint and backend options (the per-step log in {out} has every failed step), "
            "then rerun.",
        )
