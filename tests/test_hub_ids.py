"""A --data / --model value that is neither an existing path nor a Hub id says so at once, naming the local path
tried and the Hub lookup's reason (offline mode included), instead of ~25 s of download retries ending in
"Error: a file: ConnectionError"."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from commonlink.errors import InputError
from commonlink.eval.backends.base import check_local_model
from commonlink.loaders import hub_ids
from tests.fixtures.hub_server import HubServer

ROOT = Path(__file__).resolve().parents[1]


def _data_cli(cwd: Path, data: str, **env: str) -> tuple[subprocess.CompletedProcess, float]:
    """`eval commono --data DATA` (an openai backend that is never reached: the data is opened first)."""
    full = {**os.environ, "HF_HOME": str(cwd / "hf-home"), "PYTHONPATH": str(ROOT), **env}
    started = time.monotonic()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "commonlink.cli",
            "eval",
            "commono",
            "--data",
            data,
            "--model",
            "m",
            "--backend",
            "openai",
            "--backend-arg",
            "base_url=http://127.0.0.1:9/v1",
            "--limit",
            "1",
            "--out",
            str(cwd / "out"),
        ],
        cwd=cwd,
        env=full,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    return done, time.monotonic() - started


def test_a_mistyped_data_folder_is_refused_at_once_with_the_path_and_the_hubs_answer(tmp_path):
    with HubServer(tmp_path / "hub") as hub:
        done, seconds = _data_cli(tmp_path, "typo-folder/rel", **hub.client_env())
    assert done.returncode != 0 and seconds < 60
    out = done.stdout + done.stderr
    assert f"no such local path ({tmp_path / 'typo-folder' / 'rel'})" in out
    assert f"{hub.url} has no dataset typo-folder/rel" in out and "ConnectionError" not in out


@pytest.mark.parametrize(
    "env, says",
    [
        ({"HF_ENDPOINT": "http://127.0.0.1:9"}, "the Hub at http://127.0.0.1:9 could not be reached"),
        ({"HF_HUB_OFFLINE": "1"}, "HF_HUB_OFFLINE=1 is set, so the Hub was not asked"),
    ],
)
def test_no_hub_and_no_cached_copy_is_said_at_once(tmp_path, env, says):
    done, seconds = _data_cli(tmp_path, "typo-folder/rel", **env)
    out = done.stdout + done.stderr
    assert done.returncode != 0 and seconds < 60, out
    assert says in out and "the local Hugging Face cache has no copy" in out
    assert f"no such local path ({tmp_path / 'typo-folder' / 'rel'})" in out


def test_a_model_id_is_looked_up_and_a_cached_copy_is_enough_offline(tmp_path, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub-cache"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(
        InputError, match=r"--model typo-org/vlm: there is no such local path .*HF_HUB_OFFLINE=1"
    ) as info:
        check_local_model("typo-org/vlm")
    assert str(Path("typo-org/vlm").absolute()) in str(info.value)
    (tmp_path / "hub-cache" / "models--typo-org--vlm").mkdir(parents=True)
    check_local_model("typo-org/vlm")  # cached: transformers and vLLM load it without the Hub
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    with HubServer(tmp_path / "hub") as hub:
        monkeypatch.setattr(constants, "ENDPOINT", hub.url)
        reason, answered = hub_ids.lookup_reason("nobody/no-such-model", "model")
    assert (
        answered
        and reason
        == f"{hub.url} has no model nobody/no-such-model (or it is private and the token given, if any, cannot see it)"
    )
