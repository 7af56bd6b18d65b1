"""The association benchmark (Labyrinth of Links): single-step, deduction, synchronous and asynchronous chains.

``format`` (image table, task files, plan codes, features), ``chains`` with ``chain_config`` / ``chain_plan`` /
``chain_builder`` / ``label_index`` / ``presets`` (the chain builder), ``chain_sources`` with ``pickle_sources`` /
``safe_pickle`` / ``source_common`` (the labelled image sets chains are built from), ``release`` with ``card`` (the
release builder and its card), ``loader`` (typed tasks), ``task`` with ``task_chains`` / ``requests`` / ``prompts``
/ ``memory`` (the association eval task), ``concept_task`` with ``concept_prompts`` (concept perception),
``report_page`` (its page of the HTML report), ``refine/`` (MLLM verification and review of chains).
"""
