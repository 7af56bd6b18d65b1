"""Lettered choices: ``A, B, ..., Z, AA, AB, ...``, the labels every multiple-choice prompt, parser and metric
uses (Common-O's object lists, the baselines' random answers)."""

from __future__ import annotations

import functools
import string

__all__ = ["letters"]


def letters(n: int) -> list[str]:
    """A, B, ..., Z, AA, AB, ... for ``n`` choices."""
    return list(_letters(n))


@functools.lru_cache(maxsize=64)
def _letters(n: int) -> tuple[str, ...]:
    out = []
    for i in range(n):
        label = ""
        k = i
        while True:
            label = string.ascii_uppercase[k % 26] + label
            k = k // 26 - 1
            if k < 0:
                break
        out.append(label)
    return tuple(out)
