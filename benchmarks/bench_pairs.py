"""Benchmark of `commonlink pairs`: speed against naive rejection sampling, and memory against catalog size.

    .venv/bin/python benchmarks/bench_pairs.py [--images 20000] [--count 10000] [--baseline-seconds 20]

1. Writes a synthetic catalog (valid records and a 1x1 PNG per image; 4 views per scene, 3-7 objects from a
   129-name vocabulary, scenes built from themed object groups so that large overlaps exist, 45% real).
2. Times ``sample_pairs`` for ``--count`` main-split examples (end to end: both catalog passes, file checks,
   rows) and a naive baseline in the same run: for each example the same balanced k, then random pairs of the
   same source until one has exactly k common objects, different scenes, an unused pair and images under the
   cap (at most 20,000 draws an example; the baseline works on records already in memory and builds no rows).
   The baseline stops after ``--baseline-seconds``; its rate is examples found per second.
3. Peak traced memory (tracemalloc) of ``sample_pairs`` on a catalog of 5,000 vs one of 20,000 images, for
   the same number of examples (the ratio is the target: within 1.3x), and for a small request to show the
   per-image cost of the index alone.
"""

from __future__ import annotations

import argparse
import json
import struct
import sys
import tempfile
import time
import tracemalloc
import zlib
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from commonlink.formats.catalog import CatalogRecord, write_catalog  # noqa: E402
from commonlink.sampling.pairs import PairsConfig, auto_max_uses, sample_pairs  # noqa: E402
from commonlink.fileio import sha256_bytes  # noqa: E402

VOCAB = [f"object {i:03d}" for i in range(129)]


