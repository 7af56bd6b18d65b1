"""Contact sheets of rendered scenes (one row per scene, one column per view), for looking at renders."""

from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path

from PIL import Image, ImageDraw

from commonlink.fileio import atomic_write_bytes
from commonlink.formats.catalog import image_path, iter_catalog
from commonlink.images import image_to_png_bytes, open_image


def write_sheet(catalog_dir: str | os.PathLike, out_path: str | os.PathLike, *, scenes: int = 4, tile: int = 320,
                title: str | None = None) -> Path:
    """Tile the first ``scenes`` scenes of a synthetic catalog into one PNG, each image captioned with the
    number of visible objects."""
    by_scene: dict[str, list] = defaultdict(list)
    order: list[str] = []
    for record in iter_catalog(catalog_dir):
        if record.scene_id not in by_scene:
            if len(order) == scenes:
                continue
            order.append(record.scene_id)
        by_scene[record.scene_id].append(record)
    columns = max((len(v) for v in by_scene.values()), default=1)
    header = 28 if title else 0
    sheet = Image.new("RGB", (columns * tile, header + len(order) * tile), (255, 255, 255))
    draw = ImageDraw.Draw(sheet)
    if title:
        draw.text((8, 8), title, fill=(0, 0, 0))
    for row, scene_id in enumerate(order):
        for col, record in enumerate(sorted(by_scene[scene_id], key=lambda r: str(r.view))):
            image = open_image(image_path(catalog_dir, record), what="render").convert("RGB").resize((tile, tile))
            x, y = col * tile, header + row * tile
            sheet.paste(image, (x, y))
            caption = f"scene {scene_id} view {record.view}: {len(record.objects)} objects"
            draw.rectangle([x, y, x + 7 * len(caption) + 8, y + 16], fill=(0, 0, 0))
            draw.text((x + 4, y + 2), caption, fill=(255, 255, 255))
    out = Path(out_path)
    atomic_write_bytes(out, image_to_png_bytes(sheet))
    return out
