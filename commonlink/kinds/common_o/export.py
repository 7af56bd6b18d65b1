"""The Common-O export: lmms-eval tasks ``common_o`` and ``common_o_challenge`` (the two Common-O splits, from the
Hub dataset or a local release turned into one parquet file per split) and VLMEvalKit datasets ``CommonO``,
``CommonO_Challenge`` (each row's request as ``eval commono`` builds it by default), on the engine's frame
(:mod:`commonlink.eval.export.writers`)."""

from __future__ import annotations

import json
from pathlib import Path

from commonlink import __version__
from commonlink.eval.export.writers import (
    HEADER,
    ExportOptions,
    KindExport,
    concat_parquet,
    forget_localized,
    image_columns,
    write_tsv,
)
from commonlink.fileio import atomic_write, atomic_write_text
from commonlink.images import image_to_png_bytes
from commonlink.kinds.common_o.loader import open_common_o
from commonlink.kinds.common_o.task import common_o_request
from commonlink.progress import make_progress

__all__ = ["EXPORT", "VLMEVAL_NAMES"]

COMMON_O_TASKS = {"main": "common_o", "challenge": "common_o_challenge"}
VLMEVAL_NAMES = {"main": "CommonO", "challenge": "CommonO_Challenge"}

COMMON_O_TEMPLATE = """output_type: generate_until
doc_to_visual: !function utils.common_o_doc_to_visual
doc_to_text: !function utils.common_o_doc_to_text
doc_to_messages: !function utils.common_o_doc_to_messages
doc_to_target: !function utils.common_o_doc_to_target
process_results: !function utils.common_o_process_results
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
  - metric: hallucination_rate
    aggregation: mean
    higher_is_better: false
generation_kwargs:
  max_new_tokens: 1024
  temperature: 0
  do_sample: false
lmms_eval_specific_kwargs:
  default:
    pre_prompt: ""
    post_prompt: ""
"""


def _common_o_parquet(data, split: str, revision: str | None, path: Path) -> int:
    """The split's rows as stored, in one parquet file at ``path`` (written atomically): parquet shards are copied a
    row group at a time (a paper-sized split holds gigabytes of images), other sources go through ``datasets``."""
    source = open_common_o(data, split, revision=revision)
    files = source.parquet_files()
    if files and _images_as_stored(files[0]):
        return concat_parquet(files, path)
    import datasets

    rows = [source.raw_row(i) for i in range(len(source))]
    table = datasets.Dataset.from_list(rows)
    for column in ("image_1", "image_2"):
        table = table.cast_column(column, datasets.Image())
    with atomic_write(path, "wb") as handle:
        table.to_parquet(handle)
    return len(rows)


def _images_as_stored(file: Path) -> bool:
    """Whether the shard's image columns are already ``datasets`` Image structs ({bytes, path}) that
    ``datasets`` reads as images (its features in the schema's metadata say so)."""
    import pyarrow.parquet as pq

    schema = pq.read_schema(file)
    features = json.loads((schema.metadata or {}).get(b"huggingface", b"{}")).get("info", {}).get("features", {})
    return all((features.get(c) or {}).get("_type") == "Image" for c in ("image_1", "image_2"))


def _lmms_eval(folder: Path, data, options: ExportOptions) -> list[Path]:
    """The template YAML, a parquet file per split of a local release, one task YAML per split."""
    revision, splits = options.revision, options.splits
    written = [folder / "_common_o_template_yaml"]
    local = Path(data).exists()
    if local:
        data_files = {}
        for split in splits:
            _common_o_parquet(data, split, revision, folder / f"common_o_{split}.parquet")
            data_files[split] = f"common_o_{split}.parquet"
            written.append(folder / f"common_o_{split}.parquet")
        source = "dataset_path: parquet\ndataset_kwargs:\n  data_files:\n" + "".join(
            f"    {s}: {f}\n" for s, f in data_files.items()
        )
    else:
        source = f"dataset_path: {data}\n" + (f"dataset_kwargs:\n  revision: {revision}\n" if revision else "")
    atomic_write_text(written[0], HEADER + source + COMMON_O_TEMPLATE + f"metadata:\n  version: {__version__}\n")
    for split in splits:
        task = COMMON_O_TASKS.get(split, f"common_o_{split}")
        path = folder / f"{task}.yaml"
        atomic_write_text(path, HEADER + f"task: {task}\ntest_split: {split}\ninclude: _common_o_template_yaml\n")
        written.append(path)
    return written


def _common_o_lines(data, split: str, revision: str | None, progress: bool):
    source = open_common_o(data, split, revision=revision)
    with make_progress("rows", disable=not progress) as bars:
        bar = bars.add_task(f"Common-O {split}", total=len(source))
        for i in range(len(source)):
            example, raw = source.get(i), source.raw_row(i)
            request = common_o_request(example)  # images sized and question chosen as `eval commono` does by default
            yield {
                "index": i,
                **image_columns([image_to_png_bytes(img.convert("RGB")) for img in request.images]),
                "question": request.prompt,
                "answer": ", ".join(example.answer_letters),
                "choices": json.dumps(list(example.choices)),
                "ground_truth_objects": json.dumps(list(example.ground_truth)),
                "real_or_synthetic": raw.get("real_or_synthetic") or "",
                "num_objects_image_1": example.num_objects_image_1,
                "num_objects_image_2": example.num_objects_image_2,
                "id": example.id,
            }
            bars.advance(bar)


COMMON_O_FIELDS = [
    "index",
    "image",
    "image_path",
    "question",
    "answer",
    "choices",
    "ground_truth_objects",
    "real_or_synthetic",
    "num_objects_image_1",
    "num_objects_image_2",
    "id",
]


def _vlmevalkit(out: Path, data, options: ExportOptions) -> list[tuple[str, Path]]:
    written = []
    for split in options.splits:
        name = VLMEVAL_NAMES.get(split, f"CommonO_{split}")
        forget_localized(out, name)
        write_tsv(
            out / f"{name}.tsv", COMMON_O_FIELDS, _common_o_lines(data, split, options.revision, options.progress)
        )
        written.append((name, out / f"{name}.tsv"))
    return written


EXPORT = KindExport(
    option="data",
    default="facebook/Common-O",
    lmms_eval=_lmms_eval,
    vlmevalkit=_vlmevalkit,
    lmms_callbacks=(
        "common_o_doc_to_messages",
        "common_o_doc_to_target",
        "common_o_doc_to_text",
        "common_o_doc_to_visual",
        "common_o_process_results",
    ),
    title="Common-O",
    vlmeval_names=("CommonO", "CommonO_Challenge"),
    max_new_tokens=1024,
)
