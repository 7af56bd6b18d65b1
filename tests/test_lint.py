"""The code passes the project's ruff configuration (``[tool.ruff]`` in pyproject.toml): lint rules and format.

Fix what this reports with ``ruff check --fix .`` and ``ruff format .`` (ruff comes with the ``test`` extra)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _ruff(*args: str) -> subprocess.CompletedProcess:
    try:
        import ruff  # noqa: F401  (the wheel that ships the binary; `python -m ruff` runs it)
    except ImportError:
        pytest.fail("ruff is not installed: install the test extra (pip install -e '.[test]', or ./scripts/setup.sh).")
    return subprocess.run(
        [sys.executable, "-m", "ruff", *args, "--no-cache", "."], cwd=ROOT, capture_output=True, text=True, timeout=300
    )


def test_ruff_check_passes():
    result = _ruff("check", "--output-format", "concise")
    if result.returncode != 0:
        pytest.fail(
            f"ruff check found problems (fix: ruff check --fix .):\n{result.stdout}{result.stderr}", pytrace=False
        )


def test_ruff_format_check_passes():
    result = _ruff("format", "--check", "--output-format", "concise")
    if result.returncode != 0:
        pytest.fail(
            f"files ruff format would change (fix: ruff format .):\n{result.stdout}{result.stderr}", pytrace=False
        )
