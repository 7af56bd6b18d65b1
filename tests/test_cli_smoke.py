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
