"""`commonlink eval run --task NAME` runs every registered task with the same outputs as its own command, and
`commonlink eval tasks` lists every task with its options (both read commonlink.registry)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from commonlink import registry
from commonlink.cli import app
from tests.fixtures.tiny_chains import write_tiny_chain_files

#: results.json fields that differ between two runs of the same inputs (the clock and the timings).
VOLATILE = {"created", "timing"}


@pytest.fixture(scope="module")
def chain_dir(tmp_path_factory):
    return write_tiny_chain_files(
        tmp_path_factory.mktemp("assoc"), chains_per_concept=2, max_steps=6, single_step_per_concept=3
    )


def _task_args(task: str, common_o_split, chain_dir) -> list[str]:
    if task == "common_o":
        return ["--data", str(common_o_split(6, seed=4)), "--model", "random", "--bootstrap", "20", "--no-report"]
    if task == "perception":
        return ["--data", str(common_o_split(6, seed=4)), "--model", "random", "--bootstrap", "20"]
    if task == "association":
        return ["--data", str(chain_dir), "--config", "deduction", "--model", "random", "--bootstrap", "20"]
    return ["--data", str(chain_dir), "--model", "random", "--bootstrap", "20"]


def _stable(value):
    if isinstance(value, dict):
        return {k: _stable(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [_stable(v) for v in value]
    return value


@pytest.mark.parametrize("task", registry.task_names())
def test_eval_run_writes_what_the_task_command_writes(task, common_o_split, chain_dir, tmp_path):
    info = registry.get_task(task)
    args = _task_args(task, common_o_split, chain_dir)
    runner = CliRunner()
    alias = runner.invoke(app, ["eval", info.command, *args, "--out", str(tmp_path / "alias"), "--quiet"])
    assert alias.exit_code == 0, alias.output
    run = runner.invoke(app, ["eval", "run", "--task", task, *args, "--out", str(tmp_path / "run"), "--quiet"])
    assert run.exit_code == 0, run.output
    names = sorted(p.name for p in (tmp_path / "alias").iterdir())
    assert names == sorted(p.name for p in (tmp_path / "run").iterdir())
    assert "results.json" in names and ({"predictions.jsonl", "steps.jsonl"} & set(names))
    for name in (n for n in names if (tmp_path / "run" / n).is_file()):
        alias_bytes, run_bytes = (tmp_path / "alias" / name).read_bytes(), (tmp_path / "run" / name).read_bytes()
        if name.startswith("results") and name.endswith(".json"):
            assert _stable(json.loads(alias_bytes)) == _stable(json.loads(run_bytes)), name
            assert registry.task_for_results(json.loads(run_bytes)["task"]).name == task
        elif name.endswith((".jsonl", ".md")) and "cache" not in name:
            assert alias_bytes == run_bytes, name


def test_eval_run_shows_the_task_options_and_refuses_an_unknown_task():
    runner = CliRunner()
    shown = runner.invoke(app, ["eval", "run", "--task", "association", "--help"])
    assert shown.exit_code == 0 and "--config" in shown.output and "--memory" in shown.output
    unknown = runner.invoke(app, ["eval", "run", "--task", "nope", "--model", "none"])
    assert unknown.exit_code == 1
    assert "Unknown task 'nope'" in unknown.output and "common_o" in unknown.output
    missing = runner.invoke(app, ["eval", "run", "--model", "none"])
    assert missing.exit_code == 2 and "needs --task" in missing.output
    bad_option = runner.invoke(app, ["eval", "run", "--task", "common_o", "--model", "none", "--no-such-option"])
    assert bad_option.exit_code == 2 and "--no-such-option" in bad_option.output


def test_eval_tasks_lists_every_registered_task_with_its_options():
    runner = CliRunner()
    listed = runner.invoke(app, ["eval", "tasks", "--format", "json"])
    assert listed.exit_code == 0, listed.output
    tasks = {t["name"]: t for t in json.loads(listed.output)["tasks"]}
    assert sorted(tasks) == registry.task_names() == ["association", "common_o", "concept_perception", "perception"]
    for name, entry in tasks.items():
        flags = {f for option in entry["options"] for f in option["flags"]}
        assert {"--model", "--out", "--backend"} <= flags, name
        assert entry["command"] == f"eval {registry.get_task(name).command}"
    assert "--config" in {f for o in tasks["association"]["options"] for f in o["flags"]}
    assert "--similarity" in {f for o in tasks["common_o"]["options"] for f in o["flags"]}
    text = runner.invoke(app, ["eval", "tasks"])
    assert text.exit_code == 0
    for name in tasks:
        assert f"commonlink eval run --task {name} [OPTIONS]" in text.output
    refused = runner.invoke(app, ["eval", "tasks", "--format", "yaml"])
    assert refused.exit_code == 1 and "--format yaml" in refused.output


def test_registry_finds_kinds_and_tasks_by_name_and_by_what_they_wrote():
    assert registry.kind_names() == ["association", "common_o"]
    assert registry.get_kind("common_o").input_kind == "common_o_pairs"
    assert registry.kind_for_input("association_chains").name == "association"
    assert registry.kind_for_input("something_else") is None
    assert registry.task_for_results("association/synchronous").name == "association"
    assert registry.task_for_results("common_o").name == "common_o"
    assert registry.task_for_results("concept_perception").name == "concept_perception"
    assert registry.task_for_results("shares_any") is None
    with pytest.raises(Exception, match="Unknown benchmark kind 'nope'"):
        registry.get_kind("nope")
