"""Fixtures shared by the whole suite.

Test inputs (catalogs, pairs files, parquet splits, tiny models) come from :mod:`tests.fixtures`, which users
may import for their own tests too; test files never import one another.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixtures.hub_server import TEST_ORG, TEST_USER, TEST_WRITE_TOKEN, HubServer
from tests.fixtures.tiny_models import build_tiny_llava, common_o_rows, write_common_o_split


@pytest.fixture(scope="session", autouse=True)
def private_commonlink_home(tmp_path_factory):
    """Model-hash memo and default caches go to a temporary folder, never the user's home."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("commonlink.constants.COMMONLINK_HOME", tmp_path_factory.mktemp("commonlink-home"))
        yield


@pytest.fixture()
def fresh_commonlink_home(monkeypatch, tmp_path) -> Path:
    """A ``COMMONLINK_HOME`` of this test's own (prediction caches, model-hash memo), for tests that count what
    a run generates or caches."""
    home = tmp_path / "home"
    monkeypatch.setattr("commonlink.constants.COMMONLINK_HOME", home)
    return home


@pytest.fixture(scope="session")
def tiny_llava(tmp_path_factory) -> Path:
    """The folder of a tiny random LLaVA (``tests.fixtures.tiny_models.build_tiny_llava``, default arguments),
    built once per session. Shared: copy it before changing any of its files."""
    return build_tiny_llava(tmp_path_factory.mktemp("tiny-llava"))


@pytest.fixture(scope="session")
def common_o_split(tmp_path_factory):
    """``common_o_split(n, seed=S, shards=1, split="main")``: the folder of a tiny Common-O split of ``n`` rows
    (``tests.fixtures.tiny_models``), written once per session for each set of arguments. Shared: write
    runs elsewhere, never into it."""
    made: dict[tuple, Path] = {}

    def make(n: int, *, seed: int, shards: int = 1, split: str = "main") -> Path:
        key = (n, seed, shards, split)
        if key not in made:
            made[key] = write_common_o_split(
                tmp_path_factory.mktemp("common-o"), common_o_rows(n, seed=seed), split=split, shards=shards
            )
        return made[key]

    return make


@pytest.fixture()
def hub(tmp_path):
    """A local server speaking the Hub's HTTP API (``tests.fixtures.hub_server``), with one write token."""
    with HubServer(
        tmp_path / "hub-store", tokens={TEST_WRITE_TOKEN: TEST_USER}, orgs={TEST_USER: [TEST_ORG]}
    ) as server:
        yield server
