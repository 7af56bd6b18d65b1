"""Benchmark: Common-O release build (shard writing speed against its peers, memory flatness).

    .venv/bin/python benchmarks/bench_release.py [--quick] [--json ROWS] [--images 20000] [--examples 10000]
                                                 [--workers N] [--only-workers]

1. Generates image catalogs of small real JPEG files (``--size`` px, default 64) with 3-7 objects each and
   samples ``--examples`` pairs from them with ``commonlink.kinds.common_o.pairs``.
2. Shard writing, at ``--size`` and ``--large-size`` (512) px, the same release rows (22 columns, image bytes
   in memory) written by ``ShardWriter`` and by its peers, interleaved, best of ``--repeats``:
   * bare pyarrow: the same rows built column by column into one Table, written with ShardWriter's codecs,
     dictionary/statistics choices and row groups, so both write the same bytes (checked: sizes within 1%)
     (target at 64 px: ShardWriter >= 0.8x its speed; it holds the whole table in memory, ShardWriter streams);
   * ``datasets.Dataset.from_generator(rows, features=...)`` then ``.to_parquet()`` (what a Hub user reaches
     for; target >= 1.0x at 64 px and at 512 px);
   * context only, no target: a bare write of the two image-byte columns alone, stored as ShardWriter stores
     them (no codec, dictionary or statistics). It leaves out 20 of the 22 columns a release must have (the
     published Common-O columns and our provenance), so it is a floor, not a peer: at 64 px bare pyarrow writing
     all 22 columns with our bytes reaches only ~0.4-0.5x of it (converting 20 Python columns and writing
     them costs about as much as the image bytes), and the row prints that figure next to ours;
   and the whole row pipeline (read files, ``published_row``, ``ShardWriter``) against the same generator fed
   to ``datasets`` (target >= 1.0x).
3. Workers (``--workers``, default: the usable CPUs), at both sizes: the release row pipeline (read files, check
   rows, verify images, ShardWriter, as ``release build`` runs it) on N worker processes against the same on one,
   and the whole ``build_release`` (+ figures, card, manifest) likewise, interleaved, 3 repeats, the median ratio
   with min/max and the load average around the runs (target for the pipeline on 2 workers: >= 1.7x); beside it,
   the idle-machine estimate from CPU time (the main process's part alone, the workers' part shared by them).
   ``--only-workers`` measures only these rows.
4. Peak memory of a full ``build_release`` (shards, card, figures, manifest) in a fresh process, for pairs drawn
   from a catalog of ``--small-images`` vs ``--images`` images (same example count). Target: ratio <= 1.3.
"""

from __future__ import annotations

import _common  # noqa: E402,F401  (puts the repository root on sys.path)

# isort: split

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import noise_catalog  # noqa: E402
from _results import add_contract_arguments, print_rows, result_row, write_rows  # noqa: E402

BENCH = "bench_release.py"

VOCABULARY = [f"object_{i:03d}" for i in range(120)]


def make_catalog(root: Path, n: int, *, size: int, seed: int = 0) -> None:
    noise_catalog(root, n, size=size, seed=seed, vocabulary=VOCABULARY)


def sample_with_toolkit(catalog: Path, count: int, out: Path) -> tuple[float, str]:
    from commonlink.kinds.common_o.pairs import PairsConfig, pairs_meta, sample_pairs, write_pairs

    config = PairsConfig(split="main", count=count, seed=0, real_fraction=0.45)
    start = time.perf_counter()
    rows, stats = sample_pairs([catalog], config)
    elapsed = time.perf_counter() - start
    write_pairs(out, rows, pairs_meta(config, [catalog], stats))
    return elapsed, "commonlink.kinds.common_o.pairs.sample_pairs"


def sample(catalog: Path, count: int, out: Path) -> tuple[float, str]:
    return sample_with_toolkit(catalog, count, out)


def _timed_best(funcs: dict, repeats: int, cleanup) -> dict[str, tuple[float, float]]:
    """Best (wall, CPU) seconds of each function over interleaved repetitions (drift on a shared machine then
    hits every side alike); ``cleanup`` runs after each call, outside the timing."""
    runs: dict[str, list[tuple[float, float]]] = {key: [] for key in funcs}
    for _ in range(repeats):
        for key, func in funcs.items():
            wall, cpu = time.perf_counter(), time.process_time()
            func()
            runs[key].append((time.perf_counter() - wall, time.process_time() - cpu))
            cleanup()
    return {key: (min(w for w, _ in values), min(c for _, c in values)) for key, values in runs.items()}


