"""Issue 35: scores only of like with like. Runs on two releases with the same split names are never ranked in
one table, a group that cannot be compared leaves the others printed, and a harness file made on another split
or release is refused by `eval score`, naming what differs."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from commonlink.cli import app
from commonlink.eval.compare import compare_runs
from tests.fixtures.tiny_chains import write_tiny_chain_files
from tests.fixtures.tiny_models import common_o_rows, write_common_o_split

runner = CliRunner()


def _ok(args):
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return result


def _commono(data, out, *extra):
    return _ok(
        ["eval", "commono", "--model", "random", "--data", str(data), "--out", str(out), "--bootstrap", "20"]
        + ["--quiet", "--no-report", *extra]
    )


@pytest.fixture(scope="module")
def releases(tmp_path_factory):
    """Two releases whose `main` splits have the same row ids (main-00000000 ...) but other rows."""
    root = tmp_path_factory.mktemp("releases")
    first = write_common_o_split(root / "rel-1", common_o_rows(8, seed=1), split="main")
    write_common_o_split(first, common_o_rows(6, seed=5), split="challenge")
    second = write_common_o_split(root / "rel-2", common_o_rows(8, seed=2), split="main")
    return first, second


def _table_runs(output: str) -> list[list[str]]:
    """The run names of each markdown table in `eval compare`'s output, table by table."""
    tables, current = [], None
    for line in output.splitlines():
        if line.startswith("**"):
            current = []
            tables.append(current)
        elif line.startswith("| ") and not line.startswith("| Run") and current is not None:
            current.append(line.split("|")[1].strip())
    return tables


def test_runs_on_two_releases_with_the_same_split_are_never_ranked_in_one_table(releases, tmp_path):
    first, second = releases
    _commono(first, tmp_path / "a", "--run-name", "on release 1")
    _commono(second, tmp_path / "b", "--run-name", "on release 2")
    a, b = (json.loads((tmp_path / n / "results.json").read_text()) for n in ("a", "b"))
    assert a["dataset"]["split"] == b["dataset"]["split"] == "main"
    assert a["dataset"]["fingerprint"] != b["dataset"]["fingerprint"]
    result = _ok(["eval", "compare", str(tmp_path / "a"), str(tmp_path / "b")])
    assert sorted(_table_runs(result.output)) == [["on release 1"], ["on release 2"]]
    assert "rows they all share" not in result.output and "made on different data" in result.output
    # the Data cell (Markdown-escaped like every cell: "#" is written "\#", shown as "#")
    assert f"rel-1 \\#{a['dataset']['fingerprint'][:8]}" in result.output
    assert f"rel-2 \\#{b['dataset']['fingerprint'][:8]}" in result.output
    comparison = compare_runs([tmp_path / "a", tmp_path / "b"])
    assert [len(t.rows) for t in comparison.tables] == [1, 1] and not comparison.refused
    # each keeps its own score on its own 8 rows (not a rescore on shared ids)
    scores = {t.rows[0]["run"]: (t.rows[0]["n"], t.rows[0]["accuracy"]) for t in comparison.tables}
    assert scores == {
        "on release 1": (8, a["metrics"]["overall"]["accuracy"]),
        "on release 2": (8, b["metrics"]["overall"]["accuracy"]),
    }
    # the same data still compares on shared rows, in one table
    _commono(first, tmp_path / "a5", "--run-name", "release 1, 5 rows", "--limit", "5")
    same = compare_runs([tmp_path / "a", tmp_path / "a5"])
    assert len(same.tables) == 1 and any("5 rows they all share" in n for n in same.notes)


def test_a_group_that_cannot_be_compared_leaves_the_other_tables_printed(releases, tmp_path):
    first, second = releases
    chains = write_tiny_chain_files(tmp_path / "assoc", chains_per_concept=2, max_steps=8)
    for name, extra in (("all", []), ("some", ["--limit", "3"])):
        _ok(
            ["eval", "association", "--data", str(chains), "--config", "synchronous", "--model", "random"]
            + ["--out", str(tmp_path / name), "--bootstrap", "20", "--quiet", "--no-report", "--run-name", name, *extra]
        )
    _commono(first, tmp_path / "a", "--run-name", "on release 1")
    _commono(second, tmp_path / "b", "--run-name", "on release 2")
    runs = [str(tmp_path / n) for n in ("all", "some", "a", "b")]
    result = runner.invoke(app, ["eval", "compare", *runs, "--markdown", str(tmp_path / "cmp.md")])
    assert result.exit_code == 1
    assert sorted(_table_runs(result.output)) == [["on release 1"], ["on release 2"]]
    assert "Not compared: association/synchronous: the runs cover different rows" in result.output
    assert "1 group(s) of runs could not be compared" in result.output
    written = (tmp_path / "cmp.md").read_text()
    assert "| on release 1 |" in written and "Not compared:" in written and "| some |" not in written
    comparison = compare_runs(runs)
    assert len(comparison.tables) == 2 and len(comparison.refused) == 1
    # a run of a task no registered kind writes is its own refused group, not an error that hides the tables
    unknown = dict(json.loads((tmp_path / "a" / "results.json").read_text()), task="made_up", run_name="odd")
    comparison = compare_runs([*runs, unknown])
    assert len(comparison.tables) == 2 and len(comparison.refused) == 2
    assert "Runs of task 'made_up' cannot be compared" in comparison.refused[-1]


