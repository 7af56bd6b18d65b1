"""Release folders (parquet shards + dataset card + manifest) and their versions on the Hub:

- ``build``: ``release build``, choosing the builder from the inputs' sidecar kind;
- ``common_o`` / ``association``: the two builders; ``staging``: what they share (option checks, staging folder
  and atomic swap, manifest file table, reuse of an identical build);
- ``shards``: streaming parquet writer; ``datasheet`` / ``association_card`` / ``figures``: the dataset cards;
- ``hub``: versioned pushes and the versions table.
"""

from commonlink.lazy import lazy_package  # noqa: E402 - after the docstring and the eager names above

#: The public API (docs/api.md) by module, each name imported from its module on first use.
__getattr__, __dir__, __all__ = lazy_package(
    __name__,
    {
        "commonlink.release.build": ["build_release"],
        "commonlink.release.staging": ["ReleaseOptions"],
        "commonlink.release.hub": ["plan_push", "push_release", "list_versions"],
    },
)
