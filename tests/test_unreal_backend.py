"""UnrealCV backend, end to end over TCP: the real ``unrealcv`` client against the test server that models the
plugin's 5.2 branch (no colour until set, uncoloured actors absent from masks, camera 0 is the pawn, spawn only of
loaded classes, failed renames keep the automatic name, 32 requests per frame, the plugin's error texts)."""

from __future__ import annotations

import dataclasses
import json
import shutil
import socket
import threading
import time
import warnings

import numpy as np
import pytest

from commonlink.errors import BackendError, InputError
from commonlink.formats.catalog import read_catalog
from commonlink.synth.assets import DEFAULT_ASSETS_FILE, load_assets
from commonlink.synth.job import SceneChecks, SynthJob
from commonlink.synth.plan import PlanConfig, plan_scene
from commonlink.synth.render.offline import OfflineRenderer, OfflineSettings
from commonlink.synth.render.unrealcv import ObjectMissingFromMaskError, UnrealCVBackend, UnrealCVSettings
from commonlink.synth.render.unrealcv_transport import UnrealCVCommandError, choose_palette
from commonlink.synth.runner import synthesize
from tests.fixtures.unrealcv_server import (
    FakeUnrealCVServer,
    LevelActor,
    default_level,
    plugin_color_map,
)

RES = 64


@pytest.fixture(scope="module")
def catalog():
    return load_assets()


@pytest.fixture()
def server(catalog):
    with FakeUnrealCVServer(catalog, record_truth=True) as srv:
        yield srv


@pytest.fixture(scope="module")
def plan(catalog):
    return plan_scene(
        PlanConfig(min_objects=5, max_objects=5, views=3, width=RES, height=RES), catalog, seed=4, index=1
    )


@pytest.fixture(scope="module")
def offline_views(catalog, plan):
    with OfflineRenderer(RES, RES, catalog) as renderer:
        return renderer.render(plan)


@pytest.fixture()
def user_assets(tmp_path):
    """A user's asset file (the built-in one's classes, which the test server has loaded)."""
    path = tmp_path / "my_project_assets.json"
    shutil.copy(DEFAULT_ASSETS_FILE, path)
    return path


def _expected_ids(server, views, object_names):
    """Instance ids the views must have: from the server's record of which actor each mask pixel really shows."""
    truths = list(server.mask_truth)[-len(views) :]
    expected = []
    for names, ids in truths:
        lookup = np.zeros(len(names) + 1, dtype=np.uint16)
        for i, name in enumerate(names):
            if name in object_names:
                lookup[i + 1] = object_names.index(name) + 1
        expected.append(lookup[ids])
    return expected


def _spawned_names(server, n_objects):
    """The names the plugin gave the last scene's objects, in plan order (from the spawn replies' names)."""
    spawns = [c.split() for c in server.log if c.startswith("vset /objects/spawn")]
    return [s[3] for s in spawns[-(n_objects + 1) : -1]]


def _render_with_truth(server, catalog, plan):
    """Render ``plan`` with a fresh backend (closed afterwards): (backend, views, the ids the views must have)."""
    backend = UnrealCVBackend(server.host, server.port, catalog, width=RES, height=RES)
    try:
        views = backend.render(plan)
        expected = _expected_ids(server, views, _spawned_names(server, len(plan.objects)))
    finally:
        backend.close()
    return backend, views, expected


def _ours(server):
    return sorted(set(server.actors) - {a.name for a in default_level()})


# --- the backend against it -------------------------------------------------------------------------------


def test_masks_are_right_with_runtime_spawned_actors(server, catalog, plan, offline_views):
    backend, views, expected = _render_with_truth(server, catalog, plan)
    assert len(views) == len(plan.cameras)
    for view, truth, reference in zip(views, expected, offline_views):
        assert np.array_equal(view.instance, truth)  # every pixel labelled with the actor the image shows
        assert np.array_equal(view.instance, reference.instance)  # and the same as the offline renderer
    # Every spawned actor was coloured from the run's palette, read back, and matched on those colours only.
    set_colors = [c for c in server.log if c.startswith("vset /object/") and "/color " in c]
    assert len(set_colors) == len(plan.objects) + 1
    assert [tuple(int(v) for v in c.split()[2:]) for c in set_colors] == backend.palette_for(len(plan.objects) + 1)
    # The pawn's camera 0 was never moved or used; our own camera rendered at the plan's size.
    assert not any(c.startswith(("vset /camera/0/", "vget /camera/0/")) for c in server.log)
    assert f"vset /camera/{backend.camera_id}/size {RES} {RES}" in server.log and backend.camera_id != 0
    assert _ours(server) == []  # every actor we spawned (camera included) was destroyed


