"""The Common-O task (:class:`CommonOTask`): one request per row, the answer parsed and scored, the result files;
run by the one evaluator (:func:`commonlink.eval.outputs.evaluate`), or through :func:`evaluate_common_o`.

    >>> results = evaluate_common_o("facebook/Common-O", "main", "Qwen/Qwen2.5-VL-7B-Instruct", "vllm", "runs/qwen")
    >>> print(render_markdown_table(results))

Outputs in ``out_dir``: ``results.json`` (metrics, model, backend, prompt, generation settings, dataset
revision and fingerprint, toolkit version), ``predictions.jsonl`` (one line per example), ``results.md``,
and ``prediction-cache.jsonl`` (what makes a rerun continue where a killed run stopped).
"""

from __future__ import annotations

import functools
import json
import os
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from commonlink import __version__
from commonlink.errors import InputError
from commonlink.eval.backends.base import Backend, GenerationRequest, GenerationSettings
from commonlink.eval.imaging import (
    ImageProtocol,
    concat_side_by_side,
    parse_image_protocol,
)
from commonlink.eval.metrics import N_BOOTSTRAP
from commonlink.eval.outputs import evaluate_with
from commonlink.eval.report.tables import render_markdown_table
from commonlink.eval.results import lmms_eval_metrics, write_lmms_eval_files
from commonlink.eval.run_names import check_run_name, default_run_name
from commonlink.eval.task import Task, TaskRun
from commonlink.fileio import (
    atomic_write_json,
    atomic_write_text,
    read_jsonl,
    write_jsonl,
)
from commonlink.kinds.common_o.format import (
    CONCAT_IMAGE_PROMPT,
    MULTI_IMAGE_PROMPT,
    QUESTION_TEMPLATE_ID,
    common_o_question,
    concat_question,
)
from commonlink.kinds.common_o.harness_check import file_split, match_answers, refuse_mismatches, row_mismatch
from commonlink.kinds.common_o.harness_files import prediction_file_kind, read_harness_answers
from commonlink.kinds.common_o.loader import example_from_row, open_common_o
from commonlink.kinds.common_o.metrics import common_o_metrics, score_common_o
from commonlink.kinds.common_o.parsing import parse_common_o_answer
from commonlink.kinds.common_o.similarity import (
    hallucination_similarity_analysis,
    make_embedder,
    object_similarity_analysis,
)

__all__ = ["CommonOTask", "common_o_request", "evaluate_common_o", "render_markdown_table", "score_predictions"]


#: ``question`` modes: the row's own question verbatim when it has one (the authors' text), or always built.
QUESTION_MODES = ("dataset", "built")


def question_text(example, *, concat: bool = False, question: str = "dataset") -> tuple[str, str]:
    """(prompt, source): the row's question verbatim (``"dataset"``; with ``concat``, the paper's left/right
    sentence in front) when it has one and ``question="dataset"``, else the paper's prompt built from the
    choices (``"built"``)."""
    if question not in QUESTION_MODES:
        raise InputError(
            f"--question {question!r} is not a question mode.", f"Use one of: {', '.join(QUESTION_MODES)}."
        )
    if question == "dataset" and getattr(example, "question_source", "built") == "dataset":
        return (concat_question(example.question) if concat else example.question), "dataset"
    return common_o_question(example.choices, concat=concat), "built"


def common_o_request(
    example, *, concat: bool = False, image_protocol: ImageProtocol | str | None = None, question: str = "dataset"
) -> GenerationRequest:
    """The model call for one example: both images sized by the image protocol (default: the paper's shorter
    side 384 px), or one side-by-side image of them, and the question (see :func:`question_text`)."""
    protocol = parse_image_protocol(image_protocol)
    if example.image_1 is None:  # loaded without pixels (a cache lookup): the request id is all that is needed
        images = [None] if concat else [None, None]
    else:
        first, second = protocol.apply(example.image_1), protocol.apply(example.image_2)
        images = [concat_side_by_side(first, second)] if concat else [first, second]
    return GenerationRequest(
        id=example.id,
        images=images,
        prompt=question_text(example, concat=concat, question=question)[0],
        choices=list(example.choices),
        multi_select=True,
    )


