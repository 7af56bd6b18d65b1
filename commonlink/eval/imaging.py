"""Image preparation for model input: pixel cap, side-by-side concatenation, data URLs."""

from __future__ import annotations

import base64
import io
import math

from PIL import Image


def cap_pixels(img: Image.Image, max_pixels: int) -> Image.Image:
    """Downscale ``img`` (keeping its aspect ratio) so that width x height <= ``max_pixels``; 0 = no cap."""
    if img is None or not max_pixels or img.width * img.height <= max_pixels:
        return img
    scale = math.sqrt(max_pixels / (img.width * img.height))
    size = (max(1, int(img.width * scale)), max(1, int(img.height * scale)))
    return img.convert("RGB").resize(size, Image.Resampling.BICUBIC)


def concat_side_by_side(left: Image.Image, right: Image.Image) -> Image.Image:
    """The two images next to each other at a common height (the shorter one's), left first, no gap."""
    left, right = left.convert("RGB"), right.convert("RGB")
    height = min(left.height, right.height)

    def at_height(img: Image.Image) -> Image.Image:
        if img.height == height:
            return img
        return img.resize((max(1, round(img.width * height / img.height)), height), Image.Resampling.BICUBIC)

    left, right = at_height(left), at_height(right)
    canvas = Image.new("RGB", (left.width + right.width, height))
    canvas.paste(left, (0, 0))
    canvas.paste(right, (left.width, 0))
    return canvas


def image_data_url(img: Image.Image, image_format: str = "png") -> str:
    """``data:image/png;base64,...`` (lossless PNG by default; ``jpeg`` for smaller requests)."""
    buf = io.BytesIO()
    fmt = image_format.lower()
    if fmt in ("jpg", "jpeg"):
        img.convert("RGB").save(buf, format="JPEG", quality=95)
        mime = "jpeg"
    else:
        img.save(buf, format="PNG")
        mime = "png"
    return f"data:image/{mime};base64," + base64.b64encode(buf.getvalue()).decode("ascii")
