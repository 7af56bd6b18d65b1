"""PNG figures for a Common-O release card: what the split contains, at a glance.

``write_common_o_figures`` is called by ``commonlink release build`` with the pairs-file rows of every split
(rows as written by ``commonlink pairs``; images reachable through ``image_N.catalog`` + ``image_N.path``).
It writes into ``RELEASE_DIR/figures`` and returns ``{figure title: path relative to RELEASE_DIR}`` so the card
can link each figure.

Figures: objects per image, common objects per example, object frequency (top 30), object area fractions by
source (only when areas are known) and one contact sheet of sample examples per split (both images, the
lettered choices, the ground truth).

matplotlib is imported inside the functions (it is slow to import), and only through its object-oriented API
(``Figure`` + Agg canvas), so no global pyplot state or display backend is touched.
"""

from __future__ import annotations

import io
import textwrap
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from PIL import Image

from commonlink.constants import NO_COMMON_OBJECTS
from commonlink.errors import CommonlinkError
from commonlink.fileio import atomic_write_bytes, safe_join
from commonlink.formats.catalog import catalog_file, iter_catalog
from commonlink.images import open_image
from commonlink.kinds.common_o.format import letters
from commonlink.seeding import rng_for

#: Examples shown on each split's contact sheet.
CONTACT_SHEET_EXAMPLES = 6
#: Longest side of an image thumbnail on the contact sheet (keeps memory flat for big photos).
THUMBNAIL_SIZE = 384
TOP_OBJECTS = 30

_SOURCE_COLOURS = {"real": "#4C72B0", "synthetic": "#DD8452"}
_OTHER_COLOUR = "#8C8C8C"
_DPI = 110


