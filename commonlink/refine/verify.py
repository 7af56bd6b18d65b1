"""MLLM verification and human review of association task files (Labyrinth of Links §4.2, Tables 16-17).

The paper refines its chains in three steps: a resolution filter (``--min-pixels`` of ``commonlink chains``),
an *MLLM verification* that asks a model whether each annotation is present in the image, and a *human
review* that removes what people judge wrong. Here a *claim* is one (image, concept) pair a task relies on:

* a chain step's positive shows the step's concept (a bridge positive: both concepts), and a chain's start
  image shows the first step's concept;
* a single-step task's query, positive and memory images show its concept; a deduction task's two images do.

:func:`verify_tasks` asks the model about every distinct claim once (``Does this image show the attribute
"metal"? ... Options: [Yes, No].``; answers cached in the output folder, so a killed run resumes), merges
human decisions (read back from the review export, see :mod:`commonlink.refine.review`), and then:

* removes a rejected concept from the image's labels (the annotation is judged absent), so the verified image
  table no longer claims it and deduction golds follow;
* drops each chain step whose positive (or start) was rejected; the steps after it follow on from the last
  kept image. Where that splice leaves a later step invalid, its negative is redrawn (seeded) when that
  suffices, otherwise that step is dropped too and the report says why ("splice");
* drops single-step and deduction tasks with a rejected claim, and chains left without a scored step.

Every surviving task is checked against the builder's invariants on the verified labels; the output folder is
a set of chain files (images.jsonl + TASK.jsonl + sidecars with a ``verification`` block) that
``commonlink release build`` takes as it is, plus ``verification.json`` (every claim's answer and decision,
every drop with its reason) and ``verification.md``.
"""

from __future__ import annotations

import csv
import json
import os
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from commonlink import __version__
from commonlink.errors import InputError, SchemaError
from commonlink.eval.association_memory import image_name
from commonlink.eval.association_prompts import ImageSlot
from commonlink.eval.backends import (
    Backend,
    GenerationRequest,
    GenerationSettings,
    RequestFailure,
    load_backend,
)
from commonlink.eval.cache import CachedGenerator, PredictionCache, run_key
from commonlink.eval.parsing import parse_yes_no
from commonlink.fileio import (
    atomic_write,
    atomic_write_json,
    atomic_write_text,
    read_jsonl,
)
from commonlink.formats.association import (
    IMAGE_TABLE_TASK,
    IMAGES_FILENAME,
    PLAN_BRIDGE,
    TASKS,
    ImageFetcher,
    LabelledImage,
    read_chain_meta,
    read_image_table,
    step_concept_codes,
    task_file,
)
from commonlink.formats.meta import ASSOCIATION_CHAINS_KIND, utc_now, write_meta
from commonlink.progress import track
from commonlink.sampling.chains import AssociationBuilder, ChainConfig, LabelIndex
from commonlink.seeding import rng_for

VERIFY_PROTOCOL = "association-verify-v1"
REPORT_FILENAME = "verification.json"
CACHE_FILENAME = "verify-answers.cache"  # JSON lines, but not *.jsonl: `release build OUT/*.jsonl` must not take it
VERIFY_CHOICES = ["Yes", "No"]
#: The paper gives no wording for its verification question; this one reuses its output instruction (Table 3).
VERIFY_PROMPT = ('Does this image show the {kind} "{concept}"? Your response should be direct and exclusively only '
                 "include one of the following items. Options: [Yes, No].")
DECISIONS = ("keep", "reject")


# ---------------------------------------------------------------------------------------------- inputs
@dataclass
class TaskInput:
    task: str
    path: Path
    meta: dict


