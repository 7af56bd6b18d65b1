"""Issue 35: every summary shows how much was really scored, and a run whose answers could not be parsed fails
loudly (exit 1, files written) unless allowed (--allow-unparseable / allow_unparseable=True)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from commonlink.cli import app
from commonlink.eval.compare import compare_runs
from commonlink.eval.scored import UnparseableError, check_parsed, scored_counts
from commonlink.kinds.association.task import evaluate_association
from tests.fixtures.openai_server import LatencyServer
from tests.fixtures.tiny_chains import write_tiny_chain_files
from tests.fixtures.tiny_models import common_o_rows, write_common_o_split

runner = CliRunner()


@pytest.fixture(scope="module")
def chains(tmp_path_factory):
    return write_tiny_chain_files(
        tmp_path_factory.mktemp("assoc"), chains_per_concept=2, max_steps=8, single_step_per_concept=3
    )


def _association(server, chains, config, out, *extra):
    return runner.invoke(
        app,
        ["eval", "association", "--data", str(chains), "--config", config, "--model", "m", "--backend", "openai"]
        + ["--backend-arg", f"base_url={server.url}", "--out", str(out), "--bootstrap", "20", "--quiet"]
        + ["--no-report", *extra],
    )


@pytest.mark.parametrize("config", ["synchronous", "single_step"])
def test_a_fully_unparseable_association_run_shows_its_rate_and_fails(chains, tmp_path, monkeypatch, config):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-local")
    with LatencyServer(latency_s=(0.0, 0.0), answer="I cannot tell which one.") as server:
        result = _association(server, chains, config, tmp_path / "run")
        assert result.exit_code == 1
        unit = "chains" if config == "synchronous" else "tasks"
        saved = json.loads((tmp_path / "run" / "results.json").read_text())  # written, then refused
        n = saved["scored"]["n"]
        assert n > 0 and saved["scored"]["unparseable"] == n and saved["scored"]["unparseable_rate"] == 1.0
        line = f"Scored: {n} {unit}; unparseable {n} (100.0%); refused requests 0."
        assert line in result.output and "no answer could be parsed" in result.output
        md = (tmp_path / "run" / "results.md").read_text()
        assert line in md and "**WARNING: no answer could be parsed" in md
        # allowed: exit 0, still warned
        allowed = _association(server, chains, config, tmp_path / "run", "--allow-unparseable")
    assert allowed.exit_code == 0, allowed.output
    assert line in allowed.output and "WARNING: no answer could be parsed" in allowed.output
    # compare shows the parse failures and refusals of the run
    row = compare_runs([tmp_path / "run"]).tables[0].rows[0]
    assert row["parse_failure_rate"] == 1.0 and row["refused"] == 0


def test_the_python_api_refuses_an_unparseable_run_too(chains, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-local")
    with LatencyServer(latency_s=(0.0, 0.0), answer="no idea") as server:
        options = dict(backend_options={"base_url": server.url}, n_boot=20, progress=False, report=False)
        with pytest.raises(UnparseableError) as err:
            evaluate_association(chains, "single_step", ["m"], "openai", tmp_path / "api", **options)
        assert err.value.results["scored"]["unparseable_rate"] == 1.0
        results = evaluate_association(
            chains, "single_step", ["m"], "openai", tmp_path / "api", allow_unparseable=True, **options
        )
    assert results["scored"]["warning"].startswith("WARNING: no answer could be parsed")


def test_a_share_past_the_limit_fails_and_a_share_within_it_does_not():
    results = {"task": "common_o", "metrics": {"overall": {"n": 10, "parse_failures": 3}}, "skipped_rows": []}
    assert check_parsed(results, 0.5) is None
    with pytest.raises(UnparseableError, match="more than 20% of the answers could not be parsed"):
        check_parsed(results, 0.2)
    assert "3 of 10 rows" in check_parsed(results, 0.2, allow=True)
    with pytest.raises(Exception, match="between 0 and 1"):
        check_parsed(results, 1.5)
    refused = dict(results, skipped_rows=[{"row": 1, "id": "main-1", "reason": "400"}, {"row": 2, "id": None}])
    counts = scored_counts(refused)
    assert (counts.refused, counts.unreadable, counts.unparseable_rate) == (1, 1, 0.3)


def test_common_o_console_and_results_md_show_what_was_scored(tmp_path):
    data = write_common_o_split(tmp_path / "data", common_o_rows(6, seed=3))
    result = runner.invoke(
        app,
        ["eval", "commono", "--model", "random", "--data", str(data), "--out", str(tmp_path / "run")]
        + ["--bootstrap", "20", "--quiet"],
    )
    assert result.exit_code == 0, result.output
    line = "Scored: 6 rows; unparseable 0 (0.0%); refused requests 0."
    assert line in result.output and line in (tmp_path / "run" / "results.md").read_text()
    page = (tmp_path / "run" / "report.html").read_text()
    assert (
        "<th>Data</th><th>Scored</th>" in page and "<td>6 rows; unparseable 0 (0.0%); refused requests 0.</td>" in page
    )
    compared = runner.invoke(app, ["eval", "compare", str(tmp_path / "run")])
    header = next(x for x in compared.output.splitlines() if x.startswith("| Run"))
    assert "| n |" in header and "Parse fail. (%)" in header and header.rstrip().endswith("| Refused |")


def test_dry_run_tells_the_cost_and_sends_nothing(chains, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-local")
    with LatencyServer(latency_s=(0.0, 0.0)) as server:
        result = _association(server, chains, "synchronous", tmp_path / "run", "--dry-run")
        assert result.exit_code == 0, result.output
        assert server.bodies == [] and not (tmp_path / "run").exists()
    rows = [json.loads(line) for line in (chains / "synchronous.jsonl").read_text().splitlines()]
    bound = 2 * sum(min(len(r["plan"]), 500) for r in rows)  # a selection and a deduction a step, at most
    assert f"This run sends up to {bound:,} requests with {5 * bound // 2:,} images" in result.output


def test_a_run_tells_what_it_sends_before_the_first_request(tmp_path):
    data = write_common_o_split(tmp_path / "data", common_o_rows(6, seed=3))
    result = runner.invoke(
        app,
        ["eval", "commono", "--model", "random", "--data", str(data), "--out", str(tmp_path / "run")]
        + ["--bootstrap", "20", "--quiet", "--no-report"],
    )
    assert result.exit_code == 0, result.output
    line = "This run sends 6 requests with 12 images: about "
    assert line in result.output and result.output.index(line) < result.output.index("| Run")
    saved = json.loads((tmp_path / "run" / "results.json").read_text())
    assert saved["estimate"]["requests"] == 6 and saved["estimate"]["images"] == 12
    assert saved["estimate"]["output_tokens"] == 6 * saved["generation"]["max_new_tokens"]
