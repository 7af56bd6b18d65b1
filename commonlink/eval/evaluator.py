"""The one evaluator: runs any :class:`commonlink.eval.task.Task` over the cached backend and returns its results.

    >>> from commonlink.kinds.common_o.task import CommonOTask
    >>> options = RunOptions(models=["Qwen/Qwen2.5-VL-7B-Instruct"], backend="vllm", out_dir="runs/qwen")
    >>> run = run_eval(CommonOTask("facebook/Common-O", "main"), options)   # run.results: results.json's content

Steps, the same for every task: validate the run options, open the data (:meth:`Task.open`), pick the rows
(``rows`` range, ``limit``, then ``shard``), load the backends lazily (a rerun whose answers are all cached never
loads weights), key the cache (:meth:`Task.key_parts` + :func:`commonlink.eval.cache.run_key`) and open it,
:meth:`Task.run`, and put the common head of results.json in front of :meth:`Task.results`. Nothing is written
here but the prediction cache: :func:`commonlink.eval.outputs.write_run` writes the task's files (its ``writer``) and
``report.html``, and :func:`commonlink.eval.outputs.evaluate` does both steps.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from commonlink.errors import InputError, check_at_least
from commonlink.eval.backends import is_baseline
from commonlink.eval.backends.base import Backend, GenerationSettings
from commonlink.eval.cache import run_key, shard_suffix
from commonlink.eval.estimate import RequestEstimate
from commonlink.eval.metrics import N_BOOTSTRAP
from commonlink.eval.results import results_header
from commonlink.eval.run_names import check_run_name, default_run_name
from commonlink.eval.runner import open_backends
from commonlink.eval.scored import MAX_UNPARSEABLE_SHARE, check_parsed, scored_counts
from commonlink.eval.task import Task, TaskRun

log = logging.getLogger(__name__)

__all__ = [
    "MAX_UNREADABLE_SHARE",
    "EvalRun",
    "RunOptions",
    "default_out_dir",
    "run_eval",
    "row_indices",
    "row_set_record",
    "unreadable_limit",
]

#: A run stops when more than this share of the requested rows cannot be read (``max_unreadable_share``).
MAX_UNREADABLE_SHARE = 0.05


@dataclass
class RunOptions:
    """How to run a task: which model(s) on which backend, where to write, and the run's knobs."""

    models: Sequence[str] = ("none",)  #: Hub ids / folders, or ``random`` / ``none``; several only for voting tasks
    backend: str = "transformers"
    out_dir: str | os.PathLike | None = None  #: run folder (rerun it to resume); None: results only returned
    settings: GenerationSettings | None = None  #: None: the task's default with ``seed``
    batch_size: int | None = None  #: None: the backends' default
    limit: int | None = None
    rows: tuple[int, int] | None = None  #: inclusive row range
    shard: tuple[int, int] | None = None  #: (K, N): rows K, K+N, ...
    backend_options: dict | None = None
    backend_instances: Sequence[Backend] | None = None  #: already loaded backends (the caller closes them)
    seed: int = 0
    n_boot: int = N_BOOTSTRAP
    progress: bool = True
    max_unreadable_share: float = MAX_UNREADABLE_SHARE
    report: bool = True  #: write report.html beside the results (unsharded runs)
    overwrite: bool = False  #: replace another run's files in ``out_dir``
    run_name: str | None = None  #: what tables and reports call the run (None: model + distinguishing settings)
    #: the run fails (:class:`commonlink.eval.scored.UnparseableError`, after writing) when more than this share of
    #: its answers could not be parsed, or none could
    max_unparseable_share: float = MAX_UNPARSEABLE_SHARE
    allow_unparseable: bool = False  #: accept such a run (its ``scored.warning`` says so)
    dry_run: bool = False  #: only estimate what the run would send (no backend is loaded, nothing is written)
    #: called with the :class:`commonlink.eval.estimate.RequestEstimate` (or None) before the first request
    on_estimate: Callable[[RequestEstimate | None], None] | None = None
    indices: Sequence[int] | None = None  #: exactly these rows, in this order (a person's sample); else the above

    def __post_init__(self) -> None:
        """Refuse what no run can do, in the CLI's words (the eval commands build this record)."""
        if not self.models:
            raise InputError("No model given.", "Pass --model MODEL (or random / none for a weight-free baseline).")
        check_at_least("--batch-size", self.batch_size, 1, "Leave it out for the backend's default.")
        check_at_least("--limit", self.limit, 1)
        check_at_least("--bootstrap", self.n_boot, 2, "e.g. --bootstrap 1000.")
        if not 0 <= self.max_unreadable_share <= 1:
            raise InputError(
                f"--max-unreadable-share {self.max_unreadable_share} must be in [0, 1].", "e.g. 0.05 (1 = never stop)."
            )
        check_parsed({}, self.max_unparseable_share)  # a share outside [0, 1] is refused here, like the others
        check_run_name(self.run_name)


