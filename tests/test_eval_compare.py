"""`eval compare` over named runs of every task, row-set checks, and `eval score` of other harnesses' files
(lmms-eval samples in its current and older layouts, VLMEvalKit prediction tables)."""

from __future__ import annotations

import csv
import io
import json

import pytest
from typer.testing import CliRunner

from commonlink.cli import app
from commonlink.eval.compare import compare_runs, render_comparison
from tests.fixtures.tiny_chains import write_tiny_chain_files

runner = CliRunner()


@pytest.fixture(scope="module")
def chain_dir(tmp_path_factory):
    return write_tiny_chain_files(
        tmp_path_factory.mktemp("assoc"),
        chains_per_concept=2,
        max_steps=8,
        single_step_per_concept=3,
        deductions_per_concept=3,
    )


@pytest.fixture(scope="module")
def co_dir(tmp_path_factory):
    from tests.fixtures.tiny_models import common_o_rows, write_common_o_split

    return write_common_o_split(tmp_path_factory.mktemp("co"), common_o_rows(8, seed=1), split="main")


def _run(args):
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return result


def _association(chain_dir, out, *extra):
    return _run(
        [
            "eval",
            "association",
            "--data",
            str(chain_dir),
            "--config",
            "synchronous",
            "--model",
            "random",
            "--out",
            str(out),
            "--bootstrap",
            "20",
            "--quiet",
            "--no-report",
            *extra,
        ]
    )


def test_compare_two_association_runs_shows_both_named_with_steps(chain_dir, tmp_path):
    _association(chain_dir, tmp_path / "structm", "--memory", "structm", "--run-name", "baseline StructM")
    _association(chain_dir, tmp_path / "nlm", "--memory", "nlm")
    saved = {m: json.loads((tmp_path / m / "results.json").read_text()) for m in ("structm", "nlm")}
    assert (
        saved["structm"]["run_name"] == "baseline StructM" and saved["nlm"]["run_name"] == "random nlm"
    )  # default: model + memory
    assert saved["nlm"]["row_set"]["count"] == 8
    result = _run(["eval", "compare", str(tmp_path / "structm"), str(tmp_path / "nlm")])
    lines = result.output.splitlines()
    header = next(line for line in lines if line.startswith("| Run"))
    assert [c.strip() for c in header.strip("|").split("|")] == [
        "Run",
        "Model",
        "Backend",
        "Data",
        "Memory",
        "Task",
        "Chains",
        "Max steps",
        "Mean steps",
        "Deduction",
        "Parse fail. (%)",
        "Refused",
    ]
    rows = {
        line.split("|")[1].strip(): [c.strip() for c in line.strip("|").split("|")]
        for line in lines
        if line.startswith("| baseline") or line.startswith("| random")
    }
    assert set(rows) == {"baseline StructM", "random nlm"}
    for name, key in (("baseline StructM", "structm"), ("random nlm", "nlm")):
        summary = saved[key]["metrics"]["summary"]
        row = rows[name]
        # the data's column (Markdown-escaped like every cell: "#" is written "\#")
        assert row[3].endswith(" \\#" + saved[key]["dataset"]["fingerprint"][:8])
        assert row[4] == key and row[5] == "synchronous" and row[6] == "8"
        assert (
            row[7] == f"{summary['avg_max_steps']:.2f} ± {summary['avg_max_steps_se']:.2f}"
        )  # max and mean, each ± SE
        assert row[8].startswith(f"{summary['avg_mean_steps']:.2f} ± ")
    ranked = [line.split("|")[1].strip() for line in lines if line.startswith(("| baseline", "| random"))]
    means = {
        "baseline StructM": saved["structm"]["metrics"]["summary"]["avg_mean_steps"],
        "random nlm": saved["nlm"]["metrics"]["summary"]["avg_mean_steps"],
    }
    assert ranked == sorted(means, key=lambda n: -means[n])
    as_json = json.loads(
        _run(["eval", "compare", str(tmp_path / "structm"), str(tmp_path / "nlm"), "--format", "json"]).output
    )
    table = as_json["tables"][0]
    assert table["title"] == "association/synchronous" and {r["run"] for r in table["rows"]} == set(means)
    assert {r["run"]: r["mean_steps"] for r in table["rows"]} == means
    as_csv = list(
        csv.DictReader(
            io.StringIO(
                _run(["eval", "compare", str(tmp_path / "structm"), str(tmp_path / "nlm"), "--format", "csv"]).output
            )
        )
    )
    assert {r["run"]: float(r["max_steps"]) for r in as_csv} == {
        n: saved[k]["metrics"]["summary"]["avg_max_steps"]
        for n, k in (("baseline StructM", "structm"), ("random nlm", "nlm"))
    }
    bad = runner.invoke(app, ["eval", "compare", str(tmp_path / "nlm"), "--format", "xml"])
    assert bad.exit_code == 1 and "--format xml" in bad.output


