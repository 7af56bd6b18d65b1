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
file does not say) and, when the file carries them, the facts scoring needs.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from commonlink.errors import InputError

__all__ = ["HarnessAnswers", "prediction_file_kind", "read_harness_answers"]

#: The fields of a row that scoring a Common-O answer needs (what our predictions.jsonl keeps for it).
FACT_FIELDS = ("id", "row_index", "source", "num_objects_image_1", "num_objects_image_2", "num_choices", "choices", "ground_truth",
               "ground_truth_letters")


@dataclass
class HarnessAnswers:
    kind: str  #: lmms-eval | vlmevalkit
    answers: list[dict] = field(default_factory=list)  #: {"id" or None, "row" or None, "raw_output", "facts" or None}
    failed: list[dict] = field(default_factory=list)  #: answers the harness did not get (left out, with the reason)


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


def _facts_from_doc(doc: dict | None) -> dict | None:
    if not doc:
        return None
    if all(k in doc for k in FACT_FIELDS if k != "row_index"):
        return {k: doc[k] for k in FACT_FIELDS if k in doc}
    if "choices" in doc and "ground_truth_objects" in doc:  # a published-schema row (lmms-eval dropped only the images)
        from commonlink.eval.commono import _example_meta as example_meta
        from commonlink.loaders.common_o import example_from_row

        return example_meta(example_from_row(doc, images=False))
    return None


def _read_lmms_eval(path: Path) -> HarnessAnswers:
    out = HarnessAnswers("lmms-eval")
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            sample = json.loads(line)
        except ValueError as exc:
            raise InputError(f"{path}, line {n}: not JSON ({exc}).", "Give the samples file lmms-eval wrote with --log_samples.") from exc
        raw = _first_text(sample.get("resps")) if "resps" in sample else _first_text(sample.get("filtered_resps"))
        if raw is not None and not isinstance(raw, str):
            raise InputError(f"{path}, line {n}: the response is {type(raw).__name__}, not text.",
                             "Give the samples file of a generate_until task (the Common-O tasks `commonlink export lmms-eval` writes).")
        facts = _facts_from_doc(sample.get("doc"))
        if facts is not None:
            facts.setdefault("row_index", int(sample["doc_id"]))
        out.answers.append({"id": (facts or {}).get("id") or (sample.get("doc") or {}).get("id"), "row": int(sample["doc_id"]),
                            "raw_output": raw or "", "facts": facts})
    rows = Counter(a["row"] for a in out.answers)
    doubled = sorted(r for r, c in rows.items() if c > 1)
    if doubled:
        raise InputError(f"{path} lists doc_id {', '.join(map(str, doubled[:5]))} more than once; each document must be scored once.",
                         "Give one task's samples file of one run (not several concatenated).")
    return out


def _read_table(path: Path):
    if path.suffix.lower() == ".json":
        return json.loads(path.read_text(encoding="utf-8"))
    import pandas as pd

    if path.suffix.lower() == ".xlsx":
        return pd.read_excel(path)
    return pd.read_csv(path, sep="\t" if path.suffix.lower() == ".tsv" else ",")


def _read_vlmevalkit(path: Path) -> HarnessAnswers:
    from commonlink.eval.export.harnesses import VLMEVAL_FAIL_MARKER, _cell, _table_rows, vlmeval_records

    table = _read_table(path)
    rows = _table_rows(table)
    if not rows or "prediction" not in rows[0]:
        raise InputError(f"{path}: no 'prediction' column; not a VLMEvalKit prediction file.",
                         "Give the <model>_<dataset>.xlsx (or .tsv/.json) VLMEvalKit writes after inference.")
    if "segments" in rows[0]:
        raise InputError(f"{path} is an association prediction file.", "`eval score` rescores Common-O; VLMEvalKit's own evaluate step scores association.")
    has_facts = "choices" in rows[0] and "ground_truth_objects" in rows[0]
    records = vlmeval_records(table) if has_facts else [None] * len(rows)
    out = HarnessAnswers("vlmevalkit")
    for row, record in zip(rows, records):
        prediction = _cell(row.get("prediction"))
        ident = _cell(row.get("id")) or None
        if VLMEVAL_FAIL_MARKER in prediction:
            out.failed.append({"row": int(row["index"]), "id": ident, "reason": prediction[:200]})
            continue
        facts = {k: record[k] for k in FACT_FIELDS if k in record} | {"row_index": int(float(row["index"]))} if record else None
        out.answers.append({"id": ident, "row": int(float(row["index"])), "raw_output": prediction, "facts": facts})
    return out


def read_harness_answers(path: str | Path) -> HarnessAnswers:
    """The answers in an lmms-eval samples file or a VLMEvalKit prediction file (see the module doc)."""
    path = Path(path)
    kind = prediction_file_kind(path)
    if kind == "commonlink":
        raise InputError(f"{path} is neither an lmms-eval samples file nor a VLMEvalKit prediction file.")
    answers = _read_lmms_eval(path) if kind == "lmms-eval" else _read_vlmevalkit(path)
    if not answers.answers:
        raise InputError(f"{path} holds no answers.", "Give the file of a run that answered rows.")
    return answers
