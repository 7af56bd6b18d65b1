"""Read the answers other harnesses logged for Common-O, so ``commonlink eval score`` scores them directly.

* **lmms-eval** ``--log_samples`` writes ``<date>_samples_<task>.jsonl`` (``EvaluationTracker.save_results_samples``):
  one line per document with ``doc_id`` (the row's position in the task's dataset, which is the split's row order
  for the tasks ``commonlink export lmms-eval`` writes), ``target``, ``filtered_resps`` and, when the raw answer
  differs from the filtered one, ``resps``; with one request per document both are flattened (``[[a]]`` ->
  ``[a]``, ``[a]`` -> ``a``). Current versions drop ``doc``; older ones (and the copy under a commonlink run's
  ``lmms_eval/``) keep it, and then it gives the row's id and facts.
* **VLMEvalKit** writes a prediction table (xlsx by default, tsv or json with ``PRED_FORMAT``): the exported TSV's
  columns plus ``prediction``; a row it got no answer for holds ``Failed to obtain answer...`` and is left out
  (listed as skipped), as ``commonlink eval`` leaves out requests its backend could not answer.

:func:`read_harness_answers` returns :class:`HarnessAnswers`: per answer the row's id (or its position when the
file does not say) and, when the file carries it, the row's fields (``doc``) scoring needs.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from commonlink.errors import InputError

__all__ = [
    "LMMS_EVAL_TASK_SPLITS",
    "VLMEVAL_DATASET_SPLITS",
    "VLMEVAL_FAIL_MARKER",
    "HarnessAnswers",
    "prediction_file_kind",
    "read_harness_answers",
    "table_cell",
    "table_rows",
    "vlmeval_doc",
]

#: What VLMEvalKit writes as the prediction of a row it could not get an answer for
#: (``vlmeval.smp.file.INFER_FAIL_MSG``, the start of its API and ``SKIP_ERR`` failure texts). Such rows are left
#: out of the scores and counted as ``failed``, as ``commonlink eval`` leaves out requests its backend could not
#: answer.
VLMEVAL_FAIL_MARKER = "Failed to obtain answer"


@dataclass
class HarnessAnswers:
    kind: str  #: lmms-eval | vlmevalkit
    answers: list[dict] = field(
        default_factory=list
    )  #: {"id" or None, "row", "raw_output", "doc" (the row's fields) or None, "target"/"prompt" (text) or None}
    failed: list[dict] = field(default_factory=list)  #: answers the harness did not get (left out, with the reason)
    task: str | None = None  #: the harness's task / dataset name, where the file's name says it
    split: str | None = None  #: the Common-O split that task is (``common_o_challenge`` -> ``challenge``)


#: lmms-eval task names of the splits ``commonlink export lmms-eval`` writes (others: ``common_o_SPLIT``)
LMMS_EVAL_TASK_SPLITS = {"common_o": "main", "common_o_challenge": "challenge"}
#: VLMEvalKit dataset names of the splits ``commonlink export vlmevalkit`` writes (others: ``CommonO_SPLIT``)
VLMEVAL_DATASET_SPLITS = {"CommonO": "main", "CommonO_Challenge": "challenge"}


def _task_from_name(path: Path, kind: str) -> tuple[str | None, str | None]:
    """(task, split) as the file's name says them: lmms-eval's ``<date>_samples_<task>.jsonl``, VLMEvalKit's
    ``<model>_<dataset>.xlsx``; (None, None) when the name does not say."""
    stem = path.stem
    if kind == "lmms-eval":
        if "samples_" not in stem:
            return None, None
        task = stem.rsplit("samples_", 1)[1]
        if task in LMMS_EVAL_TASK_SPLITS:
            return task, LMMS_EVAL_TASK_SPLITS[task]
        if task.startswith("association"):
            return task, None
        if task.startswith("common_o_") and not task.endswith("_perception"):
            return task, task.removeprefix("common_o_")
        return task, None
    if "CommonO" not in stem:
        return None, None
    dataset = "CommonO" + stem.rsplit("CommonO", 1)[1]
    if dataset in VLMEVAL_DATASET_SPLITS:
        return dataset, VLMEVAL_DATASET_SPLITS[dataset]
    if dataset.startswith("CommonO_Assoc"):
        return dataset, None
    return dataset, dataset.removeprefix("CommonO_") or None


def prediction_file_kind(path: str | Path) -> str:
    """``commonlink`` (our predictions.jsonl), ``lmms-eval`` (a samples file) or ``vlmevalkit`` (a prediction table)."""
    path = Path(path)
    if path.suffix.lower() in (".xlsx", ".tsv", ".csv"):
        return "vlmevalkit"
    if path.suffix.lower() == ".json":
        return "vlmevalkit"  # PRED_FORMAT=json: a list of row records
    with path.open(encoding="utf-8") as handle:
        first = next((line for line in handle if line.strip()), "")
    try:
        line = json.loads(first) if first else {}
    except ValueError:
        return "commonlink"  # the reader names the bad line
    if isinstance(line, dict) and "doc_id" in line and ("filtered_resps" in line or "resps" in line):
        return "lmms-eval"
    return "commonlink"


def _first_text(value):
    """The answer inside lmms-eval's (possibly flattened) response lists."""
    while isinstance(value, list):
        if not value:
            return None
        value = value[0]
    return value


