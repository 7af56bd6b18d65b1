"""MLLM verification and human review of association task files (Labyrinth of Links §4.2 and App. A.1).

The paper refines its chains in three steps: a resolution filter (``--min-pixels`` of ``commonlink chains``),
an *MLLM verification* that asks whether each annotation is present in the image ("This process begins with
Gemini-1.5-Flash, then GPT4-V once Gemini-1.5-Flash is unable to reach a decision", App. A.1), and a *human
review* that removes what people judge wrong.

:func:`verify_tasks` collects every distinct claim of the task files (:mod:`.claims`: the
images a task says show its concept, and the negatives it says do not), asks the **first** verifier model about
each (``Does this image show the attribute "metal"? ... Options: [Yes, No].``), asks the **next** model only
about the claims the previous ones left *undecided* (no readable yes or no), and so on. Answers are cached in
the output folder, so a killed run resumes. Human decisions (read back from the review export, see
:mod:`.review`) override the models on presence claims. A claim no verifier decided is kept
(``undecided="keep"``, the default: the dataset's label stands) or rejected (``"reject"``); either way it is
reported as *undecided*, never as rejected. :mod:`.repair` then applies the rejections.

The output folder is a set of chain files (images.jsonl + TASK.jsonl + sidecars with a ``verification``
block) that ``commonlink release build`` takes as it is, plus ``verification.json`` (every claim's answers and
decision, every drop with its reason) and ``verification.md``.
"""

from __future__ import annotations

import csv
import json
import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from commonlink import __version__
from commonlink.errors import InputError, SchemaError
from commonlink.eval.backends import Backend, GenerationSettings
from commonlink.eval.cache import PredictionCache
from commonlink.fileio import (
    atomic_write,
    atomic_write_json,
    atomic_write_text,
    loads_user_json,
    read_jsonl,
    read_user_text,
)
from commonlink.formats.meta import ASSOCIATION_CHAINS_KIND, utc_now, write_meta
from commonlink.kinds.association.chains import AssociationBuilder, ChainConfig, LabelIndex
from commonlink.kinds.association.format import (
    IMAGE_TABLE_TASK,
    IMAGES_FILENAME,
    TASKS,
    LabelledImage,
    read_chain_meta,
    read_image_table,
    task_file,
)
from commonlink.kinds.association.refine.claims import (
    Claim,
    Decision,
    row_claims,
    task_claims,
)
from commonlink.kinds.association.refine.pool_verify import (
    VERIFY_PROTOCOLS,
    check_protocol,
    harness_verification,
    pool_claims,
    rebuild_from_verified,
    who_verified,
)
from commonlink.kinds.association.refine.repair import (
    ON_FAIL,
    Outcome,
    Repair,
    verified_table,
    verify_row,
)
from commonlink.kinds.association.refine.verifiers import VERIFY_PROMPT, VERIFY_PROTOCOL, ask_verifiers, verifiers_of
from commonlink.locks import output_lock

__all__ = ["ON_FAIL", "UNDECIDED", "VERIFY_PROMPT", "VERIFY_PROTOCOLS", "row_claims", "task_inputs", "verify_tasks"]

REPORT_FILENAME = "verification.json"
CACHE_FILENAME = "verify-answers.cache"  # JSON lines, but not *.jsonl: `release build OUT/*.jsonl` must not take it
DECISIONS = ("keep", "reject")
UNDECIDED = ("keep", "reject")  #: what happens to a claim no verifier decided


# ---------------------------------------------------------------------------------------------- inputs
@dataclass
class TaskInput:
    task: str
    path: Path
    meta: dict


def task_inputs(
    paths: Sequence[str | os.PathLike], *, catalog_root=None
) -> tuple[list[TaskInput], list[LabelledImage], dict]:
    """The task files named (a folder means every task file in it), their image table and its meta.

    All must come from one ``commonlink chains`` build (one image table), as a release does.
    """
    files: list[Path] = []
    for given in paths:
        path = Path(given)
        if path.is_dir():
            found = [task_file(path, t) for t in TASKS if task_file(path, t).is_file()]
            if not found:
                raise InputError(
                    f"{path}: no task file ({', '.join(t + '.jsonl' for t in TASKS)}) in this folder.",
                    "Pass the --out folder of `commonlink chains`, or its TASK.jsonl files.",
                )
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
        raise InputError(
            "No task file given.", "Pass the --out folder of `commonlink chains`, or its TASK.jsonl files."
        )
    tasks = Counter(i.task for i in inputs)
    if max(tasks.values()) > 1:
        raise InputError(
            f"Two files hold the same task type ({[t for t, n in tasks.items() if n > 1]}).",
            "Verify one build at a time (one file per task type).",
        )
    shas = {i.meta.get("images_sha256") for i in inputs}
    if len(shas) > 1:
        raise InputError(
            "The task files come from different builds (their image tables differ).",
            "Verify the files of one `commonlink chains` output folder together.",
        )
    table = read_image_table(inputs[0].path, inputs[0].meta, catalog_root=catalog_root)
    return inputs, table, inputs[0].meta


