"""A maintainer publishes a complete, safe release (issue 25), with the real ``huggingface_hub`` / ``datasets``
clients against the test Hub: datasheet answers from a card-info file, the repo named on the card, ``main`` on the
highest version, a push that cannot mix two builds, card metadata checked as the Hub checks it, ``release pull``.
"""

from __future__ import annotations

import html
import json
import subprocess
import sys

import pytest

from commonlink.release.card_info import PUBLISHER_QUESTIONS, PUBLISHER_TO_FILL
from tests.test_card_markup import render_html
from tests.test_hub import (
    ORG,
    _pairs_file,
    client_env,
    make_release,
    run_cli,
    run_python,
)
from tests.test_hub import REPO_ROOT as ROOT

pytestmark = pytest.mark.slow  # client processes against the test Hub

ANSWERS = {  # the publisher's answer to every question only the publisher can answer
    q.key: f"The Example Lab's answer to {q.key}: see data@example.org." for q in PUBLISHER_QUESTIONS
}


def _fill_template(template: str, answers: dict[str, str]) -> str:
    lines = []
    for line in template.splitlines():
        key = line[:-1] if line.endswith(":") and not line.startswith("#") else None
        lines.append(f"{key}: {json.dumps(answers[key])}" if key in answers else line)
    return "\n".join(lines) + "\n"


def _card_at(hub, repo: str, revision: str) -> str:
    return hub.store.regular_path(hub.files_at(repo, revision)["README.md"]["blob"]).read_text(encoding="utf-8")


def test_template_filled_build_push_gives_a_complete_card_naming_the_repo(hub, tmp_path):
    template = tmp_path / "card-info.yaml"
    done = run_cli(hub, tmp_path, "release", "card-info", "--template", "--out", str(template))
    assert done.returncode == 0, done.stderr
    text = template.read_text()
    for q in PUBLISHER_QUESTIONS:  # one key per question, the question as a comment above it
        assert f"# {q.section}: {q.question}" in text and f"\n{q.key}:\n" in text
    template.write_text(_fill_template(text, ANSWERS))

    pairs = _pairs_file(tmp_path, "main", 3)
    out = tmp_path / "release"
    built = run_cli(
        hub, tmp_path, "release", "build", str(pairs), "--out", str(out), "--card-info", str(template), "--no-progress"
    )
    assert built.returncode == 0, built.stderr
    assert "unanswered" not in built.stderr
    repo = f"{ORG}/complete-set"
    pushed = run_cli(hub, tmp_path, "release", "push", str(out), "--repo", repo, "--version", "1.0.0", "--strict")
    assert pushed.returncode == 0, pushed.stderr
    card = _card_at(hub, repo, "1.0.0")
    assert "Not recorded" not in card and PUBLISHER_TO_FILL not in card
    shown = html.unescape(render_html(card.split("\n---\n", 1)[1]))
    for answer in ANSWERS.values():  # shown as written, once rendered
        assert answer in shown
    assert f'load_dataset("{repo}", split="main")' in card and "REPO_OR_FOLDER" not in card
    loaded = run_python(
        hub,
        tmp_path,
        f"""
import json, datasets
ds = datasets.load_dataset({repo!r}, revision="1.0.0", split="main")
print(json.dumps({{"rows": ds.num_rows}}))
""",
    )
    assert loaded["rows"] == 3


