"""Disjoint negatives (paper eq. 1) on photo catalogs where no disjoint negative exists for some images: those
images are kept out of the query and negative positions only, counted in the summary, the sidecars and the
card, and the build fails only when too few usable images remain (issue 23)."""

from __future__ import annotations

import json

import pytest
from PIL import Image
from typer.testing import CliRunner

from commonlink.cli import app
from commonlink.errors import NotEnoughDataError
from commonlink.fileio import read_jsonl, sha256_file
from commonlink.formats.catalog import CatalogRecord, write_catalog
from commonlink.kinds.association.chain_sources import read_source
from commonlink.kinds.association.chains import ChainConfig, build_chain_files, meta_path
from commonlink.kinds.association.format import LabelledImage
from commonlink.loaders import load_association

#: Multi-object photos: every group has a disjoint partner, apple+mug is the bridge of the apple-mug pair.
GROUPS = [["apple"], ["mug"], ["keys"], ["book"], ["apple", "keys"], ["mug", "book"], ["apple", "mug"]]
EVERYTHING = ["apple", "mug", "keys", "book"]


def photo_catalog(folder, groups):
    (folder / "images").mkdir(parents=True)
    records = []
    for i, objects in enumerate(groups):
        path = folder / "images" / f"{i}.jpg"
        Image.new("RGB", (32 + i, 24), (i * 9 % 256, 60, 200 - i * 5)).save(path, quality=90)
        records.append(
            CatalogRecord(
                id=f"photo{i:02d}",
                path=f"images/{i}.jpg",
                objects=objects,
                source="real",
                scene_id=f"s{i}",
                width=32 + i,
                height=24,
                sha256=sha256_file(path),
            )
        )
    write_catalog(folder, records)
    return folder


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """21 photos in the groups above plus one (photo21) that shows every object: it shares a label with every
    other photo. Built with default (disjoint) negatives, then released."""
    root = tmp_path_factory.mktemp("disjoint")
    catalog = photo_catalog(root / "catalog", GROUPS * 3 + [EVERYTHING])
    chains, release = root / "chains", root / "release"
    runner = CliRunner()
    result = runner.invoke(
        app,
        [
            "chains",
            str(catalog),
            "--out",
            str(chains),
            "--min-pixels",
            "0",
            "--concepts",
            "apple,mug,keys,book",
            "--pairs",
            "apple-mug",
            "--chains",
            "6",
            "--max-steps",
            "12",
            "--single-steps",
            "25",
            "--deductions",
            "10",
            "--memory-size",
            "3",
            "--seed",
            "11",
        ],
        env={"COLUMNS": "240"},
    )
    assert result.exit_code == 0, result.output
    files = sorted(str(p) for p in chains.glob("*.jsonl"))
    released = runner.invoke(
        app,
        [
            "release",
            "build",
            *files,
            "--out",
            str(release),
            "--name",
            "disjoint-test",
            "--license",
            "cc-by-4.0",
            "--no-progress",
        ],
    )
    assert released.exit_code == 0, released.output
    table = list(read_jsonl(chains / "images.jsonl"))
    everything = next(row["index"] for row in table if row["id"] == "photo21")
    return result.output, chains, release, table, everything


def test_the_overlapping_photo_is_counted_in_the_summary_sidecars_and_card(built):
    output, chains, release, table, _ = built
    assert len(table) == 22  # kept in the image table
    assert "1 image(s) share a label with every other image" in " ".join(output.split())
    for task in ("single_step", "deduction", "synchronous", "asynchronous"):
        meta = json.loads(meta_path(chains / f"{task}.jsonl").read_text())
        assert meta["images_without_disjoint_negative"] == 1
        assert {c["name"]: c["no_disjoint_negative"] for c in meta["concepts"]} == dict.fromkeys(EVERYTHING, 1)
        assert meta["pairs"] == [{"concepts": ["apple", "mug"], "bridge_pool_size": 4, "no_disjoint_negative": 1}]
    card = " ".join((release / "README.md").read_text().split())
    assert "never a query or a negative (no disjoint negative exists for them): 1." in card


def test_the_overlapping_photo_appears_only_where_no_negative_is_drawn_for_it(built):
    _, chains, _, _, everything = built
    seen = set()
    for task in read_jsonl(chains / "single_step.jsonl"):
        positive, negative = task["candidates"][task["answer"]], task["candidates"][1 - task["answer"]]
        assert everything not in (task["query"], negative)
        seen |= {"single-step positive"} if positive == everything else set()
        seen |= {"memory"} if everything in task["memory"] else set()
    for task in read_jsonl(chains / "deduction.jsonl"):
        seen |= {"deduction"} if everything in (task["image_1"], task["image_2"]) else set()
    for kind in ("synchronous", "asynchronous"):
        for chain in read_jsonl(chains / f"{kind}.jsonl"):
            queries = [chain["start"], *chain["positive"][:-1]]
            assert everything not in queries and everything not in chain["negative"]
            seen |= {"last positive"} if chain["positive"][-1] == everything else set()
    # the allowed positions it reached with this seed (a chain's last positive is allowed too)
    assert {"single-step positive", "memory", "deduction"} <= seen


