"""What a person reads after a run: the static HTML report (:mod:`.html`) with its images and charts, and the
markdown tables of one run's results (:mod:`.tables`), the metrics pages of runs without cards (:mod:`.summary`)."""

from commonlink.lazy import lazy_exports  # noqa: E402 - after the docstring and the eager names above

#: The public API (docs/api.md), each name imported from its module on first use.
_EXPORTS = {
    "write_report": "commonlink.eval.report.html",
    "ReportSummary": "commonlink.eval.report.html",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
