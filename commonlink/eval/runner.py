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
    """Answer every request of the rows ``indices`` through the cache (:class:`CachedGenerator`), score each
    answer with ``finish`` and return the records in row order, with skipped rows and counts. With
    ``max_row_errors``, a row that cannot be read beyond that many stops the run with a :class:`SchemaError` (so
    a split the loader cannot read never ends as a score over a handful of rows, or over none)."""
    start = time.perf_counter()
    outcome = RunOutcome()
    generator = CachedGenerator(backend, cache, settings, run, batch_size)
    done: list[tuple[int, int, dict]] = []  # (row, position within row, record) - sorted at the end
    pending: list[tuple[int, int, GenerationRequest, dict]] = []  # (row, pos, request, meta)

    def flush(progress, task) -> None:
        if not pending:
            return
        outputs = generator.answer([p[2] for p in pending])
        for (row, pos, request, meta), output in zip(pending, outputs):
            if isinstance(output, RequestFailure):
                outcome.skipped.append({"row": row, "id": request.id, "reason": output.reason})
                log.warning("row %d (%s) skipped: %s", row, request.id, output.reason)
                continue
            done.append((row, pos, finish(meta, output)))
        progress.advance(task, len({p[0] for p in pending}))
        pending.clear()

    rows_read = 0
    uncached = 0  # requests waiting in `pending` that the model must answer (cached ones ride along)
    cap = settings.max_pixels if backend.info.uses_images else 0
    rows = prepared_rows(split, indices, build, max_pixels=cap, depth=2 * generator.state.batch_size + 2,
                         # An empty cache (a fresh run) has nothing to skip: don't read rows twice.
                         is_cached=generator.is_cached if len(cache) else None)
    with make_progress("rows", disable=not show_progress) as progress, contextlib.closing(rows):
        task = progress.add_task(description, total=total)
        for i, items, exc in rows:
            rows_read += 1
            if exc is not None:
                reason = getattr(exc, "problem", None) or f"{type(exc).__name__}: {exc}"
                outcome.skipped.append({"row": i, "id": None, "reason": reason})
                log.warning("row %d skipped: %s", i, reason)
                progress.advance(task)
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
            pending.extend((i, pos, request, meta) for pos, (request, meta) in enumerate(items))
            uncached += sum(not generator.is_cached(request.id) for request, _ in items)
            if uncached >= generator.state.batch_size or not uncached:
                flush(progress, task)  # a batch of model calls is full, or everything waiting is answered already
                uncached = 0
        flush(progress, task)
    done.sort(key=lambda item: (item[0], item[1]))
    outcome.records = [record for _, _, record in done]
    outcome.skipped.sort(key=lambda s: s["row"])
    outcome.wall_s = time.perf_counter() - start
    outcome.cached, outcome.generated = generator.cached, generator.generated
    outcome.oom_events = generator.state.oom_events
    outcome.final_batch_size = generator.state.batch_size
    return outcome


@contextlib.contextmanager
def open_backends(instances: Sequence[Backend] | None, backend: str, models: Sequence[str], options: dict | None, *, images_per_request: int):
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
