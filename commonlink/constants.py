"""Environment-driven settings, read in one place.

Every knob that can come from the environment lives here so that the rest of the code never calls
``os.environ`` itself (the Hub token is the one exception: it is read by ``huggingface_hub`` itself and never
stored or printed by us).
"""

from __future__ import annotations

import os
from pathlib import Path


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return int(raw)
    except ValueError as exc:  # pragma: no cover - trivial
        raise ValueError(f"Environment variable {name}={raw!r} is not an integer.") from exc


#: Largest image (width x height) commonlink will decode. Guards against decompression bombs and OOM on
#: huge photos; raise it with COMMONLINK_MAX_IMAGE_PIXELS if you really have bigger images.
MAX_IMAGE_PIXELS: int = _env_int("COMMONLINK_MAX_IMAGE_PIXELS", 64_000_000)

#: Default minimum image size (pixels) accepted by ingestion and the chain builder.
DEFAULT_MIN_PIXELS: int = 50_000

#: Where commonlink keeps caches (prediction cache, etc.) unless told otherwise.
COMMONLINK_HOME: Path = Path(os.environ.get("COMMONLINK_HOME", Path.home() / ".cache" / "commonlink"))

#: Name of the catalog index file inside a catalog folder.
CATALOG_FILENAME = "catalog.jsonl"

#: The answer choice used when two images share no object (published Common-O wording).
NO_COMMON_OBJECTS = "No objects are in common"

#: Share of the image an object covers in Common-O (§3.1: "the object in the images ranges from 2-22% of the
#: overall image size"); `commonlink synth` gates renders on it and release cards report it.
AREA_BAND: tuple[float, float] = (0.02, 0.22)
