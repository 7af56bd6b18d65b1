"""``commonlink eval commono|perception|score|compare``: thin CLI over :mod:`commonlink.eval`."""

from __future__ import annotations

import contextlib
from pathlib import Path

import typer

from commonlink.commands._common import CATALOG_ROOT_HELP, QUIET, console, parse_range, reports_errors
from commonlink.commands.eval_summary import print_estimate, print_summary, report_line
from commonlink.errors import InputError
from commonlink.eval.backends import GenerationSettings, is_baseline, parse_key_values
from commonlink.eval.cache import shard_suffix
from commonlink.eval.commono import CommonOTask, score_predictions
from commonlink.eval.compare import RowSetMismatch, compare_runs, render_comparison
from commonlink.eval.evaluator import RunOptions, default_out_dir, evaluate
from commonlink.eval.perception import PerceptionTask
from commonlink.eval.report.html import write_report
from commonlink.eval.report.tables import render_markdown_table
from commonlink.eval.scored import MAX_UNPARSEABLE_SHARE, UnparseableError
from commonlink.eval.task import Task
from commonlink.fileio import atomic_write_text
from commonlink.formats.catalog_refs import CATALOG_ROOT_OPTION
from commonlink.locks import output_lock
from commonlink.sharding import parse_shard

__all__ = ["report_line"]  # moved to eval_summary, still importable from here

DEFAULT_BACKEND = "transformers"
_BACKEND_HELP = (
    "transformers (local; image-text-to-text, vision2seq or causal-LM models) | vllm (GPU, optional extra) | "
    "openai (any OpenAI-compatible server) | any name added with commonlink.eval.backends.register_backend."
)
_MODEL_HELP = (
    "Hub id or local folder of the model (server model name for --backend openai); 'random' or 'none' for a "
    "weight-free baseline."
)
#: Generation settings that have their own option (a --gen-arg may not set them behind its back).
_OWN_GENERATION_OPTIONS = {
    "max_new_tokens": "--max-new-tokens",
    "temperature": "--temperature",
    "top_p": "--top-p",
    "seed": "--seed",
    "max_pixels": "--max-pixels",
    "system_prompt": "--system-prompt",
}


def generation_settings(
    max_new_tokens: int,
    temperature: float,
    top_p: float,
    seed: int,
    max_pixels: int,
    *,
    system_prompt: str | None = None,
    gen_args: list[str] | None = None,
) -> GenerationSettings:
    if max_new_tokens < 1:
        raise InputError(f"--max-new-tokens {max_new_tokens} must be at least 1.")
    if temperature < 0:
        raise InputError(f"--temperature {temperature} must be >= 0 (0 = greedy).")
    if not 0 < top_p <= 1:
        raise InputError(f"--top-p {top_p} must be in (0, 1].", "e.g. --top-p 0.9 (1 = no nucleus cut).")
    if max_pixels < 0:
        raise InputError(f"--max-pixels {max_pixels} must be >= 0 (0 = no cap).")
    extra = parse_key_values(gen_args or [], option="--gen-arg")
    for key in extra:
        if key in _OWN_GENERATION_OPTIONS:
            raise InputError(
                f"--gen-arg {key}=... duplicates an option.", f"Use {_OWN_GENERATION_OPTIONS[key]} instead."
            )
    return GenerationSettings(
        max_new_tokens=max_new_tokens,
        temperature=temperature,
        top_p=top_p,
        seed=seed,
        max_pixels=max_pixels,
        system_prompt=system_prompt or None,
        extra=extra,
    )


def backend_options(
    backend: str, backend_args: list[str] | None, *, trust_remote_code: bool = False, concurrency: int | None = None
) -> dict:
    """The backend's options from ``--backend-arg KEY=VALUE`` (repeatable), ``--trust-remote-code`` and
    ``--concurrency``; each backend checks the names it is given (docs/eval.md lists them)."""
    options = parse_key_values(backend_args or [], option="--backend-arg")
    if trust_remote_code:
        options["trust_remote_code"] = True
    if concurrency is not None:
        if backend != "openai":
            raise InputError(
                f"--concurrency applies to --backend openai, not {backend}.", "Use --batch-size for local backends."
            )
        options["concurrency"] = concurrency
    return options


