"""What the lmms-eval tasks and the VLMEvalKit dataset exported by ``commonlink export`` call: our prompts, our
parser and our metrics, so a score from either harness equals ours on the same predictions.

lmms-eval (task YAML + ``utils.py``): ``doc_to_visual`` / ``doc_to_text`` / ``doc_to_messages`` build the request
exactly as ``commonlink eval`` does (:func:`commonlink.kinds.common_o.task.common_o_request`, the association
selection prompt with its fixed memory); ``process_results`` parses one answer and returns per-document
scores; Common-O accuracy is lmms-eval's ``mean`` of them (our accuracy is that mean), the association
success ratio uses :func:`association_aggregate` (the average over concepts of per-concept ratios, as ours).

VLMEvalKit (a dataset class over a TSV): :func:`vlmeval_messages` builds the message list from a TSV line and the
image files VLMEvalKit dumped, :func:`vlmeval_score` scores its prediction table.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from commonlink.eval.imaging import parse_image_protocol
from commonlink.kinds.association.export import IMAGE_KEY
from commonlink.kinds.association.metrics import ratio_metrics
from commonlink.kinds.association.prompts import parse_selection
from commonlink.kinds.common_o.harness_files import VLMEVAL_FAIL_MARKER, table_cell, table_rows, vlmeval_doc
from commonlink.kinds.common_o.loader import example_from_row
from commonlink.kinds.common_o.metrics import common_o_metrics, score_common_o
from commonlink.kinds.common_o.parsing import parse_common_o_answer
from commonlink.kinds.common_o.task import common_o_request


# ------------------------------------------------------------------------------------------ Common-O
def common_o_doc_to_visual(doc: dict) -> list:
    """Both images sized by our default image protocol (the paper's: shorter side 384 px), as ``eval commono``
    sends them."""
    protocol = parse_image_protocol(None)
    return [protocol.apply(doc["image_1"].convert("RGB")), protocol.apply(doc["image_2"].convert("RGB"))]


def common_o_doc_to_text(doc: dict, lmms_eval_specific_kwargs: dict | None = None) -> str:
    kwargs = lmms_eval_specific_kwargs or {}
    prompt = common_o_request(example_from_row(doc, images=False)).prompt
    return f"{kwargs.get('pre_prompt', '')}{prompt}{kwargs.get('post_prompt', '')}"


def common_o_doc_to_messages(doc: dict, lmms_eval_specific_kwargs: dict | None = None) -> list[dict]:
    content = [{"type": "image", "url": image} for image in common_o_doc_to_visual(doc)]
    content.append({"type": "text", "text": common_o_doc_to_text(doc, lmms_eval_specific_kwargs)})
    return [{"role": "user", "content": content}]


def common_o_doc_to_target(doc: dict) -> str:
    return ", ".join(example_from_row(doc, images=False).answer_letters)


def common_o_score(doc: dict, response: str) -> dict:
    """The predictions.jsonl fields of one answer (parse + score), from a published-schema row."""
    example = example_from_row(doc, images=False)
    parsed = parse_common_o_answer(response, example.choices)
    scores = score_common_o(parsed.letters, example.answer_letters, example.choices)
    return {
        "id": example.id,
        "choices": list(example.choices),
        "num_choices": len(example.choices),
        "parse_ok": parsed.ok,
        "parsed_letters": parsed.letters,
        "source": example.source,
        "num_objects_image_1": example.num_objects_image_1,
        "num_objects_image_2": example.num_objects_image_2,
        "ground_truth": list(example.ground_truth),
        "ground_truth_letters": list(example.answer_letters),
        "raw_output": response,
        **scores,
    }


def common_o_process_results(doc: dict, results: Sequence[str]) -> dict:
    record = common_o_score(doc, results[0])
    return {
        "acc": float(record["correct"]),
        "hallucination_rate": record["hallucinated"] / max(1, record["num_choices"]),
    }


# ------------------------------------------------------------------------------------------ association single step
def _segments(doc: dict) -> list:
    return json.loads(doc["segments"]) if isinstance(doc["segments"], str) else list(doc["segments"])


def association_doc_to_visual(doc: dict) -> list:
    """The images in the order the prompt shows them (query, Image1, Image2)."""
    images = list(doc["images"])
    return [images[s[IMAGE_KEY]].convert("RGB") for s in _segments(doc) if isinstance(s, dict)]


def association_doc_to_text(doc: dict, lmms_eval_specific_kwargs: dict | None = None) -> str:
    """The prompt text with each image's place marked by ``image_token`` (default: removed, for models that put
    the images first)."""
    token = (lmms_eval_specific_kwargs or {}).get("image_token", "")
    return "".join(token if isinstance(s, dict) else s for s in _segments(doc))


def association_doc_to_messages(doc: dict, lmms_eval_specific_kwargs: dict | None = None) -> list[dict]:
    """Images interleaved with the text exactly where ``commonlink eval association`` puts them."""
    images = list(doc["images"])
    content = [
        {"type": "image", "url": images[s[IMAGE_KEY]].convert("RGB")}
        if isinstance(s, dict)
        else {"type": "text", "text": s}
        for s in _segments(doc)
        if s
    ]
    return [{"role": "user", "content": content}]


def association_doc_to_target(doc: dict) -> str:
    return f"Image{int(doc['answer']) + 1}"


def association_process_results(doc: dict, results: Sequence[str]) -> dict:
    choice = parse_selection(results[0])
    return {"acc": {"concept": doc["concept"], "correct": choice == int(doc["answer"]), "unparseable": choice is None}}


def association_aggregate(items: list[dict]) -> float:
    """Average over concepts of the per-concept success ratio: the ``avg_success_ratio`` of our results."""
    records = [dict(item, failed=False) for item in items]
    return ratio_metrics(records, ["correct"], seed=0, n_boot=2)["summary"]["avg_success_ratio"]


# ------------------------------------------------------------------------------------------ VLMEvalKit
def vlmeval_messages(line, image_paths: Sequence[str]) -> list[dict]:
    """VLMEvalKit's message list (``{"type": "image"|"text", "value": ...}``) for one TSV line."""
    segments = json.loads(line["segments"]) if "segments" in line and isinstance(line["segments"], str) else None
    if segments is None:  # Common-O: both images, then the question
        return [{"type": "image", "value": p} for p in image_paths] + [{"type": "text", "value": line["question"]}]
    return [
        {"type": "image", "value": image_paths[s[IMAGE_KEY]]} if isinstance(s, dict) else {"type": "text", "value": s}
        for s in segments
        if s
    ]


