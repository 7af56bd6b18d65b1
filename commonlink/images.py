"""Opening images safely: pixel cap, HEIC/HEIF support, clear errors for corrupt files."""

from __future__ import annotations

import contextlib
import io
import os
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from PIL import Image, ImageFile, UnidentifiedImageError

from commonlink.constants import MAX_IMAGE_PIXELS
from commonlink.errors import InputError, check_at_least

Image.MAX_IMAGE_PIXELS = MAX_IMAGE_PIXELS
# Truncated files must fail loudly, not decode as half-grey images.
ImageFile.LOAD_TRUNCATED_IMAGES = False

_HEIF_REGISTERED = False


#: The smallest thumbnail side (``--thumb-size``) the review pages and the HTML report draw.
MIN_THUMB_SIZE = 32


def check_thumb_size(size: int) -> int:
    """``size`` if it is a usable thumbnail side, else the error ``--thumb-size`` gives."""
    check_at_least("--thumb-size", size, MIN_THUMB_SIZE, "e.g. --thumb-size 224.")
    return size


def register_heif() -> bool:
    """Teach Pillow to read HEIC/HEIF (phone photos) when ``pillow-heif`` is installed."""
    global _HEIF_REGISTERED
    if _HEIF_REGISTERED:
        return True
    try:
        from pillow_heif import register_heif_opener
    except ImportError:
        return False
    register_heif_opener()
    _HEIF_REGISTERED = True
    return True


#: Pillow's modes of more than 8 bits per sample (16-bit grey PNGs open as ``I;16``, TIFFs as ``I`` or ``F``).
#: Pillow's convert("RGB"/"L") clips their values at 255, so an ordinary 16-bit photo would turn white.
HIGH_DEPTH_MODES = frozenset({"I;16", "I;16L", "I;16B", "I;16N", "I", "F"})


def to_eight_bit(img: Image.Image) -> Image.Image:
    """``img`` with 8 bits per sample: a high-depth grey image (:data:`HIGH_DEPTH_MODES`) is scaled to ``L``
    (a 16-bit value v becomes round(v / 257), so 8-bit grey g stored as 257 g stays g); others are returned as
    they are. ``I``/``F`` images whose values all lie in 0..255 are taken as 8-bit values, and ``F`` in 0..1 as
    fractions."""
    if img.mode not in HIGH_DEPTH_MODES:
        return img
    values = np.asarray(img, dtype=np.float64)
    high = float(values.max()) if values.size else 0.0
    if img.mode.startswith("I;16") or high > 255:
        values = values / 257
    elif img.mode == "F" and high <= 1.0:
        values = values * 255
    return Image.fromarray(np.clip(np.rint(values), 0, 255).astype(np.uint8), "L")


def to_rgb(img: Image.Image) -> Image.Image:
    """``img`` as 8-bit RGB, high-depth grey scaled (not clipped) first (see :func:`to_eight_bit`)."""
    img = to_eight_bit(img)
    return img if img.mode == "RGB" else img.convert("RGB")


def open_image(
    source: str | os.PathLike | bytes,
    *,
    what: str | None = None,
    draft: tuple[int, int] | None = None,
    keep_depth: bool = False,
) -> Image.Image:
    """Open and fully decode an image (from a path or bytes), enforcing the pixel cap.

    A high-depth grey image (16-bit PNG) comes back as 8-bit grey of the same look (:func:`to_eight_bit`),
    unless ``keep_depth`` (instance masks, whose values are ids, not intensities).

    ``draft=(w, h)`` lets a JPEG decode straight at a reduced scale no smaller than that (thumbnails: several
    times faster); other formats ignore it.

    Raises :class:`InputError` naming ``what`` (or the path) for missing, corrupt, truncated or oversized
    images. The returned image is loaded, so the file handle is closed.
    """
    return load_opened_image(*open_image_lazily(source, what=what, draft=draft), keep_depth=keep_depth)


def open_image_lazily(
    source: str | os.PathLike | bytes, *, what: str | None = None, draft: tuple[int, int] | None = None
) -> tuple[Image.Image, str]:
    """The first half of :func:`open_image`: the header read and checked (format, pixel cap), the pixels not decoded
    yet; returns ``(image, label)`` for :func:`load_opened_image`, which may run on another thread (Pillow's
    decoders release the GIL; the warnings filter that enforces the cap is set only here, on the caller's)."""
    register_heif()
    label = what or (str(source) if not isinstance(source, bytes) else "image bytes")
    with _image_errors(label):
        if isinstance(source, bytes):
            handle: io.BytesIO | Path = io.BytesIO(source)
        else:
            handle = Path(source)
            if not handle.is_file():
                raise InputError(f"{label}: file not found.", "Check the path.")
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            img = Image.open(handle)
            if draft is not None and img.format == "JPEG":
                img.draft("RGB", draft)
        return img, label


def load_opened_image(img: Image.Image, label: str, *, keep_depth: bool = False) -> Image.Image:
    """Decode the pixels of an image from :func:`open_image_lazily` (errors as :func:`open_image` raises them);
    high-depth grey scaled to 8 bits unless ``keep_depth``, as :func:`open_image` does."""
    with _image_errors(label):
        img.load()
    return img if keep_depth else to_eight_bit(img)


@contextlib.contextmanager
def _image_errors(label: str) -> Iterator[None]:
    """Pillow's errors as :class:`InputError` naming the image and the fix."""
    try:
        yield
    except InputError:
        raise
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise InputError(
            f"{label}: image is larger than the pixel cap ({MAX_IMAGE_PIXELS:,} pixels).",
            "Downscale it, or raise COMMONLINK_MAX_IMAGE_PIXELS if you trust the file.",
        ) from exc
    except UnidentifiedImageError as exc:
        raise InputError(
            f"{label}: not a readable image (corrupt or unknown format).", "Re-export or remove the file."
        ) from exc
    except (OSError, SyntaxError, ValueError) as exc:
        raise InputError(f"{label}: image is corrupt or truncated ({exc}).", "Re-export or remove the file.") from exc


def check_image(data: bytes, *, what: str, size: tuple[int, int] | None = None) -> tuple[int, int]:
    """Decode ``data`` fully (pixel cap enforced) and return its ``(width, height)``; an :class:`InputError` naming
    ``what`` when it is not an image, is truncated or corrupt, is over the cap, or is not ``size`` pixels."""
    img = open_image(data, what=what)
    width, height = img.size
    img.close()
    if size is not None and (width, height) != tuple(size):
        raise InputError(
            f"{what}: the image is {width}x{height} pixels, but its record (catalog or image table) says "
            f"{size[0]}x{size[1]}.",
            "The file was replaced after cataloguing: restore the original, or rebuild the catalog and sample again.",
        )
    return width, height


def image_to_png_bytes(img: Image.Image) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()
