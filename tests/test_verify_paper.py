"""`chains verify --protocol paper` (the default): verification as the Labyrinth authors' harness did it
(refine.py): its question verbatim on every image of the concept and bridge pools, the crop at 336 x 336, only
"Yes" kept (undecided falls), the pools filtered *before* the chains are built, and the chains rebuilt from them."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from commonlink.cli import app
from commonlink.errors import InputError
from commonlink.fileio import read_jsonl
from commonlink.kinds.association.chains import build_chain_files
from commonlink.kinds.association.format import TASKS, read_chain_meta, read_image_table, task_file
from commonlink.kinds.association.prompts import ImageSlot
from commonlink.kinds.association.refine.verifiers import harness_yes_no
from commonlink.kinds.association.refine.verify import verify_tasks
from tests.test_chains_verify import ScriptedBackend, ocl_build  # noqa: F401  (the module's build fixture)

QUESTION = "Analyze the provided image and determine if it contains the {kind}: {concept}.\n Image:"
INSTRUCTION = "Provide only 'Yes' or 'No' as the answer, without any additional explanation."


def _claim(request) -> tuple[str, str]:
    image_id = request.id.split("/")[1]
    concept = request.prompt[0].rsplit(": ", 1)[1].split(".\n")[0]
    return image_id, concept


def _ids_in(out, task) -> set[str]:
    table = read_image_table(task_file(out, task))
    ids = set()
    for row in read_jsonl(task_file(out, task)):
        for key in ("start", "query", "image_1", "image_2"):
            if key in row:
                ids.add(table[row[key]].id)
        for key in ("positive", "negative", "candidates", "memory"):
            ids |= {table[i].id for i in row.get(key, [])}
    return ids


def test_paper_verification_filters_pools_then_rebuilds(ocl_build, tmp_path):  # noqa: F811
    _, out = ocl_build
    table = read_image_table(out / "synchronous.jsonl")
    options = read_chain_meta(out / "synchronous.jsonl")["options"]
    metal = [img.id for img in table if "metal" in img.labels]
    no, vague = set(metal[:2]), set(metal[2:3])

    def answer(request):
        image_id, concept = _claim(request)
        if image_id in vague:
            return "I cannot tell from this picture."
        return "No." if image_id in no and concept == "metal" else "Yes, it does."

    backend = ScriptedBackend(answer)
    summary = verify_tasks([out], tmp_path / "v", backend_instances=backend, progress=False)
    # every image of every concept pool asked, once per concept it carries; no negative asked
    asked = {_claim(r) for r in backend.requests}
    assert asked == {(img.id, c) for img in table for c in img.labels if c in options}
    first = backend.requests[0]
    image_id, concept = _claim(first)
    kind = read_chain_meta(out / "synchronous.jsonl")["concept_kind"]
    assert first.prompt == [QUESTION.format(kind=kind, concept=concept), ImageSlot(0), INSTRUCTION]  # verbatim
    assert {r.images[0].size for r in backend.requests} == {(336, 336)}
    # the unconfirmed images (No, and undecided) left the build; the chains were rebuilt without them
    report = json.loads((tmp_path / "v" / "verification.json").read_text())
    assert report["verify_protocol"] == "paper" and report["pools_filtered_before_build"] is True
    assert set(report["images_left_out"]) == no | vague and report["negatives_asked"] is False
    assert summary.undecided == 1 and summary.rejected == 2
    for task in TASKS:
        if task_file(tmp_path / "v", task).is_file():
            assert not _ids_in(tmp_path / "v", task) & (no | vague)
            meta = read_chain_meta(task_file(tmp_path / "v", task))
            assert meta["verification"]["verify_protocol"] == "paper"
    # the rebuilt files are what a fresh build from the filtered images gives (same settings and seed)
    config_meta = read_chain_meta(out / "synchronous.jsonl")["config"]
    from commonlink.kinds.association.refine.verify import config_of

    config = config_of({"config": config_meta})
    fresh = build_chain_files(
        [img for img in table if img.id not in no | vague], tmp_path / "fresh", config, progress=False
    )
    for task, path in fresh.files.items():
        assert path.read_bytes() == task_file(tmp_path / "v", task).read_bytes()


def test_paper_verification_refuses_strict_options_and_the_cli_runs(ocl_build, tmp_path):  # noqa: F811
    _, out = ocl_build
    backend = ScriptedBackend(lambda r: "Yes")
    with pytest.raises(InputError, match="belong to --protocol strict"):
        verify_tasks([out], tmp_path / "v", backend_instances=backend, on_fail="drop", progress=False)
    with pytest.raises(InputError, match="not a verification protocol"):
        verify_tasks([out], tmp_path / "v", backend_instances=backend, protocol="harness", progress=False)
    table = read_image_table(out / "synchronous.jsonl")
    gone = next(img.id for img in table if "metal" in img.labels)
    (tmp_path / "d.csv").write_text(f"image_id,concept,decision\n{gone},metal,reject\n")
    result = CliRunner().invoke(
        app, ["chains", "verify", str(out), "--out", str(tmp_path / "cli"), "--decisions", str(tmp_path / "d.csv")]
    )
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "cli" / "verification.json").read_text())
    assert report["verify_protocol"] == "paper" and report["prompt"].startswith("Analyze the provided image")
    assert report["images_left_out"] == [gone] and gone not in _ids_in(tmp_path / "cli", "synchronous")
    # a verifier that leaves too few images: a clear error that says verification emptied the pools
    weak = CliRunner().invoke(
        app, ["chains", "verify", str(out), "--out", str(tmp_path / "weak"), "--model", "random", "--quiet"]
    )
    assert weak.exit_code == 1 and "After verification" in weak.output and "--protocol strict" in weak.output
    refused = CliRunner().invoke(
        app, ["chains", "verify", str(out), "--out", str(tmp_path / "x"), "--model", "random", "--no-negatives"]
    )
    assert refused.exit_code != 0 and "--protocol strict" in refused.output


def test_harness_yes_no_reads_the_first_yes_or_no():
    assert harness_yes_no("Yes.") is True and harness_yes_no("no, it is wooden") is False
    assert harness_yes_no("It might be.") is None and harness_yes_no("Noted: yes") is True