def task_inputs(paths: Sequence[str | os.PathLike], *, catalog_root=None) -> tuple[list[TaskInput], list[LabelledImage], dict]:
    """The task files named (a folder means every task file in it), their image table and its meta.

    All must come from one ``commonlink chains`` build (one image table), as a release does.
    """
    files: list[Path] = []
    for given in paths:
        path = Path(given)
        if path.is_dir():
            found = [task_file(path, t) for t in TASKS if task_file(path, t).is_file()]
            if not found:
                raise InputError(f"{path}: no task file ({', '.join(t + '.jsonl' for t in TASKS)}) in this folder.",
                                 "Pass the --out folder of `commonlink chains`, or its TASK.jsonl files.")
            files += found
        elif path.is_file():
            if path.name == IMAGES_FILENAME:
                continue  # a shell glob over the folder includes the image table
            files.append(path)
        else:
            raise InputError(f"Task file not found: {path}", "Pass the chain files written by `commonlink chains`.")
    metas = {f: read_chain_meta(f) for f in dict.fromkeys(files)}
    inputs = [TaskInput(meta["task"], f, meta) for f, meta in metas.items()]
    if not inputs:
        raise InputError("No task file given.", "Pass the --out folder of `commonlink chains`, or its TASK.jsonl files.")
    tasks = Counter(i.task for i in inputs)
    if max(tasks.values()) > 1:
        raise InputError(f"Two files hold the same task type ({[t for t, n in tasks.items() if n > 1]}).",
                         "Verify one build at a time (one file per task type).")
    shas = {i.meta.get("images_sha256") for i in inputs}
    if len(shas) > 1:
        raise InputError("The task files come from different builds (their image tables differ).",
                         "Verify the files of one `commonlink chains` output folder together.")
    table = read_image_table(inputs[0].path, inputs[0].meta, catalog_root=catalog_root)
    return inputs, table, inputs[0].meta


def config_of(meta: dict) -> ChainConfig:
    known = ChainConfig.__dataclass_fields__
    return ChainConfig(**{k: v for k, v in (meta.get("config") or {}).items() if k in known})


# ---------------------------------------------------------------------------------------------- claims
Claim = tuple[int, str]  #: (image index, concept)


def row_claims(task: str, row: dict) -> Iterator[tuple[int, Claim]]:
    """``(step, claim)`` for every claim of a row; step -1 is a chain's start image (or the whole task)."""
    if task == "single_step":
        positive = row["candidates"][row["answer"]]
        for image in (row["query"], positive, *row["memory"]):
            yield -1, (int(image), row["concept"])
    elif task == "deduction":
        yield -1, (int(row["image_1"]), row["concept"])
        yield -1, (int(row["image_2"]), row["concept"])
    else:
        concepts = row["concepts"]
        codes = step_concept_codes(row["plan"])
        yield -1, (int(row["start"]), concepts[int(codes[0])])
        for t, positive in enumerate(row["positive"]):
            if row["plan"][t] == PLAN_BRIDGE:
                for concept in concepts:
                    yield t, (int(positive), concept)
            else:
                yield t, (int(positive), concepts[int(codes[t])])


def all_claims(inputs: Sequence[TaskInput]) -> list[Claim]:
    """Every distinct claim of the task files, in first-seen order (streamed: rows are not kept)."""
    seen: dict[Claim, None] = {}
    for inp in inputs:
        for row in read_jsonl(inp.path):
            for _, claim in row_claims(inp.task, row):
                seen.setdefault(claim, None)
    return list(seen)


# ---------------------------------------------------------------------------------------------- decisions
@dataclass
class Decision:
    verdict: str  #: "keep" | "reject"
    source: str  #: "model" | "human" | "unverified"
    answer: str | None = None  #: the model's raw answer, or the reviewer's note


def read_decisions(path: str | os.PathLike) -> dict[tuple[str, str], str]:
    """Human decisions ``{(image id, concept): keep|reject}`` from the review export's CSV or saved JSON.

    CSV columns ``image_id, concept, decision`` (others ignored); JSON a list of such objects (what the review
    pages' "Save decisions" button writes). Concept ``*`` applies to every claim of the image. Within one file a
    claim listed twice is rejected if any copy says reject; across files, later files win.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"Decisions file not found: {path}", "Pass the decisions.csv of `commonlink chains review`, or the JSON its pages save.")
    text = path.read_text(encoding="utf-8")
    if path.suffix.lower() == ".json":
        try:
            entries = json.loads(text)
        except json.JSONDecodeError as exc:
            raise SchemaError(f"{path}: not valid JSON ({exc.msg}, line {exc.lineno}).", "Save the decisions again from a review page.") from None
        if isinstance(entries, dict):
            entries = entries.get("decisions", [])
    else:
        entries = list(csv.DictReader(text.splitlines()))
    decisions = {}
    for n, entry in enumerate(entries, start=1):
        if not isinstance(entry, dict) or not {"image_id", "concept", "decision"} <= set(entry):
            raise SchemaError(f"{path}, entry {n}: needs image_id, concept and decision.", "Keep the columns of the exported decisions.csv.")
        verdict = str(entry["decision"]).strip().lower()
        if verdict not in DECISIONS:
            raise SchemaError(f"{path}, entry {n}: decision {entry['decision']!r} is not keep or reject.", "Write keep or reject.")
        key = (str(entry["image_id"]).strip(), str(entry["concept"]).strip())
        # a page shows an image once per step it appears in: one "reject" among its copies is the reviewer's call
        if decisions.get(key) != "reject":
            decisions[key] = verdict
    return decisions


def claim_request_id(image_id: str, concept: str) -> str:
    """The request id of a claim's question (its prediction-cache key, so it must not change between runs)."""
    return f"verify/{image_id}/{concept}"


