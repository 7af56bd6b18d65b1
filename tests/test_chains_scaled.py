"""Issue 35: chain counts scaled to the pools (a 50-photo catalog with defaults builds a few MB, not 100), a
warning before a build larger than a user would expect, and automatic concept pairs spread over the concepts."""

from __future__ import annotations

import json
import logging
from collections import Counter

from typer.testing import CliRunner

from commonlink.cli import app
from commonlink.kinds.association.chain_config import LARGE_BUILD_STEPS, ChainConfig, scaled_chain_count
from commonlink.kinds.association.chain_plan import BuildPlan, _note_chain_counts
from tests.fixtures.catalogs import write_tiny_catalog

CONCEPTS = ["metal", "furry", "painted", "wooden", "round", "red", "soft", "shiny", "edible", "heavy"]


def _catalog(root, n=50):
    """``n`` photos, each with 3 of 10 concepts, overlapping so concept pairs have bridge images."""
    specs = [
        {
            "objects": sorted({CONCEPTS[i % 10], CONCEPTS[(i * 3 + 1) % 10], CONCEPTS[(i * 7 + 2) % 10]}),
            "seed": i,
            "scene_id": f"s{i}",
        }
        for i in range(n)
    ]
    write_tiny_catalog(root, specs)
    return root


def test_chains_on_a_50_photo_catalog_with_defaults_is_a_few_mb(tmp_path):
    catalog = _catalog(tmp_path / "cat")
    out = tmp_path / "chains"
    result = CliRunner().invoke(app, ["chains", str(catalog), "--out", str(out), "--min-pixels", "0"])
    assert result.exit_code == 0, result.output
    size = sum(p.stat().st_size for p in out.iterdir())
    assert size < 8_000_000  # the paper's fixed 2000 chains a concept wrote 104 MB for 54 photos
    meta = json.loads((out / "synchronous.jsonl.meta.json").read_text())
    pools = {c["name"]: c["pool_size"] for c in meta["concepts"]}
    counts = meta["chain_counts"]
    assert all(counts[c] == scaled_chain_count(pools[c]) == 4 * pools[c] for c in pools)
    assert meta["rows"] == sum(counts[c] for c in pools)
    assert "scaled to the pools" in result.output and "WARNING" not in result.output
    # the automatic pairs spread over the concepts (before: all 4 shared the concept of the largest pool)
    pairs = [tuple(p["concepts"]) for p in meta["pairs"]]
    assert len(pairs) == 4
    uses = Counter(c for p in pairs for c in p)
    assert max(uses.values()) <= 2 and len(uses) >= 6


def test_the_paper_count_for_pools_of_thousands_and_an_explicit_count_as_given():
    assert scaled_chain_count(3) == 12 and scaled_chain_count(1) == 10
    assert scaled_chain_count(500) == 2000 and scaled_chain_count(5000) == 5000  # the paper's max(2000, pool)
    assert ChainConfig(chains_per_concept=7).chain_count(300) == 7
    assert ChainConfig().chain_count(300) == 1200


def test_a_build_larger_than_expected_is_warned_about_before_it_starts(caplog):
    config = ChainConfig(chains_per_concept=2000, tasks=["synchronous"])
    plan = BuildPlan(
        concepts=[f"c{i}" for i in range(8)], pairs=[], options=[], pool_sizes={}, negative_pool_sizes={},
        bridge_pool_sizes={}, notes=[], chain_counts={f"c{i}": 2000 for i in range(8)},
    )  # fmt: skip
    with caplog.at_level(logging.WARNING):
        _note_chain_counts(plan, config)
    steps = 8 * 2000 * (config.max_steps + config.warmup)
    assert steps > LARGE_BUILD_STEPS
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 1 and f"writes {steps:,} chain steps" in warned[0] and "--chains" in warned[0]
    assert "(--chains 2000)" in plan.notes[0]


def test_eval_association_limit_draws_across_concepts_and_says_so(tmp_path):
    from tests.fixtures.tiny_chains import write_tiny_chain_files

    chains = write_tiny_chain_files(tmp_path / "assoc", chains_per_concept=3, max_steps=6)
    rows = [json.loads(line) for line in (chains / "synchronous.jsonl").read_text().splitlines()]
    concepts = list(dict.fromkeys("+".join(r["concepts"]) for r in rows))
    assert len(concepts) >= 2 and rows[0]["concepts"] == rows[1]["concepts"]  # stored concept by concept
    out = tmp_path / "run"
    result = CliRunner().invoke(
        app,
        ["eval", "association", "--data", str(chains), "--config", "synchronous", "--model", "random"]
        + ["--out", str(out), "--limit", str(len(concepts)), "--bootstrap", "20", "--quiet", "--no-report"],
    )
    assert result.exit_code == 0, result.output
    saved = json.loads((out / "results.json").read_text())
    assert sorted(saved["metrics"]["per_concept"]) == sorted(concepts)
    assert all(v["chains"] == 1 for v in saved["metrics"]["per_concept"].values())
    assert f"drawn across {len(concepts)} concept(s)" in saved["dataset"]["limit"]
    assert "drawn across" in result.output
