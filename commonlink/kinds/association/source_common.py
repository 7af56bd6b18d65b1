"""What every chain-source reader (:mod:`commonlink.kinds.association.chain_sources`,
:mod:`commonlink.kinds.association.pickle_sources`) shares: the report of what it kept and dropped, stable sample ids,
label cleaning, header-only image sizes and the rule that drops unusable samples."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from PIL import Image

from commonlink.errors import InputError
from commonlink.kinds.association.format import LabelledImage


@dataclass
class SourceReport:
    """What a reader kept and what it dropped (goes into the chain file's meta)."""

    source: str
    source_type: str
    read: int = 0  #: samples found in the source
    kept: int = 0
    dropped_small: int = 0  #: under --min-pixels
    dropped_unlabelled: int = 0
    dropped_bad_box: int = 0  #: OCL boxes with no area inside the image
    notes: list[str] = field(default_factory=list)


def stable_id(key: str) -> str:
    """16 hex characters derived from a description of where a sample comes from."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:16]


def clean_labels(labels: Iterable[Any]) -> list[str]:
    """The labels as stripped text, empty ones dropped, each once (first order kept)."""
    seen: dict[str, None] = {}
    for label in labels:
        text = str(label).strip()
        if text:
            seen.setdefault(text, None)
    return list(seen)


def image_size(path: Path, *, what: str) -> tuple[int, int]:
    """(width, height) from the image header only (no decoding)."""
    if not path.is_file():
        raise InputError(f"{what}: image file not found: {path}", "Check --image-root / the paths in the annotations.")
    try:
        with Image.open(path) as img:
            return img.size
    except Exception as exc:  # PIL raises many types for unreadable files
        raise InputError(f"{what}: {path} is not a readable image ({exc}).", "Re-export or remove the file.") from exc


def keep_usable(images: list[LabelledImage], report: SourceReport, min_pixels: int) -> list[LabelledImage]:
    """The images that have labels and at least ``min_pixels``; the report counts the others."""
    kept = []
    for img in images:
        if not img.labels:
            report.dropped_unlabelled += 1
        elif img.pixels < min_pixels:
            report.dropped_small += 1
        else:
            kept.append(img)
    report.kept = len(kept)
    return kept
