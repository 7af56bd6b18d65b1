"""Scene plans: pure, seeded data that says what a scene contains and where its cameras are (no renderer).

Following Common-O §3.1/§8: N distinct assets, each in one of 16 floor positions (a 4x4 grid, one object per
cell, the cells drawn inside a block just big enough for N so that few objects stay close together), a random
yaw and a slight random tilt, a scale that fits the asset's largest extent inside its cell while keeping its
aspect ratio (so objects never interpenetrate), lighting, and several cameras around the scene at varied
azimuth and elevation, each placed as close as its field of view allows with every object in frame, so that
objects are large in the images (the paper reports 2-22% of the image per object).

Coordinates are Unreal Engine's (left-handed: x forward, y right, z up; centimetres; rotations are
(pitch, yaw, roll) in degrees) so the UnrealCV backend sends them as they are. Each scene's generator is
``rng_for(seed, "scene", index, attempt)``: any scene (and any re-sampling attempt) can be redone alone.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np

from commonlink.errors import InputError, SchemaError
from commonlink.seeding import rng_for
from commonlink.synth.assets import AssetCatalog

PLAN_FORMAT = "commonlink-scene-plan/1"
#: Limits, in cells, that keep objects apart: footprint diagonal at scale, footprint circle radius (tilt
#: included), and how far from the cell centre that circle may reach after jitter.
FOOTPRINT_DIAGONAL = 0.94
MAX_RADIUS = 0.47
JITTER_LIMIT = 0.48

#: Bump when the layout or framing rules change: a catalog's scenes must all come from one set of rules,
#: so `commonlink synth` refuses to resume a catalog made with another plan version.
PLAN_VERSION = 2


@dataclass
class ObjectPlacement:
    name: str  #: the object name written to the catalog
    asset: str  #: the asset's name in the asset file (same as ``name`` for the built-in assets)
    ue_class: str
    cell: tuple[int, int]  #: (row, column) in the floor grid
    location: tuple[float, float, float]  #: pivot (bottom centre) in cm
    rotation: tuple[float, float, float]  #: (pitch, yaw, roll) in degrees
    scale: float  #: uniform scale applied to the asset's native size
    size_cm: tuple[float, float, float]  #: the asset's native bounding box


@dataclass
class CameraPose:
    location: tuple[float, float, float]
    rotation: tuple[float, float, float]  #: (pitch, yaw, roll); the camera looks along its local x
    fov: float  #: horizontal field of view, degrees (Unreal's convention)
    azimuth: float = 0.0
    elevation: float = 0.0
    distance: float = 0.0


@dataclass
class Lighting:
    sun_azimuth: float = 45.0  #: direction the sunlight travels, degrees
    sun_elevation: float = 50.0  #: degrees above the horizon
    sun_intensity: float = 3.0
    sun_color: tuple[float, float, float] = (1.0, 1.0, 1.0)
    ambient: float = 0.3
    fill_intensity: float = 1.0


@dataclass
class FloorPlan:
    material: str
    grid: int
    cell_cm: float


@dataclass
class PlanConfig:
    """What a plan is drawn from (the options of ``commonlink synth`` that shape a scene)."""

    min_objects: int = 3
    max_objects: int = 7
    views: int = 4
    width: int = 512
    height: int = 512
    grid: int = 4
    cell_cm: float = 30.0
    fill: tuple[float, float] = (0.8, 0.9)  #: largest extent as a fraction of the cell
    max_tilt_deg: float = 6.0
    elevation_deg: tuple[float, float] = (28.0, 58.0)
    fov_deg: tuple[float, float] = (42.0, 55.0)
    frame_margin: float = 0.98  #: the outermost object reaches this fraction of the half field of view
    distance_factor: tuple[float, float] = (1.0, 1.06)  #: times the distance that just frames every object
    off_centre: float = 0.2  #: largest shift of the framing, as a fraction of the room left around the objects

    def check(self, catalog: AssetCatalog) -> None:
        cells = self.grid * self.grid
        if not 1 <= self.min_objects <= self.max_objects:
            raise InputError(f"--objects {self.min_objects}-{self.max_objects}: need 1 <= LOW <= HIGH.", "e.g. --objects 3-7.")
        if self.max_objects > cells:
            raise InputError(
                f"--objects {self.min_objects}-{self.max_objects}: at most {cells} objects fit on the {self.grid}x{self.grid} floor grid.",
                f"Use --objects with HIGH <= {cells}.",
            )
        if self.max_objects > len(catalog.assets):
            raise InputError(
                f"--objects asks for up to {self.max_objects} distinct objects but the asset file has {len(catalog.assets)}.",
                "Lower --objects or add assets to the asset file.",
            )
        if self.views < 1:
            raise InputError(f"--views {self.views}: need at least one camera.", "e.g. --views 4.")
        if self.width < 16 or self.height < 16:
            raise InputError(f"--resolution {self.width}x{self.height} is too small.", "Use at least 16x16, e.g. 512x512.")


@dataclass
class ScenePlan:
    scene_id: str
    seed: int
    index: int
    attempt: int
    resolution: tuple[int, int]
    floor: FloorPlan
    objects: list[ObjectPlacement]
    cameras: list[CameraPose]
    lighting: Lighting
    format: str = PLAN_FORMAT
    extra: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        data = asdict(self)
        data["units"] = "cm"
        data["frame"] = "unreal (left-handed, x forward, y right, z up); rotations (pitch, yaw, roll) in degrees"
        return data

    @classmethod
    def from_json(cls, data: dict) -> ScenePlan:
        try:
            return cls(
                scene_id=data["scene_id"],
                seed=int(data["seed"]),
                index=int(data["index"]),
                attempt=int(data.get("attempt", 0)),
                resolution=tuple(data["resolution"]),  # type: ignore[arg-type]
                floor=FloorPlan(**data["floor"]),
                objects=[
                    ObjectPlacement(**{**o, "cell": tuple(o["cell"]), "location": tuple(o["location"]),
                                       "rotation": tuple(o["rotation"]), "size_cm": tuple(o["size_cm"])})
                    for o in data["objects"]
                ],
                cameras=[CameraPose(**{**c, "location": tuple(c["location"]), "rotation": tuple(c["rotation"])}) for c in data["cameras"]],
                lighting=Lighting(**{**data["lighting"], "sun_color": tuple(data["lighting"]["sun_color"])}),
                format=data.get("format", PLAN_FORMAT),
                extra=dict(data.get("extra") or {}),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise SchemaError(f"Scene plan is malformed ({type(exc).__name__}: {exc}).", "Re-create it with `commonlink synth`.") from exc


def ue_rotation_matrix(pitch: float, yaw: float, roll: float) -> np.ndarray:
    """Unreal's FRotationMatrix as a column-vector 3x3 matrix (columns: images of the local x, y, z axes)."""
    p, y, r = (math.radians(v) for v in (pitch, yaw, roll))
    sp, cp, sy, cy, sr, cr = math.sin(p), math.cos(p), math.sin(y), math.cos(y), math.sin(r), math.cos(r)
    x_axis = (cp * cy, cp * sy, sp)
    y_axis = (sr * sp * cy - cr * sy, sr * sp * sy + cr * cy, -sr * cp)
    z_axis = (-(cr * sp * cy + sr * sy), cy * sr - cr * sp * sy, cr * cp)
    return np.array([x_axis, y_axis, z_axis]).T


