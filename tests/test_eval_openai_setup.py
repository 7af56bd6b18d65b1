"""The openai backend set up wrong: a missing key or an unreachable server is named at once, with the endpoint and
the variable, before any row is sent."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from commonlink.cli import app
from commonlink.errors import BackendError
from commonlink.eval.backends import load_backend
from tests.fixtures.tiny_models import common_o_rows, write_common_o_split

pytest.importorskip("openai")


def test_no_key_and_no_base_url_is_refused_at_once_naming_the_variable_and_the_endpoint(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(BackendError) as refused:
        load_backend("openai", "gpt-4o")
    text = f"{refused.value.problem} {refused.value.fix}"
    assert "$OPENAI_API_KEY is not set" in text and "https://api.openai.com/v1" in text
    assert "base_url=" in text  # the way to a local server


def test_a_local_server_needs_no_key(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    backend = load_backend("openai", "m", base_url="http://127.0.0.1:9/v1")
    assert backend.info.details["api_key"] == "none ($OPENAI_API_KEY not set)"


def test_the_cli_says_so_without_retrying(tmp_path, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    data = write_common_o_split(tmp_path / "data", common_o_rows(3, seed=1))
    result = CliRunner().invoke(
        app,
        [
            "eval",
            "commono",
            "--data",
            str(data),
            "--model",
            "gpt-4o",
            "--backend",
            "openai",
            "--out",
            str(tmp_path / "r"),
        ],
    )
    text = " ".join(result.output.split())
    assert result.exit_code == 1, result.output
    assert "$OPENAI_API_KEY is not set" in text and "Connection error" not in text


def test_an_unreachable_server_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    data = write_common_o_split(tmp_path / "data", common_o_rows(2, seed=1))
    result = CliRunner().invoke(
        app,
        [
            "eval",
            "commono",
            "--data",
            str(data),
            "--model",
            "m",
            "--backend",
            "openai",
            "--backend-arg",
            "base_url=http://127.0.0.1:9/v1",
            "--backend-arg",
            "max_retries=0",
            "--out",
            str(tmp_path / "r"),
        ],
    )
    text = " ".join(result.output.split())
    assert result.exit_code == 1, result.output
    assert "No connection to http://127.0.0.1:9/v1" in text and "sk-test" not in text