def write_common_o_figures(rows_by_split: dict[str, list[dict]], out_dir: Path, *, seed: int = 0) -> dict[str, str]:
    """Write the release figures for ``rows_by_split`` into ``out_dir``; return ``{title: relative path}``.

    Paths are relative to ``out_dir.parent`` (the release folder), e.g. ``figures/objects_per_image.png``.
    Figures that have nothing to show (no area fractions known) are skipped, not drawn empty.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    all_rows = [row for split in rows_by_split for row in rows_by_split[split]]
    images = unique_images(all_rows)
    written: dict[str, str] = {}

    def save(title: str, filename: str, fig, *, palette: bool = False) -> None:
        _save_png(fig, out_dir / filename, palette=palette)
        written[title] = f"{out_dir.name}/{filename}"

    if images:
        save("Objects per image", "objects_per_image.png", _objects_per_image_figure(images))
        save(f"Object frequency (top {TOP_OBJECTS})", "object_frequency.png", _object_frequency_figure(images))
    if all_rows:
        save("Common objects per example", "common_objects_per_example.png", _common_objects_figure(rows_by_split))
    areas = area_fractions_by_source(images)
    if any(areas.values()):
        save("Object area fraction by source", "area_fraction_by_source.png", _area_figure(areas))
    for split, rows in rows_by_split.items():
        if rows:
            filename = f"contact_sheet_{_safe_name(split)}.png"
            save(f"Sample examples ({split})", filename, contact_sheet(rows, split=split, seed=seed), palette=True)
    return written


# ----------------------------------------------------------------------------------------------- statistics


def unique_images(rows: Iterable[dict]) -> list[dict]:
    """The distinct images referenced by pairs rows (an image reused by many examples counts once)."""
    seen: dict[tuple, dict] = {}
    for row in rows:
        source = row.get("source")
        for key in ("image_1", "image_2"):
            image = row.get(key)
            if not isinstance(image, dict):
                continue
            ident = (image.get("catalog"), image.get("id") or image.get("path"))
            if ident not in seen:
                seen[ident] = {**image, "source": image.get("source") or source or "unknown"}
    return list(seen.values())


def common_object_count(row: dict) -> int:
    """Number of ground-truth common objects (0 for "No objects are in common")."""
    return len([name for name in row.get("ground_truth") or [] if name != NO_COMMON_OBJECTS])


def area_fractions_by_source(images: Iterable[dict]) -> dict[str, list[float]]:
    """Object area fractions per image source.

    Per-object areas come from ``object_area`` (exact for renders, prompted SAM for photos). Photos measured
    by SAM's automatic masks have no per-name areas; their estimates are kept in the catalog record's
    ``extra.estimated_object_areas`` (see ``commonlink stats``) and are read from there.
    """
    areas: dict[str, list[float]] = {}
    estimates = _CatalogEstimates()
    for image in images:
        source = image.get("source") or "unknown"
        known = image.get("object_area") or {}
        values = [float(v) for v in known.values() if v is not None]
        if not values:
            values = estimates.lookup(image.get("catalog"), image.get("id"))
        areas.setdefault(source, []).extend(values)
    return areas


class _CatalogEstimates:
    """Reads ``estimated_object_areas`` from catalogs on first use, one pass per catalog."""

    def __init__(self) -> None:
        self._by_catalog: dict[str, dict[str, list[float]]] = {}

    def lookup(self, catalog: str | None, image_id: str | None) -> list[float]:
        if not catalog or not image_id:
            return []
        if catalog not in self._by_catalog:
            self._by_catalog[catalog] = self._read(catalog)
        return self._by_catalog[catalog].get(image_id, [])

    @staticmethod
    def _read(catalog: str) -> dict[str, list[float]]:
        if not catalog_file(catalog).is_file():
            return {}
        found: dict[str, list[float]] = {}
        try:
            for record in iter_catalog(catalog):
                values = record.extra.get("estimated_object_areas")
                if values:
                    found[record.id] = [float(v) for v in values]
        except CommonlinkError:
            return {}  # a damaged catalog only costs the figure its estimates
        return found


# ----------------------------------------------------------------------------------------------- figures


def _new_figure(width: float, height: float):
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=_DPI, layout="constrained")


def _save_png(fig, path: Path, *, palette: bool = False) -> None:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=_DPI, facecolor="white")
    if palette:
        # Photo thumbnails make full-colour PNGs heavy (~2 MB a sheet); 256 colours keep them legible at ~1/5.

        img = Image.open(io.BytesIO(buffer.getvalue())).convert("RGB")
        img = img.quantize(256, method=Image.Quantize.FASTOCTREE, dither=Image.Dither.NONE)
        buffer = io.BytesIO()
        img.save(buffer, format="PNG", optimize=True)
    atomic_write_bytes(path, buffer.getvalue())


def _by_source(images: Iterable[dict]) -> dict[str, list[dict]]:
    grouped: dict[str, list[dict]] = {}
    for image in images:
        grouped.setdefault(image.get("source") or "unknown", []).append(image)
    return dict(sorted(grouped.items()))


def _integer_histogram(ax, values_by_label: dict[str, list[int]], *, xlabel: str, ylabel: str) -> None:
    """Side-by-side bars for integer-valued counts, one colour per label."""
    labels = [label for label, values in values_by_label.items() if values]
    if not labels:
        ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
        return
    lo = min(min(values_by_label[label]) for label in labels)
    hi = max(max(values_by_label[label]) for label in labels)
    xs = list(range(lo, hi + 1))
    width = 0.8 / len(labels)
    for i, label in enumerate(labels):
        counts = Counter(values_by_label[label])
        offsets = [x - 0.4 + width * (i + 0.5) for x in xs]
        ax.bar(
            offsets,
            [counts.get(x, 0) for x in xs],
            width=width,
            label=f"{label} (n={len(values_by_label[label]):,})",
            color=_SOURCE_COLOURS.get(label, _OTHER_COLOUR),
        )
    ax.set_xticks(xs)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(frameon=False)


def _objects_per_image_figure(images: list[dict]):
    fig = _new_figure(7, 4)
    ax = fig.subplots()
    values = {source: [len(img.get("objects") or []) for img in group] for source, group in _by_source(images).items()}
    _integer_histogram(ax, values, xlabel="objects in the image", ylabel="images")
    ax.set_title(f"Objects per image ({len(images):,} distinct images)")
    return fig


def _common_objects_figure(rows_by_split: dict[str, list[dict]]):
    fig = _new_figure(7, 4)
    ax = fig.subplots()
    values = {split: [common_object_count(row) for row in rows] for split, rows in rows_by_split.items()}
    _integer_histogram(
        ax, values, xlabel="objects in common (0 = \u201cNo objects are in common\u201d)", ylabel="examples"
    )
    ax.set_title("Common objects per example, by split")
    # splits are not sources: use a neutral palette instead of the source colours
    for patch_group, colour in zip(ax.containers, ["#55A868", "#8172B3", "#C44E52", "#937860", "#64B5CD"] * 4):
        for patch in patch_group:
            patch.set_color(colour)
    ax.legend(frameon=False)
    return fig


def _object_frequency_figure(images: list[dict]):
    by_source = _by_source(images)
    totals: Counter = Counter()
    per_source: dict[str, Counter] = {}
    for source, group in by_source.items():
        counts = Counter(name for img in group for name in set(img.get("objects") or []))
        per_source[source] = counts
        totals.update(counts)
    # ties broken by name: Counter order follows set iteration, which changes with PYTHONHASHSEED
    top = [name for name, _ in sorted(totals.items(), key=lambda item: (-item[1], item[0]))[:TOP_OBJECTS]]
    fig = _new_figure(8, max(3.0, 0.26 * len(top) + 1.2))
    ax = fig.subplots()
    if not top:
        ax.text(0.5, 0.5, "no objects", ha="center", va="center", transform=ax.transAxes)
        return fig
    ys = list(range(len(top)))[::-1]  # most frequent at the top
    left = [0] * len(top)
    for source, counts in per_source.items():
        widths = [counts.get(name, 0) for name in top]
        ax.barh(ys, widths, left=left, color=_SOURCE_COLOURS.get(source, _OTHER_COLOUR), label=source, height=0.75)
        left = [a + b for a, b in zip(left, widths)]
    ax.set_yticks(ys)
    ax.set_yticklabels(top)
    ax.set_xlabel("images containing the object")
    ax.grid(axis="x", alpha=0.3)
    ax.legend(frameon=False, loc="lower right")
    shown = "all" if len(totals) <= TOP_OBJECTS else f"top {TOP_OBJECTS}"
    ax.set_title(f"Object frequency ({shown} of {len(totals)} objects)")
    return fig


def _area_figure(areas: dict[str, list[float]]):
    fig = _new_figure(7, 4)
    ax = fig.subplots()
    labels = [label for label in sorted(areas) if areas[label]]
    data = [[100.0 * v for v in areas[label]] for label in labels]
    import matplotlib

    # matplotlib 3.10 renamed vert=False to orientation="horizontal" (and deprecated the old name)
    horizontal = {"orientation": "horizontal"} if _version(matplotlib.__version__) >= (3, 10) else {"vert": False}
    parts = ax.boxplot(
        data,
        **horizontal,
        patch_artist=True,
        showfliers=True,
        widths=0.6,
        flierprops={"markersize": 3, "alpha": 0.5},
        medianprops={"color": "black", "linewidth": 1.5},
    )
    for patch, label in zip(parts["boxes"], labels):
        patch.set_facecolor(_SOURCE_COLOURS.get(label, _OTHER_COLOUR))
        patch.set_alpha(0.8)
    ax.set_yticks(range(1, len(labels) + 1))
    ax.set_yticklabels([f"{label}\n(n={len(areas[label]):,})" for label in labels])
    # the range the paper measured with SAM (§3.1), clipped to the data so small objects stay readable
    right = max(max(values) for values in data) * 1.05
    ax.axvspan(2, 22, color="#55A868", alpha=0.12, label="Common-O paper: 2\u201322%")
    ax.set_xlim(0, max(right, 1.0))
    ax.legend(frameon=False, loc="upper right")
    ax.set_xlabel("object area, % of the image")
    ax.grid(axis="x", alpha=0.3)
    ax.set_title("Object area fraction by source")
    return fig


# ----------------------------------------------------------------------------------------------- contact sheet


def sample_rows(rows: list[dict], n: int, *, seed: int, split: str) -> list[dict]:
    """A seeded sample of ``n`` rows (all of them when fewer), in their original order."""
    if len(rows) <= n:
        return list(rows)
    picked = rng_for(seed, "contact_sheet", split).choice(len(rows), size=n, replace=False)
    return [rows[i] for i in sorted(int(i) for i in picked)]


def contact_sheet(rows: list[dict], *, split: str, seed: int = 0, n: int = CONTACT_SHEET_EXAMPLES):
    """A figure with ``n`` seeded sample examples: image 1, image 2, choices with the ground truth marked."""
    picked = sample_rows(rows, n, seed=seed, split=split)
    fig = _new_figure(12, 3.5 * len(picked) + 0.4)
    fig.suptitle(f"Sample examples \u2014 split '{split}' ({len(picked)} of {len(rows):,}, seed {seed})", fontsize=13)
    axes = fig.subplots(len(picked), 3, squeeze=False, gridspec_kw={"width_ratios": [1, 1, 1.15]})
    for (ax_1, ax_2, ax_text), row in zip(axes, picked):
        for ax, key in ((ax_1, "image_1"), (ax_2, "image_2")):
            _draw_image(ax, row.get(key) or {}, title=key.replace("_", " "))
        _draw_question(ax_text, row)
    return fig


def _draw_image(ax, image: dict, *, title: str) -> None:
    ax.set_xticks([])
    ax.set_yticks([])
    thumb = _thumbnail(image)
    if thumb is None:
        ax.text(0.5, 0.5, "image not found", ha="center", va="center", transform=ax.transAxes, color="#C44E52")
    else:
        ax.imshow(thumb)
    objects = image.get("objects") or []
    caption = ", ".join(objects)
    ax.set_title(f"{title} ({len(objects)} objects)", fontsize=9)
    lines = textwrap.wrap(caption, 60)
    if len(lines) > 3:
        lines = lines[:2] + [_shorten(lines[2] + " " + lines[3], 60)]
    ax.set_xlabel("\n".join(lines), fontsize=7)


def _thumbnail(image: dict):
    catalog, path = image.get("catalog"), image.get("path")
    if not catalog or not path:
        return None
    try:
        img = open_image(safe_join(catalog, path), what=f"{catalog}/{path}")
    except (CommonlinkError, OSError):
        return None
    img = img.convert("RGB")
    img.thumbnail((THUMBNAIL_SIZE, THUMBNAIL_SIZE))
    return img


def _draw_question(ax, row: dict) -> None:
    ax.axis("off")
    truth = set(row.get("ground_truth") or [])
    choices = list(row.get("choices") or [])
    header = f"{row.get('id', '')}  [{row.get('source', '')}]"
    ax.text(0.0, 1.0, header, fontsize=9, weight="bold", va="top", transform=ax.transAxes)
    ax.text(0.0, 0.92, "Which objects are in both images?", fontsize=8.5, va="top", transform=ax.transAxes)
    columns = 1 if len(choices) <= 13 else min(3, -(-len(choices) // 16))
    per_column = -(-len(choices) // columns) if choices else 1
    line = min(0.062, 0.72 / max(per_column, 1))
    fontsize = 8.5 if line >= 0.06 else 7
    max_chars = {1: 44, 2: 30, 3: 20}[columns]
    for i, (letter, choice) in enumerate(zip(letters(len(choices)), choices)):
        col, pos = divmod(i, per_column)
        correct = choice in truth
        mark = "\u2713" if correct else " "
        ax.text(
            0.02 + col / columns,
            0.84 - pos * line,
            f"{mark} {letter}. {_shorten(choice, max_chars)}",
            fontsize=fontsize,
            va="top",
            transform=ax.transAxes,
            color="#2E7D32" if correct else "#333333",
            weight="bold" if correct else "normal",
        )
    answer = row.get("answer") or ""
    names = _shorten(", ".join(name for name in choices if name in truth) or "-", 70)
    ax.text(
        0.0, 0.0, f"Ground truth: {answer}\n{names}", fontsize=8.5, va="bottom", color="#2E7D32", transform=ax.transAxes
    )


def _shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def _version(text: str) -> tuple[int, int]:
    major, minor = (text.split(".") + ["0"])[:2]
    return int(major), int("".join(ch for ch in minor if ch.isdigit()) or 0)


def _safe_name(text: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in str(text)) or "split"
