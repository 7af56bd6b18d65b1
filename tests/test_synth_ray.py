"""`commonlink synth --executor ray` on a local Ray instance (one CPU): same files as a local run."""

from __future__ import annotations

import pytest

from commonlink.fileio import sha256_file
from commonlink.formats.catalog import read_catalog
from commonlink.synth.job import SceneChecks, SynthJob
from commonlink.synth.plan import PlanConfig
from commonlink.synth.runner import synthesize

pytestmark = pytest.mark.slow  # every test here runs whole client processes or pipelines

ray = pytest.importorskip("ray")


@pytest.mark.slow
def test_ray_executor_matches_local(tmp_path):
    config = SynthJob(
        scenes=2, seed=11, plan=PlanConfig(3, 4, views=2, width=64, height=64), checks=SceneChecks(min_visible_pixels=4)
    )
    ray.init(num_cpus=1, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    try:
        summary = synthesize(tmp_path / "ray", config, executor="ray", progress=False)
    finally:
        ray.shutdown()
    assert summary.scenes_rendered == 2 and summary.catalog_records == 4
    synthesize(tmp_path / "local", config, progress=False)

    def files(root):
        return {p.relative_to(root).as_posix(): sha256_file(p) for p in (root / "scenes").rglob("*") if p.is_file()}

    assert files(tmp_path / "ray") == files(tmp_path / "local")
    assert [r.id for r in read_catalog(tmp_path / "ray")] == [r.id for r in read_catalog(tmp_path / "local")]
