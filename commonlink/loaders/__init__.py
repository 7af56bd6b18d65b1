"""Reading published and locally built splits into typed examples.

``load_common_o(path_or_repo, split, revision=None)`` and ``load_association(path_or_repo, config, revision=None)``
work on local release folders and on Hub repos (``revision`` pins a version tag).
"""

from commonlink.loaders.association import load_association, open_association
from commonlink.loaders.common_o import load_common_o, open_common_o
from commonlink.loaders.types import CommonOExample

__all__ = ["CommonOExample", "load_association", "load_common_o", "open_association", "open_common_o"]
