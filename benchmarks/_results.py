"""The benchmark contract (docs/benchmarks.md): ``--quick``, ``--json PATH`` and the rows a script reports.

Every ``benchmarks/bench_*.py`` accepts ``--quick`` (a reduced run, a minute or two on 2 cores) and
``--json PATH`` (a JSON list of rows). ``benchmarks/run_all.py`` runs them all and turns the rows into
``benchmarks/RESULTS.md`` and the table in ``docs/benchmarks.md``. In a script::

    from _results import add_contract_arguments, result_row, write_rows   # benchmarks/ is sys.path[0]

    parser = argparse.ArgumentParser(...)
    add_contract_arguments(parser)
    args = parser.parse_args()
    rows = [result_row("bench_x.py", "shard writing MB/s", ours, "MB/s", peer="bare pyarrow", ratio=ours / bare,
                       target=">= 0.8")]
    write_rows(args.json, rows)   # no-op when --json was not given

``target`` is a comparison on the ratio when there is one, else on the value: ``">= 0.8"``, ``"<= 1.3"``,
``"< 30"``. ``met`` is worked out from it (``None`` when there is no target or no number to compare).
"""

from __future__ import annotations

import argparse
import math
import operator
import os
import re
import statistics
from pathlib import Path

# Scripts import _common first (the repository root on sys.path); tests load this file with commonlink importable.
from commonlink.fileio import atomic_write_json  # noqa: E402

ROW_KEYS = ("benchmark", "figure", "value", "unit", "peer", "ratio", "target", "met")
_COMPARISONS = {">=": operator.ge, "<=": operator.le, ">": operator.gt, "<": operator.lt, "==": operator.eq}
_TARGET_RE = re.compile(r"^\s*(>=|<=|==|>|<)\s*(-?\d+(?:\.\d+)?)")


def add_contract_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true", help="a reduced run (a minute or two on 2 cores)")
    parser.add_argument(
        "--json", type=Path, default=None, metavar="PATH", help="also write the result rows as JSON here"
    )


def target_met(number: float | None, target: str | None) -> bool | None:
    """``target_met(0.9, ">= 0.8") -> True``; ``None`` without a target or a finite number."""
    if target is None or number is None or not math.isfinite(float(number)):
        return None
    match = _TARGET_RE.match(target)
    if not match:
        raise ValueError(f"target {target!r} is not a comparison like '>= 0.8'")
    return bool(_COMPARISONS[match.group(1)](float(number), float(match.group(2))))


def result_row(
    benchmark: str,
    figure: str,
    value: float | None,
    unit: str,
    *,
    peer: str | None = None,
    ratio: float | None = None,
    target: str | None = None,
) -> dict:
    """One row of the contract; ``met`` compares ``ratio`` (or ``value`` when there is no peer) with ``target``."""
    value = None if value is None else float(value)
    ratio = None if ratio is None else float(ratio)
    return {
        "benchmark": benchmark,
        "figure": figure,
        "value": value,
        "unit": unit,
        "peer": peer,
        "ratio": ratio,
        "target": target,
        "met": target_met(ratio if ratio is not None else value, target),
    }


def write_rows(path: str | os.PathLike | None, rows: list[dict]) -> None:
    """Write ``rows`` as a JSON list to ``path`` atomically (nothing when ``path`` is None)."""
    if path is None:
        return
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, rows)


def print_rows(rows: list[dict]) -> None:
    """The rows as a short text summary (what each script prints last)."""
    print("\nresult rows:")
    for row in rows:
        ratio = "" if row["ratio"] is None else f"  ratio {row['ratio']:.3g} vs {row['peer']}"
        target = (
            ""
            if row["target"] is None
            else f"  target {row['target']}: {'met' if row['met'] else 'MISSED' if row['met'] is False else 'n/a'}"
        )
        value = "n/a" if row["value"] is None else f"{row['value']:.4g}"
        print(f"  {row['figure']}: {value} {row['unit']}{ratio}{target}")


def _figure_key(figure: str) -> str:
    """A row's identity across repeats: its figure with the numbers blanked, since some figures quote what they
    were measured under ("... load average 1.82") and would otherwise never match their own rerun."""
    return re.sub(r"\d[\d.,]*", "#", str(figure))


def _finite(values: list) -> list[float]:
    return [float(v) for v in values if v is not None and math.isfinite(float(v))]


def _median_met(same: list[dict], median: float | None) -> bool | None:
    """The target against the median; a target that is not a plain comparison (``"full - quarter < 16 MiB"``,
    judged by the script itself) is met only when every repeat met it."""
    target = same[-1]["target"]
    if target is None or _TARGET_RE.match(target):
        return target_met(median, target)
    verdicts = [r.get("met") for r in same]
    return None if None in verdicts else all(verdicts)


def combine_runs(runs: list[list[dict]]) -> list[dict]:
    """Rows from repeats of one script -> one row per figure: ``value`` and ``ratio`` are the medians over the
    repeats (``value_range`` / ``ratio_range`` their min and max, ``runs`` how many repeats had the row), and
    ``met`` compares the *median* with the target, so one lucky run cannot mark a row met. The texts (figure,
    peer, unit, target) are the last repeat's. Rows keep the order the script first wrote them in."""
    grouped: dict[tuple[str, int], list[dict]] = {}
    for rows in runs:
        seen: dict[str, int] = {}
        for row in rows:
            key = _figure_key(row["figure"])
            seen[key] = seen.get(key, 0) + 1
            grouped.setdefault((key, seen[key]), []).append(row)
    combined = []
    for same in grouped.values():
        values, ratios = _finite([r["value"] for r in same]), _finite([r["ratio"] for r in same])
        value = statistics.median(values) if values else None
        ratio = statistics.median(ratios) if ratios else None
        combined.append(
            {key: same[-1][key] for key in ROW_KEYS}
            | {
                "value": value,
                "ratio": ratio,
                "met": _median_met(same, ratio if ratio is not None else value),
                "runs": len(same),
                "value_range": [min(values), max(values)] if values else None,
                "ratio_range": [min(ratios), max(ratios)] if ratios else None,
            }
        )
    return combined