def _box_corners(size, scale: float) -> np.ndarray:
    sx, sy, sz = (v * scale for v in size)
    return np.array([[x, y, z] for x in (-sx / 2, sx / 2) for y in (-sy / 2, sy / 2) for z in (0.0, sz)])


def fit_scale(size_cm, cell_cm: float, fill: float) -> float:
    """Uniform scale putting the largest extent at ``fill`` of the cell, shrunk further if the footprint's
    diagonal (any yaw) would pass 94% of the cell; the aspect ratio is kept."""
    largest = max(size_cm)
    footprint_diagonal = math.hypot(size_cm[0], size_cm[1])
    return min(fill * cell_cm / largest, FOOTPRINT_DIAGONAL * cell_cm / footprint_diagonal)


def footprint_radius(size_cm, scale: float, rotation) -> float:
    """Largest horizontal distance from the pivot of the (rotated, scaled) bounding box: the radius of the
    circle the object's footprint stays in, tilt included."""
    corners = _box_corners(size_cm, scale) @ ue_rotation_matrix(*rotation).T
    return max(float(np.hypot(corners[:, 0], corners[:, 1]).max()), math.hypot(size_cm[0], size_cm[1]) * scale / 2)


def _choose_cells(rng: np.random.Generator, n: int, grid: int) -> list[int]:
    """``n`` distinct cells of the grid, drawn inside a randomly placed near-square block just big enough
    for them (2x2 for 3-4 objects, 3x3 for 7-9, the whole 4x4 grid for 13-16), so that a few objects are not
    spread over the whole floor with the camera pulled back to frame them all."""
    shapes = [(r, c) for r in range(1, grid + 1) for c in range(1, grid + 1) if r * c >= n and abs(r - c) <= 1]
    smallest = min(r * c for r, c in shapes)
    shapes = [s for s in shapes if s[0] * s[1] == smallest]
    rows, cols = shapes[int(rng.integers(len(shapes)))]
    top, left = int(rng.integers(grid - rows + 1)), int(rng.integers(grid - cols + 1))
    block = [(top + r) * grid + left + c for r in range(rows) for c in range(cols)]
    return [int(c) for c in rng.choice(block, size=n, replace=False)]


