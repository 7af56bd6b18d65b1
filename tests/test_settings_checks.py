"""Validation lives in the library: the settings types refuse what the CLI refuses, with the same words.

Each case gives a bad value once on the command line and once to the Python API (the settings record or the
function the command calls) and checks that both are refused with the same problem and fix.
"""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from commonlink.catalog.sam_masks import AutoMaskSettings
from commonlink.cli import app
from commonlink.errors import InputError
from commonlink.eval.backends import GenerationSettings
from commonlink.eval.evaluator import RunOptions
from commonlink.eval.report.html import write_report
from commonlink.kinds.association.refine.review import export_review
from commonlink.kinds.association.task import AssociationSettings

runner = CliRunner()
COMMONO = ["eval", "commono", "--model", "random", "--data", "nowhere", "--out", "{tmp}/run"]
ASSOCIATION = ["eval", "association", "--model", "random", "--data", "nowhere", "--config", "synchronous"]

CASES = [
    # (command line, the same setting given to the Python API)
    ([*COMMONO, "--max-new-tokens", "0"], lambda tmp: GenerationSettings(max_new_tokens=0)),
    ([*COMMONO, "--temperature", "-0.5"], lambda tmp: GenerationSettings(temperature=-0.5)),
    ([*COMMONO, "--top-p", "0"], lambda tmp: GenerationSettings(top_p=0.0)),
    ([*COMMONO, "--top-p", "1.5"], lambda tmp: GenerationSettings(top_p=1.5)),
    ([*COMMONO, "--max-pixels", "-1"], lambda tmp: GenerationSettings(max_pixels=-1)),
    ([*COMMONO, "--gen-arg", "temperature=0.7"], lambda tmp: GenerationSettings(extra={"temperature": 0.7})),
    ([*COMMONO, "--gen-arg", "seed=3"], lambda tmp: GenerationSettings(extra={"seed": 3})),
    ([*COMMONO, "--batch-size", "0"], lambda tmp: RunOptions(models=["random"], batch_size=0)),
    ([*COMMONO, "--limit", "0"], lambda tmp: RunOptions(models=["random"], limit=0)),
    ([*COMMONO, "--bootstrap", "1"], lambda tmp: RunOptions(models=["random"], n_boot=1)),
    ([*COMMONO, "--max-unreadable-share", "1.5"], lambda tmp: RunOptions(max_unreadable_share=1.5)),
    ([*ASSOCIATION, "--max-steps", "0"], lambda tmp: AssociationSettings(max_steps=0)),
    ([*ASSOCIATION, "--strategy", "shout"], lambda tmp: AssociationSettings(strategy="shout")),
    ([*ASSOCIATION, "--limit", "0"], lambda tmp: RunOptions(models=["random"], limit=0)),
    (["eval", "report", "{tmp}/run", "--thumb-size", "8"], lambda tmp: write_report([tmp / "run"], thumb_size=8)),
    (
        ["chains", "review", "{tmp}/chains", "--out", "{tmp}/review", "--thumb-size", "8"],
        lambda tmp: export_review([tmp / "chains"], tmp / "review", thumbnail=8),
    ),
    (
        ["chains", "review", "{tmp}/chains", "--out", "{tmp}/review", "--limit", "0"],
        lambda tmp: export_review([tmp / "chains"], tmp / "review", limit=0),
    ),
    (
        ["stats", "{tmp}/catalog", "--min-area", "0.3", "--max-area", "0.1"],
        lambda tmp: AutoMaskSettings(min_fraction=0.3, max_fraction=0.1),
    ),
]


@pytest.mark.parametrize(("argv", "api"), CASES, ids=[" ".join(argv[:2] + argv[-2:]) for argv, _ in CASES])
def test_the_python_api_refuses_what_the_cli_refuses_in_the_same_words(tmp_path, argv, api):
    with pytest.raises(InputError) as refused:
        api(tmp_path)
    problem, fix = refused.value.problem, refused.value.fix
    result = runner.invoke(app, [a.replace("{tmp}", str(tmp_path)) for a in argv])
    assert result.exit_code == 1, result.output
    assert f"Error: {problem}" in result.output, (problem, result.output)
    if fix:
        assert f"Fix: {fix}" in result.output, (fix, result.output)
    assert not (tmp_path / "run").exists() and not (tmp_path / "review").exists()  # refused before anything is written


def test_good_settings_pass_and_keep_their_values():
    settings = GenerationSettings(max_new_tokens=1, temperature=0.0, top_p=1.0, max_pixels=0, extra={"top_k": 20})
    assert settings.to_dict()["extra"] == {"top_k": 20}
    assert RunOptions(models=["random"], batch_size=1, limit=1, n_boot=2, max_unreadable_share=1.0).limit == 1
    assert AutoMaskSettings(min_fraction=0.0, max_fraction=1.0).max_fraction == 1.0


def test_a_run_without_a_model_is_refused():
    with pytest.raises(InputError, match="No model given"):
        RunOptions(models=[])
