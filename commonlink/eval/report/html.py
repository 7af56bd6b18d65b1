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
"""

from __future__ import annotations

import base64
import hashlib
import json
import time
import warnings
from collections import Counter, defaultdict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from html import escape
from importlib import resources
from pathlib import Path

from commonlink import __version__
from commonlink.constants import NO_COMMON_OBJECTS
from commonlink.errors import CommonlinkError, InputError
from commonlink.eval.association_memory import MemoryBase
from commonlink.eval.report.charts import Series, bar_chart, legend
from commonlink.eval.report.images import ImageJob, ThumbnailStore, bytes_key, text_key, thumbnail_cache_dir
from commonlink.eval.report.summary import association_metrics_html, cell, sort_keys, summary_page
from commonlink.eval.report.tables import load_results
from commonlink.eval.run_names import run_name
from commonlink.fileio import atomic_write_text, read_jsonl_numbered
from commonlink.loaders.association import open_association
from commonlink.loaders.common_o import open_common_o
from commonlink.progress import make_progress
from commonlink.seeding import rng_for

REPORT_FILENAME = "report.html"
PAGE_SIZE = 25
CHUNK_ROWS = 256  #: rows whose images are read and thumbnailed together (bounds memory)
_COMMON_O_FIELDS = (
    "id",
    "row_index",
    "choices",
    "ground_truth_letters",
    "raw_output",
    "parsed_letters",
    "parse_ok",
    "correct",
    "hallucinated_objects",
)
_CHAIN_CONFIGS = ("synchronous", "asynchronous")
_BREAKDOWNS = (("by_num_objects", "objects per image"), ("by_source", "source"), ("by_num_common", "common objects"))


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
    show_progress: bool = False,
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
    if not run_dirs:
        raise InputError("No run folders given.", "e.g. commonlink eval report eval-runs/commono-main-random")
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
        "show_progress": show_progress,
    }
    if task == "common_o":
        page, cards = _common_o_page(runs, thumbs, **options)
    elif task.startswith("association/") and len(runs) == 1:
        page, cards = _association_page(runs[0], thumbs, chain_steps=chain_steps, catalog_root=catalog_root, **options)
    elif task.startswith("association/") or task in (
        "perception",
        "concept_perception",
    ):  # metrics of each run by name, no cards
        page, cards = summary_page(runs, _runs_table(runs, _run_labels(runs)))
    else:
        raise InputError(
            f"{runs[0]['_path']}: task {task!r} has no report page.",
            "Reports cover common_o, perception, association/* and concept_perception runs written by `commonlink eval`.",
        )
    html = _page(page)
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
        html_bytes=len(html.encode("utf-8")),
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


# ------------------------------------------------------------------------------------------------ page frame
def _asset(name: str) -> str:
    return resources.files("commonlink.eval.report").joinpath("assets", name).read_text(encoding="utf-8")


def _json_for_script(obj) -> str:
    """JSON that cannot end the <script> element it sits in, nor open a comment or CDATA section."""
    text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    return (
        text.replace("&", "\\u0026")
        .replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def _page(page: dict) -> str:
    script = _asset("report.js")
    # Only the page's own script may run: it is allowed by its hash, so neither an inline handler nor a script
    # element that reached the page some other way runs (a data block of type application/json is not run).
    script_hash = base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode("ascii")
    return "".join(
        [
            '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            # Offline page: nothing may be fetched from elsewhere, and no inline handler may run (defence in depth).
            (
                "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; img-src 'self' data: file:; "
                f"style-src 'unsafe-inline'; script-src 'sha256-{script_hash}'\">"
            ),
            f"<title>{escape(page['title'])}</title><style>{_asset('report.css')}</style></head><body>",
            f'<header><h1>{escape(page["title"])}</h1><p class="sub">{page["subtitle"]}</p></header>',
            '<nav class="toc"><a href="#metrics">Metrics</a><a href="#examples">Examples</a><a href="#runs">Runs</a></nav>',
            f'<section id="metrics"><h2>Metrics</h2>{page["metrics"]}</section>',
            '<section id="examples"><h2>Examples</h2><div id="controls"></div><div id="status" aria-live="polite"></div>',
            '<div id="mistakes" hidden></div><div id="cards"></div><div id="pager"></div>',
            "<noscript>The example cards need JavaScript; the metrics above do not.</noscript></section>",
            f'<section id="runs"><h2>Runs</h2>{page["runs"]}</section>',
            f"<footer>commonlink {escape(__version__)} · static page, works offline · {escape(page['footer'])}</footer>",
            f'<script type="application/json" id="report-data">{_json_for_script(page["data"])}</script>',
            f"<script>{script}</script></body></html>\n",
        ]
    )


def _run_labels(runs: list[dict]) -> list[str]:
    names = [run_name(r) for r in runs]
    counts = Counter(names)
    return [f"{n} ({Path(r['_dir']).name})" if counts[n] > 1 else n for n, r in zip(names, runs)]


def _runs_table(runs: list[dict], labels: list[str]) -> str:
    head = "<tr><th>Run</th><th>Backend</th><th>Created</th><th>Generation</th><th>Seed</th><th>Toolkit</th><th>Folder</th></tr>"
    rows = []
    for run, label in zip(runs, labels):
        gen = run.get("generation") or {}
        gen_text = ", ".join(
            f"{k}={gen[k]}" for k in ("temperature", "top_p", "max_new_tokens", "max_pixels") if k in gen
        )
        rows.append(
            "<tr>"
            + "".join(
                f"<td>{escape(str(v))}</td>"
                for v in (
                    label,
                    run.get("backend", "?"),
                    run.get("created", "?"),
                    gen_text,
                    run.get("seed", "?"),
                    run.get("toolkit_version", "?"),
                    run["_dir"],
                )
            )
            + "</tr>"
        )
    return f'<table class="runs">{head}{"".join(rows)}</table>'


def _truncate(text, limit: int):
    if not isinstance(text, str) or len(text) <= limit:
        return text, None
    return text[:limit], len(text)


def _read_records(path: Path, needed: Sequence[str], what: str) -> list[dict]:
    if not path.is_file():
        raise InputError(
            f"{path}: not found; the report needs the run's {path.name}.",
            f"Give a folder written by `commonlink eval {what}` (a sharded run: merge it first by rerunning without --shard).",
        )
    records = []
    for lineno, record in read_jsonl_numbered(
        path, fix=f"Rewrite the file with `commonlink eval {what}` (or `eval score --out`)."
    ):
        missing = [k for k in needed if k not in record]
        if missing:
            raise InputError(
                f"{path}, line {lineno}: lacks {', '.join(missing)}.",
                f"Give a {path.name} written by `commonlink eval {what}` of this toolkit version.",
            )
        records.append(record)
    return records


# ------------------------------------------------------------------------------------------------ Common-O
def _pct(group: dict, name: str) -> str:
    value = group.get(name)
    if value is None:
        return "–"
    se = group.get(f"{name}_se")
    return cell(value, ".1f", 100) + (f'<span class="se"> ± {cell(se, ".1f", 100)}</span>' if se is not None else "")


def _metrics_table(runs: list[dict], labels: list[str]) -> str:
    head = (
        "<tr><th>Model</th><th>n</th><th>Accuracy %</th><th>Halluc. rate %</th><th>1+ halluc. %</th><th>2+ halluc. %</th>"
        "<th>Parse fail. %</th></tr>"
    )
    rows = []
    for run, label in zip(runs, labels):
        g = run.get("metrics", {}).get("overall", {})
        pf = g.get("parse_failure_rate")
        cells = [
            escape(label),
            cell(g.get("n", 0)),
            _pct(g, "accuracy"),
            _pct(g, "hallucination_rate"),
            _pct(g, "hallucination_1plus"),
            _pct(g, "hallucination_2plus"),
            "–" if pf is None else cell(pf, ".1f", 100),
        ]
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return f'<table class="metrics">{head}{"".join(rows)}</table>'


def _group_chart(runs: list[dict], labels: list[str], key: str, x_label: str, stat: str, title: str) -> str:
    groups = [r.get("metrics", {}).get(key) or {} for r in runs]
    categories = sort_keys({k for g in groups for k in g})
    if not categories:
        return ""
    series = [
        Series(
            label, [g.get(c, {}).get(stat) for c in categories], [g.get(c, {}).get(f"{stat}_se") for c in categories]
        )
        for label, g in zip(labels, groups)
    ]
    return bar_chart(f"{title} by {x_label}", categories, series, x_label=x_label, width=400)


def _common_o_images(run: dict, *, data, revision, dataset):
    """The split the run's rows come from, for their images.

    The rows are matched to the predictions one by one (id, choices and ground truth, see
    :func:`_common_o_row_images`) rather than by the data fingerprint: hashing a multi-GB release again would
    double the report's reading time, and the row check catches data that changed under the run just as well.
    """
    if dataset is not None:
        return dataset
    info = run.get("dataset") or {}
    source = data or info.get("source")
    if not source:
        raise InputError(
            f"{run['_path']} does not say which dataset the run used.",
            "Pass --data with the release, or --images none.",
        )
    try:
        return open_common_o(
            source, info.get("split", "main"), revision=revision if data else (revision or info.get("revision"))
        )
    except CommonlinkError as exc:
        raise InputError(
            f"The report's images: {exc.problem}",
            "Pass --data with the release the run used, or --images none to leave images out.",
        ) from exc


def _common_o_row_images(dataset, record: dict) -> list[ImageJob]:
    """The two image jobs of a prediction's row, after checking that the row is the one the model answered."""
    i = int(record["row_index"])
    fix = "Pass --data with the release the run was made on, or --images none to leave images out."
    if not 0 <= i < len(dataset):
        raise InputError(
            f"Prediction {record['id']!r} is row {i}, but {dataset.source_name} split {dataset.split!r} has {len(dataset)} rows.",
            fix,
        )
    example = dataset.get(i, images=False)
    if (example.id, example.choices, example.answer_letters) != (
        str(record["id"]),
        list(record["choices"]),
        list(record["ground_truth_letters"]),
    ):
        raise InputError(
            f"Row {i} of {dataset.source_name} split {dataset.split!r} ({example.id!r}) is not the row the run answered "
            f"({record['id']!r}): its id, choices or ground truth differ, so its images could be another row's.",
            fix,
        )
    raw = dataset.raw_row(i)
    jobs = []
    for field in ("image_1", "image_2"):
        cell = raw.get(field)
        data = cell.get("bytes") if isinstance(cell, dict) else cell if isinstance(cell, (bytes, bytearray)) else None
        if data:
            jobs.append(ImageJob(bytes_key(bytes(data)), lambda data=data: data))
        else:  # no embedded bytes: the loader resolves the path (inside the release only), here, not in a pool thread
            picture = getattr(dataset.get(i), field)
            jobs.append(ImageJob(bytes_key(picture.tobytes()), lambda picture=picture: picture))
    return jobs