def _r(values, digits: int = 3):
    return tuple(round(float(v), digits) for v in values)


def plan_scene(config: PlanConfig, catalog: AssetCatalog, seed: int, index: int, attempt: int = 0) -> ScenePlan:
    """Draw scene ``index`` (re-sampling ``attempt``) of a run seeded with ``seed``."""
    rng = rng_for(seed, "scene", index, attempt)
    n = int(rng.integers(config.min_objects, config.max_objects + 1))
    assets = [catalog.assets[i] for i in rng.choice(len(catalog.assets), size=n, replace=False)]
    floor = catalog.floors[int(rng.integers(len(catalog.floors)))]
    cells = _choose_cells(rng, n, config.grid)
    cell = config.cell_cm
    origin = -config.grid * cell / 2  # the grid is centred on the world origin

    objects: list[ObjectPlacement] = []
    for asset, c in zip(assets, cells):
        row, col = divmod(int(c), config.grid)
        scale = fit_scale(asset.size_cm, cell, float(rng.uniform(*config.fill)))
        yaw = float(rng.uniform(-180, 180))
        pitch, roll = (float(v) for v in rng.uniform(-config.max_tilt_deg, config.max_tilt_deg, size=2))
        # A tilt moves the top of a tall object sideways: shrink until the footprint circle fits the cell.
        radius = footprint_radius(asset.size_cm, scale, (pitch, yaw, roll))
        if radius > MAX_RADIUS * cell:
            scale *= MAX_RADIUS * cell / radius
        scale = math.floor(scale * 1e5) / 1e5  # stored with 5 decimals: round down so the limits still hold
        radius = footprint_radius(asset.size_cm, scale, (pitch, yaw, roll))
        # Slack left in the cell by the footprint's circle: jitter the position inside it (neighbours keep a
        # gap of at least 2 * (0.5 - JITTER_LIMIT) cells).
        slack = max(0.0, JITTER_LIMIT * cell - radius)
        jx, jy = rng.uniform(-slack, slack, size=2) / math.sqrt(2) if slack > 0 else (0.0, 0.0)
        corners = _box_corners(asset.size_cm, scale) @ ue_rotation_matrix(pitch, yaw, roll).T
        lift = -float(corners[:, 2].min())  # tilted objects rest on the floor instead of sinking into it
        x = origin + (row + 0.5) * cell + jx
        y = origin + (col + 0.5) * cell + jy
        objects.append(ObjectPlacement(
            name=asset.name, asset=asset.name, ue_class=asset.ue_class, cell=(row, col),
            location=_r((x, y, lift)), rotation=_r((pitch, yaw, roll)), scale=scale, size_cm=asset.size_cm,
        ))

    cameras = _cameras(config, objects, rng)
    lighting = Lighting(
        sun_azimuth=round(float(rng.uniform(0, 360)), 2),
        sun_elevation=round(float(rng.uniform(40, 72)), 2),
        sun_intensity=round(float(rng.uniform(2.6, 3.8)), 3),
        sun_color=_r(rng.uniform([0.95, 0.93, 0.88], [1.0, 1.0, 1.0])),
        ambient=round(float(rng.uniform(0.28, 0.42)), 3),
        fill_intensity=round(float(rng.uniform(1.2, 1.8)), 3),
    )
    return ScenePlan(
        scene_id=f"{seed}-{index}", seed=int(seed), index=int(index), attempt=int(attempt),
        resolution=(config.width, config.height), floor=FloorPlan(floor.name, config.grid, cell),
        objects=objects, cameras=cameras, lighting=lighting,
    )


