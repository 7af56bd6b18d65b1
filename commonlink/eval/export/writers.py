"""``commonlink export lmms-eval|vlmevalkit``: task files for the two harnesses VLM users already run.

Both exports call :mod:`commonlink.eval.export.harnesses` (our prompts, parser and metrics), so commonlink must be
installed in the harness's environment (``pip install commonlink``).

lmms-eval: a task folder to pass as ``--include_path``: ``common_o`` and ``common_o_challenge`` (the two Common-O
splits, from the Hub dataset or a local release turned into one parquet file per split) and, given an
association release, ``association_single_step`` (each task's selection request, with its fixed memory
already in the prompt, written as one row: images, prompt segments, answer, concept).

VLMEvalKit: one TSV per dataset (``CommonO``, ``CommonO_Challenge``, ``CommonO_AssocSingleStep``) in its format
(``index``, base64 ``image`` list, content-named ``image_path``, ``question``, ``answer``) and
``commonlink_vlmeval.py`` with the dataset class; ``python commonlink_vlmeval.py --data CommonO --model ...`` runs
VLMEvalKit's run.py with the datasets registered (``register()`` does it from Python).
"""

from __future__ import annotations

import ast
import base64
import csv
import importlib.util
import itertools
import json
import os
from collections.abc import Iterator
from pathlib import Path

from commonlink import __version__
from commonlink.errors import InputError
from commonlink.eval.export.harnesses import IMAGE_KEY
from commonlink.fileio import atomic_write, atomic_write_text, sha256_bytes
from commonlink.images import image_to_png_bytes
from commonlink.kinds.association.loader import open_association
from commonlink.kinds.association.prompts import ImageSlot
from commonlink.kinds.association.task import AssociationSettings, single_step_selection
from commonlink.kinds.common_o.loader import open_common_o
from commonlink.kinds.common_o.task import common_o_request
from commonlink.progress import make_progress

LMMS_TASK_DIR = "commonlink_tasks"
COMMON_O_TASKS = {"main": "common_o", "challenge": "common_o_challenge"}
VLMEVAL_NAMES = {"main": "CommonO", "challenge": "CommonO_Challenge", "association": "CommonO_AssocSingleStep"}
HEADER = (
    f"# Written by `commonlink export` (commonlink {__version__}); needs commonlink installed where the harness runs.\n"
)

LMMS_UTILS = (
    HEADER
    + """from commonlink.eval.export.harnesses import (  # noqa: F401 - referenced by the task YAML files
    association_aggregate,
    association_doc_to_messages,
    association_doc_to_target,
    association_doc_to_text,
    association_doc_to_visual,
    association_process_results,
    common_o_doc_to_messages,
    common_o_doc_to_target,
    common_o_doc_to_text,
    common_o_doc_to_visual,
    common_o_process_results,
)
"""
)

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

