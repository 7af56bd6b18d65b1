"""Benchmark: a paper-sized Common-O build, end to end, stage by stage.

    .venv/bin/python benchmarks/bench_paper_build.py [--quick] [--json ROWS] [--scale 1] [--executor local|ray]
                                                      [--ray-address ADDR] [--workers N] [--keep DIR]

The paper's sizes (Common-O Bench ``main`` 10,426 rows, 45% real; Common-O Complex ``challenge`` 12,600 rows,
synthetic only) built the way a user builds them, each stage in its own fresh process (wall time and peak
resident memory, VmHWM, per stage):

1. ``photos`` (a stand-in, not counted in the total): no phone photos are at hand, so photo-like JPEGs
   (1024x768, smooth backgrounds with 3-7 coloured object shapes, EXIF with GPS that ingest must strip) and a
   manifest naming their objects (the renderer's object names, themed sets of 10, 4 views a scene);
2. ``ingest``: ``ingest_photos`` of those photos into the real catalog (decode, orient, strip, re-encode, hash,
   near-duplicate check);
3. ``render-main`` / ``render-challenge``: the embedded offline renderer (3-7 objects, 8-16 objects; 4 views a
   scene at ``--resolution``), ``--executor local`` (``--workers`` processes, default: the usable CPUs) or
   ``--executor ray``;
4. ``pairs-main`` / ``pairs-challenge``: ``sample_pairs`` (main: real + synthetic catalogs, 45% real);
5. ``release``: ``build_release`` of both splits (parquet shards, card, figures, manifest);
6. ``baselines``: the weight-free ``none`` and ``random`` baselines scored on both splits.

A stage that fails prints why: the signal that ended it (and "out of memory" when the cgroup's OOM-kill count
rose), or the last error it printed, then the end of its output; SIGTERM makes a stage unwind (its worker pools
stop, nothing leaks). Finished stages are recorded in ``WORK/stages-done/``: a rerun of the same build (same
``--keep`` folder, scale, resolution and executor) resumes at the first unfinished stage; without ``--keep`` a
failed build keeps its temporary folder and prints the ``--keep`` to rerun with.

Image counts (ours; the paper does not publish them): 1,200 real photos (300 scenes), 400 synthetic main
scenes and 600 challenge scenes, 4 views each, multiplied by ``--scale`` like the row counts.

``--quick`` builds at 1/20 and at 1/40 of the paper's size and extrapolates each stage to full size with the
line through the two points (time = fixed + per-unit x size), and says so in every figure it reports. Peak
memory of every stage at the two sizes gives the flatness ratio (target <= 1.3); each stage's peak above what
its process held when it began (interpreter, numpy, these helpers) is given beside it as context. The projected
time on N Ray workers divides the render CPU time by N (scenes are independent Ray tasks) and keeps the other
stages at their CPU time (they run on one machine). The "idle 2-core estimate" is the CPU time with rendering
shared by its worker processes: on a shared machine wall time mostly measures the other jobs. Target: the whole
build under 15 minutes on an idle 2-core machine (it was 30 until this measured build took 5.6).

A full-size run (``--scale 1``, not ``--quick``) then builds the paper size once more from scratch with a second
CPU-bound process spinning beside it (``--no-loaded-rerun`` skips it): its wall and CPU minutes are context rows,
showing the build completes on a machine that is not all its own.
"""

from __future__ import annotations

import _common  # noqa: E402,F401  (puts the repository root on sys.path)

# isort: split

import argparse
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from commonlink.fileio import atomic_write_json  # noqa: E402
from commonlink.release.parallel import usable_cpus  # noqa: E402

from _results import add_contract_arguments, print_rows, result_row, write_rows  # noqa: E402

