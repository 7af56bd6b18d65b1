"""Scene synthesis: asset file, seeded plans, visibility, the offline renderer and the resumable scene runner."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from commonlink.cli import app
from commonlink.errors import InputError, SchemaError
from commonlink.fileio import sha256_file
from commonlink.formats.catalog import image_path, read_catalog
from commonlink.sharding import parse_shard
from commonlink.synth.assets import load_assets
from commonlink.synth.job import SceneChecks, SynthJob
from commonlink.synth.plan import PLAN_VERSION, PlanConfig, ScenePlan, plan_scene, ue_rotation_matrix
from commonlink.synth.render.offline import OfflineSettings
from commonlink.synth.runner import synthesize
from commonlink.synth.visibility import hidden_share, instance_ids_from_colors, object_areas

RES = (64, 64)


def tiny(scenes: int, *, objects=(3, 4), views=2, resolution=RES, seed=7, **checks) -> SynthJob:
    plan = PlanConfig(*objects, views=views, width=resolution[0], height=resolution[1])
    return SynthJob(scenes=scenes, seed=seed, plan=plan, checks=SceneChecks(**{"min_visible_pixels": 4, **checks}))


@pytest.fixture(scope="module")
def catalog():
    return load_assets()


# --- asset file --------------------------------------------------------------------------------------------


def test_builtin_assets_cover_the_issue(catalog):
    names = [a.name for a in catalog.assets]
    assert len(names) >= 100 and len(set(names)) == len(names)
    assert len(catalog.floors) >= 4
    assert {
        "apple",
        "banana",
        "rubber duck",
        "teddy bear",
        "soccer ball",
        "traffic cone",
        "measuring cup",
        "silver whisk",
        "gold jigger",
        "silver jigger",
        "mallard (fake duck)",
    } <= set(names)
    assert all(a.ue_class and min(a.size_cm) > 0 and a.mesh for a in catalog.assets)
    # Every asset says where its shape comes from and under which licence its renders are.
    assert all(a.source and a.license for a in catalog.assets)
    assert {a.license.split(" ")[0] for a in catalog.assets} <= {"Apache-2.0", "zlib"}


@pytest.mark.slow
def test_every_asset_loads_renders_and_has_a_mask(catalog):
    """Each asset alone on the floor, seen from above at an angle: it renders with a non-empty instance mask,
    and its mesh is normalised to its size hint (bottom at z = 0)."""
    from commonlink.synth.plan import CameraPose, Lighting, camera_axes
    from commonlink.synth.render.offline import OfflineRenderer, Placement, asset_mesh

    with OfflineRenderer(64, 64, catalog) as renderer:
        for asset in catalog.assets:
            mesh = asset_mesh(asset, catalog)
            assert abs(mesh.bounds[0][2]) < 1e-6, asset.name
            assert np.isclose(max(mesh.extents), max(asset.size_cm), rtol=1e-3), asset.name
            scene, nodes = renderer.build_scene(
                [Placement(asset, (0, 0, 0), (0, 0, 0), (1, 1, 1))], catalog.floors[0], Lighting()
            )
            forward, _, _ = camera_axes(30, 45)
            target = np.array([0, 0, asset.size_cm[2] / 2])
            camera = CameraPose(
                location=tuple(target - forward * 2.5 * max(asset.size_cm)), rotation=(-45, 30 - 180, 0), fov=45
            )
            rgb, seg = renderer.render_view(scene, nodes, camera, Lighting(), seg_colors=[(1, 0, 0)])
            mask = seg[..., 0] == 1
            assert 0.005 < mask.mean() < 0.9, (asset.name, mask.mean())
            assert rgb[mask].std() > 0 or rgb[mask].mean() > 0, asset.name


def test_asset_file_errors_name_the_entry(tmp_path):
    bad = tmp_path / "assets.json"
    bad.write_text(json.dumps({"assets": [{"name": "cup", "ue_class": "BP_Cup_C"}], "floors": []}))
    with pytest.raises(SchemaError, match=r"assets\[0\].*size_cm"):
        load_assets(bad)
    bad.write_text(
        json.dumps(
            {
                "assets": [{"name": "cup", "ue_class": "BP_Cup_C", "size_cm": [1, 2, 3], "license": 3}],
                "floors": [{"name": "f", "ue_class": "F"}],
            }
        )
    )
    with pytest.raises(SchemaError, match=r"assets\[0\] \(cup\).*'license' must be a non-empty string"):
        load_assets(bad)
    bad.write_text("{not json")
    with pytest.raises(SchemaError, match="could not be parsed"):
        load_assets(bad)
    with pytest.raises(InputError, match="not found"):
        load_assets(tmp_path / "missing.json")


def test_yaml_asset_file_with_a_local_mesh(tmp_path):
    import trimesh

    trimesh.creation.box(extents=[1, 2, 3]).export(tmp_path / "brick.obj")
    (tmp_path / "assets.yaml").write_text(
        "format: commonlink-assets/1\n"
        "assets:\n"
        "  - {name: brick, ue_class: BP_Brick_C, size_cm: [10, 20, 30], mesh: brick.obj, color: [200, 40, 40]}\n"
        "  - {name: apple, ue_class: BP_Apple_C, size_cm: [9, 9, 9.5], mesh: 'procedural:apple'}\n"
        "floors:\n"
        "  - {name: wood, ue_class: BP_Wood_C, texture: 'procedural:wood_planks'}\n"
    )
    assets = load_assets(tmp_path / "assets.yaml")
    assert [a.name for a in assets.assets] == ["brick", "apple"]
    from commonlink.synth.render.offline import asset_mesh

    mesh = asset_mesh(assets.asset("brick"), assets)
    assert np.allclose(sorted(mesh.extents), [10, 20, 30], atol=1e-6)  # normalised to the size hint
    assert abs(mesh.bounds[0][2]) < 1e-9  # pivot at the bottom


def test_synth_refuses_meshes_it_cannot_draw_before_writing_anything(tmp_path):
    (tmp_path / "garbage.obj").write_text("this is not a mesh\n")
    (tmp_path / "assets.yaml").write_text(
        "format: commonlink-assets/1\n"
        "assets:\n"
        "  - {name: apple, ue_class: BP_Apple_C, size_cm: [9, 9, 9.5], mesh: 'procedural:appel'}\n"
        "  - {name: brick, ue_class: BP_Brick_C, size_cm: [10, 20, 30], mesh: meshes/brick.obj}\n"
        "  - {name: pear, ue_class: BP_Pear_C, size_cm: [7, 7, 10], mesh: 'procedural:pear'}\n"
        "  - {name: junk, ue_class: BP_Junk_C, size_cm: [5, 5, 5], mesh: garbage.obj}\n"
        "floors:\n"
        "  - {name: wood, ue_class: BP_Wood_C, texture: 'procedural:wood_plank'}\n"
    )
    plan = PlanConfig(3, 3, views=1, width=48, height=48)
    config = SynthJob(scenes=1, assets=str(tmp_path / "assets.yaml"), plan=plan)
    with pytest.raises(InputError) as info:
        synthesize(tmp_path / "out", config, progress=False)
    problem = info.value.problem
    # Every entry it cannot find, at once, with a suggestion for near-miss names; nothing written.
    assert "3 entries" in problem and "'procedural:appel' (did you mean apple" in problem
    assert "mesh file not found" in problem and "brick.obj" in problem and "wood_planks" in problem
    assert not (tmp_path / "out").exists()
    # A file that exists but holds no readable triangles is refused when drawn, naming the file and the fix.
    from commonlink.synth.render.offline import asset_mesh

    catalog = load_assets(tmp_path / "assets.yaml")
    with pytest.raises(InputError, match="garbage.obj holds no triangles") as info:
        asset_mesh(catalog.asset("junk"), catalog)
    assert "Export it as .obj, .glb or .ply" in info.value.fix


# --- plans -------------------------------------------------------------------------------------------------


def test_plans_are_seeded_per_scene_and_pure(catalog):
    config = PlanConfig(min_objects=8, max_objects=16)
    before = repr(config)
    a = plan_scene(config, catalog, seed=3, index=5)
    np.random.seed(123)  # the global generator plays no part
    assert plan_scene(config, catalog, seed=3, index=5).to_json() == a.to_json()
    assert plan_scene(config, catalog, seed=3, index=6).to_json() != a.to_json()
    again = plan_scene(config, catalog, seed=3, index=5, attempt=1)
    assert again.to_json() != a.to_json()
    # A re-sampled plan holds the same objects on the same floor (only layout, cameras and light change), so the
    # re-sampling gates cannot favour small scenes or compact objects.
    assert sorted(o.name for o in again.objects) == sorted(o.name for o in a.objects)
    assert again.floor == a.floor and [o.cell for o in again.objects] != [o.cell for o in a.objects]
    assert plan_scene(config, catalog, seed=4, index=5).to_json() != a.to_json()
    assert repr(config) == before  # nothing changed in place
    assert ScenePlan.from_json(json.loads(json.dumps(a.to_json()))).to_json() == a.to_json()
    assert a.scene_id == "3-5"


def _footprint_pixels(o, step: float = 0.5) -> set[tuple[int, int]]:
    """Floor cells (``step`` cm) under an object's tilted, rotated bounding box, found by point-in-polygon tests
    on the convex hull of its corners (independent of the planner's separating-axis test)."""
    from matplotlib.path import Path as PolyPath
    from scipy.spatial import ConvexHull

    sx, sy, sz = (v * o.scale for v in o.size_cm)
    corners = np.array([[x, y, z] for x in (-sx / 2, sx / 2) for y in (-sy / 2, sy / 2) for z in (0, sz)])
    flat = (corners @ ue_rotation_matrix(*o.rotation).T)[:, :2] + np.asarray(o.location[:2])
    hull = flat[ConvexHull(flat).vertices]
    lo, hi = hull.min(axis=0), hull.max(axis=0)
    xs, ys = np.meshgrid(np.arange(lo[0], hi[0] + step, step), np.arange(lo[1], hi[1] + step, step))
    points = np.column_stack([xs.ravel(), ys.ravel()])
    inside = points[PolyPath(hull).contains_points(points)]
    return {(int(round(x / step)), int(round(y / step))) for x, y in inside}


@pytest.mark.slow
@pytest.mark.parametrize("objects", [(3, 7), (8, 16)])
def test_plan_layout_follows_the_paper(catalog, objects):
    config = PlanConfig(min_objects=objects[0], max_objects=objects[1], views=4)
    used_cells = set()
    for index in range(20):
        plan = plan_scene(config, catalog, seed=1, index=index)
        n = len(plan.objects)
        assert objects[0] <= n <= objects[1]
        assert len({o.name for o in plan.objects}) == n  # distinct assets
        assert len({o.cell for o in plan.objects}) == n  # one object per position
        cell = plan.floor.cell_cm
        origin = -plan.floor.grid * cell / 2
        for o in plan.objects:
            row, col = o.cell
            used_cells.add(o.cell)
            # Exactly one of the 16 positions: the centre of its grid cell.
            assert plan.floor.grid == 4 and 0 <= row < 4 and 0 <= col < 4
            assert math.isclose(o.location[0], origin + (row + 0.5) * cell, abs_tol=1e-3)
            assert math.isclose(o.location[1], origin + (col + 0.5) * cell, abs_tol=1e-3)
            pitch, yaw, roll = o.rotation
            assert abs(yaw) <= config.max_yaw_deg  # slight rotation by default
            assert abs(pitch) <= config.max_tilt_deg and abs(roll) <= config.max_tilt_deg
            # Size-normalised (one scale: aspect kept): at most the room to the nearest neighbour, capped.
            sx, sy, sz = (v * o.scale for v in o.size_cm)
            others = [max(abs(row - p.cell[0]), abs(col - p.cell[1])) for p in plan.objects if p is not o]
            room = min([config.max_room_cells, *others]) * cell
            assert max(sx, sy) <= config.fill[1] * room + 1e-6 and sz <= config.max_height * room + 1e-6
            # Resting on the floor: the lowest corner of the tilted box touches z = 0.
            corners = np.array([[x, y, z] for x in (-sx / 2, sx / 2) for y in (-sy / 2, sy / 2) for z in (0, sz)])
            lowest = (corners @ ue_rotation_matrix(*o.rotation).T)[:, 2].min() + o.location[2]
            assert abs(lowest) < 1e-2
        # No two objects' footprints share floor: they never interpenetrate.
        footprints = [_footprint_pixels(o) for o in plan.objects]
        for i in range(n):
            for j in range(i + 1, n):
                assert not footprints[i] & footprints[j], (plan.objects[i].name, plan.objects[j].name)
        assert len(plan.cameras) == 4
        azimuths = sorted(c.azimuth for c in plan.cameras)
        gaps = np.diff(azimuths + [azimuths[0] + 360])
        # One camera on each side of the grid.
        assert (gaps >= 90 - 2 * config.azimuth_jitter_deg - 1e-6).all() and (
            gaps <= 90 + 2 * config.azimuth_jitter_deg + 1e-6
        ).all()
        assert all(config.elevation_deg[0] <= c.elevation <= config.elevation_deg[1] for c in plan.cameras)
    assert len(used_cells) == 16  # objects are spread over all 16 positions, not a block of them


def test_yaw_range_is_an_option(catalog):
    slight = PlanConfig(min_objects=8, max_objects=8, max_yaw_deg=5)
    full = PlanConfig(min_objects=8, max_objects=8, max_yaw_deg=180)
    yaws_slight = [o.rotation[1] for i in range(10) for o in plan_scene(slight, catalog, 2, i).objects]
    yaws_full = [o.rotation[1] for i in range(10) for o in plan_scene(full, catalog, 2, i).objects]
    assert max(abs(y) for y in yaws_slight) <= 5
    assert max(abs(y) for y in yaws_full) > 90 and min(yaws_full) < -90
    with pytest.raises(InputError, match="max-yaw"):
        PlanConfig(max_yaw_deg=200).check(catalog)


def _project(camera, points: np.ndarray, width: int, height: int) -> np.ndarray:
    """Pixel-independent image coordinates in [-1, 1] (x right, y up) of world points seen by a plan camera."""
    axes = ue_rotation_matrix(*camera.rotation)  # columns: forward, right, up
    rel = points - np.asarray(camera.location, float)
    depth = rel @ axes[:, 0]
    assert (depth > 0).all()  # everything in front of the camera
    tan_h = math.tan(math.radians(camera.fov) / 2)
    return np.stack([rel @ axes[:, 1] / depth / tan_h, rel @ axes[:, 2] / depth / (tan_h * height / width)], axis=1)


@pytest.mark.parametrize(("objects", "median_size"), [((3, 7), 0.06), ((8, 16), 0.03)])
def test_cameras_frame_every_object_tightly(catalog, objects, median_size):
    """Each camera keeps every object's whole bounding box inside the frame, and comes
    close enough that objects are large in the image (the median object's projected box covers at least
    ``median_size`` of the frame: 6% with 3-7 objects, 3% with 8-16)."""
    config = PlanConfig(min_objects=objects[0], max_objects=objects[1], views=4, width=320, height=240)
    sizes = []
    for index in range(10):
        plan = plan_scene(config, catalog, seed=5, index=index)
        for camera in plan.cameras:
            for o in plan.objects:
                sx, sy, sz = (v * o.scale for v in o.size_cm)
                box = np.array(
                    [[x, y, z] for x in (-sx / 2, 0, sx / 2) for y in (-sy / 2, 0, sy / 2) for z in (0, sz / 2, sz)]
                )
                world = box @ ue_rotation_matrix(*o.rotation).T + np.asarray(o.location, float)
                uv = _project(camera, world, config.width, config.height)
                assert (np.abs(uv) <= 1.0 + 1e-6).all()  # the whole bounding box is in frame: nothing cut by the border
                sizes.append(np.ptp(uv[:, 0]) * np.ptp(uv[:, 1]) / 4)
    assert np.median(sizes) >= median_size


def test_plan_config_refuses_impossible_requests(catalog):
    with pytest.raises(InputError, match="16 objects fit"):
        PlanConfig(min_objects=8, max_objects=17).check(catalog)
    with pytest.raises(InputError, match="LOW <= HIGH"):
        PlanConfig(min_objects=5, max_objects=3).check(catalog)
    with pytest.raises(InputError, match="--set-size 0"):
        PlanConfig(set_size=0).check(catalog)
    with pytest.raises(InputError, match="--set-pool 5: a set's pool must hold a whole scene"):
        PlanConfig(set_pool=5).check(catalog)


# --- scene sets --------------------------------------------------------------------------------------------


def test_scenes_of_a_set_share_its_pool_and_are_independent_units(catalog):
    from commonlink.synth.plan import scene_asset_indices

    config = PlanConfig()  # sets of 4, pools of 2 x 7
    n = len(catalog.assets)
    scenes = [scene_asset_indices(config, n, 3, i) for i in range(40)]
    for set_start in range(0, 40, 4):
        group = scenes[set_start : set_start + 4]
        assert len({len(s) for s in group}) == 1 and 3 <= len(group[0]) <= 7  # one object count a set
        assert len(set().union(*map(set, group))) <= 14  # all from the set's pool
        assert all(len(set(s)) == len(s) for s in group)
    # the same scene planned alone (another shard, a resumed run) holds the same objects
    assert scene_asset_indices(config, n, 3, 17) == scenes[17]
    assert plan_scene(config, catalog, 3, 17).extra["set"] == 4
    assert sorted(o.asset for o in plan_scene(config, catalog, 3, 17).objects) == sorted(
        catalog.assets[i].name for i in scenes[17]
    )
    # set_share: that share of sets are planned as sets; set_share 0 is the same as set_size 1
    half = [scene_asset_indices(PlanConfig(set_share=0.5), n, 3, i) for i in range(400)]
    pooled = sum(
        len(set().union(*map(set, half[s : s + 4]))) <= 14 and len({len(x) for x in half[s : s + 4]}) == 1
        for s in range(0, 400, 4)
    )
    assert 35 <= pooled <= 75  # ~50 sets of 100 pooled (an independent set passes by chance rarely)
    assert [scene_asset_indices(PlanConfig(set_share=0.0), n, 3, i) for i in range(8)] == [
        scene_asset_indices(PlanConfig(set_size=1), n, 3, i) for i in range(8)
    ]
    with pytest.raises(InputError, match="--set-share 2"):
        PlanConfig(set_share=2).check(catalog)
    # set_size 1: scenes draw on their own, as before sets
    alone = [scene_asset_indices(PlanConfig(set_size=1), n, 3, i) for i in range(40)]
    assert len(set().union(*map(set, alone[:4]))) > 14 or len({len(s) for s in alone[:4]}) > 1


def test_demo_scale_plans_reach_many_common_object_counts(catalog):
    from commonlink.synth.plan import common_object_histogram

    n = len(catalog.assets)
    main = common_object_histogram(PlanConfig(min_objects=3, max_objects=7), n, 0, 24)
    challenge = common_object_histogram(PlanConfig(min_objects=8, max_objects=16), n, 0, 16)
    assert sum(1 for c in main if c) >= 6 and sum(1 for c in challenge if c) >= 8
    independent = common_object_histogram(PlanConfig(min_objects=3, max_objects=7, set_size=1), n, 0, 24)
    assert max(k for k, c in enumerate(independent) if c) <= 3  # why sets: independent scenes rarely share more


@pytest.mark.slow
def test_paper_scale_plan_reaches_every_common_object_count(catalog):
    """Issue 23: planned (not rendered) at the paper's size, 10,586 main and 12,600 challenge rows, with two
    images a row and each image used about once (scenes = 2 x rows / 4 views), every k of each split occurs."""
    from commonlink.synth.plan import common_object_histogram

    n = len(catalog.assets)
    for (lo, hi), rows in (((3, 7), 10_586), ((8, 16), 12_600)):
        scenes = math.ceil(2 * rows / 4)
        histogram = common_object_histogram(PlanConfig(min_objects=lo, max_objects=hi), n, 0, scenes)
        assert all(count > 0 for count in histogram), (lo, hi, histogram)
        assert histogram[hi] >= 20  # scene pairs with every object in common: 4 x 4 view pairs each


# --- visibility --------------------------------------------------------------------------------------------


def test_visibility_threshold_and_colour_tolerance():
    instance = np.zeros((10, 10), np.uint16)
    instance[:3, :3] = 1  # 9 px
    instance[9, 9] = 2  # 1 px
    assert object_areas(instance, ["cup", "key"], min_pixels=2) == {"cup": 0.09}
    assert hidden_share([instance, instance], 2, min_pixels=2) == 0.5
    mask = np.zeros((2, 3, 3), np.uint8)
    mask[0, 0] = (50, 110, 178)  # within 3 of object 1's colour
    mask[0, 1] = (48, 112, 170)  # 6 away: nothing
    mask[1, 2] = (240, 48, 48)
    ids = instance_ids_from_colors(mask, [(48, 112, 176), (240, 48, 48)], tolerance=3)
    assert ids.tolist() == [[1, 0, 0], [0, 0, 2]]


# --- offline renderer --------------------------------------------------------------------------------------


@pytest.mark.slow
def test_offline_render_is_lit_with_exact_instance_masks(catalog):
    from commonlink.synth.render.offline import OfflineRenderer

    plan = plan_scene(PlanConfig(min_objects=5, max_objects=5, views=2, width=96, height=96), catalog, seed=2, index=0)
    with OfflineRenderer(96, 96, catalog) as renderer:
        views = renderer.render(plan)
        again = renderer.render(plan)
    assert len(views) == 2
    for view, repeat in zip(views, again):
        assert view.rgb.shape == (96, 96, 3) and view.rgb.dtype == np.uint8
        assert set(np.unique(view.instance)) <= set(range(6))  # exact ids: no blended edge values
        assert np.array_equal(view.instance, repeat.instance) and np.array_equal(view.rgb, repeat.rgb)
        objects = view.instance > 0
        assert 0.02 < objects.mean() < 0.9  # objects in frame, not filling it
        luminance = view.rgb.astype(float).mean(axis=2)
        assert luminance[objects].std() > 5  # shaded, not flat colour
        assert luminance.max() > 120  # lit
    seen = set(np.unique(np.concatenate([v.instance.ravel() for v in views]))) - {0}
    assert len(seen) >= 4  # (almost) every object visible somewhere


# --- runner: catalog, resume, shards, workers --------------------------------------------------------------


def _scene_files(out: Path) -> dict[str, str]:
    return {str(p.relative_to(out)): sha256_file(p) for p in sorted((out / "scenes").rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_synthesize_writes_a_catalog(tmp_path):
    out = tmp_path / "cat"
    summary = synthesize(out, tiny(3), progress=False)
    assert (summary.scenes_rendered, summary.views_written, summary.catalog_records) == (3, 6, 6)
    records = read_catalog(out)
    assert len(records) == 6 and len({r.id for r in records}) == 6
    for r in records:
        assert r.source == "synthetic" and r.scene_id.startswith("7-") and (r.width, r.height) == RES
        assert sha256_file(image_path(out, r)) == r.sha256
        assert set(r.objects) == set(r.object_area) and set(r.objects) <= set(r.extra["planned_objects"])
        assert all(0 < a < 1 for a in r.object_area.values())
        mask = np.asarray(__import__("PIL.Image", fromlist=["Image"]).open(out / r.extra["mask"]))
        visible = {r.extra["planned_objects"][k - 1] for k in np.unique(mask) if k and (mask == k).sum() >= 4}
        assert visible == set(r.objects)  # objects = exactly the ones passing the pixel threshold
    meta = json.loads((out / "synth_config.json").read_text())
    assert meta["seed"] == 7 and meta["toolkit_version"] and meta["config"]["views"] == 2
    plan = json.loads((out / "scenes" / "scene_000000" / "plan.json").read_text())
    assert plan["scene_id"] == "7-0" and len(plan["cameras"]) == 2 and plan["visibility"]


@pytest.mark.slow
def test_any_scene_can_be_redone_alone_and_shards_are_disjoint(tmp_path):
    full = tmp_path / "full"
    synthesize(full, tiny(4), progress=False)
    parts = []
    for i in range(2):
        part = tmp_path / f"part{i}"
        summary = synthesize(part, tiny(4), shard=(i, 2), progress=False)
        assert summary.scenes_in_shard == 2
        parts.append(part)
    ids = [{r.scene_id for r in read_catalog(p)} for p in parts]
    assert ids[0] == {"7-0", "7-2"} and ids[1] == {"7-1", "7-3"}
    merged = {**_scene_files(parts[0]), **_scene_files(parts[1])}
    assert merged == _scene_files(full)  # same bytes whichever process rendered a scene
    with pytest.raises(InputError, match="0 <= I < N"):
        parse_shard("2/2")


@pytest.mark.slow
def test_rerun_resumes_and_refuses_other_options(tmp_path):
    out = tmp_path / "cat"
    synthesize(out, tiny(2), progress=False)
    (out / "scenes" / f".tmp-scene_000002-{os.uname().nodename}-999999999").mkdir()  # left by a killed run
    (out / "scenes" / "scene_000002").mkdir()  # an incomplete folder (no records.jsonl): redone
    summary = synthesize(out, tiny(3), progress=False)
    assert (summary.scenes_skipped, summary.scenes_rendered, summary.catalog_records) == (2, 1, 6)
    assert not list((out / "scenes").glob(".tmp-*"))
    with pytest.raises(InputError, match="views"):
        synthesize(out, tiny(3, views=3), progress=False)
    summary = synthesize(out, tiny(1, views=3), progress=False, overwrite=True)
    assert summary.catalog_records == 3 and len(list((out / "scenes").iterdir())) == 1


@pytest.mark.slow
def test_resampling_is_bounded(tmp_path):
    # Nothing can pass a threshold larger than the image: every plan is "hidden"; the run still ends.
    summary = synthesize(
        tmp_path / "c", tiny(1, min_visible_pixels=10**6, max_attempts=3, area_band=None), progress=False
    )
    plan = json.loads((tmp_path / "c" / "scenes" / "scene_000000" / "plan.json").read_text())
    assert plan["extra"]["attempts"] == 3 and plan["attempt"] == 0 and plan["extra"]["hidden_share"] == 1.0
    assert summary.resampled_scenes == 1 and all(r.objects == [] for r in read_catalog(tmp_path / "c"))


@pytest.mark.slow
def test_area_band_gate_resamples_and_the_summary_counts_every_pair(tmp_path):
    from PIL import Image

    # A band no object reaches: every scene is re-sampled up to max_attempts, and the share says 0%.
    summary = synthesize(
        tmp_path / "far", tiny(2, area_band=(0.5, 0.6), min_in_band=1.0, max_attempts=2), progress=False
    )
    assert summary.resampled_scenes == 2 and summary.in_band == 0 and summary.in_band_share == 0.0
    plan = json.loads((tmp_path / "far" / "scenes" / "scene_000000" / "plan.json").read_text())
    assert (
        plan["extra"]["attempts"] == 2
        and plan["extra"]["area_band"] == [0.5, 0.6]
        and plan["extra"]["in_band_share"] == 0.0
    )
    # No gate: one plan per scene, nothing about the band in the plan.
    synthesize(tmp_path / "off", tiny(2, area_band=None, max_hidden_share=1.0), progress=False)
    plan = json.loads((tmp_path / "off" / "scenes" / "scene_000001" / "plan.json").read_text())
    assert plan["extra"]["attempts"] == 1 and "in_band_share" not in plan["extra"]
    # The default band: the summary's counts are those of the written masks.
    out = tmp_path / "band"
    summary = synthesize(out, tiny(3, resolution=(96, 96)), progress=False)
    inside = hidden = pairs = 0
    for record in read_catalog(out):
        mask = np.asarray(Image.open(out / record.extra["mask"]))
        for k, _ in enumerate(record.extra["planned_objects"]):
            area = (mask == k + 1).sum() / mask.size
            pairs += 1
            inside += 0.02 <= area <= 0.22
            hidden += (mask == k + 1).sum() < 4
    assert (summary.object_views, summary.in_band, summary.hidden) == (pairs, inside, hidden)
    with pytest.raises(InputError, match="area-band"):
        tiny(1, area_band=(0.3, 0.1))
    with pytest.raises(InputError, match="min-in-band"):
        tiny(1, min_in_band=1.5)


@pytest.mark.slow
def test_workers_match_a_single_process(tmp_path):
    synthesize(tmp_path / "one", tiny(3), progress=False)
    synthesize(tmp_path / "two", tiny(3), workers=2, progress=False)
    assert _scene_files(tmp_path / "two") == _scene_files(tmp_path / "one")


@pytest.mark.slow
def test_killed_run_resumes_to_a_complete_catalog(tmp_path):
    out = tmp_path / "cat"
    args = [
        sys.executable,
        "-m",
        "commonlink.cli",
        "synth",
        "--out",
        str(out),
        "--scenes",
        "8",
        "--views",
        "2",
        "--resolution",
        "64x64",
        "--objects",
        "3-4",
        "--seed",
        "5",
        "--min-visible-pixels",
        "4",
        "--no-progress",
    ]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while time.time() < deadline and len(list((out / "scenes").glob("scene_*"))) < 2:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done_before = len(list((out / "scenes").glob("scene_*")))
    assert 2 <= done_before < 8
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    records = read_catalog(out)
    assert len(records) == 16 and len({r.id for r in records}) == 16
    assert sorted({r.scene_id for r in records}) == sorted(f"5-{i}" for i in range(8))
    assert not list((out / "scenes").glob(".tmp-*"))
    for folder in (out / "scenes").glob("scene_*"):
        assert sorted(p.name for p in folder.iterdir()) == [
            "mask_0.png",
            "mask_1.png",
            "plan.json",
            "records.jsonl",
            "view_0.png",
            "view_1.png",
        ]


@pytest.mark.slow
def test_cli_synth_and_errors(tmp_path):
    runner = CliRunner()
    out = tmp_path / "cli"
    result = runner.invoke(
        app,
        [
            "synth",
            "--out",
            str(out),
            "--scenes",
            "1",
            "--views",
            "1",
            "--resolution",
            "64x64",
            "--objects",
            "3-3",
            "--no-progress",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "1 rendered" in result.output and len(read_catalog(out)) == 1
    assert "Object areas:" in result.output and "(object, view) pairs in 2-22% of the image" in result.output
    result = runner.invoke(
        app,
        [
            "synth",
            "--out",
            str(tmp_path / "off"),
            "--scenes",
            "1",
            "--views",
            "1",
            "--resolution",
            "64x64",
            "--objects",
            "3-3",
            "--area-band",
            "off",
            "--max-yaw",
            "180",
            "--no-progress",
        ],
    )
    assert result.exit_code == 0, result.output
    config = json.loads((tmp_path / "off" / "synth_config.json").read_text())["config"]
    assert config["area_band"] is None and config["max_yaw"] == 180.0
    bad = runner.invoke(app, ["synth", "--out", str(tmp_path / "x"), "--scenes", "1", "--area-band", "big"])
    assert bad.exit_code == 1 and "LOW-HIGH" in bad.output
    bad = runner.invoke(app, ["synth", "--out", str(tmp_path / "x"), "--scenes", "1", "--objects", "8-20"])
    assert bad.exit_code == 1 and "at most 16 objects" in bad.output
    bad = runner.invoke(app, ["synth", "--out", str(tmp_path / "x"), "--scenes", "1", "--resolution", "big"])
    assert bad.exit_code == 1 and "WIDTHxHEIGHT" in bad.output


@pytest.mark.slow
def test_pairs_consume_a_synthetic_catalog(tmp_path):
    pairs = pytest.importorskip("commonlink.kinds.common_o.pairs")
    out = tmp_path / "cat"
    synthesize(out, tiny(6, objects=(3, 5), views=2, resolution=(96, 96)), progress=False)
    rows, _ = pairs.sample_pairs(
        [out], pairs.PairsConfig(split="main", count=4, objects=(1, 5), max_common=1, choices=4, seed=0)
    )
    assert len(rows) == 4 and all(r["source"] == "synthetic" for r in rows)


@pytest.mark.slow
def test_catalog_from_another_plan_version_is_not_resumed(tmp_path, monkeypatch):
    out = tmp_path / "cat"
    synthesize(out, tiny(1), progress=False)
    import commonlink.synth.job as job

    monkeypatch.setattr(job, "PLAN_VERSION", job.PLAN_VERSION + 1)
    with pytest.raises(InputError, match="plan_version"):
        synthesize(out, tiny(2), progress=False)


#: The ``config`` of ``synth_config.json`` as written before the settings moved onto the renderers (toolkit 0.x,
#: ``SynthConfig``): both renderers' settings, whatever the backend, for ``tiny(n)``. Its plan version is the
#: current one (such folders were written at version 4; one of an older plan version is refused, see
#: test_catalog_from_another_plan_version_is_not_resumed): what is tested here is the record's layout.
RECORD_BEFORE_THE_SPLIT = {
    "plan_version": PLAN_VERSION,
    "objects": [3, 4],
    "views": 2,
    "resolution": [64, 64],
    "seed": 7,
    "backend": "offline",
    "min_visible_pixels": 4,
    "max_hidden_share": 0.25,
    "max_attempts": 5,
    "mask_tolerance": 3,
    "shadows": False,
    "area_band": [0.02, 0.22],
    "min_in_band": None,
    "max_yaw": 15.0,
    "set_size": 4,
    "set_pool": None,
    "set_share": 1.0,
}


def test_the_record_compares_only_what_changes_the_output(catalog):
    from commonlink.synth.job import changed_options
    from commonlink.synth.render.unrealcv import UnrealCVSettings

    old = {**RECORD_BEFORE_THE_SPLIT, "assets_sha256": catalog.sha256}
    content = tiny(1).content(catalog)
    assert "mask_tolerance" not in content and changed_options(old, content) == []
    # An UnrealCV folder recorded `shadows` too; the address and the timeouts are not recorded at all.
    ue = dataclasses.replace(tiny(1), renderer=UnrealCVSettings("example.org", 9001, timeout=5.0))
    assert changed_options({**old, "backend": "unrealcv"}, ue.content(catalog)) == []
    assert changed_options(old, ue.content(catalog)) == ["backend"]
    # What a record holds and this code does not know is a change (a folder from a newer toolkit).
    assert changed_options({**old, "lens": "fisheye"}, content) == ["lens"]
    # Plan settings the CLI has no option for are recorded once they leave their defaults.
    wide = dataclasses.replace(tiny(1), plan=dataclasses.replace(tiny(1).plan, cell_cm=40.0, fill=(0.9, 0.95)))
    assert wide.content(catalog)["plan_options"] == {"cell_cm": 40.0, "fill": [0.9, 0.95]}
    assert changed_options(content, wide.content(catalog)) == ["plan_options"]


def test_the_renderer_is_chosen_by_name_and_takes_its_own_options():
    from commonlink.synth.render import RENDERERS, renderer_settings
    from commonlink.synth.render.offline import OfflineSettings
    from commonlink.synth.render.unrealcv import UnrealCVSettings

    cli = dict(shadows=True, host="10.0.0.2", port=9001, timeout=30.0, connect_timeout=5.0)
    assert renderer_settings("offline", **cli) == OfflineSettings(shadows=True)
    assert renderer_settings("unrealcv", **cli) == UnrealCVSettings("10.0.0.2", 9001, 30.0, 5.0)
    assert sorted(RENDERERS) == ["offline", "unrealcv"]
    with pytest.raises(InputError, match="--backend 'blender' is not one of offline, unrealcv"):
        renderer_settings("blender")
    with pytest.raises(TypeError, match="shadow"):
        renderer_settings("offline", shadow=True)
    with pytest.raises(InputError, match="--timeout 0.0"):
        UnrealCVSettings(timeout=0.0)
    with pytest.raises(InputError, match="--resolution 0x64"):
        PlanConfig(width=0, height=64)


@pytest.mark.slow
def test_a_folder_recorded_before_the_split_resumes(tmp_path):
    out = tmp_path / "cat"
    synthesize(out, tiny(1), progress=False)
    meta = json.loads((out / "synth_config.json").read_text())
    meta["config"] = {**RECORD_BEFORE_THE_SPLIT, "assets_sha256": meta["config"]["assets_sha256"]}
    (out / "synth_config.json").write_text(json.dumps(meta))
    summary = synthesize(out, tiny(2), progress=False)
    assert (summary.scenes_skipped, summary.scenes_rendered) == (1, 1)
    with pytest.raises(InputError, match="shadows"):
        synthesize(out, dataclasses.replace(tiny(2), renderer=OfflineSettings(shadows=True)), progress=False)


@pytest.mark.slow
def test_renders_are_byte_identical_across_fresh_processes(tmp_path):
    """`synth` from scratch twice, each in a fresh interpreter: the same files, byte for byte (ids and
    catalog.jsonl included). pyrender keeps lights and meshes in sets ordered by memory address; summing the sun
    and the fill light in another order changed single pixels by one level between runs."""
    outs = []
    for k in range(2):
        out = tmp_path / f"run{k}"
        subprocess.run(
            [
                sys.executable,
                "-m",
                "commonlink.cli",
                "synth",
                "--out",
                str(out),
                "--scenes",
                "4",
                "--views",
                "4",
                "--resolution",
                "128x128",
                "--objects",
                "6-7",
                "--seed",
                "11",
                "--no-progress",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        outs.append(out)
    assert _scene_files(outs[0]) == _scene_files(outs[1])
    assert (outs[0] / "catalog.jsonl").read_bytes() == (outs[1] / "catalog.jsonl").read_bytes()


def test_scene_iterates_lights_and_meshes_in_name_order(catalog):
    from commonlink.synth.render.offline import OfflineRenderer

    plan = plan_scene(PlanConfig(min_objects=5, max_objects=5, views=1, width=32, height=32), catalog, seed=2, index=0)
    with OfflineRenderer(32, 32, catalog) as renderer:
        renderer.render(plan)
        scene = renderer._scene
        import pyrender

        names = ["light:z", "light:a", "light:m"]
        for name in names:
            scene.add(pyrender.DirectionalLight(), name=name)
        assert [n.name for n in scene.light_nodes] == sorted(["light:sun", *names])
        mesh_names = [n.name for n in scene.mesh_nodes]
        assert mesh_names == sorted(mesh_names) and len(mesh_names) == len(set(mesh_names))


@pytest.mark.parametrize("shadows", [False, True])
def test_a_scene_renders_the_same_whatever_the_renderer_drew_before(catalog, shadows):
    """One renderer draws scene after scene (its earlier objects stay in its GL scene, hidden): a scene's images
    must not depend on them. Shadow maps are fitted to the scene's bounds, which counted the hidden objects at
    their old poses, so with --shadows a worker that had drawn other scenes wrote other pixels than a fresh one."""
    from commonlink.synth.render.offline import OfflineRenderer

    config = PlanConfig(min_objects=3, max_objects=7, views=2, width=48, height=48)
    first, later = (plan_scene(config, catalog, seed=5, index=i) for i in (0, 1))
    with OfflineRenderer(48, 48, catalog, shadows=shadows) as renderer:
        fresh = renderer.render(later)
    with OfflineRenderer(48, 48, catalog, shadows=shadows) as renderer:
        renderer.render(first)
        after = renderer.render(later)
    for a, b in zip(fresh, after):
        assert np.array_equal(a.rgb, b.rgb) and np.array_equal(a.instance, b.instance)


@pytest.mark.parametrize("shadows", [False, True])
def test_colour_only_passes_give_stock_pyrenders_pixels(catalog, shadows):
    """The renderer reads back colour only and draws the segmentation pass without multisampling
    (pyrender_ext); the images and masks must be stock pyrender's, byte for byte."""
    from pyrender.renderer import Renderer

    from commonlink.synth.render.offline import OfflineRenderer
    from commonlink.synth.render.pyrender_ext import colour_only_renderer_class

    plan = plan_scene(PlanConfig(min_objects=6, max_objects=6, views=2, width=40, height=40), catalog, seed=3, index=0)
    with OfflineRenderer(40, 40, catalog, shadows=shadows) as renderer:
        gl = renderer._renderer._renderer
        assert type(gl) is colour_only_renderer_class()
        ours = renderer.render(plan)
        gl.__class__ = Renderer
        stock = renderer.render(plan)
    for a, b in zip(ours, stock):
        assert np.array_equal(a.rgb, b.rgb) and np.array_equal(a.instance, b.instance)
        assert len(np.unique(a.instance)) > 2  # objects drawn


def test_resampled_plans_are_judged_on_masks_and_shaded_once(catalog):
    """The offline renderer draws a rejected attempt's mask pass only; the kept plan's pixels are those a whole
    render gives (the two passes are independent)."""
    from commonlink.synth.render.offline import OfflineRenderer
    from commonlink.synth.scenes import plan_and_render

    # An area band no plan can meet: every attempt is tried and the best one kept.
    job = tiny(1, objects=(3, 4), max_attempts=3, area_band=(0.5, 0.6))
    with OfflineRenderer(*RES, catalog) as renderer:
        calls = {"render_masks": 0, "render_colour": 0, "render": 0}
        for name in calls:
            method = getattr(renderer, name)

            def counted(*args, _method=method, _name=name, **kwargs):
                calls[_name] += 1
                return _method(*args, **kwargs)

            setattr(renderer, name, counted)
        plan, views, attempts = plan_and_render(job, catalog, renderer, 0)
        assert attempts == 3
        assert calls == {"render_masks": 3, "render_colour": 1, "render": 0}
        whole = OfflineRenderer.render(renderer, plan)
    for kept, again in zip(views, whole, strict=True):
        assert np.array_equal(kept.rgb, again.rgb)
        assert np.array_equal(kept.instance, again.instance)
