"""The asset file: which objects and floors a scene can use, for both render backends.

One JSON (or YAML) file names every object once and says how each backend gets it:

```json
{"format": "commonlink-assets/1",
 "assets": [{"name": "apple", "ue_class": "BP_Apple_C", "size_cm": [9.2, 9.2, 9.5],
             "mesh": "procedural:apple"}],
 "floors": [{"name": "wood planks", "ue_class": "BP_Floor_WoodPlanks_C", "texture": "procedural:wood_planks"}]}
```

``name`` is the object name written to the catalog; ``ue_class`` is the Unreal class the UnrealCV backend
spawns (``vset /objects/spawn <ue_class>``; its pivot must be the bottom centre, like the offline meshes);
``size_cm`` is the object's bounding box (x, y, z) at scale 1 in centimetres, used by the scene planner to
size-normalise every object; ``mesh`` is the offline renderer's source: ``procedural:<model>`` (see
``commonlink.synth.models``), ``pybullet_data:<file>`` (a mesh shipped in the ``pybullet`` wheel) or a path
to an .obj/.glb/.ply file relative to the asset file. Optional: ``mesh_up`` (``z`` default, or ``y`` for
y-up meshes), ``color`` ([r, g, b] for untextured meshes), ``source`` and ``license`` (where the shape comes
from and the licence its renders are under; every built-in asset records both). Floors: ``texture`` is
``procedural:<name>`` (see ``commonlink.synth.floors``) or an image path relative to the asset file.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import yaml

from commonlink.errors import InputError, SchemaError
from commonlink.fileio import read_user_text, sha256_file

ASSET_FORMAT = "commonlink-assets/1"
DEFAULT_ASSETS_FILE = Path(__file__).with_name("data") / "assets.json"


@dataclass(frozen=True)
class Asset:
    """One object type a scene can contain."""

    name: str
    ue_class: str
    size_cm: tuple[float, float, float]
    mesh: str | None = None
    mesh_up: str = "z"
    color: tuple[int, int, int] | None = None
    source: str | None = None  #: where the shape comes from (procedural model, package file, your own mesh)
    license: str | None = None  #: the licence its renders are under


@dataclass(frozen=True)
class FloorMaterial:
    """One floor the scene can stand on."""

    name: str
    ue_class: str
    texture: str | None = None


@dataclass(frozen=True)
class AssetCatalog:
    """The parsed asset file."""

    path: str
    sha256: str
    assets: tuple[Asset, ...]
    floors: tuple[FloorMaterial, ...]

    @property
    def base_dir(self) -> Path:
        return Path(self.path).parent

    def asset(self, name: str) -> Asset:
        return self._named(self.assets, name, "object")

    def floor(self, name: str) -> FloorMaterial:
        return self._named(self.floors, name, "floor")

    def _named(self, entries, name: str, what: str):
        for entry in entries:
            if entry.name == name:
                return entry
        raise InputError(
            f"The asset file {self.path} has no {what} named {name!r}.", "Check the plan or the asset file."
        )

    def by_ue_class(self) -> dict[str, Asset | FloorMaterial]:
        table: dict[str, Asset | FloorMaterial] = {a.ue_class: a for a in self.assets}
        table.update({f.ue_class: f for f in self.floors})
        return table


def _fail(path: str, where: str, problem: str) -> SchemaError:
    return SchemaError(
        f"Asset file {path}, {where}: {problem}.",
        "Fix that entry; the format is described in docs/synth.md ('Asset file').",
    )


def _parse_asset(path: str, i: int, raw: object, seen: set[str]) -> Asset:
    where = f"assets[{i}]"
    if not isinstance(raw, dict):
        raise _fail(path, where, "expected an object")
    for key in ("name", "ue_class", "size_cm"):
        if key not in raw:
            raise _fail(path, where, f"missing field '{key}'")
    name = raw["name"]
    if not isinstance(name, str) or not name.strip():
        raise _fail(path, where, "'name' must be a non-empty string")
    if name in seen:
        raise _fail(path, where, f"duplicate object name {name!r}")
    seen.add(name)
    size = raw["size_cm"]
    if not (isinstance(size, list) and len(size) == 3 and all(isinstance(v, (int, float)) and v > 0 for v in size)):
        raise _fail(path, f"{where} ({name})", "'size_cm' must be three positive numbers [x, y, z]")
    up = raw.get("mesh_up", "z")
    if up not in ("y", "z"):
        raise _fail(path, f"{where} ({name})", "'mesh_up' must be 'y' or 'z'")
    color = raw.get("color")
    if color is not None and not (isinstance(color, list) and len(color) == 3):
        raise _fail(path, f"{where} ({name})", "'color' must be [r, g, b]")
    return Asset(
        name=name.strip(),
        ue_class=str(raw["ue_class"]),
        size_cm=tuple(float(v) for v in size),  # type: ignore[arg-type]
        mesh=raw.get("mesh"),
        mesh_up=up,
        color=tuple(int(c) for c in color) if color else None,  # type: ignore[arg-type]
        source=_optional_text(path, f"{where} ({name})", raw, "source"),
        license=_optional_text(path, f"{where} ({name})", raw, "license"),
    )


def _optional_text(path: str, where: str, raw: dict, key: str) -> str | None:
    value = raw.get(key)
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise _fail(path, where, f"'{key}' must be a non-empty string when given")
    return value.strip() if value else None


def _parse_floor(path: str, i: int, raw: object, seen: set[str]) -> FloorMaterial:
    where = f"floors[{i}]"
    if not isinstance(raw, dict):
        raise _fail(path, where, "expected an object")
    for key in ("name", "ue_class"):
        if key not in raw:
            raise _fail(path, where, f"missing field '{key}'")
    if raw["name"] in seen:
        raise _fail(path, where, f"duplicate floor name {raw['name']!r}")
    seen.add(raw["name"])
    return FloorMaterial(name=str(raw["name"]), ue_class=str(raw["ue_class"]), texture=raw.get("texture"))


def load_assets(path: str | os.PathLike | None = None) -> AssetCatalog:
    """Read and check an asset file (JSON or YAML); ``None`` loads the catalog shipped with commonlink."""
    resolved = Path(path) if path is not None else DEFAULT_ASSETS_FILE
    return _load_assets_cached(str(resolved.resolve()), resolved.stat().st_mtime_ns if resolved.is_file() else 0)


@lru_cache(maxsize=8)
def _load_assets_cached(path: str, _mtime: int) -> AssetCatalog:
    file = Path(path)
    text = read_user_text(
        file, "Asset file", "Pass --assets FILE with an existing file, or omit it to use the built-in assets."
    )
    try:
        if file.suffix.lower() in (".yaml", ".yml"):
            data = yaml.safe_load(text)
        else:
            data = json.loads(text)
    except Exception as exc:  # noqa: BLE001 - any parse error is the user's file
        raise SchemaError(f"Asset file {path} could not be parsed: {exc}", "Check its JSON/YAML syntax.") from exc
    if not isinstance(data, dict) or not isinstance(data.get("assets"), list):
        raise _fail(path, "top level", "expected an object with an 'assets' list")
    if data.get("format", ASSET_FORMAT) != ASSET_FORMAT:
        raise _fail(path, "format", f"unsupported format {data.get('format')!r} (expected {ASSET_FORMAT!r})")
    names: set[str] = set()
    assets = tuple(_parse_asset(path, i, raw, names) for i, raw in enumerate(data["assets"]))
    floor_names: set[str] = set()
    floors = tuple(_parse_floor(path, i, raw, floor_names) for i, raw in enumerate(data.get("floors") or []))
    if not assets:
        raise _fail(path, "assets", "the list is empty")
    if not floors:
        raise _fail(path, "floors", "at least one floor is needed")
    return AssetCatalog(path=path, sha256=sha256_file(file), assets=assets, floors=floors)
