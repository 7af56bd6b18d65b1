"""A static HTML page of an eval run's predictions with their images: see what a model got wrong.

    >>> write_report(["eval-runs/commono-main-qwen-vllm", "eval-runs/commono-main-llava-vllm"], "report.html")

One page, no server: the metrics table and bar charts (accuracy and hallucination by object count and by
source, ± one bootstrap standard error), then one card per example, 25 to a page, with filters (wrong,
hallucinated, parse failures, real/synthetic, object count, models that disagree) and a seeded "random
mistakes" table laid out like the Common-O paper's appendix (Table 7). Several Common-O runs on the same split
are shown side by side: the same rows, one column per model. An association chain run gets one card per chain
with its steps up to the one that ended it (query, the two candidates, the model's pick, the memory text the
model was shown, the raw output) and the per-concept max | mean steps.

Thumbnails go in a folder beside the page (``report_files/`` for ``report.html``) or, with
``images="embed"``, into the page itself. The data is embedded as JSON and every card is built with DOM text
nodes, so no string from a dataset or a model (names, outputs, ids) is ever read as HTML.

Modules: :mod:`.page` (the page frame shared by every page), :mod:`.summary` (the metrics page of runs without
cards); the cards of a task are its ``report_page`` (declared in :mod:`commonlink.registry`, e.g.
``commonlink.kinds.common_o.report_page``); this one checks the options, picks the page and writes it.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from commonlink import registry
from commonlink.errors import CommonlinkError, InputError
from commonlink.eval.report.images import ThumbnailStore, thumbnail_cache_dir
from commonlink.eval.report.page import render_page, run_labels, runs_table
from commonlink.eval.report.summary import summary_page
from commonlink.eval.report.tables import load_results
from commonlink.fileio import atomic_write_text
from commonlink.images import check_thumb_size

REPORT_FILENAME = "report.html"


@dataclass
class ReportSummary:
    """What :func:`write_report` wrote."""

    path: Path
    kind: str  #: "common_o" or "association/<config>"
    runs: int
    cards: int  #: examples (Common-O) or tasks/chains (association) on the page
    images_written: int
    images_reused: int
    images_from_cache: int  #: of those reused, the ones taken from the shared thumbnail cache (not decoded)
    html_bytes: int
    image_bytes: int  #: thumbnails in the folder, or inside the page with images="embed"
    images_folder: Path | None
    seconds: float

    @property
    def total_bytes(self) -> int:
        """Everything a reader downloads: the page plus its thumbnail folder."""
        return self.html_bytes + (self.image_bytes if self.images_folder is not None else 0)


def images_folder_for(out: Path) -> Path:
    return out.with_name(out.stem + "_files")


def write_report(
    run_dirs: Sequence[str | Path],
    out: str | Path | None = None,
    *,
    data: str | None = None,
    revision: str | None = None,
    images: str = "folder",
    thumb_size: int = 224,
    seed: int = 0,
    chain_steps: int = 6,
    max_output_chars: int = 4000,
    dataset=None,
    progress: bool = False,
    catalog_root: str | Path | None = None,
    thumbnail_cache: bool = True,
) -> ReportSummary:
    """Write the report of one or more eval runs (folders or results.json files) to ``out``.

    ``out`` defaults to ``report.html`` inside the run folder when there is one run. Images come from the dataset
    the run recorded (``data``/``revision`` override it; ``dataset`` is an already opened split, as the
    evaluators pass). ``seed`` orders the random-mistakes table; ``chain_steps`` is how many steps of each chain
    are shown (those before the end; earlier steps are summarised); outputs longer than ``max_output_chars``
    are cut on the page (predictions.jsonl keeps them whole). ``catalog_root``: association runs on chain files,
    where their catalogs are now (``--catalog-root``).
    With ``thumbnail_cache``, thumbnails are kept in
    (and taken from) the shared cache (:func:`commonlink.eval.report.images.thumbnail_cache_dir`), so the next
    report on the same images decodes none of them.
    """
    start = time.perf_counter()
    check_thumb_size(thumb_size)
    if not run_dirs:
        raise InputError("No run folders given.", "e.g. commonlink eval report eval-runs/RUN (a folder an eval wrote)")
    runs = load_results(run_dirs)
    for run in runs:
        run["_dir"] = str(Path(run["_path"]).parent)
    if out is None:
        if len(runs) > 1:
            raise InputError(f"{len(runs)} runs given without --out.", "Name the page, e.g. --out compare.html.")
        out = Path(runs[0]["_dir"]) / REPORT_FILENAME
    out = Path(out)
    if out.suffix.lower() not in (".html", ".htm"):
        raise InputError(
            f"--out {out}: the report is an HTML page.",
            f"Give a file name ending in .html, e.g. {out.with_suffix('.html')}.",
        )
    if chain_steps < 1:
        raise InputError(f"--chain-steps {chain_steps} must be at least 1.")
    if max_output_chars < 100:
        raise InputError(
            f"--max-output-chars {max_output_chars} is too short to read an answer.", "Use at least 100 (default 4000)."
        )
    tasks = sorted({str(r.get("task")) for r in runs})
    if len(tasks) > 1:
        raise InputError(
            f"The runs are of different tasks ({', '.join(tasks)}); one page shows one task.",
            "Write one report per task.",
        )
    task = tasks[0]
    thumbs = ThumbnailStore(
        images, images_folder_for(out), size=thumb_size, cache=thumbnail_cache_dir() if thumbnail_cache else None
    )
    options = {
        "data": data,
        "revision": revision,
        "seed": seed,
        "max_output_chars": max_output_chars,
        "dataset": dataset,
        "progress": progress,
    }
    info = registry.task_for_results(task)
    if info is None:
        raise InputError(
            f"{runs[0]['_path']}: task {task!r} has no report page.",
            f"Reports cover runs of the registered tasks ({', '.join(registry.task_names())}) written by "
            "`commonlink eval`.",
        )
    if info.report_page is not None and (not info.report_page_runs or len(runs) <= info.report_page_runs):
        page, cards = info.report_page(runs, thumbs, chain_steps=chain_steps, catalog_root=catalog_root, **options)
    else:  # metrics of each run by name, no cards
        page, cards = summary_page(runs, runs_table(runs, run_labels(runs)))
    html = render_page(page)
    atomic_write_text(out, html)
    thumbs.prune()
    return ReportSummary(
        path=out,
        kind=task,
        runs=len(runs),
        cards=cards,
        images_written=thumbs.written,
        images_reused=thumbs.reused,
        images_from_cache=thumbs.from_cache,
        html_bytes=out.stat().st_size,  # the page as written (encoding it again would copy it)
        image_bytes=thumbs.bytes,
        images_folder=thumbs.folder if images == "folder" else None,
        seconds=time.perf_counter() - start,
    )


def report_beside_run(run_dir: str | Path, *, dataset=None) -> Path | None:
    """The evaluators' hook: write ``run_dir/report.html``. A report that cannot be made (e.g. the images can no
    longer be read) must not fail a finished eval, whose results are already written: it is a warning instead."""
    try:
        return write_report([run_dir], dataset=dataset).path
    except (CommonlinkError, OSError) as exc:
        problem = getattr(exc, "problem", str(exc))
        warnings.warn(
            f"The HTML report of {run_dir} was not written: {problem} "
            f"Write it later with `commonlink eval report {run_dir}`.",
            stacklevel=2,
        )
        return None


__all__ = ["REPORT_FILENAME", "ReportSummary", "report_beside_run", "write_report"]