def shard_writer_layout(features, work: Path, out: Path, write_ours) -> tuple[dict, list[int], int]:
    """What the peers need to write the same bytes as ShardWriter: its per-column codecs (none on image bytes),
    dictionary encoding and statistics only where it uses them (as ParquetWriter options), its row groups (read
    back from its own output, written by ``write_ours``) and the size of that output."""
    import pyarrow.parquet as pq

    from commonlink.release.shards import ShardWriter

    probe = ShardWriter(work / "probe", "main", features)
    settings = {
        "compression": probe._column_compression,
        "use_dictionary": probe.dictionary_columns,
        "write_statistics": probe._plain_columns,
    }
    probe.abort()
    shutil.rmtree(work / "probe", ignore_errors=True)
    write_ours()
    files = sorted(out.glob("main-*.parquet"))
    group_rows = [
        pq.ParquetFile(path).metadata.row_group(g).num_rows
        for path in files
        for g in range(pq.ParquetFile(path).metadata.num_row_groups)
    ]
    return settings, group_rows, sum(path.stat().st_size for path in files)


def bench_shard_writing(pairs_file: Path, work: Path, label: str, *, repeats: int) -> dict:
    """Time our writer and its peers on the same rows; returns {key: (wall, cpu)} and the sizes."""
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq

    from commonlink.fileio import read_jsonl
    from commonlink.formats.catalog_refs import CatalogResolver
    from commonlink.kinds.common_o.format import common_o_features
    from commonlink.kinds.common_o.release import CatalogImageReader, published_row
    from commonlink.release.shards import ShardWriter

    features = common_o_features()
    schema = features.arrow_schema
    # Pairs files name catalogs relative to themselves (formats.catalog_refs); rows in memory carry them absolute.
    rows = list(map(CatalogResolver(pairs_file).pairs_row, read_jsonl(pairs_file)))
    # Every side gets the same rows; building them once here also warms the page cache for the file reads.
    reader = CatalogImageReader()
    records = [published_row(row, split="main", where=f"row {n}", reader=reader) for n, row in enumerate(rows, start=1)]
    image_mb = sum(len(r["image_1"]["bytes"]) + len(r["image_2"]["bytes"]) for r in records) / 1e6
    out = work / "shards"

    def cleanup() -> None:
        shutil.rmtree(out, ignore_errors=True)
        shutil.rmtree(work / "hf-cache", ignore_errors=True)
        for name in ("bare.parquet", "datasets.parquet"):
            (work / name).unlink(missing_ok=True)

    def writer_only() -> None:
        with ShardWriter(out, "main", features) as writer:
            for record in records:
                writer.write(record)

    settings, group_rows, ours_bytes = shard_writer_layout(features, work, out, writer_only)
    cleanup()

    def write_groups(table, path: Path, **options) -> None:
        with pq.ParquetWriter(path, table.schema, **options) as sink:
            start = 0
            for count in group_rows:
                sink.write_table(table.slice(start, count), row_group_size=count)
                start += count

    def bare_pyarrow() -> None:
        # A pyarrow user who knows the fast path: the whole table in memory, built column by column (image
        # structs from two flat arrays, not from dicts), written with ShardWriter's settings and row groups.
        arrays = []
        for name, field in zip(schema.names, schema):
            values = [r[name] for r in records]
            if pa.types.is_struct(field.type):
                arrays.append(
                    pa.StructArray.from_arrays(
                        [
                            pa.array([v["bytes"] for v in values], pa.binary()),
                            pa.array([v["path"] for v in values], pa.string()),
                        ],
                        fields=list(field.type),
                    )
                )
            else:
                arrays.append(pa.array(values, field.type))
        write_groups(pa.Table.from_arrays(arrays, schema=schema), work / "bare.parquet", **settings)

    def bare_image_bytes() -> None:
        # The image bytes alone (2 binary columns): the floor any writer of these images pays.
        table = pa.table(
            {
                "image_1": pa.array([r["image_1"]["bytes"] for r in records], pa.binary()),
                "image_2": pa.array([r["image_2"]["bytes"] for r in records], pa.binary()),
            }
        )
        write_groups(table, work / "bare.parquet", compression="none", use_dictionary=False, write_statistics=False)

    def datasets_peer(generate) -> None:
        # A fresh cache folder each time: from_generator would otherwise reload its cache of the last call.
        dataset = datasets.Dataset.from_generator(generate, features=features, cache_dir=str(work / "hf-cache"))
        dataset.to_parquet(str(work / "datasets.parquet"))
        del dataset

    def pipeline() -> None:
        reader = CatalogImageReader()
        with ShardWriter(out, "main", features) as writer:
            for number, row in enumerate(rows, start=1):
                writer.write(published_row(row, split="main", where=f"row {number}", reader=reader))

    def pipeline_generator():
        reader = CatalogImageReader()
        for number, row in enumerate(rows, start=1):
            yield published_row(row, split="main", where=f"row {number}", reader=reader)

    bare_pyarrow()
    peer_bytes = (work / "bare.parquet").stat().st_size
    cleanup()
    # Same settings, same row groups: the files differ only in the footer (ShardWriter's shard names, sizes).
    assert abs(peer_bytes - ours_bytes) <= 0.01 * ours_bytes, (peer_bytes, ours_bytes)
    print(f"  same bytes: ShardWriter {ours_bytes:,} B, bare pyarrow with its settings {peer_bytes:,} B")
    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()
    best = _timed_best(
        {
            "writer": writer_only,
            "pyarrow": bare_pyarrow,
            "image_bytes": bare_image_bytes,
            "datasets": lambda: datasets_peer(lambda: iter(records)),
            "pipeline": pipeline,
            "datasets_pipeline": lambda: datasets_peer(pipeline_generator),
        },
        repeats,
        cleanup,
    )
    print(
        f"shard writing, {label}: {len(rows):,} rows, {image_mb:.1f} MB of image bytes "
        f"({image_mb * 1e3 / (2 * len(rows)):.1f} KB an image); best of {repeats} interleaved runs"
    )
    names = {
        "writer": "ShardWriter: built rows (22 columns, bytes in memory) -> shards",
        "pyarrow": "peer: bare pyarrow, same rows -> Table -> same codecs/encodings/statistics/row groups",
        "datasets": "peer: datasets.Dataset.from_generator(rows, features).to_parquet",
        "image_bytes": "context: bare write of the 2 image-byte columns only (none of the other 20 columns)",
        "pipeline": "build: read files + published_row + ShardWriter",
        "datasets_pipeline": "peer: same generator (read + published_row) -> datasets",
    }
    for key, name in names.items():
        wall, cpu = best[key]
        print(
            f"  {name:66s} {image_mb / wall:8.1f} MB/s wall ({wall:.3f} s), "
            f"{image_mb / cpu:8.1f} MB/s CPU ({cpu:.3f} s)"
        )
    return {"best": best, "image_mb": image_mb, "rows": len(rows)}