def cli_run_options(
    models: list[str],
    backend: str,
    out: Path,
    settings: GenerationSettings,
    *,
    batch_size: int | None,
    limit: int | None,
    backend_arg: list[str] | None,
    trust_remote_code: bool,
    concurrency: int | None,
    seed: int,
    bootstrap: int,
    quiet: bool,
    run_name: str | None,
    dry_run: bool = False,
    **command_options,
) -> RunOptions:
    """The :class:`RunOptions` of an eval command from the options every eval command shares;
    ``command_options``: the command's own (rows, shard, report, overwrite, ...)."""
    return RunOptions(
        models=list(models),
        backend=backend,
        out_dir=out,
        settings=settings,
        batch_size=batch_size,
        limit=limit,
        backend_options=backend_options(
            backend, backend_arg, trust_remote_code=trust_remote_code, concurrency=concurrency
        ),
        seed=seed,
        n_boot=bootstrap,
        show_progress=not quiet,
        run_name=run_name,
        dry_run=dry_run,
        on_estimate=print_estimate,
        **command_options,
    )


def run_backend(
    models: str | list[str],
    backend: str | None,
    backend_args: list[str] | None,
    *,
    trust_remote_code: bool = False,
    concurrency: int | None = None,
) -> str:
    """The backend a run uses (``--backend``, default transformers). A weight-free baseline (``--model random|none``,
    every model of the run) runs on no backend: backend options given with it are refused, not silently ignored."""
    models = [models] if isinstance(models, str) else list(models)
    if models and all(is_baseline(m) for m in models):
        given = [
            name
            for name, value in (
                ("--backend", backend),
                ("--backend-arg", backend_args),
                ("--trust-remote-code", trust_remote_code),
                ("--concurrency", concurrency),
            )
            if value
        ]
        if given:
            raise InputError(
                f"--model {models[0]} is a weight-free baseline: it runs on no backend, so {', '.join(given)} "
                "would be ignored.",
                f"Leave out {', '.join(given)}, or pass a model id or folder to run on a backend.",
            )
    return backend or DEFAULT_BACKEND


