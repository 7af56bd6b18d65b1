"""The published facebook/Common-O, scored as the paper does (issue 12): every list encoding, ground truth as
names or letters, cross-checks and refusals, the paper's hallucination formula on Table 7, and
`commonlink eval commono --model none` end to end on folders in the published layout."""

from __future__ import annotations

import io
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image
from typer.testing import CliRunner

from commonlink.cli import app
from commonlink.constants import NO_COMMON_OBJECTS
from commonlink.errors import SchemaError
from commonlink.kinds.common_o.format import common_o_features, common_o_question, letters
from commonlink.kinds.common_o.loader import open_common_o
from commonlink.kinds.common_o.loader_lists import decode_row_lists, read_list_text
from commonlink.kinds.common_o.metrics import common_o_metrics, score_common_o
from commonlink.kinds.common_o.parsing import parse_common_o_answer

# The paper's Table 7 (appendix: "Randomly sampled model mistakes in Common-O Bench"), verbatim:
# model, choices as printed (bracketed, unquoted), ground truth (letters, or names), prediction.
TABLE_7 = [
    (
        "GPT-4o",
        "[silver grater, No objects are in common, dark chocolate bar wrapped in foil, silver straw, silver whisk, "
        "silver knife, tangerine, measuring cup]",
        "No objects are in common",
        "Measuring cup",
    ),
    (
        "Llava-OneVision",
        "[No objects are in common, mallard (fake duck), vase, hammer, calculator, dish, basketball, fakefoodcan]",
        "B, D, E",
        "D, E, H",
    ),
    (
        "Qwen",
        "[dumbbell, mouse, hammer, No objects are in common, football, birdhouse, keyboard, volleyball]",
        "B, D, G",
        "B",
    ),
    (
        "PerceptionLM",
        "[spoon, No objects are in common, orange, glass, keys, lime, fork, popcorn kernel]",
        "E",
        "A, B, C",
    ),
    (
        "Qwen",
        "[dino, candle holder, mallard (fake duck), bowl, volleyball, No objects are in common, shaver, birdhouse]",
        "D, E, G",
        "D",
    ),
    (
        "Llama 4 Instruct",
        "[watermelon, plant, No objects are in common, coffee mug, earbuds, candle snuffer, pen, ball]",
        "D, E, F, H",
        "D",
    ),
    (
        "Llama 3.2 Instruct",
        "[bottle opener, gold jigger, 2-prong serving fork, strainer, paring knife with wooden handle, No objects are "
        "in common, gold paring knife, silver jigger]",
        "A, B, D, G, H",
        "D, G",
    ),
    (
        "Llama 3.2 Instruct",
        "[fakefruit, airplane, bowl, No objects are in common, spoon, football, keyboard, mouse]",
        "C, F, G",
        "D",
    ),
    (
        "Llama 3.2 Instruct",
        "[fakefoodcan, vase, volleyball, spoon, kitchenware, No objects are in common, fakefruit, shoes]",
        "A, B, E, G",
        "A, B",
    ),
    (
        "Qwen",
        "[remote, basketball, calculator, No objects are in common, mouse, vase, marker, volleyball]",
        "C, E, H",
        "C",
    ),
    (
        "Llama 3.2 Instruct",
        "[fish bowl, white pill bottle, paint brush, candy cane, No objects are in common, orange pill bottle, lint "
        "roller, scissors]",
        "B, F, H",
        "B, D, F, G, H",
    ),
    (
        "PerceptionLM",
        "[No objects are in common, candle, marker, fakefruit, keyboard, mallard (fake duck), bowl, remote]",
        "B, C, E, G, H",
        "A, B, C",
    ),
    (
        "GPT-4o",
        "[cup, mallard (fake duck), vase, No objects are in common, football, candle, volleyball, shoes]",
        "candle, shoes, vase, volleyball",
        "shoes, volleyball",
    ),
    (
        "Llama 4 Instruct",
        "[spoon, No objects are in common, fakefruit, cast iron, basketball, marker, vase, shoes]",
        "C, D, G, H",
        "C, D, H",
    ),
    (
        "Qwen",
        "[spoon, cast iron, basketball, vase, fakefruit, No objects are in common, marker, shoes]",
        "D, E, H",
        "E, H",
    ),
    (
        "Qwen",
        "[No objects are in common, fakefoodcan, fakefruit, shoes, spoon, vase, volleyball, kitchenware]",
        "C, F, H",
        "B, C, F",
    ),
    (
        "Llava-OneVision",
        "[bowl, keyboard, No objects are in common, marker, remote, fakefruit, candle, mallard (fake duck)]",
        "A, B, D, G",
        "A, B, C",
    ),
    (
        "Qwen",
        "[No objects are in common, pail with handle, burnt orange pot, leaf, black pot, easel, pink pot, watering "
        "can]",
        "B, C, E, G",
        "A",
    ),
    (
        "DeepSeekVL2",
        "[No objects are in common, marker, basketball, calculator, vase, mouse, volleyball, remote]",
        "B, D, E, F, G, H",
        "A, B, C",
    ),
    (
        "Llava-OneVision Chat",
        "[black pot, burnt orange pot, pink pot, pail with handle, No objects are in common, leaf, watering can, "
        "easel]",
        "A, C",
        "A, D, G",
    ),
]