def _read_chunk(dataset, chunk: list[dict]) -> list[ImageJob]:
    return [job for row in chunk for job in _common_o_row_images(dataset, row["_record"])]


def _common_o_page(
    runs: list[dict], thumbs: ThumbnailStore, *, data, revision, seed, max_output_chars, dataset, show_progress
) -> tuple[dict, int]:
    labels = _run_labels(runs)
    splits = {(str((r.get("dataset") or {}).get("split")), (r.get("dataset") or {}).get("fingerprint")) for r in runs}
    if len(splits) > 1:
        names = ", ".join(f"{s} ({(f or '?')[:12]})" for s, f in sorted(splits, key=str))
        raise InputError(
            f"The runs were made on different data ({names}); side-by-side cards need the same rows.",
            "Write one report per split; `commonlink eval compare` tables their metrics, one table per split.",
        )
    rows: dict[str, dict] = {}
    for r, run in enumerate(runs):
        for record in _read_records(Path(run["_dir"]) / "predictions.jsonl", _COMMON_O_FIELDS, "commono"):
            key = str(record["id"])
            row = rows.get(key)
            if row is None:
                row = rows[key] = {
                    "i": int(record["row_index"]),
                    "id": key,
                    "s": record.get("source") or "unknown",
                    "n": [record.get("num_objects_image_1"), record.get("num_objects_image_2")],
                    "c": list(record["choices"]),
                    "t": list(record["ground_truth_letters"]),
                    "r": [None] * len(runs),
                    "_record": record,
                }
            elif row["c"] != list(record["choices"]) or row["t"] != list(record["ground_truth_letters"]):
                raise InputError(
                    f"Row {key!r} has different choices or answers in {runs[0]['_dir']} and {run['_dir']}.",
                    "The runs are not on the same data: write one report per run.",
                )
            output, full_length = _truncate(record["raw_output"], max_output_chars)
            row["r"][r] = {
                "p": list(record["parsed_letters"]),
                "ok": bool(record["correct"]),
                "pok": bool(record["parse_ok"]),
                "e": record.get("parse_error"),
                "h": list(record["hallucinated_objects"]),
                "o": output,
                "ol": full_length,
            }
    ordered = sorted(rows.values(), key=lambda row: (row["i"], row["id"]))
    if thumbs.mode != "none" and ordered:
        split = _common_o_images(runs[0], data=data, revision=revision, dataset=dataset)
        with make_progress("rows", disable=not show_progress) as progress:
            task = progress.add_task("report images", total=len(ordered))
            chunks = [ordered[start : start + CHUNK_ROWS] for start in range(0, len(ordered), CHUNK_ROWS)]
            # One thread reads (and hashes) the next chunk's rows while the pool makes this chunk's thumbnails:
            # reading a release is mostly I/O, thumbnails are CPU, and both release the GIL for their heavy part.
            with ThreadPoolExecutor(1) as reader:
                pending = reader.submit(_read_chunk, split, chunks[0])
                for n, chunk in enumerate(chunks):
                    jobs = pending.result()
                    if n + 1 < len(chunks):
                        pending = reader.submit(_read_chunk, split, chunks[n + 1])
                    urls = thumbs.urls(jobs)
                    for k, row in enumerate(chunk):
                        row["im"] = urls[2 * k : 2 * k + 2]
                    progress.advance(task, len(chunk))
    for row in ordered:
        del row["_record"]
    mistakes = [
        [pos, r]
        for pos, row in enumerate(ordered)
        for r, out in enumerate(row["r"])
        if out is not None and not out["ok"]
    ]
    order = rng_for(seed, "report", "mistakes").permutation(len(mistakes)) if mistakes else []
    info = runs[0].get("dataset") or {}
    subtitle = (
        f"split <b>{escape(str(info.get('split', '?')))}</b> of {escape(str(info.get('source', '?')))}"
        + (f" @ {escape(str(info['revision']))}" if info.get("revision") else "")
        + f" · {len(ordered)} examples · {len(runs)} run{'s' if len(runs) > 1 else ''}"
    )
    metrics = (
        _row_set_note(ordered, labels)
        + _metrics_table(runs, labels)
        + '<p class="note">± one bootstrap standard error '
        f"({escape(str(runs[0].get('bootstrap_resamples', '?')))} resamples); bars in the charts show the same.</p>"
        + (legend(labels) if len(runs) > 1 else "")
        + "".join(
            '<div class="charts">'
            + "".join(_group_chart(runs, labels, key, x_label, stat, title) for key, x_label in _BREAKDOWNS)
            + "</div>"
            for stat, title in (("accuracy", "Accuracy"), ("hallucination_rate", "Hallucination rate"))
        )
        + _similarity_bins(runs, labels)
    )
    page = {
        "title": "Common-O: " + " vs ".join(labels) if len(labels) <= 3 else f"Common-O: {len(labels)} models",
        "subtitle": subtitle,
        "metrics": metrics,
        "runs": _runs_table(runs, labels),
        "footer": f"random mistakes drawn with seed {seed}",
        "data": {
            "kind": "common_o",
            "runs": labels,
            "none": NO_COMMON_OBJECTS,
            "page_size": PAGE_SIZE,
            "seed": seed,
            "rows": ordered,
            "mistakes": [mistakes[k] for k in order],
        },
    }
    return page, len(ordered)


