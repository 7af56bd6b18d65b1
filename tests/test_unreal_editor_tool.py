"""tools/unreal/commonlink_import.py runs inside Unreal Editor's Python, which cannot run here. Its pure parts are
tested directly; its editor calls run against a stand-in ``unreal`` module that records them (the calls follow
the UE 5.2-5.5 Python API: AssetImportTask, BlueprintFactory, SubobjectDataSubsystem, EditorActorSubsystem)."""

from __future__ import annotations

import importlib.util
import json
import sys
import types
from pathlib import Path

import pytest

from commonlink.synth.assets import load_assets

TOOL = Path(__file__).resolve().parents[1] / "tools" / "unreal" / "commonlink_import.py"


@pytest.fixture(scope="module")
def tool():
    spec = importlib.util.spec_from_file_location("commonlink_import", TOOL)
    module = importlib.util.module_from_spec(spec)
    sys.modules["commonlink_import"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)  # must import without Unreal (no `import unreal` at module level)
    return module


def test_names_pivots_and_sizes(tool, tmp_path):
    assert tool.object_name(Path("BlackCeramicMug.glb")) == "black ceramic mug"
    assert tool.object_name(Path("wooden_bowl-02.FBX")) == "wooden bowl 02"
    assert tool.object_name(Path("USBCable.obj")) == "usb cable"
    assert tool.class_base("black ceramic mug") == "BP_BlackCeramicMug"
    items = tool.plan_imports([Path("a/Mug.fbx"), Path("b/mug.obj"), Path("c/Commonlink Floor.glb")])
    assert [i.name for i in items] == ["mug", "mug 2", "commonlink floor 2"]  # unique names, never the floor class
    assert [i.ue_class for i in items] == ["BP_Mug_C", "BP_Mug2_C", "BP_CommonlinkFloor2_C"]
    # A mesh whose origin is its centre: the component moves up by half the height and back to the centre.
    assert tool.bottom_centre_offset((-5.0, -3.0, -10.0), (7.0, 3.0, 10.0)) == (-1.0, -0.0, 10.0)
    assert tool.size_cm((-5.0, -3.0, -10.0), (7.0, 3.0, 10.0)) == (12.0, 6.0, 20.0)
    assert tool.holding_location(21, holding_z=-1e5) == (400.0, 400.0, -1e5)
    with pytest.raises(ValueError, match="empty bounding box"):
        tool.asset_entry(items[0], (0.0, 1.0, 1.0), tmp_path / "x.json", "/Game/C")
    with pytest.raises(SystemExit, match="not a folder"):
        tool.find_meshes(tmp_path / "nope")


class _Vector:
    def __init__(self, x=0.0, y=0.0, z=0.0):
        self.x, self.y, self.z = float(x), float(y), float(z)

    def __iter__(self):
        return iter((self.x, self.y, self.z))


class _Props:
    def __init__(self, **props):
        self.props = dict(props)

    def set_editor_property(self, name, value):
        self.props[name] = value

    def get_editor_property(self, name):
        return self.props.get(name)


