"""The rows of a Common-O pairs run, built one at a time as they are read.

:func:`commonlink.kinds.common_o.pairs.sample_pairs` puts the pairs in a seeded order with a seeded side each (a
:class:`RowPlan`: 17 bytes a row) and reads one record per image used
(:func:`commonlink.kinds.common_o.pair_index.read_image_entries`). :class:`PairRows` builds each row from those when it
is read, drawing its choices from the run's seeded choice generator in row order, so a run of any size holds one
row at a time while its file is written, never all of them (a row with its two image records is a few KB).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from commonlink.constants import NO_COMMON_OBJECTS
from commonlink.errors import NotEnoughDataError
from commonlink.formats.catalog import SOURCES
from commonlink.kinds.common_o.format import QUESTION_TEMPLATE_ID, common_o_question, letters

#: How distractors are drawn (``pairs --distractors``): ``one-image`` objects shown in only one image first,
#: then objects in neither, uniformly; ``co-occurring`` objects that co-occur with the true ones in the catalog
#: (Common-O §4.2: models hallucinate more "when similar objects are present ... relying on object
#: co-occurrence"), drawn in proportion to how often they appear with them, then the rest uniformly.
DISTRACTOR_MODES = ("one-image", "co-occurring")


def cooccurrence(object_sets: Iterable[Iterable[str]]) -> dict[str, dict[str, int]]:
    """``{a: {b: images showing both}}`` (a != b) over ``object_sets`` (one set of names per catalog image)."""
    counts: dict[str, dict[str, int]] = {}
    for objects in object_sets:
        names = sorted(set(objects))
        for a in names:
            row = counts.setdefault(a, {})
            for b in names:
                if b != a:
                    row[b] = row.get(b, 0) + 1
    return counts


def _cooccurring(
    anchors: Sequence[str], candidates: list[str], n: int, cooccur: dict[str, dict[str, int]], rng
) -> list[str]:
    """``n`` of ``candidates``: drawn without replacement in proportion to their co-occurrence with ``anchors``,
    then (when fewer co-occur) uniformly from the rest."""
    weights = np.asarray([sum(cooccur.get(a, {}).get(c, 0) for a in anchors) for c in candidates], dtype=np.float64)
    seen = np.flatnonzero(weights > 0)
    take = min(n, len(seen))
    picked = rng.choice(seen, size=take, replace=False, p=weights[seen] / weights[seen].sum()).tolist() if take else []
    rest = np.setdiff1d(np.arange(len(candidates)), picked)
    picked += rest[rng.permutation(len(rest))[: n - take]].tolist()
    return [candidates[j] for j in picked]


def build_choices(
    objects_1: Iterable[str],
    objects_2: Iterable[str],
    vocabulary: Sequence[str],
    min_choices: int,
    rng: np.random.Generator,
    cooccur: dict[str, dict[str, int]] | None = None,
) -> tuple[list[str], list[str], str]:
    """Lettered choices for two object sets: ``(choices, ground_truth, answer)``.

    Choices are the common objects, distractors (objects in only one image first, then objects in neither,
    drawn from ``vocabulary``) and "No objects are in common", shuffled; there are ``max(min_choices, k + 2)``
    of them: exactly ``min_choices`` (8 by default, as every list the paper prints) while the k common objects
    leave room for a distractor, else every common object, "No objects are in common" and one distractor (so
    the answer is never simply "every object listed"). With 8 choices: k <= 6 gives 8 choices; k = 7 gives 9;
    the challenge split's k = 8..16 gives k + 2. ``ground_truth`` lists the common objects
    in letter order (or the "none" choice); ``answer`` is their letters, e.g. ``"A, C"``. With ``cooccur``
    (:func:`cooccurrence` of the catalog), distractors are the ``co-occurring`` mode's: objects of ``vocabulary``
    that are not common, in proportion to their co-occurrence with the common objects (with none in common:
    with the objects of either image), then uniformly.
    """
    set_1, set_2 = set(objects_1), set(objects_2)
    common = sorted(set_1 & set_2)
    n_choices = max(min_choices, len(common) + 2)
    n_distractors = n_choices - 1 - len(common)
    if cooccur is not None:
        candidates = sorted(set(vocabulary) - set(common))
        if len(candidates) < n_distractors:
            raise NotEnoughDataError(
                f"Only {len(candidates) + len(common)} object names are known: {n_choices} choices need "
                f"{n_choices - 1}.",
                "Lower --choices, or add catalogs with more kinds of objects.",
            )
        anchors = common or sorted(set_1 | set_2)
        return _lettered(common, _cooccurring(anchors, candidates, n_distractors, cooccur, rng), rng)
    only_one = sorted(set_1 ^ set_2)
    distractors = [only_one[j] for j in rng.permutation(len(only_one))[:n_distractors].tolist()]
    if len(distractors) < n_distractors:
        union = set_1 | set_2
        neither = sorted(set(vocabulary) - union)
        need = n_distractors - len(distractors)
        if len(neither) < need:
            raise NotEnoughDataError(
                f"Only {len(neither) + len(only_one) + len(common)} object names are known: {n_choices} choices need "
                f"{n_choices - 1}.",
                "Lower --choices, or add catalogs with more kinds of objects.",
            )
        distractors += [neither[j] for j in rng.choice(len(neither), size=need, replace=False).tolist()]
    return _lettered(common, distractors, rng)


def _lettered(common: list[str], distractors: list[str], rng: np.random.Generator) -> tuple[list[str], list[str], str]:
    """The shuffled, lettered choices, the ground truth in letter order and the answer letters."""
    options = common + distractors + [NO_COMMON_OBJECTS]
    choices = [options[j] for j in rng.permutation(len(options)).tolist()]
    truth_set = set(common) if common else {NO_COMMON_OBJECTS}
    labels = letters(len(choices))
    truth_positions = [j for j, c in enumerate(choices) if c in truth_set]
    ground_truth = [choices[j] for j in truth_positions]
    answer = ", ".join([labels[j] for j in truth_positions])
    return choices, ground_truth, answer


class ImageFields(NamedTuple):
    """The ``image_N`` fields of the rows that show one image, as read from its catalog record: a tuple of shared
    strings and numbers (a fraction of a dict's size), kept once per image used; :meth:`as_dict` makes a row's."""

    catalog: str
    id: str
    path: str
    scene_id: str
    view: Any
    background: Any
    objects: tuple[str, ...]
    area_names: tuple[str, ...] | None  #: object_area's keys and values, None when the record has none
    area_values: tuple[float, ...] | None
    width: int
    height: int
    sha256: str

    def as_dict(self) -> dict:
        """The fields as a row holds them (pairs-file format), with lists and dicts of its own."""
        area = dict(zip(self.area_names, self.area_values)) if self.area_names is not None else None
        return {
            "catalog": self.catalog,
            "id": self.id,
            "path": self.path,
            "scene_id": self.scene_id,
            "view": self.view,
            "background": self.background,
            "objects": list(self.objects),
            "object_area": area,
            "width": self.width,
            "height": self.height,
            "sha256": self.sha256,
        }


@dataclass
class RowPlan:
    """Everything a row needs but its image records and choices, in row order."""

    split: str
    images: np.ndarray  #: int64 (n, 2): global image indices of image_1 and image_2
    sources: np.ndarray  #: uint8 (n,): index into SOURCES
    vocabularies: dict[int, list[str]]  #: source -> the object names its distractors are drawn from
    min_choices: int
    #: the run's choice generator, new at each call: rows draw from it in row order
    choice_rng: Callable[[], np.random.Generator]
    choice_counts: dict[int, int]  #: rows per number of choices
    #: source -> co-occurrence counts of its catalog images (``--distractors co-occurring``), else None
    cooccurrence: dict[int, dict[str, dict[str, int]]] | None = None


class PairRows(Sequence):
    """The rows of a pairs run (pairs-file format, docs/sampling.md), built as they are read.

    ``len``, iteration (as often as wanted, the same rows each time; one row held at a time), ``==`` with a list,
    indexing. Row i's choices are drawn after those of rows 0..i-1, so the first index builds every row once and
    keeps them (memory then grows with the rows, as a list's would). Each row is a fresh dict: changing one
    changes nothing here.
    """

    def __init__(self, plan: RowPlan, entries: dict[int, ImageFields]):
        self._plan = plan
        self._entries = entries
        self._built: list[dict] | None = None  # every row, once something indexes

    def __len__(self) -> int:
        return len(self._plan.sources)

    def __getitem__(self, i):
        if self._built is None:  # indexing from the start each time would make a loop over the rows quadratic
            self._built = list(self)
        if isinstance(i, slice):
            return copy.deepcopy(self._built[i])
        if not -len(self) <= i < len(self):
            raise IndexError(f"row {i} of {len(self)}")
        return copy.deepcopy(self._built[i])

    def __iter__(self) -> Iterator[dict]:
        plan, entries = self._plan, self._entries
        rng = plan.choice_rng()
        for i in range(len(self)):
            s = plan.sources.item(i)
            one, two = entries[plan.images.item(i, 0)], entries[plan.images.item(i, 1)]
            choices, truth, answer = build_choices(
                one.objects,
                two.objects,
                plan.vocabularies[s],
                plan.min_choices,
                rng,
                plan.cooccurrence[s] if plan.cooccurrence is not None else None,
            )
            yield {
                "id": f"{plan.split}-{i:08d}",
                "split": plan.split,
                "source": SOURCES[s],
                "image_1": one.as_dict(),
                "image_2": two.as_dict(),
                "choices": choices,
                "ground_truth": truth,
                "answer": answer,
                "question": common_o_question(choices),
                "question_template": QUESTION_TEMPLATE_ID,
            }

    def __eq__(self, other) -> bool:
        if isinstance(other, (PairRows, list)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  (compares by content, like a list)

    def __repr__(self) -> str:
        return f"<PairRows: {len(self)} {self._plan.split} rows>"
