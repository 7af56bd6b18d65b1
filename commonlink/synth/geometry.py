"""Geometry of scene plans (no renderer): Unreal rotations, object footprints on the floor and their overlap, and
camera orientation and framing. Unreal Engine's frame: left-handed, x forward, y right, z up; centimetres;
rotations (pitch, yaw, roll) in degrees."""

from __future__ import annotations

import math

import numpy as np


def ue_rotation_matrix(pitch: float, yaw: float, roll: float) -> np.ndarray:
    """Unreal's FRotationMatrix as a column-vector 3x3 matrix (columns: images of the local x, y, z axes)."""
    p, y, r = (math.radians(v) for v in (pitch, yaw, roll))
    sp, cp, sy, cy, sr, cr = math.sin(p), math.cos(p), math.sin(y), math.cos(y), math.sin(r), math.cos(r)
    x_axis = (cp * cy, cp * sy, sp)
    y_axis = (sr * sp * cy - cr * sy, sr * sp * sy + cr * cy, -sr * cp)
    z_axis = (-(cr * sp * cy + sr * sy), cy * sr - cr * sp * sy, cr * cp)
    return np.array([x_axis, y_axis, z_axis]).T


def box_corners(size, scale: float) -> np.ndarray:
    sx, sy, sz = (v * scale for v in size)
    return np.array([[x, y, z] for x in (-sx / 2, sx / 2) for y in (-sy / 2, sy / 2) for z in (0.0, sz)])


def convex_hull(points: np.ndarray) -> np.ndarray:
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
    corners = box_corners(size_cm, scale) @ ue_rotation_matrix(*rotation).T
    return convex_hull(corners[:, :2] + np.asarray(location[:2], float))


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
