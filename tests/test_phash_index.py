"""PerceptualHashIndex (near-duplicate check of ingest): nearest by Hamming distance, removals, re-adds."""

from __future__ import annotations

import numpy as np

from commonlink.catalog.ingest import PerceptualHashIndex


def test_nearest_matches_a_brute_force_scan_with_removals_and_readds():
    rng = np.random.default_rng(3)
    hashes = [int(v) for v in rng.integers(0, 2**62, size=300)]
    index = PerceptualHashIndex()
    assert index.nearest("0" * 16) is None
    for i, h in enumerate(hashes):
        index.add(f"{h:016x}", f"f{i}", f"id{i}")
    alive = dict(enumerate(hashes))
    for i in range(0, 300, 7):
        index.remove(f"id{i}")
        del alive[i]
    index.add(f"{hashes[1] ^ 1:016x}", "f1-new", "id1")  # re-added under its id: the old hash must not linger
    alive[1] = hashes[1] ^ 1
    assert len(index) == len(alive)
    for q in [*(hashes[j] ^ (1 << 5) for j in range(0, 300, 13)), *(int(v) for v in rng.integers(0, 2**62, size=20))]:
        distance, file, image_id = index.nearest(f"{q:016x}")
        best = min((bin(h ^ q).count("1"), j) for j, h in alive.items())
        assert distance == best[0] and bin(alive[int(image_id[2:])] ^ q).count("1") == best[0]
    assert index.nearest(f"{hashes[1]:016x}")[0] == 1 and index.nearest(f"{hashes[1]:016x}")[1] == "f1-new"
    assert index.nearest(f"{hashes[0]:016x}")[0] > 0  # removed: its exact hash is no longer found
    distance, _, image_id = index.nearest(f"{hashes[2]:016x}", exclude="id2")
    assert image_id != "id2" and distance > 0
