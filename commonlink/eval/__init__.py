"""Scoring models: prompts, answer parsing, backends, protocols, metrics, prediction cache."""

from commonlink.lazy import lazy_exports  # noqa: E402 - after the docstring and the eager names above

#: The public API (docs/api.md), each name imported from its module on first use.
_EXPORTS = {
    "evaluate": "commonlink.eval.evaluator",
    "RunOptions": "commonlink.eval.evaluator",
    "Task": "commonlink.eval.task",
    "evaluate_common_o": "commonlink.eval.commono",
    "score_predictions": "commonlink.eval.commono",
    "CommonOTask": "commonlink.eval.commono",
    "evaluate_perception": "commonlink.eval.perception",
    "PerceptionTask": "commonlink.eval.perception",
    "evaluate_association": "commonlink.eval.association",
    "AssociationSettings": "commonlink.eval.association",
    "AssociationTask": "commonlink.eval.association",
    "evaluate_concept_perception": "commonlink.eval.concept_perception",
    "ConceptPerceptionTask": "commonlink.eval.concept_perception",
    "GenerationSettings": "commonlink.eval.backends.base",
    "register_backend": "commonlink.eval.backends",
    "parse_common_o_answer": "commonlink.eval.parsing",
    "score_common_o": "commonlink.eval.metrics",
    "common_o_metrics": "commonlink.eval.metrics",
    "compare_runs": "commonlink.eval.compare",
    "render_comparison": "commonlink.eval.compare",
    "run_name": "commonlink.eval.compare",
    "RowSetMismatch": "commonlink.eval.compare",
    "write_report": "commonlink.eval.report.html",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