def test_dropped_connection_mid_scene_is_redone(server, catalog, plan, offline_views):
    backend = UnrealCVBackend(server.host, server.port, catalog, width=RES, height=RES)
    server.drop_connection_on("object_mask png")  # dies in the middle of the scene, objects still spawned
    try:
        views = backend.render(plan)
    finally:
        backend.close()
    assert backend.reconnects == 1 and server.connections == 2
    assert all(np.array_equal(v.instance, r.instance) for v, r in zip(views, offline_views))
    assert _ours(server) == []  # leftovers of the broken attempt (and both cameras) were removed
    spawn_names = [c.split()[3] for c in server.log if c.startswith("vset /objects/spawn")]
    assert len(spawn_names) == 2 * (len(plan.objects) + 1) and len(set(spawn_names)) == len(
        spawn_names
    )  # unique per attempt


def test_failed_rename_uses_the_name_the_plugin_kept(server, catalog, plan, offline_views):
    backend = UnrealCVBackend(server.host, server.port, catalog, width=RES, height=RES)
    server.fail_rename_on(f"_{plan.scene_id}_1_2")  # object 2 of the first render keeps its automatic name
    try:
        views = backend.render(plan)
    finally:
        backend.close()
    ((wanted, kept),) = backend.renamed
    assert wanted.endswith(f"_{plan.scene_id}_1_2") and kept == f"{plan.objects[2].ue_class}_0"
    assert f"vset /object/{kept}/color" in " ".join(server.log) and f"vset /object/{kept}/destroy" in server.log
    assert all(np.array_equal(v.instance, r.instance) for v, r in zip(views, offline_views))
    assert _ours(server) == []


def test_failed_rename_then_lost_reply_is_still_cleaned_up(server, catalog, plan, offline_views):
    """The spawn whose rename failed is answered, but the connection drops before the batch completes: the
    automatic name never reaches us, and the reconnect must still find and destroy that actor."""
    backend = UnrealCVBackend(server.host, server.port, catalog, width=RES, height=RES)
    server.fail_rename_on(f"_{plan.scene_id}_1_2")
    server.drop_connection_on(f"_{plan.scene_id}_1_3")  # the next spawn: the batch never completes
    try:
        views = backend.render(plan)
    finally:
        backend.close()
    assert backend.reconnects == 1 and backend.renamed == []
    assert f"vset /object/{plan.objects[2].ue_class}_0/destroy" in server.log  # found by its automatic name
    assert all(np.array_equal(v.instance, r.instance) for v, r in zip(views, offline_views))
    assert _ours(server) == []


def test_level_actor_whose_colour_clashes_with_the_palette(catalog, plan):
    naive = choose_palette(len(plan.objects) + 1, [], 24)  # the palette of a level without colours of its own
    used = {(o.cell[0], o.cell[1]) for o in plan.objects}
    free = next((r, c) for r in range(4) for c in range(4) if (r, c) not in used)
    spot = (-60.0 + 30.0 * (free[0] + 0.5), -60.0 + 30.0 * (free[1] + 0.5), 0.0)
    prop = next(a for a in catalog.assets if a.name not in {o.name for o in plan.objects})
    level = default_level() + [LevelActor("SM_Prop_Level", prop.ue_class, spot, scale=0.25)]
    with FakeUnrealCVServer(catalog, level=level, record_truth=True) as server:
        server.set_level_color("SM_Prop_Level", naive[0])  # a level actor already wears our first colour
        backend, views, expected = _render_with_truth(server, catalog, plan)
        assert backend.level_colors["SM_Prop_Level"] == naive[0]
        palette = backend.palette_for(len(plan.objects) + 1)
        assert naive[0] not in palette
        assert min(max(abs(a - b) for a, b in zip(c, naive[0])) for c in palette) >= backend.min_color_distance
        # The level actor shows in the masks, and its pixels are never taken for one of our objects.
        assert any(p.get("SM_Prop_Level", 0) > 0 for p in list(server.mask_pixels)[-len(views) :])
        for view, truth in zip(views, expected):
            assert np.array_equal(view.instance, truth)


def test_object_absent_from_every_mask_is_a_loud_error(catalog, plan):
    hidden = plan.objects[1].ue_class
    with FakeUnrealCVServer(catalog, hidden_classes={hidden}) as server:
        backend = UnrealCVBackend(server.host, server.port, catalog, width=RES, height=RES)
        with pytest.raises(ObjectMissingFromMaskError, match=f"{plan.objects[1].name} .*class {hidden}"):
            backend.render(plan)
        backend.close()
        assert _ours(server) == []


