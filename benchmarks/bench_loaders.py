"""Benchmark of iterating a Common-O release with its images decoded: `commonlink` against three common loaders.

    .venv/bin/python benchmarks/bench_loaders.py [--quick] [--json ROWS] [--rows 2000] [--size 160x120] [--repeats 5]
                                                  [--batch-size 64]

One split of ``--rows`` rows (two noise PNGs of ``--size`` each, the published columns and features, 4 parquet
shards) is written once. Then, interleaved (A B C D E, E D C B A, ...) ``--repeats`` times, every row is read and
both images decoded to pixels:

* ours, rows: ``for ex in open_common_o(folder, "main")``: typed examples (list columns decoded and
  cross-checked against the question, ``answer`` and the counts; images through ``open_image``: pixel cap, loaded);
* ours, batches: ``for batch in open_common_o(folder, "main").iter_batches(64)``: the same examples, 64 at a time;
* peer ``datasets`` rows: ``datasets.load_dataset("parquet", data_files=shards, split="train")`` (its Arrow cache
  made once, before timing) and ``for row in ds: row["image_1"].load(); row["image_2"].load()``: PIL images
  decoded by ``datasets``, list columns left as strings;
* peer ``datasets`` batches: the same dataset, ``for batch in ds.iter(batch_size=64)``, each image ``.load()``ed;
* peer pyarrow + PIL: ``pq.ParquetFile(shard).iter_batches(batch_size=64)`` per shard, ``to_pydict()``, the four
  list columns ``json.loads``-ed, both images ``Image.open(BytesIO(bytes)).load()``ed: the bare loop a user writes
  by hand, with no checks.

Ours reads each batch's list fields at once (the fast path of ``loader_batch``) and decodes each row's images in
its turn on the calling thread, as every peer does; its CPU time is reported too, as context (on a shared machine
the wall-time ratio follows the CPU-time ratio once the cores are busy).

Target, for each peer and each of our two ways of iterating: peer wall time / our wall time >= 1.0 (medians of the
interleaved runs; every figure names the medians, their min-max and the load average during the runs).
"""

from __future__ import annotations

import _common  # noqa: F401  (puts the repository root on sys.path, so tests.fixtures imports)

# isort: split

import argparse
import io
import json
import statistics
import tempfile
from pathlib import Path

from _common import interleaved, load_average, ratio_of_medians, spread
from _results import add_contract_arguments, print_rows, result_row, write_rows

BENCH = "bench_loaders.py"
LIST_COLUMNS = ("choices", "ground_truth_objects", "objects_1", "objects_2")


def _sides(folder: Path, shards: list[str], ds, rows: int, size: tuple[int, int], batch_size: int) -> dict:
    """Each way of reading the split, as a function that reads every row and decodes both images."""
    import pyarrow.parquet as pq
    from PIL import Image

    from commonlink.kinds.common_o.loader import open_common_o

    def ours_rows() -> None:
        count = 0
        for example in open_common_o(folder, "main"):
            assert example.image_1.size == size and example.image_2.size == size
            count += 1
        assert count == rows

    def ours_batches() -> None:
        count = 0
        for batch in open_common_o(folder, "main").iter_batches(batch_size):
            for example in batch:
                assert example.image_1.size == size and example.image_2.size == size
            count += len(batch)
        assert count == rows

    def datasets_rows() -> None:
        count = 0
        for row in ds:
            row["image_1"].load()
            row["image_2"].load()
            assert row["image_1"].size == size
            count += 1
        assert count == rows

    def datasets_batches() -> None:
        count = 0
        for batch in ds.iter(batch_size=batch_size):
            for image in (*batch["image_1"], *batch["image_2"]):
                image.load()
                assert image.size == size
            count += len(batch["image_1"])
        assert count == rows

    def pyarrow_pil() -> None:
        count = 0
        for shard in shards:
            for batch in pq.ParquetFile(shard).iter_batches(batch_size=batch_size):
                columns = batch.to_pydict()
                for name in LIST_COLUMNS:
                    columns[name] = [json.loads(text) for text in columns[name]]
                for cell in (*columns["image_1"], *columns["image_2"]):
                    image = Image.open(io.BytesIO(cell["bytes"]))
                    image.load()
                    assert image.size == size
                count += len(columns["choices"])
        assert count == rows

    return {
        "ours rows": ours_rows,
        "ours batches": ours_batches,
        "datasets rows": datasets_rows,
        "datasets batches": datasets_batches,
        "pyarrow + PIL": pyarrow_pil,
    }


