"""commonlink: make, release and score multi-image reasoning benchmarks (Common-O, association chains)."""

__version__ = "0.1.0"

__all__ = ["__version__"]
