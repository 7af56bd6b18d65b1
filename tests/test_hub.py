"""Versioned releases on the Hub (`release push`, `release versions`, loading a version), tested with the real
``huggingface_hub`` / ``datasets`` clients against the local test Hub (tests.fixtures.hub_server).

The clients (``huggingface_hub``, ``datasets``) read ``HF_ENDPOINT`` and ``HF_HUB_DISABLE_XET`` when they are
imported, and other tests in the same pytest process import them with the defaults. So every client call runs in
a child process whose environment points at the test Hub: the production code path (the CLI, ``load_dataset``,
the loaders) runs unchanged, and nothing leaks into other tests.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from commonlink.errors import InputError
from commonlink.fileio import atomic_write_json, read_jsonl, sha256_file, write_jsonl
from commonlink.release.hub import (
    card_with_version,
    check_version,
    plan_push,
    read_versions_table,
    version_key,
)
from commonlink.release.hub_card import published_card
from tests.fixtures.hub_server import TEST_ORG, TEST_USER, TEST_WRITE_TOKEN, git_blob_id

REPO_ROOT = Path(__file__).resolve().parents[1]
WRITE_TOKEN, USER, ORG = TEST_WRITE_TOKEN, TEST_USER, TEST_ORG

pytestmark = pytest.mark.slow  # every test here runs whole client processes or pipelines


def tiny_png(seed: int) -> bytes:
    from PIL import Image

    image = Image.new("RGB", (8, 8), ((seed * 37) % 256, (seed * 91) % 256, (seed * 53) % 256))
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def common_o_row(split: str, i: int, salt: int) -> dict:
    objects_1 = ["apple", "keys", f"cup{salt}"]
    objects_2 = ["apple", "book"]
    choices = ["keys", "No objects are in common", "apple", "book"]
    return {
        "image_1": {"bytes": tiny_png(i + salt), "path": f"{split}-{i}-1.png"},
        "image_2": {"bytes": tiny_png(i + salt + 100), "path": f"{split}-{i}-2.png"},
        "question": f"Which objects are in both images? ({split} {i} v{salt})",
        "answer": "C",
        "objects_1": json.dumps(objects_1),
        "objects_2": json.dumps(objects_2),
        "num_objects_image_1": len(objects_1),
        "num_objects_image_2": len(objects_2),
        "question_template": "which_objects_in_both_v1",
        "answer_type": "multiple_choice",
        "choices": json.dumps(choices),
        "num_choices": len(choices),
        "num_ground_truth_objects": 1,
        "real_or_synthetic": "synthetic",
        "ground_truth_objects": json.dumps(["apple"]),
        "id": f"{split}-{salt:03d}-{i:05d}",
        "image_1_id": f"img{i}a",
        "image_2_id": f"img{i}b",
        "scene_1_id": "s1",
        "scene_2_id": "s2",
        "view_1": "0",
        "view_2": "1",
    }


def make_release(
    root: Path, *, version: str, shards: dict[str, list[int]], salt: int, name: str = "tiny-common-o"
) -> Path:
    """A Common-O release folder as `commonlink release build` lays it out (contracts): ``shards`` maps a split
    to the row count of each of its shards; ``salt`` changes the content between versions."""
    import datasets

    from commonlink.kinds.common_o.format import common_o_features

    root.mkdir(parents=True, exist_ok=True)
    features = common_o_features()
    splits: dict[str, dict] = {}
    for split, counts in shards.items():
        files, start = [], 0
        for index, count in enumerate(counts):
            rows = [common_o_row(split, i, salt) for i in range(start, start + count)]
            start += count
            rel = f"data/{split}-{index:05d}-of-{len(counts):05d}.parquet"
            (root / "data").mkdir(exist_ok=True)
            table = {key: [row[key] for row in rows] for key in rows[0]}
            datasets.Dataset.from_dict(table, features=features).to_parquet(str(root / rel))
            files.append(rel)
        splits[split] = {"rows": start, "files": files}
    (root / "figures").mkdir(exist_ok=True)
    (root / "figures" / "objects_per_image.png").write_bytes(tiny_png(1000 + salt))
    data_files = "".join(f"  - split: {s}\n    path: data/{s}-*\n" for s in shards)
    (root / "README.md").write_text(
        f"---\nlicense: cc-by-nc-4.0\npretty_name: {name}\nconfigs:\n- config_name: default\n  "
        f"data_files:\n{data_files}---\n\n"
        f"# {name}\n\nVersion {version}.\n\n![objects](figures/objects_per_image.png)\n",
        encoding="utf-8",
    )
    files = {
        p.relative_to(root).as_posix(): {"sha256": sha256_file(p), "size": p.stat().st_size}
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != "manifest.json"
    }
    atomic_write_json(
        root / "manifest.json",
        {
            "toolkit_version": "test",
            "name": name,
            "version": version,
            "seed": salt,
            "config": {},
            "kind": "common_o",
            "splits": splits,
            "files": files,
        },
    )
    return root


def client_env(hub, home: Path, token: str | None = WRITE_TOKEN, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_"))}
    env.update(hub.client_env(token=token))
    env.update(
        {
            "HF_HOME": str(home / "hf-home"),
            "HF_DATASETS_CACHE": str(home / "datasets-cache"),
            "COLUMNS": "200",
            "NO_COLOR": "1",
            "TERM": "dumb",
            "PYTHONPATH": str(REPO_ROOT),
        }
    )
    env.update(extra)
    return env


def run_cli(
    hub, home: Path, *args: str, token: str | None = WRITE_TOKEN, timeout: float = 120, **extra_env: str
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "commonlink.cli", *args],
        env=client_env(hub, home, token, **extra_env),
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_python(hub, home: Path, code: str, token: str | None = WRITE_TOKEN, timeout: float = 120) -> dict:
    """Run ``code`` (which must print one JSON object as its last line) in a client process; return that object."""
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=client_env(hub, home, token),
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


REPO = f"{ORG}/tiny-common-o"


def _lfs_parquet(files: dict) -> dict[str, str]:
    return {p: m["lfs"] for p, m in files.items() if p.endswith(".parquet")}


# ----------------------------------------------------------------------------------------- local logic (no Hub)


def test_versions_table_is_added_merged_and_kept_sorted():
    card = "---\nlicense: mit\n---\n\n# Set\n\nIntro.\n"
    rows = [{"version": "1.0.0", "date": "2026-01-02", "rows": "main: 6", "message": "first | pipe"}]
    text = card_with_version(card, rows)
    assert text.startswith(card.rstrip("\n"))
    assert read_versions_table(text) == rows
    rows.append({"version": "1.10.0", "date": "2026-02-01", "rows": "main: 4", "message": ""})
    rows.append({"version": "1.9.0", "date": "2026-01-20", "rows": "main: 5", "message": "x"})
    again = card_with_version(text + "\n## Citation\n\nCite us.\n", rows)
    assert [r["version"] for r in read_versions_table(again)] == ["1.10.0", "1.9.0", "1.0.0"]
    assert again.count("## Versions") == 1 and again.rstrip().endswith("Cite us.")


def test_version_numbers_and_sorting():
    assert check_version("1.2.3") == "1.2.3" and check_version("2.0.0-rc1")
    for bad in ("1.0", "v1.0.0", "1.0.0/../x", ""):
        with pytest.raises(InputError, match="not a version number"):
            check_version(bad)
    assert sorted(["1.0.0", "1.10.0", "1.9.0", "1.0.0-rc1"], key=version_key) == [
        "1.0.0-rc1",
        "1.0.0",
        "1.9.0",
        "1.10.0",
    ]


def test_plan_refuses_a_folder_that_does_not_match_its_manifest(tmp_path):
    release = make_release(tmp_path / "rel", version="1.0.0", shards={"main": [2]}, salt=1)
    plan = plan_push(release, REPO, "1.0.0", message="first")
    assert {f.path for f in plan.files} == {
        "README.md",
        "manifest.json",
        "data/main-00000-of-00001.parquet",
        "figures/objects_per_image.png",
    }
    assert plan.commit_message == "Release 1.0.0: first" and plan.tag == "1.0.0"
    with pytest.raises(InputError, match="built as version '1.0.0'"):
        plan_push(release, REPO, "2.0.0")
    with pytest.raises(InputError, match="ORG/NAME"):
        plan_push(release, "no-namespace", "1.0.0")
    shard = release / "data" / "main-00000-of-00001.parquet"
    shard.write_bytes(shard.read_bytes() + b"tampered")
    with pytest.raises(InputError, match="data/main-00000-of-00001.parquet: content differs"):
        plan_push(release, REPO, "1.0.0")
    shard.unlink()
    with pytest.raises(InputError, match="missing"):
        plan_push(release, REPO, "1.0.0")


def test_card_keeps_the_date_of_a_version_already_on_the_hub(tmp_path):
    release = make_release(tmp_path / "rel", version="1.1.0", shards={"main": [2]}, salt=2)
    plan = plan_push(release, REPO, "1.1.0", message="more")
    remote = card_with_version(
        "# old\n",
        [
            {"version": "1.0.0", "date": "2025-12-01", "rows": "main: 6", "message": "first"},
            {"version": "1.1.0", "date": "2025-12-24", "rows": "main: 2", "message": "more"},
        ],
    )
    card = published_card(
        plan.card_text,
        repo_id=REPO,
        version=plan.version,
        rows_summary=plan.rows_summary(),
        message=plan.message,
        remote_card=remote,
    )
    rows = read_versions_table(card.content.decode())
    assert [(r["version"], r["date"]) for r in rows] == [("1.1.0", "2025-12-24"), ("1.0.0", "2025-12-01")]
    assert rows[0]["rows"] == "main: 2"


def test_stale_shards_are_those_of_the_release_splits_only(tmp_path):
    from types import SimpleNamespace

    from commonlink.release.hub import PushPlan, ReleaseFile, _stale_paths

    def plan(units: dict) -> PushPlan:
        files = [ReleaseFile(p, 1, "0" * 64) for info in units.values() for p in info["files"]]
        return PushPlan(tmp_path, REPO, "1.0.0", "1.0.0", "m", "d", files, units, "x", None)

    remote = {
        p: SimpleNamespace()
        for p in (
            "data/main-00000-of-00002.parquet",
            "data/main-00001-of-00002.parquet",
            "data/main-00000-of-00001.parquet",
            "data/challenge-00000-of-00001.parquet",
            "data/mainly-00000-of-00001.parquet",
            "figures/old.png",
            "single_step/train-00000-of-00002.parquet",
            "single_step/train-00001-of-00002.parquet",
            "images/train-00000-of-00001.parquet",
            "README.md",
        )
    }
    common_o = plan({"main": {"rows": 3, "files": ["data/main-00000-of-00001.parquet"]}})
    assert _stale_paths(common_o, remote) == [
        "data/main-00000-of-00002.parquet",
        "data/main-00001-of-00002.parquet",
        "figures/old.png",
    ]
    association = plan(
        {
            "single_step": {"rows": 2, "files": ["single_step/train-00000-of-00001.parquet"]},
            "images": {"rows": 2, "files": ["images/train-00000-of-00001.parquet"]},
        }
    )
    assert _stale_paths(association, remote) == [
        "figures/old.png",
        "single_step/train-00000-of-00002.parquet",
        "single_step/train-00001-of-00002.parquet",
    ]


# ------------------------------------------------------------------------------------------ against the test Hub


def test_push_two_versions_list_them_and_load_each(hub, tmp_path):
    v1 = make_release(tmp_path / "v1", version="1.0.0", shards={"main": [3, 3], "challenge": [2]}, salt=1)
    done = run_cli(hub, tmp_path, "release", "push", str(v1), "--repo", REPO, "--version", "1.0.0", "-m", "first cut")
    assert done.returncode == 0, done.stderr
    assert "Created dataset repo" in done.stdout and "tag 1.0.0" in done.stdout
    assert WRITE_TOKEN not in done.stdout + done.stderr
    assert "Upload" not in done.stderr and "%|" not in done.stderr  # no tqdm lines in a log (stderr is no terminal)
    refs = hub.refs(REPO)
    assert refs["tags"]["1.0.0"] == refs["heads"]["main"]
    files_v1 = hub.files_at(REPO, "1.0.0")
    assert set(_lfs_parquet(files_v1)) == {
        "data/main-00000-of-00002.parquet",
        "data/main-00001-of-00002.parquet",
        "data/challenge-00000-of-00001.parquet",
    }
    assert all(files_v1[p].get("lfs") == sha256_file(v1 / p) for p in _lfs_parquet(files_v1))  # LFS, by content
    assert files_v1["figures/objects_per_image.png"]["lfs"] == sha256_file(v1 / "figures/objects_per_image.png")
    assert (v1 / "README.md").read_text().count("## Versions") == 0  # the release folder itself is not modified

    # version 2: main rebuilt into one shard (the two old shards must go), challenge byte-identical (not re-sent)
    v2 = make_release(tmp_path / "v2", version="1.1.0", shards={"main": [4]}, salt=2)
    challenge = "data/challenge-00000-of-00001.parquet"
    (v2 / challenge).write_bytes((v1 / challenge).read_bytes())
    manifest = json.loads((v2 / "manifest.json").read_text())
    manifest["splits"]["challenge"] = {"rows": 2, "files": [challenge]}
    manifest["files"][challenge] = {"sha256": sha256_file(v2 / challenge), "size": (v2 / challenge).stat().st_size}
    (v2 / "README.md").write_text((v1 / "README.md").read_text().replace("Version 1.0.0", "Version 1.1.0"))
    manifest["files"]["README.md"] = {
        "sha256": sha256_file(v2 / "README.md"),
        "size": (v2 / "README.md").stat().st_size,
    }
    atomic_write_json(v2 / "manifest.json", manifest)
    puts_before = len(hub.lfs_puts)
    done = run_cli(
        hub, tmp_path, "release", "push", str(v2), "--repo", REPO, "--version", "1.1.0", "--message", "bigger main"
    )
    assert done.returncode == 0, done.stderr
    assert "2 removed" in done.stdout
    sent = hub.lfs_puts[puts_before:]
    assert sorted(sent) == sorted(
        [sha256_file(v2 / "data/main-00000-of-00001.parquet"), sha256_file(v2 / "figures/objects_per_image.png")]
    )
    files_v2 = hub.files_at(REPO, "1.1.0")
    assert set(_lfs_parquet(files_v2)) == {"data/main-00000-of-00001.parquet", challenge}
    assert hub.files_at(REPO, "1.0.0") == files_v1  # the old version is untouched
    titles = [c["title"] for c in hub.history(REPO)]
    assert titles == ["Release 1.1.0: bigger main", "Release 1.0.0: first cut", "initial commit"]

    # --endpoint wins over HF_ENDPOINT (which points at a closed port here)
    listing = run_cli(
        hub, tmp_path, "release", "versions", REPO, "--endpoint", hub.url, HF_ENDPOINT="http://127.0.0.1:9"
    )
    assert listing.returncode == 0, listing.stderr
    lines = [line for line in listing.stdout.splitlines() if "1.0.0" in line or "1.1.0" in line]
    assert "1.1.0" in lines[0] and "main: 4" in lines[0] and "challenge: 2" in lines[0] and "bigger main" in lines[0]
    assert "1.0.0" in lines[1] and "main: 6" in lines[1] and "first cut" in lines[1]

    loaded = run_python(
        hub,
        tmp_path,
        f"""
