"""The card-info file (publisher's datasheet answers) and the card-only rebuild, without the Hub."""

from __future__ import annotations

import json

import pytest

from commonlink.errors import InputError
from commonlink.release.build import build_release
from commonlink.release.card_info import (
    PUBLISHER_QUESTIONS,
    PUBLISHER_TO_FILL,
    card_info_template,
    read_card_info,
    unanswered_questions,
)
from commonlink.release.card_rebuild import rebuild_card
from commonlink.release.staging import verify_release
from tests.fixtures.catalogs import write_rotating_catalog, write_tiny_pairs

ANSWERS = {q.key: f"Answer to {q.key}: see https://example.org/{q.key}." for q in PUBLISHER_QUESTIONS}


@pytest.fixture
def pairs(tmp_path):
    records = write_rotating_catalog(tmp_path / "cat", 10, fmt="PNG")
    path = tmp_path / "main.jsonl"
    write_tiny_pairs(path, tmp_path / "cat", records, 6)
    return path


def test_template_reads_back_empty_and_bad_files_are_refused(tmp_path):
    template = tmp_path / "t.yaml"
    template.write_text(card_info_template())
    assert read_card_info(template) == {}  # every key empty: nothing answered yet
    (tmp_path / "bad.yaml").write_text("funding: us\n")
    with pytest.raises(InputError, match="unknown key.*funding") as refused:
        read_card_info(tmp_path / "bad.yaml")
    assert "creators_and_funding" in refused.value.fix
    (tmp_path / "list.yaml").write_text("consent: [a, b]\n")
    with pytest.raises(InputError, match="'consent' is a list, not text"):
        read_card_info(tmp_path / "list.yaml")
    with pytest.raises(InputError, match="no such file"):
        read_card_info(tmp_path / "missing.yaml")


def test_build_with_card_info_equals_build_then_card_rebuild(pairs, tmp_path):
    full = tmp_path / "full"
    build_release([pairs], full, card_info=ANSWERS, progress=False)
    card = (full / "README.md").read_text()
    assert PUBLISHER_TO_FILL not in card and unanswered_questions(card) == []

    later = tmp_path / "later"
    build_release([pairs], later, progress=False)
    assert unanswered_questions((later / "README.md").read_text()) == [q.key for q in PUBLISHER_QUESTIONS]
    assert rebuild_card(later, ANSWERS) == []
    assert verify_release(later) == []
    assert (later / "README.md").read_text().replace("# later", "# full").replace(
        "pretty_name: later", "pretty_name: full"
    ) == card
    # the rebuilt release is what the full build with the same answers would be: that build keeps it
    kept = build_release([pairs], later, card_info=ANSWERS, progress=False)
    assert kept.reused
    # taking answers back marks the questions again
    assert rebuild_card(later, {"consent": "Nobody is shown."}) == [
        q.key for q in PUBLISHER_QUESTIONS if q.key != "consent"
    ]
    assert json.loads((later / "manifest.json").read_text())["config"]["card_info"] == {"consent": "Nobody is shown."}


def test_card_rebuild_refuses_a_folder_whose_data_differs_from_its_manifest(pairs, tmp_path):
    out = tmp_path / "rel"
    build_release([pairs], out, progress=False)
    shard = next((out / "data").glob("*.parquet"))
    shard.write_bytes(shard.read_bytes() + b"x")
    with pytest.raises(InputError, match="does not match its manifest"):
        rebuild_card(out, ANSWERS)


def test_association_card_carries_the_answers_after_a_card_rebuild(tmp_path):
    from tests.test_association_release import _fresh_chains

    _, chains = _fresh_chains(tmp_path)
    out = tmp_path / "rel"
    build_release(sorted(chains.glob("*.jsonl")), out, progress=False)
    assert len(unanswered_questions((out / "README.md").read_text())) == len(PUBLISHER_QUESTIONS)
    assert rebuild_card(out, ANSWERS) == [] and verify_release(out) == []
    assert "Answer to maintainers" in (out / "README.md").read_text()


def _in_old_shape(manifest: dict, key: str) -> dict:
    """The manifest as releases built before the one shape wrote it: parts under ``splits`` or ``configs``."""
    old = {k: v for k, v in manifest.items() if k not in ("parts", "part_type", "figures")}
    old[key] = manifest["parts"]
    if manifest.get("figures"):
        old["figures"] = manifest["figures"]
    return old


def test_both_kinds_write_one_manifest_shape_and_old_shapes_still_read(pairs, tmp_path):
    """Every kind's manifest lists its parts under ``parts``; published releases list them under ``splits``
    (Common-O) or ``configs`` (association), and their cards are rendered again from those just the same."""
    from commonlink.formats.release import manifest_units
    from commonlink.release.card_rebuild import render_card_from_manifest
    from commonlink.release.hub_plan import plan_push
    from tests.test_association_release import _fresh_chains

    common_o = tmp_path / "common-o"
    build_release([pairs], common_o, progress=False)
    _, chains = _fresh_chains(tmp_path)
    association = tmp_path / "association"
    build_release(sorted(chains.glob("*.jsonl")), association, progress=False)
    for folder, kind, part_type, old_key in (
        (common_o, "common_o", "split", "splits"),
        (association, "association", "config", "configs"),
    ):
        manifest = json.loads((folder / "manifest.json").read_text())
        assert manifest["kind"] == kind and manifest["part_type"] == part_type
        assert "splits" not in manifest and "configs" not in manifest
        keys = list(manifest)
        assert keys == [
            "toolkit_version", "name", "version", "kind", "seed", "build_key", "created", "config",
            "part_type", "parts", "stats", "figures", "files",
        ]  # fmt: skip
        old = _in_old_shape(manifest, old_key)
        assert manifest_units(old) == manifest_units(manifest) == manifest["parts"]
        card = (folder / "README.md").read_text()
        assert render_card_from_manifest(old, {}) == render_card_from_manifest(manifest, {}) == card
        (folder / "manifest.json").write_text(json.dumps(old))  # a release folder built by an older commonlink
        plan = plan_push(folder, "me/set", "1.0.0")
        assert {name: info["rows"] for name, info in plan.units.items()} == {
            name: info["rows"] for name, info in manifest["parts"].items()
        }
