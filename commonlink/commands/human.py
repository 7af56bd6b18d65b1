"""``commonlink human study|agreement``: human baselines (thin CLI over :mod:`commonlink.human`). A person's answers
file is scored with ``commonlink eval score ANSWERS --data RELEASE --split SPLIT``."""

from __future__ import annotations

import functools
from pathlib import Path

import typer

from commonlink.commands._common import console, reports_errors
from commonlink.commands._options import (
    BootstrapOpt,
    DataOpt,
    ImageProtocolOpt,
    MemoryOpt,
    NoDeductionOpt,
    OptionalOutOpt,
    OutOpt,
    ProtocolOpt,
    QuestionOpt,
    RevisionOpt,
    SeedOpt,
    SplitOpt,
    StrategyOpt,
    StudyTaskOpt,
)
from commonlink.errors import InputError
from commonlink.eval.report.html import REPORT_FILENAME
from commonlink.eval.report.tables import render_markdown_table
from commonlink.fileio import atomic_write_json
from commonlink.human.agreement import agreement_of_files
from commonlink.human.answers import default_run_dir, is_human_answers, read_answers, score_answers
from commonlink.human.items import study_spec
from commonlink.human.study import write_study
from commonlink.kinds.association.task import AssociationSettings
from commonlink.locks import output_lock


@reports_errors
def study(
    data: str = typer.Argument(..., help="Release folder, parquet file, Hub id, or chain-files folder."),
    split: SplitOpt = ...,
    out: OutOpt = ...,
    task: StudyTaskOpt = "auto",
    annotators: str = typer.Option(
        None,
        "--annotators",
        help="Comma-separated names, each with its own seeded order and sample (default: one plan for whoever types "
        "a name).",
    ),
    seed: SeedOpt = 0,
    sample: int = typer.Option(
        None, "--sample", min=1, help="Units (rows, tasks or chains) per annotator; default all."
    ),
    revision: RevisionOpt = None,
    image_protocol: ImageProtocolOpt = "shorter-side-384",
    question: QuestionOpt = "dataset",
    memory: MemoryOpt = "structm",
    no_deduction: NoDeductionOpt = False,
    strategy: StrategyOpt = "normal",
    protocol: ProtocolOpt = "paper",
) -> None:
    """Write a static study page (no server; opens from disk) in which people answer a split as a model does.

    --split: a Common-O split (main, challenge, or any split of the release), or an association config
    (single_step, deduction, synchronous, asynchronous). --out: the folder for index.html and images/. --seed: of
    each annotator's order and sample. --image-protocol and --question as for `eval commono` (the model's view);
    --memory, --no-deduction (single_step; chains are always played without it), --strategy and --protocol as for
    `eval association` (paper: chains played from the harness's first scored step, images 336x336, deductions
    scored by the harness's rule).
    """

    settings = AssociationSettings(memory=memory, deduction=not no_deduction, strategy=strategy, protocol=protocol)
    spec = study_spec(split, task, image_protocol=image_protocol, question=question, settings=settings)
    names = [n.strip() for n in annotators.split(",")] if annotators else []
    summary = write_study(data, spec, out, revision=revision, annotators=names, seed=seed, sample=sample)
    console.print(
        f"Study {summary.study_id}: {summary.units} units, {summary.questions} questions, {summary.images} images. "
        f"Open {summary.path.resolve().as_uri()}",
        highlight=False,
        soft_wrap=True,
    )
    if spec.task == "association" and split in ("synchronous", "asynchronous"):
        console.print(
            "Chains are played without the deduction step: compare with `eval association ... --no-deduction "
            f"--memory {memory} --protocol {protocol}`.",
            highlight=False,
        )


@reports_errors
def agreement(
    answers: list[Path] = typer.Argument(..., help="Answers files exported from the study page (one per annotator)."),
    data: DataOpt = ...,
    split: SplitOpt = ...,
    revision: RevisionOpt = None,
    seed: SeedOpt = 0,
    bootstrap: BootstrapOpt = 1000,
    out: OptionalOutOpt = None,
) -> None:
    """Percent agreement with the labels and between annotators, and Fleiss' kappa, with bootstrap SEs.

    --data: the release the study was built from; --split: its split or association config. --seed and
    --bootstrap: the bootstrap over items for the SEs. --out: also write the figures as JSON there.
    """

    result = agreement_of_files(answers, data, split, revision=revision, n_boot=bootstrap, seed=seed)

    def line(label: str, figure: dict, pct: bool = True) -> str:
        if figure["value"] is None:
            return f"{label}: undefined (n = {figure['n']})"
        scale, unit = (100, "%") if pct else (1, "")
        se = f" ± {scale * figure['se']:.{1 if pct else 3}f}" if figure["se"] is not None else ""
        return f"{label}: {scale * figure['value']:.{1 if pct else 3}f}{unit}{se} (n = {figure['n']})"

    rows = [line("Agreement with the labels (pooled)", result["label_agreement"]["pooled"])]
    rows += [line(f"  {name}", f) for name, f in result["label_agreement"]["per_annotator"].items()]
    rows += [line(f"Agreement {' vs '.join(p['annotators'])}", p) for p in result["pairwise_agreement"]]
    if result["pairwise_agreement"]:
        rows.append(line("Mean pairwise agreement", result["mean_pairwise_agreement"]))
        rows.append(line("Fleiss' kappa", result["fleiss_kappa"], pct=False))
    rows += [f"Standard errors: {result['se_method']}.", f"Card sentence: {result['card_sentence']}"]
    console.print("\n".join(rows), highlight=False, markup=False, soft_wrap=True)
    if out:
        atomic_write_json(out, result)


def score_human(
    answers: Path,
    data: str | None,
    split: str | None,
    *,
    revision: str | None,
    out: Path | None,
    seed: int,
    n_boot: int,
    run_name: str | None,
) -> None:
    """``eval score ANSWERS`` for a person's answers file: a run folder named after them (default
    ``eval-runs/human-TASK-SPLIT-NAME``), holding the run folder's lock as every eval does."""
    if data is None:
        raise InputError(f"{answers} is a human answers file.", "Give the release of its study with --data.")
    out = Path(out) if out is not None else default_run_dir(read_answers(answers))
    with output_lock(out / "results.json", what="commonlink eval"):
        results, out = score_answers(
            answers, data, split, revision=revision, out_dir=out, seed=seed, n_boot=n_boot, run_name=run_name
        )
    console.print(render_markdown_table(results), highlight=False, markup=False, soft_wrap=True)
    human = results["human"]
    console.print(
        f"{human['annotator']}: {human['units_scored']} units scored from {human['items_answered']} answers "
        f"(median {human['answer_ms']['median']} ms an answer); {len(human['unfinished_units'])} begun but unfinished "
        f"(not scored). Results in {out}/",
        highlight=False,
        soft_wrap=True,
    )
    if (out / REPORT_FILENAME).is_file():
        console.print(f"Report: {(out / REPORT_FILENAME).resolve().as_uri()}", highlight=False, soft_wrap=True)


def scores_human_answers(score):
    """Wrap ``eval score``: a human answers file goes to :func:`score_human`, any other file to ``score``."""

    @functools.wraps(score)
    def wrapper(*args, **kwargs):
        if not args and is_human_answers(kwargs["predictions"]):
            options = {k: kwargs[k] for k in ("data", "split", "revision", "out", "seed", "run_name")}
            return score_human(kwargs["predictions"], n_boot=kwargs["bootstrap"], **options)
        return score(*args, **kwargs)

    return wrapper