def verification_request(image, concept: str, concept_kind: str, image_id: str) -> GenerationRequest:
    return GenerationRequest(id=claim_request_id(image_id, concept), images=[image],
                             prompt=[ImageSlot(0), VERIFY_PROMPT.format(kind=concept_kind, concept=concept)],
                             choices=list(VERIFY_CHOICES), multi_select=False)


def ask_model(claims: Sequence[Claim], table: Sequence[LabelledImage], concept_kind: str, backend: Backend,
              cache: PredictionCache, run: str, settings: GenerationSettings, batch_size: int, progress: bool) -> dict[Claim, Decision]:
    """The model's yes/no on every claim (cached answers replayed). Unreadable answers count as rejections."""
    fetcher = ImageFetcher()
    generator = CachedGenerator(backend, cache, settings, run, batch_size)
    decided: dict[Claim, Decision] = {}
    chunks = [claims[i:i + 64] for i in range(0, len(claims), 64)]  # images decoded a chunk at a time
    for chunk in track(chunks, "verify (claims x64)", total=len(chunks), unit="chunks", disable=not progress):
        todo = []
        for claim in chunk:
            hit = generator.cached_answer(claim_request_id(table[claim[0]].id, claim[1]))  # no image opened for a cached claim
            if hit is None:
                todo.append(claim)
            else:
                decided[claim] = _model_decision(hit)
        if not todo:
            continue
        requests = [verification_request(fetcher.open(table[i].origin, table[i].crop, what=f"image {table[i].id}"), c, concept_kind,
                                         table[i].id) for i, c in todo]
        for claim, request, output in zip(todo, requests, generator.answer(requests)):
            if isinstance(output, RequestFailure):
                raise InputError(f"The backend gave no answer for {request.id} ({output.reason}).",
                                 "Lower --batch-size or --max-pixels and rerun: answers so far are cached.")
            decided[claim] = _model_decision(output)
    return decided


def _model_decision(output: str) -> Decision:
    said = parse_yes_no(output)
    return Decision("keep" if said else "reject", "model", output)


# ---------------------------------------------------------------------------------------------- applying
@dataclass
class Drop:
    task: str
    id: str
    step: int | None  #: None: the whole task / chain
    reason: str


@dataclass
class Outcome:
    rows: int = 0
    kept_rows: int = 0
    dropped_rows: int = 0
    steps: int = 0
    kept_steps: int = 0
    redrawn_negatives: int = 0
    drops: list[Drop] = field(default_factory=list)
    resampled: list[Drop] = field(default_factory=list)  #: steps kept with a redrawn positive (or start)


def verified_table(table: Sequence[LabelledImage], rejected: set[Claim]) -> list[LabelledImage]:
    """The image table without the rejected labels (the annotation is judged absent from the image)."""
    gone: dict[int, set[str]] = {}
    for index, concept in rejected:
        gone.setdefault(index, set()).add(concept)
    return [img if i not in gone else LabelledImage(img.id, [lb for lb in img.labels if lb not in gone[i]], img.width, img.height,
                                                     img.origin, img.crop, img.name)
            for i, img in enumerate(table)]


def _describe(claim: Claim, table: Sequence[LabelledImage], decision: Decision) -> str:
    img = table[claim[0]]
    who = "the model" if decision.source == "model" else "a reviewer"
    said = f" (answered {decision.answer.strip()[:60]!r})" if decision.source == "model" and decision.answer else ""
    return f"{who} rejected {claim[1]!r} on image {img.id} ({image_name(img)}){said}"


ON_FAIL = ("drop", "resample")
_ATTEMPTS = 16


