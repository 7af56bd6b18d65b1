"""benchmarks/bench_paper_build.py at a tiny scale: every stage runs in its own process, rendering goes through
a local Ray cluster, and the build ends in a loadable release scored by both baselines."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytest.importorskip("ray")
pytest.importorskip("pyrender")


def _load():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location("bench_paper_build", ROOT / "benchmarks" / "bench_paper_build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_tiny_paper_build_on_a_local_ray_cluster(tmp_path):
    bench = _load()
    scale = 1 / 1000  # the smallest sizes: 16 + 16 rows, 12 photos, 3 + 3 scenes
    options = {"resolution": 128, "workers": 1, "executor": "ray", "ray_address": None}
    lines = []
    results = bench.build(tmp_path, scale, options, log=lines.append)

    assert list(results) == list(bench.STAGES) and len(lines) == len(bench.STAGES)
    for stage, result in results.items():
        assert result["seconds"] > 0 and result["peak_rss_mb"] > 10, stage
        assert 10 < result["start_rss_mb"] < result["peak_rss_mb"], stage  # the part before the stage began
        assert bench._above_start(result) == result["peak_rss_mb"] - result["start_rss_mb"]
    for stage in bench.RENDER_STAGES:
        info = results[stage]["info"]
        assert info["ray_nodes"] == 1 and info["ray_cpus"] >= 1 and info["scenes"] == 3 and info["images"] == 12
    assert results["ingest"]["info"] == {"added": 12, "refused": 0}
    assert results["pairs-main"]["info"]["real_fraction"] == pytest.approx(0.45, abs=0.05)
    assert results["release"]["info"]["rows"] == {"main": 16, "challenge": 16}
    scored = results["baselines"]["info"]["scored"]
    assert set(scored) == {"main-none", "main-random", "challenge-none", "challenge-random"}
    assert all(0.0 <= s["accuracy"] <= 1.0 for s in scored.values())

    import datasets

    loaded = datasets.load_dataset(str(tmp_path / "release"))
    assert {split: len(ds) for split, ds in loaded.items()} == {"main": 16, "challenge": 16}
    assert sum(1 for row in loaded["main"] if row["real_or_synthetic"] == "real") == 7

    # the projection: a line through two sizes, per stage, never below zero
    small = {s: {"seconds": 10.0} for s in bench.STAGES}
    large = {s: {"seconds": 12.0} for s in bench.STAGES}
    assert bench.extrapolate(small, large, 0.025, 0.05)["release"] == pytest.approx(10.0 - 2.0 + 80.0)
    assert bench.extrapolate(large, small, 0.025, 0.05)["release"] == 12.0  # shrinking with size: noise, keep the max
