"""The benchmark kinds, one folder each, on the shared engine (``release``, ``eval``, ``loaders.hub_ids``):

- ``common_o``: the Common-O pairs benchmark (its row format and prompts, the pairs sampler, the release builder and
  datasheet, the loader, the Common-O and perception tasks, the report page);
- ``association``: the Labyrinth-of-Links association chains (their files, the chain builder and label sources, the
  release builder and card, the loader, the association and concept-perception tasks, the report page, the MLLM
  verification of chains in ``refine/``).

Kinds import the engine; the engine never imports a kind.
"""