BENCH = "bench_paper_build.py"
PAPER = {
    "main_rows": 10_426,
    "challenge_rows": 12_600,
    "real_fraction": 0.45,
    "real_scenes": 300,
    "main_scenes": 400,
    "challenge_scenes": 600,
    "views": 4,
}
STAGES = (
    "photos",
    "ingest",
    "render-main",
    "render-challenge",
    "pairs-main",
    "pairs-challenge",
    "release",
    "baselines",
)
RENDER_STAGES = ("render-main", "render-challenge")
NOT_COUNTED = ("photos",)  # the stand-in for photos a user already has


def sizes(scale: float) -> dict:
    return {
        "main_rows": max(16, round(PAPER["main_rows"] * scale)),
        "challenge_rows": max(16, round(PAPER["challenge_rows"] * scale)),
        "real_scenes": max(3, round(PAPER["real_scenes"] * scale)),
        "main_scenes": max(3, round(PAPER["main_scenes"] * scale)),
        "challenge_scenes": max(3, round(PAPER["challenge_scenes"] * scale)),
    }


# -- stages (each runs in a child process: `--stage NAME`)


def object_names() -> list[str]:
    from commonlink.synth.assets import load_assets

    return sorted(asset.name for asset in load_assets().assets)


def make_photos(folder: Path, scenes: int, views: int, seed: int = 0) -> Path:
    """Photo-like JPEGs and their manifest: a smooth background, 3-7 object shapes, EXIF GPS + orientation."""
    from PIL import Image, ImageDraw, ImageFilter

    names = object_names()
    rng = np.random.default_rng(seed)
    groups = [names[i : i + 10] for i in range(0, len(names) - 9, 10)]  # themed sets of 10 (people photograph sets)
    folder.mkdir(parents=True, exist_ok=True)
    lines = ["file,objects,scene,view"]
    for scene in range(scenes):
        group = groups[int(rng.integers(len(groups)))]
        pool = sorted(set(group) | set(rng.choice(names, size=3, replace=False).tolist()))
        objects = sorted(rng.choice(pool, size=int(rng.integers(3, 8)), replace=False).tolist())
        colours = {name: tuple(int(c) for c in rng.integers(30, 226, 3)) for name in objects}
        for view in range(views):
            base = (rng.random((6, 8, 3)) * 255).astype(np.uint8)
            image = Image.fromarray(base).resize((1024, 768), Image.BICUBIC)
            draw = ImageDraw.Draw(image)
            for name in objects:
                x, y = int(rng.integers(60, 900)), int(rng.integers(60, 640))
                w, h = int(rng.integers(40, 160)), int(rng.integers(40, 160))
                (draw.ellipse if names.index(name) % 2 else draw.rectangle)((x, y, x + w, y + h), fill=colours[name])
            image = image.filter(ImageFilter.GaussianBlur(1.2))
            grain = rng.integers(-8, 9, (768, 1024, 3), dtype=np.int16)  # sensor noise, so JPEGs have photo-like sizes
            image = Image.fromarray(np.clip(np.asarray(image, dtype=np.int16) + grain, 0, 255).astype(np.uint8))
            exif = Image.Exif()
            exif[0x0112] = 1
            exif[0x8825] = {1: "N", 2: (48.0, 51.0, float(scene % 60)), 3: "E", 4: (2.0, 17.0, 40.0)}
            file = f"scene{scene:05d}_{view}.jpg"
            image.save(folder / file, quality=88, exif=exif)
            lines.append(f"{file},{';'.join(objects)},scene-{scene:05d},{view}")
    manifest = folder.parent / "photos.csv"
    manifest.write_text("\n".join(lines) + "\n")
    return manifest


