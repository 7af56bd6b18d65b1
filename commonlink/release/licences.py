"""What the images of a release are licensed under, checked against its ``--license`` and listed on its card.

Every release builder collects, in a :class:`LicenceLedger`, the catalog record of each distinct image it embeds
(``license``, ``author``, ``source_url``, from the ingest manifest) and the synthetic catalogs it renders from (their
assets' licences, recorded in ``synth_config.json``). Before anything is written the ledger is checked against the
release licence with the rules of :mod:`commonlink.formats.licences`: an incompatible image or asset refuses the
build, naming the first files and the count (``--licence-check warn`` builds anyway and prints the same list). The
per-image values become release columns only when some image has one, so releases of catalogs without them keep
their bytes. Real photos whose licence nobody recorded are not silently put under the release licence: the build
warns and the card says so.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from commonlink.errors import InputError
from commonlink.formats.card import markdown_table, markdown_text
from commonlink.formats.catalog import ATTRIBUTION_FIELDS, CatalogRecord
from commonlink.formats.licences import LICENCES, OTHER, incompatibility, licence_ids_in_text

#: ``--licence-check``: refuse an incompatible build (default), or build it and warn.
LICENCE_CHECKS = ("refuse", "warn")
DEFAULT_LICENCE_CHECK = "refuse"
#: How many offending files an error names before it gives the count of the rest.
_NAMED = 5
SYNTH_CONFIG_FILE = "synth_config.json"  # synth.job's name for it (not imported: synth.job pulls in the renderer)
#: The card's licence row of photos that record none.
NOT_RECORDED = "not recorded"


def check_licence_mode(mode: str) -> str:
    if mode not in LICENCE_CHECKS:
        raise InputError(f"--licence-check {mode!r} is not one of {', '.join(LICENCE_CHECKS)}.", "Pass refuse or warn.")
    return mode


@dataclass(frozen=True)
class ImageCredit:
    """The attribution facts of one embedded image."""

    name: str  #: how messages name it: the photo's file as the manifest wrote it, else its catalog path
    source: str  #: "real" | "synthetic"
    license: str | None = None
    author: str | None = None
    source_url: str | None = None

    @classmethod
    def of(cls, record: CatalogRecord) -> ImageCredit:
        name = record.extra.get("source_file") or record.path
        return cls(str(name), record.source, record.license, record.author, record.source_url)

    def fields(self) -> dict[str, str | None]:
        return {"license": self.license, "author": self.author, "source_url": self.source_url}


@dataclass
class LicenceLedger:
    """The credits of the distinct images a build embeds, and the objects it shows from each synthetic catalog."""

    credits: dict[tuple[str, str], ImageCredit] = field(default_factory=dict)  #: (catalog, image id) -> credit
    synthetic_objects: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))

    def add(self, catalog: str | os.PathLike, record: CatalogRecord) -> ImageCredit:
        key = (str(catalog), record.id)
        if key not in self.credits:
            self.credits[key] = ImageCredit.of(record)
            if record.source == "synthetic":
                self.synthetic_objects[str(catalog)].update(record.objects)
        return self.credits[key]

    @property
    def has_columns(self) -> bool:
        """Whether some image records a licence, author or source (then the release gets the columns)."""
        return any(c.license or c.author or c.source_url for c in self.credits.values())

    def credit(self, catalog: str | os.PathLike, image_id: str) -> ImageCredit:
        return self.credits[(str(catalog), image_id)]

    def digest(self) -> str | None:
        """A hash of every recorded credit (for the build key: a licence fixed in a catalog makes a new build);
        None when no image records any, so such builds keep their key."""
        if not self.has_columns:
            return None
        rows = sorted([*key, *c.fields().values()] for key, c in self.credits.items())
        return hashlib.sha256(json.dumps(rows, default=str).encode()).hexdigest()[:16]

    # -- the check ----------------------------------------------------------------------------------------
    def check(self, release_licence: str, mode: str = DEFAULT_LICENCE_CHECK) -> list[str]:
        """Refuse (an :class:`InputError`) images and assets the release licence cannot carry, or with
        ``mode="warn"`` return that list as warnings; also warns about real photos without a recorded licence."""
        problems = self._image_problems(release_licence) + self._asset_problems(release_licence)
        notes = []
        if problems:
            message = _problem_text(problems, release_licence)
            if check_licence_mode(mode) == "refuse":
                raise InputError(
                    message,
                    "Build with a --license that allows them, leave those images out of the pairs, fix the licence "
                    "in the manifest (then ingest again), or pass --licence-check warn to build anyway (you then "
                    "answer for those terms yourself).",
                )
            notes.append(f"--licence-check warn: {message}")
        unrecorded = [c.name for c in self.credits.values() if c.source == "real" and not c.license]
        if unrecorded:
            notes.append(
                f"{len(unrecorded):,} real photo(s) record no licence ({_listing(unrecorded)}); the card says so "
                f"rather than put them under --license {release_licence}. Add a license column to the ingest "
                "manifest (docs/catalog.md) and ingest again, if they are not your own photos."
            )
        return notes  # the builder returns them in ReleaseResult.notes; the CLI prints them

    def _image_problems(self, release_licence: str) -> list[tuple[str, str, str]]:
        found = []
        for credit in self.credits.values():
            if credit.license:
                reason = incompatibility(credit.license, release_licence)
                if reason:
                    found.append((credit.license, reason, credit.name))
        return found

    def _asset_problems(self, release_licence: str) -> list[tuple[str, str, str]]:
        found = []
        for catalog, objects in sorted(self.synthetic_objects.items()):
            for what, text in asset_licence_texts(catalog, objects):
                for licence in licence_ids_in_text(text):
                    reason = incompatibility(licence, release_licence)
                    if reason:
                        label = f"{licence} (asset licence {text!r})" if licence == OTHER else licence
                        found.append((label, reason, f"{what} of {Path(catalog).name}"))
        return found

    # -- the card -----------------------------------------------------------------------------------------
    def summary(self) -> dict[str, Any] | None:
        """Per-licence counts of the distinct photos (and of other images that record a licence), the credited
        authors, for the manifest's stats and the card; None when no image records a credit and none is a photo
        (e.g. a release of renders only: its card is unchanged)."""
        if not self.has_columns and not any(c.source == "real" for c in self.credits.values()):
            return None
        licences = Counter(c.license or NOT_RECORDED for c in self.credits.values() if c.source == "real" or c.license)
        authors = Counter(c.author for c in self.credits.values() if c.author)
        return {
            "images_by_license": dict(sorted(licences.items(), key=lambda kv: (-kv[1], kv[0]))),
            "authors": [[a, n] for a, n in sorted(authors.items(), key=lambda kv: (-kv[1], kv[0]))],
            "with_source_url": sum(1 for c in self.credits.values() if c.source_url),
            "columns": self.has_columns,
        }


def asset_licence_texts(catalog: str | os.PathLike, objects: Iterable[str]) -> list[tuple[str, str | None]]:
    """``[(what, licence text)]`` of the assets a synthetic catalog's images show, from its ``synth_config.json``:
    per object where it records them, else every licence it counts (catalogs made before per-object licences were
    recorded); none for a catalog without that file (not made by ``commonlink synth``)."""
    try:
        recorded = json.loads((Path(catalog) / SYNTH_CONFIG_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    by_object = recorded.get("asset_license_by_object")
    if isinstance(by_object, dict):
        return [(f"asset {name!r}", by_object.get(name)) for name in sorted(objects)]
    counts = recorded.get("asset_licenses")
    if isinstance(counts, dict):
        return [("an asset", str(text)) for text in counts]
    return []


def _problem_text(problems: list[tuple[str, str, str]], release_licence: str) -> str:
    by_licence: dict[tuple[str, str], list[str]] = defaultdict(list)
    for licence, reason, name in problems:
        by_licence[(licence, reason)].append(name)
    parts = [f"{licence}: {reason}: {_listing(names)}" for (licence, reason), names in sorted(by_licence.items())]
    return (
        f"{len(problems):,} image(s) or asset(s) are under licences a release under --license {release_licence} "
        f"cannot carry. " + "; ".join(parts) + "."
    )


def _listing(names: list[str]) -> str:
    shown = ", ".join(names[:_NAMED])
    return shown + (f" and {len(names) - _NAMED:,} more" if len(names) > _NAMED else "")


# ---------------------------------------------------------------------------------------------- release columns
def _column(prefix: str, name: str) -> str:
    return f"{prefix}_{name}" if prefix else name


def credit_columns(prefixes: Iterable[str]) -> list[str]:
    """The release columns of the credits of each image column (``image_1`` -> ``image_1_license``, ...; the
    prefix ``""`` gives the bare names, for a table of one image a row)."""
    return [_column(prefix, name) for prefix in prefixes for name in ATTRIBUTION_FIELDS]


def with_credit_columns(features: Any, prefixes: Iterable[str]) -> Any:
    """``features`` (``datasets.Features``) with a string column per credit field of each image column."""
    from datasets import Features, Value

    return Features({**features, **{name: Value("string") for name in credit_columns(prefixes)}})


def credit_row_fields(credit: ImageCredit, prefix: str) -> dict[str, str | None]:
    return {_column(prefix, name): value for name, value in credit.fields().items()}


COLUMN_TEXT = {
    "license": "licence id of {image} (SPDX-style, from the ingest manifest; null where not recorded)",
    "author": "who to credit for {image} (null where not recorded)",
    "source_url": "where the original of {image} is published (null where not recorded)",
}


def credit_column_descriptions(prefixes: Iterable[str], *, image: str = "image {n}") -> dict[str, str]:
    out = {}
    for n, prefix in enumerate(prefixes, start=1):
        for name in ATTRIBUTION_FIELDS:
            out[_column(prefix, name)] = COLUMN_TEXT[name].format(image=image.format(n=n))
    return out


def credits_section(summary: dict[str, Any] | None, release_licence: str, columns: list[str]) -> list[str]:
    """The card's "Image licences and attribution" section (none when the build knows nothing to say)."""
    if not summary:
        return []
    lines = ["## Image licences and attribution", ""]
    licences = summary["images_by_license"]
    rows = [[lic, LICENCES[lic].name if lic in LICENCES else "", n] for lic, n in licences.items()]
    lines += [
        f"The release as a whole is under {markdown_text(release_licence)}; each photo stays under its own licence:",
        "",
        markdown_table(["licence", "name", "distinct images"], rows),
        "",
    ]
    if licences.get(NOT_RECORDED):
        lines += [
            f"{licences[NOT_RECORDED]:,} photo(s) record no licence: the build did not know under which terms they "
            "were given, so it does not claim they are under the release licence.",
            "",
        ]
    if summary["authors"]:
        top = ", ".join(f"{markdown_text(a)} ({n:,})" for a, n in summary["authors"][:20])
        more = len(summary["authors"]) - 20
        lines += [f"Credits (images): {top}" + (f" and {more:,} more." if more > 0 else "."), ""]
    if columns:
        listed = ", ".join(f"`{c}`" for c in columns)
        lines += [f"Every row names its images' licence, author and source in the columns {listed}.", ""]
    return lines


def credits_answer(summary: dict[str, Any] | None) -> str:
    """The build's answer to the datasheet question on image licences and attribution ("" when it knows none)."""
    if not summary:
        return ""
    licences = "; ".join(
        f"{n:,} with no recorded licence" if lic == NOT_RECORDED else f"{n:,} under {markdown_text(lic)}"
        for lic, n in summary["images_by_license"].items()
    )
    authors = len(summary["authors"])
    return f"Photos by licence: {licences}. {authors:,} distinct author(s) credited" + (
        "; see the section Image licences and attribution and the per-row licence, author and source columns."
        if summary["columns"]
        else "."
    )


__all__ = [
    "DEFAULT_LICENCE_CHECK",
    "LICENCE_CHECKS",
    "ImageCredit",
    "LicenceLedger",
    "asset_licence_texts",
    "check_licence_mode",
    "credit_column_descriptions",
    "credit_columns",
    "credit_row_fields",
    "credits_answer",
    "credits_section",
    "with_credit_columns",
]