import json, datasets
from huggingface_hub import hf_hub_download
from commonlink.kinds.common_o.loader import load_common_o
out = {{}}
for version in ("1.0.0", "1.1.0"):
    main = datasets.load_dataset({REPO!r}, revision=version, split="main")
    ids = [ex.id for ex in load_common_o({REPO!r}, "main", revision=version)]
    card = open(hf_hub_download({REPO!r}, "README.md", repo_type="dataset", revision=version)).read()
    out[version] = {{"rows": main.num_rows, "question": main[0]["question"], "ids": ids,
                    "challenge": datasets.load_dataset({REPO!r}, revision=version, split="challenge").num_rows,
                    "card": card}}
from commonlink.errors import InputError
try:
    list(load_common_o({REPO!r}, "main", revision="9.9.9"))
except InputError as exc:
    out["unknown_version"] = [exc.problem, exc.fix]
print(json.dumps(out))
""",
    )
    problem, fix = loaded["unknown_version"]  # a version never pushed: say so, and how to list the versions
    assert "revision '9.9.9' not found" in problem and "commonlink release versions" in fix
    assert loaded["1.0.0"]["rows"] == 6 and loaded["1.1.0"]["rows"] == 4
    assert loaded["1.0.0"]["question"].endswith("v1)") and loaded["1.1.0"]["question"].endswith("v2)")
    assert loaded["1.0.0"]["ids"] == [f"main-001-{i:05d}" for i in range(6)]
    assert loaded["1.1.0"]["ids"] == [f"main-002-{i:05d}" for i in range(4)]
    assert loaded["1.0.0"]["challenge"] == loaded["1.1.0"]["challenge"] == 2
    assert [r["version"] for r in read_versions_table(loaded["1.0.0"]["card"])] == ["1.0.0"]
    rows = read_versions_table(loaded["1.1.0"]["card"])
    assert [(r["version"], r["rows"], r["message"]) for r in rows] == [
        ("1.1.0", "main: 4, challenge: 2", "bigger main"),
        ("1.0.0", "main: 6, challenge: 2", "first cut"),
    ]


def test_dry_run_makes_no_request(hub, tmp_path):
    release = make_release(tmp_path / "rel", version="1.0.0", shards={"main": [2]}, salt=1)
    done = run_cli(hub, tmp_path, "release", "push", str(release), "--repo", REPO, "--version", "1.0.0", "--dry-run")
    assert done.returncode == 0, done.stderr
    for expected in (
        "data/main-00000-of-00001.parquet",
        "manifest.json",
        "README.md",
        "tag 1.0.0",
        "'Release 1.0.0'",
        "No network call",
    ):
        assert expected in done.stdout
    assert (
        f"Endpoint: {hub.url.rstrip('/')}\n" in done.stdout
    )  # the URL it would use (here from HF_ENDPOINT), not a hint
    other = run_cli(
        hub,
        tmp_path,
        "release",
        "push",
        str(release),
        "--repo",
        REPO,
        "--version",
        "1.0.0",
        "--dry-run",
        "--endpoint",
        "https://hub.example.org/",
    )
    assert "Endpoint: https://hub.example.org\n" in other.stdout, other.stdout
    assert hub.requests == []


def test_missing_or_wrong_token_fails_before_any_upload(hub, tmp_path):
    release = make_release(tmp_path / "rel", version="1.0.0", shards={"main": [2]}, salt=1)
    missing = run_cli(hub, tmp_path, "release", "push", str(release), "--repo", REPO, "--version", "1.0.0", token=None)
    assert missing.returncode == 1
    assert "No Hugging Face token found" in missing.stderr and "HF_TOKEN" in missing.stderr
    assert hub.requests == []
    wrong_token = "hf_wrong_secret_token_987"
    wrong = run_cli(
        hub, tmp_path, "release", "push", str(release), "--repo", REPO, "--version", "1.0.0", token=wrong_token
    )
    assert wrong.returncode == 1
    assert "rejected the token (401" in wrong.stderr and "Traceback" not in wrong.stderr
    assert wrong_token not in wrong.stdout + wrong.stderr
    assert [(r.method, r.path, r.status) for r in hub.requests] == [("GET", "/api/whoami-v2", 401)]
    assert hub.lfs_objects() == set()
    # the token saved by `hf auth login` (HF_HOME/token) is used when HF_TOKEN is unset
    (tmp_path / "hf-home").mkdir(exist_ok=True)
    (tmp_path / "hf-home" / "token").write_text(WRITE_TOKEN)
    cached = run_cli(hub, tmp_path, "release", "push", str(release), "--repo", REPO, "--version", "1.0.0", token=None)
    assert cached.returncode == 0, cached.stderr
    assert "1.0.0" in hub.refs(REPO)["tags"] and WRITE_TOKEN not in cached.stdout + cached.stderr


def test_a_hub_without_xet_gets_a_clear_error(hub, tmp_path):
    release = make_release(tmp_path / "rel", version="1.0.0", shards={"main": [2]}, salt=1)
    done = run_cli(
        hub, tmp_path, "release", "push", str(release), "--repo", REPO, "--version", "1.0.0", HF_HUB_DISABLE_XET="0"
    )
    assert done.returncode == 1
    assert "does not offer Xet storage" in done.stderr and "HF_HUB_DISABLE_XET=1" in done.stderr
    assert "1.0.0" not in hub.refs(REPO)["tags"]


def test_existing_tag_is_refused_rerun_is_a_no_op_and_force_moves_it(hub, tmp_path):
    v1 = make_release(tmp_path / "v1", version="1.0.0", shards={"main": [2]}, salt=1)
    assert run_cli(hub, tmp_path, "release", "push", str(v1), "--repo", REPO, "--version", "1.0.0").returncode == 0
    tagged = hub.refs(REPO)["tags"]["1.0.0"]

    again = run_cli(hub, tmp_path, "release", "push", str(v1), "--repo", REPO, "--version", "1.0.0")
    assert again.returncode == 0 and "already published" in again.stdout

    other = make_release(tmp_path / "other", version="1.0.0", shards={"main": [3]}, salt=7)
    refused = run_cli(hub, tmp_path, "release", "push", str(other), "--repo", REPO, "--version", "1.0.0")
    assert refused.returncode == 1
    assert "already published" in refused.stderr and "--force" in refused.stderr
    assert hub.refs(REPO)["tags"]["1.0.0"] == tagged and len(hub.history(REPO)) == 2  # nothing committed

    forced = run_cli(hub, tmp_path, "release", "push", str(other), "--repo", REPO, "--version", "1.0.0", "--force")
    assert forced.returncode == 0, forced.stderr
    assert "Warning" in forced.stderr and "moved" in forced.stderr
    assert hub.refs(REPO)["tags"]["1.0.0"] != tagged
    assert hub.refs(REPO)["tags"]["1.0.0"] == hub.refs(REPO)["heads"]["main"]


def test_a_semver_build_version_is_pushed_as_a_git_tag_and_bad_ref_names_are_refused(hub, tmp_path):
    """`release build` accepts X.Y.Z-pre+build versions, so `push` must land them as tags: '+' is a legal git ref
    character (the Hub's refs are git refs). Names git refuses are refused before any ref is written."""
    import urllib.error
    import urllib.request

    version = "1.0.0-rc.1+build.5"
    release = make_release(tmp_path / "rc", version=version, shards={"main": [2]}, salt=3)
    done = run_cli(hub, tmp_path, "release", "push", str(release), "--repo", REPO, "--version", version)
    assert done.returncode == 0, done.stderr
    assert hub.refs(REPO)["tags"][version] == hub.refs(REPO)["heads"]["main"]
    for bad in ("1.0 .0", "a..b", "v1~1", "x.lock", ".hidden", "end/"):
        request = urllib.request.Request(
            f"{hub.url}/api/datasets/{REPO}/tag/main",
            data=json.dumps({"tag": bad}).encode(),
            method="POST",
            headers={"Authorization": f"Bearer {WRITE_TOKEN}"},
        )
        try:
            urllib.request.urlopen(request, timeout=10)
            raise AssertionError(f"tag {bad!r} was accepted")
        except urllib.error.HTTPError as err:
            assert err.code == 400 and "Invalid tag name" in json.loads(err.read())["error"], bad
    assert set(hub.refs(REPO)["tags"]) == {version}


def test_interrupted_upload_is_finished_by_a_rerun(hub, tmp_path):
    release = make_release(tmp_path / "rel", version="1.0.0", shards={"main": [2, 2, 2, 2]}, salt=3)
    wanted = {
        sha256_file(release / p)
        for p in json.loads((release / "manifest.json").read_text())["files"]
        if p.endswith((".parquet", ".png"))
    }
    hub.drop_lfs_uploads(from_put=3)  # the 3rd upload loses its connection half-way, and so does every later one
    args = [
        sys.executable,
        "-m",
        "commonlink.cli",
        "release",
        "push",
        str(release),
        "--repo",
        REPO,
        "--version",
        "1.0.0",
    ]
    proc = subprocess.Popen(
        args, env=client_env(hub, tmp_path), cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        assert hub.fault_tripped.wait(60), "the push never reached the dropped upload"
        time.sleep(0.3)  # let uploads already under way on other threads finish or fail
    finally:
        proc.send_signal(signal.SIGKILL)  # the machine dies mid-push: no cleanup at all
        proc.communicate(timeout=30)
    hub.clear_faults()
    assert hub.wait_idle(10)  # uploads cut off by the kill have been answered (and discarded) by the server
    stored = hub.lfs_objects()
    assert stored < wanted  # some objects arrived, at least one did not
    assert "1.0.0" not in hub.refs(REPO)["tags"] and len(hub.history(REPO)) == 1  # nothing half-published

    puts_before = len(hub.lfs_puts)
    rerun = run_cli(hub, tmp_path, "release", "push", str(release), "--repo", REPO, "--version", "1.0.0")
    assert rerun.returncode == 0, rerun.stderr
    sent = hub.lfs_puts[puts_before:]
    assert set(sent) == wanted - stored and len(sent) == len(set(sent))  # only what was missing, once each
    assert hub.lfs_objects() == wanted
    files = hub.files_at(REPO, "1.0.0")
    for rel in json.loads((release / "manifest.json").read_text())["files"]:
        if rel.endswith((".parquet", ".png")):
            assert files[rel]["lfs"] == sha256_file(release / rel)
    assert [c["title"] for c in hub.history(REPO)] == ["Release 1.0.0", "initial commit"]


def _pairs_file(tmp_path: Path, split: str, count: int) -> Path:
    """A catalog of tiny images and a pairs file with its meta sidecar, as `commonlink pairs` writes them
    (contracts)."""
    catalog = tmp_path / "catalog"
    (catalog / "images").mkdir(parents=True, exist_ok=True)
    choices = ["keys", "apple", "No objects are in common", "book"]
    rows, records = [], []
    for i in range(count):
        images = {}
        for n in (1, 2):
            rel = f"images/{split}-{i}-{n}.png"
            data = tiny_png(10 * i + n)
            (catalog / rel).write_bytes(data)
            images[f"image_{n}"] = {
                "catalog": str(catalog),
                "id": f"{split}{i}{n}",
                "path": rel,
                "scene_id": f"s{i}",
                "view": str(n),
                "background": "table",
                "objects": ["apple", "keys" if n == 1 else "book"],
            }
            records.append(
                {
                    "id": f"{split}{i}{n}",
                    "path": rel,
                    "objects": images[f"image_{n}"]["objects"],
                    "source": "real",
                    "scene_id": f"s{i}",
                    "width": 8,
                    "height": 8,
                    "sha256": hashlib.sha256(data).hexdigest(),
                }
            )
        rows.append(
            {
                "id": f"{split}-{i:08d}",
                "split": split,
                "source": "real",
                **images,
                "choices": choices,
                "ground_truth": ["apple"],
                "answer": "B",
                "question": f"Which objects are in both images? #{i}",
                "question_template": "which_objects_in_both_v1",
            }
        )
    # the catalog the pairs were sampled from: release build checks each row against its record
    previous = list(read_jsonl(catalog / "catalog.jsonl")) if (catalog / "catalog.jsonl").is_file() else []
    write_jsonl(catalog / "catalog.jsonl", previous + records)
    pairs = tmp_path / f"{split}.jsonl"
    pairs.write_text("".join(json.dumps(r) + "\n" for r in rows))
    atomic_write_json(
        Path(f"{pairs}.meta.json"),
        {
            "kind": "common_o_pairs",
            "toolkit_version": "test",
            "seed": 5,
            "split": split,
            "count": count,
            "config": {},
            "catalogs": [str(catalog)],
            "stats": {},
            "created": "2026-01-01T00:00:00Z",
        },
    )
    return pairs


def _association_release(tmp_path: Path) -> Path:
    """An association release built the way users build one: `commonlink chains` then `commonlink release build`."""
    from typer.testing import CliRunner

    from commonlink.cli import app
    from tests.fixtures.tiny_chains import chains_command, write_concept_catalog

    catalog = tmp_path / "assoc-catalog"
    write_concept_catalog(catalog, 12, seed=200)
    runner = CliRunner()
    chains = tmp_path / "assoc-chains"
    done = runner.invoke(
        app, chains_command(catalog, chains, seed=3, extra=("--negatives", "chain"))
    )  # painted+furry images share a label with every other image
    assert done.exit_code == 0, done.output
    out = tmp_path / "assoc-release"
    done = runner.invoke(
        app,
        [
            "release",
            "build",
            *sorted(str(p) for p in chains.glob("*.jsonl")),
            "--out",
            str(out),
            "--version",
            "1.0.0",
            "--no-progress",
        ],
    )
    assert done.exit_code == 0, done.output
    return out


def test_release_build_then_push_then_load_that_version(hub, tmp_path):
    """`release build` (Common-O and association) -> `release push` -> the loaders read exactly that version."""
    import urllib.error
    import urllib.request

    from commonlink.loaders import open_association
    from commonlink.release.build import build_release
    from commonlink.release.staging import verify_release

    pairs = _pairs_file(tmp_path, "main", 3)
    out = tmp_path / "release"
    build_release([pairs], out, version="1.0.0", progress=False)  # what `commonlink release build` runs
    repo = f"{ORG}/built-set"
    pushed = run_cli(hub, tmp_path, "release", "push", str(out), "--repo", repo, "--version", "1.0.0", "--private")
    assert pushed.returncode == 0, pushed.stderr
    assert verify_release(out) == []  # pushing leaves the release folder exactly as built
    assert hub.store.load_repo("dataset", repo)["private"] is True
    with pytest.raises(urllib.error.HTTPError) as anonymous:  # --private: hidden from anyone without a token
        urllib.request.urlopen(f"{hub.url}/api/datasets/{repo}/revision/1.0.0", timeout=10)
    assert anonymous.value.code == 401 and anonymous.value.headers["X-Error-Code"] == "RepoNotFound"
    files = hub.files_at(repo, "1.0.0")
    manifest = json.loads((out / "manifest.json").read_text())
    # the pushed manifest is the release's, naming the repo and listing the card as pushed (repo id, Versions table)
    pushed_manifest = json.loads(hub.store.regular_path(files["manifest.json"]["blob"]).read_text())
    card_entry = files["README.md"]
    assert pushed_manifest == {
        **manifest,
        "repo_id": repo,
        "files": {
            **manifest["files"],
            "README.md": {
                "sha256": hashlib.sha256(hub.store.regular_path(card_entry["blob"]).read_bytes()).hexdigest(),
                "size": card_entry["size"],
            },
        },
    }
    assert f'load_dataset("{repo}", split="main")' in hub.store.regular_path(card_entry["blob"]).read_text()
    for rel, info in manifest["files"].items():
        if rel == "README.md":  # pushed with the repo id and the Versions table added
            continue
        entry = files[rel]
        assert entry["size"] == info["size"]
        if entry.get("lfs"):
            assert entry["lfs"] == info["sha256"] and rel.endswith((".parquet", ".png"))
        else:
            assert entry["blob"] == git_blob_id((out / rel).read_bytes())

    association = _association_release(tmp_path)
    assoc_repo = f"{ORG}/assoc-set"
    pushed = run_cli(hub, tmp_path, "release", "push", str(association), "--repo", assoc_repo, "--version", "1.0.0")
    assert pushed.returncode == 0, pushed.stderr
    # the printed hint must work for a release with several configs: it names one
    assert f"datasets.load_dataset({assoc_repo!r}, 'single_step', revision='1.0.0')" in pushed.stdout
    assoc_card = hub.store.regular_path(hub.files_at(assoc_repo, "1.0.0")["README.md"]["blob"]).read_text()
    assert (
        f'load_dataset("{assoc_repo}", "synchronous", split="test")' in assoc_card
        and "REPO_OR_FOLDER" not in assoc_card
    )
    local = {
        config: [task.id for task in open_association(association, config)]
        for config in ("single_step", "deduction", "synchronous", "asynchronous")
    }

    loaded = run_python(
        hub,
        tmp_path,
        f"""
import json, datasets
from commonlink.loaders import open_association
from commonlink.kinds.common_o.loader import open_common_o
split = open_common_o({repo!r}, "main", revision="1.0.0")
examples = list(split)
plain = datasets.load_dataset({repo!r}, revision="1.0.0", split="main")
association = {{config: [task.id for task in open_association({assoc_repo!r}, config, revision="1.0.0")]
               for config in {sorted(local)!r}}}
from commonlink.errors import InputError
try:
    open_association({assoc_repo!r}, "single_step", revision="9.9.9")
    unknown_version = None
except InputError as exc:
    unknown_version = [exc.problem, exc.fix]
print(json.dumps({{"ids": [e.id for e in examples], "truth": [e.ground_truth for e in examples],
                  "revision": split.revision,
                  "plain": plain.num_rows, "columns": plain.column_names, "association": association,
                  "unknown_version": unknown_version}}))
""",
    )
    assert loaded["ids"] == [f"main-{i:08d}" for i in range(3)] and loaded["revision"] == "1.0.0"
    assert loaded["truth"] == [["apple"]] * 3 and loaded["plain"] == 3 and "image_1" in loaded["columns"]
    assert loaded["association"] == local and all(local.values())
    problem, fix = loaded["unknown_version"]  # a version never pushed: say so, and how to list the versions
    assert "revision '9.9.9' not found" in problem and "commonlink release versions" in fix


def test_commit_landed_but_tag_failed_rerun_only_adds_the_tag(hub, tmp_path):
    release = make_release(tmp_path / "rel", version="2.0.0", shards={"main": [2]}, salt=4)
    hub.fail_requests("POST", "/tag/", status=500)
    failed = run_cli(hub, tmp_path, "release", "push", str(release), "--repo", REPO, "--version", "2.0.0")
    assert failed.returncode == 1 and "rerun" in failed.stderr.lower()
    committed = hub.refs(REPO)["heads"]["main"]
    assert "2.0.0" not in hub.refs(REPO)["tags"]
    puts, commits = len(hub.lfs_puts), hub.count("POST", "/commit/")
    rerun = run_cli(hub, tmp_path, "release", "push", str(release), "--repo", REPO, "--version", "2.0.0")
    assert rerun.returncode == 0, rerun.stderr
    assert "0 file(s) sent" in rerun.stdout
    assert hub.refs(REPO)["tags"]["2.0.0"] == committed == hub.refs(REPO)["heads"]["main"]
    assert len(hub.lfs_puts) == puts and hub.count("POST", "/commit/") == commits  # nothing sent, no new commit


def test_versions_table_prints_commit_messages_as_written(monkeypatch):
    """A commit message is data (anyone who can commit writes it): '[/]' or '[red]' is shown, not read as markup."""
    from typer.testing import CliRunner

    from commonlink.cli import app
    from commonlink.commands import hub as hub_cmds
    from commonlink.release.hub import VersionInfo

    found = [VersionInfo("1.0.0", "a" * 40, None, {"main": 3}, "fix [/] and [red]labels[/red]")]
    monkeypatch.setattr(hub_cmds, "list_versions", lambda repo, endpoint=None: found)
    result = CliRunner().invoke(app, ["release", "versions", "org/set"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "fix [/] and [red]labels[/red]" in result.output


def test_a_refusal_names_what_the_hub_said_not_a_bare_bad_request():
    """huggingface_hub's 400 error opens with a "Bad request:" line; the Hub's reason is its server_message."""
    import httpx2 as httpx  # the HTTP client huggingface_hub 2.x raises with
    from huggingface_hub.errors import BadRequestError

    from commonlink.release.hub import translate_hub_error

    response = httpx.Response(400, request=httpx.Request("POST", f"https://hub.test/api/datasets/{REPO}/tag/main"))
    exc = BadRequestError(
        "\n\nBad request:\nInvalid tag name 'a b'.", response=response, server_message="Invalid tag name 'a b'."
    )
    error = translate_hub_error(exc, endpoint="https://hub.test", repo_id=REPO, doing="Pushing")
    assert "Invalid tag name 'a b'" in error.problem and "Bad request:)" not in error.problem


def test_repo_ids_the_hub_client_refuses_are_refused_before_anything_is_checked_or_sent():
    """check_repo_id applies huggingface_hub's own rules: a name it would refuse mid-push is refused up front."""
    import pytest

    from commonlink.errors import InputError
    from commonlink.release.hub import check_repo_id

    assert check_repo_id("my-lab/common-o-extra") == "my-lab/common-o-extra"
    for bad in ("common-o", "org/a--b", "org/a..b", "org/name.", "org/-name", "org/" + "a" * 97, "a/b/c"):
        with pytest.raises(InputError, match="is not a Hub repo id"):
            check_repo_id(bad)
