"""`commonlink demo` memory (issue 40): its peak resident memory must stay flat-ish as the demo grows.

The demo peaked at 600-730 MB for 180 rows: the renderer (pyrender, OpenGL, trimesh, scipy and Mesa's buffers)
and then the release build (matplotlib, figures, shard buffers) stayed in the demo's process, under
``datasets``, the scoring and the reports. Rendering and the release build now run each in a child process
(``commonlink.demo._StageProcess``). Measured here, each run a fresh ``python -m commonlink demo --quiet`` into
a fresh folder with its own empty ``COMMONLINK_HOME`` (so no thumbnail cache carries over), the two sizes
interleaved:

1. peak resident memory at ``--scale 1`` over ``--scale 0.5`` (the largest process, which is what
   ``/usr/bin/time -v`` reports and what a machine must hold): target <= 1.3;
2. that peak at ``--scale 1`` as a figure (context for this machine: it is mostly imported libraries);
3. the peak of the sum over the demo's processes (sampled every 50 ms; needs ``psutil``), context;
4. wall time at ``--scale 1``, context (it moves with the CPU and the load).

    .venv/bin/python benchmarks/bench_demo.py [--quick] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time

from _common import child_env, load_note  # first: it puts the repository root on sys.path
from _results import add_contract_arguments, print_rows, result_row, write_rows

#: Runs the demo as a child and prints its peak RSS: the largest process among those waited for (the demo and,
#: through it, its render process), and the sum over the live tree sampled every 50 ms when psutil is there.
MEASURE = r"""
import json, resource, subprocess, sys, time
proc = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL)
tree = None
try:
    import psutil
    root, tree = psutil.Process(proc.pid), 0.0
    while proc.poll() is None:
        total = 0
        for p in [root, *root.children(recursive=True)]:
            try:
                total += p.memory_info().rss
            except psutil.Error:
                pass
        tree = max(tree, total / 2**20)
        time.sleep(0.05)
except ImportError:
    pass
code = proc.wait()
print(json.dumps({"exit": code, "peak_mib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
                  "tree_mib": tree}))
"""


def run_demo_once(scale: float, resolution: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-demo-") as tmp:
        command = [sys.executable, "-m", "commonlink", "demo", "--out", f"{tmp}/demo", "--quiet"]
        command += ["--scale", str(scale), "--resolution", resolution]
        env = {**child_env(), "COMMONLINK_HOME": f"{tmp}/home"}
        start = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-c", MEASURE, *command], env=env, capture_output=True, text=True, check=False
        )
        seconds = time.perf_counter() - start
    if done.returncode != 0 or not done.stdout.strip():
        raise SystemExit(f"the demo measurement failed: {done.stderr[-2000:]}")
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    if figures["exit"] != 0:
        raise SystemExit(f"commonlink demo --scale {scale} exited with status {figures['exit']}")
    return figures | {"seconds": seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_contract_arguments(parser)
    parser.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 2, quick 1)")
    args = parser.parse_args()
    small, large = (0.15, 0.3) if args.quick else (0.5, 1.0)
    resolution = "128x128" if args.quick else "384x384"
    rounds = args.rounds or (1 if args.quick else 2)
    runs: dict[float, list[dict]] = {small: [], large: []}
    for round_ in range(rounds):  # small, large, large, small, ...: the load falls on both sizes alike
        for scale in (small, large) if round_ % 2 == 0 else (large, small):
            runs[scale].append(run_demo_once(scale, resolution))
            print(f"--scale {scale}: {json.dumps(runs[scale][-1])}", flush=True)

    def median(scale: float, key: str) -> float | None:
        values = [run[key] for run in runs[scale] if run[key] is not None]
        return statistics.median(values) if values else None

    peak_large, peak_small = median(large, "peak_mib"), median(small, "peak_mib")
    note = f"{resolution} px, median of {rounds}, {load_note()}"
    rows = [
        result_row(
            "bench_demo.py",
            f"demo peak RSS (largest process), --scale {large:g} / --scale {small:g} ({note})",
            peak_large,
            "MiB",
            peer=f"the same demo at --scale {small:g} ({peak_small:.0f} MiB)",
            ratio=peak_large / peak_small,
            target="<= 1.3",
        ),
        result_row("bench_demo.py", f"demo peak RSS at --scale {large:g}, largest process ({note})", peak_large, "MiB"),
        result_row(
            "bench_demo.py",
            f"demo peak RSS at --scale {large:g}, sum over its processes ({note})",
            median(large, "tree_mib"),
            "MiB",
        ),
        result_row("bench_demo.py", f"demo wall time at --scale {large:g} ({note})", median(large, "seconds"), "s"),
    ]
    print_rows(rows)
    write_rows(args.json, rows)


if __name__ == "__main__":
    main()