def run_stage(stage: str, work: Path, scale: float, options: dict) -> dict:
    n = sizes(scale)
    if stage == "photos":
        make_photos(work / "photos", n["real_scenes"], PAPER["views"])
        return {"photos": n["real_scenes"] * PAPER["views"]}
    if stage == "ingest":
        from commonlink.catalog.ingest import ingest_photos

        report = ingest_photos(work / "photos", work / "photos.csv", work / "catalog-real", progress=False)
        return {"added": len(report.added), "refused": len(report.refused)}
    if stage in RENDER_STAGES:
        from commonlink.synth.job import SynthJob
        from commonlink.synth.plan import PlanConfig
        from commonlink.synth.runner import synthesize

        split = stage.split("-")[1]
        objects = (3, 7) if split == "main" else (8, 16)
        side = options["resolution"]
        plan = PlanConfig(*objects, views=PAPER["views"], width=side, height=side)
        config = SynthJob(scenes=n[f"{split}_scenes"], seed=0, plan=plan)
        cluster = {}
        if options["executor"] == "ray":
            import ray  # connect here (timed with the stage) to report what the scenes ran on

            ray.init(
                address=options["ray_address"], include_dashboard=False, logging_level="WARNING", log_to_driver=False
            )
            cluster = {"ray_nodes": len(ray.nodes()), "ray_cpus": ray.cluster_resources().get("CPU", 0)}
        try:
            summary = synthesize(
                work / f"catalog-{split}",
                config,
                workers=options["workers"],
                executor=options["executor"],
                ray_address=options["ray_address"],
                progress=False,
            )
        finally:
            if cluster:
                ray.shutdown()
        return {"scenes": summary.scenes_rendered, "images": summary.catalog_records, **cluster}
    if stage.startswith("pairs-"):
        from commonlink.kinds.common_o.pairs import PairsConfig, pairs_meta, sample_pairs, write_pairs

        split = stage.split("-")[1]
        catalogs = [work / "catalog-main", work / "catalog-real"] if split == "main" else [work / "catalog-challenge"]
        config = PairsConfig(
            split=split,
            count=n[f"{split}_rows"],
            seed=0,
            real_fraction=PAPER["real_fraction"] if split == "main" else None,
        )
        rows, stats = sample_pairs(catalogs, config)
        write_pairs(work / f"pairs-{split}.jsonl", rows, pairs_meta(config, catalogs, stats))
        return {"rows": len(rows), "real_fraction": stats["real_fraction"]["achieved"]}
    if stage == "release":
        from commonlink.release.build import build_release

        result = build_release(
            [work / "pairs-main.jsonl", work / "pairs-challenge.jsonl"],
            work / "release",
            name="commonlink paper-sized build",
            overwrite=True,
            progress=False,
        )
        size = sum(p.stat().st_size for p in (work / "release").rglob("*") if p.is_file())
        return {"rows": {split: info["rows"] for split, info in result.splits.items()}, "release_bytes": size}
    if stage == "baselines":
        from commonlink.kinds.common_o.task import evaluate_common_o

        scores = {}
        for split in ("main", "challenge"):
            for model in ("none", "random"):
                result = evaluate_common_o(
                    work / "release",
                    split,
                    model,
                    "transformers",
                    work / "eval" / f"{split}-{model}",
                    seed=0,
                    progress=False,
                )
                overall = result["metrics"]["overall"]
                scores[f"{split}-{model}"] = {
                    "rows": result["metrics"]["overall"].get("n", result.get("rows")),
                    "accuracy": round(overall["accuracy"], 4),
                }
        return {"scored": scores}
    raise SystemExit(f"unknown stage {stage!r}; one of {', '.join(STAGES)}")


