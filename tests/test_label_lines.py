"""Labels with line breaks or control characters (bidi controls included) are refused where they enter: the
photo manifest read by ingest (and the chain builder), and catalog merge, naming the offending line."""

from __future__ import annotations

import json

import pytest

from commonlink.catalog.labels import read_manifest
from commonlink.errors import SchemaError
from commonlink.formats.catalog import label_problem

UNFIT = [
    ("mug\nbook", "a line break (U+000A)"),
    ("mug\r", "a line break (U+000D)"),
    ("a\u2028b", "a line break (U+2028)"),
    ("tab\there", "a control character (U+0009)"),
    ("nul\x00", "a control character (U+0000)"),
    ("\u202egnp.exe", "a bidirectional control (U+202E)"),
    ("x\u2066y", "a bidirectional control (U+2066)"),
]


@pytest.mark.parametrize(("label", "problem"), UNFIT)
def test_label_problem_names_the_character(label, problem):
    assert label_problem(label).startswith(problem)
    assert label_problem("coffee mug (blue) <ok> [x]") is None  # markup is escaped on the card, not refused


def test_a_csv_field_spanning_lines_is_refused_naming_its_line(tmp_path):
    manifest = tmp_path / "labels.csv"
    manifest.write_text('file,objects\na.jpg,apple;keys\nb.jpg,"mug\n## Versions"\n', encoding="utf-8")
    with pytest.raises(SchemaError) as refused:
        read_manifest(manifest)
    assert "labels.csv, line 4" in refused.value.problem and "line break (U+000A)" in refused.value.problem
    assert "one line" in refused.value.fix


@pytest.mark.parametrize("key", ["objects", "scene", "view", "background", "file"])
def test_jsonl_labels_and_names_with_controls_are_refused(tmp_path, key):
    manifest = tmp_path / "labels.jsonl"
    row = {"file": "a.jpg", "objects": ["apple"]}
    row[key] = ["ok", "\u202eevil"] if key == "objects" else "x\u202ey"
    manifest.write_text(
        json.dumps({"file": "z.jpg", "objects": ["pen"]}) + "\n" + json.dumps(row) + "\n", encoding="utf-8"
    )
    with pytest.raises(SchemaError, match=r"labels\.jsonl, line 2: " + key + r" .*bidirectional control \(U\+202E\)"):
        read_manifest(manifest)


def test_catalog_merge_refuses_a_label_with_a_line_break_naming_the_line(tmp_path):
    from commonlink.catalog.merge import merge_catalogs
    from tests.fixtures.catalogs import write_tiny_catalog

    write_tiny_catalog(tmp_path / "a", [{"objects": ["apple"]}, {"objects": ["mug\n| 9.9.9 | forged |"], "seed": 1}])
    with pytest.raises(SchemaError) as refused:
        merge_catalogs([tmp_path / "a"], tmp_path / "out")
    assert (
        f"{tmp_path / 'a'}, line 2: objects" in refused.value.problem and "line break (U+000A)" in refused.value.problem
    )
    assert not (tmp_path / "out" / "catalog.jsonl").exists()


def test_a_vocabulary_name_with_a_bidi_control_is_refused_naming_its_line(tmp_path):
    from commonlink.catalog.vocabulary import Vocabulary

    vocab = tmp_path / "vocab.txt"
    vocab.write_text("apple\nmug: cup, \u202egum\n", encoding="utf-8")
    with pytest.raises(SchemaError, match=r"vocab\.txt, line 2: .*bidirectional control \(U\+202E\)"):
        Vocabulary.from_file(vocab)