@dataclass
class Repair:
    """What a chain's repair may draw from: verified images per concept, and the run's seed and mode."""

    builder: AssociationBuilder
    trusted: dict[str, np.ndarray]  #: concept -> images whose claim for it was kept (verified, or not asked)
    on_fail: str = "drop"

    def pool(self, concepts: Sequence[str]) -> np.ndarray:
        pools = [self.trusted.get(c, np.zeros(0, dtype=np.int32)) for c in concepts]
        out = pools[0]
        for other in pools[1:]:
            out = np.intersect1d(out, other)
        return out


def verify_chain(row: dict, repair: Repair, rejected: dict[Claim, Decision], table, outcome: Outcome, task: str) -> dict | None:
    """The chain with its rejected steps dropped (``on_fail="drop"``) or their positives redrawn from verified
    images (``"resample"``); later steps are repaired to follow on (see :func:`repair_chain`)."""
    n = len(row["positive"])
    outcome.steps += n
    bad = {t: claim for t, claim in row_claims(task, row) if claim in rejected}
    drop: set[int] = set()
    start = int(row["start"])
    reasons = {t: _describe(claim, table, rejected[claim]) for t, claim in bad.items()}
    if repair.on_fail == "drop":
        # A bridge is where an asynchronous chain switches concept: dropping one would strand the next run
        # (its queries lack the new concept), so a rejected bridge is redrawn from verified bridge images.
        for t in sorted(t for t in bad if t >= 0 and row["plan"][t] != PLAN_BRIDGE):
            outcome.drops.append(Drop(task, row["id"], t, reasons[t]))
            drop.add(t)
    if -1 in bad:
        why = "start image: " + _describe(bad[-1], table, rejected[bad[-1]])
        codes = step_concept_codes(row["plan"])
        fresh = _pick(repair.pool([row["concepts"][int(codes[0])]]), {int(row["positive"][0])}, rng_for(repair.builder.config.seed, "verify", row["id"], "start"))
        if fresh is not None:
            start = fresh
            outcome.resampled.append(Drop(task, row["id"], -1, why + "; start redrawn from verified images"))
        else:
            first = next((t for t in range(n) if t not in drop), None)
            if first is None:
                outcome.drops.append(Drop(task, row["id"], None, why))
                return None
            drop.add(first)  # the first kept step's positive becomes the start
            outcome.drops.append(Drop(task, row["id"], first, why + "; this step's positive becomes the start"))
            start = int(row["positive"][first])
    keep = [t for t in range(n) if t not in drop]
    positive = [int(p) for p in row["positive"]]
    negative = [int(q) for q in row["negative"]]
    keep = repair_chain(row, repair, start, keep, positive, negative, outcome, task, reasons)
    warm = int(row["warmup"])
    if not any(t >= warm for t in keep):
        outcome.drops.append(Drop(task, row["id"], None, "no scored step left after verification"))
        return None
    outcome.kept_steps += len(keep)
    return {**row, "start": start, "positive": [positive[t] for t in keep], "negative": [negative[t] for t in keep],
            "answer": [int(row["answer"][t]) for t in keep], "plan": "".join(row["plan"][t] for t in keep),
            "warmup": sum(t < warm for t in keep), "num_steps": len(keep)}


