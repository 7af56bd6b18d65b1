"""Per-row work of a release build spread over worker processes, results in input order.

Reading, hashing and decoding each image to verify it is most of a build's CPU time, and every row's checks
stand alone; what must stay in one process (the shard writer, statistics, id uniqueness) runs in the caller on
results that come back in input order, so the release is byte-identical whatever the number of workers.
Items go out in chunks with a bounded number in flight, so memory stays flat however long the input.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import sys
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from itertools import chain
from typing import Any, TypeVar

from commonlink.errors import InputError, check_at_least

T = TypeVar("T")
R = TypeVar("R")

#: Items a worker handles per task: large enough that sending a task costs little next to its work, small enough
#: that a few chunks of images in flight stay a few MB.
CHUNK_ITEMS = 32
#: Chunks in flight per worker: one being worked on, one queued so the worker never waits for the caller.
CHUNKS_PER_WORKER = 2

#: How workers start. "fork" on Linux: at once, with the modules already imported, and without importing the
#: caller's main script again ("spawn" and "forkserver" do, so a script calling ``build_release`` without an
#: ``if __name__ == "__main__":`` guard would run again in every worker). A worker touches only files, hashlib and
#: Pillow, none of the threads the caller may run (progress bars, pyarrow's pool). Elsewhere: "spawn".
_START_METHOD = "fork" if sys.platform.startswith("linux") else "spawn"

_STATE: dict[str, Any] = {}


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask, e.g. a container's or ``taskset``'s), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # platforms without affinity masks
        return max(1, os.cpu_count() or 1)


def check_workers(workers: int | None) -> int:
    """``workers`` checked (None: every usable CPU), as ``--workers`` is checked on the command line."""
    if workers is None:
        return usable_cpus()
    if isinstance(workers, bool) or not isinstance(workers, int):
        raise InputError(f"--workers {workers!r} must be a whole number.", "e.g. --workers 4.")
    check_at_least("--workers", workers, 1, "Pass --workers 1 or more (default: the usable CPUs).")
    return workers


def _init_worker(setup: Callable[[], Any]) -> None:
    _STATE["state"] = setup()


def _run_chunk(func: Callable[[Any, Any], Any], chunk: list) -> tuple[list, BaseException | None]:
    """``func(state, item)`` for each item of ``chunk`` up to the first that raises: the results before it and its
    error, so the caller raises it only after using the rows before it (as a one-process build would)."""
    results = []
    for item in chunk:
        try:
            results.append(func(_STATE["state"], item))
        except Exception as exc:  # noqa: BLE001 - handed back, raised in the caller
            return results, exc
    return results, None


def ordered_map(
    func: Callable[[Any, T], R],
    items: Iterable[T],
    *,
    setup: Callable[[], Any],
    workers: int = 1,
    chunk_items: int | None = None,
) -> Iterator[tuple[T, R]]:
    """``(item, func(state, item))`` for every item, in input order; ``state = setup()`` once per process (caches such
    as a catalog's records). With ``workers > 1`` the items are worked on in that many processes (``func`` and
    ``setup``: module-level functions or classes; items and results picklable); an input that fits in one chunk
    is worked on here, as is everything with one worker. The first error in input order is raised, after the
    results before it have been yielded. Close it (``contextlib.closing``) to stop its processes early."""
    chunk_items = chunk_items or CHUNK_ITEMS
    chunks = _chunks(iter(items), chunk_items)
    first, first_error = next(chunks, ([], None))
    if workers > 1 and first_error is None and len(first) == chunk_items:
        yield from _pooled(func, first, chunks, setup=setup, workers=workers)
        return
    state = setup()
    for chunk, error in chain([(first, first_error)], chunks):
        for item in chunk:
            yield item, func(state, item)
        if error is not None:
            raise error


def _chunks(items: Iterator[T], size: int) -> Iterator[tuple[list[T], Exception | None]]:
    """``(chunk, None)`` of ``size`` items at a time; the last one carries the error reading the input raised (the
    items read before it are still worked on first: errors are raised in input order)."""
    chunk: list[T] = []
    try:
        for item in items:
            chunk.append(item)
            if len(chunk) == size:
                yield chunk, None
                chunk = []
    except Exception as exc:  # noqa: BLE001 - raised by the caller once the items before it are done
        yield chunk, exc
        return
    if chunk:
        yield chunk, None


def _pooled(func, first: list, chunks: Iterator[tuple[list, Exception | None]], *, setup, workers: int) -> Iterator:
    context = multiprocessing.get_context(_START_METHOD)
    pool = ProcessPoolExecutor(workers, mp_context=context, initializer=_init_worker, initargs=(setup,))
    pending: deque[tuple[list, Future]] = deque()  # the chunks in flight (kept here: results pair with them)
    try:
        # the workers start (fork) at the first task: with the caller's objects frozen out of the garbage
        # collector, a worker's collections do not touch (and so copy) every page the caller holds
        gc.freeze()
        try:
            pending.append((first, pool.submit(_run_chunk, func, first)))
        finally:
            gc.unfreeze()
        for chunk, error in chunks:
            if chunk:
                pending.append((chunk, pool.submit(_run_chunk, func, chunk)))
            if error is not None:
                while pending:
                    yield from _results(*pending.popleft(), workers)
                raise error
            if len(pending) >= workers * CHUNKS_PER_WORKER:
                yield from _results(*pending.popleft(), workers)
        while pending:
            yield from _results(*pending.popleft(), workers)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _results(chunk: list, future: Future, workers: int) -> Iterator[tuple]:
    try:
        results, error = future.result()
    except BrokenProcessPool:
        raise InputError(
            "A worker process of the release build died (killed by a signal; the system's out-of-memory killer "
            "does this when memory runs out).",
            f"Rerun with fewer workers (--workers {max(1, workers // 2)}) or free some memory; finished releases "
            "in other folders are not touched and nothing half-written was left in --out.",
        ) from None
    yield from zip(chunk, results)
    if error is not None:
        raise error


__all__ = ["CHUNK_ITEMS", "check_workers", "ordered_map", "usable_cpus"]
