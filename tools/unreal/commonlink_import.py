"""Import a folder of meshes into an Unreal Engine 5 project for ``commonlink synth --backend unrealcv``.

Run it inside the Unreal Editor (UE 5.2-5.5, Python Editor Script Plugin enabled), with the level you will Play
open, from the Output Log's ``Cmd`` box::

    py "C:/path/to/commonlink/tools/unreal/commonlink_import.py" --source "D:/adt_objects" --out "D:/my_assets.json"

For every ``.fbx``, ``.glb``, ``.gltf`` or ``.obj`` file under ``--source`` (for example the object meshes of Aria
Digital Twin, as the Common-O paper used) it

1. imports the mesh as a static mesh under ``--dest`` (default ``/Game/Commonlink``),
2. makes a Blueprint actor class ``BP_<Name>`` whose mesh component is offset so the actor's pivot is the bottom
   centre of the mesh (the convention of the scene planner and the asset file),
3. places one hidden-in-game instance of each class in a holding area far below the level (``--holding-z``) and
   saves the level, so every class is loaded whenever the level is: the UnrealCV plugin spawns only classes
   already in memory,
4. writes the commonlink asset file (``--out``) with each class's measured size in centimetres (and, for
   .glb/.gltf/.obj sources, the mesh path, so the offline renderer can draw the same objects).

It also makes one floor class (``BP_CommonlinkFloor``: the engine's 1 m plane scaled to 16 m, top at its pivot).
Then: press Play, and run ``commonlink unreal check --assets my_assets.json`` outside Unreal.

This file must run in Unreal's own Python, so it imports nothing from commonlink. Its Unreal-independent parts
(names, pivots, sizes, the asset file) are plain functions; the ``unreal`` module is imported only by the functions
that drive the editor (it exists only inside Unreal).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

MESH_EXTENSIONS = (".fbx", ".glb", ".gltf", ".obj")
#: Sources the offline renderer can also read (it has no FBX loader).
OFFLINE_MESH_EXTENSIONS = (".glb", ".gltf", ".obj")
ASSET_FORMAT = "commonlink-assets/1"
FLOOR_CLASS = "BP_CommonlinkFloor"
FLOOR_MESH = "/Engine/BasicShapes/Plane.Plane"  # 100 x 100 cm, pivot in its centre, top at the pivot
FLOOR_SIZE_CM = 1600.0


@dataclass(frozen=True)
class ImportItem:
    source: Path
    name: str  #: object name written to the catalog ("black ceramic mug")
    base: str  #: Blueprint asset name ("BP_BlackCeramicMug"); its class is base + "_C"

    @property
    def ue_class(self) -> str:
        return f"{self.base}_C"

    @property
    def mesh_asset(self) -> str:
        return "SM_" + self.base[3:]


def find_meshes(folder: str | os.PathLike) -> list[Path]:
    root = Path(folder)
    if not root.is_dir():
        raise SystemExit(f"--source {root}: not a folder. Give the folder that holds your .fbx/.glb/.gltf/.obj files.")
    return sorted(p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in MESH_EXTENSIONS)


def object_name(path: Path) -> str:
    """``BlackCeramicMug.glb`` / ``black_ceramic-mug.fbx`` -> ``black ceramic mug``."""
    stem = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", path.stem)
    stem = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1 \2", stem)
    words = re.split(r"[^A-Za-z0-9]+", stem)
    return " ".join(w.lower() for w in words if w)


def class_base(name: str) -> str:
    """``black ceramic mug`` -> ``BP_BlackCeramicMug`` (letters and digits only: Unreal asset names)."""
    camel = "".join(w[:1].upper() + w[1:] for w in name.split())
    camel = re.sub(r"[^A-Za-z0-9]", "", camel) or "Object"
    return f"BP_{camel}"


def plan_imports(paths: list[Path]) -> list[ImportItem]:
    """One item per mesh file; names made unique (``mug``, ``mug 2``) so every class and catalog name differs."""
    items, used_names, used_bases = [], set(), set()
    for path in paths:
        name = object_name(path) or "object"
        candidate, n = name, 1
        while (
            candidate in used_names
            or class_base(candidate).lower() in used_bases
            or class_base(candidate) == FLOOR_CLASS
        ):
            n += 1
            candidate = f"{name} {n}"
        used_names.add(candidate)
        used_bases.add(class_base(candidate).lower())
        items.append(ImportItem(source=path, name=candidate, base=class_base(candidate)))
    return items


def bottom_centre_offset(low, high) -> tuple[float, float, float]:
    """Where the mesh component goes, relative to the actor's root, so the root (the pivot) is the bottom centre."""
    return (-(low[0] + high[0]) / 2.0, -(low[1] + high[1]) / 2.0, -float(low[2]))


