"""``commonlink human study``: a self-contained folder (``index.html`` and ``images/``) in which people answer a
release split as a model does, in any browser, from disk or a static host, with no server.

The page holds the study as JSON that cannot leave its element (the report's :func:`json_for_script`), and one
script, allowed by its hash in the page's Content-Security-Policy; every label and prompt is set as text. Each
annotator gets a seeded order and sample of the units (:func:`annotator_plans`); answers are kept in the browser's
localStorage as they are given (a reload resumes) and exported as one JSON-lines answers file
(:mod:`commonlink.human.answers` reads it back).
"""

from __future__ import annotations

import base64
import hashlib
import os
from dataclasses import dataclass
from html import escape
from importlib import resources
from pathlib import Path

from commonlink import __version__
from commonlink.errors import InputError
from commonlink.eval.report.page import json_for_script
from commonlink.fileio import atomic_write_bytes, atomic_write_text
from commonlink.human.items import StudySpec, StudyUnit, iter_units, open_split
from commonlink.images import image_to_png_bytes
from commonlink.seeding import rng_for

STUDY_FORMAT = "commonlink-human-study"
ANSWERS_FORMAT = "commonlink-human-answers"
FORMAT_VERSION = 1
IMAGES_DIR = "images"

#: What annotators read before they start (also in docs/human.md).
INSTRUCTIONS = (
    "You will see the questions a vision-language model is asked, with the same images and the same words.",
    "Answer each one as well as you can by clicking your choice(s), then Submit. There is no time limit, but the "
    "time you take on each question is recorded.",
    "Common-O questions: pick every object that is in both images, or 'No objects are in common'.",
    "Association questions: pick the candidate image that shares a concept with the original image; in a chain, a "
    "wrong pick ends the chain (as it does for a model), and the memory text shows what the earlier steps taught.",
    "Your answers stay in this browser until you export them; closing the page or reloading it keeps them.",
    "When you are done (or want to stop), click Export answers and send the file to the study's organiser. Only the "
    "name you type is stored with your answers.",
)


@dataclass
class StudySummary:
    path: Path  #: index.html
    units: int
    questions: int
    images: int
    study_id: str


def annotator_plans(n_units: int, annotators: list[str], *, seed: int = 0, sample: int | None = None) -> list[dict]:
    """Per annotator, the units (rows of the split) they answer: a seeded permutation (``rng_for(seed, "human-study",
    name)``), cut to ``sample``. Without names, one plan for whoever types a name (the same order for everyone)."""
    if sample is not None and sample < 1:
        raise InputError(f"--sample {sample} must be at least 1.")
    if len(set(annotators)) != len(annotators):
        raise InputError("--annotators lists a name twice.", "Give each annotator once.")
    if any(not name.strip() for name in annotators):
        raise InputError("--annotators has an empty name.", "e.g. --annotators alice,bob")
    plans = []
    for name in annotators or [None]:
        order = [int(k) for k in rng_for(seed, "human-study", name or "").permutation(n_units)]
        plans.append({"annotator": name, "units": order[:sample] if sample else order})
    return plans


def _image_file(img, out: Path, written: dict[str, str]) -> str:
    data = image_to_png_bytes(img)
    digest = hashlib.sha256(data).hexdigest()[:20]
    name = f"{IMAGES_DIR}/{digest}.png"
    if digest not in written:
        target = out / name
        if not (target.is_file() and target.read_bytes() == data):
            atomic_write_bytes(target, data, fsync=False)
        written[digest] = name
    return name


def _unit_data(unit: StudyUnit, out: Path, written: dict[str, str]) -> dict:
    questions = []
    for q in unit.questions:
        parts = [{"image": _image_file(v, out, written)} if k == "image" else {"text": v} for k, v in q.parts]
        entry = {"id": q.id, "parts": parts, "choices": q.choices, "multi": q.multi, "lettered": q.lettered}
        if unit.chain:  # the page needs it to end the chain at a wrong step, as the protocol does
            entry["gold"] = q.gold
        questions.append(entry)
    return {"id": unit.id, "chain": unit.chain, "questions": questions}


