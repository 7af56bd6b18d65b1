"""The files of a run, written by the caller after the evaluator returned (the evaluator and the tasks write none):

    >>> run = run_eval(task, options)        # commonlink.eval.evaluator: results, nothing written
    >>> write_run(run, report=True)          # the task's files (its ``writer``), then report.html
    >>> results = evaluate(task, options)    # both steps, as every ``evaluate_*`` and eval command does

A task names its writer (``Task.writer``: ``(run) -> None``, e.g. results.json, predictions.jsonl, results.md);
:func:`write_results` is the default (results.json and predictions.jsonl). ``report.html`` is written beside the
results of an unsharded run when the run asks for it and the task has a report page (``Task.writes_report``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from commonlink.eval.evaluator import EvalRun, RunOptions, run_eval
from commonlink.eval.report.html import report_beside_run
from commonlink.eval.scored import check_parsed
from commonlink.eval.task import Task
from commonlink.fileio import atomic_write_json, write_jsonl

__all__ = ["evaluate", "evaluate_with", "write_report_of", "write_results", "write_run"]


def write_results(run: EvalRun) -> None:
    """The default writer: ``results{suffix}.json`` and ``predictions{suffix}.jsonl`` (the outcome's records)."""
    write_jsonl(run.out_dir / f"predictions{run.suffix}.jsonl", run.outcome.records)
    atomic_write_json(run.out_dir / f"results{run.suffix}.json", run.results)


def write_report_of(run: EvalRun) -> None:
    """``report.html`` beside the results of an unsharded run of a task with a report page (a shard is a part: the
    merging run writes the page); a page that cannot be made is a warning, not a failed run."""
    if run.out_dir is not None and run.task.writes_report and run.shard is None:
        report_beside_run(run.out_dir, dataset=run.dataset)


def write_run(run: EvalRun, *, report: bool = True) -> None:
    """Everything a run writes into its folder: the task's files, then (``report``) ``report.html``."""
    if run.out_dir is None:
        return
    (run.task.writer or write_results)(run)
    if report:
        write_report_of(run)


def evaluate(task: Task, options: RunOptions) -> dict:
    """Run ``task`` as ``options`` say, write its files into ``options.out_dir`` (when given) and return its
    results: :func:`commonlink.eval.evaluator.run_eval`, then :func:`write_run`, then the parse check: a run where
    no answer could be parsed, or more than ``options.max_unparseable_share``, raises
    :class:`commonlink.eval.scored.UnparseableError` after its files are written, unless
    ``options.allow_unparseable`` (a ``dry_run`` returns the estimate only: nothing runs, nothing is written)."""
    run = run_eval(task, options)
    if options.dry_run:
        return run.results
    write_run(run, report=options.report)
    check_parsed(run.results, options.max_unparseable_share, allow=options.allow_unparseable)
    return run.results


def evaluate_with(make_task: Callable[..., Task], options: Mapping[str, Any], **run_fields) -> dict:
    """The body of an ``evaluate_*`` entry point whose keyword ``options`` are its task's and :class:`RunOptions`
    fields together: ``make_task(**the task's)`` run by :func:`evaluate` with ``RunOptions(**run_fields, **the
    rest)`` (the two share no name), so a task option is declared once, on its task class."""
    names = {f.name for f in dataclasses.fields(RunOptions)}
    task = make_task(**{k: v for k, v in options.items() if k not in names})
    return evaluate(task, RunOptions(**run_fields, **{k: v for k, v in options.items() if k in names}))