def _row_set_note(rows: list[dict], labels: list[str]) -> str:
    """Runs side by side that answered different rows: say so (their metrics are over different rows, and a card
    shows – where a run has no answer), and where they are compared on the same rows."""
    answered = [sum(row["r"][k] is not None for row in rows) for k in range(len(labels))]
    if len(labels) < 2 or all(n == len(rows) for n in answered):
        return ""
    counts = "; ".join(f"{escape(label)}: {n} of {len(rows)} rows" for label, n in zip(labels, answered))
    return (
        f'<p class="facts">The runs answered different rows ({counts}): each run\'s metrics below are over its own rows, '
        "so they are not ranked against each other, and a card shows – where a run has no answer. "
        "<code>commonlink eval compare</code> scores them on the rows they share.</p>"
    )


def _similarity_bins(runs: list[dict], labels: list[str]) -> str:
    """Per run with the analysis: hallucination by distractor-similarity bin (Common-O §4.2), every value escaped."""
    parts = []
    for label, run in zip(labels, runs):
        sim = run.get("hallucination_similarity") or {}
        if not sim.get("bins"):
            continue
        r = "n/a" if sim.get("r") is None else f"{sim['r']:.3f}"
        rows = "".join(
            f"<tr><td>{b['low']:.3f}–{b['high']:.3f}</td><td>{int(b['n'])}</td>"
            + "".join(
                f"<td>{100 * float(b[k]):.1f}</td>" for k in ("hallucination_rate", "hallucination_1plus", "accuracy")
            )
            + "</tr>"
            for b in sim["bins"]
        )
        parts.append(
            f'<h3>Hallucination by distractor similarity: {escape(label)}</h3><p class="note">{escape(str(sim.get("measure")))}'
            f" ({escape(str(sim.get('embedding')))}); Pearson r with 1+ hallucination = {escape(r)} over "
            f"{int(sim.get('examples_used') or 0)} examples.</p><table><tr><th>similarity</th><th>n</th><th>halluc. rate %</th>"
            f"<th>1+ halluc. %</th><th>accuracy %</th></tr>{rows}</table>"
        )
    return "".join(parts)


