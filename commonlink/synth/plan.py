"""Scene plans: pure, seeded data that says what a scene contains and where its cameras are (no renderer).

Following Common-O §3.1/§8: N distinct assets, each at one of 16 floor positions (the centres of a 4x4 grid,
drawn at random among all 16), a slight random rotation (yaw within +-``max_yaw_deg``, a small tilt), a uniform
scale that keeps the aspect ratio and gives each object a maximum size set by the room around its position
(the distance to its nearest neighbour, capped), so that objects never interpenetrate, lighting, and four cameras,
one on each side of the grid at varied elevation, each placed as close as its field of view allows with every
object in frame. Together these put objects in the paper's band of 2-22% of the image from every camera, for
3-7 objects as for 8-16 (checked on renders by ``benchmarks/bench_synth.py``).

Scenes are planned in **sets** (as the paper's real photos were "grouped in sets"): the scenes
``set_size * s .. set_size * (s + 1) - 1`` form set ``s``, which draws a pool of objects and one object count; the
set's first scene takes that many objects from the pool, and each other scene keeps a drawn number ``t`` of them
(0..all) and fills up from the rest of the pool, in its own arrangement. Two scenes of a set therefore share 0..N
objects, while scenes of different sets rarely share more than one or two: together a split reaches every number
of common objects (docs/synth.md, "Scene sets"). ``set_size = 1`` gives independent scenes.

Coordinates are Unreal Engine's (left-handed: x forward, y right, z up; centimetres; rotations are
(pitch, yaw, roll) in degrees) so the UnrealCV backend sends them as they are. Each scene's generator is
``rng_for(seed, "set", set_index, "content")`` for its set's pool and object count,
``rng_for(seed, "scene", index, "content")`` for what it holds (objects, floor) and
``rng_for(seed, "scene", index, attempt)`` for the layout, cameras and light: any scene (and any re-sampling
attempt) can be redone alone, and a re-sampled scene holds the same objects.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np

from commonlink.constants import MAX_IMAGE_PIXELS
from commonlink.errors import InputError, SchemaError
from commonlink.seeding import rng_for
from commonlink.synth.assets import AssetCatalog

PLAN_FORMAT = "commonlink-scene-plan/1"
#: Positions on the floor: the centres of a GRID x GRID grid (the paper's 16 positions).
GRID = 4

#: Bump when the layout or framing rules change: a catalog's scenes must all come from one set of rules,
#: so `commonlink synth` refuses to resume a catalog made with another plan version.
#: 3: all 16 positions, slight yaw, per-object maximum size from the room around it, cameras on the grid's sides.
#: 4: scenes planned in sets (a set's scenes take subsets of one object pool).
PLAN_VERSION = 4
#: Scenes a set (4: within-set pairs are ~1-2% of a split's scene pairs, enough to fill the high counts of
#: common objects, while most pairs stay across sets).
DEFAULT_SET_SIZE = 4


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
    grid: int = GRID
    cell_cm: float = 30.0  #: spacing of the positions
    #: An object's largest horizontal extent, as a fraction of its room: the distance (in cells, Chebyshev) to
    #: its nearest neighbour, capped at ``max_room_cells``, so a lone object may grow past one cell but never
    #: into another. Its height is capped at ``max_height`` times the room (tall things may stand taller than
    #: wide, as long as they stay in proportion).
    fill: tuple[float, float] = (0.94, 0.99)
    max_room_cells: float = 1.6
    max_height: float = 1.5
    #: Weight of a position next to an already chosen one when drawing positions one by one (1 = uniform):
    #: below 1, objects spread over the 16 positions with more room each, so they can be larger.
    neighbour_weight: float = 0.25
    gap_cm: float = 1.0  #: least distance between two objects' footprints
    max_yaw_deg: float = 15.0  #: "slight random rotation"; 180 turns objects over the full circle
    max_tilt_deg: float = 4.0
    elevation_deg: tuple[float, float] = (50.0, 70.0)
    fov_deg: tuple[float, float] = (28.0, 36.0)
    #: Cameras stand on the four sides of the grid (azimuths 0, 90, 180, 270 plus a shared random turn and
    #: their own jitter, degrees): the grid's side, not its diagonal, then spans the image.
    azimuth_turn_deg: float = 15.0
    azimuth_jitter_deg: float = 8.0
    frame_margin: float = 0.98  #: the outermost object reaches this fraction of the half field of view
    distance_factor: tuple[float, float] = (1.0, 1.02)  #: times the distance that just frames every object
    off_centre: float = 0.2  #: largest shift of the framing, as a fraction of the room left around the objects
    set_size: int = DEFAULT_SET_SIZE  #: scenes a set (1: every scene draws its objects on its own)
    #: objects in a set's pool; None: twice ``max_objects`` (room for a scene to share none of the first scene's)
    set_pool: int | None = None
    #: share of sets planned as sets (the others' scenes draw on their own): scales the share of scene pairs
    #: that come from one set, and so how many pairs share many objects
    set_share: float = 1.0

    def __post_init__(self) -> None:
        cells = self.grid * self.grid
        if not 1 <= self.min_objects <= self.max_objects:
            raise InputError(
                f"--objects {self.min_objects}-{self.max_objects}: need 1 <= LOW <= HIGH.", "e.g. --objects 3-7."
            )
        if self.max_objects > cells:
            raise InputError(
                f"--objects {self.min_objects}-{self.max_objects}: at most {cells} objects fit on the "
                f"{self.grid}x{self.grid} floor grid.",
                f"Use --objects with HIGH <= {cells}.",
            )
        if self.views < 1:
            raise InputError(f"--views {self.views}: need at least one camera.", "e.g. --views 4.")
        if min(self.width, self.height) < 16 or self.width * self.height > MAX_IMAGE_PIXELS:
            raise InputError(
                f"--resolution {self.width}x{self.height}: each side must be at least 16 and the image at most "
                f"{MAX_IMAGE_PIXELS:,} pixels (the pixel cap every commonlink image reader enforces).",
                "e.g. --resolution 512x512 or 1024x768 (raise COMMONLINK_MAX_IMAGE_PIXELS for bigger renders).",
            )
        if self.set_size < 1:
            raise InputError(
                f"--set-size {self.set_size}: need at least 1 scene a set.", "e.g. --set-size 4 (1: no sets)."
            )
        if not 0.0 <= self.set_share <= 1.0:
            raise InputError(
                f"--set-share {self.set_share}: must be between 0 and 1.",
                "e.g. --set-share 1 (every set, the default).",
            )
        if self.set_pool is not None and self.set_pool < self.max_objects:
            raise InputError(
                f"--set-pool {self.set_pool}: a set's pool must hold a whole scene ({self.max_objects} objects).",
                f"Use --set-pool {self.max_objects} or more, or leave it out (default {2 * self.max_objects}).",
            )
        if not 0.0 <= self.max_yaw_deg <= 180.0:
            raise InputError(
                f"--max-yaw {self.max_yaw_deg}: must be between 0 and 180 degrees.",
                "e.g. --max-yaw 20 (slight, the default) or --max-yaw 180 (any direction).",
            )

    def pool_size(self, n_assets: int) -> int:
        """Objects a set draws its scenes from (never more than the asset file holds)."""
        wanted = self.set_pool if self.set_pool is not None else 2 * self.max_objects
        return min(wanted, n_assets)

    def check(self, catalog: AssetCatalog) -> None:
        """Refuse a plan the asset file cannot fill (the rest is checked when the settings are made)."""
        if self.max_objects > len(catalog.assets):
            raise InputError(
                f"--objects asks for up to {self.max_objects} distinct objects but the asset file has "
                f"{len(catalog.assets)}.",
                "Lower --objects or add assets to the asset file.",
            )


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
                    ObjectPlacement(
                        **{
                            **o,
                            "cell": tuple(o["cell"]),
                            "location": tuple(o["location"]),
                            "rotation": tuple(o["rotation"]),
                            "size_cm": tuple(o["size_cm"]),
                        }
                    )
                    for o in data["objects"]
                ],
                cameras=[
                    CameraPose(**{**c, "location": tuple(c["location"]), "rotation": tuple(c["rotation"])})
                    for c in data["cameras"]
                ],
                lighting=Lighting(**{**data["lighting"], "sun_color": tuple(data["lighting"]["sun_color"])}),
                format=data.get("format", PLAN_FORMAT),
                extra=dict(data.get("extra") or {}),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise SchemaError(
                f"Scene plan is malformed ({type(exc).__name__}: {exc}).", "Re-create it with `commonlink synth`."
            ) from exc


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


def _convex_hull(points: np.ndarray) -> np.ndarray:
    """Counter-clockwise convex hull of 2-D points (Andrew's monotone chain)."""
    pts = sorted({(round(float(x), 9), round(float(y), 9)) for x, y in points})
    if len(pts) <= 2:
        return np.array(pts, float)

    def cross(o, a, b):
        return (a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0])

    lower, upper = [], []
    for p in pts:
        while len(lower) >= 2 and cross(lower[-2], lower[-1], p) <= 0:
            lower.pop()
        lower.append(p)
    for p in reversed(pts):
        while len(upper) >= 2 and cross(upper[-2], upper[-1], p) <= 0:
            upper.pop()
        upper.append(p)
    return np.array(lower[:-1] + upper[:-1], float)