def shard_rows(result: dict, size: int, *, targets: dict[str, str | None]) -> list[dict]:
    # CPU seconds of this process (all threads): on a shared, oversubscribed machine wall time mostly measures
    # the scheduler (wall was 2-4x CPU here); both sides run in this process on the same bytes.
    best, mb = result["best"], result["image_mb"]
    rate = lambda key: mb / best[key][1]  # noqa: E731
    ratio = lambda key, peer: best[peer][1] / best[key][1]  # noqa: E731
    return [
        result_row(
            BENCH,
            f"shard writing, {size}-px images (MB/s of image bytes, CPU time)",
            rate("writer"),
            "MB/s",
            peer="bare pyarrow, same rows, same codecs/encodings/statistics/row groups (same bytes)",
            ratio=ratio("writer", "pyarrow"),
            target=targets.get("pyarrow"),
        ),
        result_row(
            BENCH,
            f"shard writing, {size}-px images (MB/s of image bytes, CPU time)",
            rate("writer"),
            "MB/s",
            peer="datasets from_generator(features).to_parquet (its own defaults)",
            ratio=ratio("writer", "datasets"),
            target=targets.get("datasets"),
        ),
        # A floor that leaves out 20 required columns cannot carry a target (no writer of the release can reach
        # it); the figure says how close bare pyarrow itself gets, writing the same 22 columns and bytes as ours.
        result_row(
            BENCH,
            f"shard writing, {size}-px images, vs image bytes alone (CPU time; bare pyarrow with all 22 columns, "
            f"same bytes: {ratio('pyarrow', 'image_bytes'):.2f}x of it)",
            rate("writer"),
            "MB/s",
            peer="context only: bare write of the 2 image-byte columns alone, stored as ours stores them "
            "(none of the 20 other columns)",
            ratio=ratio("writer", "image_bytes"),
        ),
        result_row(
            BENCH,
            f"release rows from files + shards, {size}-px images (CPU time)",
            rate("pipeline"),
            "MB/s",
            peer="same row generator into datasets from_generator.to_parquet",
            ratio=ratio("pipeline", "datasets_pipeline"),
            target=targets.get("datasets"),
        ),
    ]


