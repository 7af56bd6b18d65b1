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

import math
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence

import numpy as np

from commonlink.constants import NO_COMMON_OBJECTS
from commonlink.formats.choices import letters as letter_labels
from commonlink.seeding import rng_for

N_BOOTSTRAP = 1000


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


def bootstrap(
    values: np.ndarray, *, seed: int, key: str, n_boot: int = N_BOOTSTRAP, chunk: int = 50
) -> tuple[np.ndarray, np.ndarray]:
    """(bootstrap means, standard errors) of each column of ``values`` (n examples x k statistics)."""
    values = np.asarray(values, dtype=np.float64)
    if values.ndim == 1:
        values = values[:, None]
    n = values.shape[0]
    if n == 0:
        nan = np.full(values.shape[1], np.nan)
        return nan, nan
    rng = rng_for(seed, "bootstrap", key)
    means = np.empty((n_boot, values.shape[1]))
    for start in range(0, n_boot, chunk):
        stop = min(n_boot, start + chunk)
        idx = rng.integers(0, n, size=(stop - start, n))
        means[start:stop] = values[idx].mean(axis=1)
    return means.mean(axis=0), means.std(axis=0, ddof=1) if n_boot > 1 else np.zeros(values.shape[1])


def bootstrap_max_se(
    values: np.ndarray, *, seed: int, key: str, n_boot: int = N_BOOTSTRAP, chunk: int = 50
) -> float | None:
    """Bootstrap standard error of the largest of ``values`` (a chain set's max steps); None without values."""
    values = np.asarray(values, dtype=np.float64)
    if len(values) == 0:
        return None
    if n_boot < 2:
        return 0.0
    rng = rng_for(seed, "bootstrap-max", key)
    maxima = np.empty(n_boot)
    for start in range(0, n_boot, chunk):
        stop = min(n_boot, start + chunk)
        maxima[start:stop] = values[rng.integers(0, len(values), size=(stop - start, len(values)))].max(axis=1)
    return float(maxima.std(ddof=1))


def _mean_of_ses(ses: Sequence[float | None]) -> float | None:
    """SE of an average of independent per-group estimates, each with its own SE."""
    ses = [v for v in ses if v is not None]
    return (sum(v * v for v in ses) ** 0.5 / len(ses)) if ses else None


def _summarise(columns: dict[str, np.ndarray], *, seed: int, key: str, n_boot: int) -> dict:
    names = list(columns)
    matrix = np.column_stack([columns[name] for name in names]) if names else np.zeros((0, 0))
    n = int(matrix.shape[0])
    out: dict = {"n": n}
    if n == 0:
        return out
    boot_mean, se = bootstrap(matrix, seed=seed, key=key, n_boot=n_boot)
    for j, name in enumerate(names):
        out[name] = float(matrix[:, j].mean())
        out[f"{name}_se"] = float(se[j])
        out[f"{name}_boot_mean"] = float(boot_mean[j])
    return out


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
    out = _summarise(columns, seed=seed, key=key, n_boot=n_boot)
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


def _grouped(
    records: Sequence[dict], key_fn: Callable[[dict], object], *, seed: int, name: str, n_boot: int, fn
) -> dict:
    groups: dict[object, list[dict]] = defaultdict(list)
    for record in records:
        groups[key_fn(record)].append(record)
    return {
        str(k): fn(groups[k], seed=seed, key=f"{name}={k}", n_boot=n_boot)
        for k in sorted(groups, key=lambda v: (str(type(v)), v))
    }


