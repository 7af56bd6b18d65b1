"""``commonlink eval association``: thin CLI over :class:`commonlink.kinds.association.task.AssociationTask` and the
evaluator."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from commonlink.commands._common import console, reports_errors
from commonlink.commands._options import (
    CatalogRootOpt,
    DataOpt,
    DeductionRuleOpt,
    LimitOpt,
    MaxStepsOpt,
    MemoryOpt,
    ModelsOpt,
    NoDeductionOpt,
    NoReportOpt,
    OptionalOutOpt,
    ProtocolOpt,
    RevisionOpt,
    RunNameOpt,
    StrategyOpt,
    expand_option_groups,
)
from commonlink.commands.eval import ModelRun, run_task
from commonlink.commands.eval_summary import print_fresh_report, print_warning
from commonlink.errors import BackendError, InputError
from commonlink.eval.evaluator import default_out_dir
from commonlink.kinds.association.task import AssociationSettings, AssociationTask


@reports_errors
@expand_option_groups
def association(
    data: DataOpt = ...,
    config: str = typer.Option(..., "--config", help="single_step | deduction | synchronous | asynchronous."),
    model: ModelsOpt = ...,
    moe: bool = typer.Option(
        False, "--moe", help="Mixture of experts: ask every --model and take the majority answer at each step."
    ),
    run: ModelRun = ModelRun(max_new_tokens=64),
    memory: MemoryOpt = "structm",
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
    no_deduction: NoDeductionOpt = False,
    strategy: StrategyOpt = "normal",
    protocol: ProtocolOpt = "paper",
    deduction_rule: DeductionRuleOpt = None,
    image_size: int | None = typer.Option(
        None,
        "--image-size",
        min=0,
        show_default=False,
        help="Resize every image to this square side (default: the protocol's: 336 under paper, 0 = as stored "
        "under strict).",
    ),
    out: OptionalOutOpt = None,
    revision: RevisionOpt = None,
    limit: LimitOpt = None,
    group_size: int = typer.Option(
        512,
        "--group-size",
        min=1,
        help="Tasks loaded and run together (chains of a group advance in lockstep); bounds memory.",
    ),
    no_report: NoReportOpt = False,
    catalog_root: CatalogRootOpt = None,
    run_name: RunNameOpt = None,
) -> None:
    """Score models on association tasks: success ratios, or max | mean chain length.

    --protocol paper (the default) runs the authors' harness: 3 warm-up steps per concept with the model's own
    deductions in memory, the scored chain from a fresh concept-1 query (1,1,1,b,2,2,2,b), label-in-answer selection,
    the harness deduction rule, the harness word vote (--moe), 336x336 images; --protocol strict runs ours (gold
    warm-up memory, parsed answers, first-model tie-break, images as stored). --deduction-rule and --image-size
    override the protocol's choice (results.json records the protocol and every override).
    --model: repeat it with --moe to combine several models (the same --backend for every one; vllm is told 3 images
    a request). --out: the run folder (default eval-runs/association-DATA-CONFIG-MODEL-BACKEND); rerun it to resume.
    --limit counts tasks or chains, drawn across the concepts in turn (results.md says so); --batch-size requests
    per model call (chains advance in lockstep: one step of every active chain is one batch).
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
        protocol=protocol,
        image_size=image_size,
    )
    backend = run.backend_name(model)
    out = out or default_out_dir(config, "+".join(model), backend, task="association", data=data)
    task = AssociationTask(
        data, config, settings=settings, revision=revision, group_size=group_size, catalog_root=catalog_root
    )
    options = run.options(model, out, run_name=run_name, limit=limit, report=not no_report)
    run_task(task, out, options, show=lambda results: _show(results, out))
    if options.dry_run:
        return
    fail_if_no_request_answered(json.loads((out / "results.json").read_text(encoding="utf-8")), out)


def _show(results: dict, out: Path) -> None:
    console.print((out / "results.md").read_text(encoding="utf-8"), highlight=False, markup=False)
    console.print(f"Wrote {out}/results.json, the per-step log and results.md.")
    print_fresh_report(out)
    if (results.get("scored") or {}).get("warning"):
        print_warning(results["scored"]["warning"])


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
