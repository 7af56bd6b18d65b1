"""Package exports that import their module only when first used, so ``import commonlink`` (or a stage package)
stays light: ``__getattr__, __dir__, __all__ = lazy_package(__name__, {"commonlink.release.build": ["build_release"],
...})`` in a package's ``__init__`` (each module with the names it exports, as transformers' ``_import_structure``)
makes ``package.build_release`` import ``commonlink.release.build`` on first access."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable


def lazy_exports(package: str, exports: dict[str, str]) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """(``__getattr__``, ``__dir__``) for ``package``: ``exports`` maps a public name to the module defining it."""

    def __getattr__(name: str):
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module), name)

    def __dir__() -> list[str]:
        return sorted(set(exports) | set(vars(sys.modules[package])))

    return __getattr__, __dir__


def lazy_package(
    package: str, structure: dict[str, Iterable[str]]
) -> tuple[Callable[[str], object], Callable[[], list[str]], list[str]]:
    """(``__getattr__``, ``__dir__``, ``__all__``) for ``package``: ``structure`` maps a module to the public names
    it defines."""
    exports = {name: module for module, names in structure.items() for name in names}
    return (*lazy_exports(package, exports), sorted(exports))
