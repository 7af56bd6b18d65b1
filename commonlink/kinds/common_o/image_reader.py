"""Reading the image files that release rows name: each catalog's records read once, paths kept inside their
catalog (no symlink escapes), each image decoded under the pixel cap once per build."""

from __future__ import annotations

import os

from commonlink.errors import InputError, SchemaError
from commonlink.fileio import safe_join
from commonlink.formats.catalog import CatalogRecord, iter_catalog, outside_link_error
from commonlink.images import check_image


class CatalogImageReader:
    """Reads image files named by pairs rows (``catalog`` + relative ``path``), refusing paths outside the catalog.

    Each catalog sub-folder is resolved (``safe_join``) once and cached; files are opened without following
    symlinks, and a symlinked file is checked with ``safe_join`` before it is read, so a link cannot escape.
    """

    def __init__(self) -> None:
        self._folders: dict[tuple[str, str], str] = {}
        self._records: dict[str, dict[str, CatalogRecord]] = {}
        self._verified: set[tuple[str, int, int]] = set()

    def verify_image(self, data: bytes, record: CatalogRecord, *, what: str) -> None:
        """Decode ``data`` (the bytes of ``record``'s file, sha256 already matched) under the pixel cap and check
        its size against the record; an image used by many rows is decoded once per build."""
        key = (record.sha256, record.width, record.height)
        if key not in self._verified:
            check_image(data, what=what, size=(record.width, record.height))
            self._verified.add(key)

    def record(self, catalog: str, image_id: str, *, what: str) -> CatalogRecord:
        """The catalog record of ``image_id`` (each catalog read once); an error when it has none."""
        records = self._records.get(catalog)
        if records is None:
            try:
                records = self._records[catalog] = {r.id: r for r in iter_catalog(catalog)}
            except InputError as exc:
                raise InputError(f"{what}: {exc.problem}", exc.fix) from None
        found = records.get(image_id)
        if found is None:
            raise SchemaError(
                f"{what}: id {image_id!r} is not a record of the catalog {catalog}.",
                "Sample the pairs again from the current catalog (`commonlink pairs ... --overwrite`).",
            )
        return found

    def path(self, catalog: str, relative: str, *, what: str) -> str:
        head, tail = os.path.split(relative)
        key = (catalog, head)
        folder = self._folders.get(key)
        if folder is None:
            try:
                folder = self._folders[key] = str(safe_join(catalog, head or "."))
            except InputError as exc:
                raise InputError(f"{what} path: {exc.problem}", exc.fix) from None
        if tail in ("", ".", ".."):
            raise InputError(f"{what} path {relative!r} names no file.", "Regenerate the pairs file.")
        return os.path.join(folder, tail)

    def read(self, catalog: str, relative: str, *, what: str) -> bytes:
        path = self.path(catalog, relative, what=what)
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        except FileNotFoundError:
            raise InputError(
                f"{what} file {path} not found.",
                "Restore the image into its catalog folder (or rebuild the catalog and the pairs) and rerun.",
            ) from None
        except OSError:  # ELOOP: the file is a symlink; allowed only when it stays inside the catalog
            try:
                path = str(safe_join(catalog, relative))
            except InputError as exc:
                exc = outside_link_error(catalog, relative) or exc
                raise InputError(f"{what} path: {exc.problem}", exc.fix) from None
            fd = os.open(path, os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            data = os.read(fd, size) if size else b""
            if len(data) == size and size:
                return data  # the usual case: one read, no extra syscall to see end of file
            chunks = [data]
            while chunk := os.read(fd, 1 << 20):
                chunks.append(chunk)
            return b"".join(chunks)
        finally:
            os.close(fd)
