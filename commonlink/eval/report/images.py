"""Thumbnails for the HTML report: small JPEGs in a folder beside the page, or embedded as data URLs.

An image is identified by a key (the SHA-256 of its stored bytes, or the release fingerprint and image id), so an
image shared by several examples or several runs is decoded and written once, and a rerun of the report reuses the
thumbnails already in the folder. Thumbnails are also kept in a cache shared by every report
(``$COMMONLINK_HOME/thumbnails``, see :func:`thumbnail_cache_dir`), keyed by that key and the size: the report of
the next run on the same release links them instead of decoding its images again. Decoding goes through
:func:`commonlink.images.open_image` (pixel cap, clear errors).
Work is spread over a small thread pool: Pillow releases the GIL while it decodes, resizes and encodes.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import io
import os
import re
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from PIL import Image

from commonlink import constants
from commonlink.errors import InputError
from commonlink.fileio import naming_path, pid_alive
from commonlink.images import open_image

IMAGE_MODES = ("folder", "embed", "none")
THUMB_QUALITY = 82
_THUMB_NAME = re.compile(r"^[0-9a-f]{24}-\d+\.jpg$")
_THUMB_TEMP = re.compile(r"^\.(?P<name>.+)\.(?P<pid>\d+)\.tmp$")  #: a thumbnail being written (by process pid)


@dataclass
class ImageJob:
    """One picture to show: ``key`` identifies it; ``load`` returns its bytes or a PIL image."""

    key: str
    load: Callable[[], Any]


def bytes_key(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:24]


def text_key(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:24]


def thumbnail_cache_dir() -> Path:
    """Where thumbnails are kept for the next report (``$COMMONLINK_HOME/thumbnails``)."""
    return constants.COMMONLINK_HOME / "thumbnails"


def _write_atomically(path: Path, data: bytes) -> None:
    """Whole under a temporary name, then renamed: a killed run never leaves a half thumbnail that a rerun would
    reuse. (No fsync: a thumbnail is cheap to remake, and thousands of fsyncs are not.)"""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()  # a full disk: no half thumbnail left behind
        if isinstance(exc, OSError):
            raise naming_path(exc, path) from exc
        raise


def default_workers() -> int:
    try:
        return max(1, min(4, len(os.sched_getaffinity(0))))
    except AttributeError:  # not on Linux
        return max(1, min(4, os.cpu_count() or 1))


class ThumbnailStore:
    """Makes each thumbnail once and hands out the URL the page uses for it.

    ``mode`` is ``folder`` (JPEG files in ``folder``, linked relatively from the page), ``embed`` (data URLs in
    the page itself: one file to send, but about 4/3 the bytes) or ``none`` (no images).
    """

    def __init__(
        self, mode: str, folder: Path, *, size: int = 224, workers: int | None = None, cache: Path | None = None
    ):
        if mode not in IMAGE_MODES:
            raise InputError(f"--images {mode!r} is not an image mode.", f"Use one of: {', '.join(IMAGE_MODES)}.")
        if size < 16:
            raise InputError(f"--thumb-size {size} is too small to see anything.", "Use at least 16 (default 224).")
        self.mode = mode
        self.folder = folder
        self.size = size
        self.cache = cache  #: shared thumbnail cache (None: none); a thumbnail found there is linked, not remade
        self._cache_dirs: set[Path] = set()  #: cache subfolders known to exist (a set: safe to grow from pool threads)
        self.from_cache = 0
        self.workers = workers or default_workers()
        self._urls: dict[str, str] = {}
        self.written = 0
        self.reused = 0
        self.bytes = 0

    def urls(self, jobs: Sequence[ImageJob | None]) -> list[str | None]:
        """The URL of each job's thumbnail (``None`` for a ``None`` job or in mode ``none``), making new ones."""
        if self.mode == "none":
            return [None] * len(jobs)
        todo: dict[str, ImageJob] = {}
        for job in jobs:
            if job is not None and job.key not in self._urls and job.key not in todo:
                todo[job.key] = job
        if todo:
            if self.mode == "folder":
                self.folder.mkdir(parents=True, exist_ok=True)
            work = list(todo.values())
            if self.workers > 1 and len(work) > 1:
                with ThreadPoolExecutor(self.workers) as pool:
                    made = list(pool.map(self._make, work))
            else:
                made = [self._make(job) for job in work]
            for job, (url, size, how) in zip(work, made):
                self._urls[job.key] = url
                self.bytes += size
                self.written += how == "made"
                self.reused += how != "made"
                self.from_cache += how == "cache"
        return [None if job is None else self._urls[job.key] for job in jobs]

    def _file_name(self, key: str) -> str:
        return f"{key}-{self.size}.jpg"

    def _make(self, job: ImageJob) -> tuple[str, int, str]:
        """(URL, thumbnail bytes, how: "reused" from the page folder, "cache" or newly "made"); runs in the pool,
        so it touches no shared counters."""
        name = self._file_name(job.key)
        path = self.folder / name
        url = f"{quote(self.folder.name)}/{name}"
        if self.mode == "folder" and path.is_file():
            return url, path.stat().st_size, "reused"
        cached = self.cache / name[:2] / name if self.cache is not None else None
        if cached is not None and cached.is_file():
            if self.mode == "embed":
                with contextlib.suppress(OSError):
                    data = cached.read_bytes()
                    return "data:image/jpeg;base64," + base64.b64encode(data).decode("ascii"), len(data), "cache"
            elif _link_or_copy(cached, path):
                return url, path.stat().st_size, "cache"
        data = self._thumbnail(job)
        kept = False
        if cached is not None:
            with contextlib.suppress(OSError):  # a read-only or full cache only costs the next report its decoding
                if cached.parent not in self._cache_dirs:  # one mkdir per cache subfolder, not per thumbnail
                    cached.parent.mkdir(parents=True, exist_ok=True)
                    self._cache_dirs.add(cached.parent)
                _write_atomically(cached, data)
                kept = True
        if self.mode == "embed":
            return "data:image/jpeg;base64," + base64.b64encode(data).decode("ascii"), len(data), "made"
        if not (kept and _link_or_copy(cached, path)):
            _write_atomically(path, data)
        return url, len(data), "made"

    def _thumbnail(self, job: ImageJob) -> bytes:
        source = job.load()
        if isinstance(source, (bytes, bytearray)):
            img = open_image(bytes(source), what=f"image {job.key}", draft=(self.size, self.size))
        else:
            img = source
        if not isinstance(img, Image.Image):
            raise InputError(
                f"image {job.key}: got {type(img).__name__}, not an image.", "Check the dataset the run was made on."
            )
        if img.mode != "RGB":  # convert copies even an RGB image
            img = img.convert("RGB")
        scale = self.size / max(img.width, img.height)
        if scale < 1:
            size = (max(1, round(img.width * scale)), max(1, round(img.height * scale)))
            # reducing_gap: a fast integer downscale first, then a bicubic resize (same look, a fraction of the time)
            img = img.resize(size, Image.Resampling.BICUBIC, reducing_gap=2.0)
        out = io.BytesIO()
        img.save(out, format="JPEG", quality=THUMB_QUALITY, optimize=False)
        return out.getvalue()

    def prune(self) -> int:
        """Delete thumbnails in the folder that the page no longer uses (left by an earlier report); returns how
        many."""
        if self.mode != "folder" or not self.folder.is_dir():
            return 0
        used = {url.rsplit("/", 1)[-1] for url in self._urls.values() if not url.startswith("data:")}
        removed = 0
        for path in self.folder.iterdir():
            leftover = _THUMB_TEMP.match(path.name)
            if leftover and _THUMB_NAME.match(leftover["name"]) and not pid_alive(int(leftover["pid"])):
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()  # a killed run's half-written thumbnail
                continue
            if _THUMB_NAME.match(path.name) and path.name not in used:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
                    removed += 1
        return removed


def _link_or_copy(source: Path, dest: Path) -> bool:
    """Put the cached thumbnail ``source`` at ``dest`` (a hard link, else a copy); False when neither works."""
    with contextlib.suppress(OSError):
        os.link(source, dest)  # a link is whole the moment it exists: no temporary name needed
        return True
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    try:
        try:
            os.link(source, tmp)
        except OSError:  # another file system, or links not allowed
            tmp.write_bytes(source.read_bytes())
        os.replace(tmp, dest)
        return True
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()
        return False
