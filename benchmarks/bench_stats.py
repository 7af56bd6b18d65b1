"""Benchmark of `commonlink stats` and the release figures (CPU, no model download).

    .venv/bin/python benchmarks/bench_stats.py [--quick] [--json ROWS] [--masks 120] [--renders 400] [--rows 10000]

1. Mask selection (the SAM automatic path after the model): ``select_object_masks`` on ``--masks`` candidate
   masks of a 1024x768 photo against a naive baseline in the same run that compares every pair of masks at
   full resolution. Prints the speed-up and checks both keep the same masks.
2. Exact render areas: a ``compute_object_stats`` pass over ``--renders`` renders (512x512 16-bit instance
   masks) — images per second — and peak traced memory for N vs 4N renders (target: flat, within 1.5x).
3. Figures: ``write_common_o_figures`` for 1,000 vs ``--rows`` pairs rows (target: close to flat, the contact
   sheets draw a fixed number of examples).
"""

from __future__ import annotations

import _common  # noqa: E402,F401  (puts the repository root on sys.path)

# isort: split

import argparse
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np
from PIL import Image

from commonlink.catalog.areas import compute_object_stats  # noqa: E402
from commonlink.catalog.sam_masks import NESTED_OVERLAP, select_object_masks  # noqa: E402
from commonlink.formats.catalog import CatalogRecord, write_catalog  # noqa: E402
from commonlink.release.figures import write_common_o_figures  # noqa: E402

from _results import add_contract_arguments, print_rows, result_row, write_rows  # noqa: E402

BENCH = "bench_stats.py"


def random_masks(n: int, h: int = 768, w: int = 1024, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    masks = []
    for _ in range(n):
        mh, mw = rng.integers(20, h // 2), rng.integers(20, w // 2)
        y, x = rng.integers(0, h - mh), rng.integers(0, w - mw)
        seg = np.zeros((h, w), dtype=bool)
        seg[y : y + mh, x : x + mw] = True
        masks.append({"segmentation": seg, "area": int(seg.sum()), "predicted_iou": float(rng.random())})
    return masks


def naive_select(masks: list[dict], n_objects: int, pixels: int, lo=0.005, hi=0.4) -> list[float]:
    """Same rule as select_object_masks, pairwise at full resolution."""
    cands = [m for m in masks if lo <= m["area"] / pixels <= hi]
    keep = []
    for i, m in enumerate(cands):
        nested = False
        for j, other in enumerate(cands):
            if i == j:
                continue
            bigger = other["area"] > m["area"] or (
                other["area"] == m["area"]
                and (
                    other["predicted_iou"] > m["predicted_iou"]
                    or (other["predicted_iou"] == m["predicted_iou"] and j < i)
                )
            )
            if bigger and (m["segmentation"] & other["segmentation"]).sum() / m["area"] >= NESTED_OVERLAP:
                nested = True
                break
        if not nested:
            keep.append(m)
    keep.sort(key=lambda m: (-m["predicted_iou"], -m["area"]))
    return sorted((m["area"] / pixels for m in keep[:n_objects]), reverse=True)


def render_catalog(root: Path, n: int) -> Path:
    rng = np.random.default_rng(n)
    (root / "scenes").mkdir(parents=True)
    names = [f"object {i}" for i in range(12)]
    records = []
    for i in range(n):
        mask = np.zeros((512, 512), dtype=np.uint16)
        for k in range(1, 8):
            y, x = rng.integers(0, 448, size=2)
            mask[y : y + 64, x : x + 64] = k
        Image.fromarray(mask).save(root / "scenes" / f"mask_{i}.png")
        records.append(
            CatalogRecord(
                id=f"r{i}",
                path=f"scenes/mask_{i}.png",
                objects=names[:7],
                source="synthetic",
                scene_id=f"s{i}",
                width=512,
                height=512,
                sha256="0" * 64,
                extra={"mask": f"scenes/mask_{i}.png", "mask_ids": {str(k): names[k - 1] for k in range(1, 8)}},
            )
        )
    write_catalog(root, records)
    return root


def pairs_rows(n: int) -> dict[str, list[dict]]:
    rng = np.random.default_rng(0)
    names = [f"object {i}" for i in range(129)]
    rows = []
    for i in range(n):
        objs = [list(rng.choice(names, size=5, replace=False)) for _ in range(2)]
        common = sorted(set(objs[0]) & set(objs[1])) or ["No objects are in common"]
        choices = sorted(set(objs[0]) | set(objs[1])) + ["No objects are in common"]
        rows.append(
            {
                "id": f"main-{i}",
                "source": "synthetic" if i % 2 else "real",
                "choices": choices,
                "ground_truth": common,
                "answer": "A",
                **{
                    f"image_{k + 1}": {
                        "catalog": "/nonexistent",
                        "id": f"{i}-{k}",
                        "path": "x.png",
                        "objects": objs[k],
                        "object_area": {o: 0.05 for o in objs[k]},
                    }
                    for k in range(2)
                },
            }
        )
    return {"main": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--masks", type=int, default=120)
    parser.add_argument("--renders", type=int, default=400)
    parser.add_argument("--rows", type=int, default=10000)
    add_contract_arguments(parser)
    args = parser.parse_args()
    if args.quick:
        args.masks, args.renders, args.rows = 60, 120, 4000

    masks = random_masks(args.masks)
    pixels = 768 * 1024
    t = time.perf_counter()
    fast = select_object_masks(masks, 7, pixels)
    t_fast = time.perf_counter() - t
    t = time.perf_counter()
    slow = naive_select(masks, 7, pixels)
    t_slow = time.perf_counter() - t
    print(
        f"[select] {args.masks} masks: ours {t_fast:.3f}s, naive full-resolution {t_slow:.3f}s, "
        f"speed-up {t_slow / t_fast:.1f}x, same result: {np.allclose(fast, slow)}"
    )

    with tempfile.TemporaryDirectory() as tmp:
        peaks = {}
        for n in (args.renders // 4, args.renders):
            cat = render_catalog(Path(tmp) / f"c{n}", n)
            tracemalloc.start()
            t = time.perf_counter()
            compute_object_stats(cat, progress=False)
            elapsed = time.perf_counter() - t
            peaks[n] = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            print(f"[masks] {n} renders: {n / elapsed:.0f} images/s, peak traced memory {peaks[n] / 2**20:.1f} MiB")
        small, big = sorted(peaks)
        print(f"[masks] memory ratio {big} vs {small} renders: {peaks[big] / peaks[small]:.2f}x (target <= 1.5x)")

        times = {}
        for n in (1000, args.rows):
            t = time.perf_counter()
            write_common_o_figures(pairs_rows(n), Path(tmp) / f"fig{n}" / "figures")
            times[n] = time.perf_counter() - t
            print(f"[figures] {n} rows: {times[n]:.2f}s")
        print(f"[figures] time ratio {args.rows} vs 1000 rows: {times[args.rows] / times[1000]:.2f}x")
    rows = [
        result_row(
            BENCH,
            f"SAM mask selection, {args.masks} masks of a 1024x768 photo",
            t_fast,
            "s",
            peer="naive pairwise comparison at full resolution",
            ratio=t_slow / t_fast,
        ),
        result_row(
            BENCH,
            f"render-mask stats peak traced memory, {big} vs {small} renders",
            peaks[big] / peaks[small],
            "x",
            target="<= 1.5",
        ),
        result_row(BENCH, f"release figures time, {args.rows:,} vs 1,000 rows", times[args.rows] / times[1000], "x"),
    ]
    print_rows(rows)
    write_rows(args.json, rows)


if __name__ == "__main__":
    main()
