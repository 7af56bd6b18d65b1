"""One interface for every eval: a :class:`Task` says what to ask and how to score; the evaluator runs it.

Modelled on lm-evaluation-harness (one ``Task``, one evaluator): a task knows

* its data: :meth:`Task.open` returns the split (``len``, ``get(i)``, ``fingerprint``, ``source_name``, ``revision``);
* the requests of a row: :meth:`Task.requests` ``(example) -> [(GenerationRequest, meta), ...]``;
* how to score one answer: :meth:`Task.score` ``(meta, output) -> record`` (a line of ``predictions.jsonl``);
* how records aggregate into metrics and the rest of ``results.json``: :meth:`Task.results`;
* its parts of the run key (the prediction-cache key): :meth:`Task.key_parts`;
* which function writes its files: :attr:`Task.writer` (``(run) -> None``; default
  :func:`commonlink.eval.outputs.write_results`). The task itself writes nothing.

:func:`commonlink.eval.evaluator.evaluate` does the rest the same way for every task: opens the data, picks the
rows (``limit``, ``rows``, ``shard``), loads the backend(s) lazily, keys and opens the prediction cache (so a rerun
resumes), runs, adds the common head of ``results.json`` (:func:`commonlink.eval.results.results_header`) and
returns; :func:`commonlink.eval.outputs.write_run` then writes the task's files and the HTML report.

A task whose requests depend on earlier answers (association chains: a step's prompt holds the memory built
from the previous answers) overrides :meth:`Task.run` and drives its own episode loop over the same cached
backends (``run.backends``, ``run.cache``, ``run.run_keys``); every other task inherits the row loop
(:func:`commonlink.eval.runner.run_over_split`: prefetching, batching, cache, bad-row skipping). See docs/eval.md,
"Adding a task".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from commonlink.eval.backends.base import (
    Backend,
    BackendInfo,
    GenerationRequest,
    GenerationSettings,
)
from commonlink.eval.cache import PredictionCache, open_run_cache
from commonlink.eval.estimate import RequestEstimate, estimate_rows
from commonlink.eval.results import timing
from commonlink.eval.runner import run_over_split

__all__ = ["Task", "TaskRun"]


@dataclass
class TaskRun:
    """What the evaluator hands a task: the opened data and rows, the backends behind the cache, the settings;
    after :meth:`Task.run` it fills in the facts :meth:`Task.results` reports (backend infos, times)."""

    dataset: Any  #: the split :meth:`Task.open` returned
    indices: list[int]  #: the rows to run (``limit``, ``rows`` and ``shard`` applied)
    backends: list[Backend]  #: one per model (several only for tasks with ``several_models``)
    cache: PredictionCache
    settings: GenerationSettings
    run_keys: list[str]  #: the cache key of each backend's answers
    batch_size: int  #: requests per model call to start with
    requested_batch_size: int | None = None  #: ``--batch-size`` as given (None: the backend's default)
    out_dir: Path | None = None
    shard: tuple[int, int] | None = None
    seed: int = 0
    n_boot: int = 1000
    progress: bool = True
    max_row_errors: int | None = None  #: unreadable rows allowed before the run stops
    infos: list[BackendInfo] = field(
        default_factory=list
    )  #: after the run (a lazy backend knows its dtype once loaded)
    wall_s: float = 0.0
    generate_s: float = 0.0

    def outcome_fields(self, outcome, *, scored: int | None = None) -> dict:
        """The tail of a row-loop task's ``results.json``: the skipped rows, the times, the run key."""
        return {
            "skipped_rows": outcome.skipped,
            "timing": timing(
                self.wall_s, self.generate_s, from_cache=outcome.cached, generated=outcome.generated, scored=scored
            ),
            "run_key": self.run_keys[0],
        }

    @property
    def uses_images(self) -> bool:
        """False when no backend looks at pixels (the ``random``/``none`` baselines): rows are read without decoding."""
        return any(b.info.uses_images for b in self.backends)


