"""The loader's batch path: `decode_batch_lists` agrees with `decode_row_lists`, `CommonOSplit.iter_batches`
returns what row iteration returns, and a bad row is refused with the same message whichever way it is read."""

from __future__ import annotations

import json
from dataclasses import replace

import pyarrow.parquet as pq
import pytest

from commonlink.constants import NO_COMMON_OBJECTS
from commonlink.errors import InputError, SchemaError
from commonlink.kinds.common_o.format import common_o_question
from commonlink.kinds.common_o.loader import open_common_o
from commonlink.kinds.common_o.loader_batch import decode_batch_lists
from commonlink.kinds.common_o.loader_lists import decode_row_lists
from tests.fixtures.tiny_models import common_o_rows, write_common_o_split


def _per_row(row: dict):
    try:
        return decode_row_lists(row, row_label="0")
    except SchemaError as exc:
        return exc


def _json_row(names: list[str], truth: list[str], **changes) -> dict:
    row = {
        "question": common_o_question(names),
        "answer": ", ".join(chr(65 + names.index(t)) for t in truth if t in names),
        "choices": json.dumps(names),
        "num_choices": len(names),
        "ground_truth_objects": json.dumps(truth),
        "num_ground_truth_objects": 0 if truth == [NO_COMMON_OBJECTS] else len(truth),
        "objects_1": json.dumps([t for t in truth if t != NO_COMMON_OBJECTS] + ["pen"]),
        "objects_2": json.dumps([t for t in truth if t != NO_COMMON_OBJECTS] + ["cup"]),
    }
    row.update(changes)
    return row


def _edge_rows() -> list[dict]:
    base = ["apple", "keys", NO_COMMON_OBJECTS, "mug"]
    many = [f"thing {k}" for k in range(29)] + [NO_COMMON_OBJECTS]
    return [
        _json_row(base, ["keys"]),
        _json_row(base, [NO_COMMON_OBJECTS]),
        _json_row(base, ["keys", "mug"], answer="Answer: B, D"),
        _json_row(many, ["thing 27", "thing 3"], answer="D, AB"),  # two-letter labels (no answer check here)
        _json_row(many, ["thing 27"], answer="AB"),
        _json_row(["paring knife, wooden handle", "keys", NO_COMMON_OBJECTS], ["keys"]),  # a comma in a name
        _json_row(["MR. Potato", "keys", NO_COMMON_OBJECTS], ["keys"]),  # a letter-like name: per-row path
        _json_row(["A. apple", "B. keys", f"C. {NO_COMMON_OBJECTS}"], ["B. keys"]),  # choices with their letters
        _json_row(["A. apple", "keys", NO_COMMON_OBJECTS], ["keys"], choices=r'["\u0041. apple", "keys", "mug"]'),
        _json_row(base, ["keys"], choices='[" apple ", "keys", "No objects are in common", "mug"]'),
        _json_row(base, ["keys"], question="Which of these is in both? A. apple, B. keys"),  # other wording
        _json_row(base, ["keys"], question=None),
        _json_row(base, ["keys"], question=""),
        _json_row(base, ["keys"], num_choices=5),  # count disagrees
        _json_row(base, ["keys"], num_choices=None),
        _json_row(base, ["keys"], num_ground_truth_objects=2),
        _json_row(base, ["keys"], answer="C"),  # answer disagrees with the ground truth
        _json_row(base, ["keys"], answer="see above"),  # free text: not checked
        _json_row(base, ["keys"], answer=None),
        _json_row(base, ["banana"]),  # not a choice
        _json_row(base, ["keys", NO_COMMON_OBJECTS], num_ground_truth_objects=1),
        _json_row(base + ["Keys"], ["keys"]),  # a name twice
        _json_row(base, ["keys"], objects_1=None),
        _json_row(base, ["keys"], objects_2='["pen", ""]'),  # an empty name
        _json_row(base, ["keys"], objects_2='["pen"] ["cup"]'),  # not one JSON value
        _json_row(base, ["keys"], objects_2='["pen", 3]'),
        _json_row(base, ["keys"], ground_truth_objects='["keys"'),  # broken JSON
        _json_row(base, ["keys"], ground_truth_objects="keys"),  # comma text
        _json_row(base, ["keys"], choices=json.dumps(base)[:-1] + ", ]"),
        _json_row(["apple"], ["apple"], question=common_o_question(["apple"])),  # one choice
    ]


