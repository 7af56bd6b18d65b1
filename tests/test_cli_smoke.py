import pytest
from typer.testing import CliRunner

from commonlink import __version__
from commonlink.cli import app


def test_version():
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0
    assert __version__ in result.output


def test_help_lists_areas():
    result = CliRunner().invoke(app, ["--help"])
    assert result.exit_code == 0
    for word in ("release", "eval", "catalog"):
        assert word in result.output


def test_cli_and_loaders_import_no_heavy_dependency():
    """Light install: the CLI and the loaders must not import torch, transformers, the renderer, Ray or SAM."""
    import subprocess
    import sys

    code = (
        "import sys, commonlink.cli, commonlink.loaders\n"
        "from commonlink.loaders import load_common_o, load_association\n"
        "heavy = ('torch', 'transformers', 'pyrender', 'OpenGL', 'ray', 'segment_anything', 'vllm', 'openai')\n"
        "print(','.join(m for m in heavy if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == ""


@pytest.mark.slow
def test_every_command_has_help():
    runner = CliRunner()
    for args in (
        ["ingest"],
        ["pairs"],
        ["synth"],
        ["chains"],
        ["stats"],
        ["demo"],
        ["release", "build"],
        ["release", "push"],
        ["release", "versions"],
        ["catalog", "merge"],
        ["catalog", "info"],
        ["eval", "commono"],
        ["eval", "perception"],
        ["eval", "score"],
        ["eval", "compare"],
        ["eval", "association"],
    ):
        result = runner.invoke(app, [*args, "--help"])
        assert result.exit_code == 0, (args, result.output)
        assert "Usage" in result.output
