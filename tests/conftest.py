"""Fixtures shared by the whole suite.

Test inputs (catalogs, pairs files, parquet splits, tiny models) come from :mod:`commonlink.testing`, which users
may import for their own tests too; test files never import one another.
"""

from __future__ import annotations

import pytest

from commonlink.testing.hub_server import TEST_ORG, TEST_USER, TEST_WRITE_TOKEN, HubServer


@pytest.fixture(scope="session", autouse=True)
def private_commonlink_home(tmp_path_factory):
    """Model-hash memo and default caches go to a temporary folder, never the user's home."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("commonlink.constants.COMMONLINK_HOME", tmp_path_factory.mktemp("commonlink-home"))
        yield


@pytest.fixture()
def hub(tmp_path):
    """A local server speaking the Hub's HTTP API (``commonlink.testing.hub_server``), with one write token."""
    with HubServer(tmp_path / "hub-store", tokens={TEST_WRITE_TOKEN: TEST_USER}, orgs={TEST_USER: [TEST_ORG]}) as server:
        yield server