def _page(data: dict, title: str) -> str:
    files = resources.files("commonlink.human").joinpath("assets")
    script = files.joinpath("study.js").read_text(encoding="utf-8")
    style = resources.files("commonlink.eval.report").joinpath("assets", "report.css").read_text(encoding="utf-8")
    style += files.joinpath("study.css").read_text(encoding="utf-8")
    script_hash = base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode("ascii")
    return "".join(
        [
            '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; img-src 'self' file:; "
            f"style-src 'unsafe-inline'; script-src 'sha256-{script_hash}'\">",
            f"<title>{escape(title)}</title><style>{style}</style></head><body>",
            f'<header><h1>{escape(title)}</h1><p class="sub" id="progress-text"></p>',
            '<progress id="progress" value="0" max="1"></progress></header>',
            '<section id="start"></section><section id="question" hidden></section>',
            '<section id="done" hidden></section>',
            '<section id="export-area" hidden><button id="export" type="button">Export answers</button> ',
            '<a id="download" hidden>download</a>',
            '<p class="note">The answers file (also below, to copy if the download is blocked):</p>',
            '<textarea id="export-text" readonly rows="4" cols="100"></textarea></section>',
            "<noscript>This study page needs JavaScript.</noscript>",
            f"<footer>commonlink {escape(__version__)} · human study · static page, works offline</footer>",
            f'<script type="application/json" id="study-data">{json_for_script(data)}</script>',
            f"<script>{script}</script></body></html>\n",
        ]
    )


def write_study(
    data: str | os.PathLike,
    spec: StudySpec,
    out: str | os.PathLike,
    *,
    revision: str | None = None,
    annotators: list[str] | None = None,
    seed: int = 0,
    sample: int | None = None,
) -> StudySummary:
    """Write the study folder ``out`` (``index.html`` + ``images/``) for ``data``'s split as ``spec`` says."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise InputError(f"--out {out} is a file.", "Give a folder for the study page and its images.")
    if out.is_dir() and any(out.iterdir()) and not (out / "index.html").is_file():
        raise InputError(f"--out {out} holds other files.", "Give an empty or new folder (or a study folder to redo).")
    split = open_split(data, spec, revision)
    if not len(split):
        raise InputError(f"{split.source_name} [{spec.split}] has nothing to ask.", "Give a split with rows.")
    plans = annotator_plans(len(split), list(annotators or []), seed=seed, sample=sample)
    rows = sorted({r for plan in plans for r in plan["units"]})  # only the rows someone is asked
    position = {row: k for k, row in enumerate(rows)}
    for plan in plans:
        plan["units"] = [position[r] for r in plan["units"]]
    written: dict[str, str] = {}
    units = [_unit_data(u, out, written) for u in iter_units(split, data, spec, rows, revision=revision)]
    body = {
        "format": STUDY_FORMAT,
        "version": FORMAT_VERSION,
        "answers_format": ANSWERS_FORMAT,
        "source": str(split.source_name),
        "fingerprint": split.fingerprint,
        "spec": spec.to_dict(),
        "seed": seed,
        "instructions": list(INSTRUCTIONS),
        "units": units,
        "plans": plans,
    }
    study_id = hashlib.sha256(json_for_script(body).encode("utf-8")).hexdigest()[:16]
    body["study"] = study_id
    title = f"Human study: {Path(str(split.source_name)).name} [{spec.split}]"
    page = out / "index.html"
    atomic_write_text(page, _page(body, title))
    kept = {Path(name).name for name in written.values()}
    for stale in (out / IMAGES_DIR).glob("*.png"):  # images of an earlier build of this study folder
        if stale.name not in kept:
            stale.unlink()
    return StudySummary(page, len(units), sum(len(u["questions"]) for u in units), len(written), study_id)


__all__ = [
    "ANSWERS_FORMAT",
    "FORMAT_VERSION",
    "INSTRUCTIONS",
    "STUDY_FORMAT",
    "StudySummary",
    "annotator_plans",
    "write_study",
]
