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
    assert (
        run_all.main(["--quick", "--bench-dir", str(folder), "--docs", str(docs), "--timeout", "60", "--repeats", "1"])
        == 0
    )

    results_md = (folder / "RESULTS.md").read_text()
    docs_text = docs.read_text()
    block = run_all.generated_block(results_md)
    assert block is not None and block == run_all.generated_block(docs_text)
    assert docs_text.startswith("# Benchmarks\n\nintro\n\n") and docs_text.endswith("\n\nafter the table\n")
    assert "old table" not in docs_text

    rows = _table_rows(block)
    good = [r for r in rows if r.startswith("| `bench_good.py` | widgets/s")]
    cpu = run_all.cpu_label(run_all.machine_description())
    # quick value, the peer named (its '|' escaped), ratio, target, met; one run, this machine's CPU, the load
    assert len(good) == 1 and good[0].startswith(
        f"| `bench_good.py` | widgets/s | 250 widgets/s | a plain \\| loop | 1.25 | >= 1.0 | yes | 1 | {cpu} | "
    )
    assert any(
        r.startswith("| `bench_good.py` | peak memory 2N vs N | 1.5 x | — | — | <= 1.3 | **no** | 1 |") for r in rows
    )
    failed = {r.split("|")[1].strip(): r for r in rows if "**script failed**" in r}
    assert set(failed) == {"`bench_bad_args.py`", "`bench_no_rows.py`", "`bench_crash.py`"}
    assert "unrecognized arguments: --quick --json ROWS.json | 1 |" in failed["`bench_bad_args.py`"]
    assert "no --json file written" in failed["`bench_no_rows.py`"]
    assert "the peer library is not installed" in failed["`bench_crash.py`"]
    assert "helper_not_a_bench" not in results_md
    assert "Machine: " in block and "| `bench_good.py` | quick |" in block

    saved = json.loads((folder / "results.json").read_text())
    assert saved["scripts"]["bench_good.py"]["exit"] == 0 and saved["scripts"]["bench_crash.py"]["exit"] == 1


def test_only_reruns_named_scripts_and_keeps_the_rest(bench_dir):
    folder, docs = bench_dir
    run_all.main(["--quick", "--bench-dir", str(folder), "--docs", str(docs), "--repeats", "1"])
    (folder / "bench_crash.py").write_text(
        GOOD.format(bench=str(ROOT / "benchmarks")).replace("bench_good.py", "bench_crash.py")
    )
    run_all.main(["--bench-dir", str(folder), "--docs", str(docs), "--only", "bench_crash.py", "--repeats", "2"])
    rows = _table_rows(run_all.generated_block((folder / "RESULTS.md").read_text()))
    assert any(  # full mode, two repeats of the same figures: the range is one number
        r.startswith("| `bench_crash.py` | widgets/s | 999 widgets/s (999–999) | a plain \\| loop | 1.25 (1.25–1.25) |")
        for r in rows
    )
    assert any(r.startswith("| `bench_bad_args.py` | **script failed**") for r in rows)  # kept from the first run
    with pytest.raises(SystemExit, match="bench_nope.py"):
        run_all.main(["--bench-dir", str(folder), "--docs", str(docs), "--only", "bench_nope.py"])


@pytest.mark.slow
def test_a_script_past_its_timeout_is_a_failure_row(tmp_path):
    folder = tmp_path / "b"
    folder.mkdir()
    (folder / "bench_slow.py").write_text(SLOW)
    run_all.main(["--bench-dir", str(folder), "--docs", "", "--timeout", "1", "--repeats", "3"])
    rows = _table_rows((folder / "RESULTS.md").read_text())
    assert len(rows) == 1 and rows[0].startswith(
        "| `bench_slow.py` | **script failed** | — | — | — | — | timed out after 1 s | 1 |"
    )
    saved = json.loads((folder / "results.json").read_text())["scripts"]["bench_slow.py"]
    assert [run["exit"] for run in saved["runs"]] == [None]  # not tried again: it would cost the timeout twice more


