"""Association chain construction: invariants, schedules, seeding, pool errors, resume (no image files needed)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from commonlink.errors import InputError, NotEnoughDataError
from commonlink.fileio import read_jsonl
from commonlink.formats.association import LabelledImage, read_image_table
from commonlink.sampling.chains import (
    AssociationBuilder,
    ChainConfig,
    LabelIndex,
    build_chain_files,
    meta_path,
    parse_pairs,
    plan_build,
)

CONCEPTS = ["metal", "furry", "ripe", "painted", "rusty"]


def _nowhere(path: str) -> dict:
    """A file origin as chain sources record one (its folder, a sha256) for an image these tests never read."""
    return {"type": "file", "path": path, "catalog": "/", "sha256": "0" * 64}


def labelled_set(n: int = 120, seed: int = 0, extra: dict[str, int] | None = None) -> list[LabelledImage]:
    """``n`` images with 1-3 of CONCEPTS each (plus ``extra``: label -> number of images carrying only it)."""
    rng = np.random.default_rng(seed)
    images = []
    for i in range(n):
        labels = [str(c) for c in rng.choice(CONCEPTS, size=int(rng.integers(1, 4)), replace=False)]
        images.append(
            LabelledImage(
                id=f"img{i:05d}",
                labels=labels,
                width=300,
                height=300,
                origin=_nowhere(f"/nowhere/{i}.jpg"),
            )
        )
    for label, count in (extra or {}).items():
        for j in range(count):
            images.append(
                LabelledImage(
                    id=f"{label}{j:03d}",
                    labels=[label],
                    width=300,
                    height=300,
                    origin=_nowhere(f"/nowhere/{label}{j}.jpg"),
                )
            )
    return images


def small_config(**overrides) -> ChainConfig:
    values = dict(
        seed=7,
        chains_per_concept=4,
        max_steps=40,
        warmup=3,
        single_step_per_concept=6,
        deductions_per_concept=6,
        min_pool=5,
        top_k=4,
    )
    values.update(overrides)
    return ChainConfig(**values)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("chains")
    images = labelled_set()
    summary = build_chain_files(images, out, small_config(), progress=False)
    table = read_image_table(summary.files["synchronous"])
    labels = [set(img.labels) for img in table]
    return summary, table, labels


def test_files_and_meta(built):
    summary, table, _ = built
    assert set(summary.files) == {"single_step", "deduction", "synchronous", "asynchronous"}
    for task, path in summary.files.items():
        meta = json.loads(meta_path(path).read_text())
        assert meta["kind"] == "association_chains" and meta["task"] == task
        assert meta["seed"] == 7 and meta["config"]["max_steps"] == 40
        assert meta["rows"] == sum(1 for _ in read_jsonl(path)) == summary.counts[task]
        assert [c["name"] for c in meta["concepts"]] == summary.plan.concepts
        assert all(c["pool_size"] == summary.plan.pool_sizes[c["name"]] for c in meta["concepts"])
    # top-4 concepts by pool size (ties by name)
    sizes = LabelIndex(labelled_set()).pool_sizes()
    assert summary.plan.concepts == sorted(sizes, key=lambda c: (-sizes[c], c))[:4]
    assert summary.counts["synchronous"] == 4 * 4 and summary.steps == (16 + 4 * len(summary.plan.pairs)) * 43


def test_synchronous_invariants(built):
    summary, _, labels = built
    for chain in read_jsonl(summary.files["synchronous"]):
        (concept,) = chain["concepts"]
        assert len(chain["positive"]) == len(chain["negative"]) == len(chain["answer"]) == 43 == chain["num_steps"]
        assert chain["warmup"] == 3 and chain["plan"] == "1" * 43
        queries = [chain["start"]] + chain["positive"][:-1]
        for q, p, n, a in zip(queries, chain["positive"], chain["negative"], chain["answer"]):
            assert concept in labels[q] and concept in labels[p]  # positive shares the concept with its query
            assert concept not in labels[n]  # negative never does
            assert p != n and p != q and a in (0, 1)
        assert 0 < sum(chain["answer"]) < 43  # candidate order is shuffled


def test_asynchronous_schedule_and_bridges(built):
    summary, _, labels = built
    assert summary.plan.pairs, "the fixture has co-occurring concepts"
    rows = list(read_jsonl(summary.files["asynchronous"]))
    assert len(rows) == 4 * len(summary.plan.pairs)
    for chain in rows:
        a, b = chain["concepts"]
        assert chain["plan"] == ("111b222b" * 10)[:43]
        queries = [chain["start"]] + chain["positive"][:-1]
        current = a
        for t, (q, p, n) in enumerate(zip(queries, chain["positive"], chain["negative"])):
            kind = chain["plan"][t]
            if kind == "1":
                current = a
            elif kind == "2":
                current = b
            else:
                assert {a, b} <= labels[p]  # bridge positives carry both concepts
            assert current in labels[q] and current in labels[p]
            assert a not in labels[n] and b not in labels[n]
            assert p != n and p != q


def test_single_step_and_deduction(built):
    summary, _, labels = built
    for task in read_jsonl(summary.files["single_step"]):
        c = task["concept"]
        assert len(task["memory"]) == 3 and len(set(task["memory"])) == 3
        assert all(c in labels[m] for m in task["memory"]) and task["memory_concept"] == c
        positive, negative = task["candidates"][task["answer"]], task["candidates"][1 - task["answer"]]
        assert c in labels[task["query"]] and c in labels[positive] and c not in labels[negative]
        assert len({task["query"], positive, *task["memory"]}) == 5
    options = summary.plan.concepts
    for task in read_jsonl(summary.files["deduction"]):
        shared = labels[task["image_1"]] & labels[task["image_2"]]
        assert task["image_1"] != task["image_2"]
        assert task["gold"] == [o for o in options if o in shared] and task["concept"] in task["gold"]


def test_seeded_reproducible_and_any_chain_rebuilt_alone(built, tmp_path):
    summary, _, _ = built
    again = build_chain_files(labelled_set(), tmp_path / "again", small_config(), progress=False)
    for task, path in summary.files.items():
        assert path.read_bytes() == again.files[task].read_bytes()
    other = build_chain_files(labelled_set(), tmp_path / "other", small_config(seed=8), progress=False)
    assert other.files["synchronous"].read_bytes() != summary.files["synchronous"].read_bytes()
    # chain 2 of concept X, rebuilt alone, equals the one in the file
    index = LabelIndex(labelled_set())
    builder = AssociationBuilder(index, small_config(), summary.plan.concepts)
    rows = list(read_jsonl(summary.files["synchronous"]))
    target = next(r for r in rows if r["id"].endswith("-00002"))
    alone = builder.synchronous(target["concepts"][0], 2).to_json()
    assert alone == target
    pair = summary.plan.pairs[0]
    first_async = next(read_jsonl(summary.files["asynchronous"]))
    assert builder.asynchronous(pair, 0).to_json() == first_async


def test_rerun_skips_finished_tasks_and_rebuilds_changed_ones(tmp_path):
    images = labelled_set()
    first = build_chain_files(images, tmp_path, small_config(), progress=False)
    stamp = {t: p.stat().st_mtime_ns for t, p in first.files.items()}
    second = build_chain_files(images, tmp_path, small_config(), progress=False)
    assert sorted(second.skipped) == sorted(first.files)
    assert all(p.stat().st_mtime_ns == stamp[t] for t, p in second.files.items())
    third = build_chain_files(images, tmp_path, small_config(max_steps=10), progress=False)
    assert "synchronous" not in third.skipped
    assert len(next(read_jsonl(third.files["synchronous"]))["positive"]) == 13


def test_disjoint_negatives_share_no_label_with_query(tmp_path):
    # images whose only label is 'plain', and 10 more labels so label sets span several bytes of the bit table
    images = labelled_set(extra={"plain": 30, **{f"tag{k}": 3 for k in range(10)}})
    summary = build_chain_files(
        images, tmp_path, small_config(negatives="disjoint", tasks=["synchronous", "asynchronous"]), progress=False
    )
    labels = [set(img.labels) for img in read_image_table(summary.files["synchronous"])]
    for task in ("synchronous", "asynchronous"):
        for chain in read_jsonl(summary.files[task]):
            queries = [chain["start"]] + chain["positive"][:-1]
            assert all(not (labels[q] & labels[n]) for q, n in zip(queries, chain["negative"]))


def test_every_negative_shares_no_label_with_its_query_by_default(tmp_path):
    """Paper eqs. 1, 4, 5 (y_query ∩ y_q = ∅) are the default: no option asks for them."""
    images = labelled_set(extra={"plain": 30, **{f"tag{k}": 3 for k in range(10)}})
    config = small_config()
    assert config.negatives == "disjoint"
    summary = build_chain_files(images, tmp_path / "default", config, progress=False)
    labels = [set(img.labels) for img in read_image_table(summary.files["synchronous"])]
    pairs = 0
    for chain in (*read_jsonl(summary.files["synchronous"]), *read_jsonl(summary.files["asynchronous"])):
        for q, n in zip([chain["start"]] + chain["positive"][:-1], chain["negative"]):
            assert not labels[q] & labels[n]
            pairs += 1
    for task in read_jsonl(summary.files["single_step"]):
        assert not labels[task["query"]] & labels[task["candidates"][1 - task["answer"]]]
        pairs += 1
    assert pairs > 1000
    meta = json.loads(meta_path(summary.files["synchronous"]).read_text())
    assert meta["config"]["negatives"] == "disjoint"
    # the old rule stays available, and it does let negatives share a (non-chain) label with their query
    old = build_chain_files(images, tmp_path / "chain", small_config(negatives="chain"), progress=False)
    shared = sum(
        bool(labels[q] & labels[n])
        for chain in read_jsonl(old.files["synchronous"])
        for q, n in zip([chain["start"]] + chain["positive"][:-1], chain["negative"])
    )
    assert shared > 0


def test_invalid_steps_flags_what_check_chain_refuses():
    images = labelled_set(extra={"plain": 30})
    index = LabelIndex(images)
    builder = AssociationBuilder(index, small_config(), ["metal"])
    chain = builder.synchronous("metal", 0)
    assert not builder.invalid_steps(["metal"], chain.plan, chain.start, chain.positive, chain.negative).any()
    sharing = next(
        i
        for i, img in enumerate(index.images)
        if "metal" not in img.labels and set(img.labels) & set(index.images[int(chain.positive[4])].labels)
    )
    negative = chain.negative.copy()
    negative[5] = sharing  # shares a label with step 5's query (the positive of step 4)
    assert np.flatnonzero(
        builder.invalid_steps(["metal"], chain.plan, chain.start, chain.positive, negative)
    ).tolist() == [5]
    chain.negative = negative
    with pytest.raises(Exception, match="shares a label with its query"):
        builder.check_chain(chain)


def test_pool_too_small_names_concept_and_size():
    images = labelled_set(extra={"tiny": 3})
    index = LabelIndex(images)
    with pytest.raises(NotEnoughDataError) as err:
        plan_build(index, small_config(concepts=["metal", "tiny"], memory_size=3))
    assert "'tiny'" in err.value.problem and "3 image(s)" in err.value.problem and "at least 5" in err.value.problem
    # without single-step tasks a pool of 3 is enough
    plan = plan_build(index, small_config(concepts=["metal", "tiny"], tasks=["synchronous"]))
    assert plan.pool_sizes["tiny"] == 3


def test_unknown_concept_suggests_and_empty_bridge_is_reported():
    index = LabelIndex(labelled_set(extra={"lonely": 6}))
    with pytest.raises(InputError) as err:
        plan_build(index, small_config(concepts=["metl"]))
    assert "'metl'" in err.value.problem and "metal" in err.value.fix
    with pytest.raises(NotEnoughDataError) as err:
        plan_build(index, small_config(pairs=[["metal", "lonely"]], tasks=["asynchronous"]))
    assert "bridge pool is empty" in err.value.problem and "'lonely'" in err.value.problem


def test_no_negative_candidate_is_an_error():
    images = [LabelledImage(f"i{i}", ["all"], 300, 300, _nowhere("/x")) for i in range(10)]
    with pytest.raises(NotEnoughDataError) as err:
        plan_build(LabelIndex(images), small_config(concepts=["all"]))
    assert "negative pool" in err.value.problem and "'all'" in err.value.problem


def test_parse_pairs_handles_hyphenated_names():
    known = ["t-shirt", "red", "metal", "furry"]
    assert parse_pairs("metal-furry, t-shirt-red", known) == [["metal", "furry"], ["t-shirt", "red"]]
    assert parse_pairs("t-shirt:red", known) == [["t-shirt", "red"]]
    with pytest.raises(InputError):
        parse_pairs("metal", known)
    with pytest.raises(InputError):
        parse_pairs("metal-metal", known)


def test_tiny_pools_still_alternate(tmp_path):
    """A pool of two forces x, y, x, y...: the positive is never its own query."""
    images = [LabelledImage(f"p{i}", ["duo"], 300, 300, _nowhere("/x")) for i in range(2)]
    images += [LabelledImage(f"n{i}", ["other"], 300, 300, _nowhere("/x")) for i in range(3)]
    summary = build_chain_files(
        images, tmp_path, small_config(concepts=["duo"], tasks=["synchronous"], max_steps=200), progress=False
    )
    chain = next(read_jsonl(summary.files["synchronous"]))
    sequence = [chain["start"]] + chain["positive"]
    assert all(a != b for a, b in zip(sequence, sequence[1:]))


def test_min_pixels_applies_to_given_image_lists(tmp_path):
    images = labelled_set()
    images += [LabelledImage(f"small{i}", ["metal"], 100, 100, _nowhere("/x")) for i in range(5)]
    summary = build_chain_files(images, tmp_path, small_config(tasks=["synchronous"]), progress=False)
    table = read_image_table(summary.files["synchronous"])
    assert len(table) == 120 and not any(img.id.startswith("small") for img in table)
    assert "5 image(s) under 50,000 pixels left out" in summary.plan.notes


def test_chain_lines_are_the_json_of_the_rows_and_plan_codes_fill_forward():
    from commonlink.formats.association import step_concept_codes
    from commonlink.sampling.chains import ChainArrays

    chain = ChainArrays(
        "asynchronous-métal+furry-00001",
        "asynchronous",
        ["métal", "furry"],
        4,
        np.asarray([1, 22, 333], dtype=np.int32),
        np.asarray([5, 6, 7], dtype=np.int32),
        np.asarray([0, 1, 0], dtype=np.uint8),
        "1b2",
        1,
    )
    assert json.loads(chain.to_line()) == chain.to_json()
    assert chain.to_line() == json.dumps(chain.to_json(), ensure_ascii=False, separators=(",", ":"))
    digits = np.array([str(i) for i in range(400)], dtype=object)
    assert chain.to_line(digits) == chain.to_line()
    assert step_concept_codes("b11b22b1").tolist() == [0, 0, 0, 0, 1, 1, 1, 0]
    assert step_concept_codes("").tolist() == []


def test_build_chain_files_holds_the_output_lock_for_library_callers_too(tmp_path):
    """The one-writer rule lives in build_chain_files, not only in the CLI: a second writer is refused and
    nothing is written into the folder the first one holds."""
    from commonlink.locks import output_lock

    out = tmp_path / "chains"
    with output_lock(out, what="commonlink chains"):
        with pytest.raises(InputError, match="being written by commonlink chains"):
            build_chain_files(labelled_set(), out, small_config(), progress=False)
    assert not out.exists()
    assert build_chain_files(labelled_set(), out, small_config(), progress=False).files


def test_an_image_overlapping_every_other_is_kept_out_of_query_and_negative_positions_only(tmp_path):
    """One image shows every label: with disjoint negatives it stays in the image table, is counted, and is
    never a query or a negative; every image gets its own name and every negative shares no label with its query.
    (tests/test_chains_disjoint.py follows the same rule through a photo catalog and a release.)"""
    images = labelled_set(n=60, seed=3)
    images.append(LabelledImage("everything", list(CONCEPTS), 300, 300, _nowhere("/nowhere/all.jpg")))
    summary = build_chain_files(images, tmp_path, small_config(), progress=False)
    assert summary.plan.without_disjoint_negative == 1
    assert any(note.startswith("1 image(s) share a label with every other image") for note in summary.plan.notes)
    meta = json.loads(meta_path(summary.files["synchronous"]).read_text())
    assert meta["images_without_disjoint_negative"] == 1
    table = read_image_table(summary.files["synchronous"])
    ids = [img.id for img in table]
    everything = ids.index("everything")
    names = [img.name for img in table]
    assert len(set(names)) == len(names) and all(n.startswith("the image with ") for n in names)
    labels = [set(img.labels) for img in table]
    for chain in read_jsonl(summary.files["synchronous"]):
        queries = [chain["start"]] + chain["positive"][:-1]
        assert everything not in queries and everything not in chain["negative"]
        for q, n in zip(queries, chain["negative"]):
            assert not labels[q] & labels[n]
    for task in read_jsonl(summary.files["single_step"]):
        assert task["query"] != everything and task["candidates"][1 - task["answer"]] != everything


def test_too_few_usable_images_names_how_many_and_why(tmp_path):
    """Every image carries "metal": none can be a query with a disjoint negative, so tasks that need one fail,
    naming how many images were usable and why; deductions (no negative) still build from the same images."""
    images = [
        LabelledImage(f"i{i}", ["metal", "furry"] if i % 2 else ["metal", "ripe"], 300, 300, _nowhere("/x"))
        for i in range(12)
    ]
    images += [LabelledImage(f"n{i}", ["furry", "ripe"], 300, 300, _nowhere("/x")) for i in range(3)]
    with pytest.raises(NotEnoughDataError) as err:
        build_chain_files(images, tmp_path / "a", small_config(concepts=["metal"]), progress=False)
    assert (
        "Concept 'metal': only 0 of its 12 image(s) can be a query; the request needs at least 2." in err.value.problem
    )
    assert "The other 12 share a label with every other image" in err.value.problem
    assert "--negatives chain" in err.value.fix and "deduction" in err.value.fix
    summary = build_chain_files(
        images, tmp_path / "b", small_config(concepts=["metal"], tasks=["deduction"]), progress=False
    )
    assert summary.counts == {"deduction": 6} and summary.plan.without_disjoint_negative == 15
