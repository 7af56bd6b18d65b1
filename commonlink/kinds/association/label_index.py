"""The image table of an association build as label ids: per-label pools, membership vectors and packed label
sets for overlap tests of many pairs at once, and the images no disjoint negative exists for."""

from __future__ import annotations

import difflib
from collections.abc import Sequence

import numpy as np

from commonlink.errors import SchemaError
from commonlink.kinds.association.format import LabelledImage
from commonlink.seeding import rng_for


class LabelIndex:
    """Images sorted by id, their labels as ids, and per-label membership (the pools)."""

    def __init__(self, images: Sequence[LabelledImage]):
        by_id: dict[str, LabelledImage] = {}
        for img in images:
            if img.id in by_id:
                raise SchemaError(f"Two samples have the same id {img.id!r}.", "Make the source's image names unique.")
            by_id[img.id] = img
        self.images: list[LabelledImage] = [by_id[k] for k in sorted(by_id)]
        self.label_names: list[str] = sorted({label for img in self.images for label in img.labels})
        self.label_id = {name: i for i, name in enumerate(self.label_names)}
        members: list[list[int]] = [[] for _ in self.label_names]
        for i, img in enumerate(self.images):
            for label in dict.fromkeys(img.labels):
                members[self.label_id[label]].append(i)
        self._members = [np.asarray(m, dtype=np.int32) for m in members]
        self._has: dict[str, np.ndarray] = {}
        self._bits: np.ndarray | None = None
        self._digits: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.images)

    def pool(self, concept: str) -> np.ndarray:
        """Indices of the images labelled ``concept`` (sorted)."""
        return self._members[self.label_id[concept]] if concept in self.label_id else np.zeros(0, dtype=np.int32)

    def digits(self) -> np.ndarray:
        """``str(i)`` for every image index (at least 0 and 1), as an object array: integer arrays to text by lookup."""
        if self._digits is None:
            self._digits = np.array([str(i) for i in range(max(2, len(self.images)))], dtype=object)
        return self._digits

    def pool_sizes(self) -> dict[str, int]:
        return {name: len(m) for name, m in zip(self.label_names, self._members)}

    def has(self, concept: str) -> np.ndarray:
        """Boolean membership vector of ``concept`` over all images."""
        mask = self._has.get(concept)
        if mask is None:
            mask = np.zeros(len(self.images), dtype=bool)
            mask[self.pool(concept)] = True
            self._has[concept] = mask
        return mask

    def both(self, a: str, b: str) -> np.ndarray:
        return np.flatnonzero(self.has(a) & self.has(b)).astype(np.int32)

    def without(self, concepts: Sequence[str]) -> np.ndarray:
        """Indices of the images carrying none of ``concepts`` (the negative pool of a task)."""
        mask = np.zeros(len(self.images), dtype=bool)
        for concept in concepts:
            mask |= self.has(concept)
        return np.flatnonzero(~mask).astype(np.int32)

    def label_bits(self) -> np.ndarray:
        """Packed label sets: one uint64 per image when there are at most 64 labels (an overlap test is one
        AND), else images x ceil(labels/64) uint64 words. For overlap tests of many pairs at once."""
        if self._bits is None:
            if len(self.label_names) <= 64:
                bits = np.zeros(len(self.images), dtype=np.uint64)
                for lid, members in enumerate(self._members):
                    bits[members] |= np.uint64(1) << np.uint64(lid)
            else:
                bits = np.zeros((len(self.images), (len(self.label_names) + 63) // 64), dtype=np.uint64)
                for lid, members in enumerate(self._members):
                    bits[members, lid // 64] |= np.uint64(1) << np.uint64(lid % 64)
            self._bits = bits
        return self._bits

    def share_any_label(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Per pair (a[i], b[i]): whether the two images share a label."""
        bits = self.label_bits()
        if bits.ndim == 1:
            return (bits[a] & bits[b]) != 0
        return (bits[a] & bits[b]).any(axis=1)

    def shares_with_all(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Per image of ``a``: whether it shares a label with every image of ``b`` (in blocks of about 4M tests)."""
        bits = self.label_bits()
        out = np.empty(len(a), dtype=bool)
        rows = max(1, (1 << 22) // max(1, len(b) * (1 if bits.ndim == 1 else bits.shape[1])))
        for lo in range(0, len(a), rows):
            block = bits[a[lo : lo + rows]][:, None] & bits[b][None, :]
            out[lo : lo + rows] = (block != 0).all(axis=1) if bits.ndim == 1 else block.any(axis=2).all(axis=1)
        return out

    def suggest(self, name: str) -> list[str]:
        return difflib.get_close_matches(name, self.label_names, n=3, cutoff=0.6)


def without_disjoint_negative(
    index: LabelIndex, candidates: np.ndarray | None = None, negatives: np.ndarray | None = None
) -> np.ndarray:
    """Indices among ``candidates`` (default: every image) that share a label with every image of ``negatives``
    (default: every image), so no disjoint negative exists for them there (paper eq. 1). With the defaults these
    are the images that share a label with every other image: by symmetry they can be no one's negative either.

    A seeded sample of ``negatives`` first, all candidates at once (almost every image finds a disjoint one
    there); then all of ``negatives``, once per distinct label set of the candidates the sample did not clear."""
    candidates = np.arange(len(index)) if candidates is None else np.asarray(candidates)
    negatives = np.arange(len(index)) if negatives is None else np.asarray(negatives)
    sample = negatives[rng_for(0, "disjoint-check").permutation(len(negatives))[:256]]
    by_labels: dict[tuple[str, ...], list[int]] = {}
    for i in candidates[index.shares_with_all(candidates, sample)].tolist():
        by_labels.setdefault(tuple(sorted(set(index.images[i].labels))), []).append(i)
    lonely: list[int] = []
    for members in by_labels.values():
        if index.shares_with_all(np.asarray(members[:1]), negatives)[0]:
            lonely.extend(members)
    return np.asarray(sorted(lonely), dtype=np.int64)
