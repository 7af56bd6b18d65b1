"""Scene plans: pure, seeded data that says what a scene contains and where its cameras are (no renderer).

Following Common-O §3.1/§8: N distinct assets, each at one of 16 floor positions (the centres of a 4x4 grid,
drawn at random among all 16), a slight random rotation (yaw within +-``max_yaw_deg``, a small tilt), a uniform
scale that keeps the aspect ratio and gives each object a maximum size set by the room around its position
(the distance to its nearest neighbour, capped), so that objects never interpenetrate, lighting, and four cameras,
one on each side of the grid at varied elevation, each placed as close as its field of view allows with every
object in frame. A plan draws ``layout_candidates`` such layouts (8 by default) and keeps the one whose objects
project largest from its cameras (:func:`layout_score`, from the plan alone: renders put objects under 2% of the
image far more often than over 22%). Together these put objects in the paper's band of 2-22% of the image from
every camera, for 3-7 objects as for 8-16 (checked on renders by ``benchmarks/bench_synth.py`` and
``tests/test_synth_areas.py``).

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
``rng_for(seed, "scene", index, attempt)`` for the layout, cameras and light of the first layout candidate
(``rng_for(seed, "scene", index, attempt, "layout", j)`` for candidate ``j`` > 0): any scene (and any re-sampling
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
from commonlink.synth.geometry import (  # camera_axes and ue_rotation_matrix: also imported from here
    box_corners,
    camera_axes,
    footprint,
    footprints_overlap,
    frame_points,
    ue_rotation_matrix,
)

PLAN_FORMAT = "commonlink-scene-plan/1"
#: Positions on the floor: the centres of a GRID x GRID grid (the paper's 16 positions).
GRID = 4

#: Bump when the layout or framing rules change: a catalog's scenes must all come from one set of rules,
#: so `commonlink synth` refuses to resume a catalog made with another plan version.
#: 3: all 16 positions, slight yaw, per-object maximum size from the room around it, cameras on the grid's sides.
#: 4: scenes planned in sets (a set's scenes take subsets of one object pool).
#: 5: the largest-projecting of 8 layout candidates (objects' sizes back in the paper's band with sets).
PLAN_VERSION = 5
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
    #: layouts drawn per plan, the one whose objects project largest kept (:func:`layout_score`); 1: the first
    layout_candidates: int = 8
    area_cap: float = 0.08  #: estimated image share above which a larger object adds nothing to a layout's score

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
        if self.layout_candidates < 1:
            raise InputError(
                f"layout_candidates={self.layout_candidates}: a plan needs at least one layout to choose from.",
                "e.g. PlanConfig(layout_candidates=8) (the default; 1: the first layout drawn).",
            )
        if not 0.0 < self.area_cap <= 1.0:
            raise InputError(
                f"area_cap={self.area_cap}: must be a share of the image, above 0 and at most 1.",
                "e.g. PlanConfig(area_cap=0.08) (the default).",
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
    corners = box_corners(size_cm, scale) @ ue_rotation_matrix(*rotation).T
    return -float(corners[:, 2].min())


def _separate(sizes, scales: list[float], rotations, locations, gap: float) -> list[float]:
    """Shrink objects (the larger of a pair first, 6% a step) until no two footprints come within ``gap``."""
    scales = list(scales)
    # Each footprint is rebuilt only when its object shrinks, not again on every pass.
    polys = [footprint(sizes[i], scales[i], rotations[i], locations[i]) for i in range(len(scales))]
    circles = [_circle(poly) for poly in polys]
    for _ in range(60):
        moved = False
        for i in range(len(scales)):
            for j in range(i + 1, len(scales)):
                (ci, ri), (cj, rj) = circles[i], circles[j]
                # Far apart (more than twice the gap between their enclosing circles): the edge-normal test
                # below would find them apart too (footprint corners are never sharper than 60 degrees), so skip
                # it; most pairs are, and the test dominated planning time.
                if math.dist(ci, cj) > ri + rj + 2 * gap:
                    continue
                if footprints_overlap(polys[i], polys[j], gap):
                    k = i if scales[i] * max(sizes[i]) >= scales[j] * max(sizes[j]) else j
                    scales[k] *= 0.94
                    polys[k] = footprint(sizes[k], scales[k], rotations[k], locations[k])
                    circles[k] = _circle(polys[k])
                    moved = True
        if not moved:
            break
    return scales


def _circle(poly: np.ndarray) -> tuple[tuple[float, float], float]:
    """A circle holding a polygon: its vertices' mean and the largest distance to one."""
    centre = poly.mean(axis=0)
    return (float(centre[0]), float(centre[1])), float(np.linalg.norm(poly - centre, axis=1).max())


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
    """Draw scene ``index`` (re-sampling ``attempt``) of a run seeded with ``seed``: ``config.layout_candidates``
    layouts (positions, rotations, sizes, cameras, light) are drawn and the one whose objects project largest
    (:func:`layout_score`) is kept."""
    # What the scene holds (objects, floor) does not depend on the attempt: a re-sampled plan re-draws
    # positions, rotations, sizes, cameras and light only, so the checks that trigger re-sampling (hidden
    # objects, area band) cannot favour small scenes or compact objects.
    assets = [catalog.assets[i] for i in scene_asset_indices(config, len(catalog.assets), seed, index)]
    floor = catalog.floors[int(rng_for(seed, "scene", index, "floor").integers(len(catalog.floors)))]
    best = None
    for candidate in range(config.layout_candidates):
        # candidate 0 draws from the attempt's own generator, so one candidate gives plan version 4's layouts
        keys = (attempt,) if candidate == 0 else (attempt, "layout", candidate)
        objects, cameras, lighting = _draw_layout(config, assets, rng_for(seed, "scene", index, *keys))
        score = layout_score(config, objects, cameras) if config.layout_candidates > 1 else 0.0
        if best is None or score > best[0]:
            best = (score, candidate, objects, cameras, lighting)
    score, candidate, objects, cameras, lighting = best  # type: ignore[misc]
    extra = {"set": index // config.set_size}
    if config.layout_candidates > 1:
        extra.update({"layout_candidate": candidate, "layout_score": round(score, 4)})
    return ScenePlan(
        scene_id=f"{seed}-{index}",
        seed=int(seed),
        index=int(index),
        attempt=int(attempt),
        resolution=(config.width, config.height),
        floor=FloorPlan(floor.name, config.grid, config.cell_cm),
        objects=objects,
        cameras=cameras,
        lighting=lighting,
        extra=extra,
    )


def _draw_layout(config: PlanConfig, assets: list, rng: np.random.Generator):
    """(objects, cameras, lighting) of one layout of ``assets`` drawn from ``rng``."""
    n = len(assets)
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
    return objects, cameras, lighting


def projected_areas(config: PlanConfig, objects: list[ObjectPlacement], cameras: list[CameraPose]) -> np.ndarray:
    """(views, objects) estimated shares of each camera's image, from the plan alone: the ellipses inscribed in an
    object's bottom and top bounding-box faces, projected in perspective and clipped to the frame; the ellipse
    inscribed in their bounding rectangle (pi/4 of it) over the image. Occlusion is ignored, and meshes fill
    less than that: a ranking of layouts of the same objects, not a measurement."""
    points = np.stack([_ellipse_points(o) for o in objects])  # (objects, samples, 3)
    rows = []
    for camera in cameras:
        forward, right, up = camera_axes(camera.azimuth, camera.elevation)
        tan_h = math.tan(math.radians(camera.fov) / 2)
        tan_v = tan_h * config.height / config.width
        d = points - np.asarray(camera.location, float)
        depth = np.maximum(d @ forward, 1e-6)
        x = np.clip((d @ right) / (depth * tan_h), -1.0, 1.0)
        y = np.clip((d @ up) / (depth * tan_v), -1.0, 1.0)
        rows.append((x.max(axis=1) - x.min(axis=1)) * (y.max(axis=1) - y.min(axis=1)) * (math.pi / 16))
    return np.asarray(rows)


def layout_score(config: PlanConfig, objects: list[ObjectPlacement], cameras: list[CameraPose]) -> float:
    """How well a layout keeps its objects' sizes: the mean log of every (object, view) pair's estimated area
    (:func:`projected_areas`), each capped at ``area_cap``, so that raising the small ones counts and growing the
    large ones past the cap does not (renders put objects under 2% of the image far more often than over 22%)."""
    if not objects or not cameras:
        return 0.0
    return float(np.log(np.clip(projected_areas(config, objects, cameras), 1e-6, config.area_cap)).mean())


def _ellipse_points(o: ObjectPlacement, samples: int = 16) -> np.ndarray:
    """World points of the ellipses inscribed in an object's bottom and top bounding-box faces."""
    angles = np.linspace(0, 2 * math.pi, samples, endpoint=False)
    sx, sy, sz = (v * o.scale for v in o.size_cm)
    ring = np.stack([sx / 2 * np.cos(angles), sy / 2 * np.sin(angles)], axis=1)
    local = np.concatenate([np.column_stack([ring, np.full(samples, z)]) for z in (0.0, sz)])
    return local @ ue_rotation_matrix(*o.rotation).T + np.asarray(o.location, float)


def _object_points(objects: list[ObjectPlacement], samples: int = 16) -> np.ndarray:
    """Points outlining every object for framing: the corners of its (rotated, scaled) bounding box, which holds
    the whole mesh, so that no object is cut by the image border, and the ellipses inscribed in its bottom and
    top faces."""
    points = []
    for o in objects:
        corners = box_corners(o.size_cm, o.scale) @ ue_rotation_matrix(*o.rotation).T + np.asarray(o.location, float)
        points += [_ellipse_points(o, samples), corners]
    return np.concatenate(points)


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
