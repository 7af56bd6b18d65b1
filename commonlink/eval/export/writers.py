"""``commonlink export lmms-eval|vlmevalkit``: task files for the two harnesses VLM users already run, written by
each kind's exporter (:class:`KindExport`, on :attr:`commonlink.registry.Kind.export`) into one shared frame.

Both exports call :mod:`commonlink.eval.export.harnesses` (our prompts, parser and metrics), so commonlink must be
installed in the harness's environment (``pip install commonlink``).

lmms-eval: a task folder to pass as ``--include_path`` (``utils.py``, importing every kind's callbacks, and each
kind's task YAML and parquet files). VLMEvalKit: one TSV per dataset in its format (``index``, base64 ``image``
list, content-named ``image_path``, ``question``, ``answer``, and the kind's own columns) and
``commonlink_vlmeval.py`` with the dataset class; ``python commonlink_vlmeval.py --data NAME --model ...`` runs
VLMEvalKit's run.py with the datasets registered (``register()`` does it from Python).

A kind's source is passed under its exporter's option (``export_lmms_eval(out, OPTION=source)``); a kind whose
exporter has a default source is exported unless it is given None.
"""

from __future__ import annotations

import ast
import base64
import csv
import importlib.util
import itertools
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from commonlink import __version__, registry
from commonlink.errors import InputError
from commonlink.fileio import atomic_write, atomic_write_text, sha256_bytes

__all__ = [
    "HEADER",
    "LMMS_TASK_DIR",
    "VLMEVAL_MIN_COMMIT",
    "VLMEVAL_TOO_OLD",
    "ExportOptions",
    "KindExport",
    "check_vlmevalkit",
    "concat_parquet",
    "export_lmms_eval",
    "export_vlmevalkit",
    "exporters",
    "image_columns",
    "lmms_utils",
    "stream_parquet",
    "vlmeval_module",
    "write_tsv",
]

LMMS_TASK_DIR = "commonlink_tasks"
HEADER = (
    f"# Written by `commonlink export` (commonlink {__version__}); needs commonlink installed where the harness runs.\n"
)


@dataclass(frozen=True)
class ExportOptions:
    """What every kind's export is given besides its source."""

    revision: str | None = None
    splits: tuple[str, ...] = ("main", "challenge")
    progress: bool = True
    catalog_root: str | os.PathLike | None = None


@dataclass(frozen=True)
class KindExport:
    """A kind's lmms-eval and VLMEvalKit export."""

    option: str  #: the keyword its source is passed under (``export_lmms_eval(out, OPTION=...)``, ``--OPTION``)
    default: str | None  #: the source exported when none is given (None: only when given)
    #: ``(task folder, source, ExportOptions) -> files written``
    lmms_eval: Callable[..., list[Path]]
    #: ``(out folder, source, ExportOptions) -> [(dataset name, TSV path), ...]``
    vlmevalkit: Callable[..., list[tuple[str, Path]]]
    #: names of :mod:`commonlink.eval.export.harnesses` its lmms-eval YAML files call (``utils.NAME``)
    lmms_callbacks: tuple[str, ...]
    title: str  #: what the VLMEvalKit module's doc calls its datasets ("association single-step")
    vlmeval_names: tuple[str, ...]  #: its VLMEvalKit dataset names (the module doc's example)
    max_new_tokens: int  #: our protocol's generation cap for its tasks (one VLMEvalKit server command per cap)


def exporters() -> list[KindExport]:
    """The exporters of the registered kinds, in the registry's order (the order files and datasets are listed)."""
    return [e for e in (registry.get_kind(name).export for name in registry.KINDS) if e is not None]


def _sources(given: dict) -> list[tuple[KindExport, object]]:
    """(exporter, source) of each kind to export: its option's value, else its default."""
    found = exporters()
    unknown = sorted(set(given) - {e.option for e in found})
    if unknown:
        raise InputError(
            f"Unknown export source(s) {', '.join(unknown)}.",
            f"Pass the sources as {', '.join(e.option + '=' for e in found)}.",
        )
    chosen = [(e, given.get(e.option, e.default)) for e in found]
    return [(e, source) for e, source in chosen if source is not None]


def lmms_utils() -> str:
    """The task folder's ``utils.py``: every kind's callbacks, imported from the harnesses module."""
    names = sorted(name for e in exporters() for name in e.lmms_callbacks)
    return (
        HEADER
        + "from commonlink.eval.export.harnesses import (  # noqa: F401 - referenced by the task YAML files\n"
        + "".join(f"    {name},\n" for name in names)
        + ")\n"
    )