VLMEVAL_MODULE = (
    HEADER
    + '''"""Common-O and association single-step for VLMEvalKit (https://github.com/open-compass/VLMEvalKit).

Run them with VLMEvalKit's own run.py and any of its models; this file registers the datasets, then runs it:

    python commonlink_vlmeval.py --data CommonO CommonO_Challenge CommonO_AssocSingleStep --model MODEL [run.py options]

The TSV files are read from $LMUData (default when run this way: this file's folder). From your own Python code:

    import commonlink_vlmeval
    commonlink_vlmeval.register()          # then vlmeval.dataset.build_dataset("CommonO") finds the class
"""

import os
import os.path as osp
import runpy
import sys

import pandas as pd
from vlmeval.dataset.image_base import ImageBaseDataset
from vlmeval.smp import LMUDataRoot, d2df, dump, load

try:
    from vlmeval.smp import get_intermediate_file_path
except ImportError:
    raise ImportError(%(too_old)r) from None

from commonlink.eval.export.harnesses import vlmeval_messages, vlmeval_metrics, vlmeval_records

DATASETS = %(names)r


class CommonLinkDataset(ImageBaseDataset):
    TYPE = "VQA"  # free-form answers, parsed by commonlink (no judge model)
    MODALITY = "IMAGE"
    DATASET_URL = {name: "" for name in DATASETS}  # local TSV files: $LMUData/NAME.tsv
    DATASET_MD5 = {}
    # Always our prompt: models that build their own prompt for VQA datasets (MiniCPM-V, Molmo, XComposer) would
    # replace it otherwise, and the score would no longer compare with commonlink's.
    force_use_dataset_prompt = True

    def load_data(self, dataset):
        path = osp.join(LMUDataRoot(), f"{dataset}.tsv")
        if not osp.isfile(path):  # VLMEvalKit would try to download it from the URL "NAME.tsv"
            raise FileNotFoundError(f"{path} does not exist: put the files written by `commonlink export vlmevalkit` "
                                    "in $LMUData (or run this file, which reads them from its own folder).")
        return super().load_data(dataset)

    def build_prompt(self, line):
        if isinstance(line, int):
            line = self.data.iloc[line]
        return vlmeval_messages(line, self.dump_image(line))

    def evaluate(self, eval_file, **judge_kwargs):
        records = vlmeval_records(load(eval_file))
        # per row: parsed answer, correct
        dump(pd.DataFrame(records), get_intermediate_file_path(eval_file, "_results"))
        metrics = vlmeval_metrics(records)
        dump(d2df(metrics), get_intermediate_file_path(eval_file, "_acc"))
        return metrics


def register():
    """Make vlmeval's build_dataset (run.py --data NAME) and run.py --config ("class": "CommonLinkDataset") find
    the datasets of this file."""
    from vlmeval import dataset

    if CommonLinkDataset not in dataset.DATASET_CLASSES:
        dataset.DATASET_CLASSES.append(CommonLinkDataset)
        dataset.SUPPORTED_DATASETS.extend(DATASETS)
    dataset.CommonLinkDataset = CommonLinkDataset
    return CommonLinkDataset


def main(argv):
    """VLMEvalKit's run.py with the datasets registered. run.py is looked for beside the vlmeval package (a git
    checkout installed with pip install -e ., as vlmeval.tools finds it for vlmutil run) or at $VLMEVALKIT_RUN."""
    import vlmeval

    checkout = osp.dirname(osp.dirname(osp.abspath(vlmeval.__file__)))
    run_py = os.environ.get("VLMEVALKIT_RUN") or osp.join(checkout, "run.py")
    if not osp.isfile(run_py):
        sys.exit(f"VLMEvalKit's run.py is not at {run_py}. Install VLMEvalKit from a git checkout (git clone "
                 "https://github.com/open-compass/VLMEvalKit; cd VLMEvalKit; pip install -e .), or set VLMEVALKIT_RUN "
                 "to the path of its run.py.")
    os.environ.setdefault("LMUData", osp.dirname(osp.abspath(__file__)))
    register()
    sys.argv = [run_py, *argv]
    runpy.run_path(run_py, run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
'''
)


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


def _common_o_parquet(data, split: str, revision: str | None, path: Path) -> int:
    """The split's rows as stored, in one parquet file at ``path`` (written atomically): parquet shards are copied a
    row group at a time (a paper-sized split holds gigabytes of images), other sources go through ``datasets``."""
    source = open_common_o(data, split, revision=revision)
    files = source.parquet_files()
    if files and _images_as_stored(files[0]):
        return _concat_parquet(files, path)
    import datasets

    rows = [source.raw_row(i) for i in range(len(source))]
    table = datasets.Dataset.from_list(rows)
    for column in ("image_1", "image_2"):
        table = table.cast_column(column, datasets.Image())
    with atomic_write(path, "wb") as handle:
        table.to_parquet(handle)
    return len(rows)


