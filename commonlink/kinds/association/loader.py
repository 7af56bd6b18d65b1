"""Typed association tasks, read from an association release (local folder or Hub repo) or from chain files.

::

    from commonlink.loaders import load_association
    for chain in load_association("my-release", "synchronous"):
        for step in chain.steps:
            step.query.image, step.candidates[0].image, step.candidates[1].image   # PIL images
            step.answer                                                              # index of the positive

Images are *resolved lazily*: every task holds :class:`AssociationImage` references (id and labels) whose
``.image`` decodes the picture on first access (a small cache keeps recent ones), because a 500-step chain
references about a thousand images and a run usually stops long before its end.

Sources:

* a release folder written by ``commonlink release build`` (or a Hub repo id with ``revision``): read with
  ``datasets.load_dataset(path, config)``; the ``images`` config holds each image once, tasks hold image ids;
* chain files written by ``commonlink chains`` (a ``<task>.jsonl`` or the folder holding them): tasks hold
  indices into ``images.jsonl``, whose entries say where the pixels are (file path, HF dataset row, crop box).
"""

from __future__ import annotations

import json
import os
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from commonlink.errors import InputError, SchemaError
from commonlink.formats.meta import ASSOCIATION_CHAINS_KIND, meta_path
from commonlink.kinds.association.format import (
    PLAN_BRIDGE,
    ImageFetcher,
    read_chain_meta,
    read_image_table,
    step_concept_codes,
    task_file,
)
from commonlink.loaders.hub_ids import require_hub_dataset

CONFIGS = ("single_step", "deduction", "synchronous", "asynchronous")
RELEASE_SPLIT = "test"


@dataclass
class AssociationImage:
    """A reference to one image of the task set; ``.image`` decodes it (PIL) on access."""

    id: str
    labels: list[str]
    _open: Callable[[str], Any] = field(repr=False, compare=False, default=None)
    name: str | None = None  #: what the image shows (OCL object, Pangea action phrase), None when unnamed

    @property
    def image(self) -> Any:
        """The decoded image (``PIL.Image.Image``), cropped to the sample's box where it has one."""
        if self._open is None:
            raise InputError(
                f"Image {self.id} has no image source attached.", "Load tasks with commonlink.loaders.load_association."
            )
        return self._open(self.id)


class _TwoCandidates:
    """``positive`` / ``negative`` of a task with ``candidates`` (two images) and ``answer`` (index of the positive)."""

    candidates: list[AssociationImage]
    answer: int

    @property
    def positive(self) -> AssociationImage:
        return self.candidates[self.answer]

    @property
    def negative(self) -> AssociationImage:
        return self.candidates[1 - self.answer]


@dataclass
class SingleStepTask(_TwoCandidates):
    """Single-step association (paper §4.1.1): the memory is fixed and correct."""

    id: str
    concept: str  #: the concept the positive shares with the query
    concept_kind: str  #: what concepts are (attribute, affordance, action, object...), for prompts
    query: AssociationImage
    memory: list[AssociationImage]  #: K images known to carry ``memory_concept`` (prior practice)
    memory_concept: str
    candidates: list[AssociationImage]  #: two images, positive and negative, shuffled
    answer: int  #: index of the positive in ``candidates``
    options: list[str]  #: every concept of the build (the deduction option list)


@dataclass
class DeductionTask:
    """Deduction (paper §3 eq. 2): name the concepts two associated images share."""

    id: str
    concept: str  #: the pool the two images were drawn from
    concept_kind: str
    image_1: AssociationImage
    image_2: AssociationImage
    options: list[str]  #: the option list shown to the model
    gold: list[str]  #: every option both images carry (in option order; includes ``concept``)


@dataclass
class ChainStep(_TwoCandidates):
    """One step of a chain: choose which of two candidates shares the step's concept with the query."""

    index: int  #: 0-based position in the chain (warm-up steps first)
    query: AssociationImage  #: the previous step's positive (the chain's start image for step 0)
    candidates: list[AssociationImage]  #: [positive, negative] in shuffled order
    answer: int  #: index of the positive in ``candidates``
    concept: str  #: the chain concept the positive shares with the query at this step
    warmup: bool  #: warm-up step (the harness forces the correct choice and does not score it)
    bridge: bool  #: asynchronous bridge step (positive carries both concepts)
    gold: list[str]  #: options the query and the positive share (the deduction answer after this step)


