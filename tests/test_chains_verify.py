"""The paper's concept presets, object names in memory, `chains verify` (scripted model, human decisions) and
`chains review`, end to end through the CLI, the release builder and the loader."""

from __future__ import annotations

import csv
import json
import pickle
import re
from pathlib import Path

import pytest
from PIL import Image
from typer.testing import CliRunner

from commonlink.cli import app
from commonlink.errors import InputError
from commonlink.eval.backends import BackendInfo
from commonlink.fileio import read_jsonl
from commonlink.kinds.association.format import read_image_table
from commonlink.kinds.association.memory import MemoryBase, image_name
from commonlink.kinds.association.presets import PRESETS, resolve_preset
from commonlink.kinds.association.prompts import prompt_text
from commonlink.kinds.association.refine.verify import VERIFY_PROMPT
from commonlink.kinds.association.refine.verify import verify_tasks as _verify_tasks
from commonlink.kinds.association.task import AssociationSettings, evaluate_association
from commonlink.loaders import load_association

ATTRIBUTES = ["metal", "ripe", "fresh", "natural", "cooked", "painted", "rusty", "furry", "wooden"]
OBJECTS = ["sandwich", "pizza", "broccoli", "orange", "knife", "chair", "apple"]


def verify_tasks(*args, **kwargs):
    """The tests below were written for the post-hoc repair, now ``--protocol strict`` (paper: test_verify_paper)."""
    return _verify_tasks(*args, protocol="strict", **kwargs)


class ScriptedBackend:
    """A backend that answers by rule and records every request (the Backend protocol of eval.backends)."""

    def __init__(self, answer):
        self.answer = answer
        self.requests = []
        self.generate_seconds = 0.0
        self.info = BackendInfo(
            backend="scripted",
            model="scripted-vlm",
            fingerprint="scripted-v1",
            batch_invariant=True,
            default_batch_size=8,
            uses_images=True,
        )

    def generate(self, requests, settings):
        self.requests += list(requests)
        return [self.answer(r) for r in requests]

    def close(self):
        pass


