"""The run commands ``commonlink export`` prints are the ones that work: the lmms-eval command for an
OpenAI-compatible server, run as printed by the real lmms-eval against a local server, scores every row; the same
command without the key it sets writes nothing and still exits 0 (lmms-eval's behaviour the command guards against)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from commonlink.cli import app
from commonlink.eval.export.run_commands import lmms_eval_commands, vlmevalkit_commands
from tests.fixtures.openai_server import LatencyServer
from tests.fixtures.tiny_models import common_o_rows, write_common_o_split

ROOT = Path(__file__).resolve().parents[1]


def test_vlmevalkit_commands_take_our_token_cap_per_task_and_keep_our_pixels(tmp_path):
    commands = dict(vlmevalkit_commands(tmp_path / "x.py", ["CommonO", "CommonO_Challenge", "CommonO_AssocSingleStep"]))
    server = [line for purpose, line in commands.items() if "--base-url" in line]
    assert len(server) == 2  # one --max-tokens per run in VLMEvalKit: one command per cap
    assert any("--data CommonO CommonO_Challenge " in line and "--max-tokens 1024" in line for line in server)
    assert any("--data CommonO_AssocSingleStep " in line and "--max-tokens 64" in line for line in server)
    assert all("--local-media" in line for line in server)


@pytest.mark.slow
def test_the_printed_lmms_eval_server_command_runs_and_scores_every_row(tmp_path):
    site = Path(os.environ.get("COMMONLINK_HARNESS_SITE") or ROOT / ".harness-site")
    if not (site / "bin" / "lmms-eval").is_file():
        pytest.skip("no lmms-eval environment (scripts/setup.sh makes .harness-site; or scripts/harness_site.sh DIR)")
    pytest.importorskip("openai")
    data = write_common_o_split(tmp_path / "data", common_o_rows(4, seed=3), split="main")
    result = CliRunner().invoke(
        app, ["export", "lmms-eval", "--out", str(tmp_path / "harness"), "--data", str(data), "--split", "main"]
    )
    assert result.exit_code == 0, result.output
    printed = " ".join(result.output.split())
    [command] = [
        line
        for _, line in lmms_eval_commands(tmp_path / "harness" / "commonlink_tasks", ["common_o_main"])
        if "--model openai" in line
    ]
    assert command.split(" --include_path")[0].replace("lmms-eval", "").strip() in printed  # the key as printed

    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENAI_API_BASE")}
    env.update(HF_DATASETS_CACHE=str(tmp_path / "hf"), PYTHONPATH=str(ROOT), PATH=f"{site / 'bin'}:{env['PATH']}")
    task = next(p.stem for p in (tmp_path / "harness" / "commonlink_tasks").glob("*.yaml"))
    with LatencyServer(latency_s=(0, 0), answer="Answer: A") as server:

        def run(line: str, out: Path) -> subprocess.CompletedProcess:
            line = line.replace("SERVED_MODEL_NAME", "m").replace("http://127.0.0.1:8000/v1", server.url)
            line = line.replace("lmms-runs/", f"{out}/").replace("--tasks common_o_main", f"--tasks {task}")
            return subprocess.run(
                ["bash", "-c", line], env=env, capture_output=True, text=True, timeout=900, check=False
            )

        without_key = run(command.replace("OPENAI_API_KEY=${OPENAI_API_KEY:-EMPTY} ", ""), tmp_path / "no-key")
        assert without_key.returncode == 0  # lmms-eval's own behaviour: a failed run still exits 0 ...
        assert not list((tmp_path / "no-key").rglob("*_results.json"))  # ... and writes nothing
        done = run(command, tmp_path / "runs")
        assert done.returncode == 0, done.stderr[-3000:]
        [samples] = list((tmp_path / "runs").rglob("*_samples_*.jsonl"))
        assert len(server.bodies) == 4
    scored = CliRunner().invoke(
        app, ["eval", "score", str(samples), "--data", str(data), "--split", "main", "--out", str(tmp_path / "scored")]
    )
    assert scored.exit_code == 0, scored.output
    assert json.loads((tmp_path / "scored" / "results.json").read_text())["dataset"]["rows_scored"] == 4
