"""How pairs and chain files name the catalogs they draw from: the one rule every writer and reader follows.

A file stores a catalog as a path *relative to the folder of the file that names it* (``../catalogs/real``,
POSIX separators), so a work folder holding catalogs, pairs and chains can be copied or moved as a whole.
Files written before this rule store absolute paths; those still read.

A reader may relocate the catalogs with a catalog root (``--catalog-root DIR``): every catalog is then looked
up as ``DIR/<name>``, where ``<name>`` is the catalog's own folder name (the last part of the stored path).
That covers a folder built on one machine and released on another, whatever the stored form.

Rows held in memory always carry absolute catalog paths: writers turn them into references as they write
(:func:`catalog_reference`, :func:`pairs_rows_for_file`, :func:`origin_for_file`), readers turn references back
as they read (:class:`CatalogResolver`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path, PurePosixPath

from commonlink.constants import CATALOG_FILENAME
from commonlink.errors import InputError

#: The option of every command that reads pairs or chain files.
CATALOG_ROOT_OPTION = "--catalog-root"
_PAIRS_IMAGE_KEYS = ("image_1", "image_2")


def _folder_of(file_path: str | os.PathLike) -> str:
    return os.path.dirname(os.path.abspath(file_path))


def catalog_reference(catalog_dir: str | os.PathLike, file_path: str | os.PathLike) -> str:
    """How the file ``file_path`` stores the catalog ``catalog_dir``: relative to the file's folder, POSIX."""
    try:
        relative = os.path.relpath(os.path.abspath(catalog_dir), _folder_of(file_path))
    except ValueError:  # Windows: another drive has no relative path; the absolute one still reads
        return os.path.abspath(catalog_dir)
    return PurePosixPath(*Path(relative).parts).as_posix()


def catalog_location(
    reference: str, file_path: str | os.PathLike, catalog_root: str | os.PathLike | None = None
) -> Path:
    """Where a stored reference points (nothing checked): ``catalog_root/<name>`` when a root is given, else the
    reference itself when absolute (older files), else the reference taken from the file's folder."""
    in_place = Path(os.path.normpath(os.path.join(_folder_of(file_path), reference)))
    if catalog_root is not None:
        return Path(os.path.abspath(catalog_root)) / in_place.name
    return in_place


def resolve_catalog_reference(
    reference: str, file_path: str | os.PathLike, catalog_root: str | os.PathLike | None = None, *, catalog: bool = True
) -> Path:
    """The catalog folder a stored reference names, checked to be a catalog (``catalog=False``: only a folder, as
    a chain source's manifest folder is); the error names the path looked for and the option that relocates
    catalogs."""
    location = catalog_location(reference, file_path, catalog_root)
    if not ((location / CATALOG_FILENAME).is_file() if catalog else location.is_dir()):
        if catalog_root is not None:
            how = f"with {CATALOG_ROOT_OPTION} {catalog_root}"
            fix = (
                f"Pass as {CATALOG_ROOT_OPTION} the folder that holds the catalog folder {location.name!r} "
                f"(catalogs are looked up as ROOT/<catalog folder name>)."
            )
        else:
            how = "relative to the file's folder" if not os.path.isabs(reference) else "as stored"
            fix = (
                f"Copy the catalogs along with the file (keeping their relative place), or pass "
                f"{CATALOG_ROOT_OPTION} DIR, the folder that now holds the catalog folder {location.name!r}."
            )
        missing = f"no image catalog there (no {CATALOG_FILENAME})." if catalog else "no such folder."
        raise InputError(
            f"{file_path} names the catalog {reference!r}, looked for at {location} ({how}): {missing}", fix
        )
    return location


