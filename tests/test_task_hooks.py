"""Issue 34: what the engine shows of a run (its default name, its scored counts, its results table) and what it
exports come from the task's and the kind's hooks in the registry, so a task registered at run time gets them
without an engine edit; an export source no kind takes is refused by name."""

from __future__ import annotations

import pytest

from commonlink import registry
from commonlink.errors import InputError
from commonlink.eval.export.writers import export_lmms_eval, export_vlmevalkit
from commonlink.eval.report.tables import render_markdown_table
from commonlink.eval.run_names import default_run_name
from commonlink.eval.scored import ScoredCounts, scored_counts

TOY_TASK = registry.TaskInfo(
    name="toy",
    kind="toy",
    summary="a task the engine has never heard of",
    evaluate=lambda *a, **k: {},
    result_tasks=("toy/",),
    run_name_parts=lambda results: [f"mode-{results['toy']['mode']}"],
    scored_counts=lambda results: ScoredCounts(results["metrics"]["games"], "games", 1, 0, 0),
    results_table=lambda runs, breakdowns: f"| toy | {len(runs)} runs | breakdowns {breakdowns} |",
)


@pytest.fixture()
def toy(monkeypatch):
    monkeypatch.setitem(registry.TASKS, "toy", f"{__name__}:TOY_TASK")
    return {"task": "toy/easy", "model": "org/m", "toy": {"mode": "fast"}, "metrics": {"games": 4}}


def test_a_registered_task_names_counts_and_tables_its_runs(toy):
    assert default_run_name(toy) == "org/m mode-fast"
    assert scored_counts(toy) == ScoredCounts(4, "games", 1, 0, 0)
    assert render_markdown_table([toy, toy], breakdowns=True) == "| toy | 2 runs | breakdowns True |"


def test_the_builtin_tasks_keep_their_names_and_counts():
    co = {"task": "common_o", "model": "m", "prompt": {"concat_images": True, "question": "built"}}
    assert default_run_name(co) == "m concat built-q"
    assoc = {"task": "association/deduction", "model": "m", "association": {"memory": "text", "strategy": "cot"}}
    assert default_run_name({**assoc, "moe": True}) == "m text cot moe"
    perception = {"task": "perception", "metrics": {"overall": {"n": 3, "questions": 12, "parse_failures": 2}}}
    assert scored_counts(perception) == ScoredCounts(12, "questions", 2, 0, 0)


def test_a_results_table_of_an_unknown_task_is_refused():
    with pytest.raises(InputError, match="No results table for task 'nothing'"):
        render_markdown_table({"task": "nothing", "metrics": {}})


@pytest.mark.parametrize("export", [export_lmms_eval, export_vlmevalkit])
def test_an_export_source_no_kind_takes_is_refused(tmp_path, export):
    with pytest.raises(InputError, match="Unknown export source.*pairs") as info:
        export(tmp_path / "out", pairs="x.jsonl")
    assert "data=" in info.value.fix and "association=" in info.value.fix
    assert not (tmp_path / "out").exists()