#: Each peer as the result rows name it.
PEERS = {
    "datasets rows": "datasets load_dataset(parquet), `for row in ds`, images .load()ed",
    "datasets batches": "datasets load_dataset(parquet), `ds.iter(batch_size={b})`, images .load()ed",
    "pyarrow + PIL": "pyarrow ParquetFile.iter_batches({b}) + json.loads of the list columns + PIL open/load",
}


def _short(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} s ({min(values):.2f}-{max(values):.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--size", default="160x120")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=64)
    add_contract_arguments(parser)
    args = parser.parse_args()
    if args.quick:
        args.rows, args.repeats = 500, 3
    size = tuple(int(v) for v in args.size.split("x"))

    import datasets

    from tests.fixtures.tiny_models import common_o_rows, write_common_o_split

    datasets.disable_progress_bars()
    with tempfile.TemporaryDirectory(prefix="bench-loaders-") as tmp:
        tmp = Path(tmp)
        folder = write_common_o_split(tmp / "release", common_o_rows(args.rows, seed=0, image_size=size), shards=4)
        shards = sorted(str(p) for p in (folder / "data").glob("main-*.parquet"))
        ds = datasets.load_dataset("parquet", data_files=shards, split="train", cache_dir=str(tmp / "hf-cache"))
        assert len(ds) == args.rows
        sides = _sides(folder, shards, ds, args.rows, size, args.batch_size)
        loads = [load_average()]
        cpu: dict[str, list[float]] = {}
        times = interleaved(sides, args.repeats, cpu_out=cpu)
        loads.append(load_average())
    note = f"load {min(loads):.1f}-{max(loads):.1f}"
    what = f"{args.rows} rows, two {args.size} PNGs decoded each, {args.repeats} interleaved runs"
    print(f"[loaders] {what} ({note})")
    for name, values in times.items():
        per_second = args.rows / statistics.median(values)
        print(f"  {name:18s} {spread(values)}  CPU {spread(cpu[name])}  ({per_second:.0f} rows/s)")
    rows = []
    for ours, how in (("ours rows", "row iteration"), ("ours batches", f"iter_batches({args.batch_size})")):
        median = statistics.median(times[ours])
        for peer, peer_text in PEERS.items():
            ratio = ratio_of_medians(times, peer, ours)
            print(f"  -> {peer} / {ours} = {ratio:.3f} wall (target >= 1.0)")
            rows.append(
                result_row(
                    BENCH,
                    f"{how}: {what}; ours {_short(times[ours])}, peer {_short(times[peer])}, median (min-max) ({note})",
                    args.rows / median,
                    "rows/s",
                    peer=peer_text.format(b=args.batch_size) + " on the same shards (interleaved, wall)",
                    ratio=ratio,
                    target=">= 1.0",
                )
            )
    fastest = min(PEERS, key=lambda p: statistics.median(cpu[p]))
    cpu_ratio = ratio_of_medians(cpu, fastest, "ours rows")
    print(f"  -> CPU seconds (all threads) {fastest} / ours rows = {cpu_ratio:.3f} (context: ours checks every row)")
    rows.append(
        result_row(
            BENCH,
            f"row iteration, CPU time: {what}; ours {_short(cpu['ours rows'])}, peer {_short(cpu[fastest])} ({note})",
            args.rows / statistics.median(cpu["ours rows"]),
            "rows/CPU-s",
            peer=f"context only: {fastest}, CPU seconds (the peer with the least CPU; ours also checks every row)",
            ratio=cpu_ratio,
        )
    )
    print_rows(rows)
    write_rows(args.json, rows)


if __name__ == "__main__":
    main()