def make_ocl(root: Path) -> Path:
    """An OCL-style pickle: one scene, 56 object boxes; per paper pair (a, b) four objects with a, four with b,
    five with both, and four 'wooden' ones; object names as strings, attribute ids named by names.txt."""
    root.mkdir(parents=True, exist_ok=True)
    scene = Image.new("RGB", (560, 560))
    for k in range(56):
        scene.paste((k * 5 % 256, k * 11 % 256, 90), (k % 8 * 70, k // 8 * 80, k % 8 * 70 + 70, k // 8 * 80 + 80))
    scene.save(root / "scene.jpg")
    groups = []
    for a, b in PRESETS["ocl-attribute"].pairs:
        groups += [[a]] * 4 + [[b]] * 4 + [[a, b]] * 5
    groups += [["wooden"]] * 4
    objects = [
        {
            "obj": OBJECTS[k % len(OBJECTS)],
            "attr": [ATTRIBUTES.index(x) for x in labels],
            "aff": [],
            "box": [k % 8 * 70, k // 8 * 80, k % 8 * 70 + 60, k // 8 * 80 + 70],
        }
        for k, labels in enumerate(groups)
    ]
    (root / "ocl.pkl").write_bytes(pickle.dumps([{"name": "scene.jpg", "objects": objects}], protocol=2))
    (root / "names.txt").write_text("\n".join(ATTRIBUTES) + "\n")
    return root / "ocl.pkl"


SMALL = [
    "--min-pixels",
    "0",
    "--chains",
    "3",
    "--max-steps",
    "12",
    "--single-steps",
    "2",
    "--deductions",
    "2",
    "--memory-size",
    "2",
]


@pytest.fixture(scope="module")
def ocl_build(tmp_path_factory):
    root = tmp_path_factory.mktemp("ocl")
    pkl = make_ocl(root / "src")
    out = root / "chains"
    result = CliRunner().invoke(
        app,
        [
            "chains",
            str(pkl),
            "--source-type",
            "ocl",
            "--label-names",
            str(root / "src" / "names.txt"),
            "--out",
            str(out),
            *SMALL,
        ],
    )
    assert result.exit_code == 0, result.output
    return root, out


def test_presets_load_with_the_papers_sets():
    assert sorted(PRESETS) == ["ocl-affordance", "ocl-attribute", "pangea-action"]
    for preset in PRESETS.values():
        assert len(preset.concepts) == 8 and len(preset.pairs) == 4
        assert all(a in preset.concepts and b in preset.concepts for a, b in preset.pairs)
    assert PRESETS["ocl-attribute"].concepts == (
        "metal",
        "ripe",
        "fresh",
        "natural",
        "cooked",
        "painted",
        "rusty",
        "furry",
    )
    assert PRESETS["ocl-affordance"].pairs == (
        ("sit", "imprint"),
        ("push", "carry"),
        ("cut", "clean"),
        ("open", "break"),
    )
    assert PRESETS["pangea-action"].pairs == (
        ("run", "hit"),
        ("drive", "dress"),
        ("cooking", "build"),
        ("shake", "cut"),
    )
    assert sum(len(p.pairs) for p in PRESETS.values()) == 12  # the paper's 12 asynchronous pairs
    assert resolve_preset("auto", "ocl", "attr").name == "ocl-attribute"
    assert resolve_preset("auto", "ocl", "aff").name == "ocl-affordance"
    assert resolve_preset("auto", "pangea").name == "pangea-action"
    assert resolve_preset("auto", "catalog") is None and resolve_preset("none", "ocl") is None
    with pytest.raises(InputError, match="not a preset"):
        resolve_preset("ocl-colour", "ocl")


def test_ocl_build_uses_the_preset_by_default_and_keeps_object_names(ocl_build):
    _, out = ocl_build
    meta = json.loads((out / "synchronous.jsonl.meta.json").read_text())
    assert meta["config"]["preset"] == "ocl-attribute" and meta["config"]["negatives"] == "disjoint"
    assert [c["name"] for c in meta["concepts"]] == list(PRESETS["ocl-attribute"].concepts)
    assert [p["concepts"] for p in meta["pairs"]] == [list(p) for p in PRESETS["ocl-attribute"].pairs]
    assert meta["concept_kind"] == "attribute"
    table = read_image_table(out / "synchronous.jsonl")
    assert {img.name for img in table} == set(OBJECTS)


def test_missing_preset_labels_is_a_clear_error(tmp_path):
    pkl = make_ocl(tmp_path / "src")
    result = CliRunner().invoke(app, ["chains", str(pkl), "--source-type", "ocl", "--out", str(tmp_path / "o"), *SMALL])
    assert result.exit_code == 1
    assert "ocl-attribute" in result.output and "'metal'" in result.output and "--label-names" in result.output
    assert not (tmp_path / "o").exists()


def test_memory_text_names_objects_in_the_eval_prompts(ocl_build, tmp_path):
    """Selection prompts carry StructM memory built from object names, never hash ids or other attributes."""
    _, out = ocl_build
    table = read_image_table(out / "synchronous.jsonl")
    backend = ScriptedBackend(lambda r: "Image1" if r.choices == ["Image1", "Image2"] else r.choices[0])
    evaluate_association(
        out,
        "synchronous",
        backend_instances=[backend],
        settings=AssociationSettings(memory="structm"),
        out_dir=tmp_path / "run",
        progress=False,
    )
    memories = [
        re.search(r"Given the memory: (\{.*\})", prompt_text(r.prompt)).group(1)
        for r in backend.requests
        if r.choices == ["Image1", "Image2"]
    ]
    assert memories
    ids = {img.id for img in table}
    for memory in memories:
        parsed = eval(memory)  # noqa: S307 - the test's own prompt text: a dict of lists of strings
        assert set(parsed) <= set(PRESETS["ocl-attribute"].concepts)
        names = {n for v in parsed.values() for n in v}
        assert names <= set(OBJECTS) and not names & ids and not names & set(ATTRIBUTES)


def test_pangea_preset_renames_verbnet_nodes_and_names_images(tmp_path):
    root = tmp_path / "pangea"
    nodes = {v: k for k, v in PRESETS["pangea-action"].aliases.items()}  # paper name -> VerbNet node
    rows = []
    k = 0
    for a, b in PRESETS["pangea-action"].pairs:
        for labels in [[a]] * 3 + [[b]] * 3 + [[a, b]] * 3:
            Image.new("RGB", (32, 32), (k * 6, 30, 60)).save(
                (root / "k700").mkdir(parents=True, exist_ok=True) or root / "k700" / f"{k}.jpg"
            )
            rows.append(("k700", f"{k}.jpg", ["person", f"doing {labels[0]}"], [nodes[x] for x in labels]))
            k += 1
    (root / "pangea.pkl").write_bytes(pickle.dumps(rows, protocol=2))
    out = tmp_path / "chains"
    result = CliRunner().invoke(
        app,
        [
            "chains",
            str(root / "pangea.pkl"),
            "--source-type",
            "pangea",
            "--out",
            str(out),
            *SMALL,
            "--tasks",
            "synchronous,asynchronous",
        ],
    )
    assert result.exit_code == 0, result.output
    meta = json.loads((out / "asynchronous.jsonl.meta.json").read_text())
    assert meta["config"]["preset"] == "pangea-action" and meta["concept_kind"] == "action"
    assert [p["concepts"] for p in meta["pairs"]] == [list(p) for p in PRESETS["pangea-action"].pairs]
    table = read_image_table(out / "synchronous.jsonl")
    assert {lb for img in table for lb in img.labels} == set(PRESETS["pangea-action"].concepts)
    assert table[0].name.startswith("person doing ")
    chain = next(iter(load_association(out, "synchronous")))
    memory = MemoryBase("nlm", concept_kind="action")
    step = chain.steps[0]
    memory.update(image_name(step.query), image_name(step.positive), [step.concept])
    assert f"have {step.concept} action" in memory.render() and "'person doing" in memory.render()


# ---------------------------------------------------------------------------------------------- verify
def _rejecting(rejected: set[tuple[str, str]], table, undecided: set[tuple[str, str]] = frozenset()):
    """A model that agrees with the labels except on the (image id, concept) claims in ``rejected`` (it says
    "No." where the label says yes, "Yes." where it says no) and ``undecided`` (it gives no yes or no)."""
    labels = {img.id: set(img.labels) for img in table}

    def answer(request):
        concept = re.search(r'"(.+)"\?', prompt_text(request.prompt)).group(1)
        image_id = request.id.split("/")[1]
        if (image_id, concept) in undecided:
            return "I cannot tell."
        present = concept in labels[image_id]
        if (image_id, concept) in rejected:
            return "No." if present else "Yes."
        return "Yes" if present else "No"

    return answer


def _check_release_invariants(release: Path, rejected: set[tuple[str, str]], *, only_present: bool = False):
    """Every task of the released build satisfies the chain invariants on its (verified) labels. With
    ``only_present``, task types the release lacks (verification may drop one entirely) are passed over."""
    configs = ("synchronous", "asynchronous", "single_step", "deduction")
    if only_present:
        present = set(json.loads((release / "manifest.json").read_text())["parts"])
        configs = tuple(c for c in configs if c in present)
    checked = 0
    for config in ("synchronous", "asynchronous"):
        if config not in configs:
            continue
        for chain in load_association(release, config):
            for step in chain.steps:
                q, p, n = set(step.query.labels), set(step.positive.labels), set(step.negative.labels)
                assert step.concept in q and step.concept in p
                assert not (q & n) and not (set(chain.concepts) & n)
                assert step.positive.id not in (step.negative.id, step.query.id)
                if step.bridge:
                    assert set(chain.concepts) <= p
                assert (step.positive.id, step.concept) not in rejected
                checked += 1
    for task in load_association(release, "single_step") if "single_step" in configs else ():
        assert task.concept in set(task.query.labels) & set(task.positive.labels)
        assert not set(task.query.labels) & set(task.negative.labels)
        assert all(task.concept in m.labels for m in task.memory)
        checked += 1
    for task in load_association(release, "deduction") if "deduction" in configs else ():
        assert task.gold == [o for o in task.options if o in set(task.image_1.labels) & set(task.image_2.labels)]
        checked += 1
    return checked


def test_verify_drops_exactly_the_rejected_steps_and_the_release_passes_every_invariant(ocl_build, tmp_path):
    _, out = ocl_build
    table = read_image_table(out / "synchronous.jsonl")
    chains = list(read_jsonl(out / "synchronous.jsonl"))
    # reject the positives of a few scored steps of the first chain, and every claim of one 'painted' object
    first = chains[0]
    chosen = {(table[first["positive"][t]].id, first["concepts"][0]) for t in (5, 8)}
    painted = next(img.id for img in table if img.labels == ["painted"])
    rejected = chosen | {(painted, "painted")}
    backend = ScriptedBackend(_rejecting(rejected, table))
    summary = verify_tasks([out], tmp_path / "verified", backend_instances=backend, on_fail="drop", progress=False)
    asked = {(r.id.split("/")[1], re.search(r'"(.+)"\?', prompt_text(r.prompt)).group(1)) for r in backend.requests}
    assert len(asked) == len(backend.requests) == summary.claims  # each distinct claim asked once
    assert rejected <= asked and summary.rejected == len(rejected)
    assert prompt_text(backend.requests[0].prompt) == "<image>" + VERIFY_PROMPT.format(
        kind="attribute", concept=backend.requests[0].id.split("/")[2]
    )
    report = json.loads(summary.report.read_text())
    ids = {img.id: i for i, img in enumerate(table)}
    for task in ("synchronous", "asynchronous"):
        kept = {row["id"]: row for row in read_jsonl(tmp_path / "verified" / f"{task}.jsonl")}
        for row in read_jsonl(out / f"{task}.jsonl"):
            codes = [0 if ch == "1" else 1 if ch == "2" else None for ch in row["plan"]]
            bad = set()
            for t, p in enumerate(row["positive"]):
                concepts = row["concepts"] if row["plan"][t] == "b" else None
                current = codes[t] if codes[t] is not None else next(c for c in reversed(codes[:t]) if c is not None)
                for concept in concepts or [row["concepts"][current]]:
                    if (table[p].id, concept) in rejected:
                        bad.add(t)
            bridges = {t for t in bad if row["plan"][t] == "b"}  # rejected bridges are redrawn, not dropped
            bad -= bridges
            dropped = {d["step"] for d in report["drops"] if d["id"] == row["id"] and d["step"] is not None}
            assert dropped == bad, (row["id"], dropped, bad)  # exactly the rejected steps
            new = kept[row["id"]]
            if (table[row["start"]].id, row["concepts"][0]) in rejected:  # a rejected start is redrawn, no step lost
                assert new["start"] != row["start"] and row["concepts"][0] in table[new["start"]].labels
                assert any(r["id"] == row["id"] and r["step"] == -1 for r in report["resampled"])
            # a step whose query changed under it (the old positive equals the new query) gets a verified positive
            redrawn = {r["step"] for r in report["resampled"] if r["id"] == row["id"] and r["step"] >= 0}
            assert bridges <= redrawn
            assert all(
                "no longer linked" in r["reason"] or (r["step"] in bridges and "rejected" in r["reason"])
                for r in report["resampled"]
                if r["id"] == row["id"] and r["step"] >= 0
            )
            survivors = [t for t in range(len(row["positive"])) if t not in bad]
            assert new["num_steps"] == len(new["positive"]) == len(survivors) == row["num_steps"] - len(bad)
            assert [p for t, p in zip(survivors, new["positive"]) if t not in redrawn] == [
                row["positive"][t] for t in survivors if t not in redrawn
            ]
            assert not bad or len(redrawn) < len(survivors) // 2
    reasons = [d["reason"] for d in report["drops"] if d["id"] == first["id"]]
    assert all("the model rejected" in r and "answered 'No.'" in r for r in reasons)
    # single-step / deduction tasks relying on the rejected painted claim are dropped whole
    whole = {d["id"] for d in report["drops"] if d["step"] is None}
    for task in ("single_step", "deduction"):
        for row in read_jsonl(out / f"{task}.jsonl"):
            uses = {
                row.get("query"),
                row.get("image_1"),
                row.get("image_2"),
                *row.get("memory", []),
                *(row.get("candidates", [])[row["answer"] : row["answer"] + 1] if "candidates" in row else []),
            }
            relies = any((table[i].id, row["concept"]) in rejected for i in uses if i is not None)
            assert (row["id"] in whole) == relies
    # the rejected label left the verified image table
    verified_table = read_image_table(tmp_path / "verified" / "synchronous.jsonl")
    assert "painted" not in verified_table[ids[painted]].labels
    meta = json.loads((tmp_path / "verified" / "synchronous.jsonl.meta.json").read_text())
    assert meta["verification"]["model"]["model"] == "scripted-vlm" and meta["verification"]["rejected"] == len(
        rejected
    )
    # the verified files make a release that passes every invariant, and its card says it was verified
    release = tmp_path / "release"
    result = CliRunner().invoke(
        app,
        [
            "release",
            "build",
            *[str(p) for p in sorted((tmp_path / "verified").glob("*.jsonl"))],
            "--out",
            str(release),
            "--name",
            "verified",
            "--license",
            "cc-by-4.0",
            "--no-progress",
        ],
    )
    assert result.exit_code == 0, result.output
    assert _check_release_invariants(release, rejected) > 100
    card = (release / "README.md").read_text()
    assert "Verified with model `scripted-vlm`" in card
    assert (
        "negatives `disjoint`: a negative shares no label at all with its query" in card and "`ocl-attribute`" in card
    )
    names = {t.query.name for t in load_association(release, "single_step")}
    assert names <= set(OBJECTS) and names
    # rerunning replays the cached answers: no new model call
    again = ScriptedBackend(lambda r: pytest.fail("asked again"))
    again.info = backend.info
    verify_tasks([out], tmp_path / "verified", backend_instances=again, on_fail="drop", progress=False)


def test_unverified_card_says_so(ocl_build, tmp_path):
    _, out = ocl_build
    result = CliRunner().invoke(
        app,
        [
            "release",
            "build",
            *[str(p) for p in sorted(out.glob("*.jsonl"))],
            "--out",
            str(tmp_path / "r"),
            "--name",
            "raw",
            "--license",
            "cc-by-4.0",
            "--no-progress",
        ],
    )
    assert result.exit_code == 0, result.output
    card = (tmp_path / "r" / "README.md").read_text()
    assert (
        "Not verified" in card
        and "**Sampling:** negatives `disjoint`" in card
        and "concept preset `ocl-attribute`" in card
    )


def test_review_export_and_decisions_read_back(ocl_build, tmp_path):
    _, out = ocl_build
    review = tmp_path / "review"
    result = CliRunner().invoke(app, ["chains", "review", str(out), "--out", str(review), "--limit", "2"])
    assert result.exit_code == 0, result.output
    page = review / "synchronous" / "synchronous-metal-00000.html"
    text = page.read_text()
    table = read_image_table(out / "synchronous.jsonl")
    chain = next(read_jsonl(out / "synchronous.jsonl"))
    assert "metal" in text and text.count("<select data-image=") == 1 + len(chain["positive"])
    assert all(f'src="../images/{table[p].id}.jpg"' in text for p in chain["positive"])
    assert any(name in text for name in OBJECTS) and "Save decisions" in text
    thumb = Image.open(review / "images" / f"{table[chain['positive'][0]].id}.jpg")
    assert max(thumb.size) <= 200 and not thumb.getexif()
    assert (review / "index.html").read_text().count("<li>") >= 8
    rows = list(csv.DictReader((review / "decisions.csv").read_text().splitlines()))
    assert {"image_id", "name", "concept", "decision", "pages"} <= set(rows[0]) and all(
        r["decision"] == "keep" for r in rows
    )
    # a reviewer rejects one claim in the CSV; another rejects one in a page's saved JSON
    target = table[chain["positive"][3]].id
    for r in rows:
        if r["image_id"] == target and r["concept"] == "metal":
            r["decision"] = "reject"
    with (review / "decisions.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    other = table[chain["positive"][6]].id
    (review / "saved.json").write_text(json.dumps([{"image_id": other, "concept": "metal", "decision": "reject"}]))
    verified = tmp_path / "verified"
    result = CliRunner().invoke(
        app,
        [
            "chains",
            "verify",
            "--protocol",
            "strict",
            str(out),
            "--out",
            str(verified),
            "--decisions",
            str(review / "decisions.csv"),
            "--decisions",
            str(review / "saved.json"),
            "--on-fail",
            "drop",
        ],
    )
    assert result.exit_code == 0, result.output
    report = json.loads((verified / "verification.json").read_text())
    assert report["rejected"] == 2 and report["rejected_by"] == {"human": 2}
    dropped = {d["step"] for d in report["drops"] if d["id"] == chain["id"]}
    bad = {t for t, p in enumerate(chain["positive"]) if table[p].id in (target, other)}
    assert dropped == bad and all(
        "a reviewer rejected" in d["reason"] for d in report["drops"] if d["id"] == chain["id"]
    )


def test_verify_refuses_bad_input(ocl_build, tmp_path):
    _, out = ocl_build
    runner = CliRunner()
    nothing = runner.invoke(app, ["chains", "verify", "--protocol", "strict", str(out), "--out", str(tmp_path / "v")])
    assert nothing.exit_code == 1 and "--model" in nothing.output and "--decisions" in nothing.output
    same = runner.invoke(
        app,
        [
            "chains",
            "verify",
            "--protocol",
            "strict",
            str(out),
            "--out",
            str(out),
            "--model",
            "random",
            "--backend",
            "transformers",
        ],
    )
    assert same.exit_code == 1 and "new folder" in same.output
    (tmp_path / "d.csv").write_text("image_id,concept,decision\nnot-an-image,metal,reject\n")
    stranger = runner.invoke(
        app,
        [
            "chains",
            "verify",
            "--protocol",
            "strict",
            str(out),
            "--out",
            str(tmp_path / "v"),
            "--decisions",
            str(tmp_path / "d.csv"),
        ],
    )
    assert stranger.exit_code == 1 and "not-an-image" in stranger.output
    (tmp_path / "e.csv").write_text("image_id,concept,decision\nx,metal,maybe\n")
    vague = runner.invoke(
        app,
        [
            "chains",
            "verify",
            "--protocol",
            "strict",
            str(out),
            "--out",
            str(tmp_path / "v"),
            "--decisions",
            str(tmp_path / "e.csv"),
        ],
    )
    assert vague.exit_code == 1 and "keep or reject" in vague.output


def test_a_bad_decisions_file_is_refused_before_the_model_is_asked(ocl_build, tmp_path):
    """Decisions are read before the (possibly hours-long) model pass: a typo in them must not cost that pass."""
    _, out = ocl_build
    (tmp_path / "d.csv").write_text("image_id,concept,decision\nnot-an-image,metal,reject\n")
    backend = ScriptedBackend(lambda request: "Yes")
    with pytest.raises(InputError, match="not-an-image"):
        verify_tasks([out], tmp_path / "v", backend_instances=backend, decisions=tmp_path / "d.csv", progress=False)
    assert backend.requests == [] and not (tmp_path / "v" / "verification.json").exists()


def test_verify_with_the_random_baseline_through_the_cli(ocl_build, tmp_path):
    """The real backend path (load_backend): the random baseline answers Yes/No per claim."""
    _, out = ocl_build
    result = CliRunner().invoke(
        app,
        [
            "chains",
            "verify",
            "--protocol",
            "strict",
            str(out / "synchronous.jsonl"),
            "--out",
            str(tmp_path / "v"),
            "--model",
            "random",
        ],
    )
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "v" / "verification.json").read_text())
    assert 0 < report["rejected"] < report["claims"] and report["model"]["model"] == "random"
    assert set(report["tasks"]) == {"synchronous"}
    for row in read_jsonl(tmp_path / "v" / "synchronous.jsonl"):
        assert row["num_steps"] == len(row["positive"]) == len(row["plan"])


@pytest.mark.parametrize("on_fail", ["drop", "resample"])
def test_heavy_rejection_still_gives_a_valid_release(ocl_build, tmp_path, on_fail):
    """The random baseline rejects about half of all claims, bridges and starts included: whatever survives,
    drops, splices and redraws, the release built from it passes every invariant."""
    _, out = ocl_build
    result = CliRunner().invoke(
        app,
        [
            "chains",
            "verify",
            "--protocol",
            "strict",
            str(out),
            "--out",
            str(tmp_path / "v"),
            "--model",
            "random",
            "--on-fail",
            on_fail,
            "--seed",
            "4",
        ],
    )
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "v" / "verification.json").read_text())
    # a rejected absence claim adds the label (the negative shows it): only rejected presence claims must be gone
    rejected = {
        (d["image_id"], d["concept"])
        for d in report["decisions"]
        if d["decision"] == "reject" and d["claim"] == "present"
    }
    assert len(rejected) > (report["claims"] - report["absence_claims"]) // 4
    files = [str(p) for p in sorted((tmp_path / "v").glob("*.jsonl"))]  # an emptied task file is left out with a note
    release = CliRunner().invoke(
        app,
        [
            "release",
            "build",
            *files,
            "--out",
            str(tmp_path / "r"),
            "--name",
            "v",
            "--license",
            "cc-by-4.0",
            "--no-progress",
        ],
    )
    assert release.exit_code == 0, release.output
    assert _check_release_invariants(tmp_path / "r", rejected, only_present=True) > 50


