"""Reading annotation pickles without running code.

OCL and Pangea ship their labels as pickles. Plain ``pickle.load`` will call any importable function the file
names (``os.system`` through ``__reduce__`` is the classic payload), so it must never see an untrusted file.
:class:`RestrictedUnpickler` refuses every global lookup except the builtin constructors plain values can need
(``set`` and ``frozenset`` in protocols < 4, and ``bytes`` stored as latin-1 text in protocols < 3). Lists,
tuples, dicts, strings, bytes, numbers, booleans and ``None`` are built by opcodes that name no global at all, so
they load; anything else (numpy arrays, custom classes, ``os.system``) is refused before it is looked up, so
nothing in the file runs.
"""

from __future__ import annotations

import io
import os
import pickle
from pathlib import Path
from typing import Any

from commonlink.errors import InputError


def _latin1_bytes(text: str, encoding: str = "latin1") -> bytes:
    """What protocols 0-2 store ``bytes`` as (``_codecs.encode(text, "latin1")``), limited to that one codec."""
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise UnsafePickleError(
            "pickle: _codecs.encode is only accepted for bytes stored as latin-1 text.",
            "Re-save the annotations with plain Python containers.",
        )
    return text.encode("latin1")


#: The only globals a pickle may name: harmless constructors of plain values (sets, and bytes in protocols < 3).
ALLOWED_GLOBALS = {
    ("builtins", "set"): set,
    ("builtins", "frozenset"): frozenset,
    ("_codecs", "encode"): _latin1_bytes,
    # protocols < 3 (and Python 2 files) name the builtins module "__builtin__"
    ("__builtin__", "set"): set,
    ("__builtin__", "frozenset"): frozenset,
}


class UnsafePickleError(InputError):
    """The pickle names a function or class outside the allow-list (it could run code)."""


class RestrictedUnpickler(pickle.Unpickler):
    """An unpickler that builds only plain containers and numbers (see module docstring)."""

    def __init__(self, file, *, what: str = "pickle"):
        super().__init__(file)
        self._what = what

    def find_class(self, module: str, name: str) -> Any:
        allowed = ALLOWED_GLOBALS.get((module, name))
        if allowed is not None:
            return allowed
        raise UnsafePickleError(
            f"{self._what}: refused to load {module}.{name}; only plain lists, dicts, tuples, strings and numbers "
            "are accepted (the file may try to run code, or holds objects such as numpy arrays).",
            "Re-save the annotations with plain Python containers (e.g. convert arrays with .tolist()), "
            "or check where the file came from.",
        )

    def persistent_load(self, pid: Any) -> Any:
        raise UnsafePickleError(
            f"{self._what}: uses persistent ids, which a plain annotation file never needs.",
            "Re-save the annotations with plain Python containers.",
        )


def safe_loads(data: bytes, *, what: str = "pickle") -> Any:
    """Unpickle ``data`` allowing only plain containers and numbers."""
    try:
        return RestrictedUnpickler(io.BytesIO(data), what=what).load()
    except UnsafePickleError:
        raise
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError, KeyError, AttributeError) as exc:
        raise InputError(
            f"{what}: not a readable pickle ({type(exc).__name__}: {exc}).",
            "Check that the file is complete and really a pickle of the annotations.",
        ) from exc


def safe_load(path: str | os.PathLike) -> Any:
    """Unpickle the file at ``path`` with :class:`RestrictedUnpickler`."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"Annotation pickle not found: {path}", "Check the path.")
    return safe_loads(path.read_bytes(), what=str(path))
