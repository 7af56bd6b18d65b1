"""Grouped bar charts with error bars as inline SVG (no plotting library, no script: the page stays static).

Every label is escaped: category and series names come from datasets (sources, concepts) and run files.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

#: Colour-blind-safe palette (Okabe-Ito), one colour per series (run).
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000")


@dataclass
class Series:
    """One run's values over the chart's categories (``None`` where it has no data); ``errors`` are ± bars."""

    label: str
    values: Sequence[float | None]
    errors: Sequence[float | None]


def _nice_axis(value: float) -> tuple[float, int]:
    """(top, number of intervals) of a y axis reaching ``value`` in 2 to 5 round steps (1, 2, 2.5 or 5 x 10^k)."""
    if value <= 0:
        return 1.0, 4
    raw = value / 4
    exponent = math.floor(math.log10(raw))
    step = min(m * 10**e for e in (exponent, exponent + 1) for m in (1, 2, 2.5, 5) if m * 10**e >= raw)
    intervals = max(2, math.ceil(value / step - 1e-9))
    return round(step * intervals, 12), intervals


def _number(value) -> float | None:
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) else None


def _fmt(value: float, percent: bool) -> str:
    return f"{100 * value:.3g}%" if percent else f"{value:.4g}"


def bar_chart(
    title: str,
    categories: Sequence[str],
    series: Sequence[Series],
    *,
    x_label: str = "",
    percent: bool = True,
    y_max: float | None = None,
    width: int = 440,
    height: int = 230,
) -> str:
    """An SVG figure: one group of bars per category, one bar per series, error bars of ± ``errors``."""
    left, right, top, bottom = 46, 10, 28, 40
    plot_w, plot_h = width - left - right, height - top - bottom
    # values come from results files, which may be edited: anything but a number is no data
    series = [Series(s.label, [_number(v) for v in s.values], [_number(e) for e in s.errors]) for s in series]
    tops = [v + (e or 0) for s in series for v, e in zip(s.values, s.errors) if v is not None]
    highest = max(tops, default=0.0)
    if percent:
        highest = min(highest, 1.0)  # a share never exceeds 100%, whatever its error bar says
    y_top, intervals = (y_max, 4) if y_max is not None else _nice_axis(highest)
    parts = [
        f'<svg class="chart" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" '
        f'aria-label="{escape(title)}">',
        f'<text x="{left}" y="16" class="chart-title">{escape(title)}</text>',
    ]
    for k in range(intervals + 1):  # y grid and ticks
        value = y_top * k / intervals
        y = top + plot_h - plot_h * k / intervals
        parts.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{y:.1f}" y2="{y:.1f}" class="grid"/>')
        parts.append(
            f'<text x="{left - 5}" y="{y + 3.5:.1f}" class="tick" '
            f'text-anchor="end">{escape(_fmt(value, percent))}</text>'
        )
    n_cat, n_ser = max(1, len(categories)), max(1, len(series))
    group_w = plot_w / n_cat
    bar_w = min(28.0, group_w * 0.8 / n_ser)
    for c, name in enumerate(categories):
        x0 = left + group_w * c + (group_w - bar_w * n_ser) / 2
        for s, ser in enumerate(series):
            value = ser.values[c] if c < len(ser.values) else None
            if value is None:
                continue
            error = ser.errors[c] if c < len(ser.errors) else None
            x = x0 + bar_w * s
            h = plot_h * min(value, y_top) / y_top
            y = top + plot_h - h
            tip = f"{ser.label} · {name}: {_fmt(value, percent)}" + (f" ± {_fmt(error, percent)}" if error else "")
            parts.append(
                f'<rect x="{x:.1f}" y="{y:.1f}" width="{bar_w - 1:.1f}" height="{h:.1f}" '
                f'fill="{PALETTE[s % len(PALETTE)]}">'
                f"<title>{escape(tip)}</title></rect>"
            )
            if error:
                cx = x + (bar_w - 1) / 2
                y_lo = top + plot_h - plot_h * max(0.0, value - error) / y_top
                y_hi = top + plot_h - plot_h * min(y_top, value + error) / y_top
                parts.append(
                    f'<path d="M{cx:.1f},{y_lo:.1f}V{y_hi:.1f}M{cx - 3:.1f},{y_lo:.1f}h6M{cx - 3:.1f},{y_hi:.1f}h6" '
                    'class="errbar"/>'
                )
        label = name if len(name) <= 14 else name[:13] + "…"
        parts.append(
            f'<text x="{left + group_w * (c + 0.5):.1f}" y="{top + plot_h + 14}" class="tick" text-anchor="middle">'
            f"{escape(label)}<title>{escape(name)}</title></text>"
        )
    parts.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{top + plot_h}" y2="{top + plot_h}" class="axis"/>')
    if x_label:
        parts.append(
            f'<text x="{left + plot_w / 2:.1f}" y="{height - 6}" class="axis-label" '
            f'text-anchor="middle">{escape(x_label)}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def legend(labels: Sequence[str]) -> str:
    """A colour key for the series of every chart on the page (HTML)."""
    items = "".join(
        f'<span class="key"><i style="background:{PALETTE[i % len(PALETTE)]}"></i>{escape(label)}</span>'
        for i, label in enumerate(labels)
    )
    return f'<div class="legend">{items}</div>'
