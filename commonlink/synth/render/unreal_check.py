"""Preflight of an Unreal project for ``--backend unrealcv``: does the running game have every class of the asset
file, and do they measure as the asset file says?

The UnrealCV plugin spawns only classes already loaded in memory (``FindFirstObjectSafe<UClass>`` in
``Commands/ObjectHandler.cpp`` of the plugin's 5.2 branch): a class that exists on disk but is not loaded answers
``Can not find a class with name ...`` just like a class that does not exist. The check spawns every class of the
asset file once (at the origin, unrotated, scale 1), reads ``vget /object/X/bounds``, shows each object class
alone to a camera of its own far above the level to see that, once coloured, it is drawn in object masks
(``Sensor/CameraSensor/AnnotationCamSensor.cpp`` draws annotated mesh components only), destroys everything, and
reports every missing class at once plus every size or pivot that disagrees with the asset file (the scene planner
sizes and places objects from ``size_cm`` and assumes the pivot is the bottom centre) and every class that never
shows in masks.
"""

from __future__ import annotations

import secrets
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from commonlink.errors import BackendError, InputError
from commonlink.progress import track
from commonlink.synth.assets import DEFAULT_ASSETS_FILE, AssetCatalog
from commonlink.synth.render.unrealcv_transport import (
    NAME_PREFIX,
    UnrealCVConnection,
    choose_palette,
    decode_png,
    fmt_floats,
    is_error,
    parse_color,
)

#: Allowed disagreement: this share of the expected extent, and never less than MIN_SLACK_CM.
SIZE_TOLERANCE = 0.10
PIVOT_TOLERANCE = 0.05
MIN_SLACK_CM = 1.0
#: Where each class is shown alone to a camera to see that it is drawn in object masks: 500 m above the origin.
PROBE_SPOT = (0.0, 0.0, 50000.0)
PROBE_FOV = 60.0
PROBE_PITCH = 35.0  #: degrees below the horizon the probe camera looks


@dataclass
class ClassCheck:
    """One class of the asset file as the running project has it."""

    name: str  #: the asset's (or floor's) name in the asset file
    ue_class: str
    kind: str  #: "object" or "floor"
    status: str = "ok"  #: ok, missing, mismatch
    reply: str | None = None  #: the plugin's error reply when the class could not be spawned
    measured_size_cm: tuple[float, float, float] | None = None
    expected_size_cm: tuple[float, float, float] | None = None
    pivot_offset_cm: tuple[float, float, float] | None = None  #: bottom centre of the bounds, seen from the pivot
    problems: list[str] = field(default_factory=list)


@dataclass
class ProjectCheck:
    host: str
    port: int
    plugin_version: str
    scene: str
    cameras: int
    level_actors: int
    classes: list[ClassCheck]

    @property
    def missing(self) -> list[ClassCheck]:
        return [c for c in self.classes if c.status == "missing"]

    @property
    def mismatched(self) -> list[ClassCheck]:
        return [c for c in self.classes if c.status == "mismatch"]

    @property
    def ok(self) -> bool:
        return not self.missing and not self.mismatched

    def describe(self) -> str:
        lines = []
        if self.missing:
            lines.append(f"{len(self.missing)} of {len(self.classes)} classes could not be spawned:")
            lines += [f"  - {c.ue_class} ({c.kind} {c.name!r}): {c.reply}" for c in self.missing]
        if self.mismatched:
            lines.append(f"{len(self.mismatched)} classes do not match the asset file:")
            lines += [f"  - {c.ue_class} ({c.kind} {c.name!r}): {'; '.join(c.problems)}" for c in self.mismatched]
        return "\n".join(lines) if lines else f"All {len(self.classes)} classes spawn and match the asset file."

    def fix(self, asset_file: str) -> str | None:
        """What to do about the problems found (None when there are none), naming only the kinds found."""
        steps = []
        if self.missing:
            steps.append(
                "import the missing meshes (tools/unreal/commonlink_import.py) and keep one actor of each class in "
                "the level (hidden in game) so the class is loaded when Play starts"
            )
        if self.mismatched:
            steps.append(
                "fix what each mismatched line names: size_cm in the asset file (to the measured size), the "
                "Blueprint's pivot (bottom centre; a floor's top at its pivot) or a StaticMeshComponent visible in "
                "game (the import tool sets all three)"
            )
        if not steps:
            return None
        text = "; ".join(steps)
        return text[0].upper() + text[1:] + f"; then rerun `commonlink unreal check --assets {asset_file}`."

    def to_json(self) -> dict:
        return {**asdict(self), "ok": self.ok}


def is_builtin_asset_file(catalog: AssetCatalog) -> bool:
    return Path(catalog.path).resolve() == DEFAULT_ASSETS_FILE.resolve()


