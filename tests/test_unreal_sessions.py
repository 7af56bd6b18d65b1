"""UnrealCV sessions as the real plugin serves them (``Server/UnixTcpServer.cpp``, branch 5.2 at ec120436): on Linux
one TCP session per game run, then only the Unix socket ``/tmp/unrealcv_{port}.socket``; later TCP clients are
connected by the kernel and never welcomed. Our connection must find its way (Unix socket, stale socket files,
other platforms), keep one session per command, and give up by its own deadlines."""

from __future__ import annotations

import dataclasses
import os
import shutil
import socket
import subprocess
import sys
import time

import pytest

from commonlink.errors import BackendError
from commonlink.formats.catalog import read_catalog
from commonlink.synth.assets import DEFAULT_ASSETS_FILE, load_assets
from commonlink.synth.job import SceneChecks, SynthJob
from commonlink.synth.plan import PlanConfig
from commonlink.synth.render.offline import OfflineSettings
from commonlink.synth.render.unreal_check import check_project
from commonlink.synth.render.unrealcv import UnrealCVSettings
from commonlink.synth.render.unrealcv_transport import UnrealCVConnection
from commonlink.synth.runner import synthesize
from tests.fixtures.unrealcv_server import (
    FakeUnrealCVServer,
    SilentServer,
    default_level,
)

RES = 48
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="models the plugin on Linux (Unix socket)")


@pytest.fixture(scope="module")
def catalog():
    return load_assets()


@pytest.fixture()
def user_assets(tmp_path):
    path = tmp_path / "my_project_assets.json"
    shutil.copy(DEFAULT_ASSETS_FILE, path)
    return path


def _ours(server):
    return sorted(set(server.actors) - {a.name for a in default_level()})


def _config(server, assets, scenes=3):
    return SynthJob(
        scenes=scenes,
        seed=11,
        assets=str(assets),
        plan=PlanConfig(3, 3, views=2, width=RES, height=RES),
        checks=SceneChecks(min_visible_pixels=4),
        renderer=UnrealCVSettings(server.host, server.port, timeout=20.0),
    )


def _objects(folder):
    return [(r.scene_id, r.view, r.objects) for r in read_catalog(folder)]


def _offline_objects(config, folder):
    synthesize(folder, dataclasses.replace(config, renderer=OfflineSettings()), progress=False)
    return _objects(folder)