def _example_meta(example, *, question: str = "dataset") -> dict:
    extra = getattr(example, "extra", None) or {}
    return {
        "id": example.id,
        "row_index": example.row_index,
        "source": example.source,
        "num_objects_image_1": example.num_objects_image_1,
        "num_objects_image_2": example.num_objects_image_2,
        "num_choices": len(example.choices),
        "choices": list(example.choices),
        "ground_truth": list(example.ground_truth),
        "ground_truth_letters": list(example.answer_letters),
        "question_source": question_text(example, question=question)[1],
        "list_encodings": extra.get("list_encodings"),
        "ground_truth_as": extra.get("ground_truth_as"),
        "answer_checked": extra.get("answer_checked"),
    }


def row_reading_summary(records: Iterable[dict]) -> dict:
    """How the scored rows were read: question used, list encodings per field, ground truth as names or
    letters, rows whose ``answer`` column was read and agreed."""
    questions: dict[str, int] = {}
    encodings: dict[str, dict[str, int]] = {}
    truth_as: dict[str, int] = {}
    answer_checked = 0
    for record in records:
        source = record.get("question_source") or "built"
        questions[source] = questions.get(source, 0) + 1
        for field, encoding in (record.get("list_encodings") or {}).items():
            encodings.setdefault(field, {})
            encodings[field][encoding] = encodings[field].get(encoding, 0) + 1
        if record.get("ground_truth_as"):
            truth_as[record["ground_truth_as"]] = truth_as.get(record["ground_truth_as"], 0) + 1
        answer_checked += bool(record.get("answer_checked"))
    return {
        "question_source": questions,
        "list_encodings": encodings,
        "ground_truth_as": truth_as,
        "answer_column_checked": answer_checked,
    }


def score_output(meta: dict, output: str) -> dict:
    """One predictions.jsonl record: the example's facts, the raw output, the parse and the scores."""
    parsed = parse_common_o_answer(output, meta["choices"])
    record = dict(meta)
    record.update(
        raw_output=output,
        parsed_letters=parsed.letters,
        parse_ok=parsed.ok,
        parse_error=parsed.error,
        **score_common_o(parsed.letters, meta["ground_truth_letters"], meta["choices"]),
    )
    return record


#: lmms-eval task names of the two published splits (other splits: common_o_SPLIT).
LMMS_TASKS = {"main": "common_o", "challenge": "common_o_challenge"}


def write_common_o_run(run) -> None:
    """The files of a Common-O run: results.json, predictions.jsonl, results.md, the lmms-eval samples and prompts."""
    write_outputs(run.out_dir, run.results, run.outcome.records, suffix=run.suffix, prompts=run.task.prompts)


