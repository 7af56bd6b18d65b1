"""Benchmark of iterating a Common-O release with its images decoded: `commonlink.loaders` vs `datasets`.

    .venv/bin/python benchmarks/bench_loaders.py [--quick] [--json ROWS] [--rows 2000] [--size 160x120] [--repeats 5]

One split of ``--rows`` rows (two noise PNGs of ``--size`` each, the published columns and features, 4 parquet
shards) is written once. Then, interleaved (A B, B A, ...) ``--repeats`` times, every row is read and both
images decoded to pixels:

* ours: ``for ex in open_common_o(folder, "main")``: typed examples (list columns decoded and cross-checked
  against ``answer``; images through ``open_image``: pixel cap, loaded);
* peer: ``datasets.load_dataset("parquet", data_files=shards, split="train")`` (its Arrow cache made once,
  before timing) and ``for row in ds: row["image_1"].load(); row["image_2"].load()``: PIL images decoded by
  ``datasets``, list columns left as strings.

Ours decodes the images on one worker thread a few rows ahead (Pillow releases the GIL while decoding), so its
wall time is what a user waits for; its CPU time (all threads) is reported too, as context.

Target: peer wall time / our wall time >= 1.0 (median of the runs).
"""

from __future__ import annotations

import _common  # noqa: F401  (puts the repository root on sys.path, so tests.fixtures imports)

# isort: split

import argparse
import tempfile
from pathlib import Path

from _common import interleaved, load_average, ratio_of_medians, spread
from _results import add_contract_arguments, print_rows, result_row, write_rows

BENCH = "bench_loaders.py"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--size", default="160x120")
    parser.add_argument("--repeats", type=int, default=5)
    add_contract_arguments(parser)
    args = parser.parse_args()
    if args.quick:
        args.rows, args.repeats = 500, 3
    size = tuple(int(v) for v in args.size.split("x"))

    import datasets

    from commonlink.kinds.common_o.loader import open_common_o
    from tests.fixtures.tiny_models import common_o_rows, write_common_o_split

    datasets.disable_progress_bars()
    with tempfile.TemporaryDirectory(prefix="bench-loaders-") as tmp:
        tmp = Path(tmp)
        folder = write_common_o_split(tmp / "release", common_o_rows(args.rows, seed=0, image_size=size), shards=4)
        shards = sorted(str(p) for p in (folder / "data").glob("main-*.parquet"))
        ds = datasets.load_dataset("parquet", data_files=shards, split="train", cache_dir=str(tmp / "hf-cache"))
        assert len(ds) == args.rows

        def ours() -> None:
            count = 0
            for example in open_common_o(folder, "main"):
                assert example.image_1.size == size and example.image_2.size == size
                count += 1
            assert count == args.rows

        def peer() -> None:
            count = 0
            for row in ds:
                row["image_1"].load()
                row["image_2"].load()
                assert row["image_1"].size == size
                count += 1
            assert count == args.rows

        loads = [load_average()]
        cpu: dict[str, list[float]] = {}
        times = interleaved({"ours": ours, "datasets": peer}, args.repeats, cpu_out=cpu)
        loads.append(load_average())
    note = f"load {min(loads):.1f}-{max(loads):.1f}"
    ratio = ratio_of_medians(times, "datasets", "ours")
    median = sorted(times["ours"])[len(times["ours"]) // 2]
    print(f"[loaders] {args.rows} rows, two {args.size} PNGs each, {args.repeats} interleaved runs ({note})")
    print(f"  commonlink open_common_o   {spread(times['ours'])}  ({args.rows / median:.0f} rows/s)")
    print(f"  datasets load_dataset      {spread(times['datasets'])}")
    cpu_ratio = ratio_of_medians(cpu, "datasets", "ours")
    print(
        f"  -> datasets / ours = {ratio:.3f} wall (target >= 1.0); CPU seconds (all threads) datasets / ours = "
        f"{cpu_ratio:.3f} (context: ours also checks every row's lists against its answer, and decodes on a worker "
        "thread while it does)"
    )
    figure = f"iterate {args.rows} rows, two {args.size} PNGs decoded each ({note})"
    rows = [
        result_row(
            BENCH,
            figure,
            args.rows / median,
            "rows/s",
            peer="datasets load_dataset(parquet) on the same shards, images .load()ed (interleaved, wall)",
            ratio=ratio,
            target=">= 1.0",
        ),
        result_row(
            BENCH,
            f"{figure}, CPU time",
            args.rows / sorted(cpu["ours"])[len(cpu["ours"]) // 2],
            "rows/CPU-s",
            peer="context only: the same datasets loop, CPU seconds (ours checks more, on 2 threads)",
            ratio=cpu_ratio,
        ),
    ]
    print_rows(rows)
    write_rows(args.json, rows)


if __name__ == "__main__":
    main()
