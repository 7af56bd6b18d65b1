"""One canonical vocabulary of object names.

Names are normalised (Unicode NFKC, lower case, ``_`` read as a space, runs of whitespace collapsed) so that
``"Rubber  Duck"``, ``"rubber_duck"`` and ``"rubber duck"`` are one object. A vocabulary file lists one
canonical name a line, optionally with synonyms::

    # comments and blank lines are ignored
    apple
    mug: cup, coffee mug
    remote control: remote, tv remote

Looking up ``"Coffee Mug"`` then gives ``"mug"``; an unknown name gets the closest known names as suggestions
(:func:`difflib.get_close_matches`).
"""

from __future__ import annotations

import difflib
import os
import re
import unicodedata
from collections.abc import Iterable, Iterator
from pathlib import Path

from commonlink.errors import InputError, SchemaError
from commonlink.fileio import read_user_text
from commonlink.formats.catalog import label_problem

_WHITESPACE = re.compile(r"\s+")


def normalise_name(name: str) -> str:
    """Canonical spelling of an object name: NFKC, lower case, ``_`` -> space, whitespace collapsed."""
    text = unicodedata.normalize("NFKC", name).replace("_", " ")
    return _WHITESPACE.sub(" ", text).strip().lower()


class Vocabulary:
    """Canonical object names plus synonyms (aliases) that map onto them."""

    def __init__(self, names: Iterable[str] = (), aliases: dict[str, str] | None = None):
        self._names: dict[str, None] = {}  # ordered set of canonical names
        self._lookup: dict[str, str] = {}  # normalised name or alias -> canonical name
        for name in names:
            self.add(name)
        for alias, canonical in (aliases or {}).items():
            self.add_alias(alias, canonical)

    # -- building ------------------------------------------------------------------------------------
    @classmethod
    def from_file(cls, path: str | os.PathLike) -> Vocabulary:
        """Load ``name`` / ``name: alias1, alias2`` lines; conflicting aliases raise naming the line."""
        path = Path(path)
        fix = "Pass a text file with one object name a line."
        text = read_user_text(path, "Vocabulary file", fix, encoding="utf-8-sig")
        vocab = cls()
        for lineno, raw in enumerate(text.split("\n"), start=1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            name, _, alias_text = line.partition(":")
            canonical = normalise_name(name)
            if not canonical:
                raise SchemaError(f"{path}, line {lineno}: no name before ':'.", "Write `name: alias1, alias2`.")
            try:
                vocab.add(canonical)
                for alias in alias_text.split(","):
                    if alias.strip():
                        vocab.add_alias(alias, canonical)
            except SchemaError as exc:
                raise SchemaError(f"{path}, line {lineno}: {exc.problem}", exc.fix) from None
        if not len(vocab):
            raise InputError(f"Vocabulary file {path} lists no names.", "Write one object name a line.")
        return vocab

    def add(self, name: str) -> str:
        """Add a canonical name (normalised); returns it. A name already known as an alias is refused."""
        canonical = normalise_name(name)
        if not canonical:
            raise SchemaError("empty object name.", "Remove the empty name.")
        if problem := label_problem(canonical):
            raise SchemaError(
                f"object name {canonical!r} holds {problem}.", "Write each name without control characters."
            )
        existing = self._lookup.get(canonical)
        if existing is not None and existing != canonical:
            raise SchemaError(
                f"{canonical!r} is listed as a name but is already a synonym of {existing!r}.",
                "List each name once: either as a name or as a synonym.",
            )
        self._names.setdefault(canonical, None)
        self._lookup[canonical] = canonical
        return canonical

    def add_alias(self, alias: str, canonical: str) -> None:
        key = normalise_name(alias)
        if problem := label_problem(key):
            raise SchemaError(f"synonym {key!r} holds {problem}.", "Write each synonym without control characters.")
        target = self.add(canonical) if normalise_name(canonical) not in self._names else normalise_name(canonical)
        existing = self._lookup.get(key)
        if existing is not None and existing != target:
            raise SchemaError(
                f"synonym {key!r} would mean both {existing!r} and {target!r}.",
                "Give each synonym to one name only.",
            )
        self._lookup[key] = target

    def update(self, names: Iterable[str]) -> None:
        for name in names:
            if self.canonical(name) is None:
                self.add(name)

    # -- lookup --------------------------------------------------------------------------------------
    def canonical(self, name: str) -> str | None:
        """Canonical name for ``name`` (itself or a synonym, any case/spacing), or None when unknown."""
        return self._lookup.get(normalise_name(name))

    def suggest(self, name: str, n: int = 3, cutoff: float = 0.6) -> list[str]:
        """Closest known canonical names to an unknown ``name`` (best first, no repeats)."""
        matches = difflib.get_close_matches(normalise_name(name), list(self._lookup), n=n * 3, cutoff=cutoff)
        out: list[str] = []
        for match in matches:
            target = self._lookup[match]
            if target not in out:
                out.append(target)
        return out[:n]

    def resolve(self, name: str) -> str:
        """Canonical name, or :class:`InputError` naming the closest known names."""
        found = self.canonical(name)
        if found is not None:
            return found
        suggestions = self.suggest(name)
        hint = (
            f"Did you mean {' or '.join(repr(s) for s in suggestions)}?" if suggestions else "No close name is known."
        )
        raise InputError(f"Unknown object name {name!r}. {hint}", "Fix the name, or add it to the vocabulary file.")

    @property
    def names(self) -> list[str]:
        return list(self._names)

    @property
    def aliases(self) -> dict[str, str]:
        return {k: v for k, v in self._lookup.items() if k not in self._names}

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.canonical(name) is not None

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __repr__(self) -> str:
        return f"Vocabulary({len(self)} names, {len(self.aliases)} synonyms)"


def likely_typos(counts: dict[str, int], *, cutoff: float = 0.85) -> list[tuple[str, str]]:
    """Pairs ``(rare, common)`` of names so alike that the rarer one is probably a misspelling.

    Used when no vocabulary file is given (so unknown names cannot be refused): ``{"apple": 9, "aple": 1}``
    -> ``[("aple", "apple")]``. The rarer name (ties: the later one alphabetically) is reported first.
    """
    names = sorted(counts)
    pairs: list[tuple[str, str]] = []
    for i, a in enumerate(names):
        for b in difflib.get_close_matches(a, names[i + 1 :], n=5, cutoff=cutoff):
            rare, common = (a, b) if (counts[a], b) < (counts[b], a) else (b, a)
            pairs.append((rare, common))
    return sorted(pairs)
