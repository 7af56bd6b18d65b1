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
from commonlink.eval.backends import GenerationRequest, GenerationSettings
from commonlink.eval.backends.base import Backend
from commonlink.eval.cache import open_run_cache, run_key, shard_suffix
from commonlink.eval.commono import LMMS_TASKS, MAX_UNREADABLE_SHARE, row_indices, unreadable_limit, write_outputs
from commonlink.eval.imaging import ImageProtocol, parse_image_protocol
from commonlink.eval.metrics import N_BOOTSTRAP, perception_metrics
from commonlink.eval.parsing import parse_yes_no
from commonlink.eval.results import lmms_eval_metrics, results_header, timing, write_lmms_eval_files
from commonlink.eval.runner import open_backends, run_over_split
from commonlink.formats.common_o import PERCEPTION_PROMPT, YES_NO_HINT
from commonlink.loaders.common_o import open_common_o


def perception_prompt(yes_no_hint: bool = False) -> str:
    """The paper's question template; with ``yes_no_hint``, " Answer yes or no." after it."""
    return PERCEPTION_PROMPT + (YES_NO_HINT if yes_no_hint else "")


def perception_items(example, *, image_protocol: ImageProtocol | str | None = None, yes_no_hint: bool = False) -> list[tuple[GenerationRequest, dict]]:
    """One question per choice object for each of the row's two images (present and absent objects)."""
    protocol = parse_image_protocol(image_protocol)
    template = perception_prompt(yes_no_hint)
    objects_asked = [c for c in example.choices if c != NO_COMMON_OBJECTS]
    items = []
    for side, (image, objects) in enumerate(((example.image_1, example.objects_1), (example.image_2, example.objects_2)), start=1):
        if not objects:
            raise NotEnoughDataError(f"row {example.row_index}: image_{side} has no object list, so no answer can be checked.")
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
            meta = {"id": request.id, "row_index": example.row_index, "row_id": example.id, "image": f"image_{side}", "object": obj,
                    "present": is_present, "source": example.source, "questions_about_image": len(objects_asked)}
            items.append((request, meta))
    return items


def score_perception(meta: dict, output: str) -> dict:
    answer = parse_yes_no(output)
    return dict(meta, raw_output=output, answer=answer, parse_ok=answer is not None, correct=answer is not None and answer == meta["present"])


def evaluate_perception(
    data: str | os.PathLike,
    split: str = "main",
    model: str = "none",
    backend: str = "transformers",
    out_dir: str | os.PathLike | None = None,
    *,
    revision: str | None = None,
    settings: GenerationSettings | None = None,
    batch_size: int | None = None,
    limit: int | None = None,
    rows: tuple[int, int] | None = None,
    shard: tuple[int, int] | None = None,
    backend_options: dict | None = None,
    backend_instance: Backend | None = None,
    seed: int = 0,
    n_boot: int = N_BOOTSTRAP,
    show_progress: bool = True,
    image_protocol: str | ImageProtocol | None = None,
    yes_no_hint: bool = False,
    max_unreadable_share: float = MAX_UNREADABLE_SHARE,
    overwrite: bool = False,
) -> dict:
    """Run the single-image yes/no baseline on one split; same outputs, image protocol and resume rules as
    Common-O. ``yes_no_hint`` adds " Answer yes or no." to the paper's question (off by default)."""

    settings = settings or GenerationSettings(seed=seed)  # as commono: room for reasoning
    protocol = parse_image_protocol(image_protocol)
    template = perception_prompt(yes_no_hint)
    dataset = open_common_o(data, split, revision=revision)
    indices = row_indices(len(dataset), limit, rows, shard)
    instances = [backend_instance] if backend_instance is not None else None
    with open_backends(instances, backend, [model], backend_options, images_per_request=1) as (model_backend,):
        info = model_backend.info
        run = run_key(task="perception", dataset=dataset.fingerprint, split=split, model=info.fingerprint, backend=info.backend,
                      prompt=template, protocol="every-choice-both-images", image_protocol=protocol.spec, settings=settings.to_dict(),
                      **({"backend_options": info.output_options} if info.output_options else {}))
        outcome = run_over_split(
            dataset, indices,
            build=lambda ex: perception_items(ex, image_protocol=protocol, yes_no_hint=yes_no_hint),
            finish=score_perception,
            backend=model_backend, settings=settings, cache=open_run_cache(out_dir, run, shard, overwrite=overwrite), run=run,
            batch_size=batch_size or info.default_batch_size, total=len(indices),
            description=f"perception {split}", show_progress=show_progress,
            max_row_errors=unreadable_limit(len(indices), max_unreadable_share),
        )
        generate_s = model_backend.generate_seconds
        info = model_backend.info  # a lazy backend knows its dtype/device once loaded
    results = results_header("perception", [info], settings, seed=seed, n_boot=n_boot)
    results.update({
        "prompt": {"template": template, "yes_no_hint": yes_no_hint},
        "image_protocol": protocol.to_dict(),
        "shard": list(shard) if shard else None,
        "dataset": {"source": dataset.source_name, "split": split, "revision": dataset.revision, "fingerprint": dataset.fingerprint,
                    "rows_in_split": len(dataset), "rows_requested": len(indices), "questions_scored": len(outcome.records)},
        "metrics": perception_metrics(outcome.records, seed=seed, n_boot=n_boot),
        "skipped": len(outcome.skipped), "skipped_rows": outcome.skipped,
        "timing": timing(outcome.wall_s, generate_s, from_cache=outcome.cached, generated=outcome.generated),
        "run_key": run,
    })
    if out_dir is not None:
        write_outputs(Path(out_dir), results, outcome.records, suffix=shard_suffix(shard))
        write_perception_lmms_eval(Path(out_dir), results, outcome.records, suffix=shard_suffix(shard))
    return results


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
    metrics = lmms_eval_metrics(results["metrics"]["overall"], {"acc": "accuracy", "hallucination_rate": "hallucination_rate",
                                                                "question_acc": "question_accuracy", "parse_failure_rate": "parse_failure_rate"})
    split = results["dataset"]["split"]
    task = f"{LMMS_TASKS.get(split, f'common_o_{split}')}_perception"
    write_lmms_eval_files(out_dir, task, results, metrics, perception_lmms_eval_samples(records, results["prompt"]["template"]), suffix=suffix)