def tiny_png(value: int) -> bytes:
    """A valid 1x1 RGB PNG whose colour encodes ``value`` (distinct bytes, so distinct hashes)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    pixel = bytes([0, value & 255, (value >> 8) & 255, (value >> 16) & 255])
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(pixel))
        + chunk(b"IEND", b"")
    )


def make_catalog(folder: Path, n_images: int, seed: int = 0, objects: tuple[int, int] = (3, 7)) -> Path:
    rng = np.random.default_rng(seed)
    groups = [VOCAB[i : i + 14] for i in range(0, len(VOCAB), 14)]
    (folder / "images").mkdir(parents=True, exist_ok=True)
    records = []
    n_scenes = (n_images + 3) // 4
    for s in range(n_scenes):
        source = "real" if s < int(0.45 * n_scenes) else "synthetic"
        size = int(rng.integers(objects[0], objects[1] + 1))
        group = groups[int(rng.integers(len(groups)))]
        # mostly from one themed group (people photograph sets of things together), some from anywhere
        names: set[str] = set()
        while len(names) < size:
            pool = group if rng.random() < 0.7 else VOCAB
            names.add(pool[int(rng.integers(len(pool)))])
        scene_objects = sorted(names)
        for view in range(4):
            i = len(records)
            if i >= n_images:
                break
            visible = list(scene_objects)
            if len(visible) > objects[0] and rng.random() < 0.2:  # one object hidden from this camera
                visible.pop(int(rng.integers(len(visible))))
            data = tiny_png(i)
            rel = f"images/{i:06d}.png"
            (folder / rel).write_bytes(data)
            digest = sha256_bytes(data)
            records.append(
                CatalogRecord(
                    id=digest[:16], path=rel, objects=visible, source=source, scene_id=f"scene-{s:05d}",
                    width=1, height=1, sha256=digest, background="floor", view=str(view),
                )
            )
    write_catalog(folder, records)
    return folder


def naive_baseline(folder: Path, config: PairsConfig, seconds: float, max_draws: int = 20_000) -> tuple[int, float, int]:
    """Rejection sampling of random pairs; returns (examples found, seconds, examples given up)."""
    lo, hi = config.object_range()
    pools: dict[str, list[tuple[frozenset, str]]] = {"real": [], "synthetic": []}
    with open(folder / "catalog.jsonl", encoding="utf-8") as handle:
        for line in handle:
            rec = json.loads(line)
            objs = frozenset(rec["objects"])
            if lo <= len(objs) <= hi:
                pools[rec["source"]].append((objs, rec["scene_id"]))
    rng = np.random.default_rng(config.seed)
    k_max = config.max_common_objects()
    n_real = round(config.count * 0.45)
    found = gave_up = 0
    start = time.perf_counter()
    for name, n in (("real", n_real), ("synthetic", config.count - n_real)):
        pool = pools[name]
        cap = auto_max_uses(n, len(pool))
        uses = [0] * len(pool)
        used_pairs: set[tuple[int, int]] = set()
        for e in range(n):
            if time.perf_counter() - start > seconds:
                return found, time.perf_counter() - start, gave_up
            k = e % (k_max + 1)
            for _ in range(max_draws):
                a, b = int(rng.integers(len(pool))), int(rng.integers(len(pool)))
                pair = (min(a, b), max(a, b))
                if a == b or pool[a][1] == pool[b][1] or pair in used_pairs or uses[a] >= cap or uses[b] >= cap:
                    continue
                if len(pool[a][0] & pool[b][0]) == k:
                    used_pairs.add(pair)
                    uses[a] += 1
                    uses[b] += 1
                    found += 1
                    break
            else:
                gave_up += 1
    return found, time.perf_counter() - start, gave_up


def peak_memory(folder: Path, config: PairsConfig) -> int:
    tracemalloc.start()
    rows, _ = sample_pairs([folder], config)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del rows
    return peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=20_000)
    parser.add_argument("--small-images", type=int, default=5_000)
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--baseline-seconds", type=float, default=20.0)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-pairs-") as tmp:
        t0 = time.perf_counter()
        big = make_catalog(Path(tmp) / "big", args.images, seed=1)
        small = make_catalog(Path(tmp) / "small", args.small_images, seed=2)
        print(f"catalogs written: {args.images} and {args.small_images} images ({time.perf_counter() - t0:.1f} s)")

        config = PairsConfig(split="main", count=args.count, seed=0)
        t0, c0 = time.perf_counter(), time.process_time()
        rows, stats = sample_pairs([big], config)
        ours_s, ours_cpu = time.perf_counter() - t0, time.process_time() - c0
        assert len(rows) == args.count
        ours_rate = len(rows) / ours_s
        print(
            f"\ncommonlink pairs: {len(rows)} examples from {args.images} images in {ours_s:.2f} s "
            f"({ours_cpu:.2f} s CPU) = {ours_rate:,.0f} examples/s ({len(rows) / ours_cpu:,.0f} per CPU second)"
        )
        print(f"  common objects per example: {stats['common_objects']}")
        print(f"  requested:                  {stats['common_objects_requested']}")
        print(f"  image uses max {stats['image_uses_max']}; notes: {len(stats['notes'])}")
        for note in stats["notes"]:
            print(f"   - {note}")

        c0 = time.process_time()
        found, base_s, gave_up = naive_baseline(big, config, args.baseline_seconds)
        base_cpu = time.process_time() - c0
        base_rate = found / base_s if base_s else float("nan")
        print(
            f"naive rejection sampling: {found} examples in {base_s:.2f} s ({base_cpu:.2f} s CPU) = "
            f"{base_rate:,.1f} examples/s ({gave_up} examples given up after 20,000 draws)"
        )
        if found:
            print(
                f"speed-up: {ours_rate / base_rate:,.0f}x wall clock, "
                f"{(len(rows) / ours_cpu) / (found / base_cpu):,.0f}x per CPU second"
            )
        else:
            print("speed-up: the baseline found nothing in its time budget")

        print()
        for label, count in (("same request", args.count), ("small request (index cost)", 500)):
            cfg = PairsConfig(split="main", count=count, seed=0)
            small_peak = peak_memory(small, cfg)
            big_peak = peak_memory(big, cfg)
            print(
                f"peak memory, {label} ({count} examples): {args.small_images} images {small_peak / 2**20:.1f} MiB, "
                f"{args.images} images {big_peak / 2**20:.1f} MiB, ratio {big_peak / small_peak:.2f}x"
                + (" (target <= 1.3x)" if count == args.count else "")
            )


if __name__ == "__main__":
    main()