def test_association_runs_over_different_rows_are_refused_with_the_reason(chain_dir, tmp_path):
    _association(chain_dir, tmp_path / "all")
    _association(chain_dir, tmp_path / "some", "--limit", "3", "--run-name", "first three")
    result = runner.invoke(app, ["eval", "compare", str(tmp_path / "all"), str(tmp_path / "some")])
    assert result.exit_code == 1
    assert (
        "different rows" in result.output
        and "first three: 3 rows" in result.output
        and "random structm: 8 rows" in result.output
    )
    assert "| first three" not in result.output  # not ranked together


def test_common_o_runs_over_different_rows_are_compared_on_shared_rows(co_dir, tmp_path):
    for name, extra in (("full", []), ("part", ["--limit", "5"])):
        _run(
            [
                "eval",
                "commono",
                "--model",
                "random",
                "--data",
                str(co_dir),
                "--out",
                str(tmp_path / name),
                "--bootstrap",
                "20",
                "--quiet",
                "--no-report",
                "--run-name",
                name,
                *extra,
            ]
        )
    comparison = compare_runs([tmp_path / "full", tmp_path / "part"])
    assert any("different rows" in n and "5 rows they all share" in n for n in comparison.notes)
    rows = {r["run"]: r for r in comparison.tables[0].rows}
    assert rows["full"]["n"] == rows["part"]["n"] == 5
    part = json.loads((tmp_path / "part" / "results.json").read_text())["metrics"]["overall"]
    assert (
        rows["full"]["accuracy"] == part["accuracy"]
    )  # the same answers on the same rows (random baseline, same seed)
    assert "Note:" in render_comparison(comparison, "md")
    report = _run(
        [
            "eval",
            "report",
            str(tmp_path / "full"),
            str(tmp_path / "part"),
            "--out",
            str(tmp_path / "both.html"),
            "--images",
            "none",
        ]
    )
    page = (tmp_path / "both.html").read_text()
    assert (
        "Report:" in report.output and "The runs answered different rows (full: 8 of 8 rows; part: 5 of 8 rows)" in page
    )
    same = compare_runs([tmp_path / "part", tmp_path / "part"])
    assert not any("different rows" in n for n in same.notes) and any(
        "several runs are named part" in n for n in same.notes
    )


def _current_lmms_eval_samples(ours_path, out_path):
    """What today's lmms-eval writes (EvaluationTracker.save_results_samples): doc popped, the arguments moved to
    'input', one-request lists flattened, resps dropped when equal to filtered_resps."""
    lines = []
    for line in ours_path.read_text().splitlines():
        sample = json.loads(line)
        sample["input"] = sample.pop("arguments")[0]
        resps, filtered = sample["resps"][0], sample["filtered_resps"][0]
        sample["resps"], sample["filtered_resps"] = resps, filtered
        sample.pop("doc")
        sample["target"] = str(sample["target"])
        lines.append(json.dumps(sample))
    out_path.write_text("\n".join(lines) + "\n")


