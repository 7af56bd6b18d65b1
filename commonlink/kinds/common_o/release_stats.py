"""The numbers a Common-O datasheet reports, counted row by row while the release is written.

:class:`CommonOStatsAccumulator` keeps no image data: per split the rows, sources, numbers of common objects and
choices, the distinct images (with their object counts), and over the whole release the object frequencies,
scenes, backgrounds and object areas; ``summary()`` is what the card and the manifest's ``stats`` hold.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path

from commonlink.constants import AREA_BAND, NO_COMMON_OBJECTS


class CommonOStatsAccumulator:
    """Counts, row by row, the numbers the datasheet reports (no image data kept)."""

    def __init__(self) -> None:
        self.rows: Counter = Counter()
        self.source_rows: dict[str, Counter] = defaultdict(Counter)
        self.common: dict[str, Counter] = defaultdict(Counter)
        self.choices: dict[str, Counter] = defaultdict(Counter)
        self.images: dict[str, dict[tuple, tuple[int, str]]] = defaultdict(
            dict
        )  # split -> {image key: (n objects, source)}
        self.object_freq: Counter = Counter()  # over distinct images of the whole release
        self.scenes: set = set()
        self.backgrounds: Counter = Counter()
        self._seen_images: set = set()
        self.area_min: float | None = None
        self.area_max: float | None = None
        self.images_with_area = 0
        self.area_pairs = 0
        self.area_in_band = 0
        self.synthetic_catalogs: set[str] = set()

    def add(self, split: str, row: dict) -> None:
        self.rows[split] += 1
        self.source_rows[split][row["source"]] += 1
        self.common[split][len([t for t in row["ground_truth"] if t != NO_COMMON_OBJECTS])] += 1
        self.choices[split][len(row["choices"])] += 1
        for key in ("image_1", "image_2"):
            image = row[key]
            ident = (image.get("catalog"), image.get("id") or image.get("path"))
            objects = list(image.get("objects") or [])
            self.images[split].setdefault(ident, (len(objects), image.get("source") or row["source"]))
            if ident in self._seen_images:
                continue
            self._seen_images.add(ident)
            self.object_freq.update(objects)
            if image.get("scene_id") is not None:
                self.scenes.add((image.get("catalog"), image.get("scene_id")))
            if image.get("background"):
                self.backgrounds[image["background"]] += 1
            areas = [float(v) for v in (image.get("object_area") or {}).values() if v is not None]
            if (image.get("source") or row["source"]) == "synthetic" and image.get("catalog"):
                self.synthetic_catalogs.add(str(image["catalog"]))
            if areas:
                self.images_with_area += 1
                self.area_pairs += len(areas)
                self.area_in_band += sum(1 for a in areas if AREA_BAND[0] <= a <= AREA_BAND[1])
                self.area_min = min(areas + ([self.area_min] if self.area_min is not None else []))
                self.area_max = max(areas + ([self.area_max] if self.area_max is not None else []))

    def _synthetic_asset_licenses(self) -> dict[str, int] | None:
        """{licence: assets} summed over the synthetic catalogs' ``synth_config.json`` (None when no catalog
        records it, e.g. catalogs made before asset licences were recorded)."""
        counts: Counter = Counter()
        for catalog in sorted(self.synthetic_catalogs):
            path = Path(catalog) / "synth_config.json"
            try:
                recorded = json.loads(path.read_text(encoding="utf-8")).get("asset_licenses")
            except (OSError, ValueError):
                continue
            if isinstance(recorded, dict):
                counts.update({str(k): int(v) for k, v in recorded.items() if isinstance(v, int)})
        return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))) or None

    def summary(self) -> dict:
        splits = {}
        for split, n in self.rows.items():
            per_image = Counter(count for count, _ in self.images[split].values())
            image_sources = Counter(source for _, source in self.images[split].values())
            splits[split] = {
                "rows": n,
                "rows_by_source": dict(sorted(self.source_rows[split].items())),
                "real_share": self.source_rows[split]["real"] / n if n else 0.0,
                "synthetic_share": self.source_rows[split]["synthetic"] / n if n else 0.0,
                "distinct_images": len(self.images[split]),
                "images_by_source": dict(sorted(image_sources.items())),
                "objects_per_image": _distribution(per_image),
                "common_objects_per_example": _distribution(self.common[split]),
                "no_common_share": self.common[split][0] / n if n else 0.0,
                "choices_per_example": _distribution(self.choices[split]),
            }
        total = sum(self.rows.values())
        real = sum(c["real"] for c in self.source_rows.values())
        return {
            "total_rows": total,
            "real_share": real / total if total else 0.0,
            "synthetic_share": (total - real) / total if total else 0.0,
            "distinct_images": len(self._seen_images),
            "distinct_scenes": len(self.scenes),
            "distinct_objects": len(self.object_freq),
            "object_frequency": [
                [name, count] for name, count in sorted(self.object_freq.items(), key=lambda kv: (-kv[1], kv[0]))
            ],
            "backgrounds": dict(sorted(self.backgrounds.items(), key=lambda kv: (-kv[1], kv[0]))),
            "object_area": (
                {
                    "images": self.images_with_area,
                    "min": self.area_min,
                    "max": self.area_max,
                    "pairs": self.area_pairs,
                    "in_band": self.area_in_band,
                    "band": list(AREA_BAND),
                }
                if self.images_with_area
                else None
            ),
            "synthetic_asset_licenses": self._synthetic_asset_licenses(),
            "splits": splits,
        }


def _distribution(counter: Counter) -> dict:
    n = sum(counter.values())
    if not n:
        return {"count": 0, "min": None, "max": None, "mean": None, "histogram": {}}
    return {
        "count": n,
        "min": min(counter),
        "max": max(counter),
        "mean": sum(k * v for k, v in counter.items()) / n,
        "histogram": {str(k): counter[k] for k in sorted(counter)},
    }


__all__ = ["CommonOStatsAccumulator"]