@dataclass
class Chain:
    """A synchronous (one concept) or asynchronous (two alternating concepts) chain, pre-sampled to its cap."""

    id: str
    kind: str  #: "synchronous" | "asynchronous"
    concepts: list[str]
    concept_kind: str
    warmup: int  #: number of warm-up steps at the start
    options: list[str]
    plan: str  #: one character a step: "1"/"2" on concept 1/2, "b" bridge
    steps: list[ChainStep]

    def __len__(self) -> int:
        return len(self.steps)

    @property
    def scored_steps(self) -> list[ChainStep]:
        return [s for s in self.steps if not s.warmup]


AssociationTask = SingleStepTask | DeductionTask | Chain


# ---------------------------------------------------------------------------------------------- image stores
class _ImageStore:
    """id -> labels, and id -> decoded image (small LRU cache)."""

    def __init__(
        self,
        labels: dict[str, list[str]],
        opener: Callable[[str], Any],
        cache_size: int = 64,
        names: dict[str, str | None] | None = None,
    ):
        self._labels = labels
        self._names = names or {}
        self._opener = opener
        self._cache: OrderedDict[str, Any] = OrderedDict()
        self._cache_size = cache_size

    def ref(self, image_id: str) -> AssociationImage:
        if image_id not in self._labels:
            raise SchemaError(
                f"Image id {image_id!r} is referenced by a task but missing from the images table.",
                "Rebuild the release (or chain files); the images table must hold every referenced image.",
            )
        return AssociationImage(image_id, self._labels[image_id], self.open, name=self._names.get(image_id))

    def open(self, image_id: str) -> Any:
        img = self._cache.get(image_id)
        if img is None:
            img = self._opener(image_id)
            self._cache[image_id] = img
            if len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(image_id)
        return img


# ---------------------------------------------------------------------------------------------- row -> task
def _shared(a: AssociationImage, b: AssociationImage, options: Sequence[str]) -> list[str]:
    both = set(a.labels) & set(b.labels)
    return [o for o in options if o in both]


def single_step_from_row(
    row: dict, ref: Callable[[Any], AssociationImage], *, options: list[str], concept_kind: str
) -> SingleStepTask:
    return SingleStepTask(
        id=row["id"],
        concept=row["concept"],
        concept_kind=row.get("concept_kind", concept_kind),
        query=ref(row["query"]),
        memory=[ref(m) for m in row["memory"]],
        memory_concept=row.get("memory_concept", row["concept"]),
        candidates=[ref(c) for c in row["candidates"]],
        answer=int(row["answer"]),
        options=list(row.get("options") or options),
    )


def deduction_from_row(
    row: dict, ref: Callable[[Any], AssociationImage], *, options: list[str], concept_kind: str
) -> DeductionTask:
    return DeductionTask(
        id=row["id"],
        concept=row["concept"],
        concept_kind=row.get("concept_kind", concept_kind),
        image_1=ref(row["image_1"]),
        image_2=ref(row["image_2"]),
        options=list(row.get("options") or options),
        gold=list(row["gold"]),
    )


def chain_from_row(
    row: dict, ref: Callable[[Any], AssociationImage], *, options: list[str], concept_kind: str
) -> Chain:
    concepts = list(row["concepts"])
    plan = row["plan"]
    positives, negatives, answers = row["positive"], row["negative"], row["answer"]
    if not (len(positives) == len(negatives) == len(answers) == len(plan)):
        raise SchemaError(
            f"Chain {row['id']}: positive/negative/answer/plan lengths differ.", "Rebuild the chain files."
        )
    options = list(row.get("options") or options)
    codes = step_concept_codes(plan)
    warmup = int(row.get("warmup", 0))
    steps = []
    query = ref(row["start"])
    for t, (p, n, a) in enumerate(zip(positives, negatives, answers)):
        positive, negative = ref(p), ref(n)
        a = int(a)
        steps.append(
            ChainStep(
                index=t,
                query=query,
                candidates=[positive, negative] if a == 0 else [negative, positive],
                answer=a,
                concept=concepts[int(codes[t])],
                warmup=t < warmup,
                bridge=plan[t] == PLAN_BRIDGE,
                gold=_shared(query, positive, options),
            )
        )
        query = positive
    return Chain(
        id=row["id"],
        kind=row.get("kind", "synchronous"),
        concepts=concepts,
        concept_kind=row.get("concept_kind", concept_kind),
        warmup=warmup,
        options=options,
        plan=plan,
        steps=steps,
    )


