"""Procedural floor textures for the offline renderer (seamless tiles, numpy only, deterministic).

Each texture is a square RGB tile covering ``TILE_CM`` centimetres of floor; the floor mesh repeats it.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

TILE_CM = 120.0
SIZE = 512


def _noise(rng: np.random.Generator, size: int, cells: int) -> np.ndarray:
    """Smooth tileable value noise in [0, 1] (bilinear upsampling of a periodic random grid)."""
    grid = rng.random((cells, cells))
    coords = np.arange(size) * cells / size
    i0 = np.floor(coords).astype(int)
    frac = coords - i0
    frac = frac * frac * (3 - 2 * frac)
    i1 = (i0 + 1) % cells
    rows0 = grid[i0][:, i0] * (1 - frac)[None, :] + grid[i0][:, i1] * frac[None, :]
    rows1 = grid[i1][:, i0] * (1 - frac)[None, :] + grid[i1][:, i1] * frac[None, :]
    return rows0 * (1 - frac)[:, None] + rows1 * frac[:, None]


def _fractal(rng: np.random.Generator, size: int, octaves=(4, 8, 16, 64)) -> np.ndarray:
    total = sum(_noise(rng, size, c) / (k + 1) for k, c in enumerate(octaves))
    total -= total.min()
    return total / max(total.max(), 1e-9)


def _mix(a, b, t: np.ndarray) -> np.ndarray:
    a, b = np.asarray(a, float), np.asarray(b, float)
    return a[None, None, :] * (1 - t[..., None]) + b[None, None, :] * t[..., None]


def wood_planks(size: int = SIZE) -> np.ndarray:
    rng = np.random.default_rng(11)
    planks = 6
    y, x = np.mgrid[0:size, 0:size] / size
    row = np.floor(y * planks).astype(int)
    shade = rng.uniform(0.75, 1.1, planks)[row]
    offset = rng.random(planks)[row]
    grain = np.sin((x * 40 + _noise(rng, size, 8) * 6 + offset * 10) * np.pi) * 0.5 + 0.5
    base = _mix((120, 72, 38), (176, 118, 66), grain * 0.6 + _fractal(rng, size) * 0.4) * shade[..., None]
    seam_y = (y * planks) % 1.0
    seam_x = (x + offset * 0.5) % 0.5
    seam = (seam_y < 0.025) | (seam_x < 0.006)
    base[seam] *= 0.45
    return np.clip(base, 0, 255).astype(np.uint8)


def checker_tiles(size: int = SIZE) -> np.ndarray:
    rng = np.random.default_rng(12)
    tiles = 8
    y, x = np.mgrid[0:size, 0:size] / size
    check = (np.floor(x * tiles) + np.floor(y * tiles)) % 2
    base = _mix((235, 232, 222), (60, 62, 70), check)
    base *= (0.92 + 0.08 * _fractal(rng, size))[..., None]
    grout = ((x * tiles) % 1.0 < 0.03) | ((y * tiles) % 1.0 < 0.03)
    base[grout] = (170, 170, 165)
    return np.clip(base, 0, 255).astype(np.uint8)


def carpet(size: int = SIZE) -> np.ndarray:
    rng = np.random.default_rng(13)
    fibres = rng.random((size, size))
    base = _mix((110, 30, 40), (165, 55, 60), 0.6 * _fractal(rng, size) + 0.4 * fibres)
    y, x = np.mgrid[0:size, 0:size] / size
    border = (np.abs(((x * 2) % 1.0) - 0.5) > 0.47) | (np.abs(((y * 2) % 1.0) - 0.5) > 0.47)
    base[border] = base[border] * 0.5 + np.array([200, 160, 70]) * 0.5
    return np.clip(base, 0, 255).astype(np.uint8)


def concrete(size: int = SIZE) -> np.ndarray:
    rng = np.random.default_rng(14)
    base = _mix((120, 120, 118), (185, 183, 178), _fractal(rng, size, (4, 16, 64, 128)))
    speckle = rng.random((size, size)) < 0.01
    base[speckle] *= 0.6
    y, x = np.mgrid[0:size, 0:size] / size
    joints = (x % 0.5 < 0.004) | (y % 0.5 < 0.004)
    base[joints] *= 0.6
    return np.clip(base, 0, 255).astype(np.uint8)


def marble(size: int = SIZE) -> np.ndarray:
    rng = np.random.default_rng(15)
    y, x = np.mgrid[0:size, 0:size] / size
    veins = np.abs(np.sin((x * 3 + y * 2 + _fractal(rng, size) * 2.5) * np.pi * 2)) ** 0.25
    base = _mix((95, 100, 110), (236, 234, 230), veins)
    tiles = 4
    joint = ((x * tiles) % 1.0 < 0.008) | ((y * tiles) % 1.0 < 0.008)
    base[joint] = (140, 140, 140)
    return np.clip(base, 0, 255).astype(np.uint8)


def grass(size: int = SIZE) -> np.ndarray:
    rng = np.random.default_rng(16)
    blades = rng.random((size, size))
    base = _mix((45, 95, 35), (115, 165, 60), 0.5 * _fractal(rng, size) + 0.5 * blades)
    return np.clip(base, 0, 255).astype(np.uint8)


#: Procedural floor name -> texture builder. Asset files refer to these as ``procedural:<name>``.
PROCEDURAL_FLOORS: dict[str, Callable[..., np.ndarray]] = {
    fn.__name__: fn for fn in (wood_planks, checker_tiles, carpet, concrete, marble, grass)
}
