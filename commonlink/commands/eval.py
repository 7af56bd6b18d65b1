"""``commonlink eval commono|perception|score|compare``: thin CLI over :mod:`commonlink.eval`."""

from __future__ import annotations

import contextlib
from pathlib import Path

import typer

from commonlink.commands._common import console, parse_range, reports_errors
from commonlink.commands._options import (
    AllowUnparseableOpt,
    BackendArgOpt,
    BackendOpt,
    BatchSizeOpt,
    BootstrapOpt,
    CatalogRootOpt,
    CompareFormatOpt,
    ConcurrencyOpt,
    DataOpt,
    DryRunOpt,
    GenArgOpt,
    ImageProtocolOpt,
    LimitOpt,
    MaxNewTokensOpt,
    MaxPixelsOpt,
    MaxUnparseableShareOpt,
    ModelOpt,
    NoReportOpt,
    OptionalOutOpt,
    OptionalSplitOpt,
    OverwriteOpt,
    QuestionOpt,
    QuietOpt,
    RevisionOpt,
    RowsOpt,
    RunNameOpt,
    SeedOpt,
    ShardOpt,
    SplitOpt,
    SystemPromptOpt,
    TemperatureOpt,
    ThumbSizeOpt,
    TopPOpt,
    TrustRemoteCodeOpt,
    expand_option_groups,
    option_group,
)
from commonlink.commands.eval_summary import print_estimate, print_summary, report_line
from commonlink.commands.human import scores_human_answers
from commonlink.errors import InputError
from commonlink.eval.backends import GenerationSettings, is_baseline, parse_key_values
from commonlink.eval.backends.base import DEFAULT_MAX_PIXELS
from commonlink.eval.cache import shard_suffix
from commonlink.eval.compare import RowSetMismatch, compare_runs, render_comparison
from commonlink.eval.evaluator import MAX_UNREADABLE_SHARE, RunOptions, default_out_dir
from commonlink.eval.metrics import N_BOOTSTRAP
from commonlink.eval.outputs import evaluate
from commonlink.eval.report.html import write_report
from commonlink.eval.report.tables import render_markdown_table
from commonlink.eval.scored import MAX_UNPARSEABLE_SHARE, UnparseableError
from commonlink.eval.task import Task
from commonlink.fileio import atomic_write_text
from commonlink.kinds.common_o.perception import PerceptionTask
from commonlink.kinds.common_o.task import CommonOTask, score_predictions
from commonlink.locks import output_lock
from commonlink.progress import datasets_bars
from commonlink.sharding import parse_shard

__all__ = ["report_line"]  # moved to eval_summary, still importable from here

DEFAULT_BACKEND = "transformers"


@option_group
class ModelRun:
    """How an eval command runs its models: the backend and its options, the generation settings, the scoring's
    bootstrap and the progress bars. :meth:`options` is the library's :class:`RunOptions` (it checks itself)."""

    backend: BackendOpt = None
    batch_size: BatchSizeOpt = None
    backend_arg: BackendArgOpt = None
    trust_remote_code: TrustRemoteCodeOpt = False
    concurrency: ConcurrencyOpt = None
    max_new_tokens: MaxNewTokensOpt = GenerationSettings.max_new_tokens
    temperature: TemperatureOpt = 0.0
    top_p: TopPOpt = 1.0
    seed: SeedOpt = 0
    max_pixels: MaxPixelsOpt = DEFAULT_MAX_PIXELS
    system_prompt: SystemPromptOpt = None
    gen_arg: GenArgOpt = None
    bootstrap: BootstrapOpt = N_BOOTSTRAP
    quiet: QuietOpt = False
    max_unparseable_share: MaxUnparseableShareOpt = MAX_UNPARSEABLE_SHARE
    allow_unparseable: AllowUnparseableOpt = False
    dry_run: DryRunOpt = False

    def backend_name(self, models: str | list[str]) -> str:
        """The backend the run uses (see :func:`run_backend`)."""
        given = {"trust_remote_code": self.trust_remote_code, "concurrency": self.concurrency}
        return run_backend(models, self.backend, self.backend_arg, **given)

    def generation(self) -> GenerationSettings:
        return GenerationSettings(
            max_new_tokens=self.max_new_tokens,
            temperature=self.temperature,
            top_p=self.top_p,
            seed=self.seed,
            max_pixels=self.max_pixels,
            system_prompt=self.system_prompt or None,
            extra=parse_key_values(self.gen_arg or [], option="--gen-arg"),
        )

    def options(self, models: list[str], out: Path, *, backend: str | None = None, **command_options) -> RunOptions:
        """The run's :class:`RunOptions` (``backend``: the one :meth:`backend_name` chose for all the command's
        models); ``command_options``: the command's own (limit, rows, shard, report, overwrite, run_name, ...)."""
        backend = backend or self.backend_name(models)
        given = {"trust_remote_code": self.trust_remote_code, "concurrency": self.concurrency}
        return RunOptions(
            models=list(models),
            backend=backend,
            out_dir=out,
            settings=self.generation(),
            batch_size=self.batch_size,
            backend_options=backend_options(backend, self.backend_arg, **given),
            seed=self.seed,
            n_boot=self.bootstrap,
            progress=not self.quiet,
            max_unparseable_share=self.max_unparseable_share,
            allow_unparseable=self.allow_unparseable,
            dry_run=self.dry_run,
            on_estimate=print_estimate,  # what the run sends, before the first request
            **command_options,
        )


