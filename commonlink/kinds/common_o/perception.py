"""Single-image perception baseline (paper §3.2, §4.1, Fig. 3): "Is <object> in this image?" answered yes/no.

For every row and for *each* of its two images, the paper's question is asked once per choice object
(every choice but "No objects are in common"): objects in that image (from its object list) and objects
not in it. An image's answers form its predicted object set, scored like a Common-O answer:

* single-image accuracy: every answer about the image right (exact set match);
* single-image hallucination rate: absent objects answered "yes" / questions asked about the image;
  ``hallucination_1plus`` / ``hallucination_2plus``: share of images with 1+ / 2+ such objects.

These carry the same names as the multi-image metrics of ``eval commono``, so the two runs can be set
side by side (``eval compare``) as in the paper's Figure 3. Per-question figures are reported too:
``question_accuracy``, ``recall`` on present objects and ``yes_rate_absent``. An answer that is neither
yes nor no counts as wrong (and as not hallucinated). A row without object lists is skipped with that reason.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from commonlink.constants import NO_COMMON_OBJECTS
from commonlink.errors import NotEnoughDataError
from commonlink.eval.backends.base import Backend, GenerationRequest, GenerationSettings
from commonlink.eval.imaging import ImageProtocol, parse_image_protocol
from commonlink.eval.parsing import parse_yes_no
from commonlink.eval.results import lmms_eval_metrics, write_lmms_eval_files
from commonlink.eval.task import Task, TaskRun
from commonlink.kinds.common_o.format import PERCEPTION_PROMPT, YES_NO_HINT
from commonlink.kinds.common_o.loader import open_common_o
from commonlink.kinds.common_o.metrics import perception_metrics
from commonlink.kinds.common_o.task import LMMS_TASKS, evaluate_split, write_outputs


def perception_prompt(yes_no_hint: bool = False) -> str:
    """The paper's question template; with ``yes_no_hint``, " Answer yes or no." after it."""
    return PERCEPTION_PROMPT + (YES_NO_HINT if yes_no_hint else "")


def perception_items(
    example, *, image_protocol: ImageProtocol | str | None = None, yes_no_hint: bool = False
) -> list[tuple[GenerationRequest, dict]]:
    """One question per choice object for each of the row's two images (present and absent objects)."""
    protocol = parse_image_protocol(image_protocol)
    template = perception_prompt(yes_no_hint)
    objects_asked = [c for c in example.choices if c != NO_COMMON_OBJECTS]
    items = []
    for side, (image, objects) in enumerate(
        ((example.image_1, example.objects_1), (example.image_2, example.objects_2)), start=1
    ):
        if not objects:
            raise NotEnoughDataError(
                f"row {example.row_index}: image_{side} has no object list, so no answer can be checked."
            )
        present = {o.casefold() for o in objects}
        shown = protocol.apply(image)
        for obj in objects_asked:
            is_present = obj.casefold() in present
            request = GenerationRequest(
                id=f"{example.id}/image_{side}/{'present' if is_present else 'absent'}/{obj}",
                images=[shown],
                prompt=template.format(obj),
                choices=["yes", "no"],
                multi_select=False,
            )
            meta = {
                "id": request.id,
                "row_index": example.row_index,
                "row_id": example.id,
                "image": f"image_{side}",
                "object": obj,
                "present": is_present,
                "source": example.source,
                "questions_about_image": len(objects_asked),
            }
            items.append((request, meta))
    return items


def score_perception(meta: dict, output: str) -> dict:
    answer = parse_yes_no(output)
    return dict(
        meta,
        raw_output=output,
        answer=answer,
        parse_ok=answer is not None,
        correct=answer is not None and answer == meta["present"],
    )


def write_perception_run(run) -> None:
    """The files of a perception run: those of a Common-O run (same shapes) and its lmms-eval samples."""
    write_outputs(run.out_dir, run.results, run.outcome.records, suffix=run.suffix)
    write_perception_lmms_eval(run.out_dir, run.results, run.outcome.records, suffix=run.suffix)