# Worked by hand from the table with the paper's formula |O_pred \ O_common| (over the lettered choices, so a
# wrong "No objects are in common" counts), and the objects-only variant (that choice left out).
PAPER_FALSE_POSITIVES = [1, 1, 0, 3, 0, 0, 0, 1, 0, 0, 2, 1, 0, 0, 0, 1, 1, 1, 2, 2]
OBJECT_FALSE_POSITIVES = [1, 1, 0, 2, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 1, 0, 0, 1, 2]
#: Row 3 (Qwen) lists "No objects are in common" (D) *and* two objects as its ground truth: a contradiction.
CONTRADICTORY_ROW = 2


def _bracketed_names(text: str) -> list[str]:
    return read_list_text(text, row=0, field="choices").plain()


def _truth_letters(choices: list[str], truth: str) -> list[str]:
    labels = letters(len(choices))
    items = [t.strip() for t in truth.split(",")]
    if all(t in labels for t in items):
        return sorted(items)
    return sorted(labels[[c.casefold() for c in choices].index(t.casefold())] for t in items)


def test_table_7_hallucination_by_the_papers_formula():
    records = []
    for (model, choices_text, truth, prediction), paper, objects in zip(
        TABLE_7, PAPER_FALSE_POSITIVES, OBJECT_FALSE_POSITIVES
    ):
        choices = _bracketed_names(choices_text)
        assert len(choices) == 8 and NO_COMMON_OBJECTS in choices
        parsed = parse_common_o_answer(prediction, choices)
        assert parsed.ok, (model, prediction, parsed.error)
        truth_letters = _truth_letters(choices, truth)
        score = score_common_o(parsed.letters, truth_letters, choices)
        assert score["hallucinated"] == paper, (model, choices, truth, prediction)
        assert len(score["hallucinated_objects"]) == objects
        assert score["correct"] is False  # every row of Table 7 is a mistake
        records.append(
            dict(
                score,
                num_choices=8,
                parse_ok=True,
                source="real",
                num_objects_image_1=3,
                num_objects_image_2=3,
                ground_truth=truth_letters,
            )
        )
    # 6 of the 20 mistakes pick a wrong "No objects are in common"
    wrong_none = [
        i
        for i, (_, c, t, p) in enumerate(TABLE_7)
        if NO_COMMON_OBJECTS
        in [_bracketed_names(c)[letters(8).index(x)] for x in parse_common_o_answer(p, _bracketed_names(c)).letters]
        and letters(8)[_bracketed_names(c).index(NO_COMMON_OBJECTS)] not in _truth_letters(_bracketed_names(c), t)
    ]
    assert wrong_none == [3, 7, 11, 16, 17, 18]
    overall = common_o_metrics(records, n_boot=10)["overall"]
    assert overall["hallucination_rate"] == pytest.approx(16 / (20 * 8))  # 16 false positives over 20 rows of 8 choices
    assert overall["hallucination_1plus"] == pytest.approx(11 / 20) and overall["hallucination_2plus"] == pytest.approx(
        4 / 20
    )
    assert overall["object_hallucination_rate"] == pytest.approx(10 / (20 * 8))
    assert overall["object_hallucination_1plus"] == pytest.approx(7 / 20) and overall[
        "object_hallucination_2plus"
    ] == pytest.approx(3 / 20)


# ------------------------------------------------------------------------------------ published-layout rows


def _png(shade: int, size=(40, 30)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, (shade, 90, 200 - shade)).save(buf, "PNG")
    return buf.getvalue()