@pytest.mark.slow
def test_a_hung_server_times_out_and_the_scene_is_redone(server, catalog, plan, offline_views):
    """A frozen Unreal (connection open, no reply) inside a batch of commands must not hang the render forever."""
    backend = UnrealCVBackend(server.host, server.port, catalog, width=RES, height=RES, timeout=1)
    server.stall_on("object_mask png")
    result: dict = {}
    worker = threading.Thread(target=lambda: result.update(views=backend.render(plan)), daemon=True)
    worker.start()
    worker.join(timeout=30)
    hung = worker.is_alive()
    backend.close()
    assert not hung, "render() waited forever on a server that stopped answering"
    assert backend.reconnects == 1 and server.connections == 2
    assert all(np.array_equal(v.instance, r.instance) for v, r in zip(result["views"], offline_views))
    assert _ours(server) == []


def test_error_reply_names_the_command_and_cleans_up(server, catalog, plan):
    backend = UnrealCVBackend(server.host, server.port, catalog, width=RES, height=RES)
    server.error_on(f"vset /objects/spawn {plan.objects[2].ue_class}", "Failed to spawn actor")
    with pytest.raises(UnrealCVCommandError) as info:
        backend.render(plan)
    backend.close()
    assert info.value.command.startswith(f"vset /objects/spawn {plan.objects[2].ue_class}")
    assert "error Failed to spawn actor" in str(info.value)
    assert _ours(server) == []


@pytest.mark.slow
def test_not_playing_and_no_server_are_clear_errors(catalog, plan):
    with FakeUnrealCVServer(catalog, playing=False) as server:
        backend = UnrealCVBackend(server.host, server.port, catalog, width=RES, height=RES, reconnect_attempts=0)
        with pytest.raises(BackendError, match="Press Play"):
            backend.render(plan)
        server.press_play()
        assert len(backend.render(plan)) == len(plan.cameras)
        backend.close()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    backend = UnrealCVBackend("127.0.0.1", port, catalog, width=RES, height=RES, reconnect_attempts=0, timeout=2)
    with pytest.raises(BackendError, match="Could not connect to UnrealCV"):
        backend.render(plan)


def test_palette_avoids_black_level_colours_and_itself():
    level = plugin_color_map(300)  # a level of 300 actors
    palette = choose_palette(17, level, 24)
    assert len(set(palette)) == 17
    for i, c in enumerate(palette):
        assert max(c) >= 64  # far from black
        assert all(max(abs(a - b) for a, b in zip(c, other)) >= 24 for other in level + palette[:i])
    assert palette == choose_palette(17, level, 24)  # deterministic
    with pytest.raises(BackendError, match="fewer actors"):
        choose_palette(
            17, [(r, g, b) for r in range(64, 256, 8) for g in range(64, 256, 8) for b in range(64, 256, 8)], 24
        )


# --- synth --backend unrealcv -----------------------------------------------------------------------------


@pytest.mark.slow
def test_synth_with_the_unrealcv_backend(server, tmp_path, user_assets):
    config = SynthJob(
        scenes=2,
        seed=7,
        assets=str(user_assets),
        plan=PlanConfig(3, 4, views=2, width=RES, height=RES),
        checks=SceneChecks(min_visible_pixels=4),
        renderer=UnrealCVSettings(server.host, server.port),
    )
    summary = synthesize(tmp_path / "ue", config, progress=False)
    assert summary.catalog_records == 4
    offline = synthesize(tmp_path / "off", dataclasses.replace(config, renderer=OfflineSettings()), progress=False)
    assert offline.catalog_records == 4
    ue_objects = [(r.scene_id, r.view, r.objects) for r in read_catalog(tmp_path / "ue")]
    off_objects = [(r.scene_id, r.view, r.objects) for r in read_catalog(tmp_path / "off")]
    assert ue_objects == off_objects  # same plans, same visibility, whichever backend renders
    assert all(r.extra["backend"] == "unrealcv" for r in read_catalog(tmp_path / "ue"))
    assert any("cl_check_" in c for c in server.log)  # the preflight ran first
    assert _ours(server) == []
    with pytest.raises(InputError, match="one client at a time"):
        synthesize(tmp_path / "ue2", dataclasses.replace(config, scenes=1), workers=2, progress=False)


def test_synth_refuses_placeholder_classes_before_connecting(server, tmp_path):
    config = SynthJob(
        scenes=1, plan=PlanConfig(views=1, width=RES, height=RES), renderer=UnrealCVSettings(server.host, server.port)
    )
    with pytest.raises(InputError, match="placeholders") as info:
        synthesize(tmp_path / "ue", config, progress=False)
    assert "commonlink_import.py" in info.value.fix
    assert server.connections == 0 and not (tmp_path / "ue").exists()


