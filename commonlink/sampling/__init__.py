"""Examples sampled from labelled images, seeded per unit so any one can be redone alone:

- ``pairs``: Common-O pairs (two images, lettered choices, the objects in both);
- ``chains``: association tasks (single-step, deduction, synchronous, asynchronous chains);
- ``chain_sources``: the labelled image sets chains are built from (catalogs, HF datasets, folders, OCL, Pangea),
  with ``pickle_sources`` for the OCL and Pangea annotation pickles (loaded by ``safe_pickle``) and
  ``source_common`` for what the readers share.
"""

from commonlink.lazy import lazy_exports  # noqa: E402 - after the docstring and the eager names above

#: The public API (docs/api.md), each name imported from its module on first use.
_EXPORTS = {
    "PairsConfig": "commonlink.sampling.pairs",
    "make_pairs_file": "commonlink.sampling.pairs",
    "sample_pairs": "commonlink.sampling.pairs",
    "write_pairs": "commonlink.sampling.pairs",
    "pairs_meta": "commonlink.sampling.pairs",
    "ChainConfig": "commonlink.sampling.chain_config",
    "build_chain_files": "commonlink.sampling.chains",
    "read_catalog_source": "commonlink.sampling.chain_sources",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