def test_eval_score_reads_lmms_eval_samples_and_vlmevalkit_predictions(co_dir, tmp_path):
    _run(
        [
            "eval",
            "commono",
            "--model",
            "random",
            "--data",
            str(co_dir),
            "--out",
            str(tmp_path / "run"),
            "--bootstrap",
            "20",
            "--quiet",
            "--no-report",
        ]
    )
    saved = json.loads((tmp_path / "run" / "results.json").read_text())["metrics"]["overall"]
    ours = tmp_path / "run" / "lmms_eval" / "samples_common_o.jsonl"
    current = tmp_path / "20260101_120000_samples_common_o.jsonl"
    _current_lmms_eval_samples(ours, current)
    result = _run(
        ["eval", "score", str(current), "--data", str(co_dir), "--bootstrap", "20", "--run-name", "from lmms-eval"]
    )
    assert f"| {100 * saved['accuracy']:.2f}" in result.output
    out = tmp_path / "scored"
    _run(
        [
            "eval",
            "score",
            str(current),
            "--data",
            str(co_dir),
            "--bootstrap",
            "20",
            "--run-name",
            "from lmms-eval",
            "--out",
            str(out),
        ]
    )
    rescored = json.loads((out / "results.json").read_text())
    assert rescored["run_name"] == "from lmms-eval" and rescored["predictions_format"] == "lmms-eval"
    assert (
        rescored["metrics"]["overall"]["accuracy"] == saved["accuracy"]
        and rescored["metrics"]["overall"]["n"] == saved["n"]
    )
    # without the documents the rows are unknown: say to pass --data (not a duplicate-id complaint)
    bare = runner.invoke(app, ["eval", "score", str(current)])
    assert bare.exit_code == 1 and "--data" in bare.output and "more than once" not in bare.output
    # the older layout (and ours) keeps the document: no --data needed
    kept = runner.invoke(app, ["eval", "score", str(ours), "--bootstrap", "20"])
    assert kept.exit_code == 0 and f"| {100 * saved['accuracy']:.2f}" in kept.output, kept.output
    # VLMEvalKit's prediction table: our TSV's index and id columns plus `prediction` (a failed row left out)
    predictions = [json.loads(line) for line in (tmp_path / "run" / "predictions.jsonl").read_text().splitlines()]
    rows = ["index\tid\tquestion\tprediction"] + [
        f"{p['row_index']}\t{p['id']}\tq\t{p['raw_output']}" for p in predictions
    ]
    rows[1] = rows[1].rsplit("\t", 1)[0] + "\tFailed to obtain answer via API."
    (tmp_path / "m_CommonO.tsv").write_text("\n".join(rows) + "\n")
    vlm = json.loads(
        _run(
            [
                "eval",
                "score",
                str(tmp_path / "m_CommonO.tsv"),
                "--data",
                str(co_dir),
                "--bootstrap",
                "20",
                "--out",
                str(tmp_path / "vlm"),
            ]
        ).stdout
        and (tmp_path / "vlm" / "results.json").read_text()
    )
    assert (
        vlm["metrics"]["overall"]["n"] == saved["n"] - 1
        and vlm["skipped"] == 1
        and vlm["predictions_format"] == "vlmevalkit"
    )
    expected = sum(p["correct"] for p in predictions[1:]) / (len(predictions) - 1)
    assert vlm["metrics"]["overall"]["accuracy"] == pytest.approx(expected)


def test_eval_score_reads_a_vlmevalkit_xlsx_without_data(co_dir, tmp_path):
    """The prediction table VLMEvalKit writes over our exported TSV (xlsx, its default PRED_FORMAT) carries the
    choices and ground truth: it scores without --data, like our own run."""
    import pandas as pd

    from commonlink.eval.export.writers import export_vlmevalkit

    _run(
        [
            "eval",
            "commono",
            "--model",
            "random",
            "--data",
            str(co_dir),
            "--out",
            str(tmp_path / "run"),
            "--bootstrap",
            "20",
            "--quiet",
            "--no-report",
        ]
    )
    saved = json.loads((tmp_path / "run" / "results.json").read_text())["metrics"]["overall"]
    outputs = {
        json.loads(line)["row_index"]: json.loads(line)["raw_output"]
        for line in (tmp_path / "run" / "predictions.jsonl").read_text().splitlines()
    }
    export_vlmevalkit(tmp_path / "vlm", data=co_dir, splits=("main",), progress=False)
    table = pd.read_csv(tmp_path / "vlm" / "CommonO.tsv", sep="\t").drop(columns=["image"])
    table["prediction"] = [outputs[i] for i in table["index"]]
    with pd.ExcelWriter(
        tmp_path / "m_CommonO.xlsx", engine="xlsxwriter", engine_kwargs={"options": {"strings_to_formulas": False}}
    ) as writer:
        table.to_excel(writer, index=False)
    _run(["eval", "score", str(tmp_path / "m_CommonO.xlsx"), "--bootstrap", "20", "--out", str(tmp_path / "scored")])
    scored = json.loads((tmp_path / "scored" / "results.json").read_text())
    assert (
        scored["metrics"]["overall"]["accuracy"] == saved["accuracy"]
        and scored["metrics"]["overall"]["n"] == saved["n"]
    )
    assert scored["metrics"]["overall"]["hallucination_rate"] == pytest.approx(saved["hallucination_rate"])
    assert scored["run_name"] == "m_CommonO"