def _cpu_now() -> tuple[float, float]:
    """CPU seconds of this process and of its reaped children (the build's worker processes, joined at its end)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


def bench_workers(pairs_file: Path, work: Path, label: str, *, workers: int, repeats: int) -> dict:
    """The release row pipeline (read files, check rows, verify images, ShardWriter) and the whole
    ``build_release`` (plus figures, card, manifest), with ``workers`` processes and with one, interleaved:
    each repeat runs both back to back, so drift on a shared machine hits both alike; the ratio of each repeat
    is one sample (median, min and max reported), with the load average around the runs."""
    from commonlink.fileio import read_jsonl
    from commonlink.formats.catalog_refs import CatalogResolver
    from commonlink.kinds.common_o.format import common_o_features
    from commonlink.kinds.common_o.release import CatalogImageReader, FirstUses, published_item
    from commonlink.release.build import build_release
    from commonlink.release.parallel import ordered_map
    from commonlink.release.shards import ShardWriter

    features = common_o_features()
    rows = list(map(CatalogResolver(pairs_file).pairs_row, read_jsonl(pairs_file)))
    out = work / "shards-workers"

    def pipeline(n: int) -> None:
        first = FirstUses()
        items = ((row, "main", f"row {number}", first(row)) for number, row in enumerate(rows, start=1))
        with ShardWriter(out, "main", features) as writer:
            for _, record in ordered_map(published_item, items, setup=CatalogImageReader, workers=n):
                writer.write(record)

    def full(n: int) -> None:
        build_release([pairs_file], work / "release-workers", progress=False, workers=n, overwrite=True)

    def cleanup() -> None:
        shutil.rmtree(out, ignore_errors=True)
        shutil.rmtree(work / "release-workers", ignore_errors=True)

    pipeline(1)  # warm the page cache and the imports
    cleanup()
    runs: dict[tuple[str, int], list[dict]] = {(what, n): [] for what in ("pipeline", "full") for n in (1, workers)}
    load_before = os.getloadavg()
    for _ in range(repeats):
        for what, func in (("pipeline", pipeline), ("full", full)):
            for n in (1, workers):
                wall, (own, children) = time.perf_counter(), _cpu_now()
                func(n)
                end_own, end_children = _cpu_now()
                runs[what, n].append(
                    {"wall": time.perf_counter() - wall, "main": end_own - own, "workers": end_children - children}
                )
                cleanup()
    load_after = os.getloadavg()
    print(
        f"workers, {label}: {len(rows):,} rows, {workers} workers vs 1, {repeats} interleaved repeats; load average "
        f"(1 min) {load_before[0]:.1f} before, {load_after[0]:.1f} after, on {os.cpu_count()} CPUs"
    )
    result = {"rows": len(rows), "workers": workers, "load": (load_before[0], load_after[0])}
    for what in ("pipeline", "full"):
        one, many = runs[what, 1], runs[what, workers]
        ratios = sorted(a["wall"] / b["wall"] for a, b in zip(one, many))
        # What an idle machine with `workers` cores would give: the main process's part runs alone, the workers'
        # part is shared by them (CPU seconds do not depend on the other jobs as wall time does).
        idle = sorted(
            (a["main"] + a["workers"]) / max(b["main"], (b["main"] + b["workers"]) / workers) for a, b in zip(one, many)
        )
        for n, values in ((1, one), (workers, many)):
            walls = ", ".join(f"{v['wall']:.2f}" for v in values)
            cpu = ", ".join(f"{v['main']:.2f}+{v['workers']:.2f}" for v in values)
            print(f"  {what:8s} {n} worker(s): wall {walls} s; CPU main+workers {cpu} s")
        print(
            f"  {what:8s} ratio 1 / {workers} workers, wall: median {ratios[len(ratios) // 2]:.2f} "
            f"(min {ratios[0]:.2f}, max {ratios[-1]:.2f}); idle-machine estimate from CPU time: median "
            f"{idle[len(idle) // 2]:.2f} (min {idle[0]:.2f}, max {idle[-1]:.2f})"
        )
        result[what] = {"ratios": ratios, "idle": idle}
    return result


def worker_rows(result: dict, size: int) -> list[dict]:
    n, (before, after) = result["workers"], result["load"]
    where = f"{size}-px images, {result['rows']:,} rows, load average {before:.1f}-{after:.1f} on {os.cpu_count()} CPUs"

    def spread(values: list[float]) -> str:
        return f"median of {len(values)}, min {values[0]:.2f}, max {values[-1]:.2f}"

    pipeline, full = result["pipeline"], result["full"]
    return [
        result_row(
            BENCH,
            f"release pipeline, {n} workers vs 1 worker (wall; {where}; {spread(pipeline['ratios'])})",
            pipeline["ratios"][len(pipeline["ratios"]) // 2],
            "x",
            peer="the same pipeline on 1 worker, interleaved",
            ratio=pipeline["ratios"][len(pipeline["ratios"]) // 2],
            target=">= 1.7" if n == 2 else None,
        ),
        result_row(
            BENCH,
            f"release pipeline, {n} workers vs 1 worker, idle-machine estimate from CPU time ({where}; "
            f"{spread(pipeline['idle'])})",
            pipeline["idle"][len(pipeline["idle"]) // 2],
            "x",
        ),
        result_row(
            BENCH,
            f"full release build (+ figures, card, manifest), {n} workers vs 1 worker (wall; {where}; "
            f"{spread(full['ratios'])})",
            full["ratios"][len(full["ratios"]) // 2],
            "x",
        ),
    ]


# VmHWM (the peak RSS of this process image) rather than ru_maxrss, which Linux carries over from the parent
# across fork + exec and would report the benchmark driver's peak.
_CHILD = """
import json, sys, time
from commonlink.release.build import build_release
start = time.perf_counter()
result = build_release([sys.argv[1]], sys.argv[2], progress=False)
elapsed = time.perf_counter() - start
hwm = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
rows = sum(s["rows"] for s in result.splits.values())
print(json.dumps({"peak_rss_mb": hwm / 1024, "seconds": elapsed, "rows": rows}))
"""


def build_in_child(pairs_file: Path, out: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, str(pairs_file), str(out)], capture_output=True, text=True, env=env
    )
    if proc.returncode != 0:
        raise SystemExit(f"release build failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=20_000)
    parser.add_argument("--small-images", type=int, default=5_000)
    parser.add_argument("--examples", type=int, default=10_000)
    parser.add_argument("--size", type=int, default=64, help="image side in pixels")
    parser.add_argument(
        "--large-size", type=int, default=512, help="second shard-writing run with images this big (0: skip)"
    )
    parser.add_argument("--large-images", type=int, default=600)
    parser.add_argument("--large-examples", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument(
        "--workers", type=int, default=0, help="worker processes of the parallel release rows (0: the usable CPUs)"
    )
    parser.add_argument(
        "--only-workers", action="store_true", help="measure only the N-workers vs 1-worker release rows"
    )
    add_contract_arguments(parser)
    args = parser.parse_args()
    if args.quick:
        args.images, args.small_images, args.examples = 4_000, 1_000, 3_000
        args.large_images, args.large_examples, args.repeats = 150, 300, 3

    rows: list[dict] = []
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        work = Path(tmp)
        results = {}
        for n in (args.small_images, args.images):
            catalog = work / f"catalog_{n}"
            start = time.perf_counter()
            make_catalog(catalog, n, size=args.size, seed=n)
            print(f"catalog: {n:,} JPEGs of {args.size}x{args.size} px in {time.perf_counter() - start:.1f} s")
            pairs_file = work / f"pairs_{n}.jsonl"
            seconds, sampler = sample(catalog, args.examples, pairs_file)
            print(
                f"sampling ({sampler}): {args.examples:,} examples from {n:,} images in {seconds:.2f} s "
                f"= {args.examples / seconds:,.0f} examples/s"
            )
            results[n] = pairs_file

        from commonlink.release.parallel import usable_cpus

        workers = args.workers or usable_cpus()
        if not args.only_workers:
            small = bench_shard_writing(results[args.images], work, f"{args.size} px JPEGs", repeats=args.repeats)
            rows += shard_rows(small, args.size, targets={"pyarrow": ">= 0.8", "datasets": ">= 1.0"})
        if workers > 1:
            parallel = bench_workers(results[args.images], work, f"{args.size} px JPEGs", workers=workers, repeats=3)
            rows += worker_rows(parallel, args.size)
        if args.large_size:
            # Per-row work (two file reads, 22 columns) is fixed; with bigger images it weighs less per MB.
            large = work / "catalog_large"
            make_catalog(large, args.large_images, size=args.large_size, seed=1)
            sample(large, args.large_examples, work / "pairs_large.jsonl")
            if not args.only_workers:
                # at least 5 repetitions: each run is a fraction of a second, and a shared machine skews single runs
                big = bench_shard_writing(
                    work / "pairs_large.jsonl", work, f"{args.large_size} px JPEGs", repeats=max(5, args.repeats)
                )
                rows += shard_rows(big, args.large_size, targets={"datasets": ">= 1.0"})
            if workers > 1:
                label = f"{args.large_size} px JPEGs"
                parallel = bench_workers(work / "pairs_large.jsonl", work, label, workers=workers, repeats=3)
                rows += worker_rows(parallel, args.large_size)
        if not args.only_workers:
            rows += memory_rows(args, results, work)
    print_rows(rows)
    write_rows(args.json, rows)


def memory_rows(args, results: dict[int, Path], work: Path) -> list[dict]:
    """Peak memory of whole builds in fresh processes: pairs drawn from a small vs a large catalog, all vs a
    quarter of the rows."""
    rows = []
    peaks = {}
    for n, pairs_file in results.items():
        info = build_in_child(pairs_file, work / f"release_{n}")
        peaks[n] = info["peak_rss_mb"]
        print(
            f"full release build from {n:,} catalog images: {info['rows']:,} rows in {info['seconds']:.1f} s, "
            f"peak RSS {info['peak_rss_mb']:.0f} MB"
        )
    ratio = peaks[args.images] / peaks[args.small_images]
    print(f"peak memory ratio {args.images:,} vs {args.small_images:,} catalog images: {ratio:.2f}  (target <= 1.3)")
    rows.append(
        result_row(
            BENCH,
            f"release build peak RSS, pairs from {args.images:,} vs {args.small_images:,} catalog images",
            ratio,
            "x",
            target="<= 1.3",
        )
    )
    # Rows: the same catalog, a quarter of the examples. Images are streamed; what grows with rows is the
    # per-row metadata (no image bytes) kept for the statistics and the figures.
    quarter = work / "pairs_quarter.jsonl"
    lines = results[args.images].read_text().splitlines(keepends=True)[: args.examples // 4]
    quarter.write_text("".join(lines))
    meta = json.loads(Path(f"{results[args.images]}.meta.json").read_text())
    from commonlink.formats.meta import write_meta  # the sidecar records the new file's sha256 and rows

    write_meta(quarter, {**meta, "count": len(lines)})
    info = build_in_child(quarter, work / "release_quarter")
    row_ratio = peaks[args.images] / info["peak_rss_mb"]
    print(
        f"full release build of {info['rows']:,} rows (same {args.images:,}-image catalog): peak RSS "
        f"{info['peak_rss_mb']:.0f} MB; "
        f"{args.examples:,} vs {info['rows']:,} rows: {row_ratio:.2f}"
    )
    rows.append(
        result_row(
            BENCH,
            f"release build peak RSS, {args.examples:,} vs {info['rows']:,} rows",
            row_ratio,
            "x",
            target="<= 1.3",
        )
    )
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"(benchmark driver peak RSS {own:.0f} MB, includes the in-memory baseline table)")
    return rows


if __name__ == "__main__":
    main()