def encode(items: list[str], encoding: str) -> str:
    if encoding == "json":
        return json.dumps(items)
    if encoding == "python":
        return repr(items)
    if encoding == "bracketed":  # as the paper prints lists: [a, b, c]
        return "[" + ", ".join(items) + "]"
    if encoding == "comma":
        return ", ".join(items)
    if encoding == "lettered":
        return ", ".join(f"{label}. {item}" for label, item in zip(letters(len(items)), items))
    raise ValueError(encoding)


def table_7_examples() -> list[dict]:
    """Table 7's consistent rows as examples (choices, truth names, object lists that agree with them)."""
    out = []
    for i, (_, choices_text, truth, _) in enumerate(TABLE_7):
        if i == CONTRADICTORY_ROW:
            continue
        choices = _bracketed_names(choices_text)
        labels = letters(8)
        truth_letters = _truth_letters(choices, truth)
        names = [choices[labels.index(x)] for x in truth_letters]
        objects = [c for c in choices if c != NO_COMMON_OBJECTS and c not in names]
        common = [] if names == [NO_COMMON_OBJECTS] else names
        out.append(
            {
                "choices": choices,
                "truth": names,
                "truth_letters": truth_letters,
                "objects_1": common + objects[:2],
                "objects_2": common + objects[2:4],
            }
        )
    return out


def published_row(
    i: int, example: dict, *, lists: str, truth_as: str = "names", question: bool = True, answer: str | None = "letters"
) -> dict:
    truth = example["truth_letters"] if truth_as == "letters" else example["truth"]
    return {
        "image_1": {"bytes": _png(10 * i), "path": None},
        "image_2": {"bytes": _png(10 * i + 5), "path": None},
        "question": common_o_question(example["choices"]) if question else None,
        "answer": None
        if answer is None
        else (", ".join(example["truth_letters"]) if answer == "letters" else ", ".join(example["truth"])),
        "objects_1": encode(example["objects_1"], "json" if lists == "lettered" else lists),
        "objects_2": encode(example["objects_2"], "json" if lists == "lettered" else lists),
        "num_objects_image_1": len(example["objects_1"]),
        "num_objects_image_2": len(example["objects_2"]),
        "question_template": "which_objects_in_both",
        "answer_type": "multiple_choice",
        "choices": encode(example["choices"], lists),
        "num_choices": len(example["choices"]),
        "num_ground_truth_objects": 0 if example["truth"] == [NO_COMMON_OBJECTS] else len(example["truth"]),
        "real_or_synthetic": "real" if i % 2 else "synthetic",
        "ground_truth_objects": ", ".join(truth)
        if truth_as == "letters"
        else encode(truth, "json" if lists == "lettered" else lists),
    }


def write_published(root, rows: list[dict], split: str = "main"):
    """A folder shaped like facebook/Common-O: data/{split}-00000-of-00001.parquet, published columns, no id."""
    table = pa.Table.from_pylist(rows, schema=common_o_features(provenance=False).arrow_schema)
    (root / "data").mkdir(parents=True, exist_ok=True)
    pq.write_table(table, root / "data" / f"{split}-00000-of-00001.parquet", row_group_size=4)
    return root


ENCODINGS = ["json", "python", "bracketed", "comma", "lettered"]
VARIANTS = [(lists, truth_as) for lists in ENCODINGS for truth_as in ("names", "letters")]


@pytest.mark.parametrize("lists, truth_as", VARIANTS)
def test_every_encoding_reads_every_row_right(tmp_path, lists, truth_as):
    examples = table_7_examples()
    rows = [published_row(i, ex, lists=lists, truth_as=truth_as, question=i % 3 != 0) for i, ex in enumerate(examples)]
    split = open_common_o(write_published(tmp_path / "pub", rows), "main")
    for i, expected in enumerate(examples):
        got = split.get(i)
        assert got.choices == expected["choices"] and got.ground_truth == expected["truth"]
        assert got.answer_letters == expected["truth_letters"]
        assert got.objects_1 == expected["objects_1"] and got.objects_2 == expected["objects_2"]
        assert got.extra["list_encodings"]["choices"] == lists and got.extra["ground_truth_as"] == truth_as
        assert got.extra["answer_checked"] is True
        if i % 3 != 0:
            assert got.question_source == "dataset" and got.question == rows[i]["question"]
        else:
            assert got.question_source == "built" and got.question == common_o_question(expected["choices"])