@dataclass
class EvalRun:
    """What a run returns: ``results`` (results.json's content) and what the task's writer needs besides."""

    task: Task
    results: dict
    outcome: object  #: what :meth:`Task.run` returned (``records``, ...)
    dataset: object  #: the split :meth:`Task.open` returned
    out_dir: Path | None
    suffix: str  #: ``.shard-K-of-N`` for a shard, else ""
    shard: tuple[int, int] | None = None


def run_eval(task: Task, options: RunOptions) -> EvalRun:
    """Run ``task`` as ``options`` say and return its results; writes nothing but the prediction cache (the files
    of a run are written by :func:`commonlink.eval.outputs.write_run`)."""
    if options.shard is not None and not task.shardable:
        raise InputError(
            f"--shard is not supported by {task.name}.", "Run it without --shard (use --limit to run a part)."
        )
    settings = options.settings or task.default_settings(options.seed)
    dataset = task.open()
    task.prepare(dataset)
    if options.indices is not None:
        indices = list(options.indices)
    else:
        indices = row_indices(len(dataset), None, options.rows, options.shard)
        if options.limit is not None:  # unsharded tasks may draw the limit their own way (shards: the first rows)
            indices = (
                row_indices(len(dataset), options.limit, options.rows, options.shard)
                if options.shard is not None
                else task.limit_rows(dataset, indices, options.limit)
            )
    max_row_errors = unreadable_limit(len(indices), options.max_unreadable_share)
    estimate = _estimate(task, dataset, indices, settings, len(options.models))
    if options.on_estimate is not None:
        options.on_estimate(estimate)
    if options.dry_run:  # no backend, no folder: the run has nothing to write
        results = {"task": task.name, "dry_run": True, "rows": len(indices)}
        results["estimate"] = estimate.to_dict() if estimate else None
        return EvalRun(task, results, None, dataset, None, shard_suffix(options.shard), options.shard)
    out_dir = Path(options.out_dir) if options.out_dir is not None else None
    with _backends(task, options) as backends:
        infos = [b.info for b in backends]
        task.check_backends(infos)
        not_sent = settings_not_sent(backends, settings)
        run_keys = [run_key(**task.key_parts(dataset, info, settings)) for info in infos]
        run = TaskRun(
            dataset=dataset,
            indices=indices,
            backends=list(backends),
            settings=settings,
            run_keys=run_keys,
            cache=task.open_cache(out_dir, run_keys, options.shard, overwrite=options.overwrite),
            batch_size=options.batch_size or min(i.default_batch_size for i in infos),
            requested_batch_size=options.batch_size,
            out_dir=out_dir,
            shard=options.shard,
            seed=options.seed,
            n_boot=options.n_boot,
            progress=options.progress,
            max_row_errors=max_row_errors,
        )
        start = time.perf_counter()
        outcome = task.run(run)
        run.cache.sync()  # a task driving its own loop (association) leaves the last answers unsynced
        run.wall_s = time.perf_counter() - start
        run.generate_s = sum(b.generate_seconds for b in backends)
        run.infos = [b.info for b in backends]  # a lazy backend knows its dtype/device once loaded
    results = results_header(
        task.name, run.infos, settings, seed=options.seed, n_boot=options.n_boot, several_models=task.several_models
    )
    results.update(task.results(run, outcome))
    if not_sent:  # what the requests really carried: ``generation`` is what was asked
        results["generation_not_sent"] = not_sent
    results["row_set"] = row_set_record(dataset, indices)
    results["run_name"] = options.run_name or default_run_name(results)
    if estimate is not None:
        results["estimate"] = estimate.to_dict()
    results["scored"] = scored_counts(results).to_dict()
    warning = check_parsed(results, options.max_unparseable_share, allow=True)
    if warning:
        results["scored"]["warning"] = warning
    return EvalRun(task, results, outcome, dataset, out_dir, shard_suffix(options.shard), options.shard)


