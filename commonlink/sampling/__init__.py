"""The documented sampling names (docs/api.md), kept here for code written against them. The samplers live with
their kind: Common-O pairs in ``commonlink.kinds.common_o.pairs`` (index, search, rows), association chains and
their label sources in ``commonlink.kinds.association`` (``chains``, ``chain_config``, ``chain_sources``, ...)."""

from commonlink.lazy import lazy_package  # noqa: E402 - after the docstring and the eager names above

#: The public API (docs/api.md) by module, each name imported from its module on first use.
__getattr__, __dir__, __all__ = lazy_package(
    __name__,
    {
        "commonlink.kinds.common_o.pairs": [
            "PairsConfig",
            "make_pairs_file",
            "sample_pairs",
            "write_pairs",
            "pairs_meta",
        ],
        "commonlink.kinds.association.chain_config": ["ChainConfig"],
        "commonlink.kinds.association.chains": ["build_chain_files"],
        "commonlink.kinds.association.chain_sources": ["read_catalog_source"],
    },
)