def repair_chain(row: dict, repair: Repair, start: int, keep: list[int], positive: list[int], negative: list[int],
                 outcome: Outcome, task: str, reasons: dict[int, str]) -> list[int]:
    """Make every kept step valid again, first invalid step first: redraw its negative (disjoint from the new
    query) when that suffices, else redraw its positive from the verified images of its pool, else drop it.
    Edits ``positive``/``negative`` in place; returns the kept step indices. ``reasons``: the rejection behind a
    step (resample mode keeps rejected steps: their positive lost the label, so they come up invalid here)."""
    builder = repair.builder
    concepts = row["concepts"]
    codes = step_concept_codes(row["plan"])
    while True:
        text = "".join(row["plan"][t] for t in keep)
        current = [np.asarray([v[t] for t in keep], dtype=np.int32) for v in (positive, negative)]
        invalid = builder.invalid_steps(concepts, text, start, current[0], current[1])
        if not invalid.any():
            return keep
        k = int(np.flatnonzero(invalid)[0])
        t = keep[k]
        query = start if k == 0 else positive[keep[k - 1]]
        rng = rng_for(builder.config.seed, "verify", row["id"], t)

        def valid_with(p: int, q: int) -> bool:
            trial = [current[0].copy(), current[1].copy()]
            trial[0][k], trial[1][k] = p, q
            return not builder.invalid_steps(concepts, text, start, trial[0], trial[1])[k]

        fixed = False
        for _ in range(_ATTEMPTS):
            q = _redraw_negative(builder, row, query, rng)
            if q is not None and valid_with(positive[t], q):
                negative[t] = q
                outcome.redrawn_negatives += 1
                fixed = True
                break
        if not fixed:
            step_concepts = concepts if row["plan"][t] == PLAN_BRIDGE else [concepts[int(codes[t])]]
            avoid = {query, *([positive[keep[k + 1]]] if k + 1 < len(keep) else [])}
            for _ in range(_ATTEMPTS):
                p = _pick(repair.pool(step_concepts), avoid, rng)
                if p is None:
                    break
                q = negative[t] if valid_with(p, negative[t]) else _redraw_negative(builder, row, query, rng)
                if q is not None and valid_with(p, q):
                    positive[t], negative[t] = p, q
                    why = (f"{reasons[t]}; positive redrawn from verified images" if t in reasons else "positive redrawn from "
                           "verified images: after the dropped step(s) the old one no longer linked to its query")
                    outcome.resampled.append(Drop(task, row["id"], t, why))
                    fixed = True
                    break
        if not fixed:
            keep.pop(k)
            why = (f"{reasons[t]}; no verified image to redraw from" if t in reasons else "splice: after the dropped step(s) "
                   "no verified image links this step's query and positive through its concept")
            outcome.drops.append(Drop(task, row["id"], t, why))


def _pick(pool: np.ndarray, avoid: set[int], rng: np.random.Generator) -> int | None:
    """A random image of ``pool`` not in ``avoid`` (None when there is none)."""
    if len(pool) == 0:
        return None
    for _ in range(_ATTEMPTS):
        choice = int(pool[rng.integers(0, len(pool))])
        if choice not in avoid:
            return choice
    left = [int(i) for i in pool if int(i) not in avoid]
    return left[int(rng.integers(0, len(left)))] if left else None


def _redraw_negative(builder: AssociationBuilder, row: dict, query: int, rng: np.random.Generator) -> int | None:
    """A negative for ``query`` from the chain's negative pool, or None if none fits."""
    pool = builder.negative_pool(row["concepts"])
    if builder.config.negatives == "disjoint" and len(pool):
        pool = pool[~builder.index.share_any_label(np.full(len(pool), query, dtype=np.int32), pool)]
    if not len(pool):
        return None
    return int(pool[rng.integers(0, len(pool))])


def verify_row(task: str, row: dict, repair: Repair, rejected: dict[Claim, Decision], table, outcome: Outcome) -> dict | None:
    builder = repair.builder
    outcome.rows += 1
    if task in ("synchronous", "asynchronous"):
        result = verify_chain(row, repair, rejected, table, outcome, task)
    else:
        outcome.steps += 1
        failed = [claim for _, claim in row_claims(task, row) if claim in rejected]
        if failed:
            outcome.drops.append(Drop(task, row["id"], None, _describe(failed[0], table, rejected[failed[0]])))
            result = None
        else:
            outcome.kept_steps += 1
            result = row
            if task == "deduction":  # gold follows the verified labels
                shared = set(builder.index.images[row["image_1"]].labels) & set(builder.index.images[row["image_2"]].labels)
                result = {**row, "gold": [c for c in builder.options if c in shared]}
    if result is None:
        outcome.dropped_rows += 1
        return None
    builder.check_row(task, result)
    outcome.kept_rows += 1
    return result


# ---------------------------------------------------------------------------------------------- entry point
@dataclass
class VerifySummary:
    out_dir: Path
    files: dict[str, Path]
    outcomes: dict[str, Outcome]
    claims: int
    rejected: int
    report: Path