_DECODERS = {
    "single_step": single_step_from_row,
    "deduction": deduction_from_row,
    "synchronous": chain_from_row,
    "asynchronous": chain_from_row,
}


# ---------------------------------------------------------------------------------------------- splits
class AssociationSplit:
    """One config of an association task set: ``len()``, ``get(i)``, iteration (typed tasks)."""

    def __init__(
        self,
        config: str,
        rows: Any,
        ref: Callable[[Any], AssociationImage],
        *,
        options: list[str],
        concept_kind: str,
        source_name: str,
        fingerprint: str,
        revision: str | None = None,
    ):
        self.config = config
        self._rows = rows  # a datasets.Dataset or a list of dicts
        self._ref = ref
        self.options = options
        self.concept_kind = concept_kind
        self.source_name = source_name
        self.fingerprint = fingerprint
        self.revision = revision

    def __len__(self) -> int:
        return len(self._rows)

    def get(self, i: int) -> AssociationTask:
        row = self._rows[i]
        try:
            return _DECODERS[self.config](row, self._ref, options=self.options, concept_kind=self.concept_kind)
        except KeyError as exc:
            raise SchemaError(
                f"{self.source_name} [{self.config}] row {i}: missing field {exc}.",
                "Rebuild the release with `commonlink release build`.",
            ) from exc

    def __iter__(self) -> Iterator[AssociationTask]:
        for i in range(len(self)):
            yield self.get(i)

    def steps_of(self, i: int) -> int:
        """Steps a chain row holds (warm-up included), read without decoding its images; 1 for other tasks."""
        row = self._rows[i]
        return len(row["plan"]) if "plan" in row else 1

    def group_of(self, i: int) -> str:
        """The concept (chains on two: ``a+b``) of row ``i``, read without decoding its images."""
        row = self._rows[i]
        return "+".join(row["concepts"]) if "concepts" in row else str(row["concept"])


class _JsonlRows:
    """Random access to the lines of a JSON-lines file (offsets indexed once; a row is parsed when asked for)."""

    def __init__(self, path: Path):
        self.path = path
        self._offsets: list[int] = []
        with path.open("rb") as handle:
            offset = 0
            for line in handle:
                if line.strip():
                    self._offsets.append(offset)
                offset += len(line)

    def __len__(self) -> int:
        return len(self._offsets)

    def __getitem__(self, i: int) -> dict:
        with self.path.open("rb") as handle:
            handle.seek(self._offsets[i])
            line = handle.readline()
        try:
            return json.loads(line)
        except json.JSONDecodeError as exc:
            raise SchemaError(f"{self.path}, row {i}: not valid JSON ({exc.msg}).", "Rebuild the chain files.") from exc


def _check_config(config: str) -> None:
    if config not in CONFIGS:
        raise InputError(f"Unknown association config {config!r}.", f"Use one of: {', '.join(CONFIGS)}.")


def _chain_file_for(path: Path, config: str) -> Path | None:
    if path.is_dir():
        candidate = task_file(path, config)
        return candidate if meta_path(candidate).is_file() else None
    if path.is_file() and meta_path(path).is_file():
        try:
            meta = json.loads(meta_path(path).read_text(encoding="utf-8"))
        except json.JSONDecodeError:
            return None
        if meta.get("kind") == ASSOCIATION_CHAINS_KIND:
            if meta.get("task") != config:
                sibling = task_file(path.parent, config)
                if meta_path(sibling).is_file():
                    return sibling
                raise InputError(
                    f"{path} holds {meta.get('task')!r} tasks, not {config!r}.",
                    f"Pass the {config}.jsonl chain file (or the folder holding it).",
                )
            return path
    return None