def _stand_in_unreal(bounds_by_stem: dict[str, tuple]):
    """A recording stand-in for the parts of the `unreal` module the tool uses."""
    unreal = types.ModuleType("unreal")
    state = types.SimpleNamespace(assets={}, actors=[], saved_levels=0, logs=[], imports=[])

    class StaticMesh(_Props):
        def __init__(self, path, low, high):
            super().__init__()
            self.path, self._box = path, types.SimpleNamespace(min=_Vector(*low), max=_Vector(*high))

        def get_bounding_box(self):
            return self._box

    class Blueprint(_Props):
        def __init__(self, path):
            super().__init__()
            self.path, self.components, self.compiled = path, [], False

    class AssetImportTask(_Props):
        pass

    class FbxImportUI(_Props):
        def __init__(self):
            super().__init__(static_mesh_import_data=_Props())

    class AssetTools:
        def import_asset_tasks(self, tasks):
            for task in tasks:
                source = Path(task.get_editor_property("filename"))
                path = f"{task.get_editor_property('destination_path')}/{task.get_editor_property('destination_name')}"
                low, high = bounds_by_stem[source.stem]
                state.assets[path] = StaticMesh(path, low, high)
                state.imports.append((source.name, task.props))
                task.set_editor_property("imported_object_paths", [path])

        def create_asset(self, name, folder, cls, factory):
            assert cls is Blueprint and factory.get_editor_property("parent_class") is unreal.Actor
            state.assets[f"{folder}/{name}"] = Blueprint(f"{folder}/{name}")
            return state.assets[f"{folder}/{name}"]

    class Text(str):
        def is_empty(self):
            return not self

    class Subsystem:
        def k2_gather_subobject_data_for_blueprint(self, blueprint):
            return [("root", blueprint)]

        def add_new_subobject(self, params):
            component = _Props()
            params.blueprint_context.components.append((params.new_class, params.parent_handle[0], component))
            return ("component", component), Text("")

        def rename_subobject(self, handle, name):
            handle[1].set_editor_property("name", str(name))

    class ActorSubsystem:
        def spawn_actor_from_class(self, cls, location, rotation):
            actor = types.SimpleNamespace(cls=cls, location=tuple(location), hidden=False, label=None, folder=None)
            actor.set_actor_hidden_in_game = lambda hidden: setattr(actor, "hidden", hidden)
            actor.set_actor_label = lambda label: setattr(actor, "label", label)
            actor.set_folder_path = lambda folder: setattr(actor, "folder", folder)
            actor.get_actor_label = lambda: actor.label
            state.actors.append(actor)
            return actor

        def get_all_level_actors(self):
            return list(state.actors)

        def destroy_actor(self, actor):
            state.actors.remove(actor)
            return True

    class LevelEditorSubsystem:
        def save_current_level(self):
            state.saved_levels += 1

    class ScopedSlowTask:
        def __init__(self, work, text):
            self.done = 0

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def make_dialog(self, can_cancel):
            pass

        def should_cancel(self):
            return False

        def enter_progress_frame(self, work, text):
            self.done += work

    subsystems = {
        "SubobjectDataSubsystem": Subsystem(),
        "EditorActorSubsystem": ActorSubsystem(),
        "LevelEditorSubsystem": LevelEditorSubsystem(),
    }
    unreal.Vector, unreal.Rotator, unreal.Text = _Vector, (lambda p, y, r: (p, y, r)), Text
    unreal.StaticMesh, unreal.Blueprint, unreal.Actor, unreal.StaticMeshComponent = (
        StaticMesh,
        Blueprint,
        object(),
        object(),
    )
    unreal.AssetImportTask, unreal.FbxImportUI, unreal.BlueprintFactory = AssetImportTask, FbxImportUI, _Props
    unreal.SubobjectDataSubsystem, unreal.EditorActorSubsystem = "SubobjectDataSubsystem", "EditorActorSubsystem"
    unreal.LevelEditorSubsystem, unreal.ScopedSlowTask = "LevelEditorSubsystem", ScopedSlowTask
    unreal.AssetToolsHelpers = types.SimpleNamespace(get_asset_tools=AssetTools)
    unreal.AddNewSubobjectParams = lambda **kw: types.SimpleNamespace(**kw)
    unreal.SubobjectDataBlueprintFunctionLibrary = types.SimpleNamespace(
        get_data=lambda h: h, get_object=lambda d: d[1]
    )
    unreal.BlueprintEditorLibrary = types.SimpleNamespace(
        compile_blueprint=lambda bp: setattr(bp, "compiled", True), generated_class=lambda bp: f"{bp.path}_C"
    )
    unreal.EditorAssetLibrary = types.SimpleNamespace(
        load_asset=lambda path: state.assets.setdefault(path, StaticMesh(path, (-50, -50, 0), (50, 50, 0))),
        does_asset_exist=lambda path: path in state.assets,
        delete_asset=lambda path: state.assets.pop(path),
        save_loaded_asset=lambda asset: True,
    )
    unreal.get_engine_subsystem = unreal.get_editor_subsystem = lambda name: subsystems[name]
    unreal.log = state.logs.append
    return unreal, state