def footprint(size_cm, scale: float, rotation, location) -> np.ndarray:
    """The floor polygon under an object: convex hull of its (scaled, rotated, tilted) bounding box seen from
    above, placed at ``location``."""
    corners = _box_corners(size_cm, scale) @ ue_rotation_matrix(*rotation).T
    return _convex_hull(corners[:, :2] + np.asarray(location[:2], float))


def footprints_overlap(a: np.ndarray, b: np.ndarray, gap: float = 0.0) -> bool:
    """Whether two convex polygons come closer than ``gap`` along every edge normal of either (separating axes)."""
    for poly in (a, b):
        edges = np.roll(poly, -1, axis=0) - poly
        normals = np.stack([edges[:, 1], -edges[:, 0]], axis=1)
        normals /= np.maximum(np.linalg.norm(normals, axis=1, keepdims=True), 1e-12)
        pa, pb = a @ normals.T, b @ normals.T
        if ((pa.max(axis=0) + gap <= pb.min(axis=0)) | (pb.max(axis=0) + gap <= pa.min(axis=0))).any():
            return False
    return True


def room_cells(cells: list[tuple[int, int]], cap: float) -> list[float]:
    """For each position, the Chebyshev distance in cells to the nearest other chosen position, capped: the
    room its object may fill without reaching a neighbour's (axis-aligned footprints of half that size on
    both sides just touch)."""
    rooms = []
    for i, (r, c) in enumerate(cells):
        others = [max(abs(r - r2), abs(c - c2)) for j, (r2, c2) in enumerate(cells) if j != i]
        rooms.append(min([cap, *others]))
    return rooms