def _open_chain_file(path: Path, config: str, catalog_root: str | os.PathLike | None = None) -> AssociationSplit:
    meta = read_chain_meta(path)
    table = read_image_table(path, meta, catalog_root=catalog_root)
    by_id = {img.id: img for img in table}
    labels = {img.id: img.labels for img in table}
    fetcher = ImageFetcher()

    def opener(image_id: str):
        img = by_id[image_id]
        return fetcher.open(img.origin, img.crop, what=f"image {image_id}")

    store = _ImageStore(labels, opener, names={img.id: img.name for img in table})

    def ref(index: Any) -> AssociationImage:
        if not isinstance(index, int) or not 0 <= index < len(table):
            raise SchemaError(
                f"{path}: image index {index!r} is outside images.jsonl ({len(table)} images).",
                "Rebuild the chain files.",
            )
        return store.ref(table[index].id)

    rows = _JsonlRows(path)
    return AssociationSplit(
        config,
        rows,
        ref,
        options=list(meta.get("options") or []),
        concept_kind=meta.get("concept_kind", "concept"),
        source_name=str(path),
        fingerprint=meta.get("sha256") or "",
    )


def _open_release(path_or_repo: str, config: str, revision: str | None) -> AssociationSplit:
    import datasets

    kwargs = {"revision": revision} if revision else {}
    try:
        tasks = datasets.load_dataset(path_or_repo, config, split=RELEASE_SPLIT, **kwargs)
        images = datasets.load_dataset(path_or_repo, "images", split=RELEASE_SPLIT, **kwargs)
    except ValueError as exc:
        raise InputError(
            f"{path_or_repo}: cannot load config {config!r} ({exc}).",
            "Check that it is an association release and has this config (see its README configs).",
        ) from exc
    except FileNotFoundError as exc:  # datasets' DatasetNotFoundError, also raised for an unknown revision
        if revision and "revision" in str(exc).lower():
            raise InputError(
                f"{path_or_repo}: revision {revision!r} not found ({exc}).",
                "List the versions with `commonlink release versions REPO`.",
            ) from exc
        raise InputError(
            f"Association release {path_or_repo!r} not found ({exc}).", "Check the path or repo id."
        ) from exc
    ids = list(images["id"])
    labels = {image_id: list(image_labels) for image_id, image_labels in zip(ids, images["labels"])}
    row_of = {image_id: row for row, image_id in enumerate(ids)}
    # releases built before images carried names have no name column: every image is unnamed there
    names = dict(zip(ids, images["name"])) if "name" in images.column_names else {}

    def opener(image_id: str):
        return images[row_of[image_id]]["image"]

    store = _ImageStore(labels, opener, names=names)
    options: list[str] = []
    concept_kind = "concept"
    if len(tasks):
        first = tasks[0]
        options = list(first.get("options") or [])
        concept_kind = first.get("concept_kind") or concept_kind
    return AssociationSplit(
        config,
        tasks,
        store.ref,
        options=options,
        concept_kind=concept_kind,
        source_name=str(path_or_repo),
        fingerprint=tasks._fingerprint,
        revision=revision,
    )


def open_association(
    path_or_repo: str | os.PathLike,
    config: str,
    revision: str | None = None,
    *,
    catalog_root: str | os.PathLike | None = None,
) -> AssociationSplit:
    """Open one config (``single_step``, ``deduction``, ``synchronous``, ``asynchronous``) of a task set.

    ``catalog_root``: for chain files, where their catalogs are looked up (``--catalog-root``).
    """
    _check_config(config)
    path = Path(path_or_repo)
    if path.exists():
        chain_file = _chain_file_for(path, config)
        if chain_file is not None:
            return _open_chain_file(chain_file, config, catalog_root)
        if path.is_dir() and not (path / "README.md").is_file():
            raise InputError(
                f"{path} is neither an association release nor a folder of chain files with {config}.jsonl.",
                "Pass a folder written by `commonlink release build` or `commonlink chains`.",
            )
    else:
        require_hub_dataset(str(path_or_repo), revision, option="--association/--data")
    return _open_release(str(path_or_repo), config, revision)


def load_association(
    path_or_repo: str | os.PathLike,
    config: str,
    revision: str | None = None,
    *,
    catalog_root: str | os.PathLike | None = None,
) -> Iterator[AssociationTask]:
    """Yield the typed tasks of one config, images resolved lazily (see module docstring)."""
    yield from open_association(path_or_repo, config, revision, catalog_root=catalog_root)


__all__ = [
    "AssociationImage",
    "SingleStepTask",
    "DeductionTask",
    "ChainStep",
    "Chain",
    "AssociationSplit",
    "open_association",
    "load_association",
    "CONFIGS",
]
