"""The main job on embedded defaults: render → pairs → release → load → score baselines.

``commonlink demo`` runs the whole flow a newcomer should see work, with no input, no GPU and no download:

1. renders a small synthetic catalog per split with the embedded offline renderer (3–7 objects a scene for
   ``main``, 8–16 for ``challenge``);
2. samples Common-O examples from each catalog;
3. builds a release folder (parquet shards, dataset card with figures, manifest);
4. opens the release with plain ``datasets.load_dataset`` (what a user of the published split does);
5. scores the weight-free ``random`` and ``none`` baselines on both splits and prints the table;
6. writes an HTML report per split (both baselines side by side, with the images) and prints where it is.

Each stage writes its usual files, so rerunning continues from what is there (rendered scenes and cached
predictions are kept), and each stage's folder can be fed to the individual commands. Rendering and the release
build run in a child process each (:class:`_StageProcess`), so the memory they hold (the renderer's libraries
and buffers, matplotlib and the shard writer's) is given back before the next stage instead of staying under it.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from commonlink.errors import BackendError, CommonlinkError, InputError
from commonlink.eval.report.html import write_report
from commonlink.kinds.common_o.pairs import PairsConfig, pairs_meta, sample_pairs, write_pairs
from commonlink.kinds.common_o.task import evaluate_common_o
from commonlink.progress import datasets_bars
from commonlink.release.build import build_release
from commonlink.synth.job import SynthJob
from commonlink.synth.plan import PlanConfig
from commonlink.synth.runner import synthesize

#: Demo sizes: small enough for a laptop CPU in a few minutes, big enough to fill every figure.
DEMO_SPLITS = {
    "main": {"objects": (3, 7), "scenes": 24, "count": 120},
    "challenge": {"objects": (8, 16), "scenes": 16, "count": 60},
}
BASELINES = ("random", "none")


@dataclass
class DemoResult:
    out_dir: Path
    catalogs: dict[str, Path] = field(default_factory=dict)
    pairs: dict[str, Path] = field(default_factory=dict)
    release: Path | None = None
    rows: dict[str, int] = field(default_factory=dict)
    features: dict[str, str] = field(default_factory=dict)
    eval_runs: dict[str, Path] = field(default_factory=dict)
    results: list[dict] = field(default_factory=list)
    reports: dict[str, object] = field(default_factory=dict)  #: split -> ReportSummary of its side-by-side page
    pair_stats: dict[str, dict] = field(default_factory=dict)  #: split -> the statistics of its pairs file


def k_spread_lines(split: str, stats: dict) -> list[str]:
    """The demo's account of a split's pairs: examples per number of common objects, the baselines' floors, the
    counts the catalog could not supply (and why), one line each."""
    spread = ", ".join(f"k={k}: {n}" for k, n in stats["common_objects"].items() if n)
    floors = stats["baselines"]
    lines = [
        f"      {split}: {stats['examples']} examples over {sum(1 for n in stats['common_objects'].values() if n)} "
        f"common-object counts ({spread}); baselines `none` {floors['none']:.1%}, `random` {floors['random']:.1%}"
    ]
    if stats["common_objects_missing"]:
        lines.append(
            f"      {split}: NOT REACHED: k = {', '.join(map(str, stats['common_objects_missing']))} "
            "(no such pair in the catalog, or none left under the use cap: see the notes)"
        )
    lines += [f"      note: {note}" for note in stats["notes"]]
    return lines


def _child_main(conn) -> None:
    """A stage process (see :class:`_StageProcess`): runs each ``(function, args, kwargs)`` it is sent and answers
    how it ended, until it is sent ``None``."""
    with contextlib.suppress(KeyboardInterrupt, EOFError):  # Ctrl-C reaches it too: the demo says so, not a traceback
        while (item := conn.recv()) is not None:
            conn.send(_child_call(*item))
    conn.close()


def _child_call(function, args: tuple, kwargs: dict) -> tuple:
    try:
        function(*args, **kwargs)
        return ("ok",)
    except CommonlinkError as exc:  # sent as its parts: pickling keeps only the joined message
        return ("known", type(exc), exc.problem, exc.fix)
    except Exception as exc:  # as text: not every exception can be rebuilt from its pickle
        where = "".join(traceback.format_exception(exc)[-3:]).strip()
        return ("known", BackendError, f"{type(exc).__name__}: {exc}", where)


class _StageProcess:
    """A demo stage in a child process. Rendering (pyrender, OpenGL, trimesh, scipy, Mesa's buffers: about 270 MB
    resident for the demo's scenes) and the release build (matplotlib, its figures and shard buffers: about 150
    MB more) hold memory a process does not give back to the system once freed; run in the demo's own process,
    that memory stayed under ``datasets``, the scoring and the reports. Each in a child, the demo's largest
    process holds one of them at a time, not all together. "spawn", as the synth pool: a fresh interpreter, never
    a fork of a process that may hold an OpenGL context. Not a daemon, so ``--workers`` > 1 can still start the
    synth pool inside it."""

    def __init__(self, what: str):
        self.what = what
        context = multiprocessing.get_context("spawn")
        self.conn, theirs = context.Pipe()
        self.child = context.Process(target=_child_main, args=(theirs,), daemon=False, name=f"commonlink-{what}")
        self.child.start()
        theirs.close()

    def __enter__(self) -> _StageProcess:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def call(self, function, *args, **kwargs) -> None:
        """``function(*args, **kwargs)`` in the child; its error is raised here as the class it was."""
        try:
            self.conn.send((function, args, kwargs))
            outcome = self.conn.recv()
        except (EOFError, BrokenPipeError):  # it died: killed (out of memory, a signal) or crashed in native code
            self.child.join()
            code = self.child.exitcode or 0
            how = f"was killed by signal {signal.Signals(-code).name}" if code < 0 else f"exited with status {code}"
            raise BackendError(
                f"The demo's {self.what} process {how} before it finished.",
                "Rerun the same demo command: it continues from what is done (if it was killed for memory, close "
                "other programs or lower --resolution).",
            ) from None
        if outcome[0] == "known":  # problem and fix kept apart, as the CLI prints them
            error = outcome[1].__new__(outcome[1])
            CommonlinkError.__init__(error, outcome[2], outcome[3])
            raise error

    def close(self) -> None:
        """Let the child finish. After Ctrl-C it got the signal too and ends its own pool first (the scenes it
        finished stay); one that does not end in a while is stopped."""
        with contextlib.suppress(OSError):
            self.conn.send(None)
        self.child.join(timeout=10)
        if self.child.is_alive():
            self.child.terminate()
            self.child.join()
        self.conn.close()


def _render_demo_split(
    stage: _StageProcess,
    out: Path,
    split: str,
    spec: dict,
    seed: int,
    scale: float,
    resolution: tuple[int, int],
    views: int,
    workers: int,
    progress: bool,
    log,
) -> Path:
    """Render one split's catalog in ``stage``'s process; returns the catalog folder."""
    catalog = out / f"catalog-{split}"
    scenes = max(3, round(spec["scenes"] * scale))
    log(
        f"[1/6] Rendering {scenes} {split} scenes ({spec['objects'][0]}-{spec['objects'][1]} objects, {views} "
        f"views) into {catalog}"
    )
    job = SynthJob(
        scenes=scenes,
        seed=seed,
        plan=PlanConfig(*spec["objects"], views=views, width=resolution[0], height=resolution[1]),
    )
    try:
        stage.call(synthesize, catalog, job, workers=workers, progress=progress)
    except InputError as exc:
        if "different options" not in exc.problem:
            raise
        # The synth hint names `synth --overwrite`, which the demo does not have.
        raise InputError(
            exc.problem,
            f"Rerun the demo with the --seed and --resolution it was started with to continue, "
            f"or give another --out folder (or delete {out}).",
        ) from exc
    return catalog


def run_demo(
    out_dir: str | os.PathLike = "commonlink-demo",
    *,
    seed: int = 0,
    scale: float = 1.0,
    resolution: tuple[int, int] = (384, 384),
    views: int = 4,
    workers: int = 1,
    progress: bool = True,
    log=print,
) -> DemoResult:
    """Run the demo into ``out_dir``; ``scale`` multiplies scene and example counts (tests use a small one)."""

    out = Path(out_dir)
    result = DemoResult(out)
    with _StageProcess("rendering") as stage:
        for split, spec in DEMO_SPLITS.items():
            result.catalogs[split] = _render_demo_split(
                stage, out, split, spec, seed, scale, resolution, views, workers, progress, log
            )

    for split, spec in DEMO_SPLITS.items():
        count = max(8, round(spec["count"] * scale))
        config = PairsConfig(split=split, count=count, seed=seed)
        pairs_file = out / f"pairs-{split}.jsonl"
        log(f"[2/6] Sampling {count} {split} examples into {pairs_file}")
        rows, stats = sample_pairs([result.catalogs[split]], config, progress=progress)
        write_pairs(pairs_file, rows, pairs_meta(config, [result.catalogs[split]], stats))
        result.pairs[split] = pairs_file
        result.pair_stats[split] = stats
        for line in k_spread_lines(split, stats):
            log(line)

    release = out / "release"
    log(f"[3/6] Building the release in {release}")
    with _StageProcess("release build") as stage:
        stage.call(
            build_release,
            list(result.pairs.values()),
            release,
            name="commonlink demo",
            overwrite=True,
            progress=progress,
        )
    result.release = release

    log("[4/6] Loading it back with datasets.load_dataset")
    import datasets

    with datasets_bars(progress):  # its "Generating ... split" bars follow ours
        loaded = datasets.load_dataset(str(release))
    for split, ds in loaded.items():
        result.rows[split] = len(ds)
    first = next(iter(loaded.values()))
    result.features = {name: str(feature) for name, feature in first.features.items()}

    for split in DEMO_SPLITS:
        for model in BASELINES:
            run_dir = out / "eval" / f"{split}-{model}"
            log(f"[5/6] Scoring the {model!r} baseline on {split} into {run_dir}")
            result.results.append(
                evaluate_common_o(release, split, model, "transformers", run_dir, seed=seed, progress=progress)
            )
            result.eval_runs[f"{split}-{model}"] = run_dir

    for split in DEMO_SPLITS:
        page = out / "eval" / f"report-{split}.html"
        log(f"[6/6] Writing the {split} report (baselines side by side, with images) to {page}")
        result.reports[split] = write_report(
            [result.eval_runs[f"{split}-{model}"] for model in BASELINES], page, seed=seed
        )
    return result
