"""Reading published and locally built splits into typed examples.

``load_common_o(path_or_repo, split, revision=None)`` and ``load_association(path_or_repo, config, revision=None)``
work on local release folders and on Hub repos (``revision`` pins a version tag). The loaders live with their kind
(``commonlink.kinds.common_o.loader``, ``commonlink.kinds.association.loader``); this package keeps the documented
names and the Hub id checks every kind shares (:mod:`.hub_ids`).
"""

from commonlink.lazy import lazy_package  # noqa: E402 - after the docstring and the eager names above

#: The public API (docs/api.md) by module, each name imported from its module on first use.
__getattr__, __dir__, __all__ = lazy_package(
    __name__,
    {
        "commonlink.kinds.common_o.loader": ["load_common_o", "open_common_o"],
        "commonlink.kinds.common_o.example": ["CommonOExample"],
        "commonlink.kinds.association.loader": ["load_association", "open_association"],
    },
)