def _cpu_seconds() -> float:
    """CPU time of this process and of its finished children (render worker processes); Ray workers are not
    children of the stage and are not counted."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _status_mb(field: str) -> float:
    """A memory figure of this process from /proc/self/status (VmRSS: now, VmHWM: peak), in MB."""
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith(field + ":")) / 1024


def _exit_on_sigterm(signum: int, frame) -> None:
    # a stage stopped by SIGTERM unwinds like an error: its worker pools are terminated and joined and its
    # semaphores released (a default SIGTERM death left them to multiprocessing's "leaked semaphore" warning)
    print(f"stage stopped by {signal.Signals(signum).name}", file=sys.stderr, flush=True)
    raise SystemExit(128 + signum)


def stage_child(stage: str, work: Path, scale: float, options: dict) -> None:
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    # resident memory before the stage: the interpreter, numpy and these helpers (the stage's own imports count
    # as the stage's), so that growth with the build's size can be read apart from that fixed part
    start_rss = _status_mb("VmRSS")
    start, cpu = time.perf_counter(), _cpu_seconds()
    info = run_stage(stage, work, scale, options)
    seconds, cpu = time.perf_counter() - start, _cpu_seconds() - cpu
    result = {"seconds": seconds, "cpu_seconds": cpu, "peak_rss_mb": _status_mb("VmHWM"), "start_rss_mb": start_rss}
    print("STAGE-RESULT " + json.dumps({**result, "info": info}, default=str))


def _above_start(stage: dict) -> float:
    """Peak resident memory of a stage above what its process held when the stage began, in MB."""
    return stage["peak_rss_mb"] - stage.get("start_rss_mb", 0.0)


#: What each stage writes under the build folder; a stage run again starts from none of it, except rendering,
#: which resumes its own catalog scene by scene.
STAGE_OUTPUTS = {
    "photos": ("photos", "photos.csv"),
    "ingest": ("catalog-real",),
    "pairs-main": ("pairs-main.jsonl", "pairs-main.jsonl.meta.json"),
    "pairs-challenge": ("pairs-challenge.jsonl", "pairs-challenge.jsonl.meta.json"),
    "release": ("release",),
    "baselines": ("eval",),
}
RENDER_OUTPUTS = {"render-main": "catalog-main", "render-challenge": "catalog-challenge"}
#: Where the result of each finished stage is kept, so that a rerun of the same build resumes after it.
DONE_DIR = "stages-done"


def _fingerprint(scale: float, options: dict) -> dict:
    """What a stage's outputs depend on: a finished stage is reused only by a build with the same."""
    return {"scale": scale, "resolution": options["resolution"], "executor": options["executor"]}


def _finished(work: Path, stage: str, fingerprint: dict) -> dict | None:
    path = work / DONE_DIR / f"{stage}.json"
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return record.get("result") if record.get("fingerprint") == fingerprint else None


def _start_or_resume(work: Path, fingerprint: dict) -> None:
    """Keep what ``work`` holds of a build with the same fingerprint; otherwise remove every stage's outputs (a
    catalog rendered at another resolution cannot be resumed)."""
    marker = work / DONE_DIR / "build.json"
    try:
        same = json.loads(marker.read_text()) == fingerprint
    except (OSError, ValueError):
        same = False
    if not same:
        for name in [*(n for names in STAGE_OUTPUTS.values() for n in names), *RENDER_OUTPUTS.values(), DONE_DIR]:
            target = work / name
            shutil.rmtree(target) if target.is_dir() else target.unlink(missing_ok=True)
    (work / DONE_DIR).mkdir(parents=True, exist_ok=True)
    atomic_write_json(marker, fingerprint)


def _clear_from(work: Path, stage: str) -> None:
    """Forget ``stage`` and every later one (their results depend on it) and remove what ``stage`` wrote."""
    for later in STAGES[STAGES.index(stage) :]:
        (work / DONE_DIR / f"{later}.json").unlink(missing_ok=True)
    for name in STAGE_OUTPUTS.get(stage, ()):
        target = work / name
        if target.is_dir():
            shutil.rmtree(target)
        else:
            target.unlink(missing_ok=True)


def _oom_kills() -> int | None:
    """How many processes the kernel's out-of-memory killer has killed in this cgroup (None: not readable)."""
    for path, key in (
        ("/sys/fs/cgroup/memory.events", "oom_kill"),
        ("/sys/fs/cgroup/memory/memory.oom_control", "oom_kill"),
    ):
        try:
            for line in Path(path).read_text().splitlines():
                name, _, value = line.partition(" ")
                if name == key:
                    return int(value)
        except (OSError, ValueError):
            continue
    return None