def test_resample_mode_redraws_rejected_positives_from_verified_images(ocl_build, tmp_path):
    _, out = ocl_build
    table = read_image_table(out / "synchronous.jsonl")
    chain = next(read_jsonl(out / "synchronous.jsonl"))
    rejected = {(table[chain["positive"][t]].id, "metal") for t in (4, 7)}
    backend = ScriptedBackend(_rejecting(rejected, table))
    verify_tasks(
        [out / "synchronous.jsonl"], tmp_path / "v", backend_instances=backend, on_fail="resample", progress=False
    )
    report = json.loads((tmp_path / "v" / "verification.json").read_text())
    new = next(read_jsonl(tmp_path / "v" / "synchronous.jsonl"))
    assert new["id"] == chain["id"] and new["num_steps"] == chain["num_steps"]  # nothing dropped: redrawn instead
    bad = {t for t, p in enumerate(chain["positive"]) if (table[p].id, "metal") in rejected}
    redrawn = {r["step"] for r in report["resampled"] if r["id"] == chain["id"]}
    assert bad <= redrawn and not [d for d in report["drops"] if d["id"] == chain["id"]]
    asked_keep = {
        (d["image_id"], d["concept"]) for d in report["decisions"] if d["decision"] == "keep" and d["source"] == "model"
    }
    for t in bad:
        assert (table[new["positive"][t]].id, "metal") in asked_keep  # a verified image, not just any labelled one
    with pytest.raises(InputError, match="--on-fail"):
        verify_tasks([out], tmp_path / "w", backend_instances=backend, on_fail="shrug", progress=False)