# Options shared by every eval command that runs a model (one definition, reused in each signature).
DATA = typer.Option("facebook/Common-O", "--data", help="Hub dataset id, release folder or parquet file.")
SPLIT = typer.Option(
    "main", "--split", help="main (Common-O Bench) or challenge (Common-O Complex), or any split of a local release."
)
REVISION = typer.Option(None, "--revision", help="Hub revision (tag, branch or commit) of the dataset.")
MODEL = typer.Option(..., "--model", help=_MODEL_HELP)
BACKEND = typer.Option(None, "--backend", show_default=False, help=_BACKEND_HELP + " Default: transformers.")
BATCH_SIZE = typer.Option(
    None,
    "--batch-size",
    min=1,
    help="Requests per model call (default: the backend's safe setting; 1 for transformers).",
)
ROWS = typer.Option(None, "--rows", help="Row range LOW-HIGH (inclusive), e.g. 0-99.")
SHARD = typer.Option(
    None,
    "--shard",
    help="K/N: take rows K, K+N, ... (one process per GPU, same --out); rerun without --shard to merge.",
)
TEMPERATURE = typer.Option(0.0, "--temperature", help="0 = greedy decoding (the paper's setting).")
TOP_P = typer.Option(1.0, "--top-p", help="Nucleus sampling (only with --temperature > 0).")
SEED = typer.Option(
    0, "--seed", help="Seed for sampling, the random baseline, question draws and bootstrap resampling."
)
MAX_PIXELS = typer.Option(
    1_048_576, "--max-pixels", help="Downscale each image (aspect kept) to at most this many pixels; 0 = no cap."
)
SYSTEM_PROMPT = typer.Option(
    None, "--system-prompt", help="A system message sent before every request (part of the cache key)."
)
GEN_ARG = typer.Option(
    [],
    "--gen-arg",
    help="Decoding option KEY=VALUE for the backend's generate call (repeatable), e.g. top_k=20, "
    "repetition_penalty=1.05.",
)
BACKEND_ARG = typer.Option(
    [],
    "--backend-arg",
    help=(
        "Backend option KEY=VALUE (repeatable; JSON values), e.g. dtype=bfloat16, processor.max_pixels=1003520, "
        "adapter=minicpm-chat, tensor_parallel_size=2, base_url=http://localhost:8000/v1, api_key_env=MY_KEY. "
        "See docs/eval.md."
    ),
)
TRUST_REMOTE_CODE = typer.Option(
    False, "--trust-remote-code", help="Allow model repos to run their own code (only for models you trust)."
)
CONCURRENCY = typer.Option(None, "--concurrency", min=1, help="openai: requests in flight at once (default 8).")
IMAGE_PROTOCOL = typer.Option(
    "shorter-side-384",
    "--image-protocol",
    help="Image sizing: shorter-side-384 (the paper's, default), shorter-side-N, native, or max-pixels-N.",
)
BOOTSTRAP = typer.Option(1000, "--bootstrap", min=2, help="Bootstrap resamples for standard errors.")
NO_REPORT = typer.Option(
    False, "--no-report", help="Do not write report.html (the HTML page of predictions with images) beside the results."
)
RUN_NAME = typer.Option(
    None,
    "--run-name",
    help="What tables and reports call this run (default: the model and the settings that set it apart); kept in "
    "results.json.",
)
MAX_UNPARSEABLE = typer.Option(
    MAX_UNPARSEABLE_SHARE,
    "--max-unparseable-share",
    help="Fail (exit 1, files written) when more than this share of the answers cannot be parsed, or none can.",
)
ALLOW_UNPARSEABLE = typer.Option(
    False, "--allow-unparseable", help="Accept a run past --max-unparseable-share (it is still warned about)."
)
DRY_RUN = typer.Option(
    False, "--dry-run", help="Only print what the run would send (requests, images, estimated tokens); send nothing."
)
OVERWRITE = typer.Option(
    False,
    "--overwrite",
    help="Replace the results of another run (other model, data or settings) in --out; only the eval's own files are "
    "removed.",
)


def run_folder_lock(out: Path, shard: tuple[int, int] | None = None):
    """One process per run folder and shard: a second one writing the same results files is refused."""
    return output_lock(Path(out) / f"results{shard_suffix(shard)}.json", what="commonlink eval")


def run_task(task: Task, out: Path, options: RunOptions, show=None) -> dict:
    """Run ``task`` with the evaluator (:func:`commonlink.eval.evaluator.evaluate`), holding the run folder's lock;
    ``show(results)`` prints its summary, also before a run refused for unparseable answers fails."""
    if options.dry_run:  # nothing is sent or written: say what the run would send, and stop
        return evaluate(task, options)
    try:
        with run_folder_lock(out, options.shard):
            results = evaluate(task, options)
    except UnparseableError as exc:
        if show is not None:
            show(exc.results)
        raise
    if show is not None:
        show(results)
    return results


def parse_rows(rows: str | None) -> tuple[int, int] | None:
    return parse_range(rows, option="--rows") if rows else None