#: multiprocessing's resource tracker reports what a killed process left behind; it is a consequence, not the cause
_TRACKER_NOISE = ("resource_tracker", "leaked semaphore", "warnings.warn(")


def failure_cause(returncode: int, stderr: str, *, oom_before: int | None, oom_after: int | None) -> str:
    """Why a stage's process failed, in words: the signal that ended it (and whether the out-of-memory killer
    struck meanwhile), or the last error it printed, then the end of what it printed."""
    lines = [line for line in stderr.splitlines() if not any(noise in line for noise in _TRACKER_NOISE)]
    oom = oom_before is not None and oom_after is not None and oom_after > oom_before
    if returncode < 0 or returncode in (128 + signal.SIGTERM, 128 + signal.SIGINT):
        number = -returncode if returncode < 0 else returncode - 128
        name = signal.Signals(number).name if number in signal.Signals._value2member_map_ else f"signal {number}"
        cause = f"killed by {name} (signal {number})"
        if oom:
            cause += f"; the out-of-memory killer killed {oom_after - oom_before} process(es) meanwhile: out of memory"
        elif number == signal.SIGKILL and oom_before is not None and oom_after is not None:
            cause += (
                " (not the out-of-memory killer: its count in this cgroup did not change; sent by hand or another "
                "program)"
            )
        elif number == signal.SIGKILL:
            cause += " (by hand, or by the out-of-memory killer: its count is not readable here)"
    else:
        errors = [line for line in lines if line and not line.startswith((" ", "Traceback"))]
        # the exception's own line ("commonlink.errors.InputError: ..."), not the "Fix: ..." line after it
        raised = [line for line in errors if re.match(r"^[\w.]+(Error|Exception|Exit|Interrupt)\b", line)]
        cause = f"exit status {returncode}" + (f": {(raised or errors)[-1].strip()}" if errors else "")
        if oom:
            cause += f" (the out-of-memory killer killed {oom_after - oom_before} process(es) meanwhile)"
    tail = "\n".join(lines)[-3000:]
    return cause + (
        f"\nwhat it (and its worker processes) printed last:\n{tail}"
        if tail.strip()
        else "\n(it printed nothing on stderr)"
    )


def _run_stage_process(command: list[str], env: dict) -> tuple[int, str, str]:
    """Run a stage's process; when this process is interrupted, the stage gets SIGTERM first (so it cleans up
    its worker processes), then SIGKILL if it has not ended within 30 s."""
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        out, err = proc.communicate()
    except BaseException:
        proc.terminate()
        try:
            proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        raise
    return proc.returncode, out, err


