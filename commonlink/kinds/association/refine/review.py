"""Human review of association task files: an HTML page per chain or task, decisions read back by verify.

The paper's third refinement step is a human review through "a custom-designed interface" (§4.2, Fig. 7).
:func:`export_review` writes, for the task files of one build:

* ``index.html`` -- a list of every page;
* ``TASK/ID.html`` -- one page per chain (or task): its concept(s), then each claim the task relies on (the
  start image, each step's positive with the concept it must show; the step's negative shown for context)
  with a keep/reject choice. "Save decisions" downloads ``decisions-ID.json``;
* ``decisions.csv`` -- every distinct claim once (``image_id, name, concept, decision, pages``), decision
  ``keep``, for reviewers who prefer a spreadsheet;
* ``images/ID.jpg`` -- a thumbnail of each image shown (re-encoded: no metadata travels).

``commonlink chains verify TASKS --decisions decisions.csv`` (or the saved JSON files; repeat the option)
reads the decisions back: a rejected claim is dropped exactly as a model's rejection is. Decisions are per
image and concept, so one rejection applies wherever that image is claimed to show that concept.
"""

from __future__ import annotations

import csv
import html
import io
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from commonlink.errors import check_at_least
from commonlink.fileio import atomic_write, atomic_write_text, read_jsonl
from commonlink.images import check_thumb_size
from commonlink.kinds.association.format import ImageFetcher, LabelledImage
from commonlink.kinds.association.memory import image_name
from commonlink.kinds.association.refine.verify import row_claims, task_inputs
from commonlink.locks import output_lock
from commonlink.progress import track

_SCRIPT = """
function saveDecisions() {
  const rows = [...document.querySelectorAll('select[data-image]')].map(s => (
    {image_id: s.dataset.image, concept: s.dataset.concept, decision: s.value}));
  const blob = new Blob([JSON.stringify(rows, null, 1)], {type: 'application/json'});
  const a = document.createElement('a');
  a.href = URL.createObjectURL(blob);
  a.download = 'decisions-' + document.body.dataset.task + '.json';
  a.click();
}
"""
_STYLE = (
    "body{font-family:sans-serif;margin:1em} .step{display:inline-block;margin:4px;padding:4px;border:1px solid #ccc;"
    "vertical-align:top;width:210px} .neg{opacity:.55} img{max-width:200px;max-height:200px;display:block}"
    " select{width:100%}"
)


@dataclass
class ReviewSummary:
    out_dir: Path
    pages: int
    claims: int
    images: int


def _thumbnail(fetcher: ImageFetcher, img: LabelledImage, path: Path, size: int) -> None:
    if path.is_file():
        return
    picture = fetcher.open(img.origin, img.crop, what=f"image {img.id}").convert("RGB")
    picture.thumbnail((size, size))
    buf = io.BytesIO()
    picture.save(buf, format="JPEG", quality=85)  # a fresh encode: no EXIF/GPS from the source
    with atomic_write(path, "wb") as handle:
        handle.write(buf.getvalue())


def _card(img: LabelledImage, caption: str, concept: str | None, *, negative: bool = False) -> str:
    e = html.escape
    choice = ""
    if concept is not None:
        choice = (
            f'<select data-image="{e(img.id)}" data-concept="{e(concept)}"><option value="keep">keep: shows '
            f'{e(concept)}</option><option value="reject">reject: does not show {e(concept)}</option></select>'
        )
    return (
        f'<div class="step{" neg" if negative else ""}"><div>{e(caption)}</div><img src="../images/{e(img.id)}.jpg" '
        f'alt="{e(image_name(img))}"><div><b>{e(image_name(img))}</b> <small>{e(img.id)}</small></div>{choice}</div>'
    )