def _read_lmms_eval(path: Path) -> HarnessAnswers:
    out = HarnessAnswers("lmms-eval")
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            sample = json.loads(line)
        except ValueError as exc:
            raise InputError(
                f"{path}, line {n}: not JSON ({exc}).", "Give the samples file lmms-eval wrote with --log_samples."
            ) from exc
        raw = _first_text(sample.get("resps")) if "resps" in sample else _first_text(sample.get("filtered_resps"))
        if raw is not None and not isinstance(raw, str):
            raise InputError(
                f"{path}, line {n}: the response is {type(raw).__name__}, not text.",
                "Give the samples file of a generate_until task (the Common-O tasks `commonlink export lmms-eval` "
                "writes).",
            )
        doc = sample.get("doc") or None
        # the prompt sent: today's lmms-eval keeps it in "input", older ones (and ours) in "arguments"
        prompt = _first_text(sample["input"] if "input" in sample else sample.get("arguments"))
        target = sample.get("target")
        out.answers.append(
            {
                "id": (doc or {}).get("id"),
                "row": int(sample["doc_id"]),
                "raw_output": raw or "",
                "doc": doc,
                "target": None if target is None else str(target),
                "prompt": prompt if isinstance(prompt, str) else None,
            }
        )
    rows = Counter(a["row"] for a in out.answers)
    doubled = sorted(r for r, c in rows.items() if c > 1)
    if doubled:
        raise InputError(
            f"{path} lists doc_id {', '.join(map(str, doubled[:5]))} more than once; "
            "each document must be scored once.",
            "Give one task's samples file of one run (not several concatenated).",
        )
    return out


def table_cell(value) -> str:
    """A prediction-table cell as text: VLMEvalKit's xlsx/tsv round trip turns an empty string into NaN."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return str(value)


def table_rows(table) -> list[dict]:
    """Rows of what ``vlmeval.smp.load`` returns for a prediction file: a DataFrame (xlsx, tsv) or, for
    ``PRED_FORMAT=json``, the list of row dicts its ``dump`` wrote."""
    if isinstance(table, list):
        return [dict(r) for r in table]
    return [dict(r) for _, r in table.iterrows()]


def vlmeval_doc(row: dict) -> dict:
    """The published-schema fields of a Common-O line of our exported TSV (what scoring needs)."""
    return {
        "choices": row["choices"],
        "ground_truth_objects": row["ground_truth_objects"],
        "id": table_cell(row.get("id")) or str(row["index"]),
        "real_or_synthetic": table_cell(row.get("real_or_synthetic")) or None,
        **{k: int(float(row[k])) for k in ("num_objects_image_1", "num_objects_image_2") if table_cell(row.get(k))},
    }


def _read_table(path: Path):
    """What ``vlmeval.smp.load`` reads: xlsx and tsv through pandas, json as a list of records."""
    if path.suffix.lower() == ".json":
        return json.loads(path.read_text(encoding="utf-8"))
    import pandas as pd

    if path.suffix.lower() == ".xlsx":
        return pd.read_excel(path)
    return pd.read_csv(path, sep="\t" if path.suffix.lower() == ".tsv" else ",")


def _read_vlmevalkit(path: Path) -> HarnessAnswers:
    rows = table_rows(_read_table(path))
    if not rows or "prediction" not in rows[0]:
        raise InputError(
            f"{path}: no 'prediction' column; not a VLMEvalKit prediction file.",
            "Give the <model>_<dataset>.xlsx (or .tsv/.json) VLMEvalKit writes after inference.",
        )
    if "segments" in rows[0]:
        raise InputError(
            f"{path} is an association prediction file.",
            "`eval score` rescores Common-O; VLMEvalKit's own evaluate step scores association.",
        )
    has_facts = "choices" in rows[0] and "ground_truth_objects" in rows[0]
    out = HarnessAnswers("vlmevalkit")
    for row in rows:
        prediction, ident, index = (
            table_cell(row.get("prediction")),
            table_cell(row.get("id")) or None,
            int(float(row["index"])),
        )
        if VLMEVAL_FAIL_MARKER in prediction:
            out.failed.append({"row": index, "id": ident, "reason": prediction[:200]})
            continue
        out.answers.append(
            {"id": ident, "row": index, "raw_output": prediction, "doc": vlmeval_doc(row) if has_facts else None}
        )
    return out


def _looks_like_association(answers: HarnessAnswers) -> bool:
    targets = [a.get("target") for a in answers.answers if a.get("target") is not None]
    return bool(targets) and all(t.startswith("Image") and t[5:].isdigit() for t in targets)


def _refuse_association_samples(path: Path, task: str | None) -> None:
    if task is not None and task.startswith("association"):
        raise InputError(
            f"{path} is an lmms-eval association samples file (task {task}): association samples are not supported "
            "by `eval score`, which rescores Common-O.",
            "Read lmms-eval's own acc for it (its aggregation is our avg_success_ratio), or run `commonlink eval "
            "association --config single_step` on the same chains to get commonlink's results.",
        )


def read_harness_answers(path: str | Path) -> HarnessAnswers:
    """The answers in an lmms-eval samples file or a VLMEvalKit prediction file (see the module doc)."""
    path = Path(path)
    kind = prediction_file_kind(path)
    if kind == "commonlink":
        raise InputError(f"{path} is neither an lmms-eval samples file nor a VLMEvalKit prediction file.")
    task, split = _task_from_name(path, kind)
    if kind == "lmms-eval":
        _refuse_association_samples(path, task)
    answers = _read_lmms_eval(path) if kind == "lmms-eval" else _read_vlmevalkit(path)
    answers.task, answers.split = task, split
    if kind == "lmms-eval" and task is None and _looks_like_association(answers):
        _refuse_association_samples(path, "association (by its Image1/Image2 targets)")
    if not answers.answers:
        raise InputError(f"{path} holds no answers.", "Give the file of a run that answered rows.")
    return answers
