"""The association report page of one run: a card per chain with its last steps (query, candidates, the
model's pick, the memory text it was shown, the raw output), or a card per single-step or deduction task."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from html import escape
from pathlib import Path

from commonlink.errors import CommonlinkError, InputError
from commonlink.eval.report.images import ImageJob, ThumbnailStore, text_key
from commonlink.eval.report.page import PAGE_SIZE, iter_records, run_labels, runs_table, truncate
from commonlink.kinds.association.loader import open_association
from commonlink.kinds.association.memory import MemoryBase
from commonlink.kinds.association.report_metrics import association_metrics_html
from commonlink.progress import make_progress
from commonlink.seeding import rng_for

_CHAIN_CONFIGS = ("synchronous", "asynchronous")


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
            "Pass --data with the release or chain files the run used (the association page needs them for its images "
            "too).",
        ) from exc
    recorded = info.get("fingerprint")
    if recorded and split.fingerprint and split.fingerprint != recorded:
        raise InputError(
            f"{split.source_name} [{config}] is not the data of {run['_path']} (fingerprint {split.fingerprint[:12]}, "
            f"the run recorded {recorded[:12]}).",
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
    return [truncate(v, limit)[0] for v in (values or [])]


def association_page(
    run: dict,
    thumbs: ThumbnailStore,
    *,
    chain_steps: int,
    data,
    revision,
    seed,
    max_output_chars,
    dataset,
    progress,
    catalog_root=None,
) -> tuple[dict, int]:
    config = str(run["task"]).split("/", 1)[1]
    settings = run.get("association") or {}
    chains = config in _CHAIN_CONFIGS
    log = Path(run["_dir"]) / ("steps.jsonl" if chains else "predictions.jsonl")
    entries = list(iter_records(log, ("chain", "step", "correct") if chains else ("id", "concept"), "association"))
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
    with make_progress("tasks", disable=not progress) as bars:
        job = bars.add_task("report images", total=len(by_task))
        for task_id, task_entries in by_task.items():
            task = tasks[task_id]
            card = (
                _chain_card(task, task_entries, split, thumbs, settings, chain_steps, max_output_chars)
                if chains
                else _task_card(task, task_entries[0], split, thumbs, config, max_output_chars)
            )
            cards.append(card)
            bars.advance(job)
    labels = run_labels([run])
    info = run.get("dataset") or {}
    subtitle = (
        f"{escape(config)} tasks of {escape(str(info.get('source', '?')))} · memory "
        f"<b>{escape(str(settings.get('memory', '?')))}</b>"
        f" · {len(cards)} {'chains' if chains else 'tasks'}"
    )
    metrics = association_metrics_html(run, chains)
    failures = [k for k, card in enumerate(cards) if not card["ok"]]
    order = rng_for(seed, "report", "mistakes").permutation(len(failures)) if failures else []
    page = {
        "title": f"Association ({config}): {labels[0]}",
        "subtitle": subtitle,
        "metrics": metrics,
        "runs": runs_table([run], labels),
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