def config_of(meta: dict) -> ChainConfig:
    known = ChainConfig.__dataclass_fields__
    return ChainConfig(**{k: v for k, v in (meta.get("config") or {}).items() if k in known})


# ---------------------------------------------------------------------------------------------- claims
def all_claims(inputs: Sequence[TaskInput], negatives: bool = True) -> list[Claim]:
    """Every distinct claim of the task files, in first-seen order (streamed: rows are not kept)."""
    seen: dict[Claim, None] = {}
    for inp in inputs:
        for row in read_jsonl(inp.path):
            for _, claim in task_claims(inp.task, row, negatives):
                seen.setdefault(claim, None)
    return list(seen)


# ---------------------------------------------------------------------------------------------- decisions
def read_decisions(path: str | os.PathLike) -> dict[tuple[str, str], str]:
    """Human decisions ``{(image id, concept): keep|reject}`` from the review export's CSV or saved JSON.

    CSV columns ``image_id, concept, decision`` (others ignored); JSON a list of such objects (what the review
    pages' "Save decisions" button writes). Concept ``*`` applies to every claim of the image. Within one file a
    claim listed twice is rejected if any copy says reject; across files, later files win.
    """
    path = Path(path)
    fix = "Pass the decisions.csv of `commonlink chains review`, or the JSON its pages save."
    text = read_user_text(path, "Decisions file", fix)
    if path.suffix.lower() == ".json":
        entries = loads_user_json(text, path, "Save the decisions again from a review page.")
        if isinstance(entries, dict):
            entries = entries.get("decisions", [])
    else:
        entries = list(csv.DictReader(text.splitlines()))
    decisions = {}
    for n, entry in enumerate(entries, start=1):
        if not isinstance(entry, dict) or not {"image_id", "concept", "decision"} <= set(entry):
            raise SchemaError(
                f"{path}, entry {n}: needs image_id, concept and decision.",
                "Keep the columns of the exported decisions.csv.",
            )
        verdict = str(entry["decision"]).strip().lower()
        if verdict not in DECISIONS:
            raise SchemaError(
                f"{path}, entry {n}: decision {entry['decision']!r} is not keep or reject.", "Write keep or reject."
            )
        key = (str(entry["image_id"]).strip(), str(entry["concept"]).strip())
        # a page shows an image once per step it appears in: one "reject" among its copies is the reviewer's call
        if decisions.get(key) != "reject":
            decisions[key] = verdict
    return decisions


def final_decisions(
    claims: Sequence[Claim],
    table: Sequence[LabelledImage],
    decided: dict[Claim, Decision],
    human: dict[tuple[str, str], str],
) -> dict[Claim, Decision]:
    """Every claim's decision: a human decision (presence claims only: review pages show no negatives) beats
    the models; a claim nobody was asked about stands ("unverified")."""
    out = {}
    for claim in claims:
        image_id, present = table[claim[0]].id, claim[1] in table[claim[0]].labels
        verdict = (human.get((image_id, claim[1])) or human.get((image_id, "*"))) if present else None
        model = decided.get(claim)
        if verdict is not None:
            out[claim] = Decision(
                verdict, "human", model.answer if model else None, present, None, model.asked if model else []
            )
        else:
            out[claim] = model or Decision("keep", "unverified", present=present)
    return out


# ---------------------------------------------------------------------------------------------- entry point
@dataclass
class VerifySummary:
    out_dir: Path
    files: dict[str, Path]
    outcomes: dict[str, Outcome]
    claims: int
    rejected: int
    undecided: int
    report: Path


