"""The frame every report page shares: the HTML shell with its script and style (the data embedded as JSON that
cannot break out of its element), the runs table and run labels, and reading a run's per-row log."""

from __future__ import annotations

import base64
import hashlib
import json
from collections import Counter
from collections.abc import Iterator, Sequence
from html import escape
from importlib import resources
from pathlib import Path

from commonlink import __version__
from commonlink.errors import InputError
from commonlink.eval.data_identity import data_label
from commonlink.eval.run_names import run_name
from commonlink.eval.scored import scored_line
from commonlink.fileio import read_jsonl_numbered

PAGE_SIZE = 25  #: cards to a page


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


def render_page(page: dict) -> str:
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
                "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; img-src 'self' data: "
                "file:; "
                f"style-src 'unsafe-inline'; script-src 'sha256-{script_hash}'\">"
            ),
            f"<title>{escape(page['title'])}</title><style>{_asset('report.css')}</style></head><body>",
            f'<header><h1>{escape(page["title"])}</h1><p class="sub">{page["subtitle"]}</p></header>',
            '<nav class="toc"><a href="#metrics">Metrics</a><a href="#examples">Examples</a><a '
            'href="#runs">Runs</a></nav>',
            f'<section id="metrics"><h2>Metrics</h2>{page["metrics"]}</section>',
            '<section id="examples"><h2>Examples</h2><div id="controls"></div><div id="status" '
            'aria-live="polite"></div>',
            '<div id="mistakes" hidden></div><div id="cards"></div><div id="pager"></div>',
            "<noscript>The example cards need JavaScript; the metrics above do not.</noscript></section>",
            f'<section id="runs"><h2>Runs</h2>{page["runs"]}</section>',
            f"<footer>commonlink {escape(__version__)} · static page, works offline · "
            f"{escape(page['footer'])}</footer>",
            f'<script type="application/json" id="report-data">{_json_for_script(page["data"])}</script>',
            f"<script>{script}</script></body></html>\n",
        ]
    )


def run_labels(runs: list[dict]) -> list[str]:
    names = [run_name(r) for r in runs]
    counts = Counter(names)
    return [f"{n} ({Path(r['_dir']).name})" if counts[n] > 1 else n for n, r in zip(names, runs)]


def runs_table(runs: list[dict], labels: list[str]) -> str:
    head = (
        "<tr><th>Run</th><th>Backend</th><th>Data</th><th>Scored</th><th>Created</th><th>Generation</th><th>Seed</th>"
        "<th>Toolkit</th><th>Folder</th></tr>"
    )
    rows = []
    for run, label in zip(runs, labels):
        gen, not_sent = run.get("generation") or {}, run.get("generation_not_sent") or {}
        gen_text = ", ".join(
            f"{k}={gen[k]}" + (" (not sent)" if k in not_sent else "")
            for k in ("temperature", "top_p", "max_new_tokens", "max_pixels")
            if k in gen
        )
        rows.append(
            "<tr>"
            + "".join(
                f"<td>{escape(str(v))}</td>"
                for v in (
                    label,
                    run.get("backend", "?"),
                    data_label(run),
                    scored_line(run).removeprefix("Scored: "),
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


def truncate(text, limit: int):
    if not isinstance(text, str) or len(text) <= limit:
        return text, None
    return text[:limit], len(text)


def iter_records(path: Path, needed: Sequence[str], what: str) -> Iterator[dict]:
    """A run's per-row log, one checked record at a time (an error names the line that lacks a field)."""
    if not path.is_file():
        raise InputError(
            f"{path}: not found; the report needs the run's {path.name}.",
            f"Give a folder written by `commonlink eval {what}` (a sharded run: merge it first by rerunning without "
            "--shard).",
        )
    for lineno, record in read_jsonl_numbered(
        path, fix=f"Rewrite the file with `commonlink eval {what}` (or `eval score --out`)."
    ):
        missing = [k for k in needed if k not in record]
        if missing:
            raise InputError(
                f"{path}, line {lineno}: lacks {', '.join(missing)}.",
                f"Give a {path.name} written by `commonlink eval {what}` of this toolkit version.",
            )
        yield record


#: Public name of the embedding helper, for other static pages (the human study page).
json_for_script = _json_for_script
