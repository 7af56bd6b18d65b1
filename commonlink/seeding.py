"""Seeded randomness: one independent generator per (global seed, task key).

Deriving a generator from the global seed *and* the index of the unit of work (a scene, a chain, an example)
lets any unit be redone alone and makes results independent of worker count and execution order.
"""

from __future__ import annotations

import hashlib

import numpy as np


def _key_to_int(key: object) -> int:
    if isinstance(key, (int, np.integer)) and key >= 0:
        return int(key)
    # Stable across processes and Python versions (unlike hash()).
    return int.from_bytes(hashlib.sha256(str(key).encode("utf-8")).digest()[:8], "little")


def rng_for(seed: int, *keys: object) -> np.random.Generator:
    """A numpy Generator determined only by ``seed`` and ``keys`` (e.g. ``rng_for(seed, "scene", 12)``)."""
    return np.random.default_rng(np.random.SeedSequence([int(seed) & 0xFFFFFFFFFFFFFFFF, *map(_key_to_int, keys)]))
