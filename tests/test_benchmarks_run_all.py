"""benchmarks/run_all.py: runs every bench script under the contract, survives failing ones, and writes
RESULTS.md and the docs table from the same rows (so the committed pair must agree)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


run_all = _load("run_all")
results_helper = _load("_results")

GOOD = """
import argparse, json, sys
sys.path.insert(0, {bench!r})
from _results import add_contract_arguments, result_row, write_rows
parser = argparse.ArgumentParser()
add_contract_arguments(parser)
args = parser.parse_args()
rows = [result_row("bench_good.py", "widgets/s", 250.0 if args.quick else 999.0, "widgets/s", peer="a plain | loop",
                   ratio=1.25, target=">= 1.0"),
        result_row("bench_good.py", "peak memory 2N vs N", 1.5, "x", target="<= 1.3")]
write_rows(args.json, rows)
"""
BAD_ARGS = "import argparse\nargparse.ArgumentParser().parse_args()\n"  # knows neither --quick nor --json
NO_ROWS = "print('did some work but wrote no rows')\n"
CRASH = "raise RuntimeError('the peer library is not installed: pip install thing')\n"
SLOW = "import time\ntime.sleep(30)\n"


@pytest.fixture()
def bench_dir(tmp_path):
    folder = tmp_path / "benchmarks"
    folder.mkdir()
    (folder / "bench_good.py").write_text(GOOD.format(bench=str(ROOT / "benchmarks")))
    (folder / "bench_bad_args.py").write_text(BAD_ARGS)
    (folder / "bench_no_rows.py").write_text(NO_ROWS)
    (folder / "bench_crash.py").write_text(CRASH)
    (folder / "helper_not_a_bench.py").write_text("raise SystemExit('must not run')\n")
    docs = tmp_path / "benchmarks.md"
    docs.write_text(f"# Benchmarks\n\nintro\n\n{run_all.BEGIN}\nold table\n{run_all.END}\n\nafter the table\n")
    return folder, docs


def _table_rows(block: str) -> list[str]:
    """Rows of the results table (the per-script status table after it is left out)."""
    rows_part = block.split("| script | mode |")[0]
    return [line for line in rows_part.splitlines() if line.startswith("| `bench_")]


def test_run_all_writes_one_table_to_both_files_and_records_failures(bench_dir):
    folder, docs = bench_dir
    assert run_all.main(["--quick", "--bench-dir", str(folder), "--docs", str(docs), "--timeout", "60"]) == 0

    results_md = (folder / "RESULTS.md").read_text()
    docs_text = docs.read_text()
    block = run_all.generated_block(results_md)
    assert block is not None and block == run_all.generated_block(docs_text)
    assert docs_text.startswith("# Benchmarks\n\nintro\n\n") and docs_text.endswith("\n\nafter the table\n")
    assert "old table" not in docs_text

    rows = _table_rows(block)
    good = [r for r in rows if r.startswith("| `bench_good.py` | widgets/s")]
    # quick value, the peer named (its '|' escaped), ratio, target, met
    assert good == ["| `bench_good.py` | widgets/s | 250 widgets/s | a plain \\| loop | 1.25 | >= 1.0 | yes |"]
    assert "| `bench_good.py` | peak memory 2N vs N | 1.5 x | — | — | <= 1.3 | **no** |" in rows
    failed = {r.split("|")[1].strip(): r for r in rows if "**script failed**" in r}
    assert set(failed) == {"`bench_bad_args.py`", "`bench_no_rows.py`", "`bench_crash.py`"}
    assert "unrecognized arguments: --quick --json ROWS.json |" in failed["`bench_bad_args.py`"]
    assert "no --json file written" in failed["`bench_no_rows.py`"]
    assert "the peer library is not installed" in failed["`bench_crash.py`"]
    assert "helper_not_a_bench" not in results_md
    assert "Machine: " in block and "| `bench_good.py` | quick |" in block

    saved = json.loads((folder / "results.json").read_text())
    assert saved["scripts"]["bench_good.py"]["exit"] == 0 and saved["scripts"]["bench_crash.py"]["exit"] == 1


def test_only_reruns_named_scripts_and_keeps_the_rest(bench_dir):
    folder, docs = bench_dir
    run_all.main(["--quick", "--bench-dir", str(folder), "--docs", str(docs)])
    (folder / "bench_crash.py").write_text(
        GOOD.format(bench=str(ROOT / "benchmarks")).replace("bench_good.py", "bench_crash.py")
    )
    run_all.main(["--bench-dir", str(folder), "--docs", str(docs), "--only", "bench_crash.py"])
    rows = _table_rows(run_all.generated_block((folder / "RESULTS.md").read_text()))
    assert (
        "| `bench_crash.py` | widgets/s | 999 widgets/s | a plain \\| loop | 1.25 | >= 1.0 | yes |" in rows
    )  # full mode
    assert any(r.startswith("| `bench_bad_args.py` | **script failed**") for r in rows)  # kept from the first run
    with pytest.raises(SystemExit, match="bench_nope.py"):
        run_all.main(["--bench-dir", str(folder), "--docs", str(docs), "--only", "bench_nope.py"])


@pytest.mark.slow
def test_a_script_past_its_timeout_is_a_failure_row(tmp_path):
    folder = tmp_path / "b"
    folder.mkdir()
    (folder / "bench_slow.py").write_text(SLOW)
    run_all.main(["--bench-dir", str(folder), "--docs", "", "--timeout", "1"])
    rows = _table_rows((folder / "RESULTS.md").read_text())
    assert rows == ["| `bench_slow.py` | **script failed** | — | — | — | — | timed out after 1 s |"]


def test_docs_without_markers_are_refused_with_the_fix(bench_dir, tmp_path):
    folder, _ = bench_dir
    docs = tmp_path / "plain.md"
    docs.write_text("# no markers\n")
    with pytest.raises(SystemExit, match="marker lines"):
        run_all.main(["--render-only", "--bench-dir", str(folder), "--docs", str(docs)])
    assert docs.read_text() == "# no markers\n"


def test_target_met_compares_ratio_else_value():
    row = results_helper.result_row("b.py", "x", 10.0, "s", peer="p", ratio=0.79, target=">= 0.8")
    assert row["met"] is False
    assert results_helper.result_row("b.py", "x", 10.0, "s", target="< 30")["met"] is True
    assert results_helper.result_row("b.py", "x", 10.0, "s")["met"] is None
    assert results_helper.result_row("b.py", "x", float("nan"), "s", target="< 30")["met"] is None
    with pytest.raises(ValueError, match="comparison"):
        results_helper.target_met(1.0, "about 1")


def test_committed_results_and_docs_table_agree_row_for_row():
    results_md = ROOT / "benchmarks" / "RESULTS.md"
    docs = ROOT / "docs" / "benchmarks.md"
    block = run_all.generated_block(results_md.read_text())
    assert block is not None, "benchmarks/RESULTS.md has no generated table: run benchmarks/run_all.py --quick"
    assert block == run_all.generated_block(docs.read_text()), (
        "docs/benchmarks.md table differs: run benchmarks/run_all.py --render-only"
    )
    saved = json.loads((ROOT / "benchmarks" / "results.json").read_text())
    assert block == run_all.render_table(saved)
    for line in _table_rows(block):
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        if cells[1] != "**script failed**" and cells[4] != "—":
            assert cells[3] != "—", f"a row with a ratio must name its peer: {line}"


@pytest.mark.slow
@pytest.mark.parametrize("script", sorted(p.name for p in (ROOT / "benchmarks").glob("bench_*.py")))
def test_every_script_starts_as_the_docs_run_it(script, tmp_path):
    """`.venv/bin/python benchmarks/bench_x.py`, from anywhere, no PYTHONPATH: `_common` must put the repository
    on sys.path before anything imports `commonlink` or `tests.fixtures` (an import sorter once moved it below)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), "--help"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage" in done.stdout.lower()
