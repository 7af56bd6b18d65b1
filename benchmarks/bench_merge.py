"""Benchmark of `commonlink catalog merge` against `cp -r` of the same folders.

    .venv/bin/python benchmarks/bench_merge.py [--quick] [--json ROWS] [--shards 10] [--images 200] [--repeats 9]

``--shards`` catalogs of ``--images`` photos each are made with ``commonlink ingest`` (64x48 noise PNGs; ingest
records each image's file stamp). Then, interleaved (A B, B A, ...) ``--repeats`` times, with the output removed
before each run (untimed):

* ours: ``merge_catalogs(shards, out)`` in this process: plan (read every record, de-duplicate, check conflicts),
  copy every image atomically (temporary name + rename), verification by the recorded sha256 where the file
  stamp is unchanged, one fsync batch, ``catalog.jsonl`` written atomically;
* peer: ``cp -r shard_0 ... shard_N out/`` (no checks, no fsync, no merged catalog: a floor, not a competitor);
* context (no target): ours with ``rehash=True`` (every image hashed while copied).

Target: ours at most 5x the time of ``cp -r`` (median over the rounds of each round's ratio); as every ratio in the
table, the row's ratio is oriented so that above 1 is better for commonlink: ``cp -r`` time / our time, target >= 0.2.
Python's start-up and imports are not counted on our side (``cp`` is a ~1 ms process start); the CLI adds about a
second of imports on this machine.
"""

from __future__ import annotations

import _common  # noqa: F401  (puts the repository root on sys.path)

# isort: split

import argparse
import shutil
import statistics
import subprocess
import tempfile
from pathlib import Path

import numpy as np
from PIL import Image

from _common import interleaved, load_average, spread
from _results import add_contract_arguments, print_rows, result_row, write_rows

BENCH = "bench_merge.py"


def make_shards(root: Path, shards: int, images: int) -> list[Path]:
    from commonlink.catalog.ingest import ingest_photos

    folders = []
    rng = np.random.default_rng(0)
    for s in range(shards):
        photos = root / f"photos_{s}"
        photos.mkdir(parents=True)
        lines = ["file,objects,scene"]
        for i in range(images):
            blocks = (rng.random((6, 8, 3)) * 255).astype(np.uint8)
            Image.fromarray(blocks).resize((64, 48), Image.NEAREST).save(photos / f"IMG_{i:04d}.png")
            lines.append(f"IMG_{i:04d}.png,apple;object {i % 9},scene-{s}-{i // 4}")
        manifest = root / f"labels_{s}.csv"
        manifest.write_text("\n".join(lines) + "\n")
        shard = root / f"shard_{s}"
        report = ingest_photos(photos, manifest, shard, min_pixels=1, allow_near_duplicates=True)
        assert len(report.added) == images, report.counts()
        folders.append(shard)
    return folders


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, default=10)
    parser.add_argument("--images", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=9)
    add_contract_arguments(parser)
    args = parser.parse_args()
    if args.quick:
        args.repeats = 3
    from commonlink.catalog.merge import merge_catalogs
    from commonlink.formats.catalog import read_catalog

    with tempfile.TemporaryDirectory(prefix="bench-merge-") as tmp:
        tmp = Path(tmp)
        shards = make_shards(tmp, args.shards, args.images)
        total = args.shards * args.images
        outs = {"ours": tmp / "merged", "rehash": tmp / "merged_rehash", "cp": tmp / "copied"}

        def ours() -> None:
            report = merge_catalogs(shards, outs["ours"])
            assert report.added == total and report.hashes_reused == total, report

        def rehash() -> None:
            report = merge_catalogs(shards, outs["rehash"], rehash=True)
            assert report.added == total and report.hashes_reused == 0, report

        def cp() -> None:
            outs["cp"].mkdir()
            subprocess.run(["cp", "-r", *map(str, shards), str(outs["cp"])], check=True)

        def clear(name: str) -> None:
            shutil.rmtree(outs[name], ignore_errors=True)

        loads = [load_average()]
        times = interleaved({"ours": ours, "cp": cp, "rehash": rehash}, args.repeats, before=clear)
        loads.append(load_average())
        assert len(read_catalog(outs["ours"])) == total
    note = f"load {min(loads):.1f}-{max(loads):.1f}"
    # Paired by round (each round runs every side back to back), then the median: a burst of someone else's disk
    # traffic then weighs on one round's pair, not on one side's median.
    slower = statistics.median(o / c for o, c in zip(times["ours"], times["cp"]))
    slower_rehash = statistics.median(o / c for o, c in zip(times["rehash"], times["cp"]))
    print(f"[merge] {args.shards} shards x {args.images} images, {args.repeats} interleaved runs each ({note})")
    for name, label in (
        ("ours", "catalog merge (hashes reused)"),
        ("rehash", "catalog merge --rehash"),
        ("cp", "cp -r"),
    ):
        print(f"  {label:32s} {spread(times[name])}")
    print(
        f"  -> ours takes {slower:.2f}x the time of cp -r (median of the rounds' ratios; target <= 5); --rehash "
        f"{slower_rehash:.2f}x (context); fastest run against fastest run: {min(times['ours']) / min(times['cp']):.2f}x"
    )
    figure = f"catalog merge, {args.shards} shards x {args.images} images"
    median = sorted(times["ours"])[len(times["ours"]) // 2]
    rows = [
        result_row(
            BENCH,
            f"{figure}; ratio = cp -r time / ours, so >= 0.2 is at most 5x cp -r ({note})",
            median,
            "s",
            peer="cp -r of the same shard folders (interleaved)",
            ratio=1 / slower,
            target=">= 0.2",
        ),
        result_row(
            BENCH,
            f"{figure}, --rehash ({note})",
            sorted(times["rehash"])[len(times["rehash"]) // 2],
            "s",
            peer="context only: cp -r (every image hashed while copied)",
            ratio=1 / slower_rehash,
        ),
    ]
    print_rows(rows)
    write_rows(args.json, rows)


if __name__ == "__main__":
    main()