def _stream_parquet(path: Path, rows: Iterator[dict], schema, batch_rows: int = 256) -> int:
    """Write ``rows`` to ``path`` as parquet of ``schema``, ``batch_rows`` at a time (their images are never all in
    memory), atomically; returns the row count. With no rows nothing is written and 0 is returned."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    first = next(rows, None)
    if first is None:
        return 0
    count = 0
    with atomic_write(path, "wb") as handle, pq.ParquetWriter(handle, schema) as writer:
        pending = itertools.chain([first], rows)
        while batch := list(itertools.islice(pending, batch_rows)):
            writer.write_table(pa.Table.from_pylist(batch, schema=schema))
            count += len(batch)
    return count


def _images_as_stored(file: Path) -> bool:
    """Whether the shard's image columns are already ``datasets`` Image structs ({bytes, path}) that
    ``datasets`` reads as images (its features in the schema's metadata say so)."""
    import pyarrow.parquet as pq

    schema = pq.read_schema(file)
    features = json.loads((schema.metadata or {}).get(b"huggingface", b"{}")).get("info", {}).get("features", {})
    return all((features.get(c) or {}).get("_type") == "Image" for c in ("image_1", "image_2"))


def _concat_parquet(files: list[Path], path: Path) -> int:
    import pyarrow.parquet as pq

    rows, writer = 0, None
    with atomic_write(path, "wb") as handle:
        try:
            for file in files:
                shard = pq.ParquetFile(file)
                for group in range(shard.num_row_groups):
                    table = shard.read_row_group(group)
                    if writer is None:  # the first shard's schema, with its datasets features
                        writer = pq.ParquetWriter(handle, table.schema)
                    writer.write_table(table.cast(writer.schema))
                    rows += table.num_rows
        finally:
            if writer is not None:
                writer.close()
    return rows


def export_lmms_eval(
    out_dir: str | os.PathLike,
    *,
    data: str | os.PathLike = "facebook/Common-O",
    association: str | os.PathLike | None = None,
    revision: str | None = None,
    splits: tuple[str, ...] = ("main", "challenge"),
    progress: bool = True,
    catalog_root: str | os.PathLike | None = None,
) -> list[Path]:
    """Write the lmms-eval task folder ``out_dir/commonlink_tasks``; returns the files written (``catalog_root``: where
    the catalogs of ``association`` chain files are now)."""
    import datasets

    folder = Path(out_dir) / LMMS_TASK_DIR
    folder.mkdir(parents=True, exist_ok=True)
    written = [folder / "utils.py", folder / "_common_o_template_yaml"]
    atomic_write_text(written[0], LMMS_UTILS)
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
    atomic_write_text(written[1], HEADER + source + COMMON_O_TEMPLATE + f"metadata:\n  version: {__version__}\n")
    for split in splits:
        task = COMMON_O_TASKS.get(split, f"common_o_{split}")
        path = folder / f"{task}.yaml"
        atomic_write_text(path, HEADER + f"task: {task}\ntest_split: {split}\ninclude: _common_o_template_yaml\n")
        written.append(path)
    if association is not None:
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
            for r in _association_rows(association, revision, progress, catalog_root)
        )
        if not _stream_parquet(folder / "association_single_step.parquet", rows, features.arrow_schema):
            raise InputError(
                f"{association}: the single_step config has no tasks.",
                "Build chains with single-step tasks (commonlink chains).",
            )
        atomic_write_text(
            folder / "association_single_step.yaml",
            HEADER + ASSOCIATION_TASK.format(version=__version__, source=json.dumps(str(association))),
        )
        written += [folder / "association_single_step.parquet", folder / "association_single_step.yaml"]
    return written


def _write_tsv(path: Path, fields: list[str], lines) -> int:
    """Stream rows into a TSV as VLMEvalKit reads it (``pandas.read_csv(sep="\\t")``: a header line, minimal
    quoting), atomically; returns the row count."""
    count = 0
    with atomic_write(path) as handle:
        writer = csv.DictWriter(handle, fieldnames=fields, delimiter="\t", lineterminator="\n")
        writer.writeheader()
        for line in lines:
            writer.writerow(line)
            count += 1
    return count


def _image_columns(pngs: list[bytes]) -> dict:
    """``image`` (VLMEvalKit's list of base64 PNGs) and ``image_path``: the file names its ``dump_image`` writes them
    to under ``$LMUData/images/NAME/``. Named by content: it keeps any file already there, so names made from the
    row index alone (its default) would show a re-exported release the previous export's pictures."""
    return {
        "image": str([base64.b64encode(b).decode() for b in pngs]),
        "image_path": str([f"{sha256_bytes(b)[:24]}.png" for b in pngs]),
    }


