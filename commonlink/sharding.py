"""Splitting a job over processes: ``--shard I/N`` (shared by ``synth``, which shards scenes, and ``eval``,
which shards rows)."""

from __future__ import annotations

from commonlink.errors import InputError, parse_two


def parse_shard(text: str | None) -> tuple[int, int] | None:
    """``"2/8"`` -> (2, 8): shard 2 (0-based) of 8; this process takes items 2, 10, 18, ... ``None``/empty -> None
    (no sharding)."""
    if not text:
        return None
    i, n = parse_two(
        text, "/", int, f"--shard {text!r} is not I/N.", "Write it as I/N with 0 <= I < N, e.g. --shard 0/4."
    )
    if n < 1 or not 0 <= i < n:
        raise InputError(
            f"--shard {text!r}: need 0 <= I < N.", "Shards are numbered from 0, e.g. --shard 0/4 ... --shard 3/4."
        )
    return (i, n)