@pytest.mark.slow
def test_verify_through_the_transformers_backend_with_a_tiny_llava(ocl_build, tmp_path, tiny_llava):
    """The production path: load_backend("transformers", folder) on a tiny random LLaVA; whatever it says, the
    verified files are consistent and the release invariants hold."""
    pytest.importorskip("transformers")
    _, out = ocl_build
    model_dir = tiny_llava
    result = CliRunner().invoke(
        app,
        [
            "chains",
            "verify",
            "--protocol",
            "strict",
            str(out / "deduction.jsonl"),
            "--out",
            str(tmp_path / "v"),
            "--model",
            str(model_dir),
            "--backend",
            "transformers",
            "--max-new-tokens",
            "4",
        ],
    )
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "v" / "verification.json").read_text())
    assert report["model"]["backend"] == "transformers" and report["claims"] == len(report["decisions"]) > 0
    assert all(d["source"] == "model" and isinstance(d["answer"], str) for d in report["decisions"])


# ---------------------------------------------------------------------------------------------- ordered verifiers
def _claim_of(request) -> tuple[str, str]:
    return request.id.split("/")[1], re.search(r'"(.+)"\?', prompt_text(request.prompt)).group(1)


def test_second_verifier_is_asked_only_where_the_first_is_undecided(ocl_build, tmp_path):
    """App. A.1: "begins with Gemini-1.5-Flash, then GPT4-V once Gemini-1.5-Flash is unable to reach a decision"."""
    _, out = ocl_build
    table = read_image_table(out / "synchronous.jsonl")
    chain = next(read_jsonl(out / "synchronous.jsonl"))
    vague = {(table[chain["positive"][t]].id, "metal") for t in (3, 5, 9)} | {(table[chain["negative"][2]].id, "metal")}
    never = {(table[chain["positive"][9]].id, "metal")}  # neither model decides this one
    rejected_by_second = {(table[chain["positive"][5]].id, "metal")}
    first = ScriptedBackend(_rejecting(set(), table, undecided=vague))
    second = ScriptedBackend(_rejecting(rejected_by_second, table, undecided=never))
    second.info = BackendInfo(
        backend="scripted",
        model="second-vlm",
        fingerprint="second-v1",
        batch_invariant=True,
        default_batch_size=8,
        uses_images=True,
    )
    summary = verify_tasks(
        [out / "synchronous.jsonl"], tmp_path / "v", backend_instances=[first, second], progress=False
    )
    assert {_claim_of(r) for r in second.requests} == vague and len(second.requests) == len(vague)
    assert len(first.requests) == summary.claims
    report = json.loads(summary.report.read_text())
    assert [(m["model"], m["asked"], m["undecided"]) for m in report["models"]] == [
        ("scripted-vlm", summary.claims, len(vague)),
        ("second-vlm", len(vague), 1),
    ]
    by_claim = {(d["image_id"], d["concept"]): d for d in report["decisions"]}
    (undecided,) = never
    assert by_claim[undecided]["decision"] == "undecided" and by_claim[undecided]["applied"] == "keep"
    assert [a["model"] for a in by_claim[undecided]["asked"]] == ["scripted-vlm", "second-vlm"]
    (second_no,) = rejected_by_second
    assert by_claim[second_no]["decision"] == "reject" and by_claim[second_no]["model"] == "second-vlm"
    negative = (table[chain["negative"][2]].id, "metal")
    assert by_claim[negative]["claim"] == "absent" and by_claim[negative]["decision"] == "keep"
    assert report["rejected"] == summary.rejected == 1 and report["undecided"] == summary.undecided == 1
    assert "undecided: 1" in (tmp_path / "v" / "verification.md").read_text()
    # the undecided claim kept its label; with --undecided reject it is rejected, but still reported as undecided
    assert (
        "metal"
        in read_image_table(tmp_path / "v" / "synchronous.jsonl")[[img.id for img in table].index(undecided[0])].labels
    )
    strict = verify_tasks(
        [out / "synchronous.jsonl"],
        tmp_path / "w",
        backend_instances=[first, second],
        undecided="reject",
        progress=False,
    )
    report = json.loads(strict.report.read_text())
    by_claim = {(d["image_id"], d["concept"]): d for d in report["decisions"]}
    assert by_claim[undecided]["decision"] == "undecided" and by_claim[undecided]["applied"] == "reject"
    assert strict.rejected == 1 and strict.undecided == 1
    assert any("no verifier could decide" in r["reason"] for r in report["resampled"] + report["drops"])