class CommonOTask(Task):
    """Common-O (paper §3.2): one model call per row with both images (or one side-by-side image) and the
    question; the answer's letters scored against the ground truth (:func:`score_output`)."""

    writer = staticmethod(write_common_o_run)

    name = "common_o"

    def __init__(
        self,
        data: str | os.PathLike,
        split: str = "main",
        *,
        revision: str | None = None,
        concat_images: bool = False,
        image_protocol: str | ImageProtocol | None = None,
        question: str = "dataset",
        similarity: bool = False,
        similarity_model: str | None = None,
    ):
        self.prompts: dict[int, str] = {}  # row -> prompt sent (filled by requests)
        if question not in QUESTION_MODES:
            raise InputError(
                f"--question {question!r} is not a question mode.", f"Use one of: {', '.join(QUESTION_MODES)}."
            )
        self.data, self.split, self.revision = data, split, revision
        self.concat_images, self.question = concat_images, question
        self.protocol = parse_image_protocol(image_protocol)
        self.similarity_model, self.with_similarity = similarity_model, similarity or bool(similarity_model)
        self.images_per_request = 1 if concat_images else 2
        self.description = f"Common-O {split}"
        self.embedder = None
        self.prompts: dict[int, str] = {}  # row -> the prompt sent, for the lmms-eval sample log

    @property
    def template(self) -> str:
        return CONCAT_IMAGE_PROMPT if self.concat_images else MULTI_IMAGE_PROMPT

    def open(self):
        return open_common_o(self.data, self.split, revision=self.revision)

    def prepare(self, dataset) -> None:
        # load the embedder now: a wrong path must fail before hours of generation
        self.embedder = make_embedder(self.similarity_model) if self.with_similarity else None

    def key_parts(self, dataset, info, settings: GenerationSettings) -> dict:
        return self.common_key_parts(
            dataset,
            info,
            settings,
            task="common_o",
            split=self.split,
            prompt=self.template,
            concat_images=self.concat_images,
            image_protocol=self.protocol.spec,
            question=self.question,
        )

    def requests(self, example) -> list[tuple[GenerationRequest, dict]]:
        request = common_o_request(
            example, concat=self.concat_images, image_protocol=self.protocol, question=self.question
        )
        self.prompts[example.row_index] = request.prompt
        return [(request, _example_meta(example, question=self.question))]

    def score(self, meta: dict, output: str) -> dict:
        return score_output(meta, output)

    def run(self, run: TaskRun):
        self.prompts = {}
        return super().run(run)

    def results(self, run: TaskRun, outcome) -> dict:
        dataset = run.dataset
        results = {
            "shard": list(run.shard) if run.shard else None,
            "prompt": {
                "template_id": QUESTION_TEMPLATE_ID,
                "template": self.template,
                "concat_images": self.concat_images,
                "question": self.question,
            },
            "image_protocol": self.protocol.to_dict(),
            "batch_size": run.requested_batch_size or run.infos[0].default_batch_size,
            "final_batch_size": outcome.final_batch_size,
            "oom_events": outcome.oom_events,
            "dataset": {
                "source": dataset.source_name,
                "split": self.split,
                "revision": dataset.revision,
                "fingerprint": dataset.fingerprint,
                "rows_in_split": len(dataset),
                "rows_requested": len(run.indices),
                "rows_scored": len(outcome.records),
                "row_reading": row_reading_summary(outcome.records),
            },
            "metrics": common_o_metrics(outcome.records, seed=run.seed, n_boot=run.n_boot),
            "skipped": len(outcome.skipped),
            **run.outcome_fields(outcome, scored=len(outcome.records)),
        }
        if self.embedder is not None:
            results["object_similarity"] = object_similarity_analysis(outcome.records, embedder=self.embedder)
            results["hallucination_similarity"] = hallucination_similarity_analysis(
                outcome.records, embedder=self.embedder
            )
        return results


def evaluate_common_o(
    data: str | os.PathLike,
    split: str = "main",
    model: str = "none",
    backend: str = "transformers",
    out_dir: str | os.PathLike | None = None,
    *,
    backend_instance: Backend | None = None,
    **options,
) -> dict:
    """Score ``model`` on one Common-O split and return the results dict (also written to ``out_dir``):
    :class:`CommonOTask` run by :func:`commonlink.eval.outputs.evaluate`.

    ``data`` is a Hub id (``facebook/Common-O``), a release folder or a parquet file. ``model`` ``random`` /
    ``none`` runs a weight-free baseline (rows are then read without decoding their images).
    ``backend_instance`` reuses an already loaded backend (several splits in one process). Rerunning with the
    same arguments continues from the prediction cache. ``similarity=True`` (or a ``similarity_model``) adds the
    object-similarity analysis. ``image_protocol`` sizes the images (default ``shorter-side-384``, the paper's;
    ``native``; ``max-pixels-N``); ``question="dataset"`` sends a row's own question verbatim, ``"built"``
    always the paper's prompt built from the choices. ``options`` are :class:`CommonOTask`'s keyword arguments
    (``revision``, ``concat_images``, ``image_protocol``, ``question``, ``similarity``, ``similarity_model``) and
    :class:`RunOptions` fields (``settings``, ``batch_size``, ``limit``, ``rows``, ``shard``, ``backend_options``,
    ``seed``, ``n_boot``, ``progress``, ``max_unreadable_share``, ``report``, ``overwrite``).

    ``shard=(K, N)`` evaluates rows K, K+N, K+2N, ... and writes ``results.shard-K-of-N.json`` etc., so N
    processes (one per GPU) share the work without running any row twice; a final run without ``shard`` on
    the same ``out_dir`` merges their caches into ``results.json`` without loading the model.
    With ``report`` (the default), ``report.html`` (and its thumbnail folder) is written beside the results.
    """
    return evaluate_split(CommonOTask, data, split, model, backend, out_dir, backend_instance, options)


