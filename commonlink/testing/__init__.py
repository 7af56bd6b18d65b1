"""Test doubles for outside services, importable so users can test their own pipelines offline.

- :mod:`commonlink.testing.hub_server`: a local server speaking the subset of the Hugging Face Hub HTTP API that
  ``huggingface_hub`` and ``datasets`` use (repos, commits, LFS, branches, tags, tree listing, file resolution).
- :mod:`commonlink.testing.tiny_models`: tiny random vision-language models and small Common-O parquet splits.
- :mod:`commonlink.testing.tiny_chains`: small association chain files built from random labelled images.
"""