def build(work: Path, scale: float, options: dict, log=print) -> dict[str, dict]:
    """Every stage in its own process, in order; returns {stage: {seconds, peak_rss_mb, info}}. Stages a previous
    run of the same build in ``work`` finished are not run again (their recorded results are reused)."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            filter(None, [str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH")])
        ),
    }
    fingerprint = _fingerprint(scale, options)
    _start_or_resume(work, fingerprint)
    results = {}
    resuming = True
    for stage in STAGES:
        done = _finished(work, stage, fingerprint) if resuming else None
        if done is not None:
            results[stage] = done
            log(f"  {stage:18s} finished in an earlier run, kept: {done['info']}")
            continue
        resuming = False
        _clear_from(work, stage)
        command = [
            sys.executable,
            __file__,
            "--stage",
            stage,
            "--work",
            str(work),
            "--scale",
            repr(scale),
            "--resolution",
            str(options["resolution"]),
            "--workers",
            str(options["workers"]),
            "--executor",
            options["executor"],
            *(["--ray-address", options["ray_address"]] if options["ray_address"] else []),
        ]
        oom_before = _oom_kills()
        returncode, stdout, stderr = _run_stage_process(command, env)
        if returncode != 0:
            cause = failure_cause(returncode, stderr, oom_before=oom_before, oom_after=_oom_kills())
            raise SystemExit(f"stage {stage} failed at scale {scale}: {cause}")
        line = next(line for line in reversed(stdout.splitlines()) if line.startswith("STAGE-RESULT "))
        results[stage] = json.loads(line.split(" ", 1)[1])
        atomic_write_json(work / DONE_DIR / f"{stage}.json", {"fingerprint": fingerprint, "result": results[stage]})
        r = results[stage]
        log(
            f"  {stage:18s} {r['seconds']:8.1f} s wall {r['cpu_seconds']:8.1f} s CPU  peak RSS {r['peak_rss_mb']:7.0f} "
            f"MB (+{_above_start(r):.0f} over its start)  {r['info']}"
        )
    return results


def extrapolate(
    small: dict, large: dict, s_small: float, s_large: float, target: float = 1.0, key: str = "seconds"
) -> dict[str, float]:
    """Per stage, ``key`` (wall or CPU seconds) at ``target`` scale on the line through two measured sizes
    (fixed + per-unit cost; neither part allowed below zero)."""
    out = {}
    for stage in STAGES:
        t1, t2 = small[stage][key], large[stage][key]
        per_unit = (t2 - t1) / (s_large - s_small)
        fixed = t2 - per_unit * s_large
        if per_unit < 0:  # timing noise: no growth measured; keep the larger measurement
            fixed, per_unit = max(t1, t2), 0.0
        elif fixed < 0:  # purely proportional
            fixed, per_unit = 0.0, t2 / s_large
        out[stage] = fixed + per_unit * target
    return out


def loaded_rerun(root: Path, scale: float, options: dict, how: str) -> list[dict]:
    """The same build from scratch while a second process keeps one CPU busy (a spinning interpreter): how the
    build holds on a machine that is not all its own. Rows: its wall and CPU minutes (context, no target)."""
    work = root / f"scale-{scale:.4f}-loaded"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    print(f"\n[the same build again, from scratch, with a second CPU-bound process running; {how}]")
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        loads = [os.getloadavg()[0]]
        result = build(work, scale, options)
        loads.append(os.getloadavg()[0])
    finally:
        burner.kill()
        burner.wait()
    counted = [s for s in STAGES if s not in NOT_COUNTED]
    wall = sum(result[s]["seconds"] for s in counted) / 60
    cpu = sum(result[s]["cpu_seconds"] for s in counted) / 60
    print(f"  total {wall:.1f} min wall, {cpu:.1f} min CPU, completed (load average {loads[0]:.1f} -> {loads[1]:.1f})")
    label = f"load average {min(loads):.1f}-{max(loads):.1f}, {'full size' if scale == 1.0 else f'scale {scale:.3g}'}"
    return [
        result_row(
            BENCH,
            f"paper-sized build end to end with a second CPU-bound process running, wall, completed ({label})",
            wall,
            "min",
        ),
        result_row(BENCH, f"same build with the second process running, CPU time of all stages ({label})", cpu, "min"),
    ]


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", type=float, default=1.0, help="fraction of the paper's size to build (full run)")
    parser.add_argument(
        "--resolution", type=int, default=384, help="rendered image side in pixels (the demo's default)"
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=usable_cpus(),
        help="render processes for --executor local (default: the usable CPUs, here %(default)s)",
    )
    parser.add_argument("--executor", choices=("local", "ray"), default="local")
    parser.add_argument(
        "--ray-address", default=None, help="a running Ray cluster (e.g. ray://head:10001); default: a local one"
    )
    parser.add_argument("--ray-workers", default="1,4,16,64", help="worker counts for the projected times")
    parser.add_argument("--keep", type=Path, default=None, help="build here and keep it (default: a temporary folder)")
    parser.add_argument(
        "--loaded-rerun",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="after the full-size build, build it once more from scratch with a second CPU-bound process running "
        "(default: on for a full-size run, off for --quick and other --scale)",
    )
    parser.add_argument("--stage", help=argparse.SUPPRESS)
    parser.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    add_contract_arguments(parser)
    return parser


def main() -> None:
    args = make_parser().parse_args()
    options = {
        "resolution": args.resolution,
        "workers": args.workers,
        "executor": args.executor,
        "ray_address": args.ray_address,
    }
    if args.stage:
        stage_child(args.stage, args.work, args.scale, options)
        return

    scales = [1 / 40, 1 / 20] if args.quick else [1 / 20, args.scale]
    root = args.keep or Path(tempfile.mkdtemp(prefix="paper-build-"))
    measured = {}
    try:
        for scale in scales:
            work = root / f"scale-{scale:.4f}"
            work.mkdir(parents=True, exist_ok=True)  # a rerun resumes after the stages finished here
            n = sizes(scale)
            print(
                f"[build at {scale:.4g} of the paper's size: {n['main_rows']:,} main + {n['challenge_rows']:,} "
                f"challenge rows, {n['real_scenes'] * 4} photos, "
                f"{(n['main_scenes'] + n['challenge_scenes']) * 4} renders at {args.resolution} px, "
                f"executor {args.executor}]"
            )
            measured[scale] = build(work, scale, options)
            if args.keep is None and scale != scales[-1]:  # done: its outputs go, its stage results stay
                for entry in work.iterdir():
                    if entry.name != DONE_DIR:
                        shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
        small, large = measured[scales[0]], measured[scales[1]]
        if args.quick or args.scale != 1.0:
            seconds = extrapolate(small, large, scales[0], scales[1])
            cpu = extrapolate(small, large, scales[0], scales[1], key="cpu_seconds")
            how = (
                f"projected from builds at {scales[0]:.3g} and {scales[1]:.3g} of the paper's size "
                "(a line through both, per stage)"
            )
        else:
            seconds = {s: large[s]["seconds"] for s in STAGES}
            cpu = {s: large[s]["cpu_seconds"] for s in STAGES}
            how = "measured at full size"
        # A stage cannot take less wall time than its CPU time spread over the processes it runs in: with two
        # noisy points the wall line can dip below that; the CPU line is the steadier of the two.
        workers_used = args.workers if args.executor == "local" else 1
        for stage in STAGES:
            seconds[stage] = max(seconds[stage], cpu[stage] / (workers_used if stage in RENDER_STAGES else 1))
        counted = [s for s in STAGES if s not in NOT_COUNTED]
        total, total_cpu = sum(seconds[s] for s in counted), sum(cpu[s] for s in counted)
        # What an idle 2-core machine would take: CPU time, render stages shared by their worker processes.
        idle = sum(cpu[s] / (workers_used if s in RENDER_STAGES else 1) for s in counted)
        render = sum(seconds[s] for s in RENDER_STAGES)
        load = os.getloadavg()[0]
        print(
            f"\npaper-sized build ({PAPER['main_rows']:,} main + {PAPER['challenge_rows']:,} challenge rows), {how}; "
            f"load average now {load:.1f} on {os.cpu_count()} CPUs:"
        )
        for stage in STAGES:
            note = "  (stand-in for photos a user has; not counted)" if stage in NOT_COUNTED else ""
            print(f"  {stage:18s} {seconds[stage] / 60:7.1f} min wall {cpu[stage] / 60:7.1f} min CPU{note}")
        print(f"  {'total':18s} {total / 60:7.1f} min wall {total_cpu / 60:7.1f} min CPU (target < 15 min wall)")
        print(f"  on an idle machine (CPU time; render shared by {workers_used} processes): about {idle / 60:.1f} min")
        peaks = {s: large[s]["peak_rss_mb"] / small[s]["peak_rss_mb"] for s in STAGES}
        worst = max(peaks, key=peaks.get)
        print(
            "peak RSS per stage, larger vs smaller build: "
            + ", ".join(f"{s} {large[s]['peak_rss_mb']:.0f}/{small[s]['peak_rss_mb']:.0f} MB" for s in STAGES)
        )
        above = {s: _above_start(large[s]) / max(_above_start(small[s]), 1.0) for s in STAGES}
        print(
            "peak RSS above the stage's start (interpreter + numpy; the stage's imports count), larger vs smaller: "
            + ", ".join(f"{s} {_above_start(large[s]):.0f}/{_above_start(small[s]):.0f} MB" for s in STAGES)
        )
        release_bytes = large["release"]["info"]["release_bytes"]
        release_full = release_bytes / scales[1]
        print(
            f"release size: {release_bytes / 1e6:.1f} MB at {scales[1]:.4g} -> {release_full / 1e9:.2f} GB at full "
            f"size (proportional: every row carries its two images)"
        )
        workers = [int(w) for w in args.ray_workers.split(",")]
        render_cpu = sum(cpu[s] for s in RENDER_STAGES)
        if args.executor == "ray":
            print(
                "  (--executor ray: the render tasks' CPU time is spent in Ray's workers and is not in these CPU "
                "figures)"
            )
        idle_rest = idle - sum(cpu[s] / workers_used for s in RENDER_STAGES)

        def on_ray(n_workers: int) -> float:
            """Idle-machine estimate with the render CPU time spread over N Ray workers (one scene a task)."""
            return idle_rest + render_cpu / n_workers

        for n_workers in workers:
            print(
                f"  projected on {n_workers:3d} Ray workers: {on_ray(n_workers) / 60:6.1f} min on an idle driver "
                f"machine (render {render_cpu / n_workers / 60:.1f} min; "
                f"{(total - render + render / n_workers) / 60:.1f} min with "
                f"the other stages as slow as on this machine)"
            )
        label = (
            "" if how == "measured at full size" else f" [projected from {scales[0]:.3g} and {scales[1]:.3g} builds]"
        )
        rows = [
            result_row(
                BENCH,
                f"paper-sized build end to end, 10,426 + 12,600 rows, wall on this machine{label}",
                total / 60,
                "min",
                target="< 15",
            ),
            result_row(BENCH, f"paper-sized build, CPU time of all stages{label}", total_cpu / 60, "min"),
            result_row(
                BENCH,
                f"paper-sized build, idle 2-core estimate (CPU time, render / {workers_used} processes){label}",
                idle / 60,
                "min",
                target="< 15",
            ),
            result_row(
                BENCH,
                f"of which rendering, wall (offline, {args.resolution} px, {args.workers} processes){label}",
                render / 60,
                "min",
            ),
            result_row(
                BENCH,
                f"paper-sized build with rendering on {max(workers)} Ray workers (idle-machine estimate){label}",
                on_ray(max(workers)) / 60,
                "min",
            ),
            result_row(
                BENCH,
                f"build peak RSS, worst stage ({worst}), {scales[1]:.3g} vs {scales[0]:.3g} of paper size",
                peaks[worst],
                "x",
                target="<= 1.3",
            ),
            result_row(
                BENCH,
                f"build peak RSS above the stage's start, same stage ({worst}), {scales[1]:.3g} vs {scales[0]:.3g} "
                "of paper size (context: the fixed interpreter + numpy part left out)",
                above[worst],
                "x",
            ),
            result_row(
                BENCH, f"paper-sized release size (proportional from {scales[1]:.3g}){label}", release_full / 1e9, "GB"
            ),
        ]
        if args.loaded_rerun if args.loaded_rerun is not None else not (args.quick or args.scale != 1.0):
            rows += loaded_rerun(root, scales[-1], options, how)
    except BaseException:
        if args.keep is None:
            print(
                f"The finished stages are kept in {root}: rerun with --keep {root} (and the same options) to resume "
                "from them.",
                file=sys.stderr,
            )
        raise
    if args.keep is None:
        shutil.rmtree(root, ignore_errors=True)
    print_rows(rows)
    write_rows(args.json, rows)


if __name__ == "__main__":
    main()