@option_group
class CommonORows:
    """Which Common-O rows an eval command scores."""

    data: DataOpt = "facebook/Common-O"
    split: SplitOpt = "main"
    revision: RevisionOpt = None
    limit: LimitOpt = None
    rows: RowsOpt = None
    shard: ShardOpt = None

    def selection(self) -> dict:
        """The row selection of :class:`RunOptions` (limit, rows, shard)."""
        return {
            "limit": self.limit,
            "rows": parse_range(self.rows, option="--rows") if self.rows else None,
            "shard": parse_shard(self.shard),
        }


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


def run_folder_lock(out: Path, shard: tuple[int, int] | None = None):
    """One process per run folder and shard: a second one writing the same results files is refused."""
    return output_lock(Path(out) / f"results{shard_suffix(shard)}.json", what="commonlink eval")


def run_task(task: Task, out: Path, options: RunOptions, show=None) -> dict:
    """Run ``task`` with the evaluator (:func:`commonlink.eval.outputs.evaluate`), holding the run folder's lock;
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


@reports_errors
@expand_option_groups
def commono(
    model: ModelOpt = ...,
    data: CommonORows = CommonORows(),
    out: OptionalOutOpt = None,
    run: ModelRun = ModelRun(),
    concat_images: bool = typer.Option(
        False, "--concat-images", help="Single-image models: both images side by side, with the paper's second prompt."
    ),
    image_protocol: ImageProtocolOpt = "shorter-side-384",
    question: QuestionOpt = "dataset",
    max_unreadable_share: float = typer.Option(
        MAX_UNREADABLE_SHARE,
        "--max-unreadable-share",
        help="Stop when more than this share of the rows cannot be read (1 = never stop).",
    ),
    similarity: bool = typer.Option(
        False,
        "--similarity",
        help="Add the object-similarity analyses: common-object similarity vs accuracy (Table 6) and hallucination by "
        "distractor similarity (§4.2); character trigrams unless --similarity-model.",
    ),
    similarity_model: str = typer.Option(
        None, "--similarity-model", help="Embedding model folder/id for the similarity analysis (transformers encoder)."
    ),
    no_report: NoReportOpt = False,
    overwrite: OverwriteOpt = False,
    run_name: RunNameOpt = None,
) -> None:
    """Score a model on a Common-O split; writes results.json, predictions.jsonl, results.md and report.html.

    --out: the run folder (default eval-runs/commono-DATA-SPLIT-MODEL-BACKEND); rerun with the same folder to
    resume.
    """

    backend = run.backend_name(model)
    out = out or default_out_dir(data.split, model, backend, task="commono", data=data.data)
    task = CommonOTask(
        data.data,
        data.split,
        revision=data.revision,
        concat_images=concat_images,
        image_protocol=image_protocol,
        question=question,
        similarity=similarity,
        similarity_model=similarity_model,
    )
    own = {"report": not no_report, "max_unreadable_share": max_unreadable_share, "overwrite": overwrite}
    options = run.options([model], out, run_name=run_name, **own, **data.selection())
    run_task(task, out, options, show=lambda results: print_summary(results, out, render_markdown_table, data.shard))


@reports_errors
@expand_option_groups
def perception(
    model: ModelOpt = ...,
    data: CommonORows = CommonORows(),
    out: OptionalOutOpt = None,
    run: ModelRun = ModelRun(),
    image_protocol: ImageProtocolOpt = "shorter-side-384",
    yes_no_hint: bool = typer.Option(
        False, "--yes-no-hint", help="Add ' Answer yes or no.' to the paper's question (off: the paper's wording)."
    ),
    overwrite: OverwriteOpt = False,
    run_name: RunNameOpt = None,
) -> None:
    """Single-image baseline (paper §4.1, Fig. 3): "Is OBJECT in this image?" for every choice object, on each image.

    --out: the run folder (default eval-runs/perception-DATA-SPLIT-MODEL-BACKEND); rerun with the same folder to
    resume. --limit counts rows, each asked one question per choice object for each image.
    """

    backend = run.backend_name(model)
    out = out or default_out_dir(data.split, model, backend, task="perception", data=data.data)
    task = PerceptionTask(
        data.data, data.split, revision=data.revision, image_protocol=image_protocol, yes_no_hint=yes_no_hint
    )
    options = run.options([model], out, run_name=run_name, overwrite=overwrite, **data.selection())
    run_task(task, out, options, show=lambda results: print_summary(results, out, render_markdown_table, data.shard))


@reports_errors
@scores_human_answers  # a person's answers file (`commonlink human study`): a run folder named after them
def score(
    predictions: Path = typer.Argument(
        ..., help="predictions.jsonl of a Common-O run, lmms-eval samples, VLMEvalKit predictions, or human answers."
    ),
    data: DataOpt = None,
    split: OptionalSplitOpt = None,
    revision: RevisionOpt = None,
    seed: SeedOpt = 0,
    bootstrap: BootstrapOpt = N_BOOTSTRAP,
    out: OptionalOutOpt = None,
    run_name: RunNameOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Recompute all metrics from a predictions file (raw outputs are parsed again) against the dataset: our
    predictions.jsonl, lmms-eval's *_samples_<task>.jsonl or VLMEvalKit's prediction file (xlsx/tsv/json).

    --data: the dataset to take choices and ground truth from (authoritative; rows are read without their images);
    default: the predictions file's own copy. --split: the split the file was made on (default: the one the file
    names: a harness file's name, the results.json beside our predictions, a person's answers; else main); a file
    made on another split or release is refused. --seed: the bootstrap's. --out: also write results.json,
    predictions.jsonl and results.md there.
    """

    # it draws no bars of its own; --quiet (as on every command) also silences datasets' bars reading the data
    with run_folder_lock(out) if out is not None else contextlib.nullcontext(), datasets_bars(not quiet):
        results = score_predictions(
            predictions, data, split, revision=revision, seed=seed, n_boot=bootstrap, out_dir=out, run_name=run_name
        )
    console.print(render_markdown_table(results, breakdowns=True), highlight=False, markup=False, soft_wrap=True)


