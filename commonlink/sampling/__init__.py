"""Examples sampled from labelled images, seeded per unit so any one can be redone alone:

- ``pairs``: Common-O pairs (two images, lettered choices, the objects in both);
- ``chains``: association tasks (single-step, deduction, synchronous, asynchronous chains);
- ``chain_sources``: the labelled image sets chains are built from (catalogs, HF datasets, folders, OCL, Pangea),
  with ``safe_pickle`` for annotation pickles.
"""
