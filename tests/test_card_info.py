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
    (tmp_path / "bad.yaml").write_text("funders: us\n")
    with pytest.raises(InputError, match="unknown key.*funders") as refused:
        read_card_info(tmp_path / "bad.yaml")
    assert "funding" in refused.value.fix and "creators" in refused.value.fix
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
    assert rebuild_card(later, {"erratum": "None yet."}) == [q.key for q in PUBLISHER_QUESTIONS if q.key != "erratum"]
    assert json.loads((later / "manifest.json").read_text())["config"]["card_info"] == {"erratum": "None yet."}


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


def test_card_info_files_of_the_six_old_questions_still_answer_what_those_covered(tmp_path):
    """A file written for the six merged questions of earlier versions keeps working: each old answer answers the
    datasheet questions its one question covered."""
    old = tmp_path / "old.yaml"
    old.write_text(
        "creators_and_funding: The Lab; grant 42.\n"
        "sensitive_data: No people.\n"
        "collection_process: Two of us, March 2026, no review needed.\n"
        "consent: Nobody is shown.\n"
        "restrictions: None.\n"
        "maintainers: The Lab, lab@example.org.\n"
    )
    answers = read_card_info(old)
    assert answers["creators"] == answers["funding"] == "The Lab; grant 42."
    assert answers["confidential_data"] == answers["sensitive_data"] == "No people."
    assert answers["collectors"] == answers["timeframe"] == answers["ethical_review"]
    assert answers["notification"] == answers["consent"] == "Nobody is shown."
    assert answers["third_party_restrictions"] == answers["export_controls"] == "None."
    assert answers["contact"] == answers["maintainers"]


def test_the_card_asks_every_question_of_the_papers_datasheet_word_for_word(pairs, tmp_path):
    """Every question of the Common-O paper's datasheet (§10), as the paper prints it, is a bold question on the
    card of a built release; and every question line of the paper's datasheet is one of ours (none left out)."""
    import re
    from pathlib import Path

    from commonlink.release.card_info import DATASHEET_QUESTIONS

    paper = Path(__file__).resolve().parents[2] / "shared" / "papers" / "common-o-whats-in-common.txt"
    if not paper.is_file():
        pytest.skip(f"{paper} not here (the papers ship in ../shared)")
    text = paper.read_text(encoding="utf-8")
    sheet = text[text.index("We include a datasheet for Common-O Bench") :]
    out = tmp_path / "rel"
    build_release([pairs], out, progress=False)
    card = (out / "README.md").read_text(encoding="utf-8")
    ours = [q.question for q in DATASHEET_QUESTIONS]
    # the paper's question lines: each starts with one of our questions (answer after it, or on the next line)
    sections = {
        "Motivation",
        "Composition",
        "Collection Process",
        "Preprocessing/Cleaning/Labeling",
        "Uses",
        "Distribution",
        "Maintenance",
    }
    lines = [ln.strip() for ln in sheet.splitlines()[1:] if ln.strip() and ln.strip() not in sections]
    questions = [
        ln
        for ln in lines
        if re.match(
            r"^(What|Who|How|Is|Are|Does|Do|Any|If|Over|Were|Did|Has|Was|When|"
            r"Will|Have)\b",
            ln,
        )
    ]
    assert len(questions) >= 45
    for line in questions:
        assert any(line.startswith(q) for q in ours), f"the paper asks a question the card does not: {line[:120]}"
    asked = 0
    for question in ours:
        assert f"**{question}**" in card, question
        asked += question in sheet
    assert asked >= 45  # all but the two Gebru preprocessing questions the paper skips and the human validation


def test_a_description_and_a_citation_go_on_the_card_as_written(pairs, tmp_path):
    out = tmp_path / "rel"
    answers = {
        "description": "Kitchen photos from *our* lab.\n\nSecond paragraph.",
        "citation": "@misc{lab2026,\n  title={Our set}\n}",
    }
    build_release([pairs], out, card_info=answers, progress=False)
    card = (out / "README.md").read_text()
    assert "Kitchen photos from \\*our\\* lab." in card and "Second paragraph." in card  # text, never markup
    assert "```\n@misc{lab2026,\n  title={Our set}\n}\n```" in card
    assert card.index("Kitchen photos") < card.index("## Usage") and card.index("@misc{lab2026") > card.index(
        "## Citation"
    )
    with pytest.raises(InputError, match="code fence"):
        build_release([pairs], tmp_path / "bad", card_info={"citation": "```\nx"}, progress=False)


def test_release_card_version_gives_a_card_fix_a_new_version_without_a_rebuild(pairs, tmp_path):
    out = tmp_path / "rel"
    build_release([pairs], out, version="1.0.0", progress=False)
    shards = {p.name: p.read_bytes() for p in (out / "data").glob("*.parquet")}
    assert rebuild_card(out, {"erratum": "None yet."}, version="1.0.1")
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["version"] == "1.0.1" and manifest["config"]["version"] == "1.0.1"
    assert "Version **1\\.0.1**" in (out / "README.md").read_text()
    assert verify_release(out) == [] and {p.name: p.read_bytes() for p in (out / "data").glob("*.parquet")} == shards
    # the build with that version and card info finds the folder as it is
    assert build_release([pairs], out, version="1.0.1", card_info={"erratum": "None yet."}, progress=False).reused
    with pytest.raises(InputError, match="1.0"):
        rebuild_card(out, {}, version="1.0")
