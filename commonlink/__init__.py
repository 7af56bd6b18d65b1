"""commonlink: make, release and score multi-image reasoning benchmarks (Common-O, association chains)."""

__version__ = "0.1.0"

from commonlink.lazy import lazy_package  # noqa: E402 - after the docstring and the eager names above

#: The public API (docs/api.md) by module, each name imported from its module on first use.
__getattr__, __dir__, _names = lazy_package(
    __name__,
    {
        "commonlink.catalog": ["ingest_photos", "merge_catalogs"],
        "commonlink.sampling": ["PairsConfig", "make_pairs_file", "ChainConfig", "build_chain_files"],
        "commonlink.release": ["build_release", "push_release"],
        "commonlink.loaders": ["load_common_o", "open_common_o", "load_association", "open_association"],
        "commonlink.eval": [
            "evaluate_common_o",
            "evaluate_perception",
            "evaluate_association",
            "evaluate_concept_perception",
            "score_predictions",
            "parse_common_o_answer",
            "score_common_o",
            "compare_runs",
            "render_comparison",
            "write_report",
        ],
    },
)
__all__ = ["__version__", *_names]
