"""``release build``: one entry point that picks the kind's builder (:mod:`commonlink.registry`) from the inputs'
sidecar ``kind``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from commonlink import registry
from commonlink.errors import InputError
from commonlink.formats.meta import read_meta
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
    ``license=``, ``max_shard_bytes=``, ``overwrite=``, ``progress=``, ``licence_check=``, ``workers=``), which
    change those of ``options``.
    """
    options = options.with_changes(**changes)
    if not inputs:
        raise InputError(
            "No input files given.", "Pass one or more pairs files: commonlink release build PAIRS.jsonl --out DIR"
        )
    known_kinds = [registry.get_kind(name) for name in registry.KINDS]
    kinds = {str(p): read_meta(p)["kind"] for p in inputs}
    distinct = sorted(set(kinds.values()))
    if len(distinct) > 1:
        listing = "; ".join(f"{path}: {kind}" for path, kind in kinds.items())
        raise InputError(
            f"The inputs mix kinds ({listing}); one release holds one kind.",
            f"Build {' and '.join(k.title for k in known_kinds)} into separate release folders.",
        )
    kind = registry.kind_for_input(distinct[0])
    if kind is None:
        known = " or ".join(f"'{k.input_kind}' ({k.input_command})" for k in known_kinds)
        raise InputError(
            f"Unknown input kind {distinct[0]!r} (from {next(iter(kinds))}.meta.json).", f"Inputs must be {known}."
        )
    # One build per --out at a time: a second run into the same folder is refused (it would replace the first).
    with output_lock(Path(out_dir).expanduser().resolve(), what="commonlink release build"):
        return kind.build_release(inputs, out_dir, options)


__all__ = ["ReleaseOptions", "build_release"]
