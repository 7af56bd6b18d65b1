"""Scoring models: prompts, answer parsing, backends, protocols, metrics, prediction cache."""

from commonlink.lazy import lazy_package  # noqa: E402 - after the docstring and the eager names above

#: The public API (docs/api.md) by module, each name imported from its module on first use.
__getattr__, __dir__, __all__ = lazy_package(
    __name__,
    {
        "commonlink.eval.outputs": ["evaluate", "write_run"],
        "commonlink.eval.evaluator": ["run_eval", "RunOptions"],
        "commonlink.eval.task": ["Task"],
        "commonlink.kinds.common_o.task": ["evaluate_common_o", "score_predictions", "CommonOTask"],
        "commonlink.kinds.common_o.perception": ["evaluate_perception", "PerceptionTask"],
        "commonlink.kinds.association.task": ["evaluate_association", "AssociationSettings", "AssociationTask"],
        "commonlink.kinds.association.concept_task": ["evaluate_concept_perception", "ConceptPerceptionTask"],
        "commonlink.eval.backends.base": ["GenerationSettings"],
        "commonlink.eval.backends": ["register_backend"],
        "commonlink.kinds.common_o.parsing": ["parse_common_o_answer"],
        "commonlink.kinds.common_o.metrics": ["score_common_o", "common_o_metrics"],
        "commonlink.eval.compare": ["compare_runs", "render_comparison", "run_name", "RowSetMismatch"],
        "commonlink.eval.report.html": ["write_report"],
    },
)
