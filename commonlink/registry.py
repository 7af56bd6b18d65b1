"""The registry of benchmark kinds and eval tasks, through which the engine finds them (it names none itself).

As lm-evaluation-harness's model map, each entry is a ``name -> "module:attribute"`` string, imported on first
use, so ``import commonlink`` loads no kind:

    >>> from commonlink import registry
    >>> registry.task_names()
    ['association', 'common_o', 'concept_perception', 'perception']
    >>> registry.get_kind("common_o").input_kind
    'commono_pairs'

A kind (``commonlink/kinds/<name>/kind.py``) declares a :class:`Kind`: the sidecar kind of its input files, its
release builder, its card renderer. A task declares a :class:`TaskInfo`: its ``results.json`` task names, its
report page and its comparison rows. Adding a kind or a task is one entry here and one declaration in its folder
(docs/eval.md, "Adding a task or a kind"); :func:`register_kind` and :func:`register_task` add them at run time.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from commonlink.errors import InputError

__all__ = [
    "KINDS",
    "TASKS",
    "Kind",
    "TaskInfo",
    "get_kind",
    "get_task",
    "kind_for_input",
    "kind_names",
    "register_kind",
    "register_task",
    "task_for_results",
    "task_names",
]

#: Benchmark kinds: the ``kind`` a release manifest records -> its :class:`Kind` declaration.
KINDS: dict[str, str] = {
    "common_o": "commonlink.kinds.common_o.kind:KIND",
    "association": "commonlink.kinds.association.kind:KIND",
}
#: Eval tasks: ``--task NAME`` -> its :class:`TaskInfo` declaration.
TASKS: dict[str, str] = {
    "common_o": "commonlink.kinds.common_o.kind:COMMON_O_TASK",
    "perception": "commonlink.kinds.common_o.kind:PERCEPTION_TASK",
    "association": "commonlink.kinds.association.kind:ASSOCIATION_TASK",
    "concept_perception": "commonlink.kinds.association.kind:CONCEPT_PERCEPTION_TASK",
}
_LOADED: dict[str, Any] = {}


@dataclass(frozen=True)
class Kind:
    """What the release engine needs to know of a benchmark kind."""

    name: str  #: ``kind`` of its release manifests
    title: str  #: for people ("Common-O pairs")
    input_kind: str  #: ``kind`` of the ``FILE.meta.json`` sidecar of its input files
    input_command: str  #: the command that writes its inputs (for error messages)
    #: ``(input paths, out_dir, ReleaseOptions) -> ReleaseResult``: the release builder
    build_release: Callable[..., Any]
    #: ``(units, manifest, common card fields) -> str``: the card rendered again from a manifest
    render_card: Callable[..., str]
    #: its lmms-eval / VLMEvalKit exporter (``commonlink.eval.export.writers.KindExport``); None: not exported
    export: Any = None


@dataclass(frozen=True)
class TaskInfo:
    """What the eval engine, ``eval run --task`` and ``eval tasks`` need to know of a task."""

    name: str  #: ``--task NAME``
    kind: str  #: the benchmark kind it scores
    summary: str  #: one line for ``eval tasks``
    evaluate: Callable[..., dict]  #: the Python entry point (``evaluate_common_o``, ...)
    command: str = ""  #: its own eval command (``eval commono``), which ``eval run --task NAME`` runs
    #: ``results.json`` ``task`` values this task writes (an entry ending in "/" matches a prefix)
    result_tasks: tuple[str, ...] = ()
    #: ``(runs, thumbs, chain_steps=, catalog_root=, **options) -> (page, cards)``; None: the metrics page
    report_page: Callable[..., tuple[Any, int]] | None = None
    report_page_runs: int = 0  #: the page is for at most this many runs (0: any number)
    #: ``(title, runs) -> Table`` of ``eval compare``; ``rescore(records, results, seed, n_boot) -> metrics``
    compare_table: Callable[..., Any] | None = None
    rescore: Callable[..., dict] | None = None
    #: ``(results) -> bool``: whether ``rescore`` can score that run again (default: every run, where there is one)
    rescorable: Callable[[dict], bool] = field(default=lambda results: True)
    record_key: str = "id"  #: the field naming a record's row in predictions.jsonl
    title_with_split: bool = False  #: ``eval compare`` titles its tables "TASK (SPLIT)" (else "TASK")
    #: ``(runs, breakdowns) -> str``: the Markdown table of ``results.md`` and the eval commands' summaries
    results_table: Callable[[list[dict], bool], str] | None = None
    #: ``results -> ScoredCounts`` (:mod:`commonlink.eval.scored`); None: a row task's ``metrics.overall`` counts
    scored_counts: Callable[[dict], Any] | None = None
    #: ``results -> [part, ...]``: the settings that set a run apart, in its default run name after the model(s)
    run_name_parts: Callable[[dict], list[str]] = field(default=lambda results: [])

    def writes(self, results_task: str) -> bool:
        """Whether a ``results.json`` with ``task`` ``results_task`` was written by this task."""
        return any(
            results_task.startswith(name) if name.endswith("/") else results_task == name
            for name in self.result_tasks or (self.name,)
        )


def _load(ref: str) -> Any:
    if ref not in _LOADED:
        module, _, attribute = ref.partition(":")
        _LOADED[ref] = getattr(importlib.import_module(module), attribute)
    return _LOADED[ref]


def kind_names() -> list[str]:
    """Every registered kind, sorted."""
    return sorted(KINDS)


def task_names() -> list[str]:
    """Every registered task, sorted."""
    return sorted(TASKS)


def get_kind(name: str) -> Kind:
    """The :class:`Kind` registered as ``name`` (an :class:`InputError` naming the known ones otherwise)."""
    if name not in KINDS:
        raise InputError(f"Unknown benchmark kind {name!r}.", f"Known kinds: {', '.join(kind_names())}.")
    return _load(KINDS[name])


def get_task(name: str) -> TaskInfo:
    """The :class:`TaskInfo` registered as ``name`` (an :class:`InputError` naming the known ones otherwise)."""
    if name not in TASKS:
        raise InputError(
            f"Unknown task {name!r}.", f"Known tasks: {', '.join(task_names())} (`commonlink eval tasks` lists them)."
        )
    return _load(TASKS[name])


def kind_for_input(input_kind: str) -> Kind | None:
    """The kind whose inputs carry the sidecar kind ``input_kind`` (None: no kind reads such files)."""
    return next((k for k in map(get_kind, kind_names()) if k.input_kind == input_kind), None)


def task_for_results(results_task: str) -> TaskInfo | None:
    """The task that writes ``results.json`` files whose ``task`` is ``results_task`` (None: no registered task)."""
    return next((t for t in map(get_task, task_names()) if t.writes(results_task)), None)


def register_kind(name: str, ref: str) -> None:
    """Add (or replace) a kind: ``ref`` is ``"module:attribute"`` of its :class:`Kind`, imported on first use."""
    KINDS[name] = ref


def register_task(name: str, ref: str) -> None:
    """Add (or replace) a task: ``ref`` is ``"module:attribute"`` of its :class:`TaskInfo`, imported on first use."""
    TASKS[name] = ref
