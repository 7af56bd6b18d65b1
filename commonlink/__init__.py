"""commonlink: make, release and score multi-image reasoning benchmarks (Common-O, association chains)."""

__version__ = "0.1.0"

from commonlink.lazy import lazy_exports  # noqa: E402 - after the docstring and the eager names above

#: The public API (docs/api.md), each name imported from its module on first use.
_EXPORTS = {
    "ingest_photos": "commonlink.catalog",
    "merge_catalogs": "commonlink.catalog",
    "PairsConfig": "commonlink.sampling",
    "make_pairs_file": "commonlink.sampling",
    "ChainConfig": "commonlink.sampling",
    "build_chain_files": "commonlink.sampling",
    "build_release": "commonlink.release",
    "push_release": "commonlink.release",
    "load_common_o": "commonlink.loaders",
    "open_common_o": "commonlink.loaders",
    "load_association": "commonlink.loaders",
    "open_association": "commonlink.loaders",
    "evaluate_common_o": "commonlink.eval",
    "evaluate_perception": "commonlink.eval",
    "evaluate_association": "commonlink.eval",
    "evaluate_concept_perception": "commonlink.eval",
    "score_predictions": "commonlink.eval",
    "parse_common_o_answer": "commonlink.eval",
    "score_common_o": "commonlink.eval",
    "compare_runs": "commonlink.eval",
    "render_comparison": "commonlink.eval",
    "write_report": "commonlink.eval",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = ["__version__", *sorted(_EXPORTS)]
