"""Common-O's k from the evidence: the default prior is Figure 7's random sample (smoothed), and `pairs --k-from`
copies an existing split's per-k counts (a local release here; the loader reads Hub datasets the same way)."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from typer.testing import CliRunner

from commonlink.cli import app
from commonlink.constants import NO_COMMON_OBJECTS
from commonlink.errors import InputError
from commonlink.fileio import read_jsonl
from commonlink.kinds.common_o.k_from import copy_k_distribution, k_counts_of
from commonlink.kinds.common_o.pairs import (
    PAPER_K_COUNTS,
    PAPER_K_SMOOTHING,
    PairsConfig,
    common_weights,
    pairs_meta,
    sample_pairs,
    write_pairs,
)
from commonlink.release.build import build_release
from tests.test_pairs import catalogs  # noqa: F401  (the module's catalogs fixture)

#: Figure 7's 18 randomly sampled Common-O Bench examples, counted by hand from the figure: k = 0..7.
FIGURE_7 = (2, 7, 3, 2, 1, 2, 1, 0)


def test_default_prior_is_figure_7_within_smoothing():
    assert PAPER_K_COUNTS == FIGURE_7 and sum(FIGURE_7) == 18
    weights = common_weights("paper", 7)
    share = sum(weights[3:]) / sum(weights)
    a, bins = PAPER_K_SMOOTHING, len(FIGURE_7)
    # exactly what the pseudo-count makes of the sample's 6/18 (k >= 3), and no more
    assert share == pytest.approx((6 + a * 5) / (18 + a * bins))
    assert abs(share - 6 / 18) <= a * bins / (18 + a * bins)  # smoothing moves a share by at most its mass
    assert weights[0] / sum(weights) == pytest.approx((2 + a) / (18 + a * bins))
    assert all(w > 0 for w in weights)  # k = 7 is allowed
    # Table 7's mistakes are not in it: k >= 3 would be 61% with them
    assert share < 0.45


def _ks(path) -> Counter:
    return Counter(len([t for t in row["ground_truth"] if t != NO_COMMON_OBJECTS]) for row in read_jsonl(path))


def test_k_from_a_release_reproduces_its_per_split_counts(catalogs, tmp_path):  # noqa: F811
    # a release with an uneven k distribution
    config = PairsConfig(split="main", count=40, max_common=3, max_uses=8, seed=2, common_distribution="1,5,3,1")
    rows, stats = sample_pairs(list(catalogs), config)
    write_pairs(tmp_path / "pairs.jsonl", rows, pairs_meta(config, list(catalogs), stats))
    build_release([tmp_path / "pairs.jsonl"], tmp_path / "release", name="source", progress=False)
    published = _ks(tmp_path / "pairs.jsonl")
    assert k_counts_of(tmp_path / "release", "main") == [published[k] for k in range(4)]
    # a new split with another seed copies those counts exactly (the catalogs have pairs for every k)
    result = CliRunner().invoke(
        app,
        [
            "pairs",
            *map(str, catalogs),
            "--out",
            str(tmp_path / "copy.jsonl"),
            "--k-from",
            str(tmp_path / "release"),
            "--max-common",
            "3",
            "--max-uses",
            "8",
            "--seed",
            "9",
        ],
    )
    assert result.exit_code == 0, result.output
    assert _ks(tmp_path / "copy.jsonl") == published
    meta = json.loads((tmp_path / "copy.jsonl.meta.json").read_text())
    assert meta["config"]["k_counts"] == [published[k] for k in range(4)]
    assert meta["config"]["k_from"].endswith(":main") and meta["count"] == 40
    # the Python API refuses what the CLI refuses: a --count that is not the copied split's size
    with pytest.raises(InputError, match="differs from the 40 examples"):
        copy_k_distribution(PairsConfig(count=41, max_common=3), tmp_path / "release", count_given=True)
    with pytest.raises(InputError, match="Widen --objects"):
        copy_k_distribution(PairsConfig(max_common=2), tmp_path / "release")
    missing = CliRunner().invoke(app, ["pairs", *map(str, catalogs), "--out", str(tmp_path / "x.jsonl")])
    assert missing.exit_code == 1 and "--count is required" in missing.output


def test_k_from_a_hub_dataset_reads_the_pushed_split(catalogs, hub, tmp_path):  # noqa: F811
    """The same counts from the release pushed to the (local) Hub, read by a real client process."""
    from tests.test_hub import ORG, run_cli, run_python

    config = PairsConfig(split="main", count=24, max_common=3, max_uses=8, seed=5, common_distribution="2,1,1,0")
    rows, stats = sample_pairs(list(catalogs), config)
    write_pairs(tmp_path / "pairs.jsonl", rows, pairs_meta(config, list(catalogs), stats))
    build_release([tmp_path / "pairs.jsonl"], tmp_path / "release", name="hubbed", progress=False)
    local = k_counts_of(tmp_path / "release", "main")
    repo = f"{ORG}/k-source"
    pushed = run_cli(hub, tmp_path, "release", "push", str(tmp_path / "release"), "--repo", repo, "--version", "1.0.0")
    assert pushed.returncode == 0, pushed.stderr
    code = (
        "import json\nfrom commonlink.kinds.common_o.k_from import k_counts_of\n"
        f"print(json.dumps({{'counts': k_counts_of({repo!r}, 'main', '1.0.0')}}))"
    )
    assert run_python(hub, tmp_path, code)["counts"] == local == [12, 6, 6]


def test_co_occurring_distractors_and_their_floors(catalogs, tmp_path):  # noqa: F811
    """--distractors co-occurring: every row's distractors are objects that appear with its true objects in the
    catalog (as many as exist), never a common object; the none/random floors are printed for the run."""
    from commonlink.formats.catalog import read_catalog
    from commonlink.kinds.common_o.pair_rows import cooccurrence

    out = tmp_path / "co.jsonl"
    result = CliRunner().invoke(
        app,
        [
            "pairs",
            *map(str, catalogs),
            "--out",
            str(out),
            "--count",
            "30",
            "--max-common",
            "3",
            "--max-uses",
            "8",
            "--distractors",
            "co-occurring",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "distractors: co-occurring" in result.output and "`none`" in result.output and "`random`" in result.output
    meta = json.loads((out.parent / (out.name + ".meta.json")).read_text())
    assert meta["config"]["distractors"] == "co-occurring" and meta["stats"]["baselines"]["none"] > 0
    records = {r.id: r for folder in catalogs for r in read_catalog(folder)}
    by_source = {}
    for r in records.values():
        if 3 <= len(set(r.objects)) <= 7:  # the eligible images the counts come from
            by_source.setdefault(r.source, []).append(r.objects)
    cooc = {s: cooccurrence(sets) for s, sets in by_source.items()}
    vocab = {s: {o for sets in by_source.values() for objs in sets for o in objs} for s in by_source}
    drawn, uniform = 0.0, 0.0  # drawn in proportion: their co-occurrence beats a uniform draw's expectation
    for row in read_jsonl(out):
        truth = [t for t in row["ground_truth"] if t != NO_COMMON_OBJECTS]
        anchors = truth or sorted(set(row["image_1"]["objects"]) | set(row["image_2"]["objects"]))
        distractors = [c for c in row["choices"] if c not in truth and c != NO_COMMON_OBJECTS]
        table = cooc[row["source"]]
        score = {c: sum(table.get(a, {}).get(c, 0) for a in anchors) for c in vocab[row["source"]] - set(truth)}
        assert not set(distractors) & set(truth)
        positive = [d for d in distractors if score[d] > 0]
        assert len(positive) == min(len(distractors), sum(v > 0 for v in score.values()))
        drawn += sum(score[d] for d in distractors)
        uniform += len(distractors) * sum(score.values()) / len(score)
    assert drawn > uniform
    with pytest.raises(InputError, match="not a distractor rule"):
        PairsConfig(count=5, distractors="similar").validate()