class Task:
    """Base class of an eval task; subclasses set the class attributes and implement the marked methods."""

    #: ``task`` in results.json (and in the cache key)
    name: str = ""
    #: images in the largest request (vLLM's ``limit_mm_per_prompt``)
    images_per_request: int = 2
    #: several ``--model`` combined by vote (results.json lists ``models``)
    several_models: bool = False
    #: ``--shard K/N`` supported (each shard writes ``results.shard-K-of-N.json``; a run without it merges)
    shardable: bool = True
    #: the HTML report is written beside the results (unless the run turns it off)
    writes_report: bool = True
    #: progress bar label
    description: str = "eval"
    #: writes the run's files: ``(run: commonlink.eval.evaluator.EvalRun) -> None`` (a ``staticmethod``); None:
    #: :func:`commonlink.eval.outputs.write_results` (results.json and predictions.jsonl)
    writer: Callable[..., None] | None = None

    # ----------------------------------------------------------------- data and keys
    def default_settings(self, seed: int) -> GenerationSettings:
        """Generation settings when the caller gives none."""
        return GenerationSettings(seed=seed)

    def open(self):
        """The split to run over (required)."""
        raise NotImplementedError

    def estimate(self, dataset, indices: list[int], settings: GenerationSettings, models: int) -> RequestEstimate:
        """What the run will send (told before the first request): default, the requests of a sample of the rows
        (:func:`commonlink.eval.estimate.estimate_rows`); a task that drives its own loop overrides it."""
        return estimate_rows(self, dataset, indices, settings, models)

    def limit_rows(self, dataset, indices: list[int], limit: int) -> list[int]:
        """The rows ``--limit`` keeps of ``indices`` (default: the first ``limit``); a task whose rows come grouped
        (association: by concept) draws across the groups instead, and says so in its results."""
        return indices[:limit]

    def prepare(self, dataset) -> None:
        """Anything that must fail before the model is loaded (e.g. a wrong embedder path); optional."""

    def check_backends(self, infos: Sequence[BackendInfo]) -> None:
        """Refuse backends the task has no meaning for (raise :class:`commonlink.errors.InputError`); optional."""

    def key_parts(self, dataset, info: BackendInfo, settings: GenerationSettings) -> dict:
        """Everything that can change an answer of the model ``info`` (required; hashed by :func:`run_key`).
        Changing what it returns for existing options invalidates users' caches: only add parts for new options."""
        raise NotImplementedError

    @staticmethod
    def common_key_parts(dataset, info: BackendInfo, settings: GenerationSettings, **parts) -> dict:
        """The key parts every task has (the data, the model and backend, the generation settings) with the task's
        own ``parts``. The backend's output options only when set, so runs with default options keep the keys (and
        caches) they had."""
        options = getattr(info, "output_options", None)
        return dict(
            dataset=dataset.fingerprint,
            model=info.fingerprint,
            backend=info.backend,
            settings=settings.to_dict(),
            **({"backend_options": options} if options else {}),
            **parts,
        )

    def open_cache(
        self, out_dir: Path | None, run_keys: Sequence[str], shard: tuple[int, int] | None, *, overwrite: bool
    ) -> PredictionCache:
        """The prediction cache of the run (default: the run folder's, refusing a folder of another run)."""
        return open_run_cache(out_dir, run_keys[0], shard, overwrite=overwrite)

    # ----------------------------------------------------------------- one row
    def requests(self, example) -> list[tuple[GenerationRequest, dict]]:
        """The model calls one row needs, each with the facts its record keeps (required for row tasks).
        ``example`` has no pixels (images ``None``) when the backend does not use images or all is cached."""
        raise NotImplementedError

    def score(self, meta: dict, output: str) -> dict:
        """One record (a line of predictions.jsonl): ``meta``, the raw output, its parse and scores (row tasks)."""
        raise NotImplementedError

    # ----------------------------------------------------------------- the run
    def run(self, run: TaskRun):
        """Answer every row and return the outcome :meth:`results` and the writer read. Default: the row loop
        over :meth:`requests` / :meth:`score` (a :class:`commonlink.eval.runner.RunOutcome`)."""
        return run_over_split(
            run.dataset,
            run.indices,
            build=self.requests,
            finish=self.score,
            backend=run.backends[0],
            settings=run.settings,
            cache=run.cache,
            run=run.run_keys[0],
            batch_size=run.batch_size,
            total=len(run.indices),
            description=self.description,
            progress=run.progress,
            max_row_errors=run.max_row_errors,
        )

    def results(self, run: TaskRun, outcome) -> dict:
        """The fields of results.json after the common head: settings, dataset, ``metrics``, timing (required)."""
        raise NotImplementedError
