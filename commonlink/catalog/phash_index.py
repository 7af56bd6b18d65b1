"""Near-duplicate search for ingest: the nearest stored 64-bit perceptual hash by Hamming distance."""

from __future__ import annotations

import numpy as np


class PerceptualHashIndex:
    """64-bit perceptual hashes of accepted images; finds the nearest one by Hamming distance (vectorised).

    A query is one XOR + popcount pass over the stored hashes and one argmin (uint8 distances, no copies);
    removed entries are masked only while there are any, and the live count is kept, not recounted.
    """

    def __init__(self) -> None:
        self._hashes = np.zeros(64, dtype=np.uint64)
        self._alive = np.zeros(64, dtype=bool)
        self._owners: list[tuple[str, str]] = []  # (file, id), by slot
        self._slot: dict[str, int] = {}  # id -> slot
        self._removed = 0  # slots in _owners no longer alive
        self._xor = np.empty(0, dtype=np.uint64)
        self._distances = np.empty(0, dtype=np.uint8)

    def __len__(self) -> int:
        return len(self._owners) - self._removed

    def add(self, phash: str, file: str, image_id: str) -> None:
        if len(self._owners) == len(self._hashes):
            self._hashes = np.concatenate([self._hashes, np.zeros_like(self._hashes)])
            self._alive = np.concatenate([self._alive, np.zeros_like(self._alive)])
        if image_id in self._slot:  # re-added under the same id: the old slot goes
            self.remove(image_id)
        slot = len(self._owners)
        self._hashes[slot] = np.uint64(int(phash, 16))
        self._alive[slot] = True
        self._owners.append((file, image_id))
        self._slot[image_id] = slot

    def remove(self, image_id: str) -> None:
        slot = self._slot.pop(image_id, None)
        if slot is not None:
            self._alive[slot] = False
            self._removed += 1

    def nearest(self, phash: str, exclude: str | None = None) -> tuple[int, str, str] | None:
        """(distance, file, id) of the closest stored hash (other than id ``exclude``), or None when empty."""
        if not len(self) or (len(self) == 1 and exclude in self._slot):
            return None
        used = len(self._owners)
        if len(self._xor) < used:  # scratch buffers reused across queries: no allocation per query
            self._xor = np.empty(len(self._hashes), dtype=np.uint64)
            self._distances = np.empty(len(self._hashes), dtype=np.uint8)
        xor = np.bitwise_xor(self._hashes[:used], np.uint64(int(phash, 16)), out=self._xor[:used])
        if hasattr(np, "bitwise_count"):
            distances = np.bitwise_count(xor, out=self._distances[:used])  # uint8
        else:  # numpy < 2.0
            distances = np.unpackbits(xor.view(np.uint8).reshape(-1, 8), axis=1).sum(axis=1, dtype=np.uint8)
        if self._removed:
            distances[~self._alive[:used]] = 65  # removed entries never match
        if exclude in self._slot:
            distances[self._slot[exclude]] = 65
        best = int(distances.argmin())
        return int(distances[best]), *self._owners[best]


__all__ = ["PerceptualHashIndex"]
