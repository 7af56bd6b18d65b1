"""``commonlink eval association``: thin CLI over :class:`commonlink.eval.association.AssociationTask` and the
evaluator."""

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
    NO_REPORT,
    QUIET,
    REVISION,
    RUN_NAME,
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
from commonlink.commands.eval_summary import print_fresh_report, print_warning
from commonlink.errors import BackendError, InputError
from commonlink.eval.association import AssociationSettings, AssociationTask
from commonlink.eval.evaluator import default_out_dir
from commonlink.formats.catalog_refs import CATALOG_ROOT_OPTION


@reports_errors
def association(
    data: str = typer.Option(
        ..., "--data", help="Association release folder, Hub repo id, or the chain-files folder of `commonlink chains`."
    ),
    config: str = typer.Option(..., "--config", help="single_step | deduction | synchronous | asynchronous."),
    model: list[str] = typer.Option(
        ..., "--model", help="Model id/folder, or 'random'. Repeat with --moe to combine several models."
    ),
    moe: bool = typer.Option(
        False, "--moe", help="Mixture of experts: ask every --model and take the majority answer at each step."
    ),
    backend: str | None = typer.Option(
        None,
        "--backend",
        show_default=False,
        help="transformers (default) | vllm | openai (the same for every --model); vllm is told 3 images a request.",
    ),
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
    max_steps: int = typer.Option(
        500, "--max-steps", min=1, help="A chain stops after this many correct scored steps."
    ),
    no_deduction: bool = typer.Option(
        False, "--no-deduction", help="Skip the deduction step (the memory then learns the gold concept)."
    ),
    strategy: str = typer.Option(
        "normal",
        "--strategy",
        help="Prompt strategy (Labyrinth §4.3): normal, comknow (concept knowledge in front), one-shot (a worked "
        "example in words), cot (that example with reasoning; answer on a last 'Answer:' line).",
    ),
    deduction_rule: str = typer.Option(
        "all-shared",
        "--deduction-rule",
        help="When a deduction counts (the paper does not say): all-shared (ours: names something, and only shared "
        "concepts), any-shared (names at least one shared concept), exact (names exactly the shared ones).",
    ),
    out: Path = typer.Option(
        None,
        "--out",
        "-o",
        help="Output folder (default eval-runs/association-DATA-CONFIG-MODEL-BACKEND); rerun it to resume.",
    ),
    revision: str = REVISION,
    batch_size: int = typer.Option(
        None,
        "--batch-size",
        min=1,
        help="Requests per model call (chains advance in lockstep; one step of every active chain is one batch).",
    ),
    limit: int = typer.Option(None, "--limit", min=1, help="Only the first N tasks or chains."),
    group_size: int = typer.Option(
        512,
        "--group-size",
        min=1,
        help="Tasks loaded and run together (chains of a group advance in lockstep); bounds memory.",
    ),
    max_new_tokens: int = typer.Option(64, "--max-new-tokens", help="Generation length cap."),
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
    no_report: bool = NO_REPORT,
    catalog_root: Path | None = typer.Option(None, CATALOG_ROOT_OPTION, help=CATALOG_ROOT_HELP),
    run_name: str = RUN_NAME,
    max_unparseable_share: float = MAX_UNPARSEABLE,
    allow_unparseable: bool = ALLOW_UNPARSEABLE,
    dry_run: bool = DRY_RUN,
) -> None:
    """Score models on association tasks (paper protocol): success ratios, or max | mean chain length."""

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
    out = out or default_out_dir(config, "+".join(model), backend, task="association", data=data)
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
            max_unparseable_share=max_unparseable_share,
            allow_unparseable=allow_unparseable,
            dry_run=dry_run,
        ),
        show=lambda results: _show(results, out),
    )
    if dry_run:
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
