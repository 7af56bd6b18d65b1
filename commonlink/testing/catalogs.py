"""Tiny image catalogs and pairs files written in the toolkit's own formats, for tests and users' own pipelines.

Everything is made here, offline and deterministically: images are small solid-colour or seeded-noise files, ids
are the stored file's hash (as ingest and synth make them) unless given, and pairs files carry the
``.meta.json`` sidecar ``commonlink pairs`` writes.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from commonlink.constants import NO_COMMON_OBJECTS
from commonlink.fileio import sha256_bytes, write_jsonl
from commonlink.formats.catalog import CatalogRecord, write_catalog
from commonlink.formats.common_o import QUESTION_TEMPLATE_ID, common_o_question, letters
from commonlink.formats.meta import COMMON_O_PAIRS_KIND, read_meta, write_meta

OBJECT_NAMES = ["apple", "keys", "mug", "book", "pen", "duck", "ball", "cup"]


def tiny_image_bytes(*, color: tuple[int, int, int] | None = None, seed: int = 0, size: tuple[int, int] = (8, 8),
                     fmt: str = "PNG") -> bytes:
    """An encoded image: solid ``color`` when given, else seeded noise."""
    if color is not None:
        image = Image.new("RGB", size, color)
    else:
        pixels = np.random.default_rng(seed).integers(0, 256, size=(size[1], size[0], 3), dtype=np.uint8)
        image = Image.fromarray(pixels)
    buffer = io.BytesIO()
    image.save(buffer, format=fmt)
    return buffer.getvalue()


def write_tiny_catalog(root: str | Path, images: list[dict[str, Any]], *, fmt: str = "PNG",
                       size: tuple[int, int] = (8, 8)) -> list[CatalogRecord]:
    """Write a catalog folder (``images/`` + ``catalog.jsonl``) and return its records.

    Each entry of ``images`` needs ``objects``; optional keys: ``color`` or ``seed`` (pixels), ``source``
    (default ``real``), ``scene_id``, ``view``, ``background``, ``object_area``, ``id`` (default: the first 16 hex
    digits of the file's sha256) and ``name`` (file name under ``images/``, default ``<id>.<ext>``).
    """
    root = Path(root)
    (root / "images").mkdir(parents=True, exist_ok=True)
    extension = "jpg" if fmt == "JPEG" else fmt.lower()
    records = []
    for n, spec in enumerate(images):
        data = tiny_image_bytes(color=spec.get("color"), seed=spec.get("seed", n), size=size, fmt=fmt)
        digest = sha256_bytes(data)
        image_id = spec.get("id") or digest[:16]
        rel = f"images/{spec.get('name') or f'{image_id}.{extension}'}"
        (root / rel).write_bytes(data)
        records.append(CatalogRecord(
            id=image_id, path=rel, objects=list(spec["objects"]), source=spec.get("source", "real"),
            scene_id=spec.get("scene_id", f"scene-{n}"), width=size[0], height=size[1], sha256=digest,
            background=spec.get("background"), view=spec.get("view"), object_area=spec.get("object_area"),
        ))
    write_catalog(root, records)
    return records


def write_rotating_catalog(root: str | Path, n: int, *, source: str = "real", fmt: str = "JPEG", size=(32, 24)) -> list[CatalogRecord]:
    """A catalog folder of ``n`` small solid-colour images whose 3-5 objects rotate through :data:`OBJECT_NAMES`
    (neighbouring images share objects, so every count of common objects occurs); returns its records."""
    specs = []
    for i in range(n):
        objects = [OBJECT_NAMES[(i + k) % len(OBJECT_NAMES)] for k in range(3 + i % 3)]
        specs.append({
            "objects": objects, "color": ((i * 37) % 255, (i * 11) % 255, 90), "id": f"{source[:3]}{i:04d}",
            "name": f"img{i:04d}.{'jpg' if fmt == 'JPEG' else 'png'}", "source": source, "scene_id": f"s{i // 2}",
            "view": str(i % 2), "background": "table", "object_area": {o: round(0.05 + 0.01 * k, 3) for k, o in enumerate(objects)},
        })
    return write_tiny_catalog(root, specs, fmt=fmt, size=size)


#: Object names of :func:`family_scenes`.
VOCAB = [
    "apple", "keys", "mug", "spoon", "fork", "bowl", "vase", "candle", "marker", "remote", "mouse", "keyboard",
    "shoes", "scissors", "lime", "orange", "glass", "pen", "plant", "dino", "hammer", "dish", "football", "cup",
]


def write_scene_catalog(folder: str | Path, source: str, scenes: list[list[str]], views: int = 3, hide: bool = False, seed: int = 0) -> Path:
    """A catalog of ``views`` PNGs per scene; with ``hide``, some views miss one object (as a render would)."""
    rng = np.random.default_rng(seed)
    specs = []
    for s, objects in enumerate(scenes):
        for v in range(views):
            visible = list(objects)
            if hide and len(visible) > 3 and rng.random() < 0.3:
                visible.pop(int(rng.integers(len(visible))))
            specs.append({"objects": visible, "seed": seed * 100_000 + s * 100 + v, "source": source,
                          "scene_id": f"{source}-scene-{s}", "background": "table" if source == "real" else "marble",
                          "view": str(v), "object_area": {o: 0.05 for o in visible} if source == "synthetic" else None})
    write_tiny_catalog(folder, specs, size=(8, 6))
    return Path(folder)


def family_scenes(n: int, seed: int, sizes=(3, 6)) -> list[list[str]]:
    """Scenes built around shared object pairs, so every count of common objects from 0 to 2+ is frequent."""
    rng = np.random.default_rng(seed)
    scenes = []
    for s in range(n):
        base = [VOCAB[(2 * (s % 5)) % len(VOCAB)], VOCAB[(2 * (s % 5) + 1) % len(VOCAB)]]
        rest = [o for o in VOCAB if o not in base]
        size = int(rng.integers(sizes[0], sizes[1] + 1))
        scenes.append(base + [rest[j] for j in rng.choice(len(rest), size - 2, replace=False)])
    return scenes


def common_o_pair_row(catalog: str | Path, a: CatalogRecord, b: CatalogRecord, index: int, split: str) -> dict:
    """A pairs-file row as ``commonlink pairs`` writes it: the objects in both images, three distractors and
    "No objects are in common" as lettered choices."""
    common = sorted(set(a.objects) & set(b.objects))
    others = sorted((set(a.objects) | set(b.objects) | {"shoe"}) - set(common))
    choices = sorted(common + others[:3] + [NO_COMMON_OBJECTS])
    truth = common or [NO_COMMON_OBJECTS]
    labels = letters(len(choices))

    def image(r: CatalogRecord) -> dict:
        return {"catalog": str(Path(catalog).resolve()), "id": r.id, "path": r.path, "scene_id": r.scene_id,
                "view": r.view, "background": r.background, "objects": r.objects, "object_area": r.object_area}

    return {
        "id": f"{split}-{index:08d}", "split": split, "source": a.source, "image_1": image(a), "image_2": image(b),
        "choices": choices, "ground_truth": truth, "answer": ", ".join(sorted(labels[choices.index(t)] for t in truth)),
        "question": common_o_question(choices), "question_template": QUESTION_TEMPLATE_ID,
    }


def write_tiny_pairs(path: str | Path, catalog: str | Path, records: list[CatalogRecord], n: int, *, split: str = "main",
                     seed: int = 3, kind: str = COMMON_O_PAIRS_KIND) -> list[dict]:
    """A pairs file of ``n`` rows over ``records`` (image i with image 7i+1) and its sidecar; returns the rows."""
    rows = [common_o_pair_row(catalog, records[i % len(records)], records[(i * 7 + 1) % len(records)], i, split)
            for i in range(n)]
    write_jsonl(path, rows)
    catalog_dir = str(Path(catalog).resolve())
    write_meta(path, {
        "kind": kind, "toolkit_version": "0.1.0", "seed": seed, "split": split, "count": n,
        "config": {"catalogs": [catalog_dir], "seed": seed, "count": n}, "catalogs": [catalog_dir],
        "stats": {}, "created": "2026-01-01T00:00:00+00:00",
    })
    return rows


def rewrite_pairs(path: str | Path, rows: list[dict]) -> None:
    """Replace a pairs file's rows and refresh its sidecar's fingerprint, as if ``commonlink pairs`` had written
    these rows (to test what ``release build`` does with rows the sampler would not write)."""
    write_jsonl(path, rows)
    meta = {k: v for k, v in read_meta(path).items() if k not in ("sha256", "rows")}
    write_meta(path, meta)


__all__ = ["rewrite_pairs", "OBJECT_NAMES", "VOCAB", "family_scenes", "write_scene_catalog", "common_o_pair_row", "write_rotating_catalog", "tiny_image_bytes", "write_tiny_catalog", "write_tiny_pairs"]
