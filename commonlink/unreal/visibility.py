"""Which objects an image shows, from its instance mask.

An object counts as present only when at least ``min_pixels`` of it are visible; its area is the fraction of
the image it covers. Masks hold instance ids (0 = floor/background, k + 1 = the plan's k-th object). Masks
from Unreal come as colours that are not exact: :func:`instance_ids_from_colors` maps them to ids with a
tolerance.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

#: Default pixel threshold: 0.05% of the image, at least 16 pixels (131 px at 512x512).
MIN_VISIBLE_FRACTION = 0.0005
MIN_VISIBLE_FLOOR = 16


def default_min_visible_pixels(width: int, height: int) -> int:
    return max(MIN_VISIBLE_FLOOR, round(MIN_VISIBLE_FRACTION * width * height))


def object_areas(instance: np.ndarray, names: Sequence[str], min_pixels: int) -> dict[str, float]:
    """{name: fraction of the image} for every object with at least ``min_pixels`` visible pixels."""
    counts = np.bincount(instance.ravel().astype(np.int64), minlength=len(names) + 1)
    total = float(instance.size)
    return {
        name: round(float(counts[k + 1]) / total, 6)
        for k, name in enumerate(names)
        if counts[k + 1] >= min_pixels
    }


def hidden_share(instances: Sequence[np.ndarray], n_objects: int, min_pixels: int) -> float:
    """Share of (object, view) pairs in which the object is not visible enough (0 = all seen everywhere)."""
    if n_objects == 0 or not instances:
        return 0.0
    hidden = 0
    for instance in instances:
        counts = np.bincount(instance.ravel().astype(np.int64), minlength=n_objects + 1)
        hidden += int((counts[1 : n_objects + 1] < min_pixels).sum())
    return hidden / (n_objects * len(instances))


def instance_ids_from_colors(mask_rgb: np.ndarray, colors: Sequence[Sequence[int]], tolerance: int = 3) -> np.ndarray:
    """Instance ids (k + 1 for ``colors[k]``) from an RGB object mask, matching each channel within
    ``tolerance``; pixels matching no colour (or the background) get 0."""
    rgb = mask_rgb[..., :3].astype(np.int16)
    ids = np.zeros(rgb.shape[:2], dtype=np.uint16)
    best = np.full(rgb.shape[:2], tolerance + 1, dtype=np.int16)
    for k, color in enumerate(colors):
        diff = np.abs(rgb - np.asarray(color, dtype=np.int16)[None, None, :]).max(axis=2)
        closer = diff < best
        ids[closer & (diff <= tolerance)] = k + 1
        best = np.minimum(best, diff)
    return ids
