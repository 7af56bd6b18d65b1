"""The row loop of the eval tasks: a backend over the rows of a split, with batching, the prediction cache,
bad-row skipping and progress (what :meth:`commonlink.eval.task.Task.run` does unless a task drives its own loop).

A task gives two functions: ``build(example) -> [(request, meta), ...]`` (the model calls one row needs) and
``finish(meta, output) -> record`` (parse and score one output). The runner keeps at most one batch of images
in memory, reads rows without their pixels for a backend that does not use images, answers cached requests
without the model, appends new outputs to the cache after every batch (fsynced every few seconds; the
evaluator fsyncs the rest at the end of the run), and turns undecodable or malformed rows and failed requests
into ``skipped`` entries (row, reason) instead of stopping the run.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from commonlink.errors import CommonlinkError, SchemaError
from commonlink.eval.backends import IMAGES_PER_REQUEST, LazyBackend
from commonlink.eval.backends.base import (
    Backend,
    GenerationRequest,
    GenerationSettings,
    RequestFailure,
)
from commonlink.eval.cache import CachedGenerator, PredictionCache
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
    split,
    indices: Iterable[int],
    build: Build,
    *,
    max_pixels: int = 0,
    depth: int = 4,
    is_cached: Callable[[str], bool] | None = None,
    images: bool = True,
    refill: int = 1,
) -> Iterator[tuple[int, list | None, Exception | None]]:
    """``(row, items, None)`` or ``(row, None, error)`` for each row, in order, prepared by a worker thread.

    Decoding images (and capping them to ``max_pixels``) happens up to ``depth`` rows ahead of the model, so
    it overlaps generation instead of adding to it; the bounded buffer keeps memory flat. Once the buffer is
    full, the worker sleeps until ``refill`` rows were taken and then prepares that many in one go: woken once
    a batch instead of once a row, it takes the interpreter lock from the run's own work that much less often.
    With ``is_cached``
    (request id -> answered already?), a row whose every request is cached is built without decoding its
    images, so a resumed run skips the pixels of what it already answered. With ``images=False`` (a backend
    that does not look at pixels: the baselines) no row's images are decoded at all. The worker is stopped
    and joined when the consumer stops early (an interrupt, an error).
    """
    depth = max(1, depth)
    refill = min(max(1, refill), depth)
    ready: collections.deque = collections.deque()
    changed = threading.Condition()
    stop = threading.Event()
    end = object()

    def prepare(i: int) -> list:
        if not images:
            return build(_without_images(split, i))
        if is_cached is not None:
            items = build(_without_images(split, i))
            if all(is_cached(request.id) for request, _ in items):
                return items
        items = build(split.get(i))
        return [(_capped(request, max_pixels), meta) for request, meta in items] if max_pixels else items

    def put(item) -> None:
        with changed:
            ready.append(item)
            changed.notify_all()
            if len(ready) >= depth:  # full: sleep until `refill` rows were taken (or the run stops)
                while len(ready) > depth - refill and not stop.is_set():
                    changed.wait()

    def work() -> None:
        try:
            for i in indices:
                if stop.is_set():
                    return
                try:
                    put((i, prepare(i), None))
                except ROW_ERRORS as exc:
                    put((i, None, exc))
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer thread, raised there
            put((None, None, exc))
        finally:
            with changed:
                ready.append(end)
                changed.notify_all()

    worker = threading.Thread(target=work, name="commonlink-eval-prefetch", daemon=True)
    worker.start()
    try:
        while True:
            with changed:
                while not ready:
                    changed.wait()
                item = ready.popleft()
                if len(ready) == depth - refill:
                    changed.notify_all()
            if item is end:
                break
            if item[0] is None:
                raise item[2]
            yield item
    finally:
        stop.set()
        with changed:
            changed.notify_all()  # a worker sleeping on a full buffer sees `stop`
        worker.join()


def _capped(request: GenerationRequest, max_pixels: int) -> GenerationRequest:
    return GenerationRequest(
        request.id,
        [cap_pixels(img, max_pixels) for img in request.images],
        request.prompt,
        request.choices,
        request.multi_select,
    )


class _Batches:
    """The requests waiting for the model, across rows: sent when a batch of uncached requests is full (cached
    ones ride along), each answer scored with ``finish``; records kept with (row, position) to sort at the end."""

    def __init__(self, generator: CachedGenerator, finish: Finish, outcome: RunOutcome):
        self.generator, self.finish, self.outcome = generator, finish, outcome
        self.pending: list[tuple[int, int, GenerationRequest, dict]] = []  # (row, pos, request, meta)
        self.done: list[tuple[int, int, dict]] = []
        self.uncached = 0  # requests in `pending` the model must answer

    def add(self, row: int, items: list) -> int:
        """Queue a row's requests; returns the rows answered (a flush happens when a batch is full or nothing
        waiting needs the model)."""
        self.pending.extend((row, pos, request, meta) for pos, (request, meta) in enumerate(items))
        self.uncached += sum(not self.generator.is_cached(request.id) for request, _ in items)
        if self.uncached >= self.generator.state.batch_size or not self.uncached:
            return self.flush()
        return 0

    def flush(self) -> int:
        """Answer everything pending; returns the number of rows it covered."""
        if not self.pending:
            return 0
        outputs = self.generator.answer([p[2] for p in self.pending])
        for (row, pos, request, meta), output in zip(self.pending, outputs):
            if isinstance(output, RequestFailure):
                self.outcome.skipped.append({"row": row, "id": request.id, "reason": output.reason})
                log.warning("row %d (%s) skipped: %s", row, request.id, output.reason)
                continue
            self.done.append((row, pos, self.finish(meta, output)))
        rows = len({p[0] for p in self.pending})
        self.pending.clear()
        self.uncached = 0
        return rows


def _skip_unreadable(
    outcome: RunOutcome, row: int, exc: Exception, *, rows_read: int, total: int | None, max_row_errors: int | None
) -> None:
    """Record an unreadable row; stop the run when the first rows all fail (the dataset is wrong) or when more
    than ``max_row_errors`` rows cannot be read."""
    reason = getattr(exc, "problem", None) or f"{type(exc).__name__}: {exc}"
    outcome.skipped.append({"row": row, "id": None, "reason": reason})
    log.warning("row %d skipped: %s", row, reason)
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
            f"(more than the {max_row_errors} allowed; stopped at row {row}), so no score is reported. First: "
            f"{examples}",
            "Fix or drop those rows (the reasons name row, field and value), "
            "or allow more with --max-unreadable-share.",
        ) from exc


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
    progress: bool = True,
    max_row_errors: int | None = None,
) -> RunOutcome:
    """Answer every request of the rows ``indices`` through the cache (:class:`CachedGenerator`), score each
    answer with ``finish`` and return the records in row order, with skipped rows and counts. With
    ``max_row_errors``, a row that cannot be read beyond that many stops the run with a :class:`SchemaError` (so
    a split the loader cannot read never ends as a score over a handful of rows, or over none). A backend that
    does not use images (``BackendInfo.uses_images``, the baselines) gets rows read without their pixels."""
    start = time.perf_counter()
    outcome = RunOutcome()
    generator = CachedGenerator(backend, cache, settings, run, batch_size)
    batches = _Batches(generator, finish, outcome)
    images = backend.info.uses_images
    rows = prepared_rows(
        split,
        indices,
        build,
        max_pixels=settings.max_pixels if images else 0,
        depth=2 * generator.state.batch_size + 2,
        images=images,
        refill=generator.state.batch_size,
        # An empty cache (a fresh run) has nothing to skip: don't read rows twice.
        is_cached=generator.is_cached if len(cache) else None,
    )
    rows_read = 0
    with make_progress("rows", disable=not progress) as bars, contextlib.closing(rows):
        task = bars.add_task(description, total=total)
        for i, items, exc in rows:
            rows_read += 1
            if exc is not None:
                bars.advance(task)
                _skip_unreadable(outcome, i, exc, rows_read=rows_read, total=total, max_row_errors=max_row_errors)
                continue
            bars.advance(task, batches.add(i, items))
        bars.advance(task, batches.flush())
    batches.done.sort(key=lambda item: (item[0], item[1]))
    outcome.records = [record for _, _, record in batches.done]
    outcome.skipped.sort(key=lambda s: s["row"])
    outcome.wall_s = time.perf_counter() - start
    outcome.cached, outcome.generated = generator.cached, generator.generated
    outcome.oom_events = generator.state.oom_events
    outcome.final_batch_size = generator.state.batch_size
    return outcome


@contextlib.contextmanager
def open_backends(
    instances: Sequence[Backend] | None,
    backend: str,
    models: Sequence[str],
    options: dict | None,
    *,
    images_per_request: int,
):
    """The backends of a run: ``instances`` as given (the caller closes them), or one :class:`LazyBackend` per
    model, told the task's image count (vLLM's ``limit_mm_per_prompt``) and closed at the end."""
    if instances is not None:
        yield list(instances)
        return
    backends = [LazyBackend(backend, m, **{IMAGES_PER_REQUEST: images_per_request, **(options or {})}) for m in models]
    try:
        yield backends
    finally:
        for b in backends:
            b.close()