def test_unanswered_questions_warn_strict_refuses_and_release_card_fixes_the_card(hub, tmp_path):
    pairs = _pairs_file(tmp_path, "main", 2)
    out = tmp_path / "release"
    built = run_cli(hub, tmp_path, "release", "build", str(pairs), "--out", str(out), "--no-progress")
    assert built.returncode == 0 and f"{len(PUBLISHER_QUESTIONS)} datasheet question(s) as unanswered" in built.stderr
    repo = f"{ORG}/strict-set"
    refused = run_cli(hub, tmp_path, "release", "push", str(out), "--repo", repo, "--version", "1.0.0", "--strict")
    assert refused.returncode == 1 and "--strict" in refused.stderr and "creators" in refused.stderr
    assert hub.count("POST", "/commit/") == 0

    # a hand edit is refused, naming the card-only rebuild
    card = out / "README.md"
    original = card.read_text()
    card.write_text(original.replace(PUBLISHER_TO_FILL, "Us.", 1))
    edited = run_cli(hub, tmp_path, "release", "push", str(out), "--repo", repo, "--version", "1.0.0")
    assert edited.returncode == 1 and "README.md: content differs" in edited.stderr and "release card" in edited.stderr

    partial = tmp_path / "answers.yaml"
    partial.write_text(json.dumps({k: ANSWERS[k] for k in ("creators", "funding", "maintainers", "contact")}))
    left = len(PUBLISHER_QUESTIONS) - 4
    rewritten = run_cli(hub, tmp_path, "release", "card", str(out), "--card-info", str(partial))
    assert rewritten.returncode == 0, rewritten.stderr
    assert f"{left} datasheet question(s)" in rewritten.stderr
    from commonlink.release.staging import verify_release

    assert verify_release(out) == []  # the manifest is true again
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["config"]["card_info"] == {k: ANSWERS[k] for k in ("creators", "funding", "maintainers", "contact")}
    warned = run_cli(hub, tmp_path, "release", "push", str(out), "--repo", repo, "--version", "1.0.0")
    assert warned.returncode == 0, warned.stderr
    assert f"{left} datasheet question(s)" in warned.stderr and "sensitive_data" in warned.stderr
    assert ANSWERS["maintainers"] in html.unescape(render_html(_card_at(hub, repo, "1.0.0").split("\n---\n", 1)[1]))
    # the same build with the same card info finds the folder as `release card` left it
    again = run_cli(
        hub, tmp_path, "release", "build", str(pairs), "--out", str(out), "--card-info", str(partial), "--no-progress"
    )
    assert again.returncode == 0 and "Kept" in again.stdout


def test_an_older_version_is_only_tagged_and_main_keeps_the_highest(hub, tmp_path):
    repo = f"{ORG}/ordered-set"
    newer = make_release(tmp_path / "v110", version="1.1.0", shards={"main": [3]}, salt=11)
    older = make_release(tmp_path / "v090", version="0.9.0", shards={"main": [2]}, salt=9)
    assert run_cli(hub, tmp_path, "release", "push", str(newer), "--repo", repo, "--version", "1.1.0").returncode == 0
    main_before = hub.refs(repo)["heads"]["main"]
    pushed = run_cli(hub, tmp_path, "release", "push", str(older), "--repo", repo, "--version", "0.9.0")
    assert pushed.returncode == 0, pushed.stderr
    said = " ".join((pushed.stdout + pushed.stderr).split())
    assert "main stays on version 1.1.0, the highest published; 0.9.0 is older, so it was only tagged" in said
    assert "--move-main" in said and "tag only" in said
    refs = hub.refs(repo)
    assert set(refs["heads"]) == {"main"}  # the side branch removed
    assert set(refs["tags"]) == {"1.1.0", "0.9.0"} and refs["tags"]["0.9.0"] != main_before
    # main's data stays on 1.1.0; its card (and the manifest's record of the card) now list 0.9.0 too
    assert "main's card now lists 0.9.0 in its Versions table" in said
    shown = run_python(
        hub,
        tmp_path,
        f"""
import json
from huggingface_hub import HfApi, hf_hub_download
from commonlink.release.hub_card import read_versions_table
card = open(hf_hub_download({repo!r}, "README.md", repo_type="dataset")).read()
manifest = json.load(open(hf_hub_download({repo!r}, "manifest.json", repo_type="dataset")))
print(json.dumps({{"versions": [r["version"] for r in read_versions_table(card)], "version": manifest["version"]}}))
""",
    )
    assert shown == {"versions": ["1.1.0", "0.9.0"], "version": "1.1.0"}
    loaded = run_python(
        hub,
        tmp_path,
        f"""
import json, datasets
rows = {{v: datasets.load_dataset({repo!r}, revision=v, split="main").num_rows for v in ("1.1.0", "0.9.0")}}
plain = datasets.load_dataset({repo!r}, split="main").num_rows
print(json.dumps({{"rows": rows, "main": plain}}))
""",
    )
    assert loaded == {"rows": {"1.1.0": 3, "0.9.0": 2}, "main": 3}
    # a rerun finds the version published; --move-main puts an older version on main on purpose
    assert (
        "already published"
        in run_cli(hub, tmp_path, "release", "push", str(older), "--repo", repo, "--version", "0.9.0").stdout
    )
    oldest = make_release(tmp_path / "v080", version="0.8.0", shards={"main": [1]}, salt=8)
    moved = run_cli(hub, tmp_path, "release", "push", str(oldest), "--repo", repo, "--version", "0.8.0", "--move-main")
    assert moved.returncode == 0 and "--move-main: main moves from version 1.1.0 back to 0.8.0" in " ".join(
        moved.stderr.split()
    )
    assert hub.refs(repo)["heads"]["main"] == hub.refs(repo)["tags"]["0.8.0"]