def test_a_negative_that_shows_the_concept_is_replaced(ocl_build, tmp_path):
    _, out = ocl_build
    table = read_image_table(out / "synchronous.jsonl")
    chain = next(read_jsonl(out / "synchronous.jsonl"))
    negative = table[chain["negative"][4]].id
    backend = ScriptedBackend(_rejecting({(negative, "metal")}, table))
    summary = verify_tasks([out], tmp_path / "v", backend_instances=backend, progress=False)
    report = json.loads(summary.report.read_text())
    (decision,) = [d for d in report["decisions"] if (d["image_id"], d["concept"]) == (negative, "metal")]
    assert decision["claim"] == "absent" and decision["decision"] == "reject" and decision["answer"] == "Yes."
    verified = read_image_table(tmp_path / "v" / "synchronous.jsonl")
    assert "metal" in next(img for img in verified if img.id == negative).labels  # the label the source missed
    new = next(r for r in read_jsonl(tmp_path / "v" / "synchronous.jsonl") if r["id"] == chain["id"])
    assert new["num_steps"] == chain["num_steps"] and verified[new["negative"][4]].id != negative
    for task in ("synchronous", "asynchronous"):
        for row in read_jsonl(tmp_path / "v" / f"{task}.jsonl"):
            assert all(not {*row["concepts"]} & set(verified[n].labels) for n in row["negative"])
    for row in read_jsonl(tmp_path / "v" / "single_step.jsonl"):
        assert verified[row["candidates"][1 - row["answer"]]].id != negative or row["concept"] != "metal"
    off = verify_tasks(
        [out / "synchronous.jsonl"], tmp_path / "w", backend_instances=backend, negatives=False, progress=False
    )
    assert off.rejected == 0 and off.claims < summary.claims