def size_cm(low, high) -> tuple[float, float, float]:
    return tuple(round(float(h) - float(lo), 2) for lo, h in zip(low, high))  # type: ignore[return-value]


def holding_location(
    index: int, *, holding_z: float, spacing: float = 400.0, columns: int = 20
) -> tuple[float, float, float]:
    """A grid of spots far below the level: the hidden instances that keep every class loaded."""
    row, col = divmod(index, columns)
    return (col * spacing, row * spacing, holding_z)


def asset_entry(item: ImportItem, size: tuple[float, float, float], out_file: Path, dest: str) -> dict:
    if min(size) <= 0:
        raise ValueError(f"{item.source}: the imported mesh has an empty bounding box {size}; check the file.")
    entry = {
        "name": item.name,
        "ue_class": item.ue_class,
        "size_cm": list(size),
        "ue_asset": f"{dest}/{item.base}",
        "source": str(item.source),
    }
    if item.source.suffix.lower() in OFFLINE_MESH_EXTENSIONS:
        entry["mesh"] = os.path.relpath(item.source, out_file.parent).replace(os.sep, "/")
        if item.source.suffix.lower() in (".glb", ".gltf"):
            entry["mesh_up"] = "y"  # glTF is y-up; Unreal's importer turns it z-up
    return entry


def asset_file(entries: list[dict], dest: str) -> dict:
    return {
        "format": ASSET_FORMAT,
        "assets": entries,
        "floors": [
            {
                "name": "default floor",
                "ue_class": f"{FLOOR_CLASS}_C",
                "ue_asset": f"{dest}/{FLOOR_CLASS}",
                "texture": "procedural:wood_planks",
            }
        ],
    }


def write_json_atomic(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=2)
            handle.write("\n")
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="commonlink_import.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", required=True, help="folder of .fbx/.glb/.gltf/.obj meshes (searched recursively)")
    parser.add_argument("--out", required=True, help="asset file to write (JSON)")
    parser.add_argument("--dest", default="/Game/Commonlink", help="content folder for the imported assets")
    parser.add_argument("--holding-z", type=float, default=-100000.0, help="height of the hidden holding area (cm)")
    parser.add_argument("--scale", type=float, default=1.0, help="uniform import scale (e.g. 100 for meshes in metres)")
    return parser.parse_args(argv)


# --- the editor side (needs the `unreal` module, present only inside Unreal Editor) --------------------------


def _unreal():
    import unreal  # only inside Unreal Editor's Python

    return unreal


def import_mesh(item: ImportItem, dest: str, scale: float):
    unreal = _unreal()
    task = unreal.AssetImportTask()
    task.set_editor_property("filename", str(item.source))
    task.set_editor_property("destination_path", f"{dest}/Meshes")
    task.set_editor_property("destination_name", item.mesh_asset)
    task.set_editor_property("automated", True)
    task.set_editor_property("replace_existing", True)
    task.set_editor_property("save", True)
    if item.source.suffix.lower() == ".fbx":
        options = unreal.FbxImportUI()
        options.set_editor_property("import_mesh", True)
        options.set_editor_property("import_as_skeletal", False)
        options.set_editor_property("import_animations", False)
        data = options.get_editor_property("static_mesh_import_data")
        data.set_editor_property("combine_meshes", True)
        data.set_editor_property("import_uniform_scale", scale)
        task.set_editor_property("options", options)
    unreal.AssetToolsHelpers.get_asset_tools().import_asset_tasks([task])
    for path in task.get_editor_property("imported_object_paths") or []:
        asset = unreal.EditorAssetLibrary.load_asset(path)
        if isinstance(asset, unreal.StaticMesh):
            return asset
    raise RuntimeError(f"{item.source}: Unreal imported no static mesh (see the Output Log).")