# ------------------------------------------------------------------------------------------------ association
def memory_text(snapshot: dict | None, settings: dict, concept_kind: str) -> str:
    """The memory context a selection prompt carried, rebuilt from the previous step's logged snapshot."""
    memory = MemoryBase(
        settings.get("memory", "structm"),
        settings.get("repetition", 1.0),
        settings.get("forgetting", 0.2),
        concept_kind=concept_kind,
    )
    snapshot = snapshot or {}
    if "links" in snapshot:
        memory.links = [tuple(link) for link in snapshot["links"]]
    for key, weight in (snapshot.get("weights") or {}).items():
        concept, _, name = key.partition("|")
        memory.weights[(concept, name)] = weight
    return memory.render()


def _chain_end(entries: list[dict], max_steps: int) -> str:
    scored = [e for e in entries if not e.get("warmup")]
    if not scored:
        return "exhausted"
    last = scored[-1]
    if not last.get("correct"):
        if all(o is None for o in last.get("outputs") or [None]):
            return "failed"
        return "unparseable" if last.get("choice") is None else "wrong"
    return "max_steps" if len(scored) >= max_steps else "exhausted"


def _open_tasks(run: dict, config: str, *, data, revision, catalog_root=None):
    info = run.get("dataset") or {}
    source = data or info.get("source")
    try:
        split = open_association(
            source, config, revision=revision if data else (revision or info.get("revision")), catalog_root=catalog_root
        )
    except CommonlinkError as exc:
        raise InputError(
            f"The report's tasks and images: {exc.problem}",
            "Pass --data with the release or chain files the run used (the association page needs them for its images too).",
        ) from exc
    recorded = info.get("fingerprint")
    if recorded and split.fingerprint and split.fingerprint != recorded:
        raise InputError(
            f"{split.source_name} [{config}] is not the data of {run['_path']} (fingerprint {split.fingerprint[:12]}, the run recorded {recorded[:12]}).",
            "Pass --data with the release or chain files the run was made on.",
        )
    return split


