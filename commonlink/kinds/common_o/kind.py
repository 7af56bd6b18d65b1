"""The Common-O kind and its tasks as the engine sees them (registered in :mod:`commonlink.registry`)."""

from __future__ import annotations

from collections.abc import Mapping

from commonlink.eval.scored import ScoredCounts, row_counts
from commonlink.formats.meta import COMMON_O_PAIRS_KIND
from commonlink.kinds.common_o.compare import common_o_table, perception_table, rescore_common_o, rescore_perception
from commonlink.kinds.common_o.datasheet import render_common_o_card
from commonlink.kinds.common_o.export import EXPORT
from commonlink.kinds.common_o.format import common_o_features
from commonlink.kinds.common_o.perception import evaluate_perception
from commonlink.kinds.common_o.release import build_common_o_release
from commonlink.kinds.common_o.report_page import common_o_page
from commonlink.kinds.common_o.tables import common_o_markdown
from commonlink.kinds.common_o.task import evaluate_common_o
from commonlink.registry import Kind, TaskInfo

__all__ = ["COMMON_O_TASK", "KIND", "PERCEPTION_TASK"]


def _render_card(units: Mapping[str, dict], manifest: Mapping, common: Mapping) -> str:
    return render_common_o_card(
        splits=units,
        figures=manifest.get("figures") or {},
        features=common_o_features(),
        config=manifest.get("config") or {},
        **common,
    )


def _report_page(runs: list[dict], thumbs, *, chain_steps: int, catalog_root=None, **options):
    return common_o_page(runs, thumbs, **options)


def _common_o_name_parts(results: dict) -> list[str]:
    prompt = results.get("prompt", {})
    return ["concat"] * bool(prompt.get("concat_images")) + ["built-q"] * (prompt.get("question") == "built")


def _perception_name_parts(results: dict) -> list[str]:
    return ["yes-no-hint"] * bool(results.get("prompt", {}).get("yes_no_hint"))


def _perception_counts(results: dict) -> ScoredCounts:
    return row_counts(results, "questions", "questions")  # its n counts images; answers are per question


KIND = Kind(
    name="common_o",
    title="Common-O pairs",
    input_kind=COMMON_O_PAIRS_KIND,
    input_command="commonlink pairs",
    build_release=build_common_o_release,
    render_card=_render_card,
    export=EXPORT,
)
COMMON_O_TASK = TaskInfo(
    name="common_o",
    kind="common_o",
    summary="Which objects are in both images? (the paper's Common-O question, lettered choices)",
    evaluate=evaluate_common_o,
    command="commono",
    report_page=_report_page,
    compare_table=common_o_table,
    rescore=rescore_common_o,
    title_with_split=True,
    results_table=common_o_markdown,
    run_name_parts=_common_o_name_parts,
)
PERCEPTION_TASK = TaskInfo(
    name="perception",
    kind="common_o",
    summary="Is OBJECT in this image? (the single-image perception baseline over Common-O's choices)",
    evaluate=evaluate_perception,
    command="perception",
    compare_table=perception_table,
    rescore=rescore_perception,
    record_key="row_id",
    title_with_split=True,
    results_table=common_o_markdown,
    run_name_parts=_perception_name_parts,
    scored_counts=_perception_counts,
)
