"""`commonlink unreal check` / the preflight of `synth --backend unrealcv`, over the real ``unrealcv`` client
against the test server modelled on the plugin (spawn finds loaded classes only, bounds as GetActorBounds)."""

from __future__ import annotations

import json
import shutil

import pytest
from typer.testing import CliRunner

from commonlink.cli import app
from commonlink.errors import BackendError, InputError
from commonlink.formats.catalog import read_catalog
from commonlink.synth.assets import DEFAULT_ASSETS_FILE, load_assets
from commonlink.synth.job import SynthJob
from commonlink.synth.plan import PlanConfig
from commonlink.synth.render.unreal_check import check_project, require_project_ready
from commonlink.synth.render.unrealcv import UnrealCVSettings
from commonlink.synth.runner import synthesize
from tests.fixtures.unrealcv_server import (
    ClassShape,
    FakeUnrealCVServer,
    default_level,
)


@pytest.fixture()
def user_assets(tmp_path):
    path = tmp_path / "project_assets.json"
    shutil.copy(DEFAULT_ASSETS_FILE, path)
    return path


@pytest.fixture()
def catalog(user_assets):
    return load_assets(user_assets)


@pytest.fixture()
def broken_project(catalog):
    """Three classes not loaded, one object bigger than the asset file says, one with a centred pivot, a floor
    whose top is not at its pivot, one whose mesh is hidden in game."""
    missing = {catalog.assets[i].ue_class for i in (2, 9, 17)}
    loaded = set(catalog.by_ue_class()) - missing
    big, centred, hidden = catalog.assets[4], catalog.assets[5], catalog.assets[6]
    shapes = {
        big.ue_class: ClassShape(tuple(v * 1.5 for v in big.size_cm)),
        centred.ue_class: ClassShape(centred.size_cm, (0.0, 0.0, -centred.size_cm[2] / 2)),
        catalog.floors[1].ue_class: ClassShape((1600.0, 1600.0, 10.0), (0.0, 0.0, 0.0)),
    }
    with FakeUnrealCVServer(
        catalog, loaded_classes=loaded, class_shapes=shapes, hidden_classes={hidden.ue_class}
    ) as server:
        server.hidden_class = hidden.ue_class
        yield server, missing, big, centred


def _ours(server):
    return sorted(set(server.actors) - {a.name for a in default_level()})


@pytest.mark.slow
def test_every_missing_class_is_reported_at_once(broken_project, catalog):
    server, missing, big, centred = broken_project
    report = check_project(server.host, server.port, catalog)
    assert {c.ue_class for c in report.missing} == missing  # all three, not just the first
    assert all("Can not find a class with name" in c.reply for c in report.missing)
    by_class = {c.ue_class: c for c in report.mismatched}
    assert set(by_class) == {big.ue_class, centred.ue_class, catalog.floors[1].ue_class, server.hidden_class}
    assert by_class[server.hidden_class].problems == ["it is not drawn in object masks (mesh hidden in game?)"]
    assert "the asset file says" in by_class[big.ue_class].problems[0]
    assert by_class[big.ue_class].measured_size_cm == pytest.approx(tuple(v * 1.5 for v in big.size_cm), abs=0.02)
    assert "pivot is not the bottom centre" in by_class[centred.ue_class].problems[0]
    assert by_class[centred.ue_class].pivot_offset_cm[2] == pytest.approx(-centred.size_cm[2] / 2, abs=0.02)
    assert "floor's top" in by_class[catalog.floors[1].ue_class].problems[0]
    ok = [c for c in report.classes if c.status == "ok"]
    assert len(ok) == len(report.classes) - 7 and all(
        c.pivot_offset_cm == (0.0, 0.0, 0.0) for c in ok if c.kind == "object"
    )
    assert not report.ok and report.plugin_version == "1.0.1"
    assert _ours(server) == []  # every probe actor (and the probe camera) was destroyed
    probes = [c for c in server.log if c.endswith("/object_mask png")]
    assert len(probes) == sum(c.kind == "object" for c in report.classes) - len(missing)  # every spawned object class
    assert not any(c.startswith(("vset /camera/0/", "vget /camera/0/")) for c in server.log)

    with pytest.raises(InputError) as info:
        require_project_ready(server.host, server.port, catalog)
    assert all(cls in info.value.problem for cls in missing | {big.ue_class, centred.ue_class})


@pytest.mark.slow
def test_synth_runs_the_check_first_and_renders_nothing(broken_project, user_assets, tmp_path):
    server, missing, _, _ = broken_project
    config = SynthJob(
        scenes=2,
        assets=str(user_assets),
        plan=PlanConfig(3, 3, views=1, width=48, height=48),
        renderer=UnrealCVSettings(server.host, server.port),
    )
    with pytest.raises(InputError, match="does not match the asset file") as info:
        synthesize(tmp_path / "out", config, progress=False)
    assert all(cls in info.value.problem for cls in missing)
    assert "import the missing meshes" in info.value.fix.lower() and "size_cm" in info.value.fix
    assert read_catalog(tmp_path / "out") == [] or not (tmp_path / "out" / "catalog.jsonl").exists()
    assert not any(c.startswith("vset /objects/spawn") and "cl_check_" not in c for c in server.log)  # no scene


@pytest.mark.slow
def test_cli_unreal_check(broken_project, user_assets, tmp_path):
    server, missing, _, _ = broken_project
    runner = CliRunner()
    result = runner.invoke(
        app,
        [
            "unreal",
            "check",
            "--asset-file",
            str(user_assets),
            "--host",
            server.host,
            "--port",
            str(server.port),
            "--json",
        ],
    )
    assert result.exit_code == 1, result.output
    data = json.loads(result.stdout)
    assert {c["ue_class"] for c in data["classes"] if c["status"] == "missing"} == missing
    table = runner.invoke(
        app, ["unreal", "check", "--assets", str(user_assets), "--host", server.host, "--port", str(server.port)]
    )
    assert table.exit_code == 1 and "could not be spawned" in table.stdout
    # The table ends with what to do about both kinds of problem found, naming the file to recheck.
    fix = table.stdout[table.stdout.index("Fix: ") :]
    assert "commonlink_import.py" in fix and "size_cm" in fix and str(user_assets.name) in fix

    # A project with every class: exit 0.
    good = load_assets(user_assets)
    with FakeUnrealCVServer(good) as ok_server:
        result = runner.invoke(
            app,
            [
                "unreal",
                "check",
                "--asset-file",
                str(user_assets),
                "--host",
                ok_server.host,
                "--port",
                str(ok_server.port),
            ],
        )
    assert result.exit_code == 0, result.output
    assert "match the asset file" in result.stdout

    # The built-in asset file's classes are placeholders: refused with the fix, without connecting.
    result = runner.invoke(app, ["unreal", "check", "--asset-file", str(DEFAULT_ASSETS_FILE), "--port", "1"])
    assert result.exit_code == 1 and "placeholders" in result.output


def test_check_before_play_says_press_play(catalog):
    with FakeUnrealCVServer(catalog, playing=False) as server, pytest.raises(BackendError, match="Press Play"):
        check_project(server.host, server.port, catalog)