def test_run_in_a_stand_in_editor(tool, tmp_path, monkeypatch):
    source = tmp_path / "adt"
    (source / "kitchen").mkdir(parents=True)
    for name in ("BlackCeramicMug.glb", "kitchen/WoodenBowl.fbx", "Vase.obj", "notes.txt"):
        (source / name).write_bytes(b"x")
    # Import bounds as Unreal would report them: a mug centred on its origin, a bowl already bottom-pivoted.
    bounds = {
        "BlackCeramicMug": ((-4.0, -6.0, -5.0), (4.0, 6.0, 5.0)),
        "WoodenBowl": ((-10.0, -10.0, 0.0), (10.0, 10.0, 7.5)),
        "Vase": ((2.0, 2.0, 1.0), (12.0, 12.0, 31.0)),
    }
    unreal, state = _stand_in_unreal(bounds)
    monkeypatch.setitem(sys.modules, "unreal", unreal)
    out = tmp_path / "project" / "assets.json"
    data = tool.run(["--source", str(source), "--out", str(out), "--scale", "2.5"])

    written = json.loads(out.read_text())
    assert written == data
    by_name = {a["name"]: a for a in written["assets"]}
    assert set(by_name) == {"black ceramic mug", "wooden bowl", "vase"}
    assert by_name["black ceramic mug"]["size_cm"] == [8.0, 12.0, 10.0]
    assert by_name["vase"]["size_cm"] == [10.0, 10.0, 30.0]
    assert (
        by_name["wooden bowl"]["ue_class"] == "BP_WoodenBowl_C" and "mesh" not in by_name["wooden bowl"]
    )  # FBX: no offline mesh
    assert by_name["vase"]["mesh"] == "../adt/Vase.obj" and by_name["black ceramic mug"]["mesh_up"] == "y"
    # Each Blueprint's mesh component sits so that the actor pivot is the mesh's bottom centre.
    offsets = {
        path: comps[0][2].get_editor_property("relative_location")
        for path, bp in state.assets.items()
        if hasattr(bp, "components")
        for comps in [bp.components]
    }
    assert tuple(offsets["/Game/Commonlink/BP_BlackCeramicMug"]) == (0.0, 0.0, 5.0)
    assert tuple(offsets["/Game/Commonlink/BP_Vase"]) == (-7.0, -7.0, -1.0)
    assert tuple(offsets["/Game/Commonlink/BP_WoodenBowl"]) == (0.0, 0.0, 0.0)
    assert all(bp.compiled for bp in state.assets.values() if hasattr(bp, "compiled"))
    floor = state.assets["/Game/Commonlink/BP_CommonlinkFloor"]
    assert tuple(floor.components[0][2].get_editor_property("relative_scale3d")) == (16.0, 16.0, 1.0)
    # One hidden instance of every class in the holding area (so the classes load with the level), level saved.
    assert sorted(a.cls for a in state.actors) == sorted(
        f"/Game/Commonlink/{b}_C" for b in ("BP_BlackCeramicMug", "BP_WoodenBowl", "BP_Vase", "BP_CommonlinkFloor")
    )
    assert all(a.hidden and a.location[2] == -100000.0 and a.folder == "commonlink_holding" for a in state.actors)
    assert len({a.location for a in state.actors}) == 4 and state.saved_levels == 1
    fbx = dict(state.imports)["WoodenBowl.fbx"]
    assert (
        fbx["options"].get_editor_property("static_mesh_import_data").get_editor_property("import_uniform_scale") == 2.5
    )
    # The asset file is one commonlink reads: classes, measured sizes, a floor.
    catalog = load_assets(out)
    assert catalog.asset("vase").size_cm == (10.0, 10.0, 30.0) and catalog.floors[0].ue_class == "BP_CommonlinkFloor_C"
    assert "commonlink unreal check" in state.logs[-1]
    # Rerun: the Blueprints are replaced and the level still holds exactly one instance of each class.
    assert tool.run(["--source", str(source), "--out", str(out)]) == data
    assert len(state.actors) == 4 and state.saved_levels == 2