class CatalogResolver:
    """Resolves the catalog references of one file (each distinct reference resolved and checked once)."""

    def __init__(self, file_path: str | os.PathLike, catalog_root: str | os.PathLike | None = None) -> None:
        self.file_path, self.catalog_root = file_path, catalog_root
        self._found: dict[tuple[str, bool], str] = {}

    def __call__(self, reference: str, *, catalog: bool = True) -> str:
        found = self._found.get((reference, catalog))
        if found is None:
            found = self._found[(reference, catalog)] = str(
                resolve_catalog_reference(reference, self.file_path, self.catalog_root, catalog=catalog)
            )
        return found

    def pairs_row(self, row: dict) -> dict:
        """A pairs row with the ``catalog`` of ``image_1``/``image_2`` made absolute (the row is changed in place)."""
        for key in _PAIRS_IMAGE_KEYS:
            image = row.get(key)
            if isinstance(image, dict) and isinstance(image.get("catalog"), str) and image["catalog"]:
                image["catalog"] = self(image["catalog"])
        return row

    def origin(self, origin: dict) -> dict:
        """An image-table ``origin`` as held in memory: a catalog file's ``path`` made absolute again. The folder
        is checked to exist only: chains also draw from manifest folders, which are not catalogs."""
        if origin.get("type") == "file" and isinstance(origin.get("catalog"), str):
            folder = self(origin["catalog"], catalog=False)
            return {**origin, "catalog": folder, "path": os.path.join(folder, *PurePosixPath(origin["path"]).parts)}
        return origin


def pairs_rows_for_file(rows: Iterable[dict], file_path: str | os.PathLike) -> Iterator[dict]:
    """Pairs rows as the pairs file ``file_path`` stores them: each image's ``catalog`` relative to the file."""
    references: dict[str, str] = {}
    for row in rows:
        out = dict(row)
        for key in _PAIRS_IMAGE_KEYS:
            image = row.get(key)
            if isinstance(image, dict) and image.get("catalog"):
                catalog = str(image["catalog"])
                reference = references.get(catalog)
                if reference is None:
                    reference = references[catalog] = catalog_reference(catalog, file_path)
                out[key] = {**image, "catalog": reference}
        yield out


def pairs_meta_for_file(meta: dict, file_path: str | os.PathLike) -> dict:
    """A pairs sidecar as stored: its ``catalogs`` list and ``catalog_sha256`` keys relative to the pairs file."""
    out = dict(meta)
    if isinstance(meta.get("catalogs"), list):
        out["catalogs"] = [catalog_reference(c, file_path) for c in meta["catalogs"]]
    if isinstance(meta.get("catalog_sha256"), dict):
        out["catalog_sha256"] = {catalog_reference(c, file_path): sha for c, sha in meta["catalog_sha256"].items()}
    return out


def pairs_meta_from_file(meta: dict, file_path: str | os.PathLike) -> dict:
    """A pairs sidecar as read back, its catalogs absolute again (where they would be; nothing checked)."""
    out = dict(meta)
    if isinstance(meta.get("catalogs"), list):
        out["catalogs"] = [str(catalog_location(c, file_path)) for c in meta["catalogs"]]
    if isinstance(meta.get("catalog_sha256"), dict):
        out["catalog_sha256"] = {str(catalog_location(c, file_path)): sha for c, sha in meta["catalog_sha256"].items()}
    return out


def origin_for_file(origin: dict, file_path: str | os.PathLike) -> dict:
    """An image-table ``origin`` as ``file_path`` stores it: an image of a catalog or manifest folder (``catalog``
    set) becomes the folder's reference plus the image's path inside it; other origins are kept as they are."""
    if origin.get("type") != "file" or not origin.get("catalog"):
        return origin
    catalog = os.path.abspath(origin["catalog"])
    inside = os.path.relpath(os.path.abspath(origin["path"]), catalog)
    if inside.split(os.sep, 1)[0] == os.pardir:  # not inside its catalog after all: keep the absolute file path
        return {key: value for key, value in origin.items() if key not in ("catalog", "relative")}
    return {
        **origin,
        "catalog": catalog_reference(catalog, file_path),
        "path": PurePosixPath(*Path(inside).parts).as_posix(),
    }