def _human_decisions(decisions, table: Sequence[LabelledImage]) -> tuple[list[str], dict[tuple[str, str], str]]:
    """The decision files (later files win), read before any model runs: a bad file must not cost that pass."""
    paths = [decisions] if isinstance(decisions, (str, os.PathLike)) else list(decisions or [])
    human: dict[tuple[str, str], str] = {}
    for path in paths:
        human.update(read_decisions(path))
    ids = {img.id for img in table}
    unknown = sorted({image_id for image_id, _ in human if image_id not in ids})
    if unknown:
        raise InputError(
            f"The decisions name image(s) not in this build: {unknown[:5]}.",
            "Pass the decisions exported from these task files.",
        )
    return [str(p) for p in paths], human


def _repair_for(
    table: Sequence[LabelledImage],
    meta: dict,
    config: ChainConfig,
    decided: dict[Claim, Decision],
    rejected: dict[Claim, Decision],
    on_fail: str,
) -> tuple[list[LabelledImage], Repair]:
    """The verified image table, and what repairs draw from: per concept, the images verified (or assumed) to
    show it."""
    new_table = verified_table(table, rejected)
    index = LabelIndex(new_table)
    # the index sorts by id; the task files index the table as written (sorted by id by the builder)
    if [img.id for img in index.images] != [img.id for img in new_table]:
        raise SchemaError(
            "images.jsonl is not sorted by id as `commonlink chains` writes it.", "Rebuild the chain files."
        )
    builder = AssociationBuilder(index, config, list(meta.get("options") or []))
    trusted: dict[str, list[int]] = {}
    for i, concept in decided:  # the verified labels: kept presence claims, and negatives a verifier saw it on
        if concept in new_table[i].labels:
            trusted.setdefault(concept, []).append(i)
    return new_table, Repair(
        builder, {c: np.unique(np.asarray(v, dtype=np.int32)) for c, v in trusted.items()}, on_fail
    )


def _write_verified(
    inputs: Sequence[TaskInput],
    out_dir: Path,
    new_table: Sequence[LabelledImage],
    repair: Repair,
    rejected: dict[Claim, Decision],
    verification: dict,
) -> tuple[dict[str, Outcome], dict[str, Path]]:
    """The verified image table and task files, each with its meta sidecar."""
    images_path = out_dir / IMAGES_FILENAME
    with atomic_write(images_path, "w") as handle:
        for i, img in enumerate(new_table):
            handle.write(json.dumps({"index": i, **img.to_json(images_path)}, ensure_ascii=False) + "\n")
    images_sha = write_meta(
        images_path,
        {
            "kind": ASSOCIATION_CHAINS_KIND,
            "task": IMAGE_TABLE_TASK,
            "toolkit_version": __version__,
            "seed": repair.builder.config.seed,
            "images": len(new_table),
        },
    )["sha256"]
    outcomes: dict[str, Outcome] = {}
    files: dict[str, Path] = {}
    for inp in inputs:
        outcome = outcomes[inp.task] = Outcome()
        path = files[inp.task] = task_file(out_dir, inp.task)
        with atomic_write(path, "w") as handle:
            for row in read_jsonl(inp.path):
                kept = verify_row(inp.task, row, repair, rejected, new_table, outcome)
                if kept is not None:
                    handle.write(json.dumps(kept, ensure_ascii=False, separators=(",", ":")) + "\n")
        counts = {**(inp.meta.get("counts") or {}), inp.task: outcome.kept_rows}
        write_meta(
            path,
            {
                **inp.meta,
                "rows": outcome.kept_rows,
                "steps": outcome.kept_steps,
                "counts": counts,
                "images_sha256": images_sha,
                "created": utc_now(),
                "verification": {**verification, **outcome_counts(outcome)},
                "verified_from": str(inp.path.resolve()),
            },
        )
    return outcomes, files


def outcome_counts(o: Outcome) -> dict:
    return {
        "rows_in": o.rows,
        "rows_kept": o.kept_rows,
        "rows_dropped": o.dropped_rows,
        "steps_in": o.steps,
        "steps_kept": o.kept_steps,
        "negatives_redrawn": o.redrawn_negatives,
        "positives_redrawn": len(o.resampled),
    }


