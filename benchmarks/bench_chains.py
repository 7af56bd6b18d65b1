"""Association chains at paper scale: build time, peak memory, and the release size saved by storing images once.

Default workload (target: under 60 s): a 50,000-image labelled pool, 8 concepts x 2,000 synchronous chains x
500 steps (+3 warm-up steps) = 8M chain steps (16k chains) with **disjoint negatives** (the default: a negative
shares no label with its query, paper eq. 1). Printed, and written with ``--json PATH`` (benchmark contract):

* build time of ``build_chain_files`` (synchronous chains, written to JSONL) against the peer a user would
  write: a vectorised numpy walk that draws all chains of a concept as one (chains x steps) array, redraws
  clashes and label-sharing negatives in whole-array rounds, and writes the same JSONL rows -- same work,
  same run; also a naive per-step Python builder (measured on a slice, scaled per step);
* peak memory of the build (child process RSS above the loaded image list) at a quarter and at the full
  number of chains: streaming keeps it flat, where the numpy peer holds every chain of a concept;
* the release size (``build_association_release``) against storing every step's three images inline, i.e.
  what de-duplication saves (skipped with ``--quick`` or ``--no-release``).

    .venv/bin/python benchmarks/bench_chains.py                 # full scale (a few minutes on 2 cores)
    .venv/bin/python benchmarks/bench_chains.py --quick         # 5,000 images, 200 chains a concept, no release
    .venv/bin/python benchmarks/bench_chains.py --quick --json results/chains.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from _common import rss_mib  # also puts the repository root on sys.path

CONCEPTS = [
    "metal",
    "ripe",
    "fresh",
    "natural",
    "cooked",
    "painted",
    "rusty",
    "furry",
    "wooden",
    "plastic",
    "shiny",
    "soft",
]


def make_images(n: int, folder: Path | None, seed: int = 0):
    """``n`` labelled samples (1-3 concepts each); with ``folder``, real 64x64 JPEG files too."""
    from PIL import Image

    from commonlink.kinds.association.format import LabelledImage

    rng = np.random.default_rng(seed)
    pixel_rng = np.random.default_rng(seed + 1)  # separate, so labels do not depend on which files exist
    weights = np.linspace(2.0, 1.0, len(CONCEPTS))
    weights /= weights.sum()
    images = []
    for i in range(n):
        labels = [str(c) for c in rng.choice(CONCEPTS, size=int(rng.integers(1, 4)), replace=False, p=weights)]
        path = f"/bench/{i}.jpg"
        if folder is not None:
            path = str(folder / f"{i}.jpg")
            if not os.path.exists(path):
                pixels = pixel_rng.integers(0, 256, size=(8, 8, 3), dtype=np.uint8)
                Image.fromarray(pixels).resize((64, 64), Image.NEAREST).save(path, quality=90)
        images.append(
            LabelledImage(id=f"{i:08d}", labels=labels, width=64, height=64, origin={"type": "file", "path": path})
        )
    return images


class PeakSampler:
    """Samples resident memory every 20 ms in a thread; ``peak`` is the largest value seen."""

    def __init__(self) -> None:
        import threading

        self.peak = rss_mib()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, rss_mib())

    def __enter__(self) -> PeakSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_mib())


def worker(args) -> None:
    """Child process: build the chain files and report time and peak RSS above the loaded inputs."""
    from commonlink.kinds.association.chains import ChainConfig, build_chain_files

    images = make_images(args.images, Path(args.image_dir) if args.image_dir else None)
    before = rss_mib()
    config = ChainConfig(
        seed=0,
        top_k=8,
        chains_per_concept=args.chains,
        max_steps=args.steps,
        min_pixels=0,
        tasks=["synchronous"],
        negatives="disjoint",
    )
    start = time.perf_counter()
    with PeakSampler() as sampler:
        summary = build_chain_files(images, args.out, config, progress=False)
    seconds = time.perf_counter() - start
    print(
        json.dumps(
            {
                "seconds": seconds,
                "steps": summary.steps,
                "peak_extra_mib": sampler.peak - before,
                "base_mib": before,
                "files": {k: str(v) for k, v in summary.files.items()},
            }
        )
    )


def numpy_peer(images, concepts: list[str], chains: int, steps: int, out: Path, seed: int = 0) -> tuple[float, float]:
    """The strongest peer: a vectorised numpy walk (all chains of a concept at once), disjoint negatives,
    the same JSONL rows written (json.dumps per chain). Returns (seconds, of which writing rows); the label
    matrix is built inside the timing, as the build builds its index."""
    start = time.perf_counter()
    writing = 0.0
    names = sorted({label for img in images for label in img.labels})
    column = {name: k for k, name in enumerate(names)}
    has = np.zeros((len(images), len(names)), dtype=bool)
    for i, img in enumerate(images):
        has[i, [column[label] for label in img.labels]] = True
    rng = np.random.default_rng(seed)
    with open(out, "w") as handle:
        for concept in concepts:
            pool = np.flatnonzero(has[:, column[concept]]).astype(np.int32)
            negatives_pool = np.flatnonzero(~has[:, column[concept]]).astype(np.int32)
            begin = pool[rng.integers(0, len(pool), size=chains)]
            positive = pool[rng.integers(0, len(pool), size=(chains, steps))]
            while True:  # a positive is never its own query
                queries = np.concatenate([begin[:, None], positive[:, :-1]], axis=1)
                clash = positive == queries
                if not clash.any():
                    break
                positive[clash] = pool[rng.integers(0, len(pool), size=int(clash.sum()))]
            queries = np.concatenate([begin[:, None], positive[:, :-1]], axis=1)
            negative = negatives_pool[rng.integers(0, len(negatives_pool), size=(chains, steps))]
            while True:  # disjoint: no shared label with the query
                shares = (has[queries] & has[negative]).any(axis=2)
                if not shares.any():
                    break
                negative[shares] = negatives_pool[rng.integers(0, len(negatives_pool), size=int(shares.sum()))]
            answer = rng.integers(0, 2, size=(chains, steps)).astype(np.uint8)
            began = time.perf_counter()
            for c in range(chains):
                handle.write(
                    json.dumps(
                        {
                            "id": f"synchronous-{concept}-{c:05d}",
                            "kind": "synchronous",
                            "concepts": [concept],
                            "start": int(begin[c]),
                            "positive": positive[c].tolist(),
                            "negative": negative[c].tolist(),
                            "answer": answer[c].tolist(),
                            "plan": "1" * steps,
                            "warmup": 3,
                            "num_steps": steps,
                        },
                        separators=(",", ":"),
                    )
                    + "\n"
                )
            writing += time.perf_counter() - began
    return time.perf_counter() - start, writing


def peer_worker(args) -> None:
    """Child process: the numpy peer on the same pool and concepts; reports time and peak RSS."""
    images = make_images(args.images, None)
    before = rss_mib()
    concepts = json.loads(args.concepts)
    with PeakSampler() as sampler:
        seconds, writing = numpy_peer(images, concepts, args.chains, args.steps + 3, Path(args.out))
    print(json.dumps({"seconds": seconds, "writing": writing, "peak_extra_mib": sampler.peak - before}))


def naive_steps_per_second(images, chains: int, steps: int) -> float:
    """Baseline: a per-step Python builder (random.choice, set membership) keeping every step as a dict."""
    rng = random.Random(0)
    label_sets = [set(img.labels) for img in images]
    concept = "metal"
    pool = [i for i, s in enumerate(label_sets) if concept in s]
    negatives = [i for i, s in enumerate(label_sets) if concept not in s]
    start = time.perf_counter()
    built = []
    for _ in range(chains):
        query = rng.choice(pool)
        chain = []
        for _ in range(steps):
            positive = rng.choice(pool)
            while positive == query:
                positive = rng.choice(pool)
            negative = rng.choice(negatives)
            assert concept in label_sets[positive] and concept not in label_sets[negative]
            answer = rng.randrange(2)
            chain.append({"query": query, "positive": positive, "negative": negative, "answer": answer})
            query = positive
        built.append(json.dumps(chain))  # serialised, as the real build writes its chains
    return chains * steps / (time.perf_counter() - start)


def naive_bytes_per_step(images, steps: int) -> float:
    """Memory the baseline holds per step (all steps kept as dicts until written), via tracemalloc."""
    import tracemalloc

    tracemalloc.start()
    chains = 20
    rng = random.Random(1)
    held = [
        [
            {
                "query": rng.randrange(len(images)),
                "positive": rng.randrange(len(images)),
                "negative": rng.randrange(len(images)),
                "answer": rng.randrange(2),
            }
            for _ in range(steps)
        ]
        for _ in range(chains)
    ]
    current, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del held
    return current / (chains * steps)


def run_worker(
    images: int, chains: int, steps: int, out: Path, image_dir: Path | None, peer_concepts: list[str] | None = None
) -> dict:
    cmd = [
        sys.executable,
        __file__,
        "--worker",
        "--images",
        str(images),
        "--chains",
        str(chains),
        "--steps",
        str(steps),
        "--out",
        str(out),
    ]
    if image_dir:
        cmd += ["--image-dir", str(image_dir)]
    if peer_concepts is not None:
        cmd += ["--peer", "--concepts", json.dumps(peer_concepts)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=50_000)
    parser.add_argument("--chains", type=int, default=2_000, help="synchronous chains per concept (8 concepts)")
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument(
        "--quick", action="store_true", help="5,000 images, 200 chains a concept, no release measurement"
    )
    parser.add_argument("--json", help="write the benchmark rows (benchmark contract) to this JSON file")
    parser.add_argument(
        "--repeat",
        type=int,
        default=None,
        help="build and peer runs, alternating; the best of each counts "
        "(default 2, --quick 1): on a shared machine load comes and goes",
    )
    parser.add_argument("--no-release", action="store_true", help="skip the release size measurement")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--image-dir", help=argparse.SUPPRESS)
    parser.add_argument("--peer", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--concepts", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        peer_worker(args) if args.peer else worker(args)
        return
    if args.quick:
        args.images, args.chains, args.no_release = 5_000, 200, True
    from commonlink.kinds.association.release import build_association_release
    from commonlink.release.staging import ReleaseOptions

    with tempfile.TemporaryDirectory(prefix="bench-chains-") as tmp:
        tmp = Path(tmp)
        image_dir = tmp / "images"
        image_dir.mkdir()
        t0 = time.perf_counter()
        images = make_images(args.images, None if args.no_release else image_dir)
        print(
            f"pool: {args.images:,} labelled images ({'with' if not args.no_release else 'without'} files) in "
            f"{time.perf_counter() - t0:.1f} s"
        )

        quarter = run_worker(args.images, max(1, args.chains // 4), args.steps, tmp / "quarter", None)
        repeat = args.repeat or (1 if args.quick else 2)
        fulls, peers = [], []
        for attempt in range(repeat):
            target = tmp / f"full{attempt}"
            fulls.append(
                run_worker(args.images, args.chains, args.steps, target, None if args.no_release else image_dir)
            )
            concepts = json.loads(Path(fulls[-1]["files"]["synchronous"] + ".meta.json").read_text())["options"]
            peers.append(
                run_worker(args.images, args.chains, args.steps, tmp / "peer.jsonl", None, peer_concepts=concepts)
            )
        full = min(fulls, key=lambda r: r["seconds"])
        peer = min(peers, key=lambda r: r["seconds"])
        runs = " ".join(f"{f['seconds']:.1f}/{p['seconds']:.1f}" for f, p in zip(fulls, peers))
        print(f"runs (build / peer, s): {runs}; best of each below")
        rate = full["steps"] / full["seconds"]
        naive_chains = max(1, min(50, args.chains))
        naive_rate = naive_steps_per_second(images, naive_chains, args.steps + 3)
        chains_total = len(concepts) * args.chains
        print(
            f"build (disjoint negatives): {len(concepts)} concepts x {args.chains:,} chains = {chains_total:,} chains "
            f"x {args.steps} steps (+3 warm-up) = {full['steps']:,} steps over {args.images:,} images in "
            f"{full['seconds']:.1f} s "
            f"= {rate:,.0f} steps/s (target < 60 s)"
        )
        print(
            f"  peer (vectorised numpy walk, same chains, disjoint negatives, same JSONL): {peer['seconds']:.1f} s "
            f"(of which {peer['writing']:.1f} s writing rows) -> commonlink takes "
            f"{full['seconds'] / peer['seconds']:.2f}x the peer's time"
        )
        print(
            f"  baseline (naive per-step Python builder, {naive_chains} chains): {naive_rate:,.0f} steps/s "
            f"-> {rate / naive_rate:.1f}x faster"
        )
        print(
            f"  peer peak memory above its inputs: {peer['peak_extra_mib']:.0f} MiB (holds each concept's chains as "
            "arrays)"
        )
        rows = [
            _row(
                "build seconds, 16k chains x 500 steps, disjoint negatives"
                if not args.quick
                else (
                    f"build seconds, {chains_total:,} chains x {args.steps} steps, {args.images:,} images, "
                    "disjoint negatives (quick)"
                ),
                full["seconds"],
                "s",
                "vectorised numpy walk (same chains, disjoint, same JSONL); ratio = peer time / build time",
                peer["seconds"] / full["seconds"],
                "< 60" if not args.quick else None,
                full["seconds"] < 60 if not args.quick else None,
            ),
            _row(
                "build steps per second",
                rate,
                "steps/s",
                "naive per-step Python builder",
                rate / naive_rate,
                None,
                None,
            ),
            # flat = 4x the chains adds less than 16 MiB (at a few MiB the ratio alone is noise)
            _row(
                "peak build memory above inputs, full vs quarter chains",
                full["peak_extra_mib"],
                "MiB",
                "same build at a quarter of the chains",
                full["peak_extra_mib"] / max(quarter["peak_extra_mib"], 0.1),
                "full - quarter < 16 MiB (flat)",
                full["peak_extra_mib"] - quarter["peak_extra_mib"] < 16,
            ),
        ]
        per_step = naive_bytes_per_step(images, args.steps + 3)
        print(
            f"  baseline memory: {per_step:.0f} bytes a step held as dicts -> {per_step * full['steps'] / 2**30:.2f} "
            f"GiB for {full['steps']:,} steps, vs the streaming build below"
        )
        print(
            f"  peak memory of the build above the loaded image list ({full['base_mib']:.0f} MiB): "
            f"{full['peak_extra_mib']:.1f} MiB at {args.chains:,} chains/concept vs {quarter['peak_extra_mib']:.1f} "
            f"MiB at {max(1, args.chains // 4):,} -> ratio "
            f"{full['peak_extra_mib'] / max(quarter['peak_extra_mib'], 0.1):.2f} for 4x the work"
        )
        chain_bytes = sum(Path(p).stat().st_size for p in full["files"].values())
        print(f"  chain files: {chain_bytes / 2**20:,.0f} MiB")
        if args.no_release:
            write_rows(args.json, rows)
            return

        sizes = {img.id: os.path.getsize(img.origin["path"]) for img in images}
        ids = [img.id for img in sorted(images, key=lambda im: im.id)]
        inline = 0
        from commonlink.fileio import read_jsonl

        for task, path in full["files"].items():
            for row in read_jsonl(path):
                if task == "synchronous":
                    queries = [row["start"]] + row["positive"][:-1]
                    inline += (
                        sum(sizes[ids[i]] for i in queries)
                        + sum(sizes[ids[i]] for i in row["positive"])
                        + sum(sizes[ids[i]] for i in row["negative"])
                    )
                elif task == "single_step":
                    inline += sum(sizes[ids[i]] for i in [row["query"], *row["memory"], *row["candidates"]])
                else:
                    inline += sizes[ids[row["image_1"]]] + sizes[ids[row["image_2"]]]
        t0 = time.perf_counter()
        build_association_release(list(full["files"].values()), tmp / "release", ReleaseOptions(progress=False))
        release_seconds = time.perf_counter() - t0
        release_bytes = folder_bytes(tmp / "release")
        images_bytes = folder_bytes(tmp / "release" / "images")
        print(
            f"release: built in {release_seconds:.1f} s; {release_bytes / 2**20:,.1f} MiB on disk "
            f"(images config {images_bytes / 2**20:,.1f} MiB, tasks {(release_bytes - images_bytes) / 2**20:,.1f} MiB)"
        )
        print(
            f"  inline baseline (every step's query + 2 candidates stored with the step): {inline / 2**30:,.2f} GiB "
            f"-> de-duplication stores {inline / release_bytes:,.0f}x less"
        )
        rows.append(
            _row(
                "association release size",
                release_bytes / 2**20,
                "MiB",
                "every step's three images stored inline",
                inline / release_bytes,
                None,
                None,
            )
        )
        write_rows(args.json, rows)


def _row(
    figure: str, value: float, unit: str, peer: str | None, ratio: float | None, target: str | None, met: bool | None
) -> dict:
    return {
        "benchmark": "bench_chains",
        "figure": figure,
        "value": round(float(value), 4),
        "unit": unit,
        "peer": peer,
        "ratio": None if ratio is None else round(float(ratio), 4),
        "target": target,
        "met": met,
    }


def write_rows(path: str | None, rows: list[dict]) -> None:
    """The benchmark contract's JSON list (switch to benchmarks/_results.py once it lands on main)."""
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(rows, indent=1) + "\n")
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
