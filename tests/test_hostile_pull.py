"""``release pull`` treats the repo as untrusted input (issue 38, item 1): the manifest is schema-checked before use,
every file comes from the commit the version's tag points at (a branch named like the tag never wins; a tag moved
during the pull cannot mix files), the manifest must be the version and repo that were asked for, reserved or
escaping names are refused, a missing file is named as missing, a full disk names the local path.

The hostile repos are written straight into the test Hub's store (``tests.fixtures.hub_server.HubStore``), as a
publisher with push access could lay them out; the pull runs in this process through the real ``huggingface_hub``
client against the test Hub (``pull_release`` passes the endpoint to ``HfApi``, so no import-time setting matters).
"""

from __future__ import annotations

import errno
import hashlib
import json
from pathlib import Path

import pytest

from commonlink.errors import CommonlinkError
from commonlink.release.pull import pull_release
from tests.fixtures.hub_server import TEST_ORG, TEST_USER, HubStore

REPO = f"{TEST_ORG}/hostile-set"


def _manifest(files: dict[str, bytes], *, version: str = "1.0.0", repo_id: str = REPO, **extra) -> bytes:
    listed = {rel: {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)} for rel, data in files.items()}
    record = {"toolkit_version": "test", "name": "t", "version": version, "kind": "common_o", "repo_id": repo_id}
    record.update({"files": listed, **extra})
    return json.dumps(record).encode()


def _release(version: str = "1.0.0", *, salt: str = "a", repo_id: str = REPO) -> dict[str, bytes]:
    files = {"README.md": f"# t {salt}\n".encode(), "data/main-00000-of-00001.parquet": f"rows {salt}".encode()}
    return {**files, "manifest.json": _manifest(files, version=version, repo_id=repo_id)}


def publish(hub, files: dict[str, bytes], *, tag: str | None = "1.0.0", branch: str = "main", repo_id: str = REPO):
    """One commit holding ``files`` on ``branch`` (made from main when new), tagged ``tag``; its id."""
    store = hub.store
    with store.lock:
        repo = store.load_repo("dataset", repo_id) or store.create_repo(
            "dataset", repo_id, private=False, author=TEST_USER
        )
        head = repo["refs"]["heads"].get(branch) or repo["refs"]["heads"]["main"]
        snapshot = dict(repo["commits"][head]["files"])
        for rel in [p for p in snapshot if p != ".gitattributes"]:
            del snapshot[rel]
        for rel, data in files.items():
            snapshot[rel] = {"size": len(data), "blob": store.put_regular(data)}
        oid = HubStore.add_commit(repo, parents=[head], files=snapshot, title=f"on {branch}", message="", author="x")
        repo["refs"]["heads"][branch] = oid
        if tag:
            repo["refs"]["tags"][tag] = oid
        store.save_repo(repo)
    return oid


def pull(hub, out: Path, version: str = "1.0.0", repo_id: str = REPO):
    return pull_release(repo_id, version, out, endpoint=hub.url, token=False)


def refused(hub, out: Path, version: str = "1.0.0") -> str:
    with pytest.raises(CommonlinkError) as info:
        pull(hub, out, version)
    assert not out.exists() or not any(out.iterdir()), "nothing is kept"
    return f"{info.value.problem} {info.value.fix}"


