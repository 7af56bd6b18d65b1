"""Cleaning one photo for the catalog: turned upright with its EXIF orientation, stripped of all metadata (EXIF
with GPS, XMP, comments; the ICC colour profile is kept because it carries no personal data) and encoded at its
original resolution:

* JPEG stays JPEG: re-saved with the original quantisation tables when no rotation was needed (almost no
  generation loss), else at quality 95;
* HEIC/HEIF/AVIF (phone photos) become JPEG at quality 95 (readable everywhere);
* everything else (PNG, WebP, TIFF, ...) becomes lossless PNG.

Used by ingestion (:mod:`commonlink.catalog.ingest`) and by releases that re-clean stored images.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

from PIL import ExifTags, Image

_JPEG_SOURCES = ("JPEG", "MPO")
_JPEG_TARGETS = _JPEG_SOURCES + ("HEIF", "AVIF")
_PNG_MODES = frozenset({"1", "L", "LA", "I", "I;16", "P", "RGB", "RGBA"})
_ORIENTATION = ExifTags.Base.Orientation


@dataclass
class CleanImage:
    data: bytes  #: the stored file's bytes (upright, no metadata)
    suffix: str  #: ".jpg" or ".png"
    width: int
    height: int
    phash: str  #: 16 hex digits
    source_format: str


def clean_image(img: Image.Image) -> CleanImage:
    """Apply EXIF orientation, drop every metadata block but the ICC profile, encode (see module doc)."""
    import imagehash

    source_format = img.format or "unknown"
    orientation = img.getexif().get(_ORIENTATION, 1)
    icc_profile = img.info.get("icc_profile")
    transparency = img.info.get("transparency")
    method = _TRANSPOSE.get(orientation)
    upright = img.transpose(method) if method is not None else img
    # Nothing from the source's info dict (exif, xmp, comment, dpi, text chunks) may reach the encoder.
    upright.info = {}
    save_kwargs: dict = {}
    if icc_profile:
        save_kwargs["icc_profile"] = icc_profile
    buf = io.BytesIO()
    if source_format in _JPEG_TARGETS:
        suffix = ".jpg"
        if upright is img and source_format == "JPEG":
            save_kwargs["quality"] = "keep"  # same quantisation tables: no visible re-encoding loss
        else:
            save_kwargs["quality"] = 95
            if upright.mode not in ("RGB", "L", "CMYK"):
                upright = upright.convert("RGB")
        upright.save(buf, format="JPEG", **save_kwargs)
    else:
        suffix = ".png"
        if upright.mode not in _PNG_MODES:
            upright = upright.convert("RGBA" if "A" in upright.getbands() else "RGB")
        elif transparency is not None and upright.mode in ("P", "L", "RGB"):
            save_kwargs["transparency"] = transparency
        upright.save(buf, format="PNG", **save_kwargs)
    return CleanImage(
        data=buf.getvalue(),
        suffix=suffix,
        width=upright.width,
        height=upright.height,
        phash=str(imagehash.phash(upright)),
        source_format=source_format,
    )


_TRANSPOSE = {
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_270,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_90,
}


__all__ = ["CleanImage", "clean_image"]