def _common_o_lines(data, split: str, revision: str | None, progress: bool):
    source = open_common_o(data, split, revision=revision)
    with make_progress("rows", disable=not progress) as bars:
        bar = bars.add_task(f"Common-O {split}", total=len(source))
        for i in range(len(source)):
            example, raw = source.get(i), source.raw_row(i)
            request = common_o_request(example)  # images sized and question chosen as `eval commono` does by default
            yield {
                "index": i,
                **_image_columns([image_to_png_bytes(img.convert("RGB")) for img in request.images]),
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


def _association_lines(association, revision: str | None, progress: bool, catalog_root=None):
    for i, row in enumerate(_association_rows(association, revision, progress, catalog_root)):
        text = "".join("" if isinstance(s, dict) else s for s in json.loads(row["segments"]))
        yield {
            "index": i,
            **_image_columns(row["images"]),
            "question": text,
            "segments": row["segments"],
            "answer": f"Image{row['answer'] + 1}",
            "concept": row["concept"],
            "id": row["id"],
        }


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
ASSOCIATION_FIELDS = ["index", "image", "image_path", "question", "segments", "answer", "concept", "id"]


def _exported_names(module: Path, out: Path) -> list[str]:
    """Datasets of an earlier export into the same folder whose TSV is still there (exporting one split must not
    unregister the others)."""
    if not module.is_file():
        return []
    for node in ast.parse(module.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["DATASETS"]:
            try:
                names = ast.literal_eval(node.value)
            except ValueError:
                return []
            return [n for n in names if isinstance(n, str) and (out / f"{n}.tsv").is_file()]
    return []


def _forget_localized(out: Path, name: str) -> None:
    """VLMEvalKit turns a TSV over 1 GB into NAME_local.tsv (images moved to files) once and reuses that file as
    long as it exists: left there, it would keep serving the previous export."""
    (out / f"{name}_local.tsv").unlink(missing_ok=True)


#: The oldest VLMEvalKit the exported module runs on: the commit that added ``vlmeval.smp.get_intermediate_file_path``
#: (9cc14cd0, 2025-09-12, "Modify tsv, add split_thinking (#1229)"). No release has it (v0.3rc1 of 2025-06-21 and
#: older lack it) and ``vlmeval.__version__`` still reads 0.2rc1 after it, so the function itself is checked.
VLMEVAL_MIN_COMMIT = "9cc14cd0 (2025-09-12)"
VLMEVAL_TOO_OLD = (
    f"This VLMEvalKit is too old for commonlink_vlmeval.py: it lacks vlmeval.smp.get_intermediate_file_path, added in "
    f"commit {VLMEVAL_MIN_COMMIT}; no tagged release has it (v0.3rc1 and older lack it). Update the clone "
    "(git pull in VLMEvalKit, then pip install -e .) to that commit or later, e.g. e8e78f05 (what commonlink is tested "
    "with)."
)


def check_vlmevalkit() -> None:
    """When VLMEvalKit is installed here, refuse one too old for the exported module (it may also be installed
    only in the environment that will run it: then the module checks at import)."""
    if importlib.util.find_spec("vlmeval") is None:
        return
    import vlmeval.smp

    if not hasattr(vlmeval.smp, "get_intermediate_file_path"):
        raise InputError(
            VLMEVAL_TOO_OLD.replace(
                "commonlink_vlmeval.py",
                f"commonlink_vlmeval.py (VLMEvalKit at {Path(vlmeval.smp.__file__).parents[2]})",
            ),
            "Update VLMEvalKit as the message says, or export from an environment without it and run there.",
        )


def export_vlmevalkit(
    out_dir: str | os.PathLike,
    *,
    data: str | os.PathLike = "facebook/Common-O",
    association: str | os.PathLike | None = None,
    revision: str | None = None,
    splits: tuple[str, ...] = ("main", "challenge"),
    progress: bool = True,
    catalog_root: str | os.PathLike | None = None,
) -> list[Path]:
    """Write ``NAME.tsv`` per dataset and ``commonlink_vlmeval.py`` to ``out_dir``; returns the files written."""
    check_vlmevalkit()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    module = out / "commonlink_vlmeval.py"
    written, names = [], _exported_names(module, out)
    for split in splits:
        name = VLMEVAL_NAMES.get(split, f"CommonO_{split}")
        _forget_localized(out, name)
        _write_tsv(out / f"{name}.tsv", COMMON_O_FIELDS, _common_o_lines(data, split, revision, progress))
        written.append(out / f"{name}.tsv")
        names.append(name)
    if association is not None:
        name = VLMEVAL_NAMES["association"]
        _forget_localized(out, name)
        if not _write_tsv(
            out / f"{name}.tsv",
            ASSOCIATION_FIELDS,
            _association_lines(association, revision, progress, catalog_root),
        ):
            (out / f"{name}.tsv").unlink()
            raise InputError(
                f"{association}: the single_step config has no tasks.",
                "Build chains with single-step tasks (commonlink chains).",
            )
        written.append(out / f"{name}.tsv")
        names.append(name)
    atomic_write_text(module, VLMEVAL_MODULE % {"names": list(dict.fromkeys(names)), "too_old": VLMEVAL_TOO_OLD})
    return [*written, module]