VLMEVAL_MODULE = (
    HEADER
    + '''"""%(title)s for VLMEvalKit (https://github.com/open-compass/VLMEvalKit).

Run them with VLMEvalKit's own run.py and any of its models; this file registers the datasets, then runs it:

    python commonlink_vlmeval.py --data %(example)s --model MODEL [run.py options]

The TSV files are read from $LMUData (default when run this way: this file's folder). From your own Python code:

    import commonlink_vlmeval
    commonlink_vlmeval.register()          # then vlmeval.dataset.build_dataset("%(first)s") finds the class
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


def vlmeval_module(names: list[str]) -> str:
    """``commonlink_vlmeval.py`` registering the datasets ``names``."""
    found = exporters()
    every = [name for e in found for name in e.vlmeval_names]
    return VLMEVAL_MODULE % {
        "title": " and ".join(e.title for e in found),
        "example": " ".join(every),
        "first": every[0] if every else "NAME",
        "names": names,
        "too_old": VLMEVAL_TOO_OLD,
    }


def stream_parquet(path: Path, rows: Iterator[dict], schema, batch_rows: int = 256) -> int:
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


def concat_parquet(files: list[Path], path: Path) -> int:
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


def write_tsv(path: Path, fields: list[str], lines) -> int:
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


def image_columns(pngs: list[bytes]) -> dict:
    """``image`` (VLMEvalKit's list of base64 PNGs) and ``image_path``: the file names its ``dump_image`` writes them
    to under ``$LMUData/images/NAME/``. Named by content: it keeps any file already there, so names made from the
    row index alone (its default) would show a re-exported release the previous export's pictures."""
    return {
        "image": str([base64.b64encode(b).decode() for b in pngs]),
        "image_path": str([f"{sha256_bytes(b)[:24]}.png" for b in pngs]),
    }


def exported_names(module: Path, out: Path) -> list[str]:
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


def forget_localized(out: Path, name: str) -> None:
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


def _export(write: Callable[[Path, list[tuple[KindExport, object]], ExportOptions], list[Path]]):
    """The public export of ``write``, taking the options and sources as keywords (one signature for both)."""

    def export(
        out_dir: str | os.PathLike,
        *,
        revision: str | None = None,
        splits: tuple[str, ...] = ("main", "challenge"),
        progress: bool = True,
        catalog_root: str | os.PathLike | None = None,
        **sources,
    ) -> list[Path]:
        options = ExportOptions(revision, tuple(splits), progress, catalog_root)
        return write(Path(out_dir), _sources(sources), options)

    export.__name__ = export.__qualname__ = write.__name__
    export.__doc__ = write.__doc__
    return export


@_export
def export_lmms_eval(out_dir: Path, chosen: list[tuple[KindExport, object]], options: ExportOptions) -> list[Path]:
    """Write the lmms-eval task folder ``out_dir/commonlink_tasks``; returns the files written. Keywords: each
    kind's source under its exporter's option (``data=`` a Common-O release or Hub name, ``association=`` chain
    files or an association release), ``revision``, ``splits``, ``progress``, ``catalog_root`` (where the catalogs
    of chain files are now)."""
    folder = out_dir / LMMS_TASK_DIR
    folder.mkdir(parents=True, exist_ok=True)
    written = [folder / "utils.py"]
    atomic_write_text(written[0], lmms_utils())
    for exporter, source in chosen:
        written += exporter.lmms_eval(folder, source, options)
    return written


@_export
def export_vlmevalkit(out_dir: Path, chosen: list[tuple[KindExport, object]], options: ExportOptions) -> list[Path]:
    """Write ``NAME.tsv`` per dataset and ``commonlink_vlmeval.py`` to ``out_dir``; returns the files written
    (keywords as :func:`export_lmms_eval` takes them)."""
    check_vlmevalkit()
    out_dir.mkdir(parents=True, exist_ok=True)
    module = out_dir / "commonlink_vlmeval.py"
    written, names = [], exported_names(module, out_dir)
    for exporter, source in chosen:
        for name, path in exporter.vlmevalkit(out_dir, source, options):
            written.append(path)
            names.append(name)
    atomic_write_text(module, vlmeval_module(list(dict.fromkeys(names))))
    return [*written, module]