@pytest.mark.parametrize("encoding", ["json", "python", "comma"])
def test_batch_lists_equal_the_per_row_reading(encoding):
    rows = common_o_rows(40, seed=5, encoding=encoding) + _edge_rows()
    fast = decode_batch_lists(rows)
    assert len(fast) == len(rows)
    for row, lists in zip(rows, fast):
        expected = _per_row(row)
        if lists is not None:  # taken by the fast path: exactly what the per-row path gives
            assert lists == expected
    if encoding == "json":  # our releases' rows all take the fast path
        assert all(lists is not None for lists in fast[:40])
        # and rows that the per-row path refuses never do: their error is the per-row one
        assert all(lists is None for row, lists in zip(rows, fast) if isinstance(_per_row(row), SchemaError))


def test_each_edge_row_alone_and_in_a_batch_alike():
    rows = _edge_rows()
    together = decode_batch_lists(rows)
    alone = [decode_batch_lists([row])[0] for row in rows]
    assert together == alone
    assert all(together[k] is not None for k in (0, 1, 2, 3, 4, 5))
    # letter-like names: the per-row path settles them
    assert together[6] is None and together[7] is None and together[8] is None


@pytest.fixture
def split(tmp_path):
    return open_common_o(write_common_o_split(tmp_path / "rel", common_o_rows(23, seed=2), shards=2), "main")


@pytest.mark.parametrize("batch_size", [1, 5, 64])
def test_iter_batches_returns_the_rows_in_order(split, batch_size):
    rows = list(split)
    batches = list(split.iter_batches(batch_size))
    assert [len(b) for b in batches] == [batch_size] * (23 // batch_size) + (
        [23 % batch_size] if 23 % batch_size else []
    )
    flat = [e for b in batches for e in b]
    assert [e.row_index for e in flat] == list(range(23))
    for got, want in zip(flat, rows):
        assert got.id == want.id and got.choices == want.choices and got.extra == want.extra
        assert got.image_1.tobytes() == want.image_1.tobytes() and got.image_2.size == want.image_2.size
    direct = split.get(7)
    assert replace(flat[7], image_1=None, image_2=None) == replace(direct, image_1=None, image_2=None)


def test_iter_batches_without_images_reads_no_image_column(split, monkeypatch):
    asked = []
    real = pq.ParquetFile.iter_batches

    def spy(self, *args, columns=None, **kwargs):
        asked.append(columns)
        return real(self, *args, columns=columns, **kwargs)

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", spy)
    text = [e for b in split.iter_batches(10, images=False) for e in b]
    assert asked and all(c is not None and "image_1" not in c and "image_2" not in c for c in asked)
    assert all(e.image_1 is None and e.image_2 is None for e in text)
    assert [e.answer_letters for e in text] == [split.get(i, images=False).answer_letters for i in range(23)]


def test_iter_batches_refuses_a_batch_size_below_one_at_once(split):
    with pytest.raises(InputError, match="batch_size 0 must be at least 1"):
        split.iter_batches(0)


def _message(fn) -> str:
    with pytest.raises((SchemaError, InputError)) as info:
        fn()
    return str(info.value)


@pytest.mark.parametrize(
    "change, kind",
    [
        ({"ground_truth_objects": '["banana"]'}, SchemaError),
        ("wrong answer", SchemaError),
        ({"num_choices": 9}, SchemaError),
        ({"choices": '["apple", "keys"'}, SchemaError),
        ({"image_2": {"bytes": b"not an image", "path": None}}, InputError),
    ],
)
def test_a_bad_row_is_refused_with_the_same_message_every_way(tmp_path, change, kind):
    rows = common_o_rows(12, seed=4)
    if change == "wrong answer":  # a letter of a choice that is not in the ground truth
        choices = json.loads(rows[9]["choices"])
        truth = json.loads(rows[9]["ground_truth_objects"])
        change = {"answer": next(chr(65 + k) for k, c in enumerate(choices) if c not in truth)}
    rows[9].update(change)
    split = open_common_o(write_common_o_split(tmp_path / "bad", rows), "main")
    message = _message(lambda: split.get(9))
    assert "row 9" in message
    seen = []

    def iterate():
        for example in split:
            seen.append(example.row_index)

    assert _message(iterate) == message and seen == list(range(9))
    batches = []

    def batched():
        for batch in split.iter_batches(4):
            batches.append([e.row_index for e in batch])

    assert _message(batched) == message and batches == [[0, 1, 2, 3], [4, 5, 6, 7]]
    with pytest.raises(kind):
        split.get(9)