def _tasks_by_id(split, wanted: set[str]) -> dict[str, object]:
    found = {}
    for i in range(len(split)):
        if len(found) == len(wanted):
            break
        task = split.get(i)
        if task.id in wanted:
            found[task.id] = task
    missing = wanted - set(found)
    if missing:
        raise InputError(
            f"{len(missing)} task(s) of the run are not in {split.source_name} (e.g. {min(missing)!r}).",
            "Pass --data with the release or chain files the run was made on.",
        )
    return found


def _image_job(split, image) -> ImageJob:
    return ImageJob(text_key(f"{split.fingerprint}/{image.id}"), lambda image=image: image.image)


def _labels_in(image, options: Sequence[str]) -> list[str]:
    have = set(image.labels)
    return [o for o in options if o in have]


def _outputs(values, limit: int) -> list:
    return [_truncate(v, limit)[0] for v in (values or [])]


def _association_page(
    run: dict,
    thumbs: ThumbnailStore,
    *,
    chain_steps: int,
    data,
    revision,
    seed,
    max_output_chars,
    dataset,
    show_progress,
    catalog_root=None,
) -> tuple[dict, int]:
    config = str(run["task"]).split("/", 1)[1]
    settings = run.get("association") or {}
    chains = config in _CHAIN_CONFIGS
    log = Path(run["_dir"]) / ("steps.jsonl" if chains else "predictions.jsonl")
    entries = _read_records(log, ("chain", "step", "correct") if chains else ("id", "concept"), "association")
    split = (
        dataset
        if dataset is not None
        else _open_tasks(run, config, data=data, revision=revision, catalog_root=catalog_root)
    )
    by_task: dict[str, list[dict]] = defaultdict(list)
    for entry in entries:
        by_task[str(entry["chain"] if chains else entry["id"])].append(entry)
    tasks = _tasks_by_id(split, set(by_task))
    cards = []
    with make_progress("tasks", disable=not show_progress) as progress:
        job = progress.add_task("report images", total=len(by_task))
        for task_id, task_entries in by_task.items():
            task = tasks[task_id]
            card = (
                _chain_card(task, task_entries, split, thumbs, settings, chain_steps, max_output_chars)
                if chains
                else _task_card(task, task_entries[0], split, thumbs, config, max_output_chars)
            )
            cards.append(card)
            progress.advance(job)
    labels = _run_labels([run])
    info = run.get("dataset") or {}
    subtitle = (
        f"{escape(config)} tasks of {escape(str(info.get('source', '?')))} · memory <b>{escape(str(settings.get('memory', '?')))}</b>"
        f" · {len(cards)} {'chains' if chains else 'tasks'}"
    )
    metrics = association_metrics_html(run, chains)
    failures = [k for k, card in enumerate(cards) if not card["ok"]]
    order = rng_for(seed, "report", "mistakes").permutation(len(failures)) if failures else []
    page = {
        "title": f"Association ({config}): {labels[0]}",
        "subtitle": subtitle,
        "metrics": metrics,
        "runs": _runs_table([run], labels),
        "footer": f"random failures drawn with seed {seed}",
        "data": {
            "kind": "chains" if chains else config,
            "runs": labels,
            "page_size": PAGE_SIZE if not chains else 10,
            "seed": seed,
            "memory": settings.get("memory"),
            "rows": cards,
            "mistakes": [[failures[k], 0] for k in order],
        },
    }
    return page, len(cards)