def make_blueprint(item_base: str, dest: str, mesh, offset, scale3d=(1.0, 1.0, 1.0)):
    """A Blueprint actor: DefaultSceneRoot (the pivot) with the mesh component at ``offset`` from it."""
    unreal = _unreal()
    path = f"{dest}/{item_base}"
    if unreal.EditorAssetLibrary.does_asset_exist(path):
        unreal.EditorAssetLibrary.delete_asset(path)
    factory = unreal.BlueprintFactory()
    factory.set_editor_property("parent_class", unreal.Actor)
    blueprint = unreal.AssetToolsHelpers.get_asset_tools().create_asset(item_base, dest, unreal.Blueprint, factory)
    subsystem = unreal.get_engine_subsystem(unreal.SubobjectDataSubsystem)
    root = subsystem.k2_gather_subobject_data_for_blueprint(blueprint)[0]
    params = unreal.AddNewSubobjectParams(
        parent_handle=root, new_class=unreal.StaticMeshComponent, blueprint_context=blueprint
    )
    handle, failure = subsystem.add_new_subobject(params)
    if not failure.is_empty():
        raise RuntimeError(f"{path}: could not add the mesh component ({failure}).")
    subsystem.rename_subobject(handle, unreal.Text("Mesh"))
    data = unreal.SubobjectDataBlueprintFunctionLibrary.get_data(handle)
    component = unreal.SubobjectDataBlueprintFunctionLibrary.get_object(data)
    component.set_editor_property("static_mesh", mesh)
    component.set_editor_property("relative_location", unreal.Vector(*offset))
    component.set_editor_property("relative_scale3d", unreal.Vector(*scale3d))
    unreal.BlueprintEditorLibrary.compile_blueprint(blueprint)
    unreal.EditorAssetLibrary.save_loaded_asset(blueprint)
    return blueprint


def remove_holding_actors(labels: set[str]) -> int:
    """Remove the holding instances an earlier run placed (before their Blueprints are replaced)."""
    unreal = _unreal()
    actors = unreal.get_editor_subsystem(unreal.EditorActorSubsystem)
    removed = 0
    for actor in list(actors.get_all_level_actors()):
        if actor.get_actor_label() in labels:
            actors.destroy_actor(actor)
            removed += 1
    return removed


def place_hidden(blueprint, label: str, location) -> object:
    unreal = _unreal()
    actors = unreal.get_editor_subsystem(unreal.EditorActorSubsystem)
    cls = unreal.BlueprintEditorLibrary.generated_class(blueprint)
    actor = actors.spawn_actor_from_class(cls, unreal.Vector(*location), unreal.Rotator(0.0, 0.0, 0.0))
    actor.set_actor_hidden_in_game(True)
    actor.set_actor_label(label)
    actor.set_folder_path("commonlink_holding")
    return actor


def run(argv: list[str]) -> dict:
    args = parse_args(argv)
    unreal = _unreal()
    out = Path(args.out)
    items = plan_imports(find_meshes(args.source))
    if not items:
        raise SystemExit(f"--source {args.source}: no .fbx/.glb/.gltf/.obj files found.")
    entries = []
    # A rerun replaces the Blueprints: first remove the holding instances that reference the old ones.
    remove_holding_actors({f"commonlink_hold_{i.base}" for i in items} | {f"commonlink_hold_{FLOOR_CLASS}"})
    with unreal.ScopedSlowTask(len(items) + 1, "commonlink: importing meshes") as task:
        task.make_dialog(True)
        for index, item in enumerate(items):
            if task.should_cancel():
                raise SystemExit("Cancelled; nothing written (rerun to start again, existing assets are replaced).")
            task.enter_progress_frame(1, f"{item.source.name} -> {item.base}")
            mesh = import_mesh(item, args.dest, args.scale)
            box = mesh.get_bounding_box()
            low, high = (box.min.x, box.min.y, box.min.z), (box.max.x, box.max.y, box.max.z)
            blueprint = make_blueprint(item.base, args.dest, mesh, bottom_centre_offset(low, high))
            place_hidden(blueprint, f"commonlink_hold_{item.base}", holding_location(index, holding_z=args.holding_z))
            entries.append(asset_entry(item, size_cm(low, high), out, args.dest))
        task.enter_progress_frame(1, "floor and level")
        plane = unreal.EditorAssetLibrary.load_asset(FLOOR_MESH)
        scale = FLOOR_SIZE_CM / 100.0
        floor = make_blueprint(FLOOR_CLASS, args.dest, plane, (0.0, 0.0, 0.0), (scale, scale, 1.0))
        place_hidden(floor, f"commonlink_hold_{FLOOR_CLASS}", holding_location(len(items), holding_z=args.holding_z))
        unreal.get_editor_subsystem(unreal.LevelEditorSubsystem).save_current_level()
    data = asset_file(entries, args.dest)
    write_json_atomic(out, data)
    unreal.log(
        f"commonlink: {len(entries)} classes imported; asset file written to {out}. Press Play, then run "
        f"`commonlink unreal check --assets {out}`."
    )
    return data


if __name__ == "__main__":
    run(sys.argv[1:])
