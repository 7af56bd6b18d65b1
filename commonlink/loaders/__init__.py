"""Reading published and locally built splits into typed examples."""

from .association import load_association, open_association  # noqa: E402,F401  (association tasks)
