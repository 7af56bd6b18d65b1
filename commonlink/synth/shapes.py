"""Building blocks of the procedural object models: named colours and coloured primitives (boxes, cylinders,
spheres, cones, tori, surfaces of revolution, capsules) that the model modules combine.

Every builder returns a ``trimesh.Trimesh`` with per-vertex colours, in centimetres, z up. Parts are split at sharp
edges before colouring so that boxes and caps shade flat while round parts stay smooth. ``trimesh`` is imported
lazily: these modules are only loaded by the renderer.
"""

from __future__ import annotations

import math

import numpy as np

Color = tuple[int, int, int]

# Named colours keep the builders readable.
RED: Color = (196, 30, 36)
DARK_RED: Color = (120, 16, 20)
ORANGE: Color = (240, 120, 20)
YELLOW: Color = (245, 205, 40)
GREEN: Color = (60, 150, 50)
DARK_GREEN: Color = (30, 95, 35)
BLUE: Color = (40, 90, 200)
LIGHT_BLUE: Color = (150, 200, 235)
PURPLE: Color = (120, 60, 160)
PINK: Color = (240, 140, 180)
BROWN: Color = (110, 70, 35)
TAN: Color = (205, 160, 100)
WOOD: Color = (160, 110, 60)
WHITE: Color = (240, 240, 235)
CREAM: Color = (245, 235, 210)
GREY: Color = (150, 150, 155)
SILVER: Color = (200, 200, 210)
DARK: Color = (35, 35, 40)
GOLD: Color = (220, 175, 50)
TERRACOTTA: Color = (190, 95, 55)


def trimesh_module():
    import trimesh

    return trimesh


def moved(mesh, x: float = 0.0, y: float = 0.0, z: float = 0.0):
    mesh.apply_translation([x, y, z])
    return mesh


def rotated(mesh, axis: str, degrees: float):
    tm = trimesh_module()
    vec = {"x": [1, 0, 0], "y": [0, 1, 0], "z": [0, 0, 1]}[axis]
    mesh.apply_transform(tm.transformations.rotation_matrix(math.radians(degrees), vec))
    return mesh


def part(mesh, color: Color):
    """Split at sharp edges (flat faces shade flat) and paint every vertex ``color``."""
    mesh = mesh.smooth_shaded
    mesh.visual.vertex_colors = np.tile(np.array([*color, 255], dtype=np.uint8), (len(mesh.vertices), 1))
    return mesh


def box(sx: float, sy: float, sz: float, color: Color, x: float = 0, y: float = 0, z: float = 0):
    """Axis-aligned box whose bottom face sits at height ``z``."""
    return part(moved(trimesh_module().creation.box(extents=[sx, sy, sz]), x, y, z + sz / 2), color)


def cylinder(r: float, h: float, color: Color, x: float = 0, y: float = 0, z: float = 0, sections: int = 32):
    return part(
        moved(trimesh_module().creation.cylinder(radius=r, height=h, sections=sections), x, y, z + h / 2), color
    )


def sphere(r: float, color: Color, x: float = 0, y: float = 0, z: float = 0, scale=(1.0, 1.0, 1.0), subdivisions=3):
    mesh = trimesh_module().creation.icosphere(subdivisions=subdivisions, radius=r)
    mesh.apply_scale(scale)
    return part(moved(mesh, x, y, z), color)


def cone(r: float, h: float, color: Color, x: float = 0, y: float = 0, z: float = 0, sections: int = 32):
    return part(moved(trimesh_module().creation.cone(radius=r, height=h, sections=sections), x, y, z), color)


def torus(major: float, minor: float, color: Color, x: float = 0, y: float = 0, z: float = 0):
    return part(
        moved(trimesh_module().creation.torus(major, minor, major_sections=40, minor_sections=20), x, y, z), color
    )


def ridged_sphere(r: float, color: Color, *, ridges: int, depth: float, z_scale: float = 1.0, z: float = 0):
    """A sphere with ``ridges`` vertical grooves (a pumpkin, a bell pepper), where its radius drops by the fraction
    ``depth``; ``z_scale`` stretches it vertically, ``z`` is its centre's height."""
    mesh = trimesh_module().creation.icosphere(subdivisions=4, radius=r)
    v = mesh.vertices
    ridge = 1.0 - depth * np.abs(np.cos(ridges / 2 * np.arctan2(v[:, 1], v[:, 0])))
    mesh.vertices = v * np.column_stack([ridge, ridge, z_scale * ridge])
    return part(moved(mesh, 0, 0, z), color)


def lathe(profile: list[tuple[float, float]], color: Color, z: float = 0, sections: int = 40):
    """Surface of revolution about the z axis from (radius, height) points."""
    return part(
        moved(trimesh_module().creation.revolve(np.asarray(profile, dtype=float), sections=sections), 0, 0, z), color
    )


def capsule_between(p0, p1, r: float, color: Color):
    """A capsule of radius ``r`` from point ``p0`` to ``p1``."""
    tm = trimesh_module()
    p0, p1 = np.asarray(p0, float), np.asarray(p1, float)
    length = float(np.linalg.norm(p1 - p0))
    mesh = tm.creation.capsule(height=max(length, 1e-3), radius=r, count=[16, 16])
    mesh.apply_translation(-mesh.bounds.mean(axis=0))  # centre it whatever trimesh's convention
    direction = (p1 - p0) / max(length, 1e-9)
    mesh.apply_transform(tm.geometry.align_vectors([0, 0, 1], direction))
    mesh.apply_translation((p0 + p1) / 2)
    return part(mesh, color)


def faces_where(mesh, keep):
    """The faces of ``mesh`` where the boolean per face ``keep`` holds (an open arc, a hull), keeping its colours."""
    return mesh.submesh([keep.nonzero()[0]], append=True)


def upper_half(mesh, z: float):
    """The faces of ``mesh`` above height ``z`` (an open arc, e.g. a handle)."""
    return faces_where(mesh, mesh.triangles_center[:, 2] >= z)


def combine(*parts):
    """Concatenate parts and re-seat the result on z = 0, centred on the z axis."""
    mesh = trimesh_module().util.concatenate(list(parts))
    lo, hi = mesh.bounds
    mesh.apply_translation([-(lo[0] + hi[0]) / 2, -(lo[1] + hi[1]) / 2, -lo[2]])
    return mesh
