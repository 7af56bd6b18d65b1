"""``commonlink eval association``: thin CLI over :func:`commonlink.eval.association.evaluate_association`."""

from __future__ import annotations

from pathlib import Path

import typer

from ..errors import InputError
from ._common import console, reports_errors
from .eval import _backend_options, _settings


@reports_errors
def association(
    data: str = typer.Option(..., "--data", help="Association release folder, Hub repo id, or the chain-files folder of `commonlink chains`."),
    config: str = typer.Option(..., "--config", help="single_step | deduction | synchronous | asynchronous."),
    model: list[str] = typer.Option(..., "--model", help="Model id/folder, or 'random'. Repeat with --moe to combine several models."),
    moe: bool = typer.Option(False, "--moe", help="Mixture of experts: ask every --model and take the majority answer at each step."),
    backend: str = typer.Option("transformers", "--backend", help="transformers | vllm | openai (the same for every --model)."),
    memory: str = typer.Option("structm", "--memory", help="Memory base: nom (none), structm (concept -> objects dict), nlm (sentences), chainm (last 5 links)."),
    repetition: float = typer.Option(1.0, "--repetition", help="Memory weight added when an entry is seen again."),
    forgetting: float = typer.Option(0.2, "--forgetting", help="Memory weight every other entry loses each step (dropped at 0)."),
    max_steps: int = typer.Option(500, "--max-steps", min=1, help="A chain stops after this many correct scored steps."),
    no_deduction: bool = typer.Option(False, "--no-deduction", help="Skip the deduction step (the memory then learns the gold concept)."),
    out: Path = typer.Option(None, "--out", help="Output folder (default eval-runs/association-CONFIG-MODEL-BACKEND); rerun it to resume."),
    revision: str = typer.Option(None, "--revision", help="Hub revision (tag, branch or commit) of the dataset."),
    model_revision: str = typer.Option(None, "--model-revision", help="Hub revision of the model(s)."),
    batch_size: int = typer.Option(None, "--batch-size", min=1, help="Requests per model call (chains advance in lockstep; one step of every active chain is one batch)."),
    limit: int = typer.Option(None, "--limit", min=1, help="Only the first N tasks or chains."),
    group_size: int = typer.Option(512, "--group-size", min=1, help="Tasks loaded and run together (chains of a group advance in lockstep); bounds memory."),
    max_new_tokens: int = typer.Option(64, "--max-new-tokens", help="Generation length cap."),
    temperature: float = typer.Option(0.0, "--temperature", help="0 = greedy."),
    top_p: float = typer.Option(1.0, "--top-p"),
    seed: int = typer.Option(0, "--seed", help="Seed for sampling, the random baseline and bootstrap."),
    max_pixels: int = typer.Option(1_048_576, "--max-pixels", help="Pixel cap per image; 0 = none."),
    dtype: str = typer.Option("auto", "--dtype"),
    device: str = typer.Option("auto", "--device"),
    trust_remote_code: bool = typer.Option(False, "--trust-remote-code", help="Allow model repos to run their own code (only models you trust)."),
    attn_implementation: str = typer.Option(None, "--attn-implementation"),
    base_url: str = typer.Option(None, "--base-url", help="openai: server URL."),
    api_key_env: str = typer.Option("OPENAI_API_KEY", "--api-key-env", help="openai: variable holding the key (never printed)."),
    concurrency: int = typer.Option(8, "--concurrency", min=1),
    max_retries: int = typer.Option(6, "--max-retries", min=0),
    tensor_parallel_size: int = typer.Option(1, "--tensor-parallel-size", min=1),
    data_parallel_size: int = typer.Option(1, "--data-parallel-size", min=1),
    max_model_len: int = typer.Option(None, "--max-model-len"),
    gpu_memory_utilization: float = typer.Option(0.9, "--gpu-memory-utilization"),
    vllm_arg: list[str] = typer.Option([], "--vllm-arg"),
    bootstrap: int = typer.Option(1000, "--bootstrap", min=2),
    quiet: bool = typer.Option(False, "--quiet"),
) -> None:
    """Score models on association tasks (paper protocol): success ratios, or max | mean chain length."""
    from ..eval.association import AssociationSettings, evaluate_association
    from ..eval.commono import default_out_dir

    if len(model) > 1 and not moe:
        raise InputError(f"{len(model)} --model options given without --moe.", "Add --moe to combine them by majority vote, or give one --model.")
    if moe and len(model) < 2:
        raise InputError("--moe needs at least two --model options.", "e.g. --model A --model B --model C --moe")
    settings = AssociationSettings(memory=memory, repetition=repetition, forgetting=forgetting, max_steps=max_steps, deduction=not no_deduction)
    generation = _settings(max_new_tokens, temperature, top_p, seed, max_pixels)
    out = out or default_out_dir(config, "+".join(model), backend, task="association")
    options = _backend_options(backend, revision=model_revision, dtype=dtype, device=device, trust_remote_code=trust_remote_code,
                               attn_implementation=attn_implementation, base_url=base_url, api_key_env=api_key_env, concurrency=concurrency,
                               max_retries=max_retries, tensor_parallel_size=tensor_parallel_size, data_parallel_size=data_parallel_size,
                               max_model_len=max_model_len, gpu_memory_utilization=gpu_memory_utilization, vllm_args=vllm_arg, seed=seed)
    evaluate_association(data, config, model, backend, out, settings=settings, generation=generation, revision=revision,
                                   batch_size=batch_size, limit=limit, group_size=group_size, backend_options=options, seed=seed, n_boot=bootstrap,
                                   show_progress=not quiet)
    console.print((out / "results.md").read_text(encoding="utf-8"), highlight=False, markup=False)
    console.print(f"Wrote {out}/results.json, the per-step log and results.md.")
