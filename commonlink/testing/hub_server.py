"""A local server that speaks the Hugging Face Hub HTTP API subset used by ``huggingface_hub`` and ``datasets``.

No Hub can be reached from CI machines, so the release code is tested with the *real* clients against this
server. It keeps repositories in a folder with real history: every commit has a 40-hex id, a parent, a message,
a date and a full snapshot of its files; branches and tags are refs pointing at commits. Regular files are stored
by their git blob id, large files through the Git LFS batch protocol by their sha256 (content-addressed, so an
object uploaded once is never asked for again).

Endpoints (the shapes were read from huggingface_hub 2.x and datasets 5.x):

- ``GET /api/whoami-v2``; ``POST /api/repos/create``; ``POST /api/validate-yaml``
- ``GET /api/{type}s/{ns}/{name}[/revision/{rev}]`` (repo info, ``sha``, ``siblings``, ``cardData``)
- ``POST /api/{type}s/{id}/preupload/{rev}``; ``POST /{prefix}{id}.git/info/lfs/objects/batch`` + ``PUT`` of the
  object; ``POST /api/{type}s/{id}/commit/{rev}`` (NDJSON: header, file, lfsFile, deletedFile, deletedFolder)
- ``GET /api/{type}s/{id}/refs``; ``POST|DELETE /api/{type}s/{id}/tag/{rev|tag}``; ``POST|DELETE .../branch/{b}``
- ``GET /api/{type}s/{id}/commits/{rev}``; ``GET /api/{type}s/{id}/tree/{rev}[/{path}]?recursive&expand``;
  ``POST /api/{type}s/{id}/paths-info/{rev}``
- ``GET|HEAD /{prefix}{id}/resolve/{rev}/{path}`` with ``X-Repo-Commit``, ``ETag``, ``X-Linked-Etag``,
  ``X-Linked-Size`` and byte ranges.

Errors use the Hub's conventions (``X-Error-Code`` ``RepoNotFound`` / ``RevisionNotFound`` / ``EntryNotFound``,
``{"error": message}`` bodies, 401 ``Invalid credentials in Authorization header`` for a wrong token), so the
clients raise the same exceptions they raise against huggingface.co.

Clients read ``HF_ENDPOINT`` and ``HF_HUB_DISABLE_XET`` when they are imported: start the server first, then run
the client code in a process whose environment has ``HF_ENDPOINT=server.url`` and ``HF_HUB_DISABLE_XET=1``
(this server speaks Git LFS, not Xet).

Usage::

    with HubServer(tmp_path / "hub", tokens={"hf_write": "alice"}, orgs={"alice": ["my-org"]}) as hub:
        env = {**os.environ, **hub.client_env(token="hf_write")}
        subprocess.run(["commonlink", "release", "push", ...], env=env, check=True)
        assert "1.0.0" in hub.refs("my-org/my-set")["tags"]

Command line (for trying a pipeline by hand): ``python -m commonlink.testing.hub_server --root DIR --port 8765
--token hf_xxx=alice --org alice=my-org``.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import fnmatch
import hashlib
import hmac
import json
import os
import re
import secrets
import socket
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

import yaml

from commonlink.fileio import atomic_write_bytes, atomic_write_json

#: The .gitattributes the Hub puts in every new repo (abridged): these patterns are stored with LFS.
DEFAULT_GITATTRIBUTES = "".join(
    f"{pattern} filter=lfs diff=lfs merge=lfs -text\n"
    for pattern in (
        "*.7z", "*.arrow", "*.bin", "*.bz2", "*.ckpt", "*.ftz", "*.gz", "*.h5", "*.joblib", "*.lz4", "*.mds",
        "*.model", "*.msgpack", "*.npy", "*.npz", "*.onnx", "*.ot", "*.parquet", "*.pb", "*.pickle", "*.pkl",
        "*.pt", "*.pth", "*.rar", "*.safetensors", "*.tar", "*.tflite", "*.tgz", "*.wasm", "*.xz", "*.zip",
        "*.zst", "*tfevents*", "*.mp3", "*.ogg", "*.wav", "*.jpg", "*.jpeg", "*.png", "*.webp", "*.gif",
        "*.mp4", "*.webm",
    )
)
#: Files larger than this go through LFS whatever their name (the Hub's limit for regular git files).
LFS_SIZE_THRESHOLD = 10 * 1024 * 1024
_REPO_TYPES = {"models": "model", "datasets": "dataset", "spaces": "space"}
_URL_PREFIX = {"model": "", "dataset": "datasets/", "space": "spaces/"}
_INVALID_TOKEN = "Invalid credentials in Authorization header"
_INVALID_REPO_NAME = ("Only regular characters and '-', '_', '.' are accepted. '--' and '..' are forbidden. '-' and '.' "
                      'cannot start or end the name. The name cannot end with ".git". Max length is 96.')


def git_blob_id(data: bytes) -> str:
    """The git object id of a blob (what ``git hash-object`` prints)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def lfs_pointer(sha256: str, size: int) -> bytes:
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass
class RequestRecord:
    """One request the server answered (the token itself is never recorded)."""

    method: str
    path: str
    status: int
    user: str | None