@reports_errors
def commono(
    model: str = MODEL,
    data: str = DATA,
    split: str = SPLIT,
    backend: str = BACKEND,
    out: Path = typer.Option(
        None,
        "--out",
        "-o",
        help="Output folder (default eval-runs/commono-DATA-SPLIT-MODEL-BACKEND). Rerun with the same folder to "
        "resume.",
    ),
    revision: str = REVISION,
    batch_size: int = BATCH_SIZE,
    limit: int = typer.Option(None, "--limit", min=1, help="Only the first N rows (of --rows if given)."),
    rows: str = ROWS,
    shard: str = SHARD,
    max_new_tokens: int = typer.Option(
        GenerationSettings.max_new_tokens,
        "--max-new-tokens",
        help="Generation length cap (reasoning models need room).",
    ),
    temperature: float = TEMPERATURE,
    top_p: float = TOP_P,
    seed: int = SEED,
    max_pixels: int = MAX_PIXELS,
    concat_images: bool = typer.Option(
        False, "--concat-images", help="Single-image models: both images side by side, with the paper's second prompt."
    ),
    image_protocol: str = IMAGE_PROTOCOL,
    question: str = typer.Option(
        "dataset",
        "--question",
        help="dataset: a row's own question verbatim (prompt built only for rows without one); built: always the "
        "paper's prompt.",
    ),
    max_unreadable_share: float = typer.Option(
        0.05,
        "--max-unreadable-share",
        help="Stop when more than this share of the rows cannot be read (1 = never stop).",
    ),
    system_prompt: str = SYSTEM_PROMPT,
    gen_arg: list[str] = GEN_ARG,
    backend_arg: list[str] = BACKEND_ARG,
    trust_remote_code: bool = TRUST_REMOTE_CODE,
    concurrency: int = CONCURRENCY,
    similarity: bool = typer.Option(
        False,
        "--similarity",
        help="Add the object-similarity analyses: common-object similarity vs accuracy (Table 6) and hallucination by "
        "distractor similarity (§4.2); character trigrams unless --similarity-model.",
    ),
    similarity_model: str = typer.Option(
        None, "--similarity-model", help="Embedding model folder/id for the similarity analysis (transformers encoder)."
    ),
    bootstrap: int = BOOTSTRAP,
    quiet: bool = QUIET,
    no_report: bool = NO_REPORT,
    overwrite: bool = OVERWRITE,
    run_name: str = RUN_NAME,
    max_unparseable_share: float = MAX_UNPARSEABLE,
    allow_unparseable: bool = ALLOW_UNPARSEABLE,
    dry_run: bool = DRY_RUN,
) -> None:
    """Score a model on a Common-O split; writes results.json, predictions.jsonl, results.md and report.html."""

    backend = run_backend(model, backend, backend_arg, trust_remote_code=trust_remote_code, concurrency=concurrency)
    out = out or default_out_dir(split, model, backend, data=data)
    task = CommonOTask(
        data,
        split,
        revision=revision,
        concat_images=concat_images,
        image_protocol=image_protocol,
        question=question,
        similarity=similarity,
        similarity_model=similarity_model,
    )
    settings = generation_settings(
        max_new_tokens, temperature, top_p, seed, max_pixels, system_prompt=system_prompt, gen_args=gen_arg
    )
    run_task(
        task,
        out,
        cli_run_options(
            [model],
            backend,
            out,
            settings,
            batch_size=batch_size,
            limit=limit,
            backend_arg=backend_arg,
            trust_remote_code=trust_remote_code,
            concurrency=concurrency,
            seed=seed,
            bootstrap=bootstrap,
            quiet=quiet,
            run_name=run_name,
            rows=parse_rows(rows),
            shard=parse_shard(shard),
            report=not no_report,
            max_unreadable_share=max_unreadable_share,
            overwrite=overwrite,
            max_unparseable_share=max_unparseable_share,
            allow_unparseable=allow_unparseable,
            dry_run=dry_run,
        ),
        show=lambda results: print_summary(results, out, render_markdown_table, shard),
    )