def _step_view(
    step, entry: dict, previous: dict | None, split, thumbs: ThumbnailStore, settings: dict, chain, limit: int
) -> dict:
    images = thumbs.urls([_image_job(split, step.query)] + [_image_job(split, c) for c in step.candidates])
    return {
        "k": step.index,
        "w": bool(entry.get("warmup")),
        "concept": step.concept,
        "bridge": bool(step.bridge),
        "q": images[0],
        "qid": step.query.id,
        "ql": _labels_in(step.query, chain.options),
        "cand": images[1:],
        "cid": [c.id for c in step.candidates],
        "cl": [_labels_in(c, chain.options) for c in step.candidates],
        "a": step.answer,
        "ch": entry.get("choice"),
        "ok": bool(entry.get("correct")),
        "mem": memory_text((previous or {}).get("memory"), settings, chain.concept_kind)
        if previous is not None
        else "",
        "out": _outputs(entry.get("outputs"), limit),
        "ded": entry.get("deduction"),
        "gold": entry.get("deduction_gold"),
        "dok": entry.get("deduction_correct"),
        "dout": _outputs(entry.get("deduction_outputs"), limit),
    }


def _chain_card(chain, entries: list[dict], split, thumbs, settings: dict, chain_steps: int, limit: int) -> dict:
    entries = sorted(entries, key=lambda e: e["step"])
    scored = [e for e in entries if not e.get("warmup")]
    length = sum(bool(e.get("correct")) for e in scored)
    ended = _chain_end(entries, int(settings.get("max_steps", 500)))
    shown_from = max(0, len(entries) - chain_steps)
    steps = []
    for k in range(shown_from, len(entries)):
        entry = entries[k]
        step = chain.steps[int(entry["step"])]
        steps.append(_step_view(step, entry, entries[k - 1] if k > 0 else None, split, thumbs, settings, chain, limit))
    return {
        "id": chain.id,
        "concept": "+".join(chain.concepts),
        "kind": chain.kind,
        "len": length,
        "scored": len(scored),
        "warm": sum(bool(e.get("warmup")) for e in entries),
        "hidden": shown_from,
        "ended": ended,
        "ok": ended not in ("wrong", "unparseable"),
        "steps": steps,
    }


def _task_card(task, record: dict, split, thumbs, config: str, limit: int) -> dict:
    if config == "single_step":
        pictures = [task.query, *task.candidates]
        names = ["query", "candidate 1", "candidate 2"]
    else:
        pictures = [task.image_1, task.image_2]
        names = ["image 1", "image 2"]
    urls = thumbs.urls([_image_job(split, p) for p in pictures])
    # single step is judged by its selection, deduction by its deduction (as the metrics do)
    ok = record.get("correct") if config == "single_step" else record.get("deduction_correct")
    return {
        "id": task.id,
        "concept": task.concept,
        "ok": bool(ok),
        "im": urls,
        "names": names,
        "ids": [p.id for p in pictures],
        "labels": [_labels_in(p, task.options) for p in pictures],
        "a": record.get("answer"),
        "ch": record.get("choice"),
        "ded": record.get("deduction"),
        "gold": record.get("deduction_gold"),
        "dok": record.get("deduction_correct"),
        "out": _outputs(record.get("outputs"), limit),
        "dout": _outputs(record.get("deduction_outputs"), limit),
        "failed": bool(record.get("failed")),
    }


__all__ = ["REPORT_FILENAME", "ReportSummary", "memory_text", "report_beside_run", "write_report"]