def test_a_plain_release_is_pulled(hub, tmp_path):
    files = _release()
    publish(hub, files)
    result = pull(hub, tmp_path / "out")
    assert result.files == 3
    for rel, data in files.items():
        assert (tmp_path / "out" / rel).read_bytes() == data


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (lambda m: m.update(files=["README.md"]), "'files' is not a JSON object"),
        (lambda m: m["files"].update({"README.md": "abc"}), "'files' entry 'README.md' is not a JSON object"),
        (lambda m: m["files"]["README.md"].update(size="9"), "README.md: its 'size' is not a whole number"),
        (lambda m: m["files"]["README.md"].update(size=True), "README.md: its 'size' is not a whole number"),
        (lambda m: m["files"]["README.md"].update(sha256=7), "README.md: its 'sha256' is not 64 hex digits"),
        (lambda m: m.update(version=None), "of version None, not the '1.0.0'"),
        (lambda m: m.update(repo_id=["x"]), "of the repo ['x'], not of"),
        (lambda m: m.update(files={}), "lists no files"),
    ],
)
def test_a_malformed_manifest_is_a_clear_error_not_a_traceback(hub, tmp_path, change, named):
    files = _release()
    manifest = json.loads(files["manifest.json"])
    change(manifest)
    publish(hub, {**files, "manifest.json": json.dumps(manifest).encode()})
    text = refused(hub, tmp_path / "out")
    assert named in text and "manifest.json" in text and "1.0.0" in text, text


def test_a_manifest_that_is_not_json_or_not_an_object_is_named(hub, tmp_path):
    publish(hub, {**_release(), "manifest.json": b"[1, 2]"})
    assert "not a JSON object" in refused(hub, tmp_path / "a")
    publish(hub, {**_release(), "manifest.json": b"{nope"})
    text = refused(hub, tmp_path / "b")
    assert "not valid JSON" in text and ".building-" not in text, text  # no staging path


@pytest.mark.parametrize(
    "rel", [".commonlink-staging", "data/.commonlink-staging", ".cache/huggingface/x", "../escape", "/abs", "a\\b"]
)
def test_reserved_or_escaping_names_are_refused(hub, tmp_path, rel):
    files = {**{k: v for k, v in _release().items() if k != "manifest.json"}, rel.lstrip("/"): b"{}"}
    manifest = json.loads(_manifest(files))
    manifest["files"][rel] = manifest["files"].pop(rel.lstrip("/"))
    publish(hub, {**files, "manifest.json": json.dumps(manifest).encode()})
    text = refused(hub, tmp_path / "out")
    assert repr(rel) in text and "Do not use this version" in text, text


def test_the_manifest_listing_itself_is_refused(hub, tmp_path):
    files = _release()
    manifest = json.loads(files["manifest.json"])
    manifest["files"]["manifest.json"] = {"sha256": "0" * 64, "size": 1}
    publish(hub, {**files, "manifest.json": json.dumps(manifest).encode()})
    assert "'manifest.json'" in refused(hub, tmp_path / "out")


def test_a_listed_file_missing_from_the_repo_is_named_as_missing(hub, tmp_path):
    files = _release()
    del files["data/main-00000-of-00001.parquet"]  # the manifest still lists it
    publish(hub, files)
    text = refused(hub, tmp_path / "out")
    assert "data/main-00000-of-00001.parquet" in text and "missing" in text and "not found on" not in text, text


@pytest.mark.parametrize(("field", "value"), [("version", "9.9.9"), ("repo_id", "someone/else")])
def test_a_self_consistent_release_of_another_version_or_repo_is_refused(hub, tmp_path, field, value):
    publish(hub, _release(**{field: value}))
    text = refused(hub, tmp_path / "out")
    assert repr(value) in text and (repr("1.0.0") if field == "version" else repr(REPO)) in text, text


def test_a_manifest_without_repo_id_from_an_older_push_is_still_pulled(hub, tmp_path):
    files = _release()
    manifest = json.loads(files["manifest.json"])
    del manifest["repo_id"]
    publish(hub, {**files, "manifest.json": json.dumps(manifest).encode()})
    assert pull(hub, tmp_path / "out").files == 3


def test_a_branch_named_like_the_tag_does_not_win(hub, tmp_path):
    tagged = _release(salt="tag")
    publish(hub, tagged)
    publish(hub, _release(salt="branch"), tag=None, branch="1.0.0")  # self-consistent, but not the version
    assert set(hub.refs(REPO)["heads"]) == {"main", "1.0.0"} and "1.0.0" in hub.refs(REPO)["tags"]
    pull(hub, tmp_path / "out")
    for rel, data in tagged.items():
        assert (tmp_path / "out" / rel).read_bytes() == data, rel


