"""UnrealCV backend, end to end over TCP: the real ``unrealcv`` client against the protocol-faithful test server."""

from __future__ import annotations

import socket
import struct
import warnings

import numpy as np
import pytest

from commonlink.formats.catalog import read_catalog
from commonlink.errors import BackendError, InputError
from commonlink.synth.assets import load_assets
from commonlink.testing.unrealcv_server import MAGIC, FakeUnrealCVServer
from commonlink.synth.render.offline import OfflineRenderer
from commonlink.synth.plan import PlanConfig, plan_scene
from commonlink.synth.runner import SynthConfig, synthesize
from commonlink.synth.render.unrealcv import UnrealCVBackend, UnrealCVCommandError

RES = 64


@pytest.fixture(scope="module")
def catalog():
    return load_assets()


@pytest.fixture()
def server(catalog):
    with FakeUnrealCVServer(catalog) as srv:
        yield srv


@pytest.fixture(scope="module")
def plan(catalog):
    return plan_scene(PlanConfig(min_objects=5, max_objects=5, views=2, width=RES, height=RES), catalog, seed=4, index=1)


@pytest.fixture(scope="module")
def offline_views(catalog, plan):
    with OfflineRenderer(RES, RES, catalog) as renderer:
        return renderer.render(plan)


def _frame(payload: bytes) -> bytes:
    return struct.pack("<II", MAGIC, len(payload)) + payload


def _read_frame(sock: socket.socket) -> bytes | None:
    header = b""
    while len(header) < 8:
        chunk = sock.recv(8 - len(header))
        if not chunk:
            return None
        header += chunk
    magic, size = struct.unpack("<II", header)
    assert magic == MAGIC
    body = b""
    while len(body) < size:
        body += sock.recv(size - len(body))
    return body


def test_server_speaks_the_wire_protocol(server):
    first = socket.create_connection((server.host, server.port))
    assert _read_frame(first) == b"connected to CommonlinkTestWorld"
    first.sendall(_frame(b"0:vget /unrealcv/status") + _frame(b"1:vset /objects/spawn BP_Apple_C cl_a"))
    assert _read_frame(first).startswith(b"0:Is Listening")
    assert _read_frame(first) == b"1:cl_a"
    first.sendall(_frame(b"2:vset /object/cl_a/location 1.5 -2 3") + _frame(b"3:vget /object/cl_a/location"))
    assert _read_frame(first) == b"2:ok"
    assert _read_frame(first) == b"3:1.500 -2.000 3.000"
    first.sendall(_frame(b"4:vget /no/such/thing"))
    assert _read_frame(first) == b"4:error Can not find a handler for URI 'vget /no/such/thing'"
    first.sendall(_frame(b"5:vget /camera/0/lit png"))
    assert _read_frame(first).startswith(b"5:\x89PNG")
    # One client at a time: a second connection is closed without a greeting.
    second = socket.create_connection((server.host, server.port))
    second.settimeout(5)
    assert _read_frame(second) is None
    second.close()
    # A bad magic number closes the connection, as in the plugin.
    first.sendall(struct.pack("<II", 0x12345678, 3) + b"0:x")
    first.settimeout(5)
    assert _read_frame(first) is None
    first.close()
    assert server.rejected == 1


def test_real_client_against_the_server(server):
    import unrealcv

    client = unrealcv.Client((server.host, server.port))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the client checks commands against `vget /unrealcv/commands`
        assert client.connect(timeout=5)
        assert client.request("vset /object/missing/location 1 2 3") == "error Can not find object"
    assert client.request("vset /objects/spawn BP_RubberDuck_C duck") == "duck"
    assert client.request("vget /object/duck/color").startswith("(R=")
    assert client.request("vset /objects/spawn BP_NoSuchThing_C") == "error Can not find a class with name 'BP_NoSuchThing_C'"
    png = client.request("vget /camera/0/object_mask png")
    assert isinstance(png, bytes) and png[:4] == b"\x89PNG"
    assert client.request_batch(["vset /object/duck/destroy", "vget /objects"]) == ["ok", ""]
    client.disconnect()


def test_backend_renders_the_plan_like_the_offline_renderer(server, catalog, plan, offline_views):
    backend = UnrealCVBackend(server.host, server.port, catalog, width=RES, height=RES)
    try:
        views = backend.render(plan)
    finally:
        backend.close()
    assert len(views) == len(plan.cameras)
    for view, reference in zip(views, offline_views):
        # Mask colours are jittered by the server and matched with tolerance: same instance ids as offline.
        assert np.array_equal(view.instance, reference.instance)
        assert view.rgb.shape == (RES, RES, 3)
    assert server.actors == {}  # everything spawned was destroyed
    spawns = [c for c in server.log if c.startswith("vset /objects/spawn")]
    assert [c.split()[2] for c in spawns[1:]] == [o.ue_class for o in plan.objects]
    assert spawns[0].split()[2] == catalog.floor(plan.floor.material).ue_class
    assert any(c.startswith(f"vset /object/cl_{plan.scene_id}_0/scale") for c in server.log)


