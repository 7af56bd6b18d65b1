"""Issue 35: a card says only what is true. No fixed sentence about the images that the labels or the
publisher's answers contradict (a release of photos labelled `person` never says there are no people), and the
chains card's construction settings show the values used."""

from __future__ import annotations

import logging

from commonlink.release.build import build_release
from tests.fixtures.catalogs import write_tiny_catalog, write_tiny_pairs

NO_PEOPLE = ("without people", "contain no people")


def _release(tmp_path, objects_of, card_info=None):
    specs = [{"objects": objects_of(i), "seed": i, "scene_id": f"s{i}"} for i in range(12)]
    records = write_tiny_catalog(tmp_path / "cat", specs)
    pairs = tmp_path / "main.jsonl"
    write_tiny_pairs(pairs, tmp_path / "cat", records, 8)
    out = tmp_path / "rel"
    build_release([pairs], out, card_info=card_info or {}, progress=False)
    return (out / "README.md").read_text(encoding="utf-8")


def _people(i):
    return ["person", "mug", "apple"] if i % 2 == 0 else ["mug", "spoon", "apple"]


def test_photos_labelled_person_with_answers_saying_so_get_no_sentence_saying_there_are_none(tmp_path, caplog):
    answers = {
        "sensitive_data": "Yes: people appear in 6 of the photos; faces were blurred.",
        "consent": "Everyone photographed agreed in writing.",
    }
    with caplog.at_level(logging.WARNING):
        card = _release(tmp_path, _people, answers)
    assert not any(s in card for s in NO_PEOPLE)
    assert "people appear in 6 of the photos" in card and "agreed in writing" in card
    warned = [r.getMessage() for r in caplog.records if "labels name" in r.getMessage()]
    assert warned and "person (6 images)" in warned[0] and "the publisher's answer" in warned[0]


def test_without_answers_the_card_states_the_people_labels_instead_of_the_claim(tmp_path):
    card = _release(tmp_path, _people)
    assert not any(s in card for s in NO_PEOPLE)
    assert "The labels name people: person (6 images)." in card


def test_a_release_whose_labels_name_no_people_keeps_the_default_sentences(tmp_path):
    card = _release(tmp_path, lambda i: ["mug", "spoon", "apple"][: 2 + i % 2])
    assert all(s in card for s in NO_PEOPLE)
    # the publisher's answer replaces the default sentence
    answered = _release(tmp_path / "b", lambda i: ["mug", "spoon"], {"consent": "No people were photographed."})
    assert "contain no people" not in answered and "No people were photographed." in answered


def test_the_chains_card_shows_the_concepts_and_pairs_the_builder_chose(tmp_path):
    from tests.test_association_release import _fresh_chains

    _, chains = _fresh_chains(tmp_path)
    out = tmp_path / "rel"
    build_release(sorted(chains.glob("*.jsonl")), out, progress=False)
    card = (out / "README.md").read_text(encoding="utf-8")
    section = card.split("## Construction settings", 1)[1].split("\n\n", 2)[1]
    rows = {line.split("|")[1].strip(): line.split("|")[2].strip() for line in section.splitlines()[2:]}
    assert "null" not in (rows["concepts"] + rows["pairs"] + rows["preset"])
    assert rows["concepts"].startswith('\\["') and rows["preset"].startswith("none")  # markdown-escaped [
    # concepts and pairs the builder chose itself (asked as null) are shown as chosen
    from commonlink.kinds.association.card import construction_rows

    stats = {
        "construction": {"concepts": None, "pairs": None, "preset": None, "top_k": 8},
        "concepts": [{"name": "metal"}, {"name": "furry"}],
        "pairs": [{"concepts": ["metal", "furry"]}],
    }
    assert dict(construction_rows(stats)) == {
        "concepts": '["metal", "furry"] (chosen by the builder: the largest pools)',
        "pairs": '[["metal", "furry"]] (chosen by the builder, spread over the concepts)',
        "preset": "none (concepts and pairs from the builder's options)",
        "top_k": "8",
    }
