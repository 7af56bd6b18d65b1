"""Benchmark of `commonlink ingest`: re-run speed, near-duplicate search, memory against photo count.

    .venv/bin/python benchmarks/bench_ingest.py [--photos 120] [--width 2016] [--height 1512] [--index 100000]

1. Writes ``--photos`` phone-sized JPEGs (EXIF with GPS and orientation) and a manifest, then times
   * the first ingest (decode, orient, strip, encode, hash: the baseline every later run is compared to),
   * a re-run with nothing changed (the fast path: one ``stat`` a photo, no hashing, no decoding),
   * a re-run after every file's modification time changed (each photo hashed, none decoded).
   Targets: the unchanged re-run at least 20x faster than the first ingest, the touched re-run at least 3x.
2. Near-duplicate search: finding the closest of ``--index`` stored 64-bit perceptual hashes with the vectorised
   index, against the obvious loop over ``imagehash`` objects (``a - b``), measured on the same hashes.
3. Peak resident memory of a fresh process ingesting N vs 2N photos (target: within 1.3x; one photo at a time).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import resource
import subprocess
from pathlib import Path

import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from commonlink.catalog.ingest import PerceptualHashIndex, ingest_photos  # noqa: E402


def make_photos(folder: Path, n: int, size: tuple[int, int], seed: int = 0) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    w, h = size
    lines = ["file,objects,scene"]
    for i in range(n):
        blocks = (rng.random((h // 64 + 1, w // 64 + 1, 3)) * 255).astype(np.uint8)
        img = Image.fromarray(blocks).resize((w, h), Image.BILINEAR)
        exif = Image.Exif()
        exif[0x0112] = 6 if i % 2 else 1
        exif[0x8825] = {1: "N", 2: (48.0, 51.0, float(i % 60)), 3: "E", 4: (2.0, 17.0, 40.0)}
        img.save(folder / f"IMG_{i:05d}.jpg", quality=90, exif=exif)
        lines.append(f"IMG_{i:05d}.jpg,apple;keys;object {i % 7},scene-{i // 4}")
    manifest = folder.parent / f"{folder.name}.csv"
    manifest.write_text("\n".join(lines) + "\n")
    return manifest


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def bench_reruns(tmp: Path, n: int, size: tuple[int, int]) -> None:
    photos = tmp / "photos"
    manifest = make_photos(photos, n, size)
    out = tmp / "catalog"
    first, report = timed(lambda: ingest_photos(photos, manifest, out))
    assert len(report.added) == n, report.counts()
    unchanged, report = timed(lambda: ingest_photos(photos, manifest, out))
    assert report.unchanged == n
    for path in photos.iterdir():
        os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 1_000_000_000))
    touched, report = timed(lambda: ingest_photos(photos, manifest, out))
    assert report.unchanged == n and not report.added
    print(f"[re-run] {n} photos of {size[0]}x{size[1]}")
    print(f"  first ingest (baseline)      {first:8.2f} s  ({n / first:6.1f} photos/s)")
    print(f"  re-run, nothing changed      {unchanged:8.3f} s  -> {first / unchanged:6.1f}x faster (target >= 20x)")
    print(f"  re-run, mtimes changed       {touched:8.3f} s  -> {first / touched:6.1f}x faster (target >= 3x)")


def bench_index(n: int) -> None:
    import imagehash

    rng = np.random.default_rng(1)
    values = rng.integers(0, 2**64, size=n, dtype=np.uint64)
    hexes = [f"{int(v):016x}" for v in values]
    index = PerceptualHashIndex()
    for i, h in enumerate(hexes):
        index.add(h, f"f{i}", f"id{i}")
    queries = hexes[:20]
    fast, found = timed(lambda: [index.nearest(q) for q in queries])
    objects = [imagehash.hex_to_hash(h) for h in hexes]
    baseline_queries = queries[:2]
    slow, expected = timed(lambda: [min(range(n), key=lambda j: objects[j] - imagehash.hex_to_hash(q)) for q in baseline_queries])
    assert [f[0] for f in found[:2]] == [0, 0] and expected == [0, 1]
    per_fast, per_slow = fast / len(queries), slow / len(baseline_queries)
    print(f"[near-duplicate search] closest of {n:,} hashes")
    print(f"  vectorised index  {per_fast * 1e3:8.2f} ms a query")
    print(f"  imagehash loop    {per_slow * 1e3:8.2f} ms a query (baseline) -> {per_slow / per_fast:6.1f}x faster")


def bench_memory(tmp: Path, n: int, size: tuple[int, int]) -> None:
    """Peak resident memory of a fresh process ingesting N, then 2N photos (Pillow's buffers included)."""
    peaks = []
    for count in (n, 2 * n):
        photos = tmp / f"mem{count}"
        manifest = make_photos(photos, count, size, seed=count)
        child = subprocess.run([sys.executable, __file__, "--memory-child", str(photos), str(manifest), str(tmp / f"cat{count}")],
                               check=True, capture_output=True, text=True)
        peaks.append(int(child.stdout.strip().splitlines()[-1]))
    print(f"[memory] peak RSS: {n} photos {peaks[0] / 2**10:.0f} MiB, {2 * n} photos {peaks[1] / 2**10:.0f} MiB "
          f"-> ratio {peaks[1] / peaks[0]:.2f} (target <= 1.3)")


def memory_child(photos: str, manifest: str, out: str) -> None:
    ingest_photos(photos, manifest, out)
    print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)  # KiB on Linux


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--photos", type=int, default=120)
    parser.add_argument("--width", type=int, default=2016)
    parser.add_argument("--height", type=int, default=1512)
    parser.add_argument("--index", type=int, default=100_000)
    parser.add_argument("--memory-child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_child:
        memory_child(*args.memory_child)
        return
    size = (args.width, args.height)
    with tempfile.TemporaryDirectory() as tmp:
        bench_reruns(Path(tmp), args.photos, size)
        bench_index(args.index)
        bench_memory(Path(tmp), max(10, args.photos // 6), size)


if __name__ == "__main__":
    main()