def _report(
    table, decided: dict[Claim, Decision], outcomes: dict[str, Outcome], verification: dict, undecided: str
) -> dict:
    def drops(attr: str) -> list[dict]:
        return [
            {"task": d.task, "id": d.id, "step": d.step, "reason": d.reason}
            for o in outcomes.values()
            for d in getattr(o, attr)
        ]

    return {
        "toolkit_version": __version__,
        "created": utc_now(),
        **verification,
        "tasks": {t: outcome_counts(o) for t, o in outcomes.items()},
        "decisions": [
            {
                "image_id": table[i].id,
                "name": table[i].name,
                "concept": c,
                "claim": "present" if d.present else "absent",
                "decision": d.verdict,
                "applied": d.applied(undecided),
                "source": d.source,
                "model": d.model,
                "answer": d.answer,
                "asked": d.asked,
            }
            for (i, c), d in decided.items()
        ],
        "drops": drops("drops"),
        "resampled": drops("resampled"),
    }


def verify_tasks(
    tasks: Sequence[str | os.PathLike],
    out_dir: str | os.PathLike,
    *,
    models: Sequence[str] | str | None = None,
    backend: Sequence[str] | str = "transformers",
    backend_options: dict | Sequence[dict] | None = None,
    backend_instances: Sequence[Backend] | Backend | None = None,
    decisions: Sequence[str | os.PathLike] | str | os.PathLike | None = None,
    generation: GenerationSettings | None = None,
    batch_size: int | None = None,
    on_fail: str | None = None,
    undecided: str | None = None,
    negatives: bool | None = None,
    progress: bool = True,
    catalog_root: str | os.PathLike | None = None,
    protocol: str = "paper",
) -> VerifySummary:
    """Verify the claims of chain files with ordered verifier models and/or human decisions; write verified files.

    ``models`` (or ``backend_instances``): the verifiers in order; each later one is asked only where every
    earlier one was undecided. ``decisions``: files of human decisions (later files win); they override the
    models. ``on_fail``: ``resample`` (default) or ``drop``, see :mod:`.repair`. ``undecided``:
    ``keep`` or ``reject`` a claim no verifier decided. ``negatives``: also ask whether negatives show the concept.
    ``catalog_root``: where the catalogs of the chain files' images are now (``--catalog-root``).

    ``protocol``: ``paper`` (default, the authors' harness): every image of the build's concept and bridge pools
    is asked the harness's question (its crop at 336 x 336), a claim stands only where a verifier answered Yes
    (undecided counts as No), an image with a claim that does not stand leaves the build, and the chains are
    rebuilt from the filtered pools with the build's own settings; ``on_fail``, ``undecided`` and ``negatives``
    belong to ``strict`` (ours: the built tasks' claims, post-hoc repair) and are refused under ``paper``.
    """
    paper = check_protocol(protocol, on_fail=on_fail, undecided=undecided, negatives=negatives) == "paper"
    on_fail = "resample" if on_fail is None else on_fail
    undecided = ("reject" if paper else "keep") if undecided is None else undecided
    negatives = not paper if negatives is None else negatives
    if on_fail not in ON_FAIL:
        raise InputError(
            f"--on-fail {on_fail!r} is not one of {', '.join(ON_FAIL)}.", "Use --on-fail resample or --on-fail drop."
        )
    if undecided not in UNDECIDED:
        raise InputError(
            f"--undecided {undecided!r} is not one of {', '.join(UNDECIDED)}.",
            "Use --undecided keep or --undecided reject.",
        )
    verifiers = verifiers_of(models, backend, backend_options, backend_instances)
    if not len(verifiers) and not decisions:
        raise InputError(
            "Nothing to verify with: no --model and no --decisions.",
            "Pass --model M --backend B (the paper's MLLM verification; repeat --model for a fallback), "
            "--decisions FILE (human review), or both.",
        )
    inputs, table, meta = task_inputs(tasks, catalog_root=catalog_root)
    out_dir = Path(out_dir)
    if any(inp.path.resolve().parent == out_dir.resolve() for inp in inputs):
        raise InputError(
            f"--out {out_dir} is the folder of the input task files.", "Write the verified files to a new folder."
        )
    with output_lock(out_dir, what="commonlink chains verify"):  # one writer of the folder (answers cache, files)
        config = config_of(meta)
        claims = (
            pool_claims(table, meta.get("options") or config.concepts or []) if paper else all_claims(inputs, negatives)
        )
        decision_files, human = _human_decisions(decisions, table)
        generation = generation or GenerationSettings(max_new_tokens=16)
        decided, model_infos = _ask(
            claims, table, meta, config, verifiers, out_dir, generation, batch_size, progress, paper
        )
        decided = final_decisions(claims, table, decided, human)
        if paper:
            verification = harness_verification(decided, claims, model_infos, generation, decision_files)
            leaving, built, outcomes = rebuild_from_verified(
                table, decided, inputs, config, out_dir, verification, progress
            )
            files = built.files
        else:
            rejected = {c: d for c, d in decided.items() if d.applied(undecided) == "reject"}
            new_table, repair = _repair_for(table, meta, config, decided, rejected, on_fail)
            out_dir.mkdir(parents=True, exist_ok=True)
            verification = _strict_verification(
                decided, claims, model_infos, generation, decision_files, on_fail, undecided, negatives
            )
            outcomes, files = _write_verified(inputs, out_dir, new_table, repair, rejected, verification)
        report = _report(table, decided, outcomes, verification, undecided)
        if paper:
            report["images_left_out"] = leaving
        report_path = out_dir / REPORT_FILENAME
        atomic_write_json(report_path, report)
        atomic_write_text(out_dir / "verification.md", render_verification(report))
        return VerifySummary(
            out_dir, files, outcomes, len(claims), verification["rejected"], verification["undecided"], report_path
        )