@reports_errors
def perception(
    model: str = MODEL,
    data: str = DATA,
    split: str = SPLIT,
    backend: str = BACKEND,
    out: Path = typer.Option(
        None,
        "--out",
        "-o",
        help="Output folder (default eval-runs/perception-DATA-SPLIT-MODEL-BACKEND). Rerun with the same folder to "
        "resume.",
    ),
    revision: str = REVISION,
    batch_size: int = BATCH_SIZE,
    limit: int = typer.Option(
        None, "--limit", min=1, help="Only the first N rows (one question per choice object for each image)."
    ),
    rows: str = ROWS,
    shard: str = SHARD,
    max_new_tokens: int = typer.Option(
        GenerationSettings.max_new_tokens,
        "--max-new-tokens",
        help="Generation length cap (as for commono: reasoning models need room).",
    ),
    temperature: float = TEMPERATURE,
    top_p: float = TOP_P,
    seed: int = SEED,
    max_pixels: int = MAX_PIXELS,
    image_protocol: str = IMAGE_PROTOCOL,
    yes_no_hint: bool = typer.Option(
        False, "--yes-no-hint", help="Add ' Answer yes or no.' to the paper's question (off: the paper's wording)."
    ),
    system_prompt: str = SYSTEM_PROMPT,
    gen_arg: list[str] = GEN_ARG,
    backend_arg: list[str] = BACKEND_ARG,
    trust_remote_code: bool = TRUST_REMOTE_CODE,
    concurrency: int = CONCURRENCY,
    bootstrap: int = BOOTSTRAP,
    quiet: bool = QUIET,
    overwrite: bool = OVERWRITE,
    run_name: str = RUN_NAME,
    max_unparseable_share: float = MAX_UNPARSEABLE,
    allow_unparseable: bool = ALLOW_UNPARSEABLE,
    dry_run: bool = DRY_RUN,
) -> None:
    """Single-image baseline (paper §4.1, Fig. 3): "Is OBJECT in this image?" for every choice object, on each image."""

    backend = run_backend(model, backend, backend_arg, trust_remote_code=trust_remote_code, concurrency=concurrency)
    out = out or default_out_dir(split, model, backend, task="perception", data=data)
    task = PerceptionTask(data, split, revision=revision, image_protocol=image_protocol, yes_no_hint=yes_no_hint)
    settings = generation_settings(
        max_new_tokens, temperature, top_p, seed, max_pixels, system_prompt=system_prompt, gen_args=gen_arg
    )
    run_task(
        task,
        out,
        cli_run_options(
            [model],
            backend,
            out,
            settings,
            batch_size=batch_size,
            limit=limit,
            backend_arg=backend_arg,
            trust_remote_code=trust_remote_code,
            concurrency=concurrency,
            seed=seed,
            bootstrap=bootstrap,
            quiet=quiet,
            run_name=run_name,
            rows=parse_rows(rows),
            shard=parse_shard(shard),
            overwrite=overwrite,
            max_unparseable_share=max_unparseable_share,
            allow_unparseable=allow_unparseable,
            dry_run=dry_run,
        ),
        show=lambda results: print_summary(results, out, render_markdown_table, shard),
    )


@reports_errors
def score(
    predictions: Path = typer.Argument(
        ..., help="predictions.jsonl of a Common-O run, an lmms-eval samples file, or a VLMEvalKit prediction file."
    ),
    data: str = typer.Option(
        None,
        "--data",
        help="Dataset to take choices and ground truth from (authoritative; rows are read without their images); "
        "default: the predictions file's own copy.",
    ),
    split: str = typer.Option(
        None,
        "--split",
        help="Split of --data the file was made on (default: the one the file names: a harness file's name, the "
        "results.json beside our predictions; else main). A file made on another split or release is refused.",
    ),
    revision: str = REVISION,
    seed: int = typer.Option(0, "--seed", help="Bootstrap seed."),
    bootstrap: int = BOOTSTRAP,
    out: Path = typer.Option(None, "--out", "-o", help="Also write results.json/predictions.jsonl/results.md here."),
    run_name: str = typer.Option(
        None, "--run-name", help="What tables and reports call this run (default: the run's own name, or the file's)."
    ),
) -> None:
    """Recompute all metrics from a predictions file (raw outputs are parsed again) against the dataset: our
    predictions.jsonl, lmms-eval's *_samples_<task>.jsonl or VLMEvalKit's prediction file (xlsx/tsv/json)."""

    with run_folder_lock(out) if out is not None else contextlib.nullcontext():
        results = score_predictions(
            predictions, data, split, revision=revision, seed=seed, n_boot=bootstrap, out_dir=out, run_name=run_name
        )
    console.print(render_markdown_table(results, breakdowns=True), highlight=False, markup=False, soft_wrap=True)