def test_docs_without_markers_are_refused_with_the_fix(bench_dir, tmp_path):
    folder, _ = bench_dir
    docs = tmp_path / "plain.md"
    docs.write_text("# no markers\n")
    with pytest.raises(SystemExit, match="marker lines"):
        run_all.main(["--render-only", "--bench-dir", str(folder), "--docs", str(docs)])
    assert docs.read_text() == "# no markers\n"


VARYING = """
import argparse, sys
from pathlib import Path
sys.path.insert(0, {bench!r})
from _results import add_contract_arguments, result_row, write_rows
parser = argparse.ArgumentParser()
add_contract_arguments(parser)
args = parser.parse_args()
here = Path(__file__).parent
with open(here / "order.log", "a") as log:
    log.write(Path(__file__).name + "\\n")
count = here / (Path(__file__).name + ".count")
run = int(count.read_text()) if count.exists() else 0
count.write_text(str(run + 1))
if run in {fail_on}:
    raise SystemExit("run " + str(run) + " lost its peer")
ratio = [1.3, 0.7, 1.1][run % 3]      # median 1.1 meets >= 1.0 although one run does not
value = [5.0, 9.0, 7.0][run % 3]      # median 7 misses < 6 although one run meets it
write_rows(args.json, [
    result_row(Path(__file__).name, f"speed (measured at load average {{run}}.5)", 100.0 + run, "items/s",
               peer="plain loop", ratio=ratio, target=">= 1.0"),
    result_row(Path(__file__).name, "seconds", value, "s", target="< 6"),
])
"""


def _varying(folder: Path, name: str, fail_on: tuple = ()) -> None:
    (folder / name).write_text(VARYING.format(bench=str(ROOT / "benchmarks"), fail_on=set(fail_on) or "set()"))


def test_repeats_interleave_scripts_and_rows_show_median_min_max_judged_on_the_median(tmp_path):
    folder = tmp_path / "b"
    folder.mkdir()
    _varying(folder, "bench_a.py")
    _varying(folder, "bench_b.py")
    assert run_all.main(["--quick", "--bench-dir", str(folder), "--docs", ""]) == 0  # default: 3 repeats

    assert (folder / "order.log").read_text().split() == ["bench_a.py", "bench_b.py"] * 3  # A B, A B, A B
    rows = _table_rows((folder / "RESULTS.md").read_text())
    cpu = run_all.cpu_label(run_all.machine_description())
    speed = [r for r in rows if r.startswith("| `bench_a.py` | speed")]
    # one row for the three repeats although the figure quotes its load; its text is the last repeat's
    assert len(speed) == 1 and speed[0].startswith(
        f"| `bench_a.py` | speed (measured at load average 2.5) | 101 items/s (100–102) | plain loop | "
        f"1.1 (0.7–1.3) | >= 1.0 | yes | 3 | {cpu} | "
    )
    assert any(r.startswith("| `bench_a.py` | seconds | 7 s (5–9) | — | — | < 6 | **no** | 3 |") for r in rows)

    saved = json.loads((folder / "results.json").read_text())["scripts"]["bench_a.py"]
    assert len(saved["runs"]) == 3 and all(len(run["load"]) == 2 for run in saved["runs"])  # before and after
    assert saved["cpu"] == cpu and saved["machine"] == run_all.machine_description()
    row = saved["rows"][0]
    assert (row["runs"], row["ratio"], row["ratio_range"], row["met"]) == (3, 1.1, [0.7, 1.3], True)
    assert row["cpu"] == cpu and row["load"][0] <= row["load"][1]
    script_line = next(
        line for line in (folder / "RESULTS.md").read_text().splitlines() if "| `bench_a.py` | quick |" in line
    )
    assert script_line.startswith("| `bench_a.py` | quick | 3 | ") and "| 0, 0, 0 |" in script_line