def bulk(size_cm) -> float:
    """How much of its largest horizontal extent's square an object shows: the mean of its bounding box's three
    face areas over that square (about 1 for a cube, small for a hammer or a plate)."""
    sx, sy, sz = size_cm
    return (sx * sy + sx * sz + sy * sz) / 3 / max(sx, sy) ** 2


def choose_positions(rng: np.random.Generator, n: int, grid: int, neighbour_weight: float) -> list[tuple[int, int]]:
    """``n`` distinct (row, column) positions of the grid, drawn one by one among all of them; a position next
    to (8-neighbourhood) an already chosen one is drawn with weight ``neighbour_weight`` instead of 1."""
    chosen: list[tuple[int, int]] = []
    free = [divmod(c, grid) for c in range(grid * grid)]
    for _ in range(n):
        weights = np.array(
            [neighbour_weight if any(max(abs(r - a), abs(c - b)) <= 1 for a, b in chosen) else 1.0 for r, c in free]
        )
        pick = int(rng.choice(len(free), p=weights / weights.sum()))
        chosen.append(free.pop(pick))
    return chosen


def _r(values, digits: int = 3):
    return tuple(round(float(v), digits) for v in values)


def _lift(size_cm, scale: float, rotation) -> float:
    """Height that puts the lowest corner of the tilted box on the floor (tilted objects rest on it)."""
    corners = _box_corners(size_cm, scale) @ ue_rotation_matrix(*rotation).T
    return -float(corners[:, 2].min())


def _separate(sizes, scales: list[float], rotations, locations, gap: float) -> list[float]:
    """Shrink objects (the larger of a pair first, 6% a step) until no two footprints come within ``gap``."""
    scales = list(scales)
    # Each footprint is rebuilt only when its object shrinks, not again on every pass.
    polys = [footprint(sizes[i], scales[i], rotations[i], locations[i]) for i in range(len(scales))]
    for _ in range(60):
        moved = False
        for i in range(len(scales)):
            for j in range(i + 1, len(scales)):
                if footprints_overlap(polys[i], polys[j], gap):
                    k = i if scales[i] * max(sizes[i]) >= scales[j] * max(sizes[j]) else j
                    scales[k] *= 0.94
                    polys[k] = footprint(sizes[k], scales[k], rotations[k], locations[k])
                    moved = True
        if not moved:
            break
    return scales