def _runs(plan: str) -> list[int]:
    """Lengths of the runs of one concept between bridges (the last, possibly cut, run included)."""
    return [len(run) for run in plan.split("b")]


def test_asynchronous_chains_keep_their_period_after_verification(ocl_build, tmp_path):
    """Resample (the default) keeps every kept step's place in the 3-1-3-1 pattern, under heavy rejection."""
    _, out = ocl_build
    result = CliRunner().invoke(
        app,
        [
            "chains",
            "verify",
            "--protocol",
            "strict",
            str(out / "asynchronous.jsonl"),
            "--out",
            str(tmp_path / "v"),
            "--model",
            "random",
            "--seed",
            "4",
        ],
    )
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "v" / "verification.json").read_text())
    assert report["on_fail"] == "resample" and report["rejected"] > report["claims"] // 4
    before = {row["id"]: row["plan"] for row in read_jsonl(out / "asynchronous.jsonl")}
    after = {row["id"]: row["plan"] for row in read_jsonl(tmp_path / "v" / "asynchronous.jsonl")}
    assert after
    for chain_id, plan in after.items():
        assert before[chain_id].startswith(plan)  # a prefix of the built plan: cut, never spliced
        assert all(n == 3 for n in _runs(plan)[:-1]) and _runs(plan)[-1] <= 3
    # drop mode, by contrast, shortens runs (the reason it is no longer the default)
    CliRunner().invoke(
        app,
        [
            "chains",
            "verify",
            "--protocol",
            "strict",
            str(out / "asynchronous.jsonl"),
            "--out",
            str(tmp_path / "d"),
            "--model",
            "random",
            "--seed",
            "4",
            "--on-fail",
            "drop",
        ],
    )
    dropped = [row["plan"] for row in read_jsonl(tmp_path / "d" / "asynchronous.jsonl")]
    assert any(n < 3 for plan in dropped for n in _runs(plan)[:-1])
