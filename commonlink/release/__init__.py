"""Release folders (parquet shards + dataset card + manifest) and their versions on the Hub:

- ``build``: ``release build``, choosing the builder from the inputs' sidecar kind;
- ``common_o`` / ``association``: the two builders; ``staging``: what they share (option checks, staging folder
  and atomic swap, manifest file table, reuse of an identical build);
- ``shards``: streaming parquet writer; ``datasheet`` / ``association_card`` / ``figures``: the dataset cards;
- ``hub``: versioned pushes and the versions table.
"""

from commonlink.lazy import lazy_exports  # noqa: E402 - after the docstring and the eager names above

#: The public API (docs/api.md), each name imported from its module on first use.
_EXPORTS = {
    "build_release": "commonlink.release.build",
    "ReleaseOptions": "commonlink.release.staging",
    "plan_push": "commonlink.release.hub",
    "push_release": "commonlink.release.hub",
    "list_versions": "commonlink.release.hub",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
