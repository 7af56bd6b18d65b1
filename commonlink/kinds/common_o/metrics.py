"""Common-O and perception metrics (paper §3.2, §7, §9), with seeded bootstrap standard errors.

Per example (Common-O), with P the predicted choice set, T the ground-truth set and C the choices:

* correct: P == T (exact set match; an unparseable output is P = {} and so wrong);
* hallucinated (the paper's §3.2 formula): |P \\ T| over the lettered choices, so a wrong "No objects are in
  common" counts as a false positive like any wrong object; hallucination rate: |P \\ T| / |C|;
* object hallucinations (our second, clearly named metric): P \\ T without the "No objects are in common"
  choice, i.e. only objects that are not in both images.

A group's accuracy and hallucination rate are means over its examples; ``hallucination_1plus`` /
``hallucination_2plus`` are the shares of examples with at least 1 / 2 false positives (paper), and
``object_hallucination_rate`` / ``object_hallucination_1plus`` / ``object_hallucination_2plus`` the same for
objects only. Standard errors
are the standard deviation of each statistic over ``n_boot`` (1,000) bootstrap resamples of the examples,
drawn from ``rng_for(seed, "bootstrap", group)``; the bootstrap mean is reported beside it, as in the paper.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from commonlink.constants import NO_COMMON_OBJECTS
from commonlink.eval.metrics import N_BOOTSTRAP, grouped, summarise
from commonlink.formats.choices import letters as letter_labels


def score_common_o(predicted_letters: Sequence[str], truth_letters: Sequence[str], choices: Sequence[str]) -> dict:
    """Per-example scores: ``correct``; ``hallucinated``, the paper's |P \\ T| over the lettered choices (a wrong
    "No objects are in common" included); ``hallucinated_objects``, the names of the false-positive objects
    (without that choice), whose count is the objects-only variant."""
    labels = letter_labels(len(choices))
    by_label = dict(zip(labels, choices))
    predicted, truth = set(predicted_letters), set(truth_letters)
    extra = sorted(predicted - truth, key=labels.index)
    objects = [by_label[x] for x in extra if by_label.get(x) != NO_COMMON_OBJECTS]
    return {
        "correct": bool(predicted) and predicted == truth,
        "hallucinated": len(extra),
        "hallucinated_objects": objects,
    }


def object_hallucinations(record: dict) -> int:
    """False-positive objects of a scored record (the objects-only variant of the paper's count)."""
    return len(record.get("hallucinated_objects") or [])


def common_o_group(records: Sequence[dict], *, seed: int, key: str, n_boot: int = N_BOOTSTRAP) -> dict:
    columns = {
        "accuracy": np.array([float(r["correct"]) for r in records]),
        "hallucination_rate": np.array([r["hallucinated"] / max(1, r["num_choices"]) for r in records]),
        "hallucination_1plus": np.array([float(r["hallucinated"] >= 1) for r in records]),
        "hallucination_2plus": np.array([float(r["hallucinated"] >= 2) for r in records]),
        "object_hallucination_rate": np.array([object_hallucinations(r) / max(1, r["num_choices"]) for r in records]),
        "object_hallucination_1plus": np.array([float(object_hallucinations(r) >= 1) for r in records]),
        "object_hallucination_2plus": np.array([float(object_hallucinations(r) >= 2) for r in records]),
    }
    out = summarise(columns, seed=seed, key=key, n_boot=n_boot)
    if records:
        out["parse_failure_rate"] = float(np.mean([not r["parse_ok"] for r in records]))
        out["parse_failures"] = int(sum(not r["parse_ok"] for r in records))
    return out


def num_objects(record: dict) -> int:
    """Scene complexity of an example: the larger object count of its two images."""
    return int(max(record.get("num_objects_image_1") or 0, record.get("num_objects_image_2") or 0))


def num_common(record: dict) -> int:
    """Number of ground-truth common objects (0 for "No objects are in common")."""
    truth = record.get("ground_truth") or []
    return 0 if truth == [NO_COMMON_OBJECTS] else len(truth)


def common_o_metrics(records: Sequence[dict], *, seed: int = 0, n_boot: int = N_BOOTSTRAP) -> dict:
    """Overall metrics plus the same metrics by real/synthetic, by objects per image and by common objects.

    Each record needs ``correct``, ``hallucinated``, ``num_choices``, ``parse_ok``, ``source``,
    ``num_objects_image_1/2`` and ``ground_truth``.
    """
    return {
        "overall": common_o_group(records, seed=seed, key="overall", n_boot=n_boot),
        "by_source": grouped(
            records, lambda r: r.get("source") or "unknown", seed=seed, name="source", n_boot=n_boot, fn=common_o_group
        ),
        "by_num_objects": grouped(
            records, num_objects, seed=seed, name="num_objects", n_boot=n_boot, fn=common_o_group
        ),
        "by_num_common": grouped(records, num_common, seed=seed, name="num_common", n_boot=n_boot, fn=common_o_group),
    }


def perception_images(records: Sequence[dict]) -> list[dict]:
    """Per-image scores of the single-image baseline: one entry per (row, image) whose every question was
    answered (a failed request leaves its image out): ``correct`` (every answer right), ``hallucinated``
    (absent objects answered yes), ``questions``, ``source``."""
    images: dict[tuple, list[dict]] = defaultdict(list)
    for record in records:
        images[(record.get("row_id"), record.get("image"))].append(record)
    out = []
    for group in images.values():
        expected = group[0].get("questions_about_image", len(group))
        if len(group) != expected:
            continue
        out.append(
            {
                "correct": all(r["correct"] for r in group),
                "hallucinated": sum(1 for r in group if not r["present"] and r["answer"] is True),
                "questions": len(group),
                "source": group[0].get("source"),
            }
        )
    return out


def perception_group(records: Sequence[dict], *, seed: int, key: str, n_boot: int = N_BOOTSTRAP) -> dict:
    """Single-image baseline (paper §4.1, Fig. 3). Per image: ``accuracy`` (every answer right),
    ``hallucination_rate`` (absent objects answered yes / questions), ``hallucination_1plus``/``_2plus``;
    ``n`` counts images. Per question: ``question_accuracy``, ``recall`` (present objects answered yes),
    ``yes_rate_absent`` (absent objects answered yes)."""
    images = perception_images(records)
    out = summarise(
        {
            "accuracy": np.array([float(i["correct"]) for i in images]),
            "hallucination_rate": np.array([i["hallucinated"] / max(1, i["questions"]) for i in images]),
            "hallucination_1plus": np.array([float(i["hallucinated"] >= 1) for i in images]),
            "hallucination_2plus": np.array([float(i["hallucinated"] >= 2) for i in images]),
        },
        seed=seed,
        key=key,
        n_boot=n_boot,
    )
    out["unit"] = "image"
    questions = summarise(
        {"question_accuracy": np.array([float(r["correct"]) for r in records])},
        seed=seed,
        key=key + "/questions",
        n_boot=n_boot,
    )
    out.update({k: v for k, v in questions.items() if k != "n"})
    out["questions"] = len(records)
    negatives = [r for r in records if not r["present"]]
    positives = [r for r in records if r["present"]]
    out["positives"] = len(positives)
    out["negatives"] = len(negatives)
    if positives:
        out["recall"] = float(np.mean([r["answer"] is True for r in positives]))
    if negatives:
        out["yes_rate_absent"] = float(np.mean([r["answer"] is True for r in negatives]))
    if records:
        out["parse_failure_rate"] = float(np.mean([r["answer"] is None for r in records]))
        out["parse_failures"] = int(sum(r["answer"] is None for r in records))
    return out


def perception_metrics(records: Sequence[dict], *, seed: int = 0, n_boot: int = N_BOOTSTRAP) -> dict:
    return {
        "overall": perception_group(records, seed=seed, key="overall", n_boot=n_boot),
        "by_source": grouped(
            records,
            lambda r: r.get("source") or "unknown",
            seed=seed,
            name="source",
            n_boot=n_boot,
            fn=perception_group,
        ),
    }