def _estimate(task: Task, dataset, indices: list[int], settings: GenerationSettings, models: int):
    """The task's estimate of what the run sends, or None (logged) when it cannot be made."""
    try:
        return task.estimate(dataset, indices, settings, models)
    except Exception as exc:  # noqa: BLE001 - an estimate never stops a run
        log.warning("What this run sends could not be estimated (%s: %s).", type(exc).__name__, exc)
        return None


def settings_not_sent(backends: Sequence[Backend], settings: GenerationSettings) -> dict[str, dict]:
    """Generation settings a backend's request rules drop or change (e.g. no temperature for OpenAI's reasoning
    models): ``{name: {"asked", "sent", "why"}}``, warned about once, here, before the first request."""
    out: dict[str, dict] = {}
    for backend in backends:
        rules = getattr(backend, "not_sent_rules", None)
        out.update(rules(backend.info, settings) if rules is not None else {})
    for name, change in out.items():
        sent = "not sent" if change["sent"] is None else f"sent as {change['sent']!r}"
        log.warning("--%s %s is %s (%s).", name.replace("_", "-"), change["asked"], sent, change["why"])
    return out


def row_set_record(dataset, indices: Sequence[int]) -> dict:
    """Which rows a run covered: their count and a digest of the data's fingerprint and the row numbers (two
    runs are ranked together by ``eval compare`` only when their digests agree)."""
    text = f"{getattr(dataset, 'fingerprint', '')}:" + ",".join(map(str, indices))
    return {"count": len(indices), "digest": hashlib.sha256(text.encode()).hexdigest()[:16]}


def _backends(task: Task, options: RunOptions):
    models = list(options.models)
    if len(models) > 1 and not task.several_models:
        raise InputError(f"{task.name} runs one model; {len(models)} were given.", "Give one --model.")
    return open_backends(
        options.backend_instances,
        options.backend,
        models,
        options.backend_options,
        images_per_request=task.images_per_request,
    )


def row_indices(
    n_rows: int, limit: int | None = None, rows: tuple[int, int] | None = None, shard: tuple[int, int] | None = None
) -> list[int]:
    """Row numbers to evaluate: ``rows`` (inclusive range) if given, cut to the first ``limit``, then every
    N-th row starting at K for ``shard=(K, N)``."""
    if shard is not None:
        k, n = shard
        if not (n >= 1 and 0 <= k < n):
            raise InputError(
                f"--shard {k}/{n}: need 0 <= K < N.", "e.g. --shard 0/4 ... --shard 3/4 for four processes."
            )
        return row_indices(n_rows, limit, rows)[k::n]
    if rows:
        lo, hi = rows
        if hi >= n_rows:
            raise InputError(
                f"--rows {lo}-{hi}: the split has only {n_rows} rows (0-{n_rows - 1}).",
                f"Use --rows 0-{n_rows - 1} or less.",
            )
        indices = list(range(lo, hi + 1))
    else:
        indices = list(range(n_rows))
    return indices[:limit] if limit is not None else indices


def unreadable_limit(n_rows: int, share: float) -> int:
    """Rows that may fail to be read before a run over ``n_rows`` stops (``share`` of them, rounded down)."""
    if not 0 <= share <= 1:
        raise InputError(
            f"--max-unreadable-share {share} must be between 0 and 1.", "e.g. 0.05 (the default) or 1 to never stop."
        )
    return int(share * n_rows)


def default_out_dir(split: str, model: str, backend: str, task: str, *, data: str | None = None) -> Path:
    """``eval-runs/TASK-DATA-SPLIT-MODEL-BACKEND`` (``DATA``: the data's folder or Hub name, so a second dataset's
    run gets its own folder; a local model folder gives its name); a weight-free baseline runs on no backend:
    ``eval-runs/TASK-DATA-SPLIT-MODEL``. Without ``data``: ``TASK-SPLIT-...``."""

    def slug(text: str) -> str:
        return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-")

    name = slug(Path(model).name if os.path.exists(model) else model) or "model"
    where = f"{slug(Path(str(data).rstrip('/')).name) or 'data'}-{split}" if data is not None else split
    return Path("eval-runs") / (f"{task}-{where}-{name}" if is_baseline(model) else f"{task}-{where}-{name}-{backend}")