@pytest.mark.slow
def test_error_stops_the_run_but_keeps_finished_scenes(server, tmp_path, user_assets):
    config = SynthJob(
        scenes=3,
        seed=8,
        assets=str(user_assets),
        plan=PlanConfig(3, 3, views=1, width=RES, height=RES),
        checks=SceneChecks(min_visible_pixels=4),
        renderer=UnrealCVSettings(server.host, server.port),
    )
    server.error_on("_8-1_", "Failed to spawn actor")  # scene 1 fails
    with pytest.raises(UnrealCVCommandError, match="_8-1_"):
        synthesize(tmp_path / "ue", config, progress=False)
    assert [r.scene_id for r in read_catalog(tmp_path / "ue")] == ["8-0"]  # scene 0 listed, nothing half-written
    summary = synthesize(tmp_path / "ue", config, progress=False)  # rerun: the failure is gone
    assert (summary.scenes_skipped, summary.scenes_rendered, summary.catalog_records) == (1, 2, 3)
    assert _ours(server) == []


@pytest.mark.slow
def test_preflight_json_is_plain_data(server, user_assets):
    from commonlink.synth.render.unreal_check import check_project

    report = check_project(server.host, server.port, load_assets(user_assets))
    data = json.loads(json.dumps(report.to_json()))
    assert data["ok"] is True and data["plugin_version"] == "1.0.1" and data["cameras"] == 1


# --- round trips and frames -------------------------------------------------------------------------------


def _settled_busy_frames(server) -> int:
    """``busy_frames`` once the frame that sent the last reply has ended: the server counts a busy frame after
    sending its replies, so a client that read it on its last reply could miss that frame. Waits for two more ticks
    (bounded; a condition, not a timing assertion)."""
    seen = server.frames
    deadline = time.monotonic() + 60
    while server.frames < seen + 2 and time.monotonic() < deadline:
        time.sleep(0.005)
    return server.busy_frames


def test_a_scene_takes_two_round_trips_and_the_fewest_frames(catalog, plan, offline_views):
    """The spawns (whose answered names the rest needs), then everything else pipelined: the plugin's 32 requests
    per frame set the frame count, not the number of waits for replies."""
    with FakeUnrealCVServer(catalog, frame_seconds=0.05) as server:
        backend = UnrealCVBackend(server.host, server.port, catalog, width=RES, height=RES)
        backend.open()
        trips, frames, start = backend.connection.round_trips, _settled_busy_frames(server), len(server.log)
        views = backend.render(plan)
        trips, frames = backend.connection.round_trips - trips, _settled_busy_frames(server) - frames
        log = server.log[start:]
        backend.close()
    assert all(np.array_equal(v.instance, r.instance) for v, r in zip(views, offline_views))
    n = len(plan.objects) + 1  # actors spawned: the objects and the floor
    assert len(log) == n + (1 + 3 * len(plan.objects) + 2 * n) + 5 * len(plan.cameras) + n
    assert [c.split()[1].split("/")[-1] for c in log[-n:]] == ["destroy"] * n  # destroyed in that batch, once
    assert trips == 2
    fewest = 1 + -(-(len(log) - n) // 32)  # the spawn frame, then ceil(rest / 32)
    # One more when a batch's requests straddle a frame boundary (the game thread ticks on its own).
    assert fewest <= frames <= fewest + 1, (frames, fewest)


def test_the_server_takes_32_requests_a_frame_at_its_own_cadence(catalog):
    import unrealcv

    with FakeUnrealCVServer(catalog, frame_seconds=0.05) as server, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the client's "too old to report its supported commands"
        client = unrealcv.Client((server.host, server.port))
        client.connect()
        frames = _settled_busy_frames(server)
        replies = client.request_batch([f"vget /unrealcv/echo {i}" for i in range(40)])
        frames = _settled_busy_frames(server) - frames
        client.disconnect()
    assert replies == [str(i) for i in range(40)]
    assert server.max_requests_in_a_frame == 32 and frames in (2, 3)


def test_error_reply_after_the_spawns_is_raised_and_every_actor_destroyed_once(server, catalog, plan):
    backend = UnrealCVBackend(server.host, server.port, catalog, width=RES, height=RES)
    server.error_on("/rotation ", "Injected failure")
    with pytest.raises(UnrealCVCommandError) as info:
        backend.render(plan)
    backend.close()
    assert "/rotation " in info.value.command and "error Injected failure" in str(info.value)
    assert _ours(server) == []
    destroys = [c for c in server.log if c.endswith("/destroy")]
    assert len(destroys) == len(set(destroys))  # the batch destroyed the scene; nothing sent twice