@reports_errors
def compare(
    results: list[Path] = typer.Argument(
        ..., help="results.json files or run folders (any task: one table per task and split or config)."
    ),
    fmt: CompareFormatOpt = "md",
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
    out: OptionalOutOpt = None,
    data: DataOpt = None,
    revision: RevisionOpt = None,
    images: str = typer.Option(
        "folder",
        "--images",
        help="folder (thumbnails beside the page) | embed (inside the page: one file, bigger) | none.",
    ),
    thumb_size: ThumbSizeOpt = 224,
    seed: SeedOpt = 0,
    chain_steps: int = typer.Option(
        6, "--chain-steps", help="Association chains: steps shown before (and including) the one that ended the chain."
    ),
    max_output_chars: int = typer.Option(
        4000, "--max-output-chars", help="Cut longer model outputs on the page (predictions.jsonl keeps them whole)."
    ),
    quiet: QuietOpt = False,
    catalog_root: CatalogRootOpt = None,
) -> None:
    """Write a static HTML page of a run's predictions with their images: metrics, charts, filterable cards,
    random mistakes.

    --out: the page to write (default: RUN_DIR/report.html for one run; needed for several); thumbnails go in
    OUT_STEM_files/ beside it. --data: the dataset to read the images from (default: the one results.json records).
    --seed: the random-mistakes table's.
    """

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
        progress=not quiet,
        catalog_root=catalog_root,
    )
    console.print(f"Report: {report_line(summary)}", highlight=False, soft_wrap=True)
