"""Drive a backend over the rows of a split: batching, prediction cache, bad-row skipping, progress.

Protocols give two functions: ``build(example) -> [(request, meta), ...]`` (the model calls one row needs)
and ``finish(meta, output) -> record`` (parse and score one output). The runner keeps at most one batch of
images in memory, answers cached requests without the model, appends new outputs to the cache after every
batch, and turns undecodable or malformed rows and failed requests into ``skipped`` entries (row, reason)
instead of stopping the run.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from commonlink.errors import CommonlinkError, SchemaError
from commonlink.eval.backends.base import (
    Backend,
    BatchState,
    GenerationRequest,
    GenerationSettings,
    RequestFailure,
    generate_resilient,
)
from commonlink.eval.cache import PredictionCache, row_key
from commonlink.eval.imaging import cap_pixels
from commonlink.progress import make_progress

log = logging.getLogger(__name__)

#: When this many rows in a row fail from the start, the dataset itself is wrong: stop instead of skipping all.
SYSTEMIC_FAILURES = 20

Build = Callable[[object], list[tuple[GenerationRequest, dict]]]
Finish = Callable[[dict, str], dict]


@dataclass
class RunOutcome:
    records: list[dict] = field(default_factory=list)  #: one per answered request, in row order
    skipped: list[dict] = field(default_factory=list)  #: {"row", "id", "reason"}
    cached: int = 0
    generated: int = 0
    wall_s: float = 0.0
    oom_events: int = 0
    final_batch_size: int = 1


#: Errors that make one row unusable (reported and skipped); anything else stops the run.
ROW_ERRORS = (CommonlinkError, ValueError, OSError, KeyError, TypeError)


def _without_images(split, i: int):
    """Row ``i`` without decoded images when the split can do that (text fields only), else the full row."""
    try:
        return split.get(i, images=False)
    except TypeError:  # a split whose get() has no images option
        return split.get(i)


def prepared_rows(
    split, indices: Iterable[int], build: Build, *, max_pixels: int = 0, depth: int = 4, is_cached: Callable[[str], bool] | None = None
) -> Iterator[tuple[int, list | None, Exception | None]]:
    """``(row, items, None)`` or ``(row, None, error)`` for each row, in order, prepared by a worker thread.

    Decoding images (and capping them to ``max_pixels``) happens up to ``depth`` rows ahead of the model, so
    it overlaps generation instead of adding to it; the bounded queue keeps memory flat. With ``is_cached``
    (request id -> answered already?), a row whose every request is cached is built without decoding its
    images, so a resumed run skips the pixels of what it already answered. The worker is stopped and joined
    when the consumer stops early (an interrupt, an error).
    """
    results: queue.Queue = queue.Queue(maxsize=max(1, depth))
    stop = threading.Event()
    end = object()

    def work() -> None:
        try:
            for i in indices:
                if stop.is_set():
                    return
                try:
                    if is_cached is not None:
                        items = build(_without_images(split, i))
                        if all(is_cached(request.id) for request, _ in items):
                            results.put((i, items, None))
                            continue
                    items = build(split.get(i))
                    if max_pixels:
                        items = [(_capped(request, max_pixels), meta) for request, meta in items]
                    results.put((i, items, None))
                except ROW_ERRORS as exc:
                    results.put((i, None, exc))
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer thread, raised there
            results.put((None, None, exc))
        finally:
            results.put(end)

    worker = threading.Thread(target=work, name="commonlink-eval-prefetch", daemon=True)
    worker.start()
    try:
        while (item := results.get()) is not end:
            if item[0] is None:
                raise item[2]
            yield item
    finally:
        stop.set()
        while worker.is_alive():  # unblock a worker waiting on a full queue so it can see `stop`
            try:
                results.get(timeout=0.05)
            except queue.Empty:
                pass
        worker.join()


def _capped(request: GenerationRequest, max_pixels: int) -> GenerationRequest:
    return GenerationRequest(request.id, [cap_pixels(img, max_pixels) for img in request.images], request.prompt, request.choices, request.multi_select)


def run_over_split(
    split,
    indices: Iterable[int],
    *,
    build: Build,
    finish: Finish,
    backend: Backend,
    settings: GenerationSettings,
    cache: PredictionCache,
    run: str,
    batch_size: int,
    total: int | None = None,
    description: str = "eval",
    show_progress: bool = True,
    max_row_errors: int | None = None,
) -> RunOutcome:
    """Run ``backend`` over the rows ``indices`` of ``split`` (see the module doc). With ``max_row_errors``, a
    row that cannot be read beyond that many stops the run with a :class:`SchemaError` (so a split the loader
    cannot read never ends as a score over a handful of rows, or over none)."""
    start = time.perf_counter()
    outcome = RunOutcome()
    state = BatchState(batch_size=max(1, batch_size))
    done: list[tuple[int, int, dict]] = []  # (row, position within row, record) - sorted at the end
    pending: list[tuple[int, int, str, GenerationRequest, dict]] = []  # (row, pos, key, request, meta)

    def flush(progress, task) -> None:
        if not pending:
            return
        outputs = generate_resilient(backend, [p[3] for p in pending], settings, state)
        fresh = []
        for (row, pos, key, request, meta), output in zip(pending, outputs):
            if isinstance(output, RequestFailure):
                outcome.skipped.append({"row": row, "id": request.id, "reason": output.reason})
                log.warning("row %d (%s) skipped: %s", row, request.id, output.reason)
                continue
            fresh.append((key, request.id, output))
            done.append((row, pos, finish(meta, output)))
            outcome.generated += 1
        cache.add(fresh)
        finished_rows = {p[0] for p in pending}
        pending.clear()
        progress.advance(task, len(finished_rows))

    rows_read = 0
    cap = settings.max_pixels if backend.info.uses_images else 0
    rows = prepared_rows(split, indices, build, max_pixels=cap, depth=2 * state.batch_size + 2,
                         # An empty cache (a fresh run) has nothing to skip: don't read rows twice.
                         is_cached=(lambda request_id: row_key(run, request_id) in cache) if len(cache) else None)
    with make_progress("rows", disable=not show_progress) as progress, contextlib.closing(rows):
        task = progress.add_task(description, total=total)
        for i, items, exc in rows:
            if exc is not None:
                reason = getattr(exc, "problem", None) or f"{type(exc).__name__}: {exc}"
                outcome.skipped.append({"row": i, "id": None, "reason": reason})
                log.warning("row %d skipped: %s", i, reason)
                progress.advance(task)
                rows_read += 1
                if rows_read == len(outcome.skipped) == SYSTEMIC_FAILURES:
                    raise SchemaError(
                        f"The first {SYSTEMIC_FAILURES} rows all failed; the first: {outcome.skipped[0]['reason']}",
                        "This is a problem with the dataset as a whole (wrong schema or source), not with single rows.",
                    ) from exc
                unreadable = [s for s in outcome.skipped if s["id"] is None]
                if max_row_errors is not None and len(unreadable) > max_row_errors:
                    examples = "; ".join(f"row {s['row']}: {s['reason']}" for s in unreadable[:3])
                    raise SchemaError(
                        f"{len(unreadable)} of the {total if total is not None else rows_read} rows requested cannot be read "
                        f"(more than the {max_row_errors} allowed; stopped at row {i}), so no score is reported. First: {examples}",
                        "Fix or drop those rows (the reasons name row, field and value), or allow more with --max-unreadable-share.",
                    ) from exc
                continue
            rows_read += 1
            uncached = 0
            for pos, (request, meta) in enumerate(items):
                key = row_key(run, request.id)
                hit = cache.get(key)
                if hit is not None:
                    done.append((i, pos, finish(meta, hit)))
                    outcome.cached += 1
                else:
                    pending.append((i, pos, key, request, meta))
                    uncached += 1
            if not uncached:
                progress.advance(task)
            if len(pending) >= state.batch_size:
                flush(progress, task)
        flush(progress, task)
    done.sort(key=lambda item: (item[0], item[1]))
    outcome.records = [record for _, _, record in done]
    outcome.skipped.sort(key=lambda s: s["row"])
    outcome.wall_s = time.perf_counter() - start
    outcome.oom_events = state.oom_events
    outcome.final_batch_size = state.batch_size
    return outcome
