"""The association kind and its tasks as the engine sees them (registered in :mod:`commonlink.registry`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from commonlink.eval.scored import ScoredCounts, skipped_counts
from commonlink.formats.meta import ASSOCIATION_CHAINS_KIND
from commonlink.kinds.association.card import render_association_card
from commonlink.kinds.association.compare import (
    association_table,
    concept_table,
    rescorable_association,
    rescore_association,
)
from commonlink.kinds.association.concept_task import evaluate_concept_perception
from commonlink.kinds.association.export import EXPORT
from commonlink.kinds.association.format import association_features
from commonlink.kinds.association.release import build_association_release
from commonlink.kinds.association.report_page import association_page
from commonlink.kinds.association.tables import association_markdown
from commonlink.kinds.association.task import evaluate_association
from commonlink.registry import Kind, TaskInfo

__all__ = ["ASSOCIATION_TASK", "CONCEPT_PERCEPTION_TASK", "KIND"]


def _render_card(units: Mapping[str, dict], manifest: Mapping, common: Mapping) -> str:
    features = {c: association_features(c) for c in units}
    return render_association_card(configs=units, features=features, **common)


def _build_release(inputs: Sequence, out_dir, options):
    return build_association_release([Path(p) for p in inputs], Path(out_dir), options)


def _report_page(runs: list[dict], thumbs, *, chain_steps: int, catalog_root=None, **options):
    return association_page(runs[0], thumbs, chain_steps=chain_steps, catalog_root=catalog_root, **options)


#: Settings that set an association run apart from another on the same data (shown in its default name).
_DEFAULTS = {"protocol": "paper", "strategy": "normal", "deduction_rule": "all-shared", "deduction": True}
#: The deduction rule each protocol takes when none is given (runs before the switch recorded no protocol: strict).
_PROTOCOL_RULES = {"paper": "harness", "strict": "all-shared"}


def _association_name_parts(results: dict) -> list[str]:
    """``memory``, a non-default protocol, strategy or deduction rule, ``no-deduction``, ``moe``."""
    assoc = results.get("association", {})
    defaults = {**_DEFAULTS, "deduction_rule": _PROTOCOL_RULES.get(assoc.get("protocol", "strict"))}
    parts = [str(assoc.get("memory", "?"))]
    parts += [
        str(assoc[k]) if k != "deduction" else "no-deduction"
        for k, v in defaults.items()
        if k in assoc and assoc[k] != v
    ]
    return parts + ["moe"] * bool(results.get("moe"))


def _association_counts(results: dict) -> ScoredCounts:
    """Chains (their ends by an unparseable answer) or tasks, and the requests that failed."""
    metrics = results.get("metrics") or {}
    summary, per = metrics.get("summary") or {}, metrics.get("per_concept") or {}
    failed = (results.get("requests") or {}).get("failed") or 0
    if "chains" in summary:
        unparseable = sum((v.get("ended") or {}).get("unparseable", 0) for v in per.values())
        return ScoredCounts(summary.get("chains") or 0, "chains", unparseable, failed, 0)
    n = summary.get("n") or 0
    rate = summary.get("unparseable_rate")
    unparseable = sum(v.get("unparseable", 0) for v in per.values()) if per else round((rate or 0) * n)
    return ScoredCounts(n, "tasks", unparseable, failed, 0)


def _concept_counts(results: dict) -> ScoredCounts:
    parsing = results.get("parsing") or {}
    return ScoredCounts(parsing.get("answers", 0), "answers", parsing.get("unparseable"), *skipped_counts(results))


KIND = Kind(
    name="association",
    title="association chains",
    input_kind=ASSOCIATION_CHAINS_KIND,
    input_command="commonlink chains",
    build_release=_build_release,
    render_card=_render_card,
    export=EXPORT,
)
ASSOCIATION_TASK = TaskInfo(
    name="association",
    kind="association",
    summary="Labyrinth-of-Links association: single-step, deduction, synchronous and asynchronous chains",
    evaluate=evaluate_association,
    command="association",
    result_tasks=("association/",),
    report_page=_report_page,
    report_page_runs=1,
    compare_table=association_table,
    rescore=rescore_association,
    rescorable=rescorable_association,
    run_name_parts=_association_name_parts,
    results_table=association_markdown,
    scored_counts=_association_counts,
)
CONCEPT_PERCEPTION_TASK = TaskInfo(
    name="concept_perception",
    kind="association",
    summary="Concept perception: one image, find the concept (strategies x complexities)",
    evaluate=evaluate_concept_perception,
    command="concept",
    compare_table=concept_table,
    scored_counts=_concept_counts,
)