def test_names_with_parentheses_apostrophes_and_hyphens():
    text = "[mallard (fake duck), children's book, 2-prong serving fork, No objects are in common]"
    assert read_list_text(text, row=0, field="choices").plain() == [
        "mallard (fake duck)",
        "children's book",
        "2-prong serving fork",
        NO_COMMON_OBJECTS,
    ]
    assert read_list_text(text, row=0, field="choices").encoding == "bracketed"
    # quotes that are not apostrophes inside a name mean a broken quoted list, not names: refused
    with pytest.raises(SchemaError, match="row 0, field 'choices'"):
        read_list_text("[apple, 'keys]", row=0, field="choices")


COMMA_CHOICES = [
    "bottle opener",
    "gold jigger",
    "2-prong serving fork",
    "strainer",
    "paring knife, wooden handle",
    NO_COMMON_OBJECTS,
    "gold paring knife",
    "silver jigger",
]


def _comma_row(**changes) -> dict:
    row = {
        "question": common_o_question(COMMA_CHOICES),
        "answer": "A, E",
        "choices": ", ".join(COMMA_CHOICES),
        "num_choices": 8,
        "ground_truth_objects": "A, E",
        "num_ground_truth_objects": 2,
        "objects_1": "bottle opener, paring knife, wooden handle, strainer",
        "objects_2": "paring knife, wooden handle, bottle opener, gold jigger",
        "num_objects_image_1": 3,
        "num_objects_image_2": 3,
    }
    row.update(changes)
    return row


def test_a_comma_inside_a_name_is_settled_by_the_question():
    lists = decode_row_lists(_comma_row(objects_1=None, objects_2=None), row_label="4")
    assert lists.choices == COMMA_CHOICES and lists.answer_letters == ["A", "E"]
    assert lists.ground_truth == ["bottle opener", "paring knife, wooden handle"] and lists.notes


def test_a_comma_inside_a_name_is_settled_by_counts_and_object_lists():
    # no question to read the letters from: num_choices says 8 names (9 pieces), the object lists (3 objects
    # each) hold "paring knife, wooden handle" next to different neighbours, so only one grouping fits all
    lists = decode_row_lists(
        _comma_row(question=None, ground_truth_objects="bottle opener, paring knife, wooden handle"), row_label="4"
    )
    assert lists.choices == COMMA_CHOICES and lists.ground_truth == ["bottle opener", "paring knife, wooden handle"]
    assert lists.objects_1 == ["bottle opener", "paring knife, wooden handle", "strainer"]


def test_a_comma_that_nothing_settles_is_refused_naming_row_field_and_value():
    row = _comma_row(question=None, objects_1=None, objects_2=None, answer=None, ground_truth_objects="A")
    row["num_ground_truth_objects"] = 1
    with pytest.raises(SchemaError) as info:
        decode_row_lists(row, row_label="12 of data/main")
    message = str(info.value)
    assert "row 12 of data/main" in message and "ambiguous" in message and "field 'choices'" in message
    assert "paring knife, wooden handle" in message and "JSON" in message
    # and without num_choices, 9 pieces are 9 names only if nothing contradicts it: the question does
    with pytest.raises(SchemaError, match="question lists the choices"):
        decode_row_lists(_comma_row(num_choices=None, choices="bottle opener, gold jigger, strainer"), row_label="3")


@pytest.mark.parametrize(
    "changes, fragment",
    [
        ({"answer": "A, D"}, "field 'answer' gives A, D but field 'ground_truth_objects' gives A, E"),
        ({"num_ground_truth_objects": 3}, "num_ground_truth_objects is 3 but field 'ground_truth_objects' names 2"),
        ({"ground_truth_objects": "A, K"}, "'K' is not one of the 8 choice letters (A-H)"),
        (
            {"ground_truth_objects": "F, A", "num_ground_truth_objects": None, "answer": None},
            "lists objects and 'No objects are in common' together",
        ),
        ({"num_choices": 10}, "holds 9 names, but num_choices is 10"),
        ({"choices": json.dumps(COMMA_CHOICES[::-1])}, "question lists the choices"),
    ],
)
def test_rows_that_contradict_themselves_are_refused(changes, fragment):
    with pytest.raises(SchemaError) as info:
        decode_row_lists(_comma_row(**changes), row_label="5")
    assert "row 5" in str(info.value) and fragment in str(info.value)


