"""The association export: lmms-eval task ``association_single_step`` and VLMEvalKit dataset
``CommonO_AssocSingleStep``, each single-step task's selection request (its fixed memory already in the prompt)
written as one row: images, prompt segments, answer, concept; on the engine's frame
(:mod:`commonlink.eval.export.writers`)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from commonlink import __version__
from commonlink.errors import InputError
from commonlink.eval.export.writers import (
    HEADER,
    ExportOptions,
    KindExport,
    forget_localized,
    image_columns,
    stream_parquet,
    write_tsv,
)
from commonlink.fileio import atomic_write_text
from commonlink.images import image_to_png_bytes
from commonlink.kinds.association.loader import open_association
from commonlink.kinds.association.prompts import ImageSlot
from commonlink.kinds.association.task import AssociationSettings, single_step_selection
from commonlink.progress import make_progress

__all__ = ["EXPORT", "IMAGE_KEY", "VLMEVAL_NAME"]

#: Association docs mark where an image goes in the prompt with ``{"image": k}`` segments.
IMAGE_KEY = "image"
VLMEVAL_NAME = "CommonO_AssocSingleStep"

ASSOCIATION_TASK = """task: association_single_step
dataset_path: parquet
dataset_kwargs:
  data_files:
    test: association_single_step.parquet
test_split: test
output_type: generate_until
doc_to_visual: !function utils.association_doc_to_visual
doc_to_text: !function utils.association_doc_to_text
doc_to_messages: !function utils.association_doc_to_messages
doc_to_target: !function utils.association_doc_to_target
process_results: !function utils.association_process_results
metric_list:
  - metric: acc
    aggregation: !function utils.association_aggregate
    higher_is_better: true
generation_kwargs:
  max_new_tokens: 64
  temperature: 0
  do_sample: false
metadata:
  version: {version}
  source: {source}
"""


def _association_rows(association: str | os.PathLike, revision: str | None, progress: bool, catalog_root=None):
    """One row per single-step task: the selection request our eval sends (memory in the prompt), as data."""
    split = open_association(association, "single_step", revision=revision, catalog_root=catalog_root)
    # the images as stored and our answer reading (the strict protocol), as the exports always carried them: the
    # other harness does its own image preprocessing and scores with our parser (docs/eval.md, exports)
    settings = AssociationSettings(protocol="strict")
    with make_progress("tasks", disable=not progress) as bars:
        bar = bars.add_task("association single step", total=len(split))
        for i in range(len(split)):
            task = split.get(i)
            request = single_step_selection(task, settings)
            segments = [{IMAGE_KEY: s.index} if isinstance(s, ImageSlot) else s for s in request.prompt]
            yield {
                "id": task.id,
                "concept": task.concept,
                "answer": int(task.answer),
                "segments": json.dumps(segments, ensure_ascii=False),
                "images": [image_to_png_bytes(img.convert("RGB")) for img in request.images],
            }
            bars.advance(bar)


def _no_tasks(association) -> InputError:
    return InputError(
        f"{association}: the single_step config has no tasks.",
        "Build chains with single-step tasks (commonlink chains).",
    )


def _lmms_eval(folder: Path, association, options: ExportOptions) -> list[Path]:
    import datasets

    features = datasets.Features(
        {
            "id": datasets.Value("string"),
            "concept": datasets.Value("string"),
            "answer": datasets.Value("int64"),
            "segments": datasets.Value("string"),
            "images": datasets.Sequence(datasets.Image()),
        }
    )
    rows = (
        dict(r, images=[{"bytes": b, "path": None} for b in r["images"]])
        for r in _association_rows(association, options.revision, options.progress, options.catalog_root)
    )
    if not stream_parquet(folder / "association_single_step.parquet", rows, features.arrow_schema):
        raise _no_tasks(association)
    atomic_write_text(
        folder / "association_single_step.yaml",
        HEADER + ASSOCIATION_TASK.format(version=__version__, source=json.dumps(str(association))),
    )
    return [folder / "association_single_step.parquet", folder / "association_single_step.yaml"]


def _association_lines(association, revision: str | None, progress: bool, catalog_root=None):
    for i, row in enumerate(_association_rows(association, revision, progress, catalog_root)):
        text = "".join("" if isinstance(s, dict) else s for s in json.loads(row["segments"]))
        yield {
            "index": i,
            **image_columns(row["images"]),
            "question": text,
            "segments": row["segments"],
            "answer": f"Image{row['answer'] + 1}",
            "concept": row["concept"],
            "id": row["id"],
        }


ASSOCIATION_FIELDS = ["index", "image", "image_path", "question", "segments", "answer", "concept", "id"]


def _vlmevalkit(out: Path, association, options: ExportOptions) -> list[tuple[str, Path]]:
    name = VLMEVAL_NAME
    forget_localized(out, name)
    lines = _association_lines(association, options.revision, options.progress, options.catalog_root)
    if not write_tsv(out / f"{name}.tsv", ASSOCIATION_FIELDS, lines):
        (out / f"{name}.tsv").unlink()
        raise _no_tasks(association)
    return [(name, out / f"{name}.tsv")]


EXPORT = KindExport(
    option="association",
    default=None,
    lmms_eval=_lmms_eval,
    vlmevalkit=_vlmevalkit,
    lmms_callbacks=(
        "association_aggregate",
        "association_doc_to_messages",
        "association_doc_to_target",
        "association_doc_to_text",
        "association_doc_to_visual",
        "association_process_results",
    ),
    title="association single-step",
    vlmeval_names=(VLMEVAL_NAME,),
    max_new_tokens=64,
)