def test_a_tag_moved_during_the_pull_cannot_mix_files(hub, tmp_path, monkeypatch):
    """Deterministic: right after the manifest is downloaded, the tag is moved to a commit of other content."""
    import commonlink.release.pull as pull_module

    first = _release(salt="one")
    publish(hub, first)
    real = pull_module._download
    moved = []

    def download_then_move(api, repo_id, revision, rel, folder, **kwargs):
        real(api, repo_id, revision, rel, folder, **kwargs)
        if not moved:
            moved.append(publish(hub, _release(salt="two")))  # moves tag 1.0.0

    monkeypatch.setattr(pull_module, "_download", download_then_move)
    pull(hub, tmp_path / "out")
    assert moved and hub.refs(REPO)["tags"]["1.0.0"] == moved[0]
    for rel, data in first.items():
        assert (tmp_path / "out" / rel).read_bytes() == data, rel


def test_the_test_hub_resolves_revisions_like_the_hub(hub, tmp_path):
    """The double, through the real client: ``refs/tags/X`` and ``refs/heads/X`` pick the tag or the branch of a
    shared name, a commit id reads that commit, an unknown revision is ``RevisionNotFoundError``."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import RevisionNotFoundError

    tag_commit = publish(hub, _release(salt="tag"))
    branch_commit = publish(hub, _release(salt="branch"), tag=None, branch="1.0.0")
    api = HfApi(endpoint=hub.url, token=False)
    refs = api.list_repo_refs(REPO, repo_type="dataset")
    assert {r.name: r.target_commit for r in refs.tags} == {"1.0.0": tag_commit}
    assert {r.name: r.ref for r in refs.tags} == {"1.0.0": "refs/tags/1.0.0"}

    def readme(revision: str) -> str:
        path = api.hf_hub_download(REPO, "README.md", repo_type="dataset", revision=revision, cache_dir=tmp_path / "c")
        return Path(path).read_text()

    assert readme("refs/tags/1.0.0") == "# t tag\n" == readme(tag_commit)
    assert readme("refs/heads/1.0.0") == "# t branch\n" == readme(branch_commit)
    with pytest.raises(RevisionNotFoundError):
        readme("refs/tags/2.0.0")


def test_a_full_disk_during_the_pull_names_the_local_path_not_the_hub(hub, tmp_path, monkeypatch):
    import huggingface_hub.file_download as file_download

    publish(hub, _release())

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(file_download, "http_get", full)
    out = tmp_path / "out"
    with pytest.raises(OSError) as info:
        pull(hub, out)
    monkeypatch.undo()
    from commonlink.errors import describe_os_error

    problem, _ = describe_os_error(info.value)
    assert "no space left" in problem and str(out) in problem and "Hub" not in problem, problem
    assert not out.exists() or not any(out.iterdir())


def test_a_pull_into_its_own_finished_folder_verifies_it_and_says_it_is_up_to_date(hub, tmp_path):
    """Run twice, a pull does not fail on the folder it filled: it checks every file again and downloads nothing;
    a folder of another release, or one whose files changed, is refused and left exactly as it was."""
    publish(hub, _release())
    out = tmp_path / "out"
    pull(hub, out)
    again = pull(hub, out)
    assert again.up_to_date and again.files == 3
    publish(hub, _release("1.1.0", salt="b"), tag="1.1.0")
    with pytest.raises(CommonlinkError, match="holds another release"):
        pull(hub, out, "1.1.0")
    shard = out / "data" / "main-00000-of-00001.parquet"
    shard.write_bytes(b"edited")
    with pytest.raises(CommonlinkError, match="not as published") as info:
        pull(hub, out)
    assert "main-00000-of-00001.parquet" in info.value.problem and shard.read_bytes() == b"edited"  # untouched
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("mine")
    with pytest.raises(CommonlinkError, match="not an empty folder"):
        pull(hub, tmp_path / "mine")
    assert (tmp_path / "mine" / "notes.txt").read_text() == "mine"
