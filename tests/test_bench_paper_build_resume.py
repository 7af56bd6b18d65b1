"""benchmarks/bench_paper_build.py without building anything: a failed stage says why (the signal, out of memory,
or the stage's own error), and a rerun resumes after the stages that finished (issue 40)."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


sys.path.insert(0, str(ROOT / "benchmarks"))  # the scripts import their helpers (_common, _results) by name
bench = importlib.import_module("bench_paper_build")
OPTIONS = {"resolution": 64, "workers": 2, "executor": "local", "ray_address": None}
TRACKER = (
    "/usr/lib/python3.11/multiprocessing/resource_tracker.py:254: UserWarning: resource_tracker: There appear to be "
    "6 leaked semaphore objects to clean up at shutdown\n  warnings.warn('resource_tracker: There appear to be %d '\n"
)


def test_a_stage_killed_by_a_signal_names_it_and_out_of_memory_when_the_kernel_says_so():
    cause = bench.failure_cause(-9, TRACKER, oom_before=3, oom_after=4)
    assert cause.startswith("killed by SIGKILL (signal 9); the out-of-memory killer killed 1 process(es) meanwhile")
    assert "out of memory" in cause and "leaked semaphore" not in cause and "warnings.warn" not in cause
    assert "it printed nothing" in cause
    by_hand = bench.failure_cause(-9, "", oom_before=3, oom_after=3)
    assert by_hand.startswith("killed by SIGKILL (signal 9) (not the out-of-memory killer: its count in this cgroup")
    unknown = bench.failure_cause(-9, "", oom_before=None, oom_after=None)
    assert unknown.startswith("killed by SIGKILL (signal 9) (by hand, or by the out-of-memory killer: its count is not")
    assert bench.failure_cause(-15, "", oom_before=None, oom_after=None).startswith("killed by SIGTERM (signal 15)")
    # the stage's own handler turns SIGTERM into exit status 143 after printing that it was stopped
    stopped = bench.failure_cause(143, "stage stopped by SIGTERM\n", oom_before=0, oom_after=0)
    assert stopped.startswith("killed by SIGTERM (signal 15)") and stopped.endswith("stage stopped by SIGTERM")


def test_a_stage_that_raises_prints_its_error():
    stderr = (
        'Traceback (most recent call last):\n  File "x.py", line 1, in <module>\n    render()\n'
        "commonlink.errors.BackendError: the offline renderer could not open an OpenGL context\n"
        "Fix: Install the EGL libraries.\n"  # our errors print their fix after the exception's line
    )
    cause = bench.failure_cause(1, stderr, oom_before=0, oom_after=0)
    assert cause.startswith("exit status 1: commonlink.errors.BackendError: the offline renderer could not open")
    assert "Traceback" in cause  # the end of what it printed follows


def _fake_stages(calls: list[str], fail_at: str | None):
    def run(command, env):
        stage = command[command.index("--stage") + 1]
        calls.append(stage)
        if stage == fail_at:
            return -9, "", TRACKER
        result = {"seconds": 1.0, "cpu_seconds": 1.0, "peak_rss_mb": 50.0, "start_rss_mb": 20.0, "info": {"s": stage}}
        return 0, "noise\nSTAGE-RESULT " + json.dumps(result) + "\n", ""

    return run


def test_a_rerun_resumes_after_the_finished_stages(tmp_path, monkeypatch):
    calls: list[str] = []
    monkeypatch.setattr(bench, "_run_stage_process", _fake_stages(calls, fail_at="pairs-main"))
    (tmp_path / "pairs-main.jsonl").write_text("half written")
    with pytest.raises(SystemExit) as err:
        bench.build(tmp_path, 0.01, OPTIONS, log=lambda line: None)
    assert str(err.value).startswith("stage pairs-main failed at scale 0.01: killed by SIGKILL (signal 9)")
    assert calls == list(bench.STAGES[: bench.STAGES.index("pairs-main") + 1])
    assert not (tmp_path / "pairs-main.jsonl").exists()  # a stage run again starts from none of its outputs

    calls.clear()
    lines: list[str] = []
    monkeypatch.setattr(bench, "_run_stage_process", _fake_stages(calls, fail_at=None))
    results = bench.build(tmp_path, 0.01, OPTIONS, log=lines.append)
    assert calls == list(bench.STAGES[bench.STAGES.index("pairs-main") :])
    assert list(results) == list(bench.STAGES) and results["ingest"]["info"] == {"s": "ingest"}
    assert sum("finished in an earlier run" in line for line in lines) == bench.STAGES.index("pairs-main")

    calls.clear()
    bench.build(tmp_path, 0.01, OPTIONS, log=lines.append)  # everything finished: nothing runs again
    assert calls == []
    bench.build(tmp_path, 0.01, {**OPTIONS, "resolution": 128}, log=lines.append)  # another build: all of it
    assert calls == list(bench.STAGES)


def test_rendering_uses_every_usable_cpu_by_default():
    assert bench.make_parser().parse_args([]).workers == bench.usable_cpus() >= 1