def test_a_repeat_that_fails_is_a_row_and_the_others_still_count(tmp_path):
    folder = tmp_path / "b"
    folder.mkdir()
    _varying(folder, "bench_a.py", fail_on=(1,))
    run_all.main(["--bench-dir", str(folder), "--docs", "", "--repeats", "3"])
    rows = _table_rows((folder / "RESULTS.md").read_text())
    assert any(r.startswith("| `bench_a.py` | seconds | 6 s (5–7) | — | — | < 6 | **no** | 2 |") for r in rows)
    failed = [r for r in rows if "**script failed**" in r]
    assert len(failed) == 1 and "1 of 3 runs failed, first run 2: exit 1: run 1 lost its peer | 1 |" in failed[0]
    saved = json.loads((folder / "results.json").read_text())["scripts"]["bench_a.py"]
    assert [run["exit"] for run in saved["runs"]] == [0, 1, 0] and saved["exit"] == 1


def test_only_merges_with_results_from_before_repeats_which_keep_their_own_cpu(tmp_path):
    folder = tmp_path / "b"
    folder.mkdir()
    _varying(folder, "bench_a.py")
    _varying(folder, "bench_old.py")
    old_row = {
        "benchmark": "bench_old.py", "figure": "old speed", "value": 3.0, "unit": "s", "peer": "a peer",
        "ratio": 1.5, "target": ">= 1.0", "met": True,
    }  # fmt: skip
    old = {
        "machine": "Linux x86_64, 4 of 8 CPUs usable (Old Vendor Chip 9000), 16 GiB RAM, Python 3.11.7",
        "scripts": {
            "bench_old.py": {
                "script": "bench_old.py", "quick": False, "date": "2026-01-02 03:04 UTC", "seconds": 12.0,
                "exit": 0, "output_tail": "", "load": [1.5, 2.5], "rows": [old_row],
            }
        },
    }  # fmt: skip
    (folder / "results.json").write_text(json.dumps(old))
    run_all.main(["--render-only", "--bench-dir", str(folder), "--docs", ""])  # the old file renders as it is
    rows = _table_rows((folder / "RESULTS.md").read_text())
    old_line = (
        "| `bench_old.py` | old speed | 3 s | a peer | 1.5 | >= 1.0 | yes | 1 (older run) | "
        "Old Vendor Chip 9000, 4 CPUs | 1.5–2.5 |"
    )
    assert rows == [old_line]

    run_all.main(["--bench-dir", str(folder), "--docs", "", "--only", "bench_a.py"])
    text = (folder / "RESULTS.md").read_text()
    rows = _table_rows(text)
    assert [r for r in rows if "bench_old.py" in r] == [old_line]  # its own CPU, date and load, one run
    cpu = run_all.cpu_label(run_all.machine_description())
    assert all(f"| 3 | {cpu} |" in r for r in rows if "bench_a.py" in r)
    assert (
        "Machines: " in text and "(Old Vendor Chip 9000)" in text and "| `bench_old.py` | full | 1 | 2026-01-02" in text
    )
    assert "bench_old.py" not in (folder / "order.log").read_text()
    with pytest.raises(SystemExit, match="--repeats must be 1 or more"):
        run_all.main(["--bench-dir", str(folder), "--docs", "", "--repeats", "0"])


def test_target_met_compares_ratio_else_value():
    row = results_helper.result_row("b.py", "x", 10.0, "s", peer="p", ratio=0.79, target=">= 0.8")
    assert row["met"] is False
    assert results_helper.result_row("b.py", "x", 10.0, "s", target="< 30")["met"] is True
    assert results_helper.result_row("b.py", "x", 10.0, "s")["met"] is None
    assert results_helper.result_row("b.py", "x", float("nan"), "s", target="< 30")["met"] is None
    with pytest.raises(ValueError, match="comparison"):
        results_helper.target_met(1.0, "about 1")


def test_a_target_the_script_judges_itself_is_met_only_when_every_repeat_met_it():
    row = {"benchmark": "b", "figure": "peak", "value": 1.0, "unit": "MiB", "peer": None, "ratio": None}
    target = "full - quarter < 16 MiB (flat)"
    runs = [[{**row, "target": target, "met": met}] for met in (True, True, False)]
    assert results_helper.combine_runs(runs)[0]["met"] is False
    assert results_helper.combine_runs(runs[:2])[0]["met"] is True


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