def scene_asset_indices(config: PlanConfig, n_assets: int, seed: int, index: int) -> list[int]:
    """Which assets scene ``index`` holds (indices into the asset file), from its set and its own draws.

    The set (``index // set_size``) draws its object count and pool; its first scene takes the first objects
    of the pool, every other scene keeps ``t`` of them (``t`` drawn evenly from 0..all) and fills up from the
    rest of the pool. Cheap and render-free, so a whole split's contents can be planned in seconds.
    """
    set_index, position = divmod(index, config.set_size)
    # (the set's coin has its own generator: the set draws below stay the same whatever the share)
    in_set = config.set_size > 1 and rng_for(seed, "set", set_index, "shared").random() < config.set_share
    if not in_set:  # independent scenes: any object count, any assets
        content = rng_for(seed, "scene", index, "content")
        n = int(content.integers(config.min_objects, config.max_objects + 1))
        return content.choice(n_assets, size=n, replace=False).tolist()
    group = rng_for(seed, "set", set_index, "content")
    n = int(group.integers(config.min_objects, config.max_objects + 1))
    pool = group.choice(n_assets, size=max(config.pool_size(n_assets), n), replace=False).tolist()
    if position == 0:
        return pool[:n]
    content = rng_for(seed, "scene", index, "content")
    kept = int(content.integers(0, n + 1))
    first, rest = pool[:n], pool[n:]
    # with a small pool there may be fewer other objects than the scene needs: keep more of the first scene's
    kept = max(kept, n - len(rest))
    keep = content.choice(n, size=kept, replace=False).tolist()
    fill = content.choice(len(rest), size=n - kept, replace=False).tolist()
    return [first[i] for i in keep] + [rest[i] for i in fill]


def plan_scene(config: PlanConfig, catalog: AssetCatalog, seed: int, index: int, attempt: int = 0) -> ScenePlan:
    """Draw scene ``index`` (re-sampling ``attempt``) of a run seeded with ``seed``."""
    # What the scene holds (objects, floor) does not depend on the attempt: a re-sampled plan re-draws
    # positions, rotations, sizes, cameras and light only, so the checks that trigger re-sampling (hidden
    # objects, area band) cannot favour small scenes or compact objects.
    assets = [catalog.assets[i] for i in scene_asset_indices(config, len(catalog.assets), seed, index)]
    n = len(assets)
    floor = catalog.floors[int(rng_for(seed, "scene", index, "floor").integers(len(catalog.floors)))]
    rng = rng_for(seed, "scene", index, attempt)
    cells = choose_positions(rng, n, config.grid, config.neighbour_weight)
    cell = config.cell_cm
    origin = -config.grid * cell / 2  # the grid is centred on the world origin
    rooms = room_cells(cells, config.max_room_cells)
    # Thin and flat things (a hammer, a whisk) look small for their largest extent: give them the positions
    # with the most room (stable order, so ties keep the drawn order).
    by_room = sorted(range(n), key=lambda k: -rooms[k])
    by_bulk = sorted(range(n), key=lambda k: bulk(assets[k].size_cm))
    order = [0] * n
    for position, asset_index in zip(by_room, by_bulk):
        order[position] = asset_index
    assets = [assets[k] for k in order]

    sizes, scales, rotations, locations = [], [], [], []
    for asset, (row, col), room in zip(assets, cells, rooms):
        sx, sy, sz = asset.size_cm
        largest = float(rng.uniform(*config.fill)) * room * cell
        yaw = float(rng.uniform(-config.max_yaw_deg, config.max_yaw_deg))
        pitch, roll = (float(v) for v in rng.uniform(-config.max_tilt_deg, config.max_tilt_deg, size=2))
        sizes.append(asset.size_cm)
        scales.append(min(largest / max(sx, sy), config.max_height * room * cell / sz))
        rotations.append((round(pitch, 3), round(yaw, 3), round(roll, 3)))
        locations.append((origin + (row + 0.5) * cell, origin + (col + 0.5) * cell))
    scales = _separate(sizes, scales, rotations, locations, config.gap_cm)

    objects: list[ObjectPlacement] = []
    for asset, (row, col), scale, rotation, (x, y) in zip(assets, cells, scales, rotations, locations):
        scale = math.floor(scale * 1e5) / 1e5  # stored with 5 decimals: round down so the gaps still hold
        objects.append(
            ObjectPlacement(
                name=asset.name,
                asset=asset.name,
                ue_class=asset.ue_class,
                cell=(row, col),
                location=_r((x, y, _lift(asset.size_cm, scale, rotation))),
                rotation=rotation,
                scale=scale,
                size_cm=asset.size_cm,
            )
        )

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
        scene_id=f"{seed}-{index}",
        seed=int(seed),
        index=int(index),
        attempt=int(attempt),
        resolution=(config.width, config.height),
        floor=FloorPlan(floor.name, config.grid, cell),
        objects=objects,
        cameras=cameras,
        lighting=lighting,
        extra={"set": index // config.set_size},
    )


