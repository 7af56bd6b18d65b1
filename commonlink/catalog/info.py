"""Summary counts of an image catalog (``commonlink catalog info``), computed in one streaming pass."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

from commonlink.formats.catalog import iter_catalog


def catalog_summary(catalog_dir: str | os.PathLike, *, top: int = 10, check_files: bool = True) -> dict:
    """Counts for a catalog: images, sources, scenes, backgrounds, views, objects per image, top objects.

    With ``check_files`` every image file is checked to exist (a ``stat`` per image, no decoding).
    """
    root = Path(catalog_dir)
    sources: Counter[str] = Counter()
    objects: Counter[str] = Counter()
    per_image: Counter[int] = Counter()
    scenes: set[tuple[str, str]] = set()
    backgrounds: Counter[str] = Counter()
    views: Counter[str] = Counter()
    images = with_area = 0
    pixels_min: int | None = None
    pixels_max = 0
    missing: list[str] = []
    for record in iter_catalog(root):
        images += 1
        sources[record.source] += 1
        scenes.add((record.source, record.scene_id))
        objects.update(record.objects)
        per_image[len(record.objects)] += 1
        if record.background:
            backgrounds[record.background] += 1
        if record.view:
            views[record.view] += 1
        if record.object_area:
            with_area += 1
        pixels = record.width * record.height
        pixels_min = pixels if pixels_min is None else min(pixels_min, pixels)
        pixels_max = max(pixels_max, pixels)
        if check_files and not (root / record.path).is_file():
            missing.append(record.path)
    counts = sorted(per_image.elements())
    return {
        "catalog": str(root.resolve()),
        "images": images,
        "sources": dict(sorted(sources.items())),
        "scenes": len(scenes),
        "scenes_by_source": dict(sorted(Counter(source for source, _ in scenes).items())),
        "backgrounds": len(backgrounds),
        "views": len(views),
        "distinct_objects": len(objects),
        "objects_per_image": {
            "min": counts[0] if counts else 0,
            "mean": round(sum(counts) / len(counts), 3) if counts else 0.0,
            "max": counts[-1] if counts else 0,
            "histogram": {str(k): v for k, v in sorted(per_image.items())},
        },
        "top_objects": [[name, count] for name, count in sorted(objects.items(), key=lambda kv: (-kv[1], kv[0]))[:top]],
        "images_with_object_area": with_area,
        "pixels": {"min": pixels_min or 0, "max": pixels_max},
        "missing_images": missing if check_files else None,
    }
