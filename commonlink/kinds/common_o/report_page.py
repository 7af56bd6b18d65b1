"""The Common-O report page: the metrics table and bar charts by breakdown, hallucination by distractor
similarity, and one card per row with every run's answer side by side (thumbnails read a chunk ahead)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from html import escape
from pathlib import Path

from commonlink.constants import NO_COMMON_OBJECTS
from commonlink.errors import CommonlinkError, InputError
from commonlink.eval.report.charts import Series, bar_chart, legend
from commonlink.eval.report.images import ImageJob, ThumbnailStore, bytes_key
from commonlink.eval.report.page import PAGE_SIZE, iter_records, run_labels, runs_table, truncate
from commonlink.eval.report.summary import cell, sort_keys
from commonlink.kinds.common_o.loader import open_common_o
from commonlink.progress import make_progress
from commonlink.seeding import rng_for

CHUNK_ROWS = 64  #: rows whose images are read and thumbnailed together (bounds memory)
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
_BREAKDOWNS = (("by_num_objects", "objects per image"), ("by_source", "source"), ("by_num_common", "common objects"))


def _pct(group: dict, name: str) -> str:
    value = group.get(name)
    if value is None:
        return "–"
    se = group.get(f"{name}_se")
    return cell(value, ".1f", 100) + (f'<span class="se"> ± {cell(se, ".1f", 100)}</span>' if se is not None else "")


def _metrics_table(runs: list[dict], labels: list[str]) -> str:
    head = (
        "<tr><th>Model</th><th>n</th><th>Accuracy %</th><th>Halluc. rate %</th><th>1+ halluc. %</th><th>2+ halluc. "
        "%</th>"
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


def _common_o_row_images(dataset, row: dict) -> list[ImageJob]:
    """The two image jobs of a card's row (its ``i``, ``id``, choices ``c`` and truth ``t`` as the predictions
    give them), after checking that the dataset's row is the one the model answered."""
    i = row["i"]
    fix = "Pass --data with the release the run was made on, or --images none to leave images out."
    if not 0 <= i < len(dataset):
        raise InputError(
            f"Prediction {row['id']!r} is row {i}, but {dataset.source_name} split {dataset.split!r} has "
            f"{len(dataset)} rows.",
            fix,
        )
    raw = dataset.raw_row(i)  # first: the text-only read below then reuses this row group instead of reading it again
    example = dataset.get(i, images=False)
    if (example.id, example.choices, example.answer_letters) != (row["id"], row["c"], row["t"]):
        raise InputError(
            f"Row {i} of {dataset.source_name} split {dataset.split!r} ({example.id!r}) is not the row the run "
            "answered "
            f"({row['id']!r}): its id, choices or ground truth differ, so its images could be another row's.",
            fix,
        )
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
    return [job for row in chunk for job in _common_o_row_images(dataset, row)]


def common_o_page(
    runs: list[dict], thumbs: ThumbnailStore, *, data, revision, seed, max_output_chars, dataset, progress
) -> tuple[dict, int]:
    """The page of one or more Common-O runs on the same split (one column per run) and its number of cards."""
    labels = run_labels(runs)
    _check_same_data(runs)
    ordered = _merged_rows(runs, max_output_chars)
    if thumbs.mode != "none" and ordered:
        split = _common_o_images(runs[0], data=data, revision=revision, dataset=dataset)
        _add_thumbnails(ordered, split, thumbs, progress=progress)
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
    page = {
        "title": "Common-O: " + " vs ".join(labels) if len(labels) <= 3 else f"Common-O: {len(labels)} models",
        "subtitle": subtitle,
        "metrics": _metrics_html(runs, labels, ordered),
        "runs": runs_table(runs, labels),
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


def _check_same_data(runs: list[dict]) -> None:
    """Side-by-side cards need every run on the same split of the same data."""
    splits = {(str((r.get("dataset") or {}).get("split")), (r.get("dataset") or {}).get("fingerprint")) for r in runs}
    if len(splits) > 1:
        names = ", ".join(f"{s} ({(f or '?')[:12]})" for s, f in sorted(splits, key=str))
        raise InputError(
            f"The runs were made on different data ({names}); side-by-side cards need the same rows.",
            "Write one report per split and data; `commonlink eval compare` tables their metrics, one table per split "
            "and data (never ranked together).",
        )


def _merged_rows(runs: list[dict], max_output_chars: int) -> list[dict]:
    """One row per example any run answered, with each run's answer (``None`` where it has none), in row order.
    Only what a card shows is kept of a prediction (the records are read one at a time: at paper size, holding
    them would be most of the report's memory)."""
    rows: dict[str, dict] = {}
    for r, run in enumerate(runs):
        for record in iter_records(Path(run["_dir"]) / "predictions.jsonl", _COMMON_O_FIELDS, "commono"):
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
                }
            elif row["c"] != list(record["choices"]) or row["t"] != list(record["ground_truth_letters"]):
                raise InputError(
                    f"Row {key!r} has different choices or answers in {runs[0]['_dir']} and {run['_dir']}.",
                    "The runs are not on the same data: write one report per run.",
                )
            output, full_length = truncate(record["raw_output"], max_output_chars)
            row["r"][r] = {
                "p": list(record["parsed_letters"]),
                "ok": bool(record["correct"]),
                "pok": bool(record["parse_ok"]),
                "e": record.get("parse_error"),
                "h": list(record["hallucinated_objects"]),
                "o": output,
                "ol": full_length,
            }
    return sorted(rows.values(), key=lambda row: (row["i"], row["id"]))


def _add_thumbnails(ordered: list[dict], split, thumbs: ThumbnailStore, *, progress: bool) -> None:
    """Each row's two thumbnail URLs (``im``), made a chunk of rows at a time."""
    with make_progress("rows", disable=not progress) as bars:
        task = bars.add_task("report images", total=len(ordered))
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
                bars.advance(task, len(chunk))


def _metrics_html(runs: list[dict], labels: list[str], ordered: list[dict]) -> str:
    """The metrics section: the table, the bar charts by breakdown and the similarity bins."""
    return (
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


def _row_set_note(rows: list[dict], labels: list[str]) -> str:
    """Runs side by side that answered different rows: say so (their metrics are over different rows, and a card
    shows – where a run has no answer), and where they are compared on the same rows."""
    answered = [sum(row["r"][k] is not None for row in rows) for k in range(len(labels))]
    if len(labels) < 2 or all(n == len(rows) for n in answered):
        return ""
    counts = "; ".join(f"{escape(label)}: {n} of {len(rows)} rows" for label, n in zip(labels, answered))
    return (
        f'<p class="facts">The runs answered different rows ({counts}): each run\'s metrics below are over its own '
        "rows, "
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
            f"<h3>Hallucination by distractor similarity: {escape(label)}</h3><p "
            f'class="note">{escape(str(sim.get("measure")))}'
            f" ({escape(str(sim.get('embedding')))}); Pearson r with 1+ hallucination = {escape(r)} over "
            f"{int(sim.get('examples_used') or 0)} examples.</p><table><tr><th>similarity</th><th>n</th><th>halluc. "
            "rate %</th>"
            f"<th>1+ halluc. %</th><th>accuracy %</th></tr>{rows}</table>"
        )
    return "".join(parts)
