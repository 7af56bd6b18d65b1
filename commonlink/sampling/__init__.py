"""The documented sampling names (docs/api.md), kept here for code written against them. The samplers live with
their kind: Common-O pairs in ``commonlink.kinds.common_o.pairs`` (index, search, rows), association chains and
their label sources in ``commonlink.kinds.association`` (``chains``, ``chain_config``, ``chain_sources``, ...)."""

from commonlink.lazy import lazy_exports  # noqa: E402 - after the docstring and the eager names above

#: The public API (docs/api.md), each name imported from its module on first use.
_EXPORTS = {
    "PairsConfig": "commonlink.kinds.common_o.pairs",
    "make_pairs_file": "commonlink.kinds.common_o.pairs",
    "sample_pairs": "commonlink.kinds.common_o.pairs",
    "write_pairs": "commonlink.kinds.common_o.pairs",
    "pairs_meta": "commonlink.kinds.common_o.pairs",
    "ChainConfig": "commonlink.kinds.association.chain_config",
    "build_chain_files": "commonlink.kinds.association.chains",
    "read_catalog_source": "commonlink.kinds.association.chain_sources",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
