"""Licence ids of images and assets, and which of them a release licence may carry (docs/release.md, Licences).

A photo's licence is written in the ingest manifest (``license`` column, an SPDX-style id in lower case, e.g.
``cc-by-4.0``); a 3D asset's in the asset file (free text, read by :func:`licence_ids_in_text`). ``release build``
checks every image it embeds against the release's ``--license`` with :func:`incompatibility`, which applies
:data:`RULES`, one row per condition an image licence can impose, strictest first:

=====================  ============================================  ==============================================
image licence          release licences that satisfy it              why
=====================  ============================================  ==============================================
unknown (``other``)    none                                          terms nobody recorded cannot be checked
no derivatives (ND)    none                                          a benchmark row pairs and relabels the image,
                                                                     and ingest re-encodes it: an adaptation, which
                                                                     ND forbids
share-alike (SA)       the same licence, same or later version       SA asks that the collection be shared under
                                                                     that licence (BY-SA 4.0 §3(b); 3.0 allows later
                                                                     versions)
non-commercial (NC)    a non-commercial one (cc-by-nc-*)             a release under a licence allowing commercial
                                                                     use would grant what the photographer did not
attribution (BY, MIT,  any but a public-domain dedication (cc0,     the credit the licence asks for must travel with
Apache, BSD, zlib,     pddl)                                         the image; a CC0 release promises none is owed
SCEA)
public domain (cc0)    any                                           no conditions
=====================  ============================================  ==============================================

A release licence this table does not know (e.g. ``openrail``) is satisfied only by public-domain images: nothing
else can be checked against it.

The SCEA Shared Source License 1.0 (SPDX ``SCEA``; the COLLADA duck mesh in ``pybullet_data``) grants an
irrevocable, royalty-free licence to "use, modify, reproduce, distribute, publicly perform or display" the work "in
object or source form", for any purpose (it has no non-commercial clause), where object form is "any form that
results from translation or transformation" of the source: a render of the mesh is such a form. Its one condition
that reaches a render is that the licensee must not "seek copyright protection or take any other action that might
otherwise impair the ownership rights" in the mesh, so a release may license its renders (the scene, camera and
labels it added) but must keep saying that the mesh stays SCEA's: the card lists the assets' licences. It is
therefore an attribution-class licence here (any release licence but a public-domain dedication, which would claim
to waive rights in the mesh that the publisher does not hold).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from commonlink.errors import InputError


@dataclass(frozen=True)
class LicenceTerms:
    """What an image licence asks of a release that carries the image."""

    id: str  #: lower-case SPDX-style id (the Hub's licence ids where it has one)
    name: str
    attribution: bool = True  #: credit must be given (False: public-domain dedications)
    noncommercial: bool = False
    sharealike: str | None = None  #: the share-alike family (e.g. "cc-by-sa"); its releases must be in it
    version: float = 0.0  #: for share-alike: a later version of the family also satisfies it
    noderivatives: bool = False
    known: bool = True  #: False for ``other``: terms nobody recorded


def _cc(family: str, version: str) -> LicenceTerms:
    parts = family.split("-")[2:]  # "cc-by-nc-sa" -> ["nc", "sa"]
    return LicenceTerms(
        id=f"{family}-{version}",
        name=f"Creative Commons {'-'.join(p.upper() for p in ['by', *parts])} {version}",
        noncommercial="nc" in parts,
        sharealike=family if "sa" in parts else None,
        version=float(version),
        noderivatives="nd" in parts,
    )


_CC = [
    _cc(family, version)
    for family in ("cc-by", "cc-by-sa", "cc-by-nc", "cc-by-nc-sa", "cc-by-nd", "cc-by-nc-nd")
    for version in ("2.0", "3.0", "4.0")
]

#: Every licence id a manifest or catalog may name.
LICENCES: dict[str, LicenceTerms] = {
    terms.id: terms
    for terms in (
        LicenceTerms("cc0-1.0", "Creative Commons Zero 1.0 (public-domain dedication)", attribution=False),
        LicenceTerms("pddl", "Open Data Commons Public Domain Dedication and License", attribution=False),
        *_CC,
        LicenceTerms("mit", "MIT License"),
        LicenceTerms("apache-2.0", "Apache License 2.0"),
        LicenceTerms("bsd-2-clause", "BSD 2-Clause License"),
        LicenceTerms("bsd-3-clause", "BSD 3-Clause License"),
        LicenceTerms("zlib", "zlib License"),
        LicenceTerms("scea", "SCEA Shared Source License 1.0"),
        LicenceTerms("other", "another licence (not checked)", known=False),
    )
}
OTHER = "other"

#: Spellings a manifest or an asset file may use for an id (compared after lower-casing, spaces as "-").
ALIASES = {
    "cc0": "cc0-1.0",
    "public-domain": "cc0-1.0",
    "apache2": "apache-2.0",
    "apache-license-2.0": "apache-2.0",
    "scea-shared-source-license-1.0": "scea",
    "scea-shared-source-1.0": "scea",
    "unknown": OTHER,
}

#: (condition, which release licences satisfy it, why): the table of the module docstring, as the errors say it.
RULES: tuple[tuple[str, str, str], ...] = (
    ("unknown", "allowed in no release", "terms nobody recorded cannot be checked"),
    ("no derivatives", "allowed in no release", "a benchmark pairs, relabels and re-encodes the image: an adaptation"),
    (
        "share-alike",
        "allowed only under the same licence (same or later version)",
        "the collection must be shared under it",
    ),
    ("non-commercial", "allowed only in a non-commercial release (cc-by-nc-*)", "it allows no commercial use"),
    (
        "attribution",
        "allowed in any release but a public-domain dedication (cc0-1.0, pddl)",
        "the credit it asks for must be kept",
    ),
)
_RULE = {condition: (satisfied_by, why) for condition, satisfied_by, why in RULES}


def accepted_ids() -> str:
    """The accepted ids, for an error message."""
    return ", ".join(LICENCES)


def normalise_licence(text: str) -> str | None:
    """``"CC-BY 4.0"`` -> ``"cc-by-4.0"``; None when ``text`` names no known licence."""
    key = re.sub(r"[\s_]+", "-", text.strip().lower())
    key = ALIASES.get(key, key)
    return key if key in LICENCES else None


def check_licence_id(text: str, *, where: str) -> str:
    """The normalised id of ``text``, or an :class:`InputError` naming ``where`` and listing the accepted ids."""
    found = normalise_licence(text)
    if found is None:
        raise InputError(
            f"{where}: unknown licence {text!r}.",
            f"Write one of the accepted ids (case does not matter): {accepted_ids()}; "
            f"or '{OTHER}' for any other licence (a release then refuses it unless --licence-check warn).",
        )
    return found


_TEXT_PATTERNS = (
    (r"\bscea\b", "scea"),
    (r"\bapache(?:[- ]license)?[- ]?2(?:\.0)?\b", "apache-2.0"),
    (r"\bzlib\b", "zlib"),
    (r"\bmit\b", "mit"),
    (r"\bbsd[- ]3\b", "bsd-3-clause"),
    (r"\bbsd[- ]2\b", "bsd-2-clause"),
    (r"\bcc0\b", "cc0-1.0"),
    (r"\bcc[- ]by(?:[- ](?:nc|sa|nd))*[- ]\d\.0\b", None),  # a CC id written inside the text
)


def licence_ids_in_text(text: str | None) -> list[str]:
    """The licence ids a free-text asset licence names (e.g. ``"zlib (...); the duck model itself: SCEA Shared
    Source License 1.0"`` -> ``["scea", "zlib"]``); ``["other"]`` when it names none (or is missing)."""
    if not text:
        return [OTHER]
    direct = normalise_licence(text)
    if direct is not None:
        return [direct]
    lowered = text.lower()
    found = set()
    for pattern, licence in _TEXT_PATTERNS:
        for match in re.finditer(pattern, lowered):
            found.add(licence or normalise_licence(match.group(0)) or OTHER)
    return sorted(found) or [OTHER]


def incompatibility(image_licence: str, release_licence: str) -> str | None:
    """Why a release under ``release_licence`` cannot carry an image under ``image_licence`` (both ids), or None
    when it can (:data:`RULES`)."""
    image = LICENCES.get(image_licence) or LICENCES[OTHER]
    release = LICENCES.get(release_licence)
    if not image.attribution:
        return None
    if not image.known:
        condition = "unknown"
    elif image.noderivatives:
        condition = "no derivatives"
    elif image.sharealike:
        if release and release.sharealike == image.sharealike and release.version >= image.version:
            return None
        condition = "share-alike"
    elif image.noncommercial:
        if release and release.noncommercial:
            return None
        condition = "non-commercial"
    else:
        if release and release.attribution:
            return None
        condition = "attribution"
    satisfied_by, why = _RULE[condition]
    if release is None and condition not in ("unknown", "no derivatives"):
        return f"{condition} ({why}); the release licence {release_licence!r} is not one the check knows"
    return f"{condition}, {satisfied_by} ({why})"


__all__ = [
    "ALIASES",
    "LICENCES",
    "OTHER",
    "RULES",
    "LicenceTerms",
    "accepted_ids",
    "check_licence_id",
    "incompatibility",
    "licence_ids_in_text",
    "normalise_licence",
]