class PerceptionTask(Task):
    """The single-image yes/no baseline: one question per choice object for each of a row's two images."""

    writer = staticmethod(write_perception_run)

    name = "perception"
    images_per_request = 1
    writes_report = False  # the HTML report shows Common-O and association runs

    def __init__(
        self,
        data: str | os.PathLike,
        split: str = "main",
        *,
        revision: str | None = None,
        image_protocol: str | ImageProtocol | None = None,
        yes_no_hint: bool = False,
    ):
        self.data, self.split, self.revision, self.yes_no_hint = data, split, revision, yes_no_hint
        self.protocol = parse_image_protocol(image_protocol)
        self.template = perception_prompt(yes_no_hint)
        self.description = f"perception {split}"

    def open(self):
        return open_common_o(self.data, self.split, revision=self.revision)

    def key_parts(self, dataset, info, settings: GenerationSettings) -> dict:
        return self.common_key_parts(
            dataset,
            info,
            settings,
            task="perception",
            split=self.split,
            prompt=self.template,
            protocol="every-choice-both-images",
            image_protocol=self.protocol.spec,
        )

    def requests(self, example) -> list[tuple[GenerationRequest, dict]]:
        return perception_items(example, image_protocol=self.protocol, yes_no_hint=self.yes_no_hint)

    def score(self, meta: dict, output: str) -> dict:
        return score_perception(meta, output)

    def results(self, run: TaskRun, outcome) -> dict:
        dataset = run.dataset
        return {
            "prompt": {"template": self.template, "yes_no_hint": self.yes_no_hint},
            "image_protocol": self.protocol.to_dict(),
            "shard": list(run.shard) if run.shard else None,
            "dataset": {
                "source": dataset.source_name,
                "split": self.split,
                "revision": dataset.revision,
                "fingerprint": dataset.fingerprint,
                "rows_in_split": len(dataset),
                "rows_requested": len(run.indices),
                "questions_scored": len(outcome.records),
            },
            "metrics": perception_metrics(outcome.records, seed=run.seed, n_boot=run.n_boot),
            "skipped": len(outcome.skipped),
            **run.outcome_fields(outcome),
        }


def evaluate_perception(
    data: str | os.PathLike,
    split: str = "main",
    model: str = "none",
    backend: str = "transformers",
    out_dir: str | os.PathLike | None = None,
    *,
    backend_instance: Backend | None = None,
    **options,
) -> dict:
    """Run the single-image yes/no baseline on one split (:class:`PerceptionTask`); same outputs, image protocol,
    shards and resume rules as Common-O (``options``: :class:`PerceptionTask`'s keyword arguments ``revision``,
    ``image_protocol``, ``yes_no_hint``, and :class:`commonlink.eval.evaluator.RunOptions` fields).
    ``yes_no_hint`` adds " Answer yes or no." to the paper's question (off by default)."""
    return evaluate_split(PerceptionTask, data, split, model, backend, out_dir, backend_instance, options)


def perception_lmms_eval_samples(records: Iterable[dict], template: str) -> Iterator[dict]:
    """Single-image yes/no questions as lmms-eval per-sample entries (doc_id = question number in the run,
    filtered = the parsed yes/no, or "" when unreadable)."""
    for doc_id, r in enumerate(records):
        yield {
            "doc_id": doc_id,
            "doc": {k: r[k] for k in ("id", "row_index", "image", "object", "present", "source") if k in r},
            "target": "yes" if r["present"] else "no",
            "prompt": template.format(r["object"]),
            "response": r["raw_output"],
            "filtered": "" if r["answer"] is None else ("yes" if r["answer"] else "no"),
            "scores": {"question_acc": float(r["correct"])},
        }


def write_perception_lmms_eval(out_dir: Path, results: dict, records: Sequence[dict], *, suffix: str = "") -> None:
    """The run in lmms-eval's convention (task ``common_o_perception``, ``common_o_challenge_perception``, ...):
    accuracy and hallucination per image (the paper's unit) as ours, question accuracy beside them."""
    metrics = lmms_eval_metrics(
        results["metrics"]["overall"],
        {
            "acc": "accuracy",
            "hallucination_rate": "hallucination_rate",
            "question_acc": "question_accuracy",
            "parse_failure_rate": "parse_failure_rate",
        },
    )
    split = results["dataset"]["split"]
    task = f"{LMMS_TASKS.get(split, f'common_o_{split}')}_perception"
    write_lmms_eval_files(
        out_dir,
        task,
        results,
        metrics,
        perception_lmms_eval_samples(records, results["prompt"]["template"]),
        suffix=suffix,
    )
