"""Helpers every benchmark script shares: the repository root on ``sys.path``, timers that interleave the sides
being compared, memory readers, the machine's load, and a catalog of noise images.

Import it first in a script (``benchmarks/`` is ``sys.path[0]`` when a script runs)::

    import _common  # puts the repository root on sys.path, so `commonlink` and `tests.fixtures` import
    from _common import interleaved, load_average, timed

Timing on a shared machine: absolute seconds move with the load; a ratio stays meaningful only when both sides
run in the same stretch of time, so :func:`interleaved` alternates them (A B B A A B ...) and reports every run.
"""

from __future__ import annotations

import io
import json
import os
import platform
import re
import resource
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def timed(fn: Callable, *args, **kwargs) -> tuple[float, object]:
    """``(wall seconds, result)`` of one call."""
    start = time.perf_counter()
    result = fn(*args, **kwargs)
    return time.perf_counter() - start, result


def best_of(fn: Callable, repeats: int = 3) -> float:
    """The fastest of ``repeats`` calls, in wall seconds (for micro-benchmarks without a peer)."""
    return min(timed(fn)[0] for _ in range(repeats))


def interleaved(
    sides: dict[str, Callable[[], object]],
    repeats: int = 5,
    *,
    before: Callable[[str], None] | None = None,
    cpu: bool = False,
    cpu_out: dict[str, list[float]] | None = None,
) -> dict[str, list[float]]:
    """Run every side ``repeats`` times, alternating the order each round (A B, B A, A B, ...), so the load of a
    shared machine falls on both sides alike. ``before(name)`` runs untimed before each call (e.g. to remove
    the last run's output). Returns each side's wall seconds (or CPU seconds with ``cpu=True``), in run order;
    ``cpu_out``, when given, receives each side's CPU seconds (all threads of this process) as well."""
    names = list(sides)
    times: dict[str, list[float]] = {name: [] for name in names}
    for round_ in range(repeats):
        for name in names if round_ % 2 == 0 else reversed(names):
            if before is not None:
                before(name)
            wall, cpu_start = time.perf_counter(), time.process_time()
            sides[name]()
            cpu_seconds = time.process_time() - cpu_start
            times[name].append(cpu_seconds if cpu else time.perf_counter() - wall)
            if cpu_out is not None:
                cpu_out.setdefault(name, []).append(cpu_seconds)
    return times


def ratio_of_medians(times: dict[str, list[float]], slow: str, fast: str) -> float:
    """``median(times[slow]) / median(times[fast])``."""
    return statistics.median(times[slow]) / statistics.median(times[fast])


def spread(values: list[float]) -> str:
    """``"median 1.23 s (1.10-1.40, 5 runs)"``."""
    return f"median {statistics.median(values):.3g} s ({min(values):.3g}-{max(values):.3g}, {len(values)} runs)"


def load_average() -> float:
    """The 1-minute load average (``/proc/loadavg``), NaN where the platform has none."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return float("nan")


def load_note() -> str:
    """``"load 7.9"``: for figures measured on a shared machine."""
    return f"load {load_average():.1f}"


def cpu_model() -> str:
    """The CPU's model name, trimmed (``"Intel Xeon Platinum 8375C"``, ``"AMD EPYC"``); ``""`` where unknown.
    Absolute figures hold only for the CPU they were measured on, so every row of the results table names it."""
    try:
        with open("/proc/cpuinfo") as handle:
            model = next((line.split(":", 1)[1] for line in handle if line.startswith("model name")), "")
    except OSError:
        model = ""
    model = model or platform.processor()
    model = re.sub(r"\((R|TM|tm|r)\)|\bCPU\b|@.*$|\b\d+-Core Processor\b", " ", model)
    return " ".join(model.split())


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask), which on a container can be fewer than the machine's."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 0


def rss_mib() -> float:
    """Current resident memory of this process (Linux ``/proc``; elsewhere the peak so far)."""
    try:
        with open("/proc/self/statm") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        return peak_rss_mib()


def peak_rss_mib() -> float:
    """Peak resident memory of this process: VmHWM on Linux (``ru_maxrss`` would carry a parent's peak over
    fork + exec), else ``ru_maxrss``."""
    try:
        with open("/proc/self/status") as handle:
            return next(int(line.split()[1]) for line in handle if line.startswith("VmHWM:")) / 1024
    except (OSError, StopIteration):
        maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return maxrss / 2**20 if sys.platform == "darwin" else maxrss / 1024  # bytes on macOS, KiB on Linux


def child_env() -> dict[str, str]:
    """The environment for a child Python process that must import commonlink from this checkout."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}


def noise_catalog(
    root: Path, n: int, *, size: int, seed: int = 0, vocabulary: list[str] | None = None, fmt: str = "JPEG"
) -> list[dict]:
    """``n`` noise images (``size`` x ``size`` px; noise so they do not compress to nothing) under
    ``root/images`` and their ``catalog.jsonl``; returns the records written."""
    import hashlib

    import numpy as np
    from PIL import Image

    vocabulary = vocabulary or [f"object_{i:03d}" for i in range(120)]
    rng = np.random.default_rng(seed)
    (root / "images").mkdir(parents=True, exist_ok=True)
    suffix = ".jpg" if fmt == "JPEG" else f".{fmt.lower()}"
    records = []
    for i in range(n):
        buf = io.BytesIO()
        pixels = rng.integers(0, 255, (size, size, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(buf, fmt, **({"quality": 85} if fmt == "JPEG" else {}))
        data = buf.getvalue()
        name = f"images/{i:06d}{suffix}"
        (root / name).write_bytes(data)
        k = int(rng.integers(3, 8))
        objects = sorted(vocabulary[j] for j in rng.choice(len(vocabulary), size=k, replace=False))
        digest = hashlib.sha256(data).hexdigest()
        records.append(
            {
                "id": digest[:16],
                "path": name,
                "objects": objects,
                "source": "real" if i % 2 == 0 else "synthetic",
                "scene_id": f"scene{i // 4}",
                "view": str(i % 4),
                "background": "table",
                "width": size,
                "height": size,
                "sha256": digest,
            }
        )
    with open(root / "catalog.jsonl", "w", encoding="utf-8") as handle:
        handle.writelines(json.dumps(r) + "\n" for r in records)
    return records