@reports_errors
def compare(
    results: list[Path] = typer.Argument(
        ..., help="results.json files or run folders (any task: one table per task and split or config)."
    ),
    fmt: str = typer.Option("md", "--format", help="md (markdown tables) | csv | json."),
    markdown: Path = typer.Option(None, "--markdown", help="Also write the comparison (in --format) to this file."),
    html: Path = typer.Option(
        None,
        "--html",
        help="Also write the runs' HTML report, side by side (Common-O runs on the same split; see `eval report`).",
    ),
) -> None:
    """Runs side by side under their names, best first, one table per task, split and data (runs on different
    data are never ranked together); runs over different rows are compared on the rows they share (Common-O,
    perception, single-step and deduction) or refused, with the reason, while the other tables are still printed."""

    comparison = compare_runs(results)
    text = render_comparison(comparison, fmt)
    console.print(text, highlight=False, markup=False, soft_wrap=True)
    if markdown:
        atomic_write_text(markdown, text + "\n")
    if html and comparison.tables:
        console.print(
            f"Report: {report_line(write_report([r['path'] for t in comparison.tables for r in t.rows], html))}",
            highlight=False,
            soft_wrap=True,
        )
    if comparison.refused:
        raise RowSetMismatch(
            f"{len(comparison.refused)} group(s) of runs could not be compared: " + " | ".join(comparison.refused),
            "The other groups' tables are printed above; rerun the refused runs on the same rows and data.",
        )


@reports_errors
def report(
    runs: list[Path] = typer.Argument(
        ...,
        help="Run folders (or their results.json) of one task; several Common-O runs on the same split are shown side "
        "by side, other tasks' runs by their metrics.",
    ),
    out: Path = typer.Option(
        None,
        "--out",
        "-o",
        help="The page to write (default: RUN_DIR/report.html for one run; needed for several). Thumbnails go in "
        "OUT_STEM_files/ beside it.",
    ),
    data: str = typer.Option(
        None, "--data", help="Dataset to read the images from (default: the one results.json records)."
    ),
    revision: str = REVISION,
    images: str = typer.Option(
        "folder",
        "--images",
        help="folder (thumbnails beside the page) | embed (inside the page: one file, bigger) | none.",
    ),
    thumb_size: int = typer.Option(224, "--thumb-size", help="Longest side of a thumbnail, in pixels."),
    seed: int = typer.Option(0, "--seed", help="Seed of the random-mistakes table."),
    chain_steps: int = typer.Option(
        6, "--chain-steps", help="Association chains: steps shown before (and including) the one that ended the chain."
    ),
    max_output_chars: int = typer.Option(
        4000, "--max-output-chars", help="Cut longer model outputs on the page (predictions.jsonl keeps them whole)."
    ),
    quiet: bool = QUIET,
    catalog_root: Path = typer.Option(None, CATALOG_ROOT_OPTION, help=CATALOG_ROOT_HELP),
) -> None:
    """Write a static HTML page of a run's predictions with their images: metrics, charts, filterable cards,
    random mistakes."""

    summary = write_report(
        runs,
        out,
        data=data,
        revision=revision,
        images=images,
        thumb_size=thumb_size,
        seed=seed,
        chain_steps=chain_steps,
        max_output_chars=max_output_chars,
        show_progress=not quiet,
        catalog_root=catalog_root,
    )
    console.print(f"Report: {report_line(summary)}", highlight=False, soft_wrap=True)
