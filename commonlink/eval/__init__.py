"""Scoring models: prompts, answer parsing, backends, protocols, metrics, prediction cache."""

from commonlink.lazy import lazy_exports  # noqa: E402 - after the docstring and the eager names above

#: The public API (docs/api.md), each name imported from its module on first use.
_EXPORTS = {
    "evaluate": "commonlink.eval.outputs",
    "run_eval": "commonlink.eval.evaluator",
    "write_run": "commonlink.eval.outputs",
    "RunOptions": "commonlink.eval.evaluator",
    "Task": "commonlink.eval.task",
    "evaluate_common_o": "commonlink.kinds.common_o.task",
    "score_predictions": "commonlink.kinds.common_o.task",
    "CommonOTask": "commonlink.kinds.common_o.task",
    "evaluate_perception": "commonlink.kinds.common_o.perception",
    "PerceptionTask": "commonlink.kinds.common_o.perception",
    "evaluate_association": "commonlink.kinds.association.task",
    "AssociationSettings": "commonlink.kinds.association.task",
    "AssociationTask": "commonlink.kinds.association.task",
    "evaluate_concept_perception": "commonlink.kinds.association.concept_task",
    "ConceptPerceptionTask": "commonlink.kinds.association.concept_task",
    "GenerationSettings": "commonlink.eval.backends.base",
    "register_backend": "commonlink.eval.backends",
    "parse_common_o_answer": "commonlink.kinds.common_o.parsing",
    "score_common_o": "commonlink.kinds.common_o.metrics",
    "common_o_metrics": "commonlink.kinds.common_o.metrics",
    "compare_runs": "commonlink.eval.compare",
    "render_comparison": "commonlink.eval.compare",
    "run_name": "commonlink.eval.compare",
    "RowSetMismatch": "commonlink.eval.compare",
    "write_report": "commonlink.eval.report.html",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