def test_run_names_on_perception_and_concept_and_the_report_of_several_association_runs(co_dir, chain_dir, tmp_path):
    _run(
        [
            "eval",
            "perception",
            "--model",
            "random",
            "--data",
            str(co_dir),
            "--out",
            str(tmp_path / "p"),
            "--bootstrap",
            "20",
            "--quiet",
            "--run-name",
            "chance, one image",
        ]
    )
    assert json.loads((tmp_path / "p" / "results.json").read_text())["run_name"] == "chance, one image"
    bad = runner.invoke(
        app,
        [
            "eval",
            "concept",
            "--data",
            str(chain_dir),
            "--model",
            "random",
            "--model",
            "random",
            "--run-name",
            "only one",
        ],
    )
    assert bad.exit_code == 1 and "one --run-name per --model" in bad.output
    _run(
        [
            "eval",
            "concept",
            "--data",
            str(chain_dir),
            "--model",
            "random",
            "--out",
            str(tmp_path / "k"),
            "--strategy",
            "normal",
            "--bootstrap",
            "20",
            "--quiet",
            "--run-name",
            "coin",
        ]
    )
    table = compare_runs([tmp_path / "k"]).tables[0]
    assert (
        table.title == "concept_perception"
        and [r["run"] for r in table.rows] == ["coin"]
        and table.rows[0]["task"] is not None
    )
    _association(chain_dir, tmp_path / "a1", "--memory", "chainm")
    _association(chain_dir, tmp_path / "a2", "--memory", "nom", "--run-name", "no memory")
    result = _run(
        ["eval", "report", str(tmp_path / "a1"), str(tmp_path / "a2"), "--out", str(tmp_path / "memories.html")]
    )
    page = (tmp_path / "memories.html").read_text()
    assert (
        "Report:" in result.output
        and "<td>random chainm</td>" in page
        and "<td>no memory</td>" in page
        and "Mean steps" in page
    )


def test_bootstrap_se_of_the_max_steps():
    import numpy as np

    from commonlink.eval.metrics import bootstrap_max_se
    from commonlink.kinds.association.metrics import chain_metrics

    assert bootstrap_max_se(np.array([4.0, 4.0, 4.0]), seed=0, key="k", n_boot=50) == 0.0  # every resample has max 4
    spread = bootstrap_max_se(np.array([0.0, 1.0, 2.0, 9.0]), seed=0, key="k", n_boot=200)
    assert spread > 1 and spread == bootstrap_max_se(
        np.array([0.0, 1.0, 2.0, 9.0]), seed=0, key="k", n_boot=200
    )  # seeded
    assert bootstrap_max_se(np.array([]), seed=0, key="k") is None
    chains = [
        {"group": g, "length": n, "ended": "wrong", "deductions": 0, "deductions_correct": 0}
        for g, n in (("a", 1), ("a", 5), ("b", 2), ("b", 2))
    ]
    summary = chain_metrics(chains, seed=0, n_boot=100)["summary"]
    per = chain_metrics(chains, seed=0, n_boot=100)["per_concept"]
    assert per["b"]["max_steps_se"] == 0.0 and per["a"]["max_steps_se"] > 0
    assert summary["avg_max_steps_se"] == pytest.approx(per["a"]["max_steps_se"] / 2)
