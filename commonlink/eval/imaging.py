"""Image preparation for model input: the image protocol, pixel cap, side-by-side concatenation, data URLs."""

from __future__ import annotations

import base64
import io
import math
import re
from dataclasses import dataclass

from PIL import Image

from commonlink.errors import InputError
from commonlink.images import to_eight_bit, to_rgb

#: The paper's protocol (§3.2): "Images are resized, maintaining the aspect ratio, with the smallest size of 384px".
PAPER_SHORTER_SIDE = 384
DEFAULT_IMAGE_PROTOCOL = f"shorter-side-{PAPER_SHORTER_SIDE}"


@dataclass(frozen=True)
class ImageProtocol:
    """How each image is sized before the model sees it (before any side-by-side concatenation).

    * ``shorter-side-N`` (default ``shorter-side-384``, the paper's): resized, aspect kept, so that the
      shorter side is exactly N pixels (smaller images are enlarged, as a resize to a fixed size does);
    * ``native``: as stored;
    * ``max-pixels-N``: as stored, downscaled (aspect kept) only when width x height exceeds N.

    The ``--max-pixels`` safety cap of the generation settings still applies afterwards (0 turns it off).
    """

    name: str  #: "shorter-side" | "native" | "max-pixels"
    value: int = 0

    @property
    def spec(self) -> str:
        return self.name if self.name == "native" else f"{self.name}-{self.value}"

    def to_dict(self) -> dict:
        return {"protocol": self.spec, "kind": self.name, "value": self.value or None}

    def apply(self, img: Image.Image) -> Image.Image:
        if img is None or self.name == "native":
            return img
        if self.name == "max-pixels":
            return cap_pixels(img, self.value)
        return resize_shorter_side(img, self.value)


def parse_image_protocol(text: str | ImageProtocol | None) -> ImageProtocol:
    """``"shorter-side-384"``, ``"native"`` or ``"max-pixels-1048576"`` (``"paper"`` = the paper's default)."""
    if isinstance(text, ImageProtocol):
        return text
    spec = (text or DEFAULT_IMAGE_PROTOCOL).strip().lower()
    if spec == "paper":
        spec = DEFAULT_IMAGE_PROTOCOL
    if spec == "native":
        return ImageProtocol("native")
    match = re.fullmatch(r"(shorter-side|max-pixels)-(\d+)", spec)
    if match is None or int(match.group(2)) < 1:
        raise InputError(
            f"--image-protocol {text!r} is not an image protocol.",
            f"Use {DEFAULT_IMAGE_PROTOCOL} (the paper's, default), shorter-side-N, native, or max-pixels-N.",
        )
    return ImageProtocol(match.group(1), int(match.group(2)))


def resize_shorter_side(img: Image.Image, side: int) -> Image.Image:
    """``img`` resized (aspect kept, bicubic) so that its shorter side is ``side`` pixels."""
    if min(img.width, img.height) == side:
        return img
    scale = side / min(img.width, img.height)
    if img.width <= img.height:
        size = (side, max(1, round(img.height * scale)))
    else:
        size = (max(1, round(img.width * scale)), side)
    return to_rgb(img).resize(size, Image.Resampling.BICUBIC)


def resize_square(img: Image.Image, side: int) -> Image.Image:
    """``img`` resized (bicubic, aspect not kept) to ``side`` x ``side``, as the Labyrinth harness feeds every
    image (``resize((336, 336))``); ``side`` 0 (or ``img`` None) leaves it as it is."""
    if img is None or not side or img.size == (side, side):
        return img
    return to_rgb(img).resize((side, side), Image.Resampling.BICUBIC)


def cap_pixels(img: Image.Image, max_pixels: int) -> Image.Image:
    """Downscale ``img`` (keeping its aspect ratio) so that width x height <= ``max_pixels``; 0 = no cap."""
    if img is None or not max_pixels or img.width * img.height <= max_pixels:
        return img
    scale = math.sqrt(max_pixels / (img.width * img.height))
    size = (max(1, int(img.width * scale)), max(1, int(img.height * scale)))
    return to_rgb(img).resize(size, Image.Resampling.BICUBIC)


def concat_side_by_side(left: Image.Image, right: Image.Image) -> Image.Image:
    """The two images next to each other at a common height (the shorter one's), left first, no gap."""
    left, right = to_rgb(left), to_rgb(right)
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
        to_rgb(img).save(buf, format="JPEG", quality=95)
        mime = "jpeg"
    else:
        to_eight_bit(img).save(buf, format="PNG")  # a 16-bit PNG would reach the model as the server reads it
        mime = "png"
    return f"data:image/{mime};base64," + base64.b64encode(buf.getvalue()).decode("ascii")