def test_an_answer_column_in_free_text_is_not_used_but_recorded():
    lists = decode_row_lists(_comma_row(answer="see the paper"), row_label="1")
    assert lists.answer_checked is False and lists.answer_letters == ["A", "E"]
    assert decode_row_lists(_comma_row(answer="Answer: A, E"), row_label="1").answer_checked is True


# --------------------------------------------------------------------------- eval commono --model none (CLI)


@pytest.mark.parametrize(
    "lists, truth_as",
    [("json", "names"), ("python", "letters"), ("bracketed", "letters"), ("comma", "names"), ("lettered", "letters")],
)
def test_cli_none_baseline_scores_every_row_of_each_encoding(tmp_path, lists, truth_as):
    examples = table_7_examples()
    # a few rows with nothing in common, so accuracy is not trivially 0 or 1
    for ex in examples[:3]:
        ex["truth"], ex["truth_letters"] = [NO_COMMON_OBJECTS], [letters(8)[ex["choices"].index(NO_COMMON_OBJECTS)]]
        ex["objects_2"] = [o for o in ex["objects_2"] if o not in ex["objects_1"]]
    rows = [published_row(i, ex, lists=lists, truth_as=truth_as, question=i % 2 == 0) for i, ex in enumerate(examples)]
    folder = write_published(tmp_path / "published", rows)
    out = tmp_path / "run"
    result = CliRunner().invoke(
        app,
        [
            "eval",
            "commono",
            "--data",
            str(folder),
            "--model",
            "none",
            "--out",
            str(out),
            "--bootstrap",
            "20",
            "--quiet",
        ],
    )
    assert result.exit_code == 0, result.output
    results = json.loads((out / "results.json").read_text())
    overall = results["metrics"]["overall"]
    n = len(examples)
    assert overall["n"] == n and results["skipped"] == 0 and results["dataset"]["rows_scored"] == n
    with_common = [ex for ex in examples if ex["truth"] != [NO_COMMON_OBJECTS]]
    assert overall["accuracy"] == pytest.approx(3 / n)
    # the none baseline's hallucination rate: share of rows with objects in common / their number of choices
    assert overall["hallucination_rate"] == pytest.approx(len(with_common) / n / 8)
    assert (
        overall["hallucination_1plus"] == pytest.approx(len(with_common) / n)
        and overall["object_hallucination_rate"] == 0.0
    )
    reading = results["dataset"]["row_reading"]
    assert reading["list_encodings"]["choices"] == {lists: n} and reading["ground_truth_as"] == {truth_as: n}
    assert (
        reading["question_source"] == {"dataset": (n + 1) // 2, "built": n // 2}
        and reading["answer_column_checked"] == n
    )
    predictions = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert [p["ground_truth"] for p in predictions] == [ex["truth"] for ex in examples]
    assert [p["correct"] for p in predictions] == [ex["truth"] == [NO_COMMON_OBJECTS] for ex in examples]
    assert results["image_protocol"]["protocol"] == "shorter-side-384" and results["prompt"]["question"] == "dataset"


def test_cli_stops_when_the_split_cannot_be_read(tmp_path):
    rows = [published_row(i, ex, lists="bracketed") for i, ex in enumerate(table_7_examples()[:6])]
    for row in rows:
        row["choices"] = row["choices"].replace("[", "[[")  # nothing can read these
    folder = write_published(tmp_path / "published", rows)
    result = CliRunner().invoke(
        app, ["eval", "commono", "--data", str(folder), "--model", "none", "--out", str(tmp_path / "run"), "--quiet"]
    )
    assert result.exit_code == 1 and "cannot be read" in result.output and "field 'choices'" in result.output
    assert not (tmp_path / "run" / "results.json").exists()


def test_a_question_in_other_wording_helps_but_never_refuses():
    other = (
        "Look at both pictures. Options: "
        + ", ".join(f"{letter}. {c}" for letter, c in zip(letters(8), COMMA_CHOICES))
        + ". Which are in both?"
    )
    lists = decode_row_lists(_comma_row(question=other, objects_1=None, objects_2=None), row_label="2")
    assert lists.choices == COMMA_CHOICES  # the letters settle the comma inside "paring knife, wooden handle"
    # its letters cannot be cut exactly (the last item runs on), so a disagreement is not a contradiction
    odd = "Options: A. x, B. y. Which are in both?"
    lists = decode_row_lists(_comma_row(question=odd, choices=json.dumps(COMMA_CHOICES)), row_label="2")
    assert lists.choices == COMMA_CHOICES
