"""Hub push benchmark (issue: versioned releases on the Hub), against the local test Hub with the real clients.

1. Resume: a push killed after some LFS uploads, then rerun. Bytes the rerun sends / bytes a fresh push sends
   (baseline, measured in the same run). Target: the rerun sends only the objects that had not arrived (ratio =
   missing share, well below 1.0).
2. No-op rerun of a finished version: wall time / first push wall time, and bytes sent (target: 0 bytes).
3. Next version with one split changed: bytes sent / release size (target: only the changed split's shards).
4. The same four pushes (fresh, resumed after the same kill, no-op, next version) with stock
   ``HfApi.upload_folder`` (a fresh process each, like ours), against a second Hub: bytes and wall time. Stock
   huggingface_hub already skips LFS objects the Hub has, so the byte targets above are met by it too; the
   ratios say what ours costs on top, and what it adds is named in the output: a version tag per release
   (refused when it exists with other content), the manifest's sha256 of every file checked before and after
   upload, the dataset card's configs checked against the shards, and files of older versions not in this one
   removed from ``main`` in the same commit.

    .venv/bin/python benchmarks/bench_hub_push.py [--shards 8] [--shard-mb 2]
"""

from __future__ import annotations

import _common  # noqa: E402,F401  (puts the repository root on sys.path)

# isort: split

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from commonlink.fileio import atomic_write_json, sha256_file  # noqa: E402
from tests.fixtures.hub_server import HubServer  # noqa: E402

from _results import add_contract_arguments, print_rows, result_row, write_rows  # noqa: E402

BENCH = "bench_hub_push.py"

TOKEN = "hf_bench_token"
REPO = "bench/push"  # the token's user is "bench", so it may write there


def make_release(root: Path, version: str, shards: dict[str, int], shard_mb: float, seed: int) -> Path:
    rng = np.random.default_rng(seed)
    (root / "data").mkdir(parents=True, exist_ok=True)
    splits = {}
    for split, count in shards.items():
        files = []
        for i in range(count):
            rel = f"data/{split}-{i:05d}-of-{count:05d}.parquet"
            blobs = [rng.bytes(64 * 1024) for _ in range(max(1, int(shard_mb * 16)))]  # incompressible
            pq.write_table(pa.table({"blob": blobs}), root / rel)
            files.append(rel)
        splits[split] = {"rows": count * len(blobs), "files": files}
    data_files = "".join(f"  - split: {s}\n    path: data/{s}-*\n" for s in shards)
    (root / "README.md").write_text(f"---\nconfigs:\n- config_name: default\n  data_files:\n{data_files}---\n# bench\n")
    files = {
        p.relative_to(root).as_posix(): {"sha256": sha256_file(p), "size": p.stat().st_size}
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != "manifest.json"
    }
    atomic_write_json(
        root / "manifest.json", {"version": version, "kind": "common_o", "splits": splits, "files": files}
    )
    return root


def push_cmd(release: Path, version: str, repo: str = REPO) -> list[str]:
    return [
        sys.executable,
        "-m",
        "commonlink.cli",
        "release",
        "push",
        str(release),
        "--repo",
        repo,
        "--version",
        version,
    ]


