"""Association metrics: max | mean chain length per concept, success ratios per concept, with seeded bootstrap
standard errors (:mod:`commonlink.eval.metrics`)."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence

import numpy as np

from commonlink.eval.metrics import bootstrap, bootstrap_max_se, mean_of_ses


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
        "avg_max_steps_se": mean_of_ses([v["max_steps_se"] for v in measured]),
        "avg_mean_steps": float(np.mean([v["mean_steps"] for v in measured])) if measured else None,
        "avg_mean_steps_se": mean_of_ses([v["mean_steps_se"] for v in measured]),
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