def _page(task: str, row: dict, table: Sequence[LabelledImage], concept_kind: str) -> str:
    e = html.escape
    concepts = row.get("concepts") or [row["concept"]]
    parts = [
        f'<!doctype html><html><head><meta charset="utf-8"><title>{e(row["id"])}</title><style>{_STYLE}</style>'
        f'<script>{_SCRIPT}</script></head><body data-task="{e(row["id"])}">',
        f"<h1>{e(row['id'])}</h1><p>{e(task)}; {e(concept_kind)}: <b>{e(' + '.join(concepts))}</b>. For each image, "
        "say whether it shows the concept named under it; then Save decisions and pass the file to "
        "<code>commonlink chains verify TASKS --decisions FILE</code>.</p>",
        '<p><button onclick="saveDecisions()">Save decisions</button></p>',
    ]
    claims = list(row_claims(task, row))
    if task in ("synchronous", "asynchronous"):
        by_step: dict[int, list[str]] = {}
        for step, (_, concept) in claims:
            by_step.setdefault(step, []).append(concept)
        start = table[int(row["start"])]
        parts.append("".join(_card(start, "start", c) for c in by_step[-1]))
        for t, (p, q) in enumerate(zip(row["positive"], row["negative"])):
            warm = " (warm-up)" if t < int(row.get("warmup", 0)) else ""
            parts.append(
                "<div>"
                + "".join(_card(table[int(p)], f"step {t}{warm}: positive", c) for c in by_step.get(t, []))
                + _card(table[int(q)], f"step {t}: negative", None, negative=True)
                + "</div>"
            )
    else:
        for _, (index, concept) in claims:
            parts.append(_card(table[index], "image", concept))
    parts.append("</body></html>")
    return "\n".join(parts)


def export_review(
    tasks: Sequence[str | os.PathLike],
    out_dir: str | os.PathLike,
    *,
    limit: int | None = None,
    thumbnail: int = 200,
    progress: bool = True,
    catalog_root: str | os.PathLike | None = None,
) -> ReviewSummary:
    """Write the review pages, thumbnails and ``decisions.csv`` for the task files (``limit`` rows a task)."""
    check_thumb_size(thumbnail)
    check_at_least("--limit", limit, 1)
    inputs, table, meta = task_inputs(tasks, catalog_root=catalog_root)
    out_dir = Path(out_dir)
    with output_lock(out_dir, what="commonlink chains review"):  # one writer of the folder
        concept_kind = meta.get("concept_kind", "concept")
        fetcher = ImageFetcher()
        claims: dict[tuple[int, str], list[str]] = {}
        pages: list[tuple[str, str]] = []
        shown: set[int] = set()
        for inp in inputs:
            rows = read_jsonl(inp.path)
            for n, row in enumerate(
                track(rows, f"review pages: {inp.task}", total=inp.meta.get("rows"), unit="pages", disable=not progress)
            ):
                if limit is not None and n >= limit:
                    break
                page = f"{inp.task}/{row['id']}.html"
                atomic_write_text(out_dir / page, _page(inp.task, row, table, concept_kind))
                pages.append((page, row["id"]))
                for _, claim in row_claims(inp.task, row):
                    claims.setdefault(claim, []).append(page)
                    shown.add(claim[0])
                if inp.task in ("synchronous", "asynchronous"):
                    shown.update(int(q) for q in row["negative"])
        for index in track(sorted(shown), "thumbnails", total=len(shown), unit="images", disable=not progress):
            _thumbnail(fetcher, table[index], out_dir / "images" / f"{table[index].id}.jpg", thumbnail)
        buf = io.StringIO()
        writer = csv.writer(buf)
        writer.writerow(["image_id", "name", "concept", "decision", "pages"])
        for (index, concept), where in claims.items():
            writer.writerow([table[index].id, table[index].name or "", concept, "keep", ";".join(dict.fromkeys(where))])
        atomic_write_text(out_dir / "decisions.csv", buf.getvalue())
        listing = "".join(f'<li><a href="{html.escape(p)}">{html.escape(i)}</a></li>' for p, i in pages)
        atomic_write_text(
            out_dir / "index.html",
            f'<!doctype html><html><head><meta charset="utf-8"><title>Review</title></head><body>'
            f"<h1>Association review ({len(pages)} pages)</h1><p>Build: "
            f"{html.escape(json.dumps(meta.get('config', {}).get('preset')))} preset, "
            f"{html.escape(concept_kind)} concepts.</p><ul>{listing}</ul></body></html>",
        )
        return ReviewSummary(out_dir, len(pages), len(claims), len(shown))