def env_for(hub: HubServer, home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(hub.client_env(token=TOKEN))
    env["HF_HOME"] = str(home)
    return env


def sent_bytes(hub: HubServer, since: int, sizes: dict[str, int]) -> int:
    return sum(sizes.get(oid, 0) for oid in hub.lfs_puts[since:])


def timed(cmd: list[str], env: dict[str, str]) -> float:
    return _common.timed(subprocess.run, cmd, env=env, check=True, capture_output=True)[0]


_STOCK = """
import sys
from huggingface_hub import HfApi
api = HfApi()
api.create_repo(sys.argv[2], repo_type="dataset", exist_ok=True)
api.upload_folder(
    folder_path=sys.argv[1], repo_id=sys.argv[2], repo_type="dataset", commit_message="push " + sys.argv[1]
)
"""


def stock_cmd(release: Path, repo: str = REPO) -> list[str]:
    """Stock huggingface_hub: ``HfApi.upload_folder`` of the release folder, in a fresh process like ours."""
    return [sys.executable, "-c", _STOCK, str(release), repo]


def stock_pushes(
    tmp: Path, release: Path, v2: Path, sizes: dict[str, int], shards: int
) -> dict[str, tuple[float, int]]:
    """The four pushes of ours, with stock ``upload_folder``: {name: (wall seconds, bytes sent)}."""
    out = {}
    with HubServer(tmp / "stock-fresh", tokens={TOKEN: "bench"}) as hub:
        out["fresh"] = (timed(stock_cmd(release, "bench/fresh"), env_for(hub, tmp / "s0")), sent_bytes(hub, 0, sizes))
    with HubServer(tmp / "stock-hub", tokens={TOKEN: "bench"}) as hub:
        env = env_for(hub, tmp / "s1")
        hub.drop_lfs_uploads(from_put=max(2, shards // 2))
        proc = subprocess.Popen(stock_cmd(release), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        hub.fault_tripped.wait(120)
        time.sleep(0.3)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        hub.clear_faults()
        for name, folder in (("resume", release), ("noop", release), ("v2", v2)):
            mark = len(hub.lfs_puts)
            out[name] = (timed(stock_cmd(folder), env), sent_bytes(hub, mark, sizes))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--shard-mb", type=float, default=2.0)
    add_contract_arguments(parser)
    args = parser.parse_args()
    if args.quick:
        args.shards, args.shard_mb = 4, 1.0
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        release = make_release(tmp / "v1", "1.0.0", {"main": args.shards, "challenge": 2}, args.shard_mb, seed=0)
        sizes = {sha256_file(p): p.stat().st_size for p in (release / "data").iterdir()}
        total = sum(sizes.values())

        # baseline: a fresh push of the whole release to its own Hub
        with HubServer(tmp / "hub-fresh", tokens={TOKEN: "bench"}) as hub:
            fresh_s = timed(push_cmd(release, "1.0.0", "bench/fresh"), env_for(hub, tmp / "h0"))
            fresh_bytes = sent_bytes(hub, 0, sizes)

        with HubServer(tmp / "hub", tokens={TOKEN: "bench"}) as hub:
            env = env_for(hub, tmp / "h1")
            hub.drop_lfs_uploads(from_put=max(2, args.shards // 2))
            proc = subprocess.Popen(
                push_cmd(release, "1.0.0"), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
            hub.fault_tripped.wait(120)
            time.sleep(0.3)
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            hub.clear_faults()
            arrived = sum(sizes.get(oid, 0) for oid in hub.lfs_objects())
            mark = len(hub.lfs_puts)
            resume_s = timed(push_cmd(release, "1.0.0"), env)
            resume_bytes = sent_bytes(hub, mark, sizes)

            mark = len(hub.lfs_puts)
            noop_s = timed(push_cmd(release, "1.0.0"), env)
            noop_bytes = sent_bytes(hub, mark, sizes)

            v2 = make_release(tmp / "v2", "1.1.0", {"main": args.shards, "challenge": 2}, args.shard_mb, seed=0)
            for p in (v2 / "data").glob("challenge-*"):  # change only the challenge split
                pq.write_table(pa.table({"blob": [os.urandom(64 * 1024)]}), p)
            make_release_manifest_refresh(v2)
            mark = len(hub.lfs_puts)
            sizes.update({sha256_file(p): p.stat().st_size for p in (v2 / "data").iterdir()})
            v2_s = timed(push_cmd(v2, "1.1.0"), env)
            v2_bytes = sent_bytes(hub, mark, sizes)
            changed = sum(p.stat().st_size for p in (v2 / "data").glob("challenge-*"))
        stock = stock_pushes(tmp, release, v2, sizes, args.shards)
    ours = {
        "fresh": (fresh_s, fresh_bytes),
        "resume": (resume_s, resume_bytes),
        "noop": (noop_s, noop_bytes),
        "v2": (v2_s, v2_bytes),
    }

    mb = 1024 * 1024
    print(f"release: {args.shards + 2} shards, {total / mb:.1f} MB")
    print(f"fresh push (baseline): {fresh_bytes / mb:.1f} MB sent in {fresh_s:.2f} s")
    print(
        f"resume after kill: {arrived / mb:.1f} MB had arrived; rerun sent {resume_bytes / mb:.1f} MB in "
        f"{resume_s:.2f} s -> {resume_bytes / fresh_bytes:.2f} x the baseline's bytes "
        f"(missing share {(total - arrived) / total:.2f})"
    )
    print(f"no-op rerun: {noop_bytes} bytes sent, {noop_s:.2f} s = {noop_s / fresh_s:.2f} x the fresh push time")
    print(
        f"next version, challenge split changed: sent {v2_bytes / mb:.2f} MB of {total / mb:.1f} MB "
        f"(changed shards {changed / mb:.2f} MB) -> {v2_bytes / total:.3f} x the release size, in {v2_s:.2f} s"
    )
    print("stock HfApi.upload_folder, same pushes (fresh process each, separate Hub):")
    for name in ours:
        (our_s, our_b), (st_s, st_b) = ours[name], stock[name]
        print(
            f"  {name:7s} ours {our_b / mb:7.2f} MB in {our_s:6.2f} s | upload_folder {st_b / mb:7.2f} MB in "
            f"{st_s:6.2f} s"
        )
    print(
        "ours adds: a version tag per release (refused when it exists with other content), every file's sha256 checked "
        "against the manifest before and after upload, the card's configs checked against the shards, files of older "
        "versions not in this one removed from main in the same commit"
    )
    missing = total - arrived
    rows = [
        result_row(
            BENCH,
            "push resumed after a kill: bytes sent beyond the missing objects, share of the release",
            (resume_bytes - missing) / total,
            "x",
            target="<= 0.01",
        ),
        result_row(
            BENCH,
            "push resumed after a kill: bytes sent",
            resume_bytes / mb,
            "MB",
            peer="a fresh push of the whole release",
            ratio=resume_bytes / fresh_bytes,
        ),
        result_row(BENCH, "no-op push of a finished version: bytes sent", noop_bytes, "B", target="== 0"),
        result_row(
            BENCH,
            "next version, one split changed: bytes sent / changed shards' bytes",
            v2_bytes / changed,
            "x",
            target="<= 1.0",
        ),
    ]
    for name, what in (
        ("fresh", "fresh push"),
        ("resume", "push resumed after a kill"),
        ("v2", "next version, one split changed"),
    ):
        (our_s, our_b), (st_s, st_b) = ours[name], stock[name]
        # Oriented as every ratio in the table: above 1 is better for commonlink (fewer bytes, less time).
        rows.append(
            result_row(
                BENCH,
                f"{what}: bytes sent",
                our_b / mb,
                "MB",
                peer="stock HfApi.upload_folder, same push",
                ratio=max(st_b, 1) / max(our_b, 1),
                target=">= 1.0",
            )
        )
        rows.append(
            result_row(
                BENCH,
                f"{what}: wall time",
                our_s,
                "s",
                peer="context only: stock HfApi.upload_folder (no version tag, manifest or card checks)",
                ratio=st_s / our_s,
            )
        )
    rows.append(
        result_row(
            BENCH,
            "no-op push: bytes sent by stock HfApi.upload_folder (context: it skips known objects too)",
            stock["noop"][1],
            "B",
        )
    )
    print_rows(rows)
    write_rows(args.json, rows)


def make_release_manifest_refresh(root: Path) -> None:
    import json

    manifest = json.loads((root / "manifest.json").read_text())
    manifest["files"] = {
        p.relative_to(root).as_posix(): {"sha256": sha256_file(p), "size": p.stat().st_size}
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != "manifest.json"
    }
    atomic_write_json(root / "manifest.json", manifest)


if __name__ == "__main__":
    main()