def refuse_placeholder_classes(catalog: AssetCatalog) -> None:
    """The built-in asset file's ``ue_class`` names (BP_Apple_C, ...) are placeholders no Unreal project has."""
    if is_builtin_asset_file(catalog):
        raise InputError(
            f"The built-in asset file's ue_class names ({catalog.assets[0].ue_class}, ...) are placeholders for the "
            "offline renderer, which no Unreal project has: `synth --backend unrealcv` and `unreal check` need an "
            "asset file naming your project's classes.",
            "Import your meshes with tools/unreal/commonlink_import.py in the Unreal Editor (docs/unreal.md), which "
            "writes the asset file, then pass it with --assets FILE.",
        )


def _bounds(reply: str) -> tuple[list[float], list[float]]:
    try:
        values = [float(v) for v in str(reply).split()]
    except ValueError:
        values = []
    if len(values) != 6:
        raise BackendError(
            f"Unexpected reply to a bounds query: {reply!r}.", "Use the UnrealCV plugin's 5.2 branch (1.0.x)."
        )
    return values[:3], values[3:]


def _compare(
    entry: ClassCheck, low: list[float], high: list[float], size_tolerance: float, pivot_tolerance: float
) -> None:
    size = tuple(round(h - lo, 2) for lo, h in zip(low, high))
    offset = (round((low[0] + high[0]) / 2, 2), round((low[1] + high[1]) / 2, 2), round(low[2], 2))
    entry.measured_size_cm, entry.pivot_offset_cm = size, offset  # type: ignore[assignment]
    if max(size) <= 0:
        entry.problems.append("its bounds are empty: no mesh the plugin could draw or colour")
    elif entry.kind == "object":
        expected = entry.expected_size_cm or (0.0, 0.0, 0.0)
        if any(abs(m - e) > max(MIN_SLACK_CM, size_tolerance * e) for m, e in zip(size, expected)):
            entry.problems.append(f"measures {_triple(size)} cm, the asset file says {_triple(expected)} cm")
        slack_xy = max(MIN_SLACK_CM, pivot_tolerance * max(size[0], size[1]))
        slack_z = max(MIN_SLACK_CM, pivot_tolerance * size[2])
        if abs(offset[0]) > slack_xy or abs(offset[1]) > slack_xy or abs(offset[2]) > slack_z:
            entry.problems.append(
                f"pivot is not the bottom centre: the bounds' bottom centre is at {_triple(offset)} cm from it"
            )
    elif abs(high[2]) > MIN_SLACK_CM:
        entry.problems.append(
            f"the floor's top is at z = {high[2]:.2f} cm, not at its pivot (objects would float or sink)"
        )
    if entry.problems:
        entry.status = "mismatch"


def _triple(values) -> str:
    return "(" + ", ".join(f"{v:.1f}" for v in values) + ")"


def _probe_camera_location(distance: float, height: float) -> tuple[float, float, float]:
    """``distance`` from the middle of an object of ``height`` standing on PROBE_SPOT, looking down at PROBE_PITCH."""
    pitch = np.radians(PROBE_PITCH)
    return (
        PROBE_SPOT[0] - distance * np.cos(pitch),
        PROBE_SPOT[1],
        PROBE_SPOT[2] + height / 2 + distance * np.sin(pitch),
    )


def _probe_masks(
    conn: UnrealCVConnection,
    probes: list[tuple[ClassCheck, str]],
    level_colors,
    token: str,
    owned: list[str],
    progress: bool,
) -> None:
    """Colour each class's actor, put it alone in front of a camera far above the level, and check that it shows
    in the object mask: a mesh hidden in game, or components the plugin does not annotate, would leave the class
    out of every mask (and its objects unlabelled) however many views a scene has."""
    color = choose_palette(1, level_colors, 24)[0]
    camera_actor, camera = conn.spawn_camera(f"{NAME_PREFIX}check_{token}_camera", on_spawned=owned.append)
    size = 64  # enough to see whether the class is drawn at all
    # Looking down at PROBE_PITCH degrees: a flat class (a cutting board, a tray) shows its top, not a sliver.
    conn.batch(
        [
            f"vset /camera/{camera}/size {size} {size}",
            f"vset /camera/{camera}/fov {PROBE_FOV:.1f}",
            f"vset /object/{camera_actor}/rotation {-PROBE_PITCH:.1f} 0.0 0.0",
        ]
    )
    for entry, name in track(probes, "Checking object masks", unit="classes", disable=not progress):
        sx, sy, sz = entry.measured_size_cm  # type: ignore[misc]
        distance = sx / 2 + 1.6 * max(sx, sy, sz) + 5.0  # the whole object fits a 60 degree view
        ox, oy, oz = entry.pivot_offset_cm  # type: ignore[misc]
        target = (PROBE_SPOT[0] - ox, PROBE_SPOT[1] - oy, PROBE_SPOT[2] - oz)  # bounds' bottom centre on the spot
        replies = conn.batch(
            [
                f"vset /object/{name}/location {fmt_floats(target)}",
                f"vset /object/{name}/color {color[0]} {color[1]} {color[2]}",
                f"vget /object/{name}/color",
                f"vset /object/{camera_actor}/location {fmt_floats(_probe_camera_location(distance, sz))}",
                f"vget /camera/{camera}/object_mask png",
                f"vset /object/{name}/destroy",  # done with it (the final clean-up skips names already gone)
            ]
        )
        if parse_color(str(replies[2])) != color:
            entry.problems.append(
                f"it does not take an object mask colour (reads {replies[2]!r}): it has no mesh component"
            )
        else:
            mask = decode_png(replies[4], "object_mask").astype(np.int16)
            if not np.any(np.abs(mask - np.array(color)).max(axis=2) <= 3):
                entry.problems.append("it is not drawn in object masks (mesh hidden in game?)")
        if entry.problems:
            entry.status = "mismatch"


