"""Check that ``sample_pairs`` of this checkout writes byte-identical pairs files to a git ref's (e.g. ``main``).

    .venv/bin/python tools/check_pairs_identical.py [--ref main] [--quick]

For a speed change of the pair sampler that must not change its output. Builds catalogs once (the benchmark's
themed 3-7-object catalog at several sizes, a challenge catalog of 8-16 objects, real and synthetic catalogs
given as two folders with an image listed in both, a test-suite catalog), then samples them with the ref's
``commonlink`` (``git archive`` into a temporary folder) and with this checkout's, each in its own process,
over several seeds, ``--common-distribution`` values, caps (tight ones force the k schedule to move quotas)
and counts. Compares the pairs files byte for byte, the sidecars (all but ``created``) and any error text.
Exits 1 on any difference.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def cases(quick: bool) -> list[tuple[str, list[str], dict]]:
    """(case name, catalog folder names, PairsConfig keyword arguments)."""
    out: list[tuple[str, list[str], dict]] = []
    sizes = ["t300", "t2000", "t5000"] + ([] if quick else ["t20000"])
    seeds = [0, 1, 7] if quick else [0, 1, 2, 7, 123]
    for size in sizes:
        n_images = int(size[1:])
        for seed in seeds:
            for dist in ("none=0.1", "uniform", "1,3,3,2,1,1,0.5,0.2", "none=0.4"):
                count = max(50, n_images // 2)
                out.append(
                    (f"{size}-s{seed}-{dist}", [size], {"count": count, "seed": seed, "common_distribution": dist})
                )
        # tight caps: counts run out and their quota moves (the _KSchedule path); a request that cannot be met
        out.append((f"{size}-cap1", [size], {"count": n_images // 3, "max_uses": 1, "seed": 3}))
        out.append((f"{size}-cap2-k3", [size], {"count": n_images // 2, "max_uses": 2, "max_common": 3, "seed": 4}))
        out.append(
            (f"{size}-objects-4-6", [size], {"count": n_images // 4, "objects": (4, 6), "seed": 5, "choices": 6})
        )
        out.append((f"{size}-too-many", [size], {"count": n_images * 3, "max_uses": 2, "seed": 0}))
        out.append((f"{size}-real-only", [size], {"count": n_images // 5, "real_fraction": 1.0, "seed": 9}))
    for seed in seeds:
        out.append((f"challenge-s{seed}", ["challenge"], {"split": "challenge", "count": 1200, "seed": seed}))
        out.append(
            (
                f"challenge-s{seed}-uniform",
                ["challenge"],
                {"split": "challenge", "count": 1200, "seed": seed, "common_distribution": "uniform"},
            )
        )
        out.append((f"two-catalogs-s{seed}", ["real", "synthetic"], {"count": 600, "seed": seed}))
        out.append((f"suite-s{seed}", ["suite-real", "suite-synthetic"], {"count": 60, "seed": seed}))
    out.append(("suite-k-max-2", ["suite-real", "suite-synthetic"], {"count": 40, "max_common": 2, "seed": 11}))
    for broken in BROKEN:  # each stops with an error whose text must not change
        out.append((f"broken-{broken}", [f"broken-{broken}"], {"count": 100, "seed": 0}))
    out.append(("no-file-check", ["t2000"], {"count": 500, "seed": 0, "check_files": False}))
    return out


#: catalogs with one fault each: (name, line to change (0-based), how)
BROKEN = {
    "source": (40, lambda rec: {**rec, "source": "video"}),
    "objects": (41, lambda rec: {**rec, "objects": "apple"}),
    "missing-field": (42, lambda rec: {k: v for k, v in rec.items() if k not in ("sha256", "width")}),
    "width": (43, lambda rec: {**rec, "width": True}),
    "reserved-name": (44, lambda rec: {**rec, "objects": rec["objects"] + ["No objects are in common"]}),
    "json": (45, None),
    "missing-file": (46, "unlink"),
}


def build_catalogs(folder: Path, quick: bool) -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    sys.path.insert(0, str(ROOT))
    from bench_pairs import make_catalog

    from commonlink.formats.catalog import read_catalog, write_catalog
    from tests.fixtures.catalogs import family_scenes, write_scene_catalog

    for n in (300, 2000, 5000) + (() if quick else (20_000,)):
        make_catalog(folder / f"t{n}", n, seed=n)
    make_catalog(folder / "challenge", 4000, seed=5, objects=(8, 16))
    both = make_catalog(folder / "both", 3000, seed=8)
    records = read_catalog(both)
    for name in ("real", "synthetic"):
        part = [r for r in records if r.source == name] + ([records[-1]] if name == "real" else [])  # one image in both
        (folder / name).mkdir()
        (folder / name / "images").symlink_to(both / "images")
        write_catalog(folder / name, part)
    base = make_catalog(folder / "broken-base", 300, seed=3)
    lines = (base / "catalog.jsonl").read_text().splitlines(keepends=True)
    for name, (line, change) in BROKEN.items():
        target = folder / f"broken-{name}"
        target.mkdir()
        shutil.copytree(base / "images", target / "images")
        changed = list(lines)
        if change is None:
            changed[line] = changed[line][:-5] + "\n"  # cut short: not JSON
        elif change == "unlink":
            (target / json.loads(changed[line])["path"]).unlink()
        else:
            changed[line] = json.dumps(change(json.loads(changed[line]))) + "\n"
        changed.insert(10, "\n")  # a blank line: record numbers and file lines differ from here on
        (target / "catalog.jsonl").write_text("".join(changed))
    write_scene_catalog(folder / "suite-real", "real", family_scenes(24, seed=1), views=3, seed=1)
    write_scene_catalog(folder / "suite-synthetic", "synthetic", family_scenes(30, seed=2), views=4, hide=True, seed=2)


def worker(catalogs: Path, out: Path, quick: bool) -> None:
    """Runs inside the process whose PYTHONPATH selects the commonlink under test."""
    from commonlink.errors import CommonlinkError
    from commonlink.kinds.common_o.pairs import (
        PairsConfig,
        pairs_meta,
        sample_pairs,
        write_pairs,
    )

    for name, folders, kwargs in cases(quick):
        dirs = [catalogs / f for f in folders]
        config = PairsConfig(**kwargs)
        try:
            rows, stats = sample_pairs(dirs, config)
        except CommonlinkError as exc:
            (out / f"{name}.error").write_text(f"{type(exc).__name__}: {exc}")
            continue
        write_pairs(out / f"{name}.jsonl", rows, pairs_meta(config, dirs, stats))


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ref", default="main", help="git ref to compare against (default: main)")
    parser.add_argument("--quick", action="store_true", help="smaller catalogs and fewer seeds")
    parser.add_argument("--worker", nargs=2, metavar=("CATALOGS", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(Path(args.worker[0]), Path(args.worker[1]), args.quick)
        return
    with tempfile.TemporaryDirectory(prefix="pairs-identical-") as tmp:
        tmp_path = Path(tmp)
        ref_tree = tmp_path / "ref"
        ref_tree.mkdir()
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", args.ref, "commonlink"], check=True, capture_output=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(ref_tree)], input=archive, check=True)
        build_catalogs(tmp_path / "catalogs", args.quick)
        outputs = {}
        for label, tree in ((args.ref, ref_tree), ("this checkout", ROOT)):
            out = tmp_path / ("out-ref" if tree is ref_tree else "out-new")
            out.mkdir()
            env = {**os.environ, "PYTHONPATH": str(tree)}
            command = [sys.executable, str(Path(__file__).resolve()), "--worker", str(tmp_path / "catalogs"), str(out)]
            subprocess.run(command + (["--quick"] if args.quick else []), check=True, env=env, cwd=tmp)
            outputs[label] = out
        ref_out, new_out = outputs[args.ref], outputs["this checkout"]
        problems = []
        names = sorted(p.name for p in ref_out.iterdir())
        if names != sorted(p.name for p in new_out.iterdir()):
            problems.append(f"different files: {names} vs {sorted(p.name for p in new_out.iterdir())}")
        rows = errors = 0
        for name in names:
            a, b = ref_out / name, new_out / name
            if not b.exists():
                continue
            if name.endswith(".meta.json"):
                meta_a, meta_b = (json.loads(p.read_text()) for p in (a, b))
                meta_a.pop("created"), meta_b.pop("created")
                if meta_a != meta_b:
                    problems.append(f"{name}: sidecars differ")
            elif name.endswith(".error"):
                errors += 1
                if a.read_text() != b.read_text():
                    problems.append(f"{name}: {a.read_text()!r} vs {b.read_text()!r}")
            else:
                rows += sum(1 for _ in a.open())
                if digest(a) != digest(b):
                    problems.append(f"{name}: pairs files differ")
        n_files = sum(1 for n in names if n.endswith(".jsonl"))
        print(
            f"{len(cases(args.quick))} cases: {n_files} pairs files ({rows:,} rows) and {errors} errors compared, "
            f"{args.ref} vs this checkout"
        )
        for problem in problems:
            print(f"  DIFFERENT: {problem}")
        if problems:
            sys.exit(1)
        print("  identical: every pairs file byte for byte, every sidecar but 'created', every error text")


if __name__ == "__main__":
    main()
