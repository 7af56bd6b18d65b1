"""``release card``: rewrite a built release's card (e.g. with the publisher's answers) and keep its manifest true.

Editing ``README.md`` by hand makes ``release push`` refuse the folder (its sha256 no longer matches the
manifest). This renders the card again from what the manifest recorded (statistics, splits or configs, figures,
seed, options) with new card info, writes it, and updates the manifest's file table, recorded configuration and
build key, all under the release folder's writer lock (no build or push can run meanwhile). The build key
becomes the one ``release build ... --card-info FILE`` with the same inputs computes, so such a build later
finds this folder and keeps it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from commonlink import registry
from commonlink.errors import InputError
from commonlink.fileio import atomic_write_bytes, atomic_write_json, sha256_bytes
from commonlink.formats.release import (
    CARD_FILENAME,
    MANIFEST_FILENAME,
    check_version,
    manifest_units,
    read_release_manifest,
)
from commonlink.locks import output_lock
from commonlink.release.card_info import check_card_info, unanswered_questions
from commonlink.release.staging import build_key_of, is_release_manifest, verify_release

_REBUILD = "Rebuild the release with `commonlink release build ... --card-info FILE --overwrite`."


def render_card_from_manifest(manifest: dict, card_info: Mapping[str, str]) -> str:
    """The card of the release ``manifest`` describes, with ``card_info`` as the publisher's answers."""
    config = manifest.get("config") or {}
    common = {
        "name": manifest.get("name"),
        "version": manifest.get("version"),
        "license": config.get("license"),
        "seed": manifest.get("seed"),
        "toolkit_version": manifest.get("toolkit_version"),
        "stats": manifest.get("stats") or {},
        "card_info": card_info,
    }
    kind = registry.get_kind(str(manifest.get("kind") or "common_o"))
    units = manifest_units(manifest)
    if not units or any("num_bytes" not in info or "download_size" not in info for info in units.values()):
        raise InputError(
            "The release's manifest does not record split sizes (it was built by an older commonlink), so "
            "its card cannot be rendered again on its own.",
            _REBUILD,
        )
    return kind.render_card(units, manifest, common)


def rebuild_card(
    release_dir: str | os.PathLike, card_info: Mapping[str, str], *, version: str | None = None
) -> list[str]:
    """Rewrite the card of the release in ``release_dir`` with ``card_info`` (and, with ``version``, give the
    release that version: a card fix is then pushed as a new version without a rebuild); returns the publisher
    questions still unanswered (by key). Refuses a folder that does not match its manifest (nothing is written)."""
    root = Path(release_dir).expanduser().resolve()
    card_info = check_card_info(card_info)
    if version is not None:
        check_version(version)
    with output_lock(root, what="commonlink release card"):
        manifest = read_release_manifest(root)
        if not is_release_manifest(manifest):
            raise InputError(
                f"{root}: its {MANIFEST_FILENAME} was not written by `commonlink release build`.", _REBUILD
            )
        # the card itself may differ (edited by hand, or an earlier run stopped between its two writes): it is replaced
        problems = [p for p in verify_release(root) if not p.startswith(f"{CARD_FILENAME}:")]
        if problems:
            raise InputError(f"{root} does not match its manifest ({'; '.join(problems[:5])}).", _REBUILD)
        config = dict(manifest.get("config") or {})
        config.pop("card_info", None)
        if card_info:
            config["card_info"] = dict(card_info)
        if version is not None:  # as `release build --version` records it, so that build finds this folder
            manifest["version"] = version
            if "version" in config:
                config["version"] = version
        card = render_card_from_manifest({**manifest, "config": config}, card_info)
        data = card.encode("utf-8")
        manifest["config"] = config
        manifest["build_key"] = build_key_of(config, str(manifest.get("toolkit_version")))
        manifest["files"] = {**manifest["files"], CARD_FILENAME: {"sha256": sha256_bytes(data), "size": len(data)}}
        # card first, then the manifest that lists it: a crash in between leaves a folder push refuses and this
        # command, run again, repairs; never a manifest vouching for a card that is not there
        atomic_write_bytes(root / CARD_FILENAME, data)
        atomic_write_json(root / MANIFEST_FILENAME, manifest)
    return unanswered_questions(card)


__all__ = ["rebuild_card", "render_card_from_manifest"]
