"""``release build``: one entry point that picks the builder from the inputs' sidecar ``kind``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from commonlink.errors import InputError
from commonlink.formats.meta import (
    ASSOCIATION_CHAINS_KIND,
    COMMON_O_PAIRS_KIND,
    read_meta,
)
from commonlink.kinds.association.release import build_association_release
from commonlink.kinds.common_o.release import build_common_o_release
from commonlink.locks import output_lock
from commonlink.release.staging import (
    DEFAULT_RELEASE_OPTIONS,
    ReleaseOptions,
    ReleaseResult,
)


def build_release(
    inputs: list[str | os.PathLike],
    out_dir: str | os.PathLike,
    options: ReleaseOptions = DEFAULT_RELEASE_OPTIONS,
    **changes: Any,
) -> ReleaseResult:
    """Build a release from pairs files (Common-O) or chain files (association), chosen by their meta ``kind``.

    ``options`` is a :class:`ReleaseOptions`; its fields may also be given as keywords (``name=``, ``version=``,
    ``license=``, ``max_shard_bytes=``, ``overwrite=``, ``progress=``), which change those of ``options``.
    """
    options = options.with_changes(**changes)
    if not inputs:
        raise InputError(
            "No input files given.", "Pass one or more pairs files: commonlink release build PAIRS.jsonl --out DIR"
        )
    kinds = {str(p): read_meta(p)["kind"] for p in inputs}
    distinct = sorted(set(kinds.values()))
    if len(distinct) > 1:
        listing = "; ".join(f"{path}: {kind}" for path, kind in kinds.items())
        raise InputError(
            f"The inputs mix kinds ({listing}); one release holds one kind.",
            "Build Common-O pairs and association chains into separate release folders.",
        )
    kind = distinct[0]
    # One build per --out at a time: a second run into the same folder is refused (it would replace the first).
    with output_lock(Path(out_dir).expanduser().resolve(), what="commonlink release build"):
        if kind == ASSOCIATION_CHAINS_KIND:
            return build_association_release([Path(p) for p in inputs], Path(out_dir), options)
        if kind == COMMON_O_PAIRS_KIND:
            return build_common_o_release(inputs, out_dir, options)
    raise InputError(
        f"Unknown input kind {kind!r} (from {next(iter(kinds))}.meta.json).",
        f"Inputs must be '{COMMON_O_PAIRS_KIND}' (commonlink pairs) "
        f"or '{ASSOCIATION_CHAINS_KIND}' (commonlink chains).",
    )


__all__ = ["ReleaseOptions", "build_release"]