class HubError(Exception):
    """Raised inside a handler to answer with a Hub-style error."""

    def __init__(self, status: int, message: str, code: str | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code


class _DropConnection(Exception):
    """Raised to close the socket without answering (simulated network failure)."""


class HubStore:
    """Repositories on disk: ``objects/`` (regular blobs by git id), ``lfs/`` (LFS objects by sha256) and one
    JSON document per repo holding its commits and refs. Thread-safe through one lock."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)
        (self.root / "objects").mkdir(parents=True, exist_ok=True)
        (self.root / "lfs").mkdir(parents=True, exist_ok=True)
        (self.root / "repos").mkdir(parents=True, exist_ok=True)
        self.lock = threading.RLock()

    # -- repos ---------------------------------------------------------------------------------------------
    def _repo_file(self, repo_type: str, repo_id: str) -> Path:
        parts = repo_id.split("/")
        if len(parts) != 2 or not all(re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}", p) and ".." not in p for p in parts):
            raise HubError(400, f"Invalid repo id {repo_id!r} (expected NAMESPACE/NAME).")
        return self.root / "repos" / repo_type / f"{repo_id}.json"

    def load_repo(self, repo_type: str, repo_id: str) -> dict | None:
        path = self._repo_file(repo_type, repo_id)
        if not path.is_file():
            return None
        return json.loads(path.read_text(encoding="utf-8"))

    def save_repo(self, repo: dict) -> None:
        atomic_write_json(self._repo_file(repo["type"], repo["id"]), repo)

    def create_repo(self, repo_type: str, repo_id: str, *, private: bool, author: str) -> dict:
        repo = {"id": repo_id, "type": repo_type, "private": private, "created_at": _now(), "commits": {},
                "refs": {"heads": {}, "tags": {}}, "tag_messages": {}}
        blob = self.put_regular(DEFAULT_GITATTRIBUTES.encode())
        files = {".gitattributes": {"size": len(DEFAULT_GITATTRIBUTES), "blob": blob}}
        oid = self.add_commit(repo, parents=[], files=files, title="initial commit", message="", author="system")
        repo["refs"]["heads"]["main"] = oid
        self.save_repo(repo)
        return repo

    @staticmethod
    def add_commit(repo: dict, *, parents: list[str], files: dict, title: str, message: str, author: str) -> str:
        date = _now()
        body = json.dumps({"parents": parents, "files": files, "title": title, "message": message, "date": date,
                           "author": author, "repo": repo["id"]}, sort_keys=True)
        oid = hashlib.sha1(body.encode()).hexdigest()
        repo["commits"][oid] = {"id": oid, "parents": parents, "files": files, "title": title, "message": message,
                                "date": date, "author": author}
        return oid

    @staticmethod
    def resolve(repo: dict, revision: str) -> str:
        """Branch, tag, full ref name or commit id -> commit id (HubError 404 RevisionNotFound otherwise)."""
        rev = revision
        for prefix, kind in (("refs/heads/", "heads"), ("refs/tags/", "tags")):
            if rev.startswith(prefix):
                name = rev[len(prefix):]
                if name in repo["refs"][kind]:
                    return repo["refs"][kind][name]
                raise HubError(404, f"Invalid rev id: {revision}", "RevisionNotFound")
        if rev in repo["refs"]["heads"]:
            return repo["refs"]["heads"][rev]
        if rev in repo["refs"]["tags"]:
            return repo["refs"]["tags"][rev]
        if re.fullmatch(r"[0-9a-f]{40}", rev) and rev in repo["commits"]:
            return rev
        raise HubError(404, f"Invalid rev id: {revision}", "RevisionNotFound")

    # -- objects -------------------------------------------------------------------------------------------
    def put_regular(self, data: bytes) -> str:
        blob = git_blob_id(data)
        path = self.root / "objects" / blob
        if not path.exists():
            atomic_write_bytes(path, data)
        return blob

    def regular_path(self, blob: str) -> Path:
        return self.root / "objects" / blob

    def lfs_path(self, sha256: str) -> Path:
        return self.root / "lfs" / sha256

    def has_lfs(self, sha256: str, size: int | None = None) -> bool:
        path = self.lfs_path(sha256)
        return path.is_file() and (size is None or path.stat().st_size == size)

    def lfs_objects(self) -> set[str]:
        return {p.name for p in (self.root / "lfs").iterdir() if re.fullmatch(r"[0-9a-f]{64}", p.name)}


#: Credentials of the test Hub that :func:`tests/conftest.py::hub` starts (a write token, its user, an org).
TEST_WRITE_TOKEN = "hf_test_write_token_0123456789"
TEST_USER = "alice"
TEST_ORG = "commonlink-test"


class HubServer:
    """The server: a :class:`HubStore` behind a ``ThreadingHTTPServer`` on a free loopback port.

    ``tokens`` maps access tokens to user names; ``orgs`` maps a user to the organisations they may write to.
    ``requests`` records every request answered (method, path, status, user). ``drop_lfs_uploads(from_put=N)``
    makes the N-th and every later LFS upload lose its connection half-way (``fault_tripped`` is set when the
    first one is dropped); ``fail_requests(method, path_contains, status=..., times=...)`` answers matching
    requests with an error; ``clear_faults()`` ends both.
    """

    def __init__(self, root: str | os.PathLike, *, tokens: dict[str, str] | None = None,
                 orgs: dict[str, list[str]] | None = None, host: str = "127.0.0.1", port: int = 0):
        self.store = HubStore(root)
        self.tokens = dict(tokens or {})
        self.orgs = {user: list(names) for user, names in (orgs or {}).items()}
        self.requests: list[RequestRecord] = []
        self.lfs_puts: list[str] = []  # oid of every LFS PUT that arrived (completed or not)
        self.fault_tripped = threading.Event()
        self._drop_from: int | None = None
        self._failures: list[list] = []  # [method, path substring, status, remaining]
        self._in_flight = 0
        self._secret = secrets.token_bytes(16)
        self._httpd = ThreadingHTTPServer((host, port), _Handler)
        self._httpd.daemon_threads = True
        self._httpd.hub = self  # type: ignore[attr-defined]
        self._thread: threading.Thread | None = None

    # -- lifecycle -----------------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> HubServer:
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="hub-server", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> HubServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def client_env(self, token: str | None = None) -> dict[str, str]:
        """Environment for a client process talking to this server (``HF_TOKEN`` only when given)."""
        env = {"HF_ENDPOINT": self.url, "HF_HUB_DISABLE_XET": "1", "HF_HUB_DISABLE_TELEMETRY": "1"}
        if token is not None:
            env["HF_TOKEN"] = token
        return env

    # -- faults --------------------------------------------------------------------------------------------
    def drop_lfs_uploads(self, *, from_put: int) -> None:
        self._drop_from = from_put
        self.fault_tripped.clear()

    def fail_requests(self, method: str, path_contains: str, *, status: int = 500, times: int = 1) -> None:
        """Answer the next ``times`` requests matching ``method`` and ``path_contains`` with ``status``."""
        with self.store.lock:
            self._failures.append([method.upper(), path_contains, status, times])

    def _injected_failure(self, method: str, path: str) -> int | None:
        with self.store.lock:
            for failure in self._failures:
                if failure[0] == method and failure[1] in path and failure[3] > 0:
                    failure[3] -= 1
                    return failure[2]
        return None

    def clear_faults(self) -> None:
        self._drop_from = None
        with self.store.lock:
            self._failures.clear()

    # -- inspection (for tests) ----------------------------------------------------------------------------
    def _repo(self, repo_id: str, repo_type: str) -> dict:
        repo = self.store.load_repo(repo_type, repo_id)
        if repo is None:
            raise KeyError(f"no {repo_type} repo {repo_id}")
        return repo

    def refs(self, repo_id: str, repo_type: str = "dataset") -> dict[str, dict[str, str]]:
        return self._repo(repo_id, repo_type)["refs"]

    def files_at(self, repo_id: str, revision: str = "main", repo_type: str = "dataset") -> dict[str, dict]:
        repo = self._repo(repo_id, repo_type)
        return repo["commits"][HubStore.resolve(repo, revision)]["files"]

    def history(self, repo_id: str, revision: str = "main", repo_type: str = "dataset") -> list[dict]:
        repo = self._repo(repo_id, repo_type)
        return list(_walk(repo, HubStore.resolve(repo, revision)))

    def lfs_objects(self) -> set[str]:
        return self.store.lfs_objects()

    def wait_idle(self, timeout: float = 10.0) -> bool:
        """Wait until no request is being handled (e.g. after killing a client mid-upload); False on timeout."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.store.lock:
                if self._in_flight == 0:
                    return True
            time.sleep(0.02)
        return False

    def count(self, method: str | None = None, path_contains: str = "") -> int:
        return sum(1 for r in list(self.requests)
                   if (method is None or r.method == method) and path_contains in r.path)

    # -- helpers used by the handler -----------------------------------------------------------------------
    def sign(self, oid: str, size: int) -> str:
        return hmac.new(self._secret, f"{oid}:{size}".encode(), "sha256").hexdigest()

    def take_put_slot(self, oid: str) -> bool:
        """Record an LFS PUT; True when this one must be dropped (the N-th and later while a fault is armed)."""
        with self.store.lock:
            self.lfs_puts.append(oid)
            return self._drop_from is not None and len(self.lfs_puts) >= self._drop_from


def _walk(repo: dict, oid: str):
    """Commits from ``oid`` back along first parents."""
    while oid:
        commit = repo["commits"][oid]
        yield commit
        oid = commit["parents"][0] if commit["parents"] else ""


def _lfs_patterns(files: dict, store: HubStore) -> list[str]:
    entry = files.get(".gitattributes")
    if not entry or "blob" not in entry or entry.get("lfs"):
        return []
    text = store.regular_path(entry["blob"]).read_text(encoding="utf-8", errors="replace")
    patterns = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2 and "filter=lfs" in parts[1:]:
            patterns.append(parts[0])
    return patterns


def _ref_name_problem(name: str) -> str | None:
    """Why git (``git check-ref-format``), and so the Hub, refuses ``name`` as a branch or tag; ``None`` when
    it is a valid name. SemVer names like ``1.0.0-rc.1+build.5`` are valid: ``+`` is allowed in git refs."""
    if not name:
        return "a ref name cannot be empty"
    if bad := sorted({c for c in name if ord(c) < 0x20 or ord(c) == 0x7F or c in " ~^:?*[\\"}):
        return f"a ref name cannot contain {', '.join(repr(c) for c in bad)}"
    if ".." in name or "@{" in name or "//" in name or name == "@":
        return "a ref name cannot contain '..', '@{' or '//', nor be '@'"
    if name.startswith("/") or name.endswith(("/", ".")):
        return "a ref name cannot start with '/' nor end with '/' or '.'"
    if any(part.startswith(".") or part.endswith(".lock") for part in name.split("/")):
        return "no part of a ref name can start with '.' or end with '.lock'"
    return None


def _matches(path: str, patterns: list[str]) -> bool:
    name = path.rsplit("/", 1)[-1]
    return any(fnmatch.fnmatch(name, p) or fnmatch.fnmatch(path, p) for p in patterns)


def _card_data(files: dict, store: HubStore) -> dict | None:
    entry = files.get("README.md")
    if not entry:
        return None
    path = store.lfs_path(entry["lfs"]) if entry.get("lfs") else store.regular_path(entry["blob"])
    return _yaml_header(path.read_text(encoding="utf-8", errors="replace"))[0]


def _yaml_header(text: str) -> tuple[dict | None, str | None]:
    """(metadata, error) of a card's ``---`` YAML block."""

    match = re.match(r"^---\s*\n(.*?)\n---\s*(\n|$)", text, flags=re.S)
    if not match:
        return None, None
    try:
        data = yaml.safe_load(match.group(1))
    except yaml.YAMLError as exc:
        return None, f"Invalid YAML in the card header: {exc}"
    if data is None:
        return {}, None
    if not isinstance(data, dict):
        return None, "The card header must be a YAML mapping."
    return data, None


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "commonlink-hub-test/1"

    # -- plumbing ------------------------------------------------------------------------------------------
    @property
    def hub(self) -> HubServer:
        return self.server.hub  # type: ignore[attr-defined]

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - silence per-request stderr lines
        pass

    @property
    def base(self) -> str:
        return f"http://{self.headers.get('Host') or '%s:%s' % self.server.server_address[:2]}"

    def _read_body(self, limit: int | None = None) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            total = 0
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
                total += size
                if limit is not None and total >= limit:
                    break
            return b"".join(chunks)
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length if limit is None else min(length, limit))

    def _send(self, status: int, body: bytes = b"", content_type: str = "application/json",
              headers: dict[str, str] | None = None, head_only: bool = False, length: int | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body) if length is None else length))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if body and not head_only:
            self.wfile.write(body)
        self._status = status

    def _json(self, status: int, obj: Any, content_type: str = "application/json", headers: dict | None = None) -> None:
        self._send(status, json.dumps(obj).encode(), content_type, headers)

    def _error(self, err: HubError) -> None:
        headers = {"X-Error-Message": err.message}
        if err.code:
            headers["X-Error-Code"] = err.code
        body = b"" if self.command == "HEAD" else json.dumps({"error": err.message}).encode()
        self._send(err.status, body, headers=headers)

    def _user(self) -> str | None:
        """The authenticated user; HubError 401 for a token the server does not know."""
        auth = self.headers.get("Authorization", "")
        if not auth:
            return None
        token = auth[7:] if auth.lower().startswith("bearer ") else auth
        user = self.hub.tokens.get(token.strip())
        if user is None:
            raise HubError(401, _INVALID_TOKEN)
        return user

    def _can_write(self, user: str | None, namespace: str) -> bool:
        return user is not None and (namespace == user or namespace in self.hub.orgs.get(user, []))

    def _repo(self, repo_type: str, repo_id: str, user: str | None, *, write: bool = False) -> dict:
        repo = self.hub.store.load_repo(repo_type, repo_id)
        namespace = repo_id.split("/")[0]
        if repo is None or (repo["private"] and not self._can_write(user, namespace)):
            raise HubError(404 if user else 401, "Repository not found", "RepoNotFound")
        if write and not self._can_write(user, namespace):
            raise HubError(403, f"You don't have the rights to write to {repo_type}s/{repo_id}.")
        return repo

    def _dispatch(self) -> None:
        self._status = 0
        user_holder: list[str | None] = [None]
        with self.hub.store.lock:
            self.hub._in_flight += 1
        try:
            parts = urlsplit(self.path)
            self._query = parse_qs(parts.query)
            raw_path = parts.path
            user_holder[0] = self._user() if not raw_path.startswith("/lfs-upload/") else None
            if (status := self.hub._injected_failure(self.command, raw_path)) is not None:
                self._read_body()
                raise HubError(status, "Injected failure (test Hub).")
            self._route(raw_path, user_holder[0])
        except _DropConnection:
            self._status = -1
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
        except HubError as err:
            self._error(err)
        except Exception as exc:  # a bug in the server: answer 500 so the client shows it
            self._error(HubError(500, f"Internal test-server error: {type(exc).__name__}: {exc}"))
        finally:
            self.hub.requests.append(RequestRecord(self.command, urlsplit(self.path).path, self._status,
                                                   user_holder[0]))
            with self.hub.store.lock:
                self.hub._in_flight -= 1

    do_GET = do_HEAD = do_POST = do_PUT = do_DELETE = _dispatch  # noqa: N815

    # -- routing -------------------------------------------------------------------------------------------
    def _route(self, path: str, user: str | None) -> None:
        method = self.command
        if path == "/api/whoami-v2" and method == "GET":
            return self._whoami(user)
        if path == "/api/repos/create" and method == "POST":
            return self._create_repo(user)
        if path == "/api/validate-yaml" and method == "POST":
            return self._validate_yaml()
        if m := re.fullmatch(r"/lfs-upload/(model|dataset|space)/([^/]+/[^/]+)/([0-9a-f]{64})", path):
            if method == "PUT":
                return self._lfs_put(m.group(1), unquote(m.group(2)), m.group(3))
        if m := re.fullmatch(r"/api/(models|datasets|spaces)/([^/]+)/([^/]+?)(?:/(.*))?", path):
            repo_type = _REPO_TYPES[m.group(1)]
            repo_id = f"{unquote(m.group(2))}/{unquote(m.group(3))}"
            return self._api(method, repo_type, repo_id, m.group(4) or "", user)
        if m := re.fullmatch(r"/(datasets/|spaces/)?([^/]+)/([^/]+)\.git/info/lfs/objects/batch", path):
            repo_type = {"datasets/": "dataset", "spaces/": "space"}.get(m.group(1) or "", "model")
            if method == "POST":
                return self._lfs_batch(repo_type, f"{unquote(m.group(2))}/{unquote(m.group(3))}", user)
        if m := re.fullmatch(r"/(datasets/|spaces/)?([^/]+)/([^/]+)/resolve/([^/]+)/(.+)", path):
            repo_type = {"datasets/": "dataset", "spaces/": "space"}.get(m.group(1) or "", "model")
            if method in ("GET", "HEAD"):
                return self._resolve(repo_type, f"{unquote(m.group(2))}/{unquote(m.group(3))}",
                                     unquote(m.group(4)), unquote(m.group(5)), user)
        raise HubError(404, f"Not implemented by the test Hub: {method} {path}")

    def _api(self, method: str, repo_type: str, repo_id: str, rest: str, user: str | None) -> None:
        head, _, tail = rest.partition("/")
        if rest == "" and method == "GET":
            return self._info(repo_type, repo_id, None, user)
        if head == "revision" and method == "GET":
            return self._info(repo_type, repo_id, unquote(tail), user)
        if head == "preupload" and method == "POST":
            return self._preupload(repo_type, repo_id, unquote(tail), user)
        if head == "commit" and method == "POST":
            return self._commit(repo_type, repo_id, unquote(tail), user)
        if rest == "refs" and method == "GET":
            return self._refs(repo_type, repo_id, user)
        if head == "tag" and method == "POST":
            return self._create_ref(repo_type, repo_id, "tags", unquote(tail), user)
        if head == "tag" and method == "DELETE":
            return self._delete_ref(repo_type, repo_id, "tags", unquote(tail), user)
        if head == "branch" and method == "POST":
            return self._create_ref(repo_type, repo_id, "heads", unquote(tail), user)
        if head == "branch" and method == "DELETE":
            return self._delete_ref(repo_type, repo_id, "heads", unquote(tail), user)
        if head == "commits" and method == "GET":
            return self._commits(repo_type, repo_id, unquote(tail), user)
        if head == "tree" and method == "GET":
            rev, _, sub = tail.partition("/")
            return self._tree(repo_type, repo_id, unquote(rev), unquote(sub).strip("/"), user)
        if head == "paths-info" and method == "POST":
            return self._paths_info(repo_type, repo_id, unquote(tail), user)
        raise HubError(404, f"Not implemented by the test Hub: {method} /api/{repo_type}s/{repo_id}/{rest}")

    # -- account -------------------------------------------------------------------------------------------
    def _whoami(self, user: str | None) -> None:
        if user is None:
            raise HubError(401, _INVALID_TOKEN)
        orgs = [{"type": "org", "name": o, "fullname": o, "roleInOrg": "write"} for o in self.hub.orgs.get(user, [])]
        self._json(200, {"type": "user", "id": hashlib.sha1(user.encode()).hexdigest()[:24], "name": user,
                         "fullname": user, "orgs": orgs, "isPro": False, "emailVerified": True,
                         "auth": {"type": "access_token", "accessToken": {"displayName": "test", "role": "write"}}})

    def _create_repo(self, user: str | None) -> None:
        payload = json.loads(self._read_body() or b"{}")
        repo_type = payload.get("type") or "model"
        name = payload.get("name") or ""
        namespace = payload.get("organization") or user
        if user is None:
            raise HubError(401, _INVALID_TOKEN)
        if repo_type not in _URL_PREFIX:
            raise HubError(400, f"Invalid repo type: {repo_type!r}.")
        if (not re.fullmatch(r"[A-Za-z0-9._-]{1,96}", name) or "--" in name or ".." in name
                or name[0] in "-." or name[-1] in "-." or name.endswith(".git")):
            raise HubError(400, _INVALID_REPO_NAME)  # the Hub's own words for the rule
        if not self._can_write(user, namespace):
            raise HubError(403, f'You don\'t have the rights to create a {repo_type} under the namespace "{namespace}"')
        repo_id = f"{namespace}/{name}"
        url = f"{self.base}/{_URL_PREFIX[repo_type]}{repo_id}"
        with self.hub.store.lock:
            if self.hub.store.load_repo(repo_type, repo_id) is not None:
                return self._json(409, {"error": f"You already created this {repo_type} repo", "url": url})
            private = payload.get("visibility") == "private" or bool(payload.get("private"))
            self.hub.store.create_repo(repo_type, repo_id, private=private, author=user)
        self._json(200, {"url": url, "name": repo_id, "id": repo_id})

    def _validate_yaml(self) -> None:
        payload = json.loads(self._read_body() or b"{}")
        _, error = _yaml_header(payload.get("content", ""))
        if error:
            return self._json(400, {"errors": [{"message": error}], "warnings": []})
        self._json(200, {"errors": [], "warnings": []})

    # -- reading -------------------------------------------------------------------------------------------
    def _entry(self, repo: dict, files: dict, path: str, commit_oid: str, expand: bool) -> dict:
        if path in files:
            meta = files[path]
            entry: dict[str, Any] = {"type": "file", "path": path, "size": meta["size"], "oid": meta["blob"]}
            if meta.get("lfs"):
                entry["lfs"] = {"oid": meta["lfs"], "size": meta["size"],
                                "pointerSize": len(lfs_pointer(meta["lfs"], meta["size"]))}
        else:
            below = sorted((p, m["blob"]) for p, m in files.items() if p.startswith(path + "/"))
            entry = {"type": "directory", "path": path, "size": 0,
                     "oid": hashlib.sha1(json.dumps(below).encode()).hexdigest()}
        if expand:
            last = self._last_commit(repo, commit_oid, path)
            entry["lastCommit"] = {"id": last["id"], "title": last["title"], "date": last["date"]}
        return entry

    @staticmethod
    def _last_commit(repo: dict, oid: str, path: str) -> dict:
        def state(files: dict) -> list:
            return sorted((p, m["blob"]) for p, m in files.items() if p == path or p.startswith(path + "/"))

        commits = list(_walk(repo, oid))
        for commit, parent in zip(commits, commits[1:] + [None]):
            if parent is None or state(commit["files"]) != state(parent["files"]):
                return commit
        return commits[-1]

    def _info(self, repo_type: str, repo_id: str, revision: str | None, user: str | None) -> None:
        repo = self._repo(repo_type, repo_id, user)
        oid = HubStore.resolve(repo, revision or "main")
        commit = repo["commits"][oid]
        blobs = self._query.get("blobs", ["false"])[0].lower() in ("1", "true")
        siblings = []
        for path, meta in sorted(commit["files"].items()):
            sibling: dict[str, Any] = {"rfilename": path}
            if blobs:
                sibling.update(size=meta["size"], blobId=meta["blob"])
                if meta.get("lfs"):
                    sibling["lfs"] = {"sha256": meta["lfs"], "size": meta["size"],
                                      "pointerSize": len(lfs_pointer(meta["lfs"], meta["size"]))}
            siblings.append(sibling)
        info = {"_id": hashlib.sha1(repo_id.encode()).hexdigest()[:24], "id": repo_id, "author": repo_id.split("/")[0],
                "sha": oid, "lastModified": commit["date"], "createdAt": repo["created_at"], "private": repo["private"],
                "gated": False, "disabled": False, "downloads": 0, "likes": 0, "tags": [], "siblings": siblings}
        card = _card_data(commit["files"], self.hub.store)
        if card is not None:
            info["cardData"] = card
        self._json(200, info)

    def _refs(self, repo_type: str, repo_id: str, user: str | None) -> None:
        repo = self._repo(repo_type, repo_id, user)

        def refs(kind: str) -> list[dict]:
            return [{"name": n, "ref": f"refs/{kind}/{n}", "targetCommit": oid}
                    for n, oid in sorted(repo["refs"][kind].items())]

        self._json(200, {"branches": refs("heads"), "tags": refs("tags"), "converts": [], "pullRequests": []})

    def _commits(self, repo_type: str, repo_id: str, revision: str, user: str | None) -> None:
        repo = self._repo(repo_type, repo_id, user)
        oid = HubStore.resolve(repo, revision)
        self._json(200, [{"id": c["id"], "title": c["title"], "message": c["message"], "date": c["date"],
                          "authors": [{"user": c["author"], "avatar": None}]} for c in _walk(repo, oid)])

    def _tree(self, repo_type: str, repo_id: str, revision: str, sub: str, user: str | None) -> None:
        repo = self._repo(repo_type, repo_id, user)
        oid = HubStore.resolve(repo, revision)
        files = repo["commits"][oid]["files"]
        recursive = self._query.get("recursive", ["false"])[0].lower() in ("1", "true")
        expand = self._query.get("expand", ["false"])[0].lower() in ("1", "true")
        prefix = sub + "/" if sub else ""
        if sub and sub in files:
            raise HubError(400, f"{sub} is a file, not a directory.")
        names: set[str] = set()
        for path in files:
            if not path.startswith(prefix):
                continue
            rel = path[len(prefix):].split("/")
            depth_range = range(1, len(rel) + 1) if recursive else range(1, 2)
            for depth in depth_range:
                names.add(prefix + "/".join(rel[:depth]))
        if sub and not names:
            raise HubError(404, f"Path {sub} does not exist at revision {revision}", "EntryNotFound")
        self._json(200, [self._entry(repo, files, n, oid, expand) for n in sorted(names)])

    def _paths_info(self, repo_type: str, repo_id: str, revision: str, user: str | None) -> None:
        repo = self._repo(repo_type, repo_id, user)
        oid = HubStore.resolve(repo, revision)
        files = repo["commits"][oid]["files"]
        body = self._read_body()
        if "json" in (self.headers.get("Content-Type") or ""):
            payload = json.loads(body or b"{}")
            paths, expand = payload.get("paths", []), bool(payload.get("expand"))
        else:
            form = parse_qs(body.decode())
            paths = form.get("paths", [])
            expand = form.get("expand", ["False"])[0].lower() in ("1", "true")
        out = []
        for raw in paths:
            path = raw.strip("/")
            if path in files or any(p.startswith(path + "/") for p in files):
                out.append(self._entry(repo, files, path, oid, expand))
        self._json(200, out)

    def _resolve(self, repo_type: str, repo_id: str, revision: str, path: str, user: str | None) -> None:
        repo = self._repo(repo_type, repo_id, user)
        oid = HubStore.resolve(repo, revision)
        meta = repo["commits"][oid]["files"].get(path)
        if meta is None:
            raise HubError(404, f"Entry not found: {path}", "EntryNotFound")
        store = self.hub.store
        blob_path = store.lfs_path(meta["lfs"]) if meta.get("lfs") else store.regular_path(meta["blob"])
        size = meta["size"]
        etag = f'"{meta["lfs"] if meta.get("lfs") else meta["blob"]}"'
        headers = {"X-Repo-Commit": oid, "ETag": etag, "Accept-Ranges": "bytes"}
        if meta.get("lfs"):
            headers.update({"X-Linked-Etag": etag, "X-Linked-Size": str(size)})
        start, end, status = 0, size - 1, 200
        if rng := self.headers.get("Range"):
            m = re.fullmatch(r"bytes=(\d*)-(\d*)", rng.strip())
            if m:
                if m.group(1):
                    start = int(m.group(1))
                    end = min(int(m.group(2)), size - 1) if m.group(2) else size - 1
                elif m.group(2):
                    start, end = max(0, size - int(m.group(2))), size - 1
                if start >= size:
                    headers["Content-Range"] = f"bytes */{size}"
                    return self._send(416, b"", headers=headers)
                status = 206
                headers["Content-Range"] = f"bytes {start}-{end}/{size}"
        length = max(0, end - start + 1)
        if self.command == "HEAD":
            return self._send(status, b"", "application/octet-stream", headers, head_only=True, length=length)
        with open(blob_path, "rb") as handle:
            handle.seek(start)
            data = handle.read(length)
        self._send(status, data, "application/octet-stream", headers)

    # -- writing -------------------------------------------------------------------------------------------
    def _preupload(self, repo_type: str, repo_id: str, revision: str, user: str | None) -> None:
        repo = self._repo(repo_type, repo_id, user, write=True)
        if self._query.get("create_pr"):
            raise HubError(400, "Pull requests are not supported by the test Hub.")
        oid = HubStore.resolve(repo, revision)
        files = repo["commits"][oid]["files"]
        payload = json.loads(self._read_body() or b"{}")
        patterns = _lfs_patterns(files, self.hub.store)
        if payload.get("gitIgnore"):
            pass  # .gitignore rules are not applied by the test Hub
        out = []
        for item in payload.get("files", []):
            path, size = item["path"], int(item.get("size", 0))
            sample = base64.b64decode(item.get("sample", ""))
            lfs = _matches(path, patterns) or size >= LFS_SIZE_THRESHOLD or b"\0" in sample
            existing = files.get(path)
            remote_oid = None
            if existing:
                remote_oid = existing["lfs"] if existing.get("lfs") else existing["blob"]
            out.append({"path": path, "uploadMode": "lfs" if lfs else "regular", "shouldIgnore": False,
                        "oid": remote_oid})
        self._json(200, {"files": out, "commitOid": oid})

    def _lfs_batch(self, repo_type: str, repo_id: str, user: str | None) -> None:
        self._repo(repo_type, repo_id, user, write=True)
        payload = json.loads(self._read_body() or b"{}")
        if payload.get("operation") != "upload":
            raise HubError(400, "Only the upload operation is supported by the test Hub.")
        objects = []
        for obj in payload.get("objects", []):
            oid, size = obj["oid"], int(obj["size"])
            entry: dict[str, Any] = {"oid": oid, "size": size, "authenticated": True}
            if not re.fullmatch(r"[0-9a-f]{64}", oid):
                entry["error"] = {"code": 422, "message": f"Invalid oid {oid}"}
            elif not self.hub.store.has_lfs(oid, size):  # objects already stored need no upload
                href = f"{self.base}/lfs-upload/{repo_type}/{quote(repo_id)}/{oid}?size={size}&sig={self.hub.sign(oid, size)}"
                entry["actions"] = {"upload": {"href": href, "expires_in": 3600}}
            objects.append(entry)
        self._json(200, {"transfer": "basic", "objects": objects, "hash_algo": "sha256"},
                    content_type="application/vnd.git-lfs+json")

    def _lfs_put(self, repo_type: str, repo_id: str, oid: str) -> None:
        size = int(self._query.get("size", ["-1"])[0])
        if not hmac.compare_digest(self._query.get("sig", [""])[0], self.hub.sign(oid, size)):
            raise HubError(403, "Upload URL signature is invalid or expired.")
        if self.hub.take_put_slot(oid):
            self._read_body(limit=max(1, size // 2))  # half the object arrives, then the line goes dead
            self.hub.fault_tripped.set()
            raise _DropConnection()
        data = self._read_body()
        if len(data) != size or hashlib.sha256(data).hexdigest() != oid:
            raise HubError(400, f"Uploaded content does not match oid {oid} / size {size}.")
        path = self.hub.store.lfs_path(oid)
        if not path.exists():
            atomic_write_bytes(path, data)
        self._send(200, b"")

    def _commit(self, repo_type: str, repo_id: str, branch: str, user: str | None) -> None:
        if self._query.get("create_pr"):
            raise HubError(400, "Pull requests are not supported by the test Hub.")
        body = self._read_body()
        store = self.hub.store
        with store.lock:
            repo = self._repo(repo_type, repo_id, user, write=True)
            if branch not in repo["refs"]["heads"]:
                raise HubError(404, f"Invalid rev id: {branch} (commits go to a branch)", "RevisionNotFound")
            head = repo["refs"]["heads"][branch]
            files = dict(repo["commits"][head]["files"])
            header: dict = {}
            for line in body.splitlines():
                if not line.strip():
                    continue
                item = json.loads(line)
                key, value = item.get("key"), item.get("value", {})
                if key == "header":
                    header = value
                    parent = value.get("parentCommit")
                    if parent and parent != head:
                        raise HubError(412, "A commit has happened since. Please refresh and try again.")
                elif key == "file":
                    if value.get("encoding", "base64") != "base64":
                        raise HubError(400, f"Unsupported encoding {value.get('encoding')!r}.")
                    data = base64.b64decode(value["content"])
                    if b"\0" in data or len(data) >= LFS_SIZE_THRESHOLD:  # preupload said "lfs" for these
                        what, kind = ("binary files", "binary") if b"\0" in data else ("files larger than 10 MiB", "large")
                        raise HubError(400, f"Your push was rejected because it contains {what}. Please use "
                                            f"https://huggingface.co/docs/hub/xet to store {kind} files. "
                                            f"Offending files: - {value['path']} (ref: refs/heads/{branch})")
                    files[value["path"]] = {"size": len(data), "blob": store.put_regular(data)}
                elif key == "lfsFile":
                    sha, path = value["oid"], value["path"]
                    stored = store.lfs_path(sha)
                    if not stored.is_file():
                        raise HubError(422, f"Your push was rejected because an LFS pointer pointed to a file that "
                                            f"does not exist (oid {sha}, path {path}).")
                    size = stored.stat().st_size
                    files[path] = {"size": size, "blob": git_blob_id(lfs_pointer(sha, size)), "lfs": sha}
                elif key == "deletedFile":
                    if value["path"] not in files:
                        raise HubError(404, f"A file with this name doesn't exist: {value['path']}", "EntryNotFound")
                    del files[value["path"]]
                elif key == "deletedFolder":
                    prefix = value["path"].rstrip("/") + "/"
                    for path in [p for p in files if p.startswith(prefix)]:
                        del files[path]
                else:
                    raise HubError(400, f"Unknown commit operation {key!r}.")
            if not header.get("summary"):
                raise HubError(400, "The commit needs a summary (header line missing).")
            oid = store.add_commit(repo, parents=[head], files=files, title=header["summary"],
                                   message=header.get("description", ""), author=user or "anonymous")
            repo["refs"]["heads"][branch] = oid
            store.save_repo(repo)
        url = f"{self.base}/{_URL_PREFIX[repo_type]}{repo_id}/commit/{oid}"
        self._json(200, {"success": True, "commitOid": oid, "commitUrl": url, "hookOutput": "",
                         "pullRequestUrl": None})

    def _create_ref(self, repo_type: str, repo_id: str, kind: str, target: str, user: str | None) -> None:
        payload = json.loads(self._read_body() or b"{}")
        store = self.hub.store
        with store.lock:
            repo = self._repo(repo_type, repo_id, user, write=True)
            if kind == "tags":
                name, oid = payload.get("tag") or "", HubStore.resolve(repo, target)
            else:
                name, oid = target, HubStore.resolve(repo, payload.get("startingPoint") or "main")
            if problem := _ref_name_problem(name):
                raise HubError(400, f"Invalid {kind[:-1]} name {name!r}: {problem}.")
            if name in repo["refs"][kind]:
                what = "Tag" if kind == "tags" else "Branch"
                raise HubError(409, f"{what} {name} already exists")
            repo["refs"][kind][name] = oid
            if kind == "tags" and payload.get("message"):
                repo["tag_messages"][name] = payload["message"]
            store.save_repo(repo)
        self._json(200, {})

    def _delete_ref(self, repo_type: str, repo_id: str, kind: str, name: str, user: str | None) -> None:
        store = self.hub.store
        with store.lock:
            repo = self._repo(repo_type, repo_id, user, write=True)
            if name not in repo["refs"][kind]:
                raise HubError(404, f"Invalid rev id: {name}", "RevisionNotFound")
            if kind == "heads" and name == "main":
                raise HubError(403, "The main branch cannot be deleted.")
            del repo["refs"][kind][name]
            repo["tag_messages"].pop(name, None)
            store.save_repo(repo)
        self._json(200, {})


def main(argv: list[str] | None = None) -> None:  # pragma: no cover - manual use
    parser = argparse.ArgumentParser(description="Run the commonlink test Hub (Hub HTTP API subset) locally.")
    parser.add_argument("--root", required=True, help="folder that stores the repositories")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--token", action="append", default=[], metavar="TOKEN=USER")
    parser.add_argument("--org", action="append", default=[], metavar="USER=ORG")
    args = parser.parse_args(argv)
    tokens = dict(t.split("=", 1) for t in args.token)
    orgs: dict[str, list[str]] = {}
    for item in args.org:
        user, org = item.split("=", 1)
        orgs.setdefault(user, []).append(org)
    with HubServer(args.root, tokens=tokens, orgs=orgs, port=args.port) as hub:
        print(f"Test Hub at {hub.url} (export HF_ENDPOINT={hub.url} HF_HUB_DISABLE_XET=1); Ctrl-C stops it.")
        with contextlib.suppress(KeyboardInterrupt):
            while True:
                time.sleep(3600)


if __name__ == "__main__":  # pragma: no cover
    main()