def vlmeval_records(table) -> list[dict]:
    """One scored record per row of a VLMEvalKit prediction table (our TSV columns plus ``prediction``): the
    fields of our predictions.jsonl for Common-O, concept / parsed choice / correct for association."""
    records = []
    for r in table_rows(table):
        prediction = table_cell(r.get("prediction"))
        failed = VLMEVAL_FAIL_MARKER in prediction
        if "segments" in r:
            choice = parse_selection(prediction)
            truth = parse_selection(table_cell(r["answer"]))
            records.append(
                {
                    "index": r["index"],
                    "id": table_cell(r.get("id")),
                    "concept": table_cell(r["concept"]),
                    "answer": table_cell(r["answer"]),
                    "prediction": prediction,
                    "parsed": None if choice is None else f"Image{choice + 1}",
                    "correct": choice == truth,
                    "unparseable": choice is None,
                    "failed": failed,
                }
            )
            continue
        records.append({"index": r["index"], **common_o_score(vlmeval_doc(r), prediction), "failed": failed})
    return records


def vlmeval_metrics(records: list[dict]) -> dict:
    """Our headline metrics of scored records (:func:`vlmeval_records`), under VLMEvalKit's ``acc`` key (its run
    report picks ``acc`` as the primary metric). Fractions, as ``commonlink eval`` reports them."""
    failed = sum(bool(r["failed"]) for r in records)
    if records and "concept" in records[0]:
        summary = ratio_metrics(records, ["correct"], seed=0, n_boot=2)["summary"]
        return {
            "acc": summary["avg_success_ratio"],
            "unparseable_rate": summary["unparseable_rate"],
            "n": summary["n"],
            "failed": failed,
        }
    overall = common_o_metrics([r for r in records if not r["failed"]], seed=0, n_boot=2)["overall"]
    return {
        "acc": overall.get("accuracy"),
        "hallucination_rate": overall.get("hallucination_rate"),
        "parse_failure_rate": overall.get("parse_failure_rate"),
        "n": overall["n"],
        "failed": failed,
    }


def vlmeval_score(table) -> dict:
    """Scores of a VLMEvalKit prediction table (``vlmeval.smp.load`` of its xlsx / tsv / json prediction file)."""
    return vlmeval_metrics(vlmeval_records(table))