def _object_points(objects: list[ObjectPlacement], samples: int = 16) -> np.ndarray:
    """Points outlining every object for framing: the ellipses inscribed in the bottom and top faces of its
    (rotated, scaled) bounding box, plus the box's corners pulled 15% towards its axis. Most objects are
    rounder than their box; framing the full box corners leaves a wide empty border around round ones."""
    angles = np.linspace(0, 2 * math.pi, samples, endpoint=False)
    points = []
    for o in objects:
        sx, sy, sz = (v * o.scale for v in o.size_cm)
        ring = np.stack([sx / 2 * np.cos(angles), sy / 2 * np.sin(angles)], axis=1)
        local = [np.column_stack([ring, np.full(samples, z)]) for z in (0.0, sz)]
        corners = _box_corners(o.size_cm, o.scale)
        corners[:, :2] *= 0.85
        local = np.concatenate(local + [corners])
        points.append(local @ ue_rotation_matrix(*o.rotation).T + np.asarray(o.location, float))
    return np.concatenate(points)


def camera_axes(azimuth: float, elevation: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(forward, right, up) unit vectors of a camera at ``azimuth`` looking down by ``elevation`` degrees
    towards the scene (Unreal frame; the camera sits in the ``-forward`` direction from what it looks at)."""
    a, e = math.radians(azimuth), math.radians(elevation)
    forward = -np.array([math.cos(e) * math.cos(a), math.cos(e) * math.sin(a), math.sin(e)])
    right = np.cross(forward, [0.0, 0.0, 1.0])
    right /= np.linalg.norm(right)
    return forward, right, np.cross(right, forward)


def frame_points(points: np.ndarray, forward, right, up, tan_h: float, tan_v: float, *, back_off: float = 1.0,
                 offset: tuple[float, float] = (0.0, 0.0)) -> np.ndarray:
    """Camera location, for a fixed orientation, that brings ``points`` as close as possible while every
    point stays inside the ``tan_h`` x ``tan_v`` frame (closed form: each pair of opposite frame planes
    bounds how far forward the camera may go; the tighter pair decides, the other is centred).

    ``back_off`` >= 1 moves the camera back to that multiple of its distance to the points' centroid;
    ``offset`` in [-1, 1]^2 then shifts the framing inside the room that freed (0 = centred)."""
    f, r, u = points @ forward, points @ right, points @ up
    # For a camera at a*right + b*up + z*forward, a point is in frame when |r - a| <= tan_h * (f - z), i.e.
    # z <= min(f - r / tan_h) + a / tan_h and z <= min(f + r / tan_h) - a / tan_h (and likewise for up).
    lo_h, hi_h = float((f - r / tan_h).min()), float((f + r / tan_h).min())
    lo_v, hi_v = float((f - u / tan_v).min()), float((f + u / tan_v).min())
    z = min((lo_h + hi_h) / 2, (lo_v + hi_v) / 2, float(f.min()) - 1.0)
    centroid_depth = float(f.mean()) - z
    z -= (back_off - 1.0) * centroid_depth
    # Allowed a / tan_h: [z - lo_h, hi_h - z]; centre it, then shift by the offset within that interval.
    a = tan_h * ((hi_h - lo_h) / 2 + offset[0] * max(0.0, (hi_h + lo_h) / 2 - z))
    b = tan_v * ((hi_v - lo_v) / 2 + offset[1] * max(0.0, (hi_v + lo_v) / 2 - z))
    return a * np.asarray(right) + b * np.asarray(up) + z * np.asarray(forward)


def _cameras(config: PlanConfig, objects: list[ObjectPlacement], rng: np.random.Generator) -> list[CameraPose]:
    points = _object_points(objects)
    start = float(rng.uniform(0, 360))
    cameras = []
    for k in range(config.views):
        azimuth = (start + 360.0 * k / config.views + float(rng.uniform(-18, 18))) % 360
        elevation = float(rng.uniform(*config.elevation_deg))
        fov = float(rng.uniform(*config.fov_deg))
        # Frame with a small margin (the outermost object stops 1% of the image short of the edge).
        tan_h = math.tan(math.radians(fov) / 2) * config.frame_margin
        tan_v = tan_h * config.height / config.width
        forward, right, up = camera_axes(azimuth, elevation)
        location = frame_points(points, forward, right, up, tan_h, tan_v,
                                back_off=float(rng.uniform(*config.distance_factor)),
                                offset=tuple(float(v) for v in rng.uniform(-config.off_centre, config.off_centre, size=2)))
        distance = float((points - location).mean(axis=0) @ forward)  # along the view axis to the objects' centroid
        cameras.append(CameraPose(
            location=_r(location), rotation=_r((-elevation, azimuth % 360.0 - 180.0, 0.0)), fov=round(fov, 3),
            azimuth=round(azimuth, 3), elevation=round(elevation, 3), distance=round(distance, 3),
        ))
    return cameras