def _object_points(objects: list[ObjectPlacement], samples: int = 16) -> np.ndarray:
    """Points outlining every object for framing: the corners of its (rotated, scaled) bounding box, which holds
    the whole mesh, so that no object is cut by the image border, and the ellipses inscribed in its bottom and
    top faces."""
    angles = np.linspace(0, 2 * math.pi, samples, endpoint=False)
    points = []
    for o in objects:
        sx, sy, sz = (v * o.scale for v in o.size_cm)
        ring = np.stack([sx / 2 * np.cos(angles), sy / 2 * np.sin(angles)], axis=1)
        local = [np.column_stack([ring, np.full(samples, z)]) for z in (0.0, sz)]
        corners = _box_corners(o.size_cm, o.scale)
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


def frame_points(
    points: np.ndarray,
    forward,
    right,
    up,
    tan_h: float,
    tan_v: float,
    *,
    back_off: float = 1.0,
    offset: tuple[float, float] = (0.0, 0.0),
) -> np.ndarray:
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
    turn = float(rng.uniform(-config.azimuth_turn_deg, config.azimuth_turn_deg))
    cameras = []
    for k in range(config.views):
        jitter = float(rng.uniform(-config.azimuth_jitter_deg, config.azimuth_jitter_deg))
        azimuth = (turn + 360.0 * k / config.views + jitter) % 360
        elevation = float(rng.uniform(*config.elevation_deg))
        fov = float(rng.uniform(*config.fov_deg))
        # Frame with a small margin (the outermost object stops 1% of the image short of the edge).
        tan_h = math.tan(math.radians(fov) / 2) * config.frame_margin
        tan_v = tan_h * config.height / config.width
        forward, right, up = camera_axes(azimuth, elevation)
        location = frame_points(
            points,
            forward,
            right,
            up,
            tan_h,
            tan_v,
            back_off=float(rng.uniform(*config.distance_factor)),
            offset=tuple(float(v) for v in rng.uniform(-config.off_centre, config.off_centre, size=2)),
        )
        distance = float((points - location).mean(axis=0) @ forward)  # along the view axis to the objects' centroid
        cameras.append(
            CameraPose(
                location=_r(location),
                rotation=_r((-elevation, azimuth % 360.0 - 180.0, 0.0)),
                fov=round(fov, 3),
                azimuth=round(azimuth, 3),
                elevation=round(elevation, 3),
                distance=round(distance, 3),
            )
        )
    return cameras


def common_object_histogram(config: PlanConfig, n_assets: int, seed: int, scenes: int, chunk: int = 1024) -> list[int]:
    """Pairs of scenes (of ``scenes`` planned ones) by the number of objects they share, 0..max_objects: what a
    split can reach before rendering (an image shows its scene's objects, less any hidden from its camera).
    Counted in row chunks, so memory stays ``chunk x scenes``."""
    members = np.zeros((scenes, n_assets), dtype=np.float32)
    for index in range(scenes):
        members[index, scene_asset_indices(config, n_assets, seed, index)] = 1.0
    histogram = np.zeros(config.max_objects + 1, dtype=np.int64)
    for start in range(0, scenes, chunk):
        shared = (members[start : start + chunk] @ members.T).astype(np.int64)
        rows = np.arange(start, min(start + chunk, scenes))[:, None]
        later = np.arange(scenes)[None, :] > rows  # each unordered pair once
        histogram += np.bincount(shared[later], minlength=config.max_objects + 1)[: config.max_objects + 1]
    return histogram.tolist()