def _cli(*args, timeout=600):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(
        [sys.executable, "-m", "commonlink.cli", *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def _request(conn: UnrealCVConnection) -> str:
    return str(conn.request("vget /unrealcv/version"))


def test_after_the_first_tcp_session_the_unix_socket_serves(catalog):
    with FakeUnrealCVServer(catalog) as server:
        for expected in ("tcp", "unix", "unix"):
            conn = UnrealCVConnection(server.host, server.port, timeout=5, connect_timeout=5)
            conn.open()
            assert conn.transport == expected and _request(conn) == "1.0.1"
            conn.close()
        assert server.sessions == ["tcp", "unix", "unix"]
        # A plain TCP client now connects (backlog) and is never welcomed, as with the real plugin.
        with socket.create_connection((server.host, server.port), timeout=5) as late:
            late.settimeout(0.5)
            with pytest.raises(TimeoutError):
                late.recv(8)


def test_a_client_without_the_request_queues_is_refused_by_name(catalog, monkeypatch):
    """The session pipelines batches through the client's own request queues (as its request_batch does): a client
    without them gets an error naming what is missing and the fix, not an AttributeError mid-scene."""
    import unrealcv

    init = unrealcv.Client.__init__

    def without_queues(self, *args, **kwargs):
        init(self, *args, **kwargs)
        del self.recv_num_q

    monkeypatch.setattr(unrealcv.Client, "__init__", without_queues)
    with FakeUnrealCVServer(catalog) as server:
        conn = UnrealCVConnection(server.host, server.port, timeout=5, connect_timeout=5)
        with pytest.raises(BackendError, match="lacks recv_num_q") as caught:
            conn.open()
        assert "pip install -U unrealcv" in caught.value.fix and not conn.connected


def test_a_stale_socket_file_is_not_mistaken_for_the_game(catalog):
    with FakeUnrealCVServer(catalog) as server:
        stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        stale.bind(server.unix_socket_path)  # an earlier game run that did not clean up: the file stays, refusing
        stale.close()
        conn = UnrealCVConnection(server.host, server.port, timeout=5, connect_timeout=5)
        conn.open()
        assert conn.transport == "tcp" and _request(conn) == "1.0.1"
        conn.close()
        conn.open()  # the same object again: a new session, now on the socket the game re-created
        assert conn.transport == "unix" and _request(conn) == "1.0.1" and conn.sessions == 2
        conn.close()
        assert server.sessions == ["tcp", "unix"]


def test_other_platforms_serve_tcp_sessions_one_after_another(catalog):
    with FakeUnrealCVServer(catalog, platform="windows") as server:
        first = UnrealCVConnection(server.host, server.port, timeout=5, connect_timeout=5)
        first.open()
        second = UnrealCVConnection(server.host, server.port, timeout=5, connect_timeout=1)
        with pytest.raises(BackendError, match="another client is connected"):
            second.open()  # waits in the backlog while the first session runs
        first.close()
        second.connect_timeout = 5
        second.open()
        assert second.transport == "tcp" and _request(second) == "1.0.1"
        second.close()
        # (the given-up client was still in the backlog: the game accepts it and sees it leave at once)
        assert set(server.sessions) == {"tcp"} and not os.path.exists(server.unix_socket_path)


def test_a_server_that_accepts_and_never_answers_times_out(catalog, user_assets):
    with SilentServer() as silent:
        conn = UnrealCVConnection(silent.host, silent.port, timeout=5, connect_timeout=1.5)
        started = time.monotonic()
        with pytest.raises(BackendError, match=r"no welcome came within 1.5 s") as info:
            conn.open()
        assert time.monotonic() - started < 4
        assert "--connect-timeout" in info.value.fix
    with SilentServer() as silent:  # the same through the CLI, with the deadline given there
        started = time.monotonic()
        cli = _cli(
            "unreal",
            "check",
            "--assets",
            str(user_assets),
            "--host",
            silent.host,
            "--port",
            str(silent.port),
            "--connect-timeout",
            "2",
        )
        took = time.monotonic() - started
    assert cli.returncode != 0 and "no welcome came within 2 s" in cli.stdout + cli.stderr
    assert took < 30  # the CLI's start-up included; the deadline itself is 2 s
    # A game that stops answering mid-session: our read timeout, named as a timeout.
    with FakeUnrealCVServer(catalog) as server:
        conn = UnrealCVConnection(server.host, server.port, timeout=1, connect_timeout=5)
        conn.open()
        server.stall_on("vget /unrealcv/version")
        started = time.monotonic()
        with pytest.raises(TimeoutError, match="no reply within 1 s"):
            conn.request("vget /unrealcv/version")
        with pytest.raises(TimeoutError, match="no reply within 1 s"):
            conn.batch(["vget /objects"])
        assert time.monotonic() - started < 6
        conn.close()


@pytest.mark.slow
def test_cli_check_then_synth_in_two_processes(catalog, user_assets, tmp_path):
    """The order docs/unreal.md gives: `unreal check`, then `synth --backend unrealcv` (which hung before)."""
    with FakeUnrealCVServer(catalog) as server:
        check = _cli(
            "unreal",
            "check",
            "--assets",
            str(user_assets),
            "--host",
            server.host,
            "--port",
            str(server.port),
            "--json",
            "--connect-timeout",
            "5",
        )
        assert check.returncode == 0, check.stdout + check.stderr
        config = _config(server, user_assets)
        synth = _cli(
            "synth",
            "--out",
            str(tmp_path / "ue"),
            "--scenes",
            "3",
            "--objects",
            "3-3",
            "--views",
            "2",
            "--resolution",
            f"{RES}x{RES}",
            "--seed",
            "11",
            "--min-visible-pixels",
            "4",
            "--backend",
            "unrealcv",
            "--assets",
            str(user_assets),
            "--host",
            server.host,
            "--port",
            str(server.port),
            "--connect-timeout",
            "5",
            "--timeout",
            "20",
            "--no-progress",
        )
        assert synth.returncode == 0, synth.stdout + synth.stderr
        # One session per command: the check's TCP session, then the synth's (preflight and renders) on the socket.
        assert server.sessions == ["tcp", "unix"]
        assert _objects(tmp_path / "ue") == _offline_objects(config, tmp_path / "off")  # the right labels
        assert _ours(server) == []


@pytest.mark.slow
def test_dropped_connection_mid_synth_then_rerun(catalog, user_assets, tmp_path):
    with FakeUnrealCVServer(catalog) as server:
        config = _config(server, user_assets)
        expected = _offline_objects(config, tmp_path / "off")
        server.drop_connection_on(
            "_11-1_"
        )  # the TCP session ends mid-synth (scene 1's spawns): reconnect on the socket
        summary = synthesize(tmp_path / "ue", config, progress=False)
        assert summary.catalog_records == 6 and server.sessions == ["tcp", "unix"]
        assert _objects(tmp_path / "ue") == expected
        # A run that loses the game for good mid-way stops, keeps its finished scenes; the rerun resumes.
        server.drop_connection_on("_11-1_", times=50)
        with pytest.raises(BackendError, match="Lost the UnrealCV connection"):
            synthesize(tmp_path / "ue2", config, progress=False)
        assert [r.scene_id for r in read_catalog(tmp_path / "ue2")] == ["11-0", "11-0"]
        server.clear_faults()
        rerun = synthesize(tmp_path / "ue2", config, progress=False)
        assert (rerun.scenes_skipped, rerun.scenes_rendered) == (1, 2)
        assert _objects(tmp_path / "ue2") == expected
        assert set(server.sessions[1:]) == {"unix"} and _ours(server) == []


@pytest.mark.slow
def test_check_and_renders_share_one_session(catalog, user_assets):
    with FakeUnrealCVServer(catalog) as server:
        backend = _config(server, user_assets, scenes=1).open_renderer(load_assets(user_assets))
        try:
            assert backend.connection.connected and server.sessions == ["tcp"]
        finally:
            backend.close()
        assert check_project(server.host, server.port, load_assets(user_assets), connect_timeout=5).ok
        assert server.sessions == ["tcp", "unix"]
