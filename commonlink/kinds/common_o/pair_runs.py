"""What both pair searches work on: a source's images as object lists, and the pairs of sorted runs of entries."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: (object, pair) entries listed at a time when finding a block's pairs that share objects: ~8 bytes of
#: temporaries each; a block of images with much in common lists millions (the distinct pairs are far fewer).
PAIR_CHUNK = 1 << 17


@dataclass
class SourceImages:
    """The eligible images of one source: object ids (CSR) and integer scene codes."""

    obj_ptr: np.ndarray  #: int64, m + 1
    obj_ids: np.ndarray  #: int32, sorted per image
    scene: np.ndarray  #: int64, m

    @property
    def m(self) -> int:
        return len(self.scene)


def run_pairs(keys: np.ndarray, local: np.ndarray, b: int, count_dtype=np.int64) -> tuple[np.ndarray, np.ndarray]:
    """Every pair of entries of one run of ``keys`` (sorted by key, then ``local``: indices below ``b``), as sorted
    codes ``i * b + j`` (i < j) and how many runs list each pair. Listed for a range of first indices at a time
    (about PAIR_CHUNK (run, pair) entries), so memory is the distinct pairs plus one chunk, however long the runs.
    int32 codes while ``b * b`` fits (a block), int64 beyond (a whole source)."""
    dtype = np.int32 if b * b < 2**31 else np.int64
    local = local.astype(dtype, copy=False)
    entries = np.arange(len(keys), dtype=dtype)
    # every entry pairs with the later entries of its run (same key, larger index)
    later = np.searchsorted(keys, keys, side="right").astype(dtype) - entries - 1
    per_first = np.cumsum(np.bincount(local, weights=later, minlength=b))  # (run, pair) entries up to index i
    n_chunks = max(1, -(-int(per_first[-1]) // PAIR_CHUNK)) if b else 1
    cuts = np.searchsorted(per_first, np.arange(1, n_chunks) * (per_first[-1] / n_chunks)).tolist() if b else []
    codes, counts = [], []
    for lo, hi in zip([0, *cuts], [*cuts, b]):
        chosen = (local >= lo) & (local < hi) if n_chunks > 1 else slice(None)
        runs = later[chosen]
        first = np.repeat(local[chosen], runs)
        offsets = np.arange(len(first), dtype=dtype) - np.repeat(np.cumsum(runs, dtype=dtype) - runs, runs)
        second = local[np.repeat(entries[chosen] + 1, runs) + offsets]
        del offsets
        # chunks cover increasing first indices, so their sorted codes concatenate in order
        chunk_codes, chunk_counts = np.unique(first * dtype(b) + second, return_counts=True)
        codes.append(chunk_codes)
        counts.append(chunk_counts.astype(count_dtype, copy=False))
    if len(codes) == 1:
        return codes[0], counts[0]
    return np.concatenate(codes), np.concatenate(counts)
