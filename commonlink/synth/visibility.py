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


def object_pixel_counts(instance: np.ndarray, n_objects: int) -> np.ndarray:
    """Visible pixels of each of a plan's ``n_objects`` objects in one instance mask (entry k: id k + 1)."""
    return np.bincount(instance.ravel().astype(np.int64), minlength=n_objects + 1)[1 : n_objects + 1]


def object_areas(instance: np.ndarray, names: Sequence[str], min_pixels: int) -> dict[str, float]:
    """{name: fraction of the image} for every object with at least ``min_pixels`` visible pixels."""
    counts = object_pixel_counts(instance, len(names))
    total = float(instance.size)
    return {name: round(float(count) / total, 6) for name, count in zip(names, counts) if count >= min_pixels}


def hidden_share(instances: Sequence[np.ndarray], n_objects: int, min_pixels: int) -> float:
    """Share of (object, view) pairs in which the object is not visible enough (0 = all seen everywhere)."""
    if n_objects == 0 or not instances:
        return 0.0
    hidden = 0
    for instance in instances:
        hidden += int((object_pixel_counts(instance, n_objects) < min_pixels).sum())
    return hidden / (n_objects * len(instances))


def band_counts(instances: Sequence[np.ndarray], n_objects: int, band: tuple[float, float]) -> tuple[int, int]:
    """(pairs inside ``band``, all pairs) over the (object, view) pairs of a scene's instance masks; an object's
    area is its visible pixels over the image's."""
    inside = 0
    low, high = band
    for instance in instances:
        area = object_pixel_counts(instance, n_objects) / instance.size
        inside += int(((area >= low) & (area <= high)).sum())
    return inside, n_objects * len(instances)


def instance_ids_from_colors(mask_rgb: np.ndarray, colors: Sequence[Sequence[int]], tolerance: int = 3) -> np.ndarray:
    """Instance ids (k + 1 for ``colors[k]``) from an RGB object mask: each pixel takes the nearest colour
    (largest channel difference) when it is within ``tolerance``; pixels matching no colour get 0."""
    rgb = mask_rgb[..., :3]
    packed = (rgb[..., 0].astype(np.int32) << 16) | (rgb[..., 1].astype(np.int32) << 8) | rgb[..., 2]
    # A lookup table over all 2^24 colours: zeroed lazily by the OS, only the entries near the object colours
    # are written, so it costs little, and mapping the image is a single gather.
    lut = np.zeros(1 << 24, dtype=np.uint16)
    steps = np.arange(-tolerance, tolerance + 1)
    offsets = np.stack(np.meshgrid(steps, steps, steps, indexing="ij"), axis=-1).reshape(-1, 3)
    distance = np.abs(offsets).max(axis=1)
    for d in range(tolerance, -1, -1):  # farthest shell first, so nearer colours overwrite
        shell = offsets[distance == d]
        for k, color in enumerate(colors):
            near = np.asarray(color, dtype=np.int32)[None, :] + shell
            near = near[((near >= 0) & (near <= 255)).all(axis=1)]
            lut[(near[:, 0] << 16) | (near[:, 1] << 8) | near[:, 2]] = k + 1
    return lut[packed]
