"""Prediction cache: one JSON line per answered request, appended after every batch.

Kill a run and rerun it: rows whose key is already in the cache are not sent to the model again, so the run
continues where it stopped and ends with exactly the results of an uninterrupted run. The key covers
everything that can change an output: dataset fingerprint, row id, model fingerprint, backend, prompt
template and generation settings (:func:`run_key` + row id). Failed requests are not cached (a rerun retries
them). A line cut short by a kill is ignored on reading.

Durability: every batch is written to the file (handed to the operating system) before the next batch starts,
so killing the process (``kill -9``, Ctrl-C, out of memory) at any moment loses no answer. ``fsync`` - which only
matters when the machine itself goes down - runs at most every :data:`SYNC_INTERVAL_S` seconds and at the end
of a run (:meth:`PredictionCache.sync`), not after every batch: an fsync costs milliseconds, as much as the
rest of the harness's own work on a batch of a small model. A power cut loses at most that many seconds of
answers, which the rerun generates again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import time
from collections.abc import Iterable
from pathlib import Path

from commonlink import constants
from commonlink.errors import InputError
from commonlink.eval.backends.base import (
    Backend,
    BatchState,
    GenerationRequest,
    GenerationSettings,
    RequestFailure,
    generate_resilient,
)

log = logging.getLogger(__name__)

CACHE_FILENAME = "prediction-cache.jsonl"

#: Longest time (seconds) written answers wait for an fsync (see the module doc); :meth:`PredictionCache.sync` ends it.
SYNC_INTERVAL_S = 2.0

_SURROGATE = re.compile("[\ud800-\udfff]")


def run_key(**parts) -> str:
    """Hash of the run-level key parts (any JSON-serialisable values)."""
    text = json.dumps(parts, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


def valid_text(text: str) -> str:
    """``text`` with each lone surrogate (a JSON ``"\\ud800"`` from a model decodes to one) replaced by U+FFFD.

    A lone surrogate cannot be written as UTF-8: kept, it would fail the cache write on every rerun."""
    if _SURROGATE.search(text) is None:
        return text
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def row_key(run: str, row_id: str) -> str:
    return hashlib.sha256(f"{run}\0{row_id}".encode()).hexdigest()[:40]


class PredictionCache:
    """Append-only JSONL of ``{"key", "row", "output"}`` entries, loaded into memory on open."""

    def __init__(
        self, path: str | os.PathLike, *, also_read: Iterable[Path] = (), sync_interval_s: float = SYNC_INTERVAL_S
    ):
        self.path = Path(path)
        self._entries: dict[str, str] = {}
        self.skipped_lines = 0
        self.sync_interval_s = sync_interval_s
        self._unsynced = False  # written since the last fsync
        self._handle = None
        self._last_sync = time.monotonic()
        for source in dict.fromkeys([*map(Path, also_read), self.path]):
            if source.is_file():
                self._load(source)

    def _load(self, source: Path) -> None:
        with source.open("r", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if not line.strip():
                    continue
                try:
                    entry = json.loads(line)
                    self._entries[entry["key"]] = entry["output"]
                except (ValueError, KeyError, TypeError):
                    self.skipped_lines += 1  # a line cut short by a kill, or foreign text
        if self.skipped_lines:
            log.warning(
                "%s: ignored %d unreadable line(s) (an interrupted write); those rows will be redone.",
                source,
                self.skipped_lines,
            )

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: str) -> bool:
        return key in self._entries

    def get(self, key: str) -> str | None:
        return self._entries.get(key)

    def add(self, entries: Iterable[tuple[str, str, str]]) -> None:
        """Append ``(key, row id, output)`` entries to the file (a killed process loses none of them); fsync
        when the last one is :data:`SYNC_INTERVAL_S` old (see the module doc)."""
        lines = []
        for key, row_id, output in entries:
            output = valid_text(output)
            self._entries[key] = output
            lines.append(json.dumps({"key": key, "row": row_id, "output": output}, ensure_ascii=False) + "\n")
        if not lines:
            return
        data = "".join(lines).encode("utf-8")
        if self._handle is None:  # opened once for the run (sync() closes it), not once a batch
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._handle = self.path.open("a+b")
            # A previous kill may have left a partial line without newline: start on a fresh line.
            if self._handle.seek(0, os.SEEK_END) > 0:
                self._handle.seek(-1, os.SEEK_END)
                if self._handle.read(1) != b"\n":
                    data = b"\n" + data
        try:
            self._handle.write(data)  # append mode: at the end whatever the read position
            self._handle.flush()
        except BaseException:
            with contextlib.suppress(OSError):  # the write's own error is the one to report
                self.close()  # a write cut short may leave a partial line: the next add reopens and checks
            raise
        self._unsynced = True
        if time.monotonic() - self._last_sync >= self.sync_interval_s:
            self._fsync(self._handle)

    def sync(self) -> None:
        """fsync what was written since the last fsync and close the file (the end of a run; a later add reopens it)."""
        if self._unsynced:
            if self._handle is None:
                with self.path.open("ab") as handle:
                    self._fsync(handle)
            else:
                self._fsync(self._handle)
        self.close()

    def close(self) -> None:
        if self._handle is not None:
            handle, self._handle = self._handle, None
            handle.close()

    def _fsync(self, handle) -> None:
        os.fsync(handle.fileno())
        self._unsynced = False
        self._last_sync = time.monotonic()


class CachedGenerator:
    """One backend behind the prediction cache: answer from the cache, generate the misses, store them.

    The one place where model answers are looked up and stored, shared by the Common-O/perception runner and
    the association protocol. Misses go to the backend in OOM-tolerant batches (:func:`generate_resilient`,
    which halves ``state.batch_size`` on out-of-memory); failed requests come back as :class:`RequestFailure`
    and are not cached (a rerun retries them).
    """

    def __init__(
        self, backend: Backend, cache: PredictionCache, settings: GenerationSettings, run: str, batch_size: int
    ):
        self.backend = backend
        self.cache = cache
        self.settings = settings
        self.run = run
        self.state = BatchState(batch_size=max(1, batch_size))
        self.cached = 0
        self.generated = 0
        self.failures = 0

    def is_cached(self, request_id: str) -> bool:
        return row_key(self.run, request_id) in self.cache

    def cached_answer(self, request_id: str) -> str | None:
        """The stored answer to ``request_id`` (None if not answered yet), without building the request."""
        return self.cache.get(row_key(self.run, request_id))

    def answer(self, requests: list[GenerationRequest]) -> list[str | RequestFailure]:
        """One output per request, in order: cached ones without the model, the rest generated and stored."""
        keys = [row_key(self.run, r.id) for r in requests]
        answers: list[str | RequestFailure | None] = [self.cache.get(k) for k in keys]
        todo = [i for i, a in enumerate(answers) if a is None]
        self.cached += len(requests) - len(todo)
        if todo:
            outputs = generate_resilient(self.backend, [requests[i] for i in todo], self.settings, self.state)
            fresh = []
            for i, output in zip(todo, outputs):
                if isinstance(output, str):
                    output = valid_text(output)
                answers[i] = output
                if isinstance(output, RequestFailure):
                    self.failures += 1
                    continue
                fresh.append((keys[i], requests[i].id, output))
            self.generated += len(fresh)
            self.cache.add(fresh)
        return answers  # type: ignore[return-value]


def shard_suffix(shard: tuple[int, int] | None) -> str:
    """``".shard-K-of-N"`` for shard K of N (file names of a sharded run), ``""`` otherwise."""
    return f".shard-{shard[0]}-of-{shard[1]}" if shard else ""


def open_run_cache(
    out_dir: str | os.PathLike | None, run: str, shard: tuple[int, int] | None = None, *, overwrite: bool = False
) -> PredictionCache:
    """The cache of a run folder. Each shard writes its own file; every cache file in the folder is read, so
    a final unsharded run over the same folder finds the answers of all shards (and merges them).

    A folder holding another run's files is refused (see :func:`claim_run_folder`)."""
    if out_dir is not None:
        claim_run_folder(out_dir, run, overwrite=overwrite)

    if out_dir is None:
        return PredictionCache(
            constants.COMMONLINK_HOME / "predictions" / f"{run}{shard_suffix(shard)}.jsonl",
            also_read=sorted((constants.COMMONLINK_HOME / "predictions").glob(f"{run}*.jsonl")),
        )
    folder = Path(out_dir)
    stem = CACHE_FILENAME.removesuffix(".jsonl")
    return PredictionCache(
        folder / f"{stem}{shard_suffix(shard)}.jsonl", also_read=sorted(folder.glob(f"{stem}*.jsonl"))
    )