def common_o_metrics(records: Sequence[dict], *, seed: int = 0, n_boot: int = N_BOOTSTRAP) -> dict:
    """Overall metrics plus the same metrics by real/synthetic, by objects per image and by common objects.

    Each record needs ``correct``, ``hallucinated``, ``num_choices``, ``parse_ok``, ``source``,
    ``num_objects_image_1/2`` and ``ground_truth``.
    """
    return {
        "overall": common_o_group(records, seed=seed, key="overall", n_boot=n_boot),
        "by_source": _grouped(
            records, lambda r: r.get("source") or "unknown", seed=seed, name="source", n_boot=n_boot, fn=common_o_group
        ),
        "by_num_objects": _grouped(
            records, num_objects, seed=seed, name="num_objects", n_boot=n_boot, fn=common_o_group
        ),
        "by_num_common": _grouped(records, num_common, seed=seed, name="num_common", n_boot=n_boot, fn=common_o_group),
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
    out = _summarise(
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
    questions = _summarise(
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
        "by_source": _grouped(
            records,
            lambda r: r.get("source") or "unknown",
            seed=seed,
            name="source",
            n_boot=n_boot,
            fn=perception_group,
        ),
    }


def pearson(x: Sequence[float], y: Sequence[float]) -> dict:
    """Pearson r with a two-sided p-value (Student t with n-2 degrees of freedom; scipy when installed,
    else a normal approximation, exact enough for n > 30)."""
    xa, ya = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    n = int(xa.size)
    if n < 3 or xa.std() == 0 or ya.std() == 0:
        return {"r": None, "p_value": None, "n": n}
    r = float(np.corrcoef(xa, ya)[0, 1])
    r = max(-1.0, min(1.0, r))
    if abs(r) == 1.0:
        return {"r": r, "p_value": 0.0, "n": n}
    t = r * math.sqrt((n - 2) / (1 - r * r))
    try:
        from scipy import stats

        p = float(2 * stats.t.sf(abs(t), n - 2))
    except ImportError:
        p = math.erfc(abs(t) / math.sqrt(2))
    return {"r": r, "p_value": p, "n": n}


# ------------------------------------------------------------------------------------------ association
def chain_metrics(summaries: list[dict], *, seed: int, n_boot: int) -> dict:
    """Max | mean chain length per concept (pair), their averages, and bootstrap SEs (of each max and mean; of
    an average, from its concepts' SEs as independent estimates).

    A chain that ended because the backend failed (no answer at all, e.g. a request that ran out of memory
    alone) says nothing about the model: it is counted under ``failed`` and left out of the lengths; a rerun
    retries it (failures are not cached).
    """
    groups: dict[str, list[dict]] = defaultdict(list)
    for summary in summaries:
        groups[summary["group"]].append(summary)
    per_concept = {}
    for name in sorted(groups):
        scored = [r for r in groups[name] if r["ended"] != "failed"]
        lengths = np.array([r["length"] for r in scored], dtype=float)
        _, se = bootstrap(lengths, seed=seed, key=f"chains/{name}", n_boot=n_boot)
        deductions = sum(r["deductions"] for r in scored)
        per_concept[name] = {
            "chains": len(lengths),
            "failed": len(groups[name]) - len(scored),
            "max_steps": int(lengths.max()) if len(lengths) else None,
            "max_steps_se": bootstrap_max_se(lengths, seed=seed, key=f"chains/{name}", n_boot=n_boot),
            "mean_steps": float(lengths.mean()) if len(lengths) else None,
            "mean_steps_se": float(se[0]) if len(lengths) else None,
            "deduction_success_ratio": (sum(r["deductions_correct"] for r in scored) / deductions)
            if deductions
            else None,
            "ended": dict(Counter(r["ended"] for r in groups[name])),
        }
    measured = [v for v in per_concept.values() if v["chains"]]
    summary = {
        "concepts": len(per_concept),
        "chains": sum(v["chains"] for v in per_concept.values()),
        "failed_chains": sum(v["failed"] for v in per_concept.values()),
        "avg_max_steps": float(np.mean([v["max_steps"] for v in measured])) if measured else None,
        "avg_max_steps_se": _mean_of_ses([v["max_steps_se"] for v in measured]),
        "avg_mean_steps": float(np.mean([v["mean_steps"] for v in measured])) if measured else None,
        "avg_mean_steps_se": _mean_of_ses([v["mean_steps_se"] for v in measured]),
    }
    return {"summary": summary, "per_concept": per_concept}


def ratio_metrics(records: list[dict], fields: Sequence[str], *, seed: int, n_boot: int) -> dict:
    """Success ratios per concept (and their average over concepts), with bootstrap SE.

    Tasks the backend failed on (no answer at all) are counted under ``failed`` and left out of the ratios;
    a rerun retries them.
    """
    failed = Counter(r["concept"] for r in records if r.get("failed"))
    records = [r for r in records if not r.get("failed")]
    groups: dict[str, list[dict]] = defaultdict(list)
    for record in records:
        groups[record["concept"]].append(record)
    per_concept = {}
    for name in sorted(groups):
        values = np.array([[float(r[f]) for f in fields] for r in groups[name]])
        _, se = bootstrap(values, seed=seed, key=f"ratio/{name}", n_boot=n_boot)
        per_concept[name] = {
            "n": len(groups[name]),
            "failed": failed.get(name, 0),
            "unparseable": sum(r["unparseable"] for r in groups[name]),
        }
        for j, f in enumerate(fields):
            label = f.replace("correct", "success_ratio")
            per_concept[name][label] = float(values[:, j].mean())
            per_concept[name][f"{label}_se"] = float(se[j])
    summary = {
        "n": len(records),
        "failed": sum(failed.values()),
        "unparseable_rate": (sum(r["unparseable"] for r in records) / len(records)) if records else None,
    }
    for f in fields:
        label = f.replace("correct", "success_ratio")
        summary[f"avg_{label}"] = float(np.mean([v[label] for v in per_concept.values()])) if per_concept else None
    return {"summary": summary, "per_concept": per_concept}
