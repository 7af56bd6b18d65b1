"""The Common-O benchmark: two images, lettered choices, the objects in both.

``format`` (published columns, features, the paper's prompts), ``pairs`` with ``pair_index`` / ``pair_rows`` /
``pair_search`` (the pairs sampler), ``release`` with ``release_stats`` / ``datasheet`` / ``figures`` (the release
builder and its card), ``loader`` with ``loader_lists`` and ``example`` (typed examples), ``task`` (the Common-O
eval task), ``perception`` (the per-image perception task), ``similarity`` (semantic-similarity analyses),
``report_page`` (its page of the HTML report).
"""