def check_project(
    host: str,
    port: int,
    catalog: AssetCatalog,
    *,
    size_tolerance: float = SIZE_TOLERANCE,
    pivot_tolerance: float = PIVOT_TOLERANCE,
    timeout: float = 60.0,
    connect_timeout: float = 10.0,
    progress: bool = False,
    connection: UnrealCVConnection | None = None,
) -> ProjectCheck:
    """Connect to the running game, spawn and measure every class of the asset file, destroy them again.

    With ``connection`` (opened here when it is not) the session is left open for the caller (``synth`` renders
    on it): a Linux game serves one TCP session per run, so a command keeps one session."""
    entries = [
        ClassCheck(name=a.name, ue_class=a.ue_class, kind="object", expected_size_cm=tuple(a.size_cm))  # type: ignore[arg-type]
        for a in catalog.assets
    ] + [ClassCheck(name=f.name, ue_class=f.ue_class, kind="floor") for f in catalog.floors]
    conn = connection or UnrealCVConnection(host, port, timeout, connect_timeout)
    if not conn.connected:
        conn.open()
    try:
        version = str(conn.request("vget /unrealcv/version"))
        scene = str(conn.batch(["vget /scene/name"], check=False)[0])
        cameras = conn.require_playing()
        level = str(conn.request("vget /objects")).split()
        token = secrets.token_hex(3)
        wanted = [f"{NAME_PREFIX}check_{token}_{i}" for i in range(len(entries))]
        replies = conn.batch([f"vset /objects/spawn {e.ue_class} {w}" for e, w in zip(entries, wanted)], check=False)
        spawned: list[tuple[ClassCheck, str]] = []
        for entry, reply in zip(entries, replies):
            if is_error(reply):
                entry.status, entry.reply = "missing", str(reply)
            else:
                spawned.append((entry, str(reply).strip()))  # the name the plugin kept, renamed or not
        spawned_names = [name for _, name in spawned]  # the probe camera joins this list: destroyed at the end
        try:
            commands = []
            for _, name in spawned:
                commands += [
                    f"vset /object/{name}/location 0.0 0.0 0.0",
                    f"vset /object/{name}/rotation 0.0 0.0 0.0",
                    f"vset /object/{name}/scale 1.0 1.0 1.0",
                    f"vget /object/{name}/bounds",
                ]
            measured = conn.batch(commands)[3::4]
            for (entry, _), reply in zip(spawned, measured):
                _compare(entry, *_bounds(str(reply)), size_tolerance, pivot_tolerance)
            drawable = [
                (e, n) for e, n in spawned if e.kind == "object" and e.measured_size_cm and min(e.measured_size_cm) > 0
            ]
            if drawable:
                level_colors = list(conn.annotation_colors(level).values())
                _probe_masks(conn, drawable, level_colors, token, owned=spawned_names, progress=progress)
        finally:
            if conn.connected:
                conn.batch([f"vset /object/{name}/destroy" for name in spawned_names], check=False)
    finally:
        if connection is None:
            conn.close()
    return ProjectCheck(
        host=host,
        port=int(port),
        plugin_version=version,
        scene=scene,
        cameras=len(cameras),
        level_actors=len(level),
        classes=entries,
    )


def require_project_ready(
    host: str,
    port: int,
    catalog: AssetCatalog,
    *,
    timeout: float = 60.0,
    connect_timeout: float = 10.0,
    progress: bool = False,
    connection: UnrealCVConnection | None = None,
) -> ProjectCheck:
    """What ``synth --backend unrealcv`` runs first: refuse placeholder classes, then every missing or mismatched
    class at once, as one error."""
    refuse_placeholder_classes(catalog)
    report = check_project(
        host, port, catalog, timeout=timeout, connect_timeout=connect_timeout, progress=progress, connection=connection
    )
    if not report.ok:
        raise InputError(
            f"The Unreal project at {host}:{port} does not match the asset file {catalog.path}:\n{report.describe()}",
            report.fix(catalog.path),
        )
    return report