def evaluate_split(task_class, data, split, model, backend, out_dir, backend_instance, options) -> dict:
    """The body of :func:`evaluate_common_o` and :func:`evaluate_perception`: ``task_class(data, split, **its
    options)`` run for ``model`` (``backend_instance``: an already loaded backend to reuse)."""
    instances = [backend_instance] if backend_instance is not None else None
    return evaluate_with(
        functools.partial(task_class, data, split),
        options,
        models=[model],
        backend=backend,
        out_dir=out_dir,
        backend_instances=instances,
    )


def lmms_eval_samples(
    records: Iterable[dict], *, concat: bool = False, prompts: dict[int, str] | None = None
) -> Iterator[dict]:
    """Our predictions as lmms-eval per-sample entries (doc_id = row index, filtered = the parsed letters);
    ``prompts`` (row -> prompt sent) when known, else the paper's prompt built from the choices."""
    for r in records:
        yield {
            "doc_id": r["row_index"],
            "doc": {k: r[k] for k in _FACT_FIELDS if k in r},
            "target": ", ".join(r["ground_truth_letters"]),
            "prompt": (prompts or {}).get(r["row_index"]) or common_o_question(r["choices"], concat=concat),
            "response": r["raw_output"],
            "filtered": ", ".join(r["parsed_letters"] or []),
            "scores": {"acc": float(r["correct"]), "hallucination_rate": r["hallucinated"] / max(1, r["num_choices"])},
        }