def verify_tasks(tasks: Sequence[str | os.PathLike], out_dir: str | os.PathLike, *, model: str | None = None,
                 backend: str = "transformers", backend_options: dict | None = None, backend_instance: Backend | None = None,
                 decisions: Sequence[str | os.PathLike] | str | os.PathLike | None = None, generation: GenerationSettings | None = None,
                 batch_size: int | None = None, on_fail: str = "drop", progress: bool = True,
                 catalog_root: str | os.PathLike | None = None) -> VerifySummary:
    """Verify the claims of chain files with a model and/or human decisions; write verified chain files.

    ``decisions``: one or more files of human decisions (later files win); they override the model's answers.
    ``on_fail``: ``drop`` removes a chain step whose positive was rejected; ``resample`` redraws that positive
    from the images verified for the step's concept (dropping the step only when none fits).
    """
    if on_fail not in ON_FAIL:
        raise InputError(f"--on-fail {on_fail!r} is not one of {', '.join(ON_FAIL)}.", "Use --on-fail drop or --on-fail resample.")
    if isinstance(decisions, (str, os.PathLike)):
        decisions = [decisions]
    decisions = list(decisions or [])
    if model is None and backend_instance is None and not decisions:
        raise InputError("Nothing to verify with: no --model and no --decisions.",
                         "Pass --model M --backend B (the paper's MLLM verification), --decisions FILE (human review), or both.")
    inputs, table, meta = task_inputs(tasks, catalog_root=catalog_root)
    out_dir = Path(out_dir)
    if any(inp.path.resolve().parent == out_dir.resolve() for inp in inputs):
        raise InputError(f"--out {out_dir} is the folder of the input task files.", "Write the verified files to a new folder.")
    config = config_of(meta)
    concept_kind = meta.get("concept_kind", config.concept_kind)
    claims = all_claims(inputs)
    # human decisions are read first: a bad decisions file is refused before the model runs, not after it
    human: dict[tuple[str, str], str] = {}
    for path in decisions:
        human.update(read_decisions(path))
    ids = {img.id: i for i, img in enumerate(table)}
    unknown = sorted({image_id for image_id, _ in human if image_id not in ids})
    if unknown:
        raise InputError(f"The decisions name image(s) not in this build: {unknown[:5]}.", "Pass the decisions exported from these task files.")
    decided: dict[Claim, Decision] = {}
    model_info = None
    if model is not None or backend_instance is not None:
        generation = generation or GenerationSettings(max_new_tokens=16)
        owned = backend_instance is None
        instance = backend_instance or load_backend(backend, model, **(backend_options or {}))
        try:
            info = instance.info
            run = run_key(task="association/verify", protocol=VERIFY_PROTOCOL, images=meta.get("images_sha256"), model=info.fingerprint,
                          backend=info.backend, settings=generation.to_dict())
            out_dir.mkdir(parents=True, exist_ok=True)
            decided = ask_model(claims, table, concept_kind, instance, PredictionCache(out_dir / CACHE_FILENAME), run, generation,
                                batch_size or info.default_batch_size, progress)
            model_info = {"model": info.model, "fingerprint": info.fingerprint, "backend": info.backend, "generation": generation.to_dict()}
        finally:
            if owned:
                instance.close()
    for claim in claims:
        image_id = table[claim[0]].id
        verdict = human.get((image_id, claim[1])) or human.get((image_id, "*"))
        if verdict is not None:
            decided[claim] = Decision(verdict, "human", decided[claim].answer if claim in decided else None)
        elif claim not in decided:
            decided[claim] = Decision("keep", "unverified")
    rejected = {c: d for c, d in decided.items() if d.verdict == "reject"}

    new_table = verified_table(table, set(rejected))
    index = LabelIndex(new_table)
    # the index sorts by id; the task files index the table as written (sorted by id by the builder)
    if [img.id for img in index.images] != [img.id for img in new_table]:
        raise SchemaError("images.jsonl is not sorted by id as `commonlink chains` writes it.", "Rebuild the chain files.")
    builder = AssociationBuilder(index, config, list(meta.get("options") or []))
    trusted: dict[str, list[int]] = {}
    for (i, concept), decision in decided.items():
        if decision.verdict == "keep":
            trusted.setdefault(concept, []).append(i)
    repair = Repair(builder, {c: np.unique(np.asarray(v, dtype=np.int32)) for c, v in trusted.items()}, on_fail)
    out_dir.mkdir(parents=True, exist_ok=True)
    images_path = out_dir / IMAGES_FILENAME
    with atomic_write(images_path, "w") as handle:
        for i, img in enumerate(new_table):
            handle.write(json.dumps({"index": i, **img.to_json(images_path)}, ensure_ascii=False) + "\n")
    images_sha = write_meta(images_path, {"kind": ASSOCIATION_CHAINS_KIND, "task": IMAGE_TABLE_TASK, "toolkit_version": __version__,
                                          "seed": config.seed, "images": len(new_table)})["sha256"]
    verification = {"protocol": VERIFY_PROTOCOL, "model": model_info, "human_decisions": [str(d) for d in decisions] or None,
                    "prompt": VERIFY_PROMPT, "on_fail": on_fail, "claims": len(claims), "rejected": len(rejected),
                    "rejected_by": dict(Counter(d.source for d in rejected.values())), "report": REPORT_FILENAME}
    outcomes: dict[str, Outcome] = {}
    files: dict[str, Path] = {}
    for inp in inputs:
        outcome = outcomes[inp.task] = Outcome()
        path = task_file(out_dir, inp.task)
        with atomic_write(path, "w") as handle:
            for row in read_jsonl(inp.path):
                kept = verify_row(inp.task, row, repair, rejected, new_table, outcome)
                if kept is not None:
                    handle.write(json.dumps(kept, ensure_ascii=False, separators=(",", ":")) + "\n")
        counts = {k: v for k, v in (inp.meta.get("counts") or {}).items()}
        counts[inp.task] = outcome.kept_rows
        task_meta = {**inp.meta, "rows": outcome.kept_rows, "steps": outcome.kept_steps, "counts": counts,
                     "images_sha256": images_sha, "created": utc_now(),
                     "verification": {**verification, "rows_in": outcome.rows, "rows_dropped": outcome.dropped_rows,
                                      "steps_in": outcome.steps, "steps_kept": outcome.kept_steps,
                                      "negatives_redrawn": outcome.redrawn_negatives, "positives_redrawn": len(outcome.resampled)},
                     "verified_from": str(inp.path.resolve())}
        write_meta(path, task_meta)
        files[inp.task] = path
    report = {
        "toolkit_version": __version__, "created": utc_now(), **verification,
        "tasks": {t: {"rows_in": o.rows, "rows_kept": o.kept_rows, "rows_dropped": o.dropped_rows, "steps_in": o.steps,
                      "steps_kept": o.kept_steps, "negatives_redrawn": o.redrawn_negatives, "positives_redrawn": len(o.resampled)}
                  for t, o in outcomes.items()},
        "decisions": [{"image_id": table[i].id, "name": table[i].name, "concept": c, "decision": d.verdict, "source": d.source,
                       "answer": d.answer} for (i, c), d in decided.items()],
        "drops": [{"task": d.task, "id": d.id, "step": d.step, "reason": d.reason} for o in outcomes.values() for d in o.drops],
        "resampled": [{"task": d.task, "id": d.id, "step": d.step, "reason": d.reason} for o in outcomes.values() for d in o.resampled],
    }
    report_path = out_dir / REPORT_FILENAME
    atomic_write_json(report_path, report)
    atomic_write_text(out_dir / "verification.md", render_verification(report))
    return VerifySummary(out_dir, files, outcomes, len(claims), len(rejected), report_path)


def render_verification(report: dict) -> str:
    """A short Markdown summary of a verification report."""
    who = report["model"]["model"] if report.get("model") else "no model"
    lines = [f"### Verification ({who}{', human decisions' if report.get('human_decisions') else ''})", "",
             f"Claims asked: {report['claims']}; rejected: {report['rejected']} ({report['rejected_by']}).", "",
             "| task | rows in | kept | dropped | steps in | steps kept | positives redrawn | negatives redrawn |",
             "|---|---|---|---|---|---|---|---|"]
    for task, t in report["tasks"].items():
        lines.append(f"| {task} | {t['rows_in']} | {t['rows_kept']} | {t['rows_dropped']} | {t['steps_in']} | {t['steps_kept']} | "
                     f"{t['positives_redrawn']} | {t['negatives_redrawn']} |")
    reasons = Counter(d["reason"].split(":")[0] if d["reason"].startswith(("splice", "start image", "no scored")) else "rejected claim"
                      for d in report["drops"])
    lines += ["", "Drops by reason: " + (", ".join(f"{k}: {v}" for k, v in reasons.items()) or "none") + "."]
    return "\n".join(lines) + "\n"
