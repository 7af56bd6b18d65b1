"""`commonlink.kinds.common_o.loader`: our releases and rows in the published facebook/Common-O schema."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from commonlink.constants import NO_COMMON_OBJECTS
from commonlink.errors import InputError, SchemaError
from commonlink.kinds.common_o.example import CommonOExample
from commonlink.kinds.common_o.format import common_o_features
from commonlink.kinds.common_o.loader import load_common_o, open_common_o, parse_list_field
from commonlink.release.build import build_release
from tests.fixtures.catalogs import write_rotating_catalog as make_catalog
from tests.fixtures.catalogs import write_tiny_pairs as make_pairs

# ------------------------------------------------------------------------------------------------ list fields


@pytest.mark.parametrize(
    "text, expected",
    [
        ('["apple", "keys"]', ["apple", "keys"]),
        ("['apple', 'keys']", ["apple", "keys"]),
        ("('apple', 'car keys')", ["apple", "car keys"]),
        ("apple, keys", ["apple", "keys"]),
        ("apple,keys ,  toy car", ["apple", "keys", "toy car"]),
        ("'apple', \"keys\"", ["apple", "keys"]),
        ("children's book, keys", ["children's book", "keys"]),
        ('["children\'s book", "keys"]', ["children's book", "keys"]),
        (NO_COMMON_OBJECTS, [NO_COMMON_OBJECTS]),
        (f'["{NO_COMMON_OBJECTS}"]', [NO_COMMON_OBJECTS]),
        ("", []),
        ("[]", []),
        (["already", "a list"], ["already", "a list"]),
    ],
)
def test_parse_list_field_accepts_each_encoding(text, expected):
    assert parse_list_field(text, row=0, field="choices") == expected


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("['apple', 'keys'", "neither valid JSON, a Python literal"),
        ('{"apple": 1}', "not a JSON list"),
        ("[1, 2]", "holds a int"),
        ("apple,, keys", "empty item"),
        ("apple, [keys", "not a JSON list"),
        ("'apple', 'keys", "not a JSON list"),
        (None, "missing"),
        (42, "expected a string"),
        ("[__import__('os').system('true')]", "neither valid JSON, a Python literal"),
        ("[" * 5000 + "]" * 5000, "neither valid JSON, a Python literal"),  # nesting past the JSON recursion limit
    ],
)
def test_parse_list_field_names_row_and_field_when_nothing_fits(text, fragment):
    with pytest.raises(SchemaError) as info:
        parse_list_field(text, row=7, field="ground_truth_objects")
    assert "row 7" in str(info.value) and "'ground_truth_objects'" in str(info.value) and fragment in str(info.value)


# --------------------------------------------------------------------------------- published-schema parquet


def _png(colour) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (20, 10), colour).save(buf, "PNG")
    return buf.getvalue()


def _published_row(
    i: int, choices: str, truth: str, objects_1: str, objects_2: str, source: str = "real", num_truth: int = 1
) -> dict:
    return {
        "image_1": {"bytes": _png((i * 40, 0, 0)), "path": f"a{i}.png"},
        "image_2": {"bytes": _png((0, i * 40, 0)), "path": None},
        "question": f"question {i}",
        "answer": "?",
        "objects_1": objects_1,
        "objects_2": objects_2,
        "num_objects_image_1": 3,
        "num_objects_image_2": 2,
        "question_template": "t",
        "answer_type": "multiple_choice",
        "choices": choices,
        "num_choices": 4,
        "num_ground_truth_objects": num_truth,
        "real_or_synthetic": source,
        "ground_truth_objects": truth,
    }


def write_published_folder(root: Path, rows: list[dict], split: str = "main") -> Path:
    """A folder shaped like facebook/Common-O: data/{split}-00000-of-00001.parquet, published columns, no id."""
    features = common_o_features(provenance=False)
    table = pa.Table.from_pylist(rows, schema=features.arrow_schema)
    (root / "data").mkdir(parents=True, exist_ok=True)
    pq.write_table(table, root / "data" / f"{split}-00000-of-00001.parquet", row_group_size=2)
    return root


@pytest.fixture
def published(tmp_path):
    rows = [
        _published_row(
            0,
            '["apple", "keys", "mug", "No objects are in common"]',
            '["keys"]',
            '["apple", "keys", "pen"]',
            '["keys", "mug"]',
        ),
        _published_row(
            1,
            "['Apple', 'car keys', 'mug', 'No objects are in common']",
            "['apple', 'mug']",
            "['Apple', 'mug']",
            "['Apple', 'mug']",
            "synthetic",
            2,
        ),
        _published_row(
            2, "apple, keys, mug, No objects are in common", "No objects are in common", "apple, pen", "keys"
        ),
        _published_row(3, "A. apple, B. keys, C. mug, D. No objects are in common", "mug", "mug", "mug"),
        _published_row(4, '["apple", "keys"', '["keys"]', "[]", "[]"),  # broken JSON list
    ]
    return write_published_folder(tmp_path / "published", rows), rows


def test_published_schema_rows_with_each_list_encoding(published):
    folder, rows = published
    split = open_common_o(folder, "main")
    assert len(split) == 5 and split.revision is None and split.split == "main"
    json_row, literal_row, csv_row, lettered_row = (split.get(i) for i in range(4))
    assert isinstance(json_row, CommonOExample)
    assert json_row.id == "main-0" and json_row.row_index == 0
    assert json_row.choices == ["apple", "keys", "mug", NO_COMMON_OBJECTS]
    assert json_row.ground_truth == ["keys"] and json_row.answer_letters == ["B"]
    assert json_row.objects_1 == ["apple", "keys", "pen"] and json_row.num_objects_image_1 == 3
    assert isinstance(json_row.image_1, Image.Image) and json_row.image_1.size == (20, 10)
    assert json_row.image_2.getpixel((0, 0)) == (0, 0, 0) and split.get(2).image_1.getpixel((0, 0)) == (80, 0, 0)
    assert json_row.source == "real" and json_row.question == "question 0"
    # Python literals; ground truth matched case-insensitively onto the choices
    assert literal_row.choices[1] == "car keys" and literal_row.ground_truth == ["Apple", "mug"]
    assert literal_row.answer_letters == ["A", "C"] and literal_row.source == "synthetic"
    # comma-separated text
    assert csv_row.choices == ["apple", "keys", "mug", NO_COMMON_OBJECTS]
    assert csv_row.ground_truth == [NO_COMMON_OBJECTS] and csv_row.answer_letters == ["D"]
    # choices that carry their own letters
    assert lettered_row.choices == ["apple", "keys", "mug", NO_COMMON_OBJECTS] and lettered_row.answer_letters == ["C"]


def test_bad_published_row_error_names_row_and_field(published):
    folder, _ = published
    split = open_common_o(folder, "main")
    with pytest.raises(SchemaError) as info:
        split.get(4)
    assert "row 4" in str(info.value) and "'choices'" in str(info.value)
    with pytest.raises(SchemaError, match="row 4"):
        list(load_common_o(folder, "main"))  # iteration reaches the bad row and stops there
    examples = []
    with pytest.raises(SchemaError):
        for example in split:
            examples.append(example.id)
    assert examples == ["main-0", "main-1", "main-2", "main-3"]


def test_ground_truth_outside_choices_and_undecodable_image(tmp_path):
    rows = [
        _published_row(0, '["apple", "keys"]', '["banana"]', "[]", "[]"),
        _published_row(1, '["apple", "keys"]', '["apple"]', "[]", "[]"),
    ]
    rows[1]["image_2"] = {"bytes": b"not an image", "path": None}
    for row in rows:
        row["num_choices"] = 2
    split = open_common_o(write_published_folder(tmp_path / "pub", rows), "main")
    with pytest.raises(SchemaError, match=r"'banana' is not one of the choices"):
        split.get(0)
    with pytest.raises(InputError, match=r"row 1, field 'image_2'"):
        split.get(1)


def test_missing_columns_split_and_revision_errors(tmp_path, published):
    folder, _ = published
    with pytest.raises(InputError, match="no parquet files for split 'test'.*splits found: main"):
        open_common_o(folder, "test")
    with pytest.raises(InputError, match="revisions apply to Hub repos only"):
        open_common_o(folder, "main", revision="v1")
    with pytest.raises(InputError, match="neither an existing folder"):
        open_common_o(str(tmp_path / "no such" / "thing here"), "main")
    pq.write_table(pa.table({"question": ["q"]}), tmp_path / "other.parquet")
    with pytest.raises(SchemaError, match="lacks the column"):
        open_common_o(tmp_path / "other.parquet", "main")


# ------------------------------------------------------------------------------------------------ our release


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    base = tmp_path_factory.mktemp("loader_release")
    records = make_catalog(base / "cat", 8)
    rows = make_pairs(base / "main.jsonl", base / "cat", records, 9)
    build_release([base / "main.jsonl"], base / "rel", max_shard_bytes=8_000, progress=False)
    return base / "rel", rows


@pytest.mark.slow
def test_release_folder_loads_with_provenance(release):
    folder, rows = release
    split = open_common_o(folder, "main")
    assert len(split) == 9 and len(list((folder / "data").iterdir())) > 1  # several shards, read as one split
    examples = list(split)
    assert [e.id for e in examples] == [r["id"] for r in rows]
    for example, row in zip(examples, rows):
        assert example.choices == row["choices"] and example.ground_truth == row["ground_truth"]
        assert ", ".join(example.answer_letters) == row["answer"]
        assert (
            example.extra["image_1_id"] == row["image_1"]["id"]
            and example.extra["scene_2_id"] == row["image_2"]["scene_id"]
        )
        assert example.objects_2 == row["image_2"]["objects"] and example.source == "real"
        assert (
            example.image_1.tobytes() == Image.open(Path(row["image_1"]["catalog"]) / row["image_1"]["path"]).tobytes()
        )
    assert split.get(5).id == examples[5].id and split.get(0).id == rows[0]["id"]
    with pytest.raises(IndexError):
        split.get(9)


@pytest.mark.slow
def test_fingerprint_is_stable_and_tracks_content(release, tmp_path):
    folder, _ = release
    first = open_common_o(folder, "main").fingerprint
    assert first == open_common_o(str(folder), "main").fingerprint and len(first) >= 16
    copy = tmp_path / "copy"
    import shutil

    shutil.copytree(folder, copy)
    assert open_common_o(copy, "main").fingerprint == first  # same data elsewhere: same fingerprint
    shard = sorted((copy / "data").iterdir())[0]
    table = pq.read_table(shard)
    pq.write_table(table.slice(0, table.num_rows - 1), shard)
    assert open_common_o(copy, "main").fingerprint != first


def test_fingerprint_reads_unchanged_files_once_and_a_rewrite_with_the_old_times_again(release, tmp_path, monkeypatch):
    import os
    import shutil

    from commonlink.kinds.common_o import loader

    folder, _ = release
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    reads = []
    real = loader._ParquetRows._hash_files
    monkeypatch.setattr(loader._ParquetRows, "_hash_files", lambda self: reads.append(1) or real(self))
    first = open_common_o(copy, "main").fingerprint
    assert open_common_o(copy, "main").fingerprint == first and len(reads) == 1  # memoised by the files' stats
    # the same size and modification time, other bytes: the change time moved, so the files are read again
    shard = sorted((copy / "data").iterdir())[0]
    data, stat = bytearray(shard.read_bytes()), shard.stat()
    data[data.rindex(b"parquet-cpp")] = ord("P")  # the footer's created-by text: the file stays readable
    shard.write_bytes(bytes(data))
    os.utime(shard, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert open_common_o(copy, "main").fingerprint != first and len(reads) == 2


@pytest.mark.slow
def test_single_parquet_file_and_plain_folder_without_card(release, tmp_path):
    folder, rows = release
    shard = sorted((folder / "data").iterdir())[0]
    one = open_common_o(shard, "main")
    assert len(one) == pq.ParquetFile(shard).metadata.num_rows and one.get(0).id == rows[0]["id"]
    bare = tmp_path / "bare"
    (bare).mkdir()
    for p in (folder / "data").iterdir():
        (bare / p.name).write_bytes(p.read_bytes())
    assert [e.id for e in load_common_o(bare, "main")] == [r["id"] for r in rows]
    assert json.loads(json.dumps(open_common_o(bare, "main").columns))[:2] == ["image_1", "image_2"]


@pytest.mark.slow
def test_repo_id_goes_through_datasets_load_dataset(release, tmp_path, monkeypatch):
    """The Hub path (network tests are the hub helper's): split and revision are passed on, images decoded by us."""
    import datasets

    folder, rows = release
    real_load = datasets.load_dataset
    calls = []

    def fake_load(repo, split=None, revision=None, **kwargs):
        calls.append((repo, split, revision))
        return real_load(str(folder), split=split, cache_dir=str(tmp_path / "hf_cache"))

    monkeypatch.setattr(datasets, "load_dataset", fake_load)
    # the Hub has the repo: its one metadata lookup answers (no network here; tests/test_hub_ids.py covers it)
    monkeypatch.setattr("commonlink.loaders.hub_ids.lookup_reason", lambda *args, **kwargs: (None, True))
    split = open_common_o("someone/common-o-copy", "main", revision="v1.0.0")
    assert calls == [("someone/common-o-copy", "main", "v1.0.0")]
    assert split.revision == "v1.0.0" and split.source_name == "someone/common-o-copy" and len(split) == 9
    assert (
        split.fingerprint and split.fingerprint == open_common_o("someone/common-o-copy", "main", "v1.0.0").fingerprint
    )
    examples = list(split)
    assert [e.id for e in examples] == [r["id"] for r in rows]
    assert isinstance(examples[0].image_1, Image.Image) and split.get(3).ground_truth == rows[3]["ground_truth"]


def test_a_row_pointing_at_a_file_outside_the_release_is_not_read(tmp_path):
    """Image cells without bytes whose path leaves the release folder are refused, never opened."""
    import datasets
    import pyarrow.parquet as pq
    from PIL import Image

    from commonlink.errors import InputError
    from commonlink.kinds.common_o.format import common_o_features
    from commonlink.kinds.common_o.loader import open_common_o

    secret = tmp_path / "private.png"
    Image.new("RGB", (8, 8), (255, 0, 0)).save(secret)
    features = common_o_features()
    row = {k: "x" for k in features}
    row.update(
        image_1={"bytes": None, "path": str(secret)},
        image_2={"bytes": None, "path": "../private.png"},
        objects_1='["a"]',
        objects_2='["a"]',
        num_objects_image_1=1,
        num_objects_image_2=1,
        num_choices=2,
        num_ground_truth_objects=1,
        choices='["a", "No objects are in common"]',
        ground_truth_objects='["a"]',
        real_or_synthetic="real",
    )
    (tmp_path / "rel" / "data").mkdir(parents=True)
    pq.write_table(
        datasets.Dataset.from_list([row], features=features).data.table,
        tmp_path / "rel" / "data" / "main-00000-of-00001.parquet",
    )
    split = open_common_o(tmp_path / "rel", "main")
    with pytest.raises(InputError, match="points outside the release"):
        split.get(0)
    assert split.get(0, images=False).choices == ["a", "No objects are in common"]


def test_iteration_decodes_ahead_but_yields_and_fails_in_row_order(tmp_path):
    """Images are decoded on a worker thread a few rows ahead: the examples are those of get(i), in order; a
    broken image 6 rows in fails exactly there (the rows before it are all yielded); stopping early leaves no
    decoding thread behind."""
    import threading

    from tests.fixtures.tiny_models import common_o_rows, write_common_o_split

    rows = common_o_rows(12, seed=3)
    folder = write_common_o_split(tmp_path / "ok", rows, shards=2)
    split = open_common_o(folder, "main")
    examples = list(split)
    assert [e.row_index for e in examples] == list(range(12))
    for i in (0, 5, 11):
        direct = split.get(i)
        assert examples[i].id == direct.id and examples[i].choices == direct.choices
        assert (
            examples[i].image_1.tobytes() == direct.image_1.tobytes()
            and examples[i].image_2.size == direct.image_2.size
        )

    rows[6]["image_2"] = {"bytes": rows[6]["image_2"]["bytes"][:40], "path": None}  # truncated PNG
    broken = open_common_o(write_common_o_split(tmp_path / "broken", rows), "main")
    seen = []
    with pytest.raises(InputError, match=r"row 6, field 'image_2'"):
        for example in broken:
            seen.append(example.row_index)
    assert seen == [0, 1, 2, 3, 4, 5]

    for _ in split:
        break
    assert not [t for t in threading.enumerate() if t.name.startswith("commonlink-decode")]


@pytest.mark.slow
def test_text_only_rows_leave_the_image_columns_unread(release, monkeypatch):
    # the weight-free baselines read every row without its images: the image bytes are most of a row group
    import dataclasses

    folder, _ = release
    split = open_common_o(folder, "main")
    asked = []
    read_row_group = pq.ParquetFile.read_row_group

    def spy(self, i, columns=None, **kwargs):
        asked.append(columns)
        return read_row_group(self, i, columns=columns, **kwargs)

    monkeypatch.setattr(pq.ParquetFile, "read_row_group", spy)
    text = [split.get(i, images=False) for i in range(len(split))]
    assert asked and all(c is not None and "image_1" not in c and "image_2" not in c and "id" in c for c in asked)
    asked.clear()
    full = [split.get(i) for i in range(len(split))]
    assert asked and all(c is None for c in asked)  # with images: whole row groups, as before
    for without, whole in zip(text, full):
        assert without.image_1 is None and without.image_2 is None and whole.image_1 is not None
        assert dataclasses.replace(whole, image_1=None, image_2=None) == without
    # alternating both kinds of read (an eval resuming from its cache, the report) reads each row group once:
    # whole when a whole read comes first, text only when the text is read first
    groups = sum(pq.ParquetFile(f).metadata.num_row_groups for f in (folder / "data").glob("*.parquet"))
    fresh = open_common_o(folder, "main")
    asked.clear()
    for i in range(len(fresh)):
        assert fresh.get(i).id == fresh.get(i, images=False).id == full[i].id
    assert asked == [None] * groups
    fresh = open_common_o(folder, "main")
    asked.clear()
    for i in range(len(fresh)):
        assert fresh.get(i, images=False).id == fresh.get(i).id == full[i].id
    assert len(asked) == 2 * groups and asked[1::2] == [None] * groups
