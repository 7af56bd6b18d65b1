"""Output sent to a file reads well: no progress-bar frames, no library bars, no table or path cut at 80 columns,
``--help`` whole. Each command runs as a user runs it, in its own process with stdout and stderr redirected."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

pytestmark = pytest.mark.slow  # whole client processes

REPO = Path(__file__).resolve().parents[1]
# What a bar leaves behind: rich's bar (a run of its line glyphs before "N/M"), tqdm's "NN%|" and blocks, the rate
# units and the ETA column. (Tables' heavy rules use the same glyph, so the glyph alone is no mark.)
BAR_PATTERNS = (r"[━╸╺]+ +\d+/\d+", r"\d+%\|", "█", r"\b(it|examples|rows|scenes|tasks|steps)/s\b", r"\bETA\b")


def _run_logged(args: list[str], log: Path, cwd: Path) -> str:
    """``commonlink ARGS > log 2>&1``, as a shell would (no terminal anywhere); returns the log."""
    env = {k: v for k, v in os.environ.items() if k not in ("TERMINAL_WIDTH", "COLUMNS", "FORCE_COLOR")}
    env.pop("HF_DATASETS_DISABLE_PROGRESS_BARS", None)
    env.pop("HF_HUB_DISABLE_PROGRESS_BARS", None)
    env["PYTHONPATH"] = str(REPO)
    with log.open("w") as handle:
        done = subprocess.run(
            [sys.executable, "-m", "commonlink", *args],
            stdout=handle,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=cwd,
            env=env,
            timeout=600,
        )
    text = log.read_text(encoding="utf-8")
    assert done.returncode in (0, 2), text
    return text


def _assert_reads_well(text: str, paths: list[Path]) -> None:
    for pattern in BAR_PATTERNS:
        assert not re.search(pattern, text), f"a progress bar ({pattern!r}) in the log:\n{text}"
    assert "\x1b[" not in text, "terminal escape codes in a log file"
    for path in paths:  # each printed path whole on one line, so it can be copied back into a shell
        assert str(path) in text, f"{path} is not on one line of the log:\n{text}"


def test_demo_ingest_build_and_eval_logs_hold_no_bars_and_no_cut_paths(tmp_path):
    pytest.importorskip("pyrender")
    deep = tmp_path / ("a-folder-with-a-long-name-" * 3) / "photos"
    deep.mkdir(parents=True)
    rng = np.random.default_rng(0)
    lines = ["file,objects"]
    for i in range(12):
        Image.fromarray(rng.integers(0, 255, (64, 80, 3), dtype=np.uint8)).save(deep / f"photo-{i:02d}.png")
        lines.append(f"photo-{i:02d}.png,cup;plate" if i % 2 else f"photo-{i:02d}.png,cup;fork")
    lines.append("missing-photo-with-a-long-file-name-that-would-wrap-a-table-cell.png,cup;fork")
    manifest = tmp_path / "labels.csv"
    manifest.write_text("\n".join(lines) + "\n")
    catalog = tmp_path / "catalog-with-a-long-enough-name-to-wrap-at-eighty-columns"

    ingest = _run_logged(
        ["ingest", str(deep), "--manifest", str(manifest), "--out", str(catalog), "--min-pixels", "100"],
        tmp_path / "ingest.log",
        tmp_path,
    )
    _assert_reads_well(ingest, [catalog, catalog / "ingest_report.json"])
    assert "missing-photo-with-a-long-file-name-that-would-wrap-a-table-cell.png" in ingest

    demo_out = tmp_path / "demo-output-folder-with-a-long-name"
    demo = _run_logged(
        ["demo", "--out", str(demo_out), "--scale", "0.05", "--resolution", "64x64"], tmp_path / "demo.log", tmp_path
    )
    _assert_reads_well(demo, [demo_out / "release", demo_out / "eval" / "main-random" / "results.json"])
    assert "Generating" not in demo  # datasets' own "Generating main split" bars

    release = tmp_path / "release-built-again-with-a-long-name"
    build = _run_logged(
        ["release", "build", str(demo_out / "pairs-main.jsonl"), "--out", str(release)],
        tmp_path / "build.log",
        tmp_path,
    )
    _assert_reads_well(build, [release])

    run_dir = tmp_path / "an-eval-run-folder-with-a-long-name"
    score = _run_logged(
        ["eval", "commono", "--data", str(release), "--split", "main", "--model", "random", "--out", str(run_dir)],
        tmp_path / "eval.log",
        tmp_path,
    )
    _assert_reads_well(score, [run_dir])
    assert json.loads((run_dir / "results.json").read_text())["dataset"]["rows_scored"] > 0
    for line in score.splitlines():  # the results table keeps one row per line
        if line.startswith("| random"):
            assert line.rstrip().endswith("|"), line


def test_help_off_a_terminal_is_whole(tmp_path):
    """``--help`` into a file: no option, default or help text cut with "…" (rich cuts to fit 80 columns)."""
    for command in (["eval", "commono"], ["eval", "association"], ["chains"], ["release", "build"], ["ingest"]):
        text = _run_logged([*command, "--help"], tmp_path / "help.log", tmp_path)
        assert "…" not in text, f"commonlink {' '.join(command)} --help cuts text:\n{text}"
        assert "Usage:" in text