def _as_current_lmms_eval(ours, out):
    """What today's lmms-eval writes (EvaluationTracker.save_results_samples): doc popped, the prompt under
    'input', one-request lists flattened, resps dropped when equal to filtered_resps."""
    lines = []
    for line in ours.read_text().splitlines():
        sample = json.loads(line)
        sample["input"] = sample.pop("arguments")[0][0]
        sample["resps"], sample["filtered_resps"] = sample["resps"][0], sample["filtered_resps"][0]
        sample.pop("doc")
        sample["target"] = str(sample["target"])
        lines.append(json.dumps(sample))
    out.write_text("\n".join(lines) + "\n")
    return out


def test_eval_score_reads_the_split_from_an_lmms_eval_file_and_refuses_other_data(releases, tmp_path):
    first, second = releases
    _commono(first, tmp_path / "run", "--split", "challenge")
    saved = json.loads((tmp_path / "run" / "results.json").read_text())["metrics"]["overall"]
    ours = tmp_path / "run" / "lmms_eval" / "samples_common_o_challenge.jsonl"
    samples = _as_current_lmms_eval(ours, tmp_path / "20260101_120000_samples_common_o_challenge.jsonl")
    # the file names its task: scored against the challenge split without --split
    out = tmp_path / "scored"
    _ok(["eval", "score", str(samples), "--data", str(first), "--bootstrap", "20", "--out", str(out)])
    scored = json.loads((out / "results.json").read_text())
    assert scored["dataset"]["split"] == "challenge" and scored["dataset"]["harness_task"] == "common_o_challenge"
    assert scored["metrics"]["overall"]["accuracy"] == saved["accuracy"] and scored["metrics"]["overall"]["n"] == 6
    # --split main contradicts the file: refused, naming both
    wrong = runner.invoke(app, ["eval", "score", str(samples), "--data", str(first), "--split", "main"])
    assert wrong.exit_code == 1
    assert "common_o_challenge (split 'challenge'), not of split 'main'" in wrong.output
    # a renamed file says no task: the default split main is checked row by row against the file's targets/prompts
    renamed = tmp_path / "lmms.jsonl"
    renamed.write_text(samples.read_text())
    wrong = runner.invoke(app, ["eval", "score", str(renamed), "--data", str(first)])
    assert wrong.exit_code == 1 and "do not match their rows in" in wrong.output and "split 'main'" in wrong.output
    assert "doc_id 0:" in wrong.output and "made on other data" in wrong.output
    # the right split of another release (same ids, other rows): refused too
    _commono(first, tmp_path / "main-run")
    main_samples = _as_current_lmms_eval(
        tmp_path / "main-run" / "lmms_eval" / "samples_common_o.jsonl", tmp_path / "x_samples_common_o.jsonl"
    )
    other = runner.invoke(app, ["eval", "score", str(main_samples), "--data", str(second)])
    assert other.exit_code == 1 and "do not match their rows in" in other.output
    assert _ok(["eval", "score", str(main_samples), "--data", str(first), "--bootstrap", "20"])


def test_eval_score_refuses_our_predictions_against_another_release(releases, tmp_path):
    first, second = releases
    _commono(first, tmp_path / "run")
    refused = runner.invoke(app, ["eval", "score", str(tmp_path / "run" / "predictions.jsonl"), "--data", str(second)])
    assert refused.exit_code == 1 and "do not match their rows" in refused.output
    _ok(["eval", "score", str(tmp_path / "run" / "predictions.jsonl"), "--data", str(first), "--bootstrap", "20"])


def test_eval_score_says_association_samples_are_not_supported(tmp_path):
    chains = write_tiny_chain_files(tmp_path / "assoc", chains_per_concept=2, max_steps=8, single_step_per_concept=3)
    _ok(
        ["eval", "association", "--data", str(chains), "--config", "single_step", "--model", "random"]
        + ["--out", str(tmp_path / "run"), "--bootstrap", "20", "--quiet", "--no-report"]
    )
    samples = tmp_path / "run" / "lmms_eval" / "samples_association_single_step.jsonl"
    result = runner.invoke(app, ["eval", "score", str(samples)])
    assert result.exit_code == 1 and "association samples are not supported" in result.output
    renamed = tmp_path / "some.jsonl"
    renamed.write_text(samples.read_text())
    result = runner.invoke(app, ["eval", "score", str(renamed), "--data", str(chains)])
    assert result.exit_code == 1 and "association samples are not supported" in result.output


def test_a_vlmevalkit_file_of_another_release_is_refused_and_its_own_scores(releases, tmp_path):
    import pandas as pd

    from commonlink.eval.export.writers import export_vlmevalkit

    first, second = releases
    _commono(first, tmp_path / "run")
    outputs = {
        json.loads(line)["row_index"]: json.loads(line)["raw_output"]
        for line in (tmp_path / "run" / "predictions.jsonl").read_text().splitlines()
    }
    export_vlmevalkit(tmp_path / "vlm", data=first, splits=("main",), progress=False)
    table = pd.read_csv(tmp_path / "vlm" / "CommonO.tsv", sep="\t").drop(columns=["image"])
    table["prediction"] = [outputs[i] for i in table["index"]]
    predictions = tmp_path / "m_CommonO.tsv"
    table.to_csv(predictions, sep="\t", index=False)
    other = runner.invoke(app, ["eval", "score", str(predictions), "--data", str(second)])
    assert other.exit_code == 1 and "do not match their rows in" in other.output and "in the file" in other.output
    wrong_split = runner.invoke(app, ["eval", "score", str(predictions), "--data", str(first), "--split", "challenge"])
    assert wrong_split.exit_code == 1 and "CommonO (split 'main'), not of split 'challenge'" in wrong_split.output
    _ok(["eval", "score", str(predictions), "--data", str(first), "--bootstrap", "20"])