def test_release_invariants_hold_on_every_row(built):
    _, _, release, _, _ = built
    steps = 0
    for kind in ("synchronous", "asynchronous"):
        for chain in load_association(release, kind):
            for step in chain.steps:
                positive, negative = step.candidates[step.answer], step.candidates[1 - step.answer]
                assert "photo21" not in (step.query.id, negative.id)
                assert step.concept in positive.labels and step.concept in step.query.labels
                assert not set(step.query.labels) & set(negative.labels)
                assert not set(chain.concepts) & set(negative.labels) and positive.id != negative.id
                steps += 1
    assert steps == (4 * 6 + 6) * (3 + 12)
    for task in load_association(release, "single_step"):
        positive, negative = task.candidates[task.answer], task.candidates[1 - task.answer]
        assert "photo21" not in (task.query.id, negative.id)
        assert task.concept in positive.labels and not set(task.query.labels) & set(negative.labels)
        assert all(task.memory_concept in m.labels for m in task.memory)


def test_a_pair_leaves_out_of_its_queries_images_whose_disjoint_images_all_carry_its_other_concept(tmp_path):
    """photo "x" (apple, pen) has disjoint images, but every one carries mug: it can be a query of apple chains
    (a mug photo is its negative) but not of apple-mug chains, whose negatives carry neither apple nor mug."""

    def img(name, labels):
        return LabelledImage(name, labels, 300, 300, {"type": "file", "path": f"/nowhere/{name}.jpg"})

    images = [img("x", ["apple", "pen"])]
    images += [img(f"am{i}", ["apple", "mug"]) for i in range(3)] + [img(f"a{i}", ["apple"]) for i in range(3)]
    images += [img(f"m{i}", ["mug"]) for i in range(3)] + [img(f"p{i}", ["pen"]) for i in range(3)]
    config = ChainConfig(
        seed=2,
        concepts=["apple"],
        pairs=[["apple", "mug"]],
        chains_per_concept=8,
        max_steps=30,
        single_step_per_concept=0,
        deductions_per_concept=0,
        tasks=["synchronous", "asynchronous"],
    )
    summary = build_chain_files(images, tmp_path, config, progress=False)
    assert summary.plan.without_disjoint_negative == 0 and summary.plan.no_disjoint_negative["apple+mug"] == 1
    assert any(
        n.startswith("pair apple+mug: 1 more image(s) of its pools are never its queries") for n in summary.plan.notes
    )
    x = [row["id"] for row in read_jsonl(tmp_path / "images.jsonl")].index("x")
    pair_queries = {q for c in read_jsonl(summary.files["asynchronous"]) for q in [c["start"], *c["positive"][:-1]]}
    apple_queries = {q for c in read_jsonl(summary.files["synchronous"]) for q in [c["start"], *c["positive"][:-1]]}
    assert x not in pair_queries and x in apple_queries


def test_the_build_fails_only_when_too_few_usable_images_remain(tmp_path):
    """Chains need 2 images of a pool that can be queries: with 2 they build, with 1 the error says how many of
    the pool's images were usable and why."""

    def catalog(name, usable):
        groups = [["apple", "keys"]] * 4 + [["apple"]] * usable + [["keys", "book"]] * 3
        return photo_catalog(tmp_path / name, groups)

    args = ["--min-pixels", "0", "--concepts", "apple", "--tasks", "synchronous", "--chains", "2", "--max-steps", "5"]
    ok = CliRunner().invoke(app, ["chains", str(catalog("two", 2)), "--out", str(tmp_path / "out2"), *args])
    assert ok.exit_code == 0, ok.output
    assert "4 image(s) share a label with every other image" in " ".join(ok.output.split())
    with pytest.raises(NotEnoughDataError) as err:
        build_chain_files(
            _read(catalog("one", 1)),
            tmp_path / "out1",
            ChainConfig(concepts=["apple"], tasks=["synchronous"], chains_per_concept=2, max_steps=5, min_pixels=0),
            progress=False,
        )
    assert err.value.problem.startswith(
        "Concept 'apple': only 1 of its 5 image(s) can be a query; the request needs at least 2."
    )
    assert (
        "The other 4 share a label with every other image, so no disjoint negative exists for them" in err.value.problem
    )


def _read(catalog):
    return read_source(str(catalog), source_type="catalog")[0]


def test_a_chain_s_last_positive_may_be_an_image_without_a_disjoint_negative(tmp_path):
    """The last positive of a chain is never a query, so it is drawn from the whole pool: images that share a label
    with every other image end chains, and start or continue none."""
    images = [LabelledImage(f"both{i}", ["apple", "keys"], 300, 300, {"type": "file", "path": "/x"}) for i in range(3)]
    images += [LabelledImage(f"apple{i}", ["apple"], 300, 300, {"type": "file", "path": "/x"}) for i in range(2)]
    images += [LabelledImage(f"keys{i}", ["keys"], 300, 300, {"type": "file", "path": "/x"}) for i in range(2)]
    config = ChainConfig(
        seed=4, concepts=["apple"], tasks=["synchronous"], chains_per_concept=20, max_steps=3, min_pixels=0
    )
    summary = build_chain_files(images, tmp_path, config, progress=False)
    ids = [row["id"] for row in read_jsonl(tmp_path / "images.jsonl")]
    lonely = {i for i, name in enumerate(ids) if name.startswith("both")}
    assert summary.plan.without_disjoint_negative == 3
    chains = list(read_jsonl(summary.files["synchronous"]))
    assert not lonely & {q for c in chains for q in [c["start"], *c["positive"][:-1]]}
    assert lonely & {c["positive"][-1] for c in chains}