def _ask(claims, table, meta, config, verifiers, out_dir, generation, batch_size, progress, harness):
    """The verifiers' decisions on ``claims`` (none without a model), answers cached in ``out_dir``."""
    if not len(verifiers):
        return {}, []
    out_dir.mkdir(parents=True, exist_ok=True)
    cache = PredictionCache(out_dir / CACHE_FILENAME)
    try:
        return ask_verifiers(
            claims,
            table,
            meta.get("concept_kind", config.concept_kind),
            verifiers,
            cache,
            meta.get("images_sha256"),
            generation,
            batch_size,
            progress,
            harness=harness,
        )
    finally:
        cache.sync()  # the last answers durable and the file closed, as the evaluator does at a run's end


def _strict_verification(decided, claims, model_infos, generation, decision_files, on_fail, undecided, negatives):
    """The ``verification`` block of the strict protocol (post-hoc repair)."""
    verdicts = Counter(d.verdict for d in decided.values())
    return {
        "protocol": VERIFY_PROTOCOL,
        "verify_protocol": "strict",
        **who_verified(model_infos, generation, decision_files),
        "prompt": VERIFY_PROMPT,
        "on_fail": on_fail,
        "undecided_rule": undecided,
        "negatives_asked": negatives,
        "claims": len(claims),
        "absence_claims": sum(not d.present for d in decided.values()),
        "rejected": verdicts["reject"],
        "undecided": verdicts["undecided"],
        "rejected_by": dict(Counter(d.source for d in decided.values() if d.verdict == "reject")),
        "report": REPORT_FILENAME,
    }


def render_verification(report: dict) -> str:
    """A short Markdown summary of a verification report."""
    models = report.get("models") or []
    who = " then ".join(m["model"] for m in models) or "no model"
    lines = [
        f"### Verification ({who}{', human decisions' if report.get('human_decisions') else ''})",
        "",
        (
            f"Claims asked: {report['claims']} ({report.get('absence_claims', 0)} about negatives); "
            f"rejected: {report['rejected']} ({report['rejected_by']}); undecided: {report.get('undecided', 0)} "
            f"(applied: {report.get('undecided_rule', 'keep')})."
        ),
        "",
    ]
    lines += [f"- {m['model']}: asked {m['asked']}, left undecided {m['undecided']}" for m in models]
    lines += [
        "",
        "| task | rows in | kept | dropped | steps in | steps kept | positives redrawn | negatives redrawn |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for task, t in report["tasks"].items():
        lines.append(
            f"| {task} | {t['rows_in']} | {t['rows_kept']} | {t['rows_dropped']} | {t['steps_in']} "
            f"| {t['steps_kept']} | {t['positives_redrawn']} | {t['negatives_redrawn']} |"
        )
    reasons = Counter(
        d["reason"].split(":")[0]
        if d["reason"].startswith(("splice", "start image", "no scored", "cut", "invalid"))
        else "rejected claim"
        for d in report["drops"]
    )
    lines += ["", "Drops by reason: " + (", ".join(f"{k}: {v}" for k, v in reasons.items()) or "none") + "."]
    return "\n".join(lines) + "\n"