def test_dropped_connection_reconnects_and_redoes_the_scene(server, catalog, plan, offline_views):
    backend = UnrealCVBackend(server.host, server.port, catalog, width=RES, height=RES)
    server.drop_connection_on("object_mask png")  # dies in the middle of the scene, objects still spawned
    try:
        views = backend.render(plan)
    finally:
        backend.close()
    assert backend.reconnects == 1 and server.connections == 2
    assert all(np.array_equal(v.instance, r.instance) for v, r in zip(views, offline_views))
    assert server.actors == {}  # leftovers of the broken attempt were removed too


def test_a_hung_server_times_out_and_the_scene_is_redone(server, catalog, plan, offline_views):
    """A frozen Unreal (connection open, no reply) inside a batch of commands must not hang the render forever."""
    import threading

    backend = UnrealCVBackend(server.host, server.port, catalog, width=RES, height=RES, timeout=1)
    server.stall_on("object_mask png")  # a batched command (lit + mask)
    result: dict = {}
    worker = threading.Thread(target=lambda: result.update(views=backend.render(plan)), daemon=True)
    worker.start()
    worker.join(timeout=30)
    hung = worker.is_alive()
    backend.close()
    assert not hung, "render() waited forever on a server that stopped answering"
    assert backend.reconnects == 1 and server.connections == 2
    assert all(np.array_equal(v.instance, r.instance) for v, r in zip(result["views"], offline_views))
    assert server.actors == {}


def test_error_reply_names_the_command_and_cleans_up(server, catalog, plan):
    backend = UnrealCVBackend(server.host, server.port, catalog, width=RES, height=RES)
    server.error_on(f"vset /objects/spawn {plan.objects[2].ue_class}", "Can not find a class")
    with pytest.raises(UnrealCVCommandError) as info:
        backend.render(plan)
    backend.close()
    assert info.value.command.startswith(f"vset /objects/spawn {plan.objects[2].ue_class}")
    assert "error Can not find a class" in str(info.value)
    assert server.actors == {}


def test_no_server_is_a_clear_error(catalog, plan):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    backend = UnrealCVBackend("127.0.0.1", port, catalog, width=RES, height=RES, reconnect_attempts=0, timeout=2)
    with pytest.raises(BackendError, match="Could not connect to UnrealCV"):
        backend.render(plan)


def test_synth_with_the_unrealcv_backend(server, tmp_path):
    config = SynthConfig(scenes=2, objects=(3, 4), views=2, resolution=(RES, RES), seed=7, min_visible_pixels=4,
                         backend="unrealcv", unrealcv_host=server.host, unrealcv_port=server.port)
    summary = synthesize(tmp_path / "ue", config, progress=False)
    assert summary.catalog_records == 4
    offline = synthesize(tmp_path / "off", SynthConfig(**{**config.__dict__, "backend": "offline"}), progress=False)
    assert offline.catalog_records == 4
    ue_objects = [(r.scene_id, r.view, r.objects) for r in read_catalog(tmp_path / "ue")]
    off_objects = [(r.scene_id, r.view, r.objects) for r in read_catalog(tmp_path / "off")]
    assert ue_objects == off_objects  # same plans, same visibility, whichever backend renders
    assert all(r.extra["backend"] == "unrealcv" for r in read_catalog(tmp_path / "ue"))
    with pytest.raises(InputError, match="one client at a time"):
        synthesize(tmp_path / "ue2", SynthConfig(**{**config.__dict__, "scenes": 1}), workers=2, progress=False)


def test_error_stops_the_run_but_keeps_finished_scenes(server, tmp_path):
    config = SynthConfig(scenes=3, objects=(3, 3), views=1, resolution=(RES, RES), seed=8, min_visible_pixels=4,
                         backend="unrealcv", unrealcv_host=server.host, unrealcv_port=server.port)
    server.error_on("cl_8-1_floor", "Failed to spawn actor")  # scene 1 fails
    with pytest.raises(UnrealCVCommandError, match="cl_8-1_floor"):
        synthesize(tmp_path / "ue", config, progress=False)
    assert [r.scene_id for r in read_catalog(tmp_path / "ue")] == ["8-0"]  # scene 0 listed, nothing half-written
    summary = synthesize(tmp_path / "ue", config, progress=False)  # rerun: the failure is gone
    assert (summary.scenes_skipped, summary.scenes_rendered, summary.catalog_records) == (1, 2, 3)