def write_outputs(
    out_dir: Path, results: dict, records: Sequence[dict], *, suffix: str = "", prompts: dict[int, str] | None = None
) -> None:
    """``predictions{suffix}.jsonl``, ``results{suffix}.json`` and ``results{suffix}.md``, each written atomically,
    and the same run in lmms-eval's convention under ``lmms_eval/`` (see :mod:`commonlink.eval.results`)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    write_jsonl(out_dir / f"predictions{suffix}.jsonl", records)
    atomic_write_json(out_dir / f"results{suffix}.json", results)
    atomic_write_text(out_dir / f"results{suffix}.md", render_markdown_table(results, breakdowns=True) + "\n")
    if results.get("task") == "common_o":
        split = results.get("dataset", {}).get("split", "main")
        metrics = lmms_eval_metrics(
            results["metrics"]["overall"],
            {"acc": "accuracy", "hallucination_rate": "hallucination_rate", "parse_failure_rate": "parse_failure_rate"},
        )
        write_lmms_eval_files(
            out_dir,
            LMMS_TASKS.get(split, f"common_o_{split}"),
            results,
            metrics,
            lmms_eval_samples(records, concat=bool(results.get("prompt", {}).get("concat_images")), prompts=prompts),
            suffix=suffix,
        )


def refuse_duplicate_ids(predictions: Path, lines: list[dict]) -> None:
    """Each example is scored once: a predictions file listing an id twice (two runs concatenated) is refused."""
    counts = Counter(str(line.get("id")) for line in lines)
    doubled = sorted(i for i, n in counts.items() if n > 1)
    if doubled:
        raise InputError(
            f"{predictions} lists {len(doubled)} id(s) more than once (duplicate predictions, e.g. "
            f"{', '.join(doubled[:5])}); "
            "each example must be scored once.",
            "Keep one line per id (e.g. the predictions.jsonl of one run, not several concatenated).",
        )


_FACT_FIELDS = (
    "id",
    "row_index",
    "source",
    "num_objects_image_1",
    "num_objects_image_2",
    "num_choices",
    "choices",
    "ground_truth",
    "ground_truth_letters",
)


def score_predictions(
    predictions: str | os.PathLike,
    data: str | os.PathLike | None = None,
    split: str | None = None,
    *,
    revision: str | None = None,
    seed: int = 0,
    n_boot: int = N_BOOTSTRAP,
    out_dir: str | os.PathLike | None = None,
    run_name: str | None = None,
) -> dict:
    """Recompute every metric from a ``predictions.jsonl``, an lmms-eval samples file (``*_samples_<task>.jsonl``)
    or a VLMEvalKit prediction file (xlsx/tsv/json): raw outputs are parsed again and scored.

    With ``data``, the choices and ground truth come from the dataset (authoritative; rows matched by ``id``, or
    by ``doc_id``/``index`` when a harness file names none; a prediction whose id is not in the split, or whose
    row differs from what the file says was asked (target, prompt, choices), is refused: the file was made on other
    data, see :mod:`.harness_check`; rows are read without decoding their images). ``split``: None takes the split
    the file says (a harness file's name, the ``results.json`` beside our predictions), else ``main``.
    Without ``data``, the facts come from the predictions file itself (no dataset access). Settings of the
    original run are taken from ``results.json`` next to the predictions when present.
    """

    predictions = Path(predictions)
    kind = prediction_file_kind(predictions)
    previous = predictions.parent / "results.json"
    base = {}
    if kind == "commonlink" and previous.is_file():
        base = {
            k: v
            for k, v in json.loads(previous.read_text(encoding="utf-8")).items()
            if k not in ("metrics", "object_similarity", "hallucination_similarity")
        }
    if kind == "commonlink":
        lines = _read_predictions(predictions, facts_needed=data is None)
        split = split or (base.get("dataset") or {}).get("split") or "main"
        records, skipped, dataset_info = _score_lines(lines, data, split, revision, path=predictions)
    else:
        records, skipped, dataset_info = _score_harness_file(predictions, data, split, revision)
    results = dict(base)
    results.update(
        task="common_o",
        toolkit_version=__version__,
        rescored_from=str(predictions),
        dataset=dict(base.get("dataset", {}), **dataset_info, rows_scored=len(records)),
        facts_from="dataset" if data is not None else "predictions file",
        seed=seed,  # the bootstrap of these metrics, not necessarily the original run's
        bootstrap_resamples=n_boot,
        metrics=common_o_metrics(records, seed=seed, n_boot=n_boot),
        skipped=len(skipped),
        skipped_rows=skipped,
        predictions_format=kind,
    )
    check_run_name(run_name)
    # a rescored run keeps its name; a bare file is named after itself (pass run_name to choose)
    results["run_name"] = (
        run_name or base.get("run_name") or (default_run_name(results) if base.get("model") else predictions.stem)
    )
    if out_dir is not None:
        write_outputs(Path(out_dir), results, records)
    return results


def _score_lines(
    lines: list[dict], data, split: str, revision: str | None, *, path: Path
) -> tuple[list[dict], list[dict], dict]:
    if data is None:
        return [score_output({k: line[k] for k in _FACT_FIELDS}, line["raw_output"]) for line in lines], [], {}
    return _rescore_against(
        data, split, revision, {str(line["id"]): line["raw_output"] for line in lines}, facts=lines, path=path
    )


def _facts_from_doc(doc: dict | None, row: int) -> dict | None:
    """The facts scoring needs from a harness's copy of a row: our own fact fields (a commonlink run's lmms_eval/
    samples), or a published-schema row (lmms-eval's, images dropped; our VLMEvalKit TSV's columns)."""
    if not doc:
        return None
    if all(k in doc for k in _FACT_FIELDS if k != "row_index"):
        return {"row_index": row} | {k: doc[k] for k in _FACT_FIELDS if k in doc}
    if "choices" in doc and "ground_truth_objects" in doc:
        return {"row_index": row} | _example_meta(example_from_row(doc, images=False))
    return None


class _FactRow:
    """The file's own copy of a row, checked like a data row against the file's target and prompt."""

    def __init__(self, facts: dict):
        self.choices, self.answer_letters = list(facts["choices"]), list(facts["ground_truth_letters"])


def _score_harness_file(
    path: Path, data, split: str | None, revision: str | None
) -> tuple[list[dict], list[dict], dict]:
    """Records of an lmms-eval samples file or a VLMEvalKit prediction file (:mod:`.harness_files`):
    scored against ``data`` (rows matched by id, or by position when the file names none, and checked against what
    the file says was asked: :mod:`.harness_check`), else from the facts the file carries."""
    read = read_harness_answers(path)
    split = file_split(path, read, split)
    harness = {"harness_task": read.task} if read.task else {}
    facts = [_facts_from_doc(a["doc"], a["row"]) for a in read.answers]
    if data is None:
        missing = sum(f is None for f in facts)
        if missing:
            raise InputError(
                f"{path}: {missing} of {len(read.answers)} answers come without their row ({read.kind} did not keep "
                "the document).",
                "Pass --data (and --split) with the dataset the harness ran on; rows are matched by position (doc_id / "
                "index) and checked against the file's target and prompt.",
            )
        mismatches = [
            (f"doc_id {a['row']}", what)
            for f, a in zip(facts, read.answers)
            if (what := row_mismatch(_FactRow(f), a)) is not None
        ]
        refuse_mismatches(path, mismatches, len(read.answers), "its own documents", split)
        records = [score_output(f, a["raw_output"]) for f, a in zip(facts, read.answers)]
        return records, read.failed, {"split": split, "source": f"{read.kind} file (unverified)", **harness}
    dataset = open_common_o(data, split, revision=revision)
    for answer, fact in zip(read.answers, facts):
        answer["facts"] = fact
    records = [
        score_output(_example_meta(example), a["raw_output"])
        for example, a in match_answers(path, read, dataset, data, split)
    ]
    info = dict(
        source=dataset.source_name, split=split, revision=dataset.revision, fingerprint=dataset.fingerprint, **harness
    )
    return records, read.failed, info


def _read_predictions(predictions: Path, *, facts_needed: bool) -> list[dict]:
    """The lines of a predictions file, refused when empty, with an id twice, or lacking a needed field."""
    lines = list(read_jsonl(predictions))
    if not lines:  # scoring nothing would print a table of zeros that looks like a result
        raise InputError(
            f"{predictions} holds no predictions.",
            "Give the predictions.jsonl of a run that answered rows (rerun `commonlink eval commono` with the same "
            "--out to finish one).",
        )
    refuse_duplicate_ids(predictions, lines)
    needed = (*_FACT_FIELDS, "raw_output") if facts_needed else ("id", "raw_output")
    for n, line in enumerate(lines, start=1):
        missing = [k for k in needed if k not in line]
        if missing:
            raise InputError(
                f"{predictions}, line {n}: lacks {', '.join(missing)}.",
                "Give a predictions.jsonl written by `commonlink eval commono`"
                + (", or pass --data to take the facts from the dataset" if facts_needed else "")
                + ".",
            )
    return lines


def _rescore_against(
    data,
    split: str,
    revision: str | None,
    outputs: dict[str, str],
    *,
    facts: Sequence[dict] = (),
    path: Path | None = None,
) -> tuple[list[dict], list[dict], dict]:
    """(records, skipped rows, dataset facts): each output scored against its row of the dataset (read
    without images); an output whose id is not a row of the split, or whose ``facts`` (choices, answer) differ
    from the row's, is an error."""
    records, skipped, mismatches = [], [], []
    facts_by_id = {str(f["id"]): f for f in facts}
    dataset = open_common_o(data, split, revision=revision)
    for i in range(len(dataset)):
        if not outputs:
            break
        try:
            example = dataset.get(i, images=False)  # scoring needs the text fields only
        except Exception as exc:  # noqa: BLE001 - reported like in a run
            skipped.append({"row": i, "id": None, "reason": getattr(exc, "problem", str(exc))})
            continue
        if example.id in outputs:
            what = row_mismatch(example, {}, facts_by_id.get(example.id))
            if what is not None:
                mismatches.append((f"id {example.id}", what))
            records.append(score_output(_example_meta(example), outputs.pop(example.id)))
    if outputs:
        missing_ids = sorted(outputs)[:5]
        raise InputError(
            f"{len(outputs)} prediction id(s) are not rows of {data} split {split!r} (e.g. {', '.join(missing_ids)}).",
            "Score against the dataset and split the predictions were made on (see results.json).",
        )
    refuse_mismatches(path or Path("predictions"), mismatches, len(records), data, split)
    return (
        records,
        skipped,
        dict(source=dataset.source_name, split=split, revision=dataset.revision, fingerprint=dataset.fingerprint),
    )