def test_interleaved_pushes_never_leave_main_on_the_older_version(hub, tmp_path):
    """Two pushes at once (1.1.0 and 0.9.0, slow uploads so they overlap): whatever order they land in, main ends
    on 1.1.0's data and both tags exist. (When 0.9.0 lands second, main also gets a commit that only lists 0.9.0 on
    its card and manifest, so main's commit is the 1.1.0 tag's or one whose data files are the tag's.)"""
    repo = f"{ORG}/race-set"
    newer = make_release(tmp_path / "v110", version="1.1.0", shards={"main": [3]}, salt=21)
    older = make_release(tmp_path / "v090", version="0.9.0", shards={"main": [2]}, salt=19)
    assert (
        run_cli(
            hub,
            tmp_path,
            "release",
            "push",
            str(make_release(tmp_path / "v010", version="0.1.0", shards={"main": [1]}, salt=1)),
            "--repo",
            repo,
            "--version",
            "0.1.0",
        ).returncode
        == 0
    )
    hub.slow_lfs_uploads(0.5)
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "commonlink.cli", "release", "push", str(folder), "--repo", repo, "--version", v],
            env=client_env(hub, tmp_path),
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for folder, v in ((older, "0.9.0"), (newer, "1.1.0"))
    ]
    outputs = [p.communicate(timeout=180) for p in procs]
    hub.clear_faults()
    assert all(p.returncode == 0 for p in procs), outputs
    refs = hub.refs(repo)
    assert {"0.9.0", "1.1.0"} <= set(refs["tags"])
    if refs["heads"]["main"] != refs["tags"]["1.1.0"]:  # 0.9.0 landed second: only main's card was updated
        card_only = {"README.md", "manifest.json"}
        data_on_main = {k: v for k, v in hub.files_at(repo, "main").items() if k not in card_only}
        assert data_on_main == {k: v for k, v in hub.files_at(repo, "1.1.0").items() if k not in card_only}


