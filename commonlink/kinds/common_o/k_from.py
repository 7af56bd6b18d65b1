"""The per-split distribution of common-object counts ``k`` of an existing Common-O split (a release folder, a
parquet file, or a Hub dataset such as the published ``facebook/Common-O``), for ``pairs --k-from``: a new
split sampled with these counts as exact quotas matches that split's k distribution wherever the catalogs
have pairs for every k (docs/sampling.md "Copying a split's k distribution")."""

from __future__ import annotations

import dataclasses
import os

from commonlink.constants import NO_COMMON_OBJECTS
from commonlink.errors import InputError
from commonlink.kinds.common_o.loader import open_common_o
from commonlink.kinds.common_o.pairs import PairsConfig


def k_counts_of(source: str | os.PathLike, split: str, revision: str | None = None) -> list[int]:
    """Examples per k = 0..max of ``split`` of ``source``: k is the number of ground-truth objects of a row (0
    where the answer is "No objects are in common"), read with the Common-O loader (every published list
    encoding; a row it cannot read is an error naming it). Images are not decoded for local splits."""
    data = open_common_o(source, split, revision)
    if not len(data):
        raise InputError(f"--k-from {source}: split {split!r} has no rows.", "Point to a split with examples.")
    counts: list[int] = []
    for i in range(len(data)):
        truth = data.get(i, images=False).ground_truth
        k = len([t for t in truth if t != NO_COMMON_OBJECTS])
        counts += [0] * (k + 1 - len(counts))
        counts[k] += 1
    return counts


def copy_k_distribution(
    config: PairsConfig, source: str | os.PathLike, revision: str | None = None, *, count_given: bool = False
) -> PairsConfig:
    """``config`` with the k counts of ``source``'s split of the same name as exact quotas (``k_counts``), its
    size as ``count`` (unless ``count_given``: then it must equal it) and those counts as the weights any
    shortfall is spread by; ``max_common`` grows to the split's largest k when left unset."""
    counts = k_counts_of(source, config.split, revision)
    k_max = config.max_common if config.max_common is not None else max(config.object_range()[1], len(counts) - 1)
    weights = [*counts, *[0] * (k_max + 1 - len(counts))]
    copied = dataclasses.replace(
        config,
        count=config.count if count_given else sum(counts),
        k_counts=counts,
        k_from=f"{source}{'@' + revision if revision else ''}:{config.split}",
        common_distribution=",".join(map(str, weights)),
        max_common=k_max if config.max_common is not None else None,
    )
    copied.validate()
    return copied


__all__ = ["copy_k_distribution", "k_counts_of"]