#: The files an eval run writes into its folder (``*`` = a shard suffix or nothing); --overwrite removes only these.
RUN_FILE_PATTERNS = (
    "results*.json",
    "results*.md",
    "predictions*.jsonl",
    "prediction-cache*.jsonl",
    "lmms_eval/results*.json",
    "lmms_eval/samples_*.jsonl",
)  # the same run in lmms-eval's layout (eval/results.py)


def other_runs(out_dir: str | os.PathLike, run: str) -> list[str]:
    """Files in ``out_dir`` written by a run other than ``run`` (its results, or its cache after a kill)."""
    folder = Path(out_dir)
    found = []
    for path in sorted(folder.glob("results*.json")):
        try:
            key = json.loads(path.read_text(encoding="utf-8")).get("run_key")
        except (OSError, ValueError, AttributeError):
            continue
        if key is not None and key != run:
            found.append(path.name)
    for path in sorted(folder.glob(f"{CACHE_FILENAME.removesuffix('.jsonl')}*.jsonl")):
        entry = _first_entry(path)
        if entry is not None and row_key(run, str(entry.get("row"))) != entry.get("key"):
            found.append(path.name)
    return found


def _first_entry(path: Path) -> dict | None:
    with path.open("r", encoding="utf-8", errors="replace") as handle:
        for line in handle:
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if isinstance(entry, dict) and "key" in entry:
                return entry
    return None


def claim_run_folder(out_dir: str | os.PathLike, run: str, *, overwrite: bool = False) -> None:
    """Refuse an ``out_dir`` holding another run's files (another model, data, prompt or settings): writing
    there would replace its results. With ``overwrite`` those files (and only the eval's own files) are removed."""
    folder = Path(out_dir)
    if not folder.is_dir():
        return
    others = other_runs(folder, run)
    if not others:
        return
    if not overwrite:
        raise InputError(
            f"--out {folder} holds the results of another run ({', '.join(others)}: another model, dataset, prompt or "
            "settings); this run would replace them.",
            "Pick another --out, rerun with that run's options to resume it, or pass --overwrite to replace it.",
        )
    for pattern in RUN_FILE_PATTERNS:
        for path in folder.glob(pattern):
            path.unlink()