def test_a_rebuild_during_a_push_cannot_mix_builds(hub, tmp_path):
    """A held upload keeps the push in flight; `release build --overwrite` into the same folder is refused while it
    runs, and the version published is exactly build A (every file matching A's manifest). The upload is released
    only once the rebuild has answered, so a slow machine cannot let the push finish first."""
    pairs_a = _pairs_file(tmp_path / "a", "main", 3)
    pairs_b = _pairs_file(tmp_path / "b", "main", 4)
    out = tmp_path / "release"
    assert run_cli(hub, tmp_path, "release", "build", str(pairs_a), "--out", str(out), "--no-progress").returncode == 0
    manifest_a = json.loads((out / "manifest.json").read_text())
    repo = f"{ORG}/locked-set"
    released = hub.hold_lfs_uploads()
    push = subprocess.Popen(
        [sys.executable, "-m", "commonlink.cli", "release", "push", str(out), "--repo", repo, "--version", "1.0.0"],
        env=client_env(hub, tmp_path),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert hub.lfs_put_started.wait(60), push.communicate()
    rebuild = run_cli(
        hub, tmp_path, "release", "build", str(pairs_b), "--out", str(out), "--overwrite", "--no-progress"
    )
    released.set()
    stdout, stderr = push.communicate(timeout=600)
    hub.clear_faults()
    assert push.returncode == 0, stderr
    assert rebuild.returncode == 1 and "being written by commonlink release push" in rebuild.stderr
    files = hub.files_at(repo, "1.0.0")
    for rel, info in manifest_a["files"].items():
        if rel.endswith((".parquet", ".png")):
            assert files[rel]["lfs"] == info["sha256"]
    # after the push the rebuild goes through
    assert (
        run_cli(
            hub, tmp_path, "release", "build", str(pairs_b), "--out", str(out), "--overwrite", "--no-progress"
        ).returncode
        == 0
    )


def test_a_file_changed_after_the_check_stops_the_push_before_any_commit(hub, tmp_path):
    """Whatever changes a shard between the manifest check and the commit (here: a write into the file just as
    the commit is prepared), the push stops, nothing is committed, and the message says why."""
    release = make_release(tmp_path / "rel", version="1.0.0", shards={"main": [2]}, salt=3)
    repo = f"{ORG}/changed-set"
    code = f"""
import json, sys
from pathlib import Path
import commonlink.release.hub as hub
original = hub._operations
def tamper(changed, stale, plan):
    shard = Path({str(release)!r}) / "data" / "main-00000-of-00001.parquet"
    shard.write_bytes(shard.read_bytes() + b"build B")
    return original(changed, stale, plan)
hub._operations = tamper
from commonlink.errors import InputError
try:
    hub.push_release({str(release)!r}, {repo!r}, "1.0.0")
    print(json.dumps({{"error": None}}))
except InputError as exc:
    print(json.dumps({{"error": exc.problem}}))
"""
    result = run_python(hub, tmp_path, code)
    assert "data/main-00000-of-00001.parquet changed after the push checked it" in result["error"]
    assert "nothing was committed" in result["error"]
    assert [c["title"] for c in hub.history(repo)] == ["initial commit"] and "1.0.0" not in hub.refs(repo)["tags"]


def test_card_metadata_the_hub_refuses_is_refused_with_the_hubs_reason(hub, tmp_path):
    import urllib.request

    def validate(content: str) -> tuple[int, dict]:
        request = urllib.request.Request(
            f"{hub.url}/api/validate-yaml",
            method="POST",
            data=json.dumps({"content": content, "repoType": "dataset"}).encode(),
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                return answer.status, json.loads(answer.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    ok = (
        "---\nlicense: cc-by-nc-4.0\nlanguage: [en]\ntask_categories: [visual-question-answering, image-text-to-text]\n"
        "size_categories: [n<1K]\nconfigs:\n- config_name: default\n  data_files:\n  - split: main\n    path: "
        "data/main-*\n---\n# x\n"
    )
    assert validate(ok) == (200, {"errors": [], "warnings": []})
    status, body = validate(
        "---\nlicense: my-own\nlanguage: [English]\ntask_categories: [vqa]\nsize_categories: [tiny]\n"
        "configs:\n- data_files: x\n---\n"
    )
    messages = [e["message"] for e in body["errors"]]
    assert status == 400 and messages[0].startswith('"license" must be one of [apache-2.0, mit, ')
    assert any(m.startswith('"language[0]" with value "English" fails to match') for m in messages)
    assert any(m.startswith('"task_categories[0]" must be one of [') for m in messages)
    assert any(m.startswith('"size_categories[0]" must be one of [n<1K, ') for m in messages)
    assert '"configs[0].config_name" is required' in messages

    release = make_release(tmp_path / "rel", version="1.0.0", shards={"main": [2]}, salt=4)
    card = release / "README.md"
    card.write_text(card.read_text().replace("license: cc-by-nc-4.0", "license: cc-by-nc-4.0-custom"))
    manifest = json.loads((release / "manifest.json").read_text())
    from commonlink.fileio import atomic_write_json, sha256_file

    manifest["files"]["README.md"] = {"sha256": sha256_file(card), "size": card.stat().st_size}
    atomic_write_json(release / "manifest.json", manifest)
    refused = run_cli(hub, tmp_path, "release", "push", str(release), "--repo", f"{ORG}/bad-card", "--version", "1.0.0")
    said = " ".join(refused.stderr.split())
    assert (
        refused.returncode == 1 and '"license" must be one of [apache-2.0' in said
    )  # the reason, not only the first line
    assert "refused the card's metadata" in said and "--license" in said
    assert hub.count("PUT") == 0 and hub.count("POST", "/commit/") == 0  # refused before any upload


def test_a_409_says_to_retry():
    import httpx
    from huggingface_hub.errors import HfHubHTTPError

    from commonlink.release.hub import translate_hub_error

    response = httpx.Response(409, request=httpx.Request("POST", "https://hub.test/api/datasets/o/n/commit/main"))
    exc = HfHubHTTPError("409 Conflict", response=response, server_message="There is another commit in progress.")
    error = translate_hub_error(exc, endpoint="https://hub.test", repo_id="o/n", doing="Pushing")
    assert "There is another commit in progress." in error.problem and "rerun the same command" in error.fix.lower()


def test_pull_downloads_a_version_and_verifies_it(hub, tmp_path):
    from commonlink.release.staging import verify_release

    repo = f"{ORG}/pulled-set"
    release = make_release(tmp_path / "rel", version="1.0.0", shards={"main": [2, 1]}, salt=5)
    assert run_cli(hub, tmp_path, "release", "push", str(release), "--repo", repo, "--version", "1.0.0").returncode == 0
    out = tmp_path / "pulled"
    pulled = run_cli(hub, tmp_path, "release", "pull", repo, "--version", "1.0.0", "--out", str(out))
    assert pulled.returncode == 0, pulled.stderr
    assert "every one matching" in pulled.stdout
    # off a terminal, huggingface_hub's own tqdm bars would write each refresh as a line into the log
    assert "%|" not in pulled.stderr and "Download" not in pulled.stderr
    assert verify_release(out) == []
    for rel in (
        "data/main-00000-of-00002.parquet",
        "data/main-00001-of-00002.parquet",
        "figures/objects_per_image.png",
    ):
        assert (out / rel).read_bytes() == (release / rel).read_bytes()
    assert json.loads((out / "manifest.json").read_text())["repo_id"] == repo
    # a version whose stored object was altered on the server is refused, and nothing is kept
    shard = hub.files_at(repo, "1.0.0")["data/main-00000-of-00002.parquet"]["lfs"]
    path = hub.store.lfs_path(shard)
    path.write_bytes(path.read_bytes()[:-1] + b"!")
    bad = run_cli(hub, tmp_path, "release", "pull", repo, "--version", "1.0.0", "--out", str(tmp_path / "bad"))
    assert bad.returncode == 1 and "do not match the version's manifest" in bad.stderr
    assert "data/main-00000-of-00002.parquet" in bad.stderr and not (tmp_path / "bad").exists()
    missing = run_cli(hub, tmp_path, "release", "pull", repo, "--version", "9.9.9", "--out", str(tmp_path / "none"))
    assert missing.returncode == 1 and "no version 9.9.9" in missing.stderr


def test_a_newer_version_landing_during_a_push_of_an_older_one_keeps_main_on_the_newer(hub, tmp_path):
    """Deterministic interleaving: while 0.9.0 is about to commit on main (it read main holding 0.1.0), a push of
    1.1.0 lands first. The Hub refuses 0.9.0's commit (its parent is no longer main's head: 412); the push starts
    over, sees 1.1.0 on main, and only tags 0.9.0."""
    repo = f"{ORG}/interleaved-set"
    first = make_release(tmp_path / "v010", version="0.1.0", shards={"main": [1]}, salt=31)
    newer = make_release(tmp_path / "v110", version="1.1.0", shards={"main": [3]}, salt=32)
    older = make_release(tmp_path / "v090", version="0.9.0", shards={"main": [2]}, salt=33)
    assert run_cli(hub, tmp_path, "release", "push", str(first), "--repo", repo, "--version", "0.1.0").returncode == 0
    code = f"""
import json, subprocess, sys
import commonlink.release.hub as hub
original = hub._Publisher._commit
calls = []
def commit_after_another_push(self, branch, base, changed, stale):
    calls.append(branch)
    if len(calls) == 1:  # another maintainer's push of 1.1.0 lands between our read of main and our commit
        subprocess.run([sys.executable, "-m", "commonlink.cli", "release", "push", {str(newer)!r}, "--repo", {repo!r},
                        "--version", "1.1.0"], check=True, capture_output=True)
    return original(self, branch, base, changed, stale)
hub._Publisher._commit = commit_after_another_push
result = hub.push_release({str(older)!r}, {repo!r}, "0.9.0")
print(json.dumps({{"calls": calls, "main_moved": result.main_moved, "notes": result.notes}}))
"""
    result = run_python(hub, tmp_path, code, timeout=240)
    assert result["calls"] == ["main", "release-0.9.0"]  # first try on main refused (412), second on a side branch
    assert result["main_moved"] is False and any("main stays on version 1.1.0" in n for n in result["notes"])
    refs = hub.refs(repo)
    assert set(refs["heads"]) == {"main"} and {"0.1.0", "0.9.0", "1.1.0"} <= set(refs["tags"])
    # main holds 1.1.0's data; one card-only commit on top lists 0.9.0 in its Versions table
    assert any("main's card now lists 0.9.0" in n for n in result["notes"])
    assert (
        hub.files_at(repo, "main")["data/main-00000-of-00001.parquet"]
        == hub.files_at(repo, "1.1.0")["data/main-00000-of-00001.parquet"]
    )
    assert sum(r.method == "POST" and "/commit/" in r.path and r.status == 412 for r in hub.requests) == 1
