"""Concept perception (Labyrinth of Links App. B, Table 4): the grid of four complexities under four strategies
as an eval task, scored by hand with a scripted model, end to end with the tiny LLaVA, printed as Table 4."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from commonlink.cli import app
from commonlink.errors import InputError
from commonlink.eval.backends.base import BackendInfo
from commonlink.kinds.association.concept_prompts import META_INSTRUCTION, SELECTION_OUTPUT
from commonlink.kinds.association.concept_task import ConceptPerceptionTask, evaluate_concept_perception, render_table4
from commonlink.kinds.association.loader import open_association
from commonlink.kinds.association.prompts import ImageSlot, prompt_text
from tests.fixtures.tiny_chains import write_tiny_chain_files

TABLE_4_HEADER = "| Model | Strategy | TaskInstr | MetaInstr | TaskInstr w/ DedPo | MetaInstr w/ DedPo |"


@pytest.fixture(scope="module")
def chain_dir(tmp_path_factory):
    return write_tiny_chain_files(
        tmp_path_factory.mktemp("concept"), single_step_per_concept=4, tasks=["single_step"], concept_kind="attribute"
    )


class Scripted:
    """Right on Task-Instruction selections and deductions, wrong on Meta-Instruction selections; it reads the
    truth from the test's map of request ids (filled from the requests the task builds)."""

    def __init__(self, truth):
        self.truth, self.requests = truth, []
        self.info = BackendInfo(
            backend="scripted",
            model="scripted",
            fingerprint="scripted",
            batch_invariant=True,
            default_batch_size=16,
            uses_images=False,
        )
        self.generate_seconds = 0.0

    def generate(self, requests, settings):
        self.requests += list(requests)
        out = []
        for r in requests:
            kind, truth = self.truth[r.id]
            if kind == "select-task":
                out.append(f"Image{truth + 1}")
            elif kind == "select-meta":
                out.append(f"Image{2 - truth}")
            else:
                out.append("Reasoning: both show it.\nAnswer: " + truth)
        return out

    def close(self):
        pass


def _truth(task: ConceptPerceptionTask, split) -> dict:
    truth = {}
    for i in range(len(split)):
        for request, meta in task.requests(split.get(i, images=False)):
            kind = request.id.split("/")[2]
            truth[request.id] = (kind, meta["answer"] if kind.startswith("select") else meta["concept"])
    return truth


def test_grid_scores_each_complexity_by_hand(chain_dir, tmp_path):
    task = ConceptPerceptionTask(chain_dir, seed=3)
    split = task.open()
    backend = Scripted(_truth(task, split))
    results = evaluate_concept_perception(
        chain_dir, out_dir=tmp_path / "run", backend_instances=[backend], seed=3, n_boot=10, progress=False
    )
    table = results["metrics"]["table"]
    assert list(table) == ["normal", "comknow", "one-shot", "cot"]
    for strategy, cells in table.items():
        assert list(cells) == ["task", "meta", "task+ded", "meta+ded"]
        assert [cells[c]["success_ratio"] for c in cells] == [1.0, 0.0, 1.0, 0.0], strategy
        assert all(cells[c]["n"] == len(split) for c in cells)
    assert len(backend.requests) == len(split) * 4 * 3  # per row and strategy: two selections and one deduction
    records = [json.loads(x) for x in (tmp_path / "run" / "predictions.jsonl").read_text().splitlines()]
    assert len(records) == len(backend.requests) and all(
        r["correct"] == (r.get("instruction") != "meta") for r in records
    )
    md = (tmp_path / "run" / "results.md").read_text()
    assert md.startswith(TABLE_4_HEADER) and "| | Random | 0.5 | 0.5 | 0.25 | 0.25 |" in md
    assert (
        "| scripted | Normal | 1.000 | 0.000 | 1.000 | 0.000 |" in md
        and "| | CoT | 1.000 | 0.000 | 1.000 | 0.000 |" in md
    )
    # a rerun replays the cache: nothing is asked again
    again = Scripted({})
    again.info = backend.info
    rerun = evaluate_concept_perception(
        chain_dir, out_dir=tmp_path / "run", backend_instances=[again], seed=3, n_boot=10, progress=False
    )
    assert again.requests == [] and rerun["metrics"]["table"]["cot"]["task"]["success_ratio"] == 1.0


def test_prompts_follow_the_paper_where_it_prints_them(chain_dir):
    task = ConceptPerceptionTask(chain_dir, seed=3)
    split = task.open()
    row = split.get(0, images=False)
    items = {(m["strategy"], m.get("instruction", "deduce")): (r, m) for r, m in task.requests(row)}
    kind = row.task.concept_kind
    meta_text = prompt_text(items[("normal", "meta")][0].prompt)
    assert meta_text == (
        META_INSTRUCTION.format(kind=kind) + " Original image:<image>. Candidate images: Image1:<image>, "
        "Image2:<image>. " + SELECTION_OUTPUT
    )
    assert "Determine the relationship between the original image and the candidate images" in meta_text  # Table 3
    task_text = prompt_text(items[("normal", "task")][0].prompt)
    assert f'"{row.task.concept}"' in task_text and "Determine the relationship" not in task_text
    deduce = items[("normal", "deduce")]
    assert prompt_text(deduce[0].prompt).startswith(
        f"Generate the common {kind} between the original image and selected images."
    )
    assert (
        deduce[1]["offered"] == deduce[0].choices
        and row.task.concept in deduce[1]["offered"]
        and len(deduce[1]["offered"]) == 2
    )
    assert deduce[1]["gold"] == [row.task.concept]
    knowledge = prompt_text(items[("comknow", "meta")][0].prompt)
    assert (
        knowledge.startswith("Common knowledge: An attribute is") and '"metal": made of metal' in knowledge
    )  # every option glossed
    assert '"furry": covered with fur' in knowledge and knowledge.count('": ') == 4
    # One-shot: a solved example of another task of the same concept comes first, its three images first
    shot, _ = items[("one-shot", "task")]
    assert len(shot.images) == 6 and [s.index for s in shot.prompt if isinstance(s, ImageSlot)] == [0, 1, 2, 3, 4, 5]
    assert re.search(r"Here is an example\..* Answer: Image[12]\.\nNow the question\.", prompt_text(shot.prompt), re.S)
    example = split.split.get(split.example_index(0, row.task.concept))
    assert example.concept == row.task.concept and example.id != row.task.id
    cot = prompt_text(items[("cot", "task")][0].prompt)
    assert "Reasoning: The original image shows" in cot and cot.endswith(
        "on the last line as 'Answer: Image1' or 'Answer: Image2'."
    )
    assert "Reasoning:" not in prompt_text(shot.prompt)


def test_bad_grid_options_are_refused(chain_dir):
    with pytest.raises(InputError, match="--strategy zero-shot"):
        ConceptPerceptionTask(chain_dir, strategies=["zero-shot"])
    with pytest.raises(InputError, match="--complexity"):
        ConceptPerceptionTask(chain_dir, complexities=["task+cot"])
    with pytest.raises(InputError, match="none"):
        evaluate_concept_perception(chain_dir, model="none", progress=False)


def test_render_table4_puts_each_model_in_its_own_block():
    cell = {"success_ratio": 0.5, "n": 4, "se": 0.1}
    runs = [
        {
            "model": m,
            "concept_perception": {"complexities": ["task", "meta", "task+ded", "meta+ded"]},
            "metrics": {
                "table": {s: {c: cell for c in ("task", "meta", "task+ded", "meta+ded")} for s in ("normal", "cot")}
            },
        }
        for m in ("QWen-VL", "LLaVA-NeXT")
    ]
    lines = render_table4(runs).splitlines()
    assert lines[0] == TABLE_4_HEADER
    assert (
        lines[2]
        == "| | | Individual Perception | Individual Perception | Combination Perception | Combination Perception |"
    )
    assert lines[4:] == [
        "| QWen-VL | Normal | 0.500 | 0.500 | 0.500 | 0.500 |",
        "| | CoT | 0.500 | 0.500 | 0.500 | 0.500 |",
        "| LLaVA-NeXT | Normal | 0.500 | 0.500 | 0.500 | 0.500 |",
        "| | CoT | 0.500 | 0.500 | 0.500 | 0.500 |",
    ]


@pytest.mark.slow
def test_the_grid_runs_end_to_end_with_the_tiny_model_and_prints_table_4(chain_dir, tmp_path, tiny_llava):
    """The production path: `commonlink eval concept` with a tiny random LLaVA through transformers and the
    random baseline; whatever they answer, every cell is a ratio over the rows run, printed as Table 4."""
    pytest.importorskip("transformers")
    result = CliRunner().invoke(
        app,
        [
            "eval",
            "concept",
            "--data",
            str(chain_dir),
            "--model",
            str(tiny_llava),
            "--model",
            "random",
            "--limit",
            "3",
            "--max-new-tokens",
            "4",
            "--out",
            str(tmp_path / "grid"),
            "--bootstrap",
            "10",
            "--quiet",
            "--allow-unparseable",  # the tiny model answers no letters
        ],
    )
    assert result.exit_code == 0, result.output
    printed = result.output[
        result.output.index(TABLE_4_HEADER) :
    ]  # after transformers' loading bar (stderr, no newline)
    lines = [ln for ln in printed.splitlines() if ln.startswith("|")]
    assert lines[0] == TABLE_4_HEADER and lines[3] == "| | Random | 0.5 | 0.5 | 0.25 | 0.25 |"
    assert [ln.split("|")[2].strip() for ln in lines[4:]] == ["Normal", "ComKnow", "One-shot", "CoT"] * 2
    assert lines[4].split("|")[1].strip() == str(tiny_llava) and lines[8].split("|")[1].strip() == "random"
    for ln in lines[4:]:
        assert all(0.0 <= float(v) <= 1.0 for v in ln.split("|")[3:7])
    assert (tmp_path / "grid" / "table4.md").read_text().splitlines()[0] == TABLE_4_HEADER
    folders = [p for p in (tmp_path / "grid").iterdir() if p.is_dir()]
    assert len(folders) == 2
    for folder in folders:
        results = json.loads((folder / "results.json").read_text())
        assert results["task"] == "concept_perception" and results["dataset"]["tasks_run"] == 3
        assert all(c["n"] == 3 for cells in results["metrics"]["table"].values() for c in cells.values())
    tiny = next(f for f in folders if "random" not in f.name)
    assert len((tiny / "predictions.jsonl").read_text().splitlines()) == 3 * 4 * 3
    assert len(open_association(chain_dir, "single_step")) > 3


# ----------------------------------------------------------------------------------- strategies for association tasks
class _Chooser:
    """Reasons first, naming every option, then answers the gold on its last line (a CoT-style answer)."""

    def __init__(self):
        self.info = BackendInfo(
            backend="scripted",
            model="cot",
            fingerprint="cot",
            batch_invariant=True,
            default_batch_size=16,
            uses_images=False,
        )
        self.generate_seconds, self.prompts = 0.0, []

    def generate(self, requests, settings):
        self.prompts += [prompt_text(r.prompt) for r in requests]
        return [f"Both could be {', '.join(r.choices)}.\nAnswer: {r.choices[0]}" for r in requests]

    def close(self):
        pass


def test_strategies_are_selectable_for_association_tasks(tmp_path_factory, tmp_path):
    from commonlink.kinds.association.task import AssociationSettings, evaluate_association

    chains = write_tiny_chain_files(
        tmp_path_factory.mktemp("assoc-strategy"), tasks=["deduction"], concept_kind="attribute"
    )
    runs = {}
    for strategy in ("normal", "comknow", "cot"):
        backend = _Chooser()
        results = evaluate_association(
            chains,
            "deduction",
            backend_instances=[backend],
            out_dir=tmp_path / strategy,
            n_boot=10,
            settings=AssociationSettings(strategy=strategy),
            progress=False,
            report=False,
        )
        assert results["association"]["strategy"] == strategy
        runs[strategy] = (
            backend.prompts,
            [json.loads(x) for x in (tmp_path / strategy / "predictions.jsonl").read_text().splitlines()],
        )
    normal, comknow, cot = (runs[s][0][0] for s in ("normal", "comknow", "cot"))
    assert (
        normal.startswith("Generate the common attribute")
        and "Your response should only include shared attribute" in normal
    )
    assert comknow.startswith("Common knowledge: An attribute is") and comknow.endswith("\n" + normal)
    assert "on the last line as 'Answer: <attribute>'" in cot
    # CoT is read from its Answer line: the reasoning names every option, the answer one
    assert all(r["deduction"] == [r["outputs"][0].rsplit(": ", 1)[1]] for r in runs["cot"][1])
    assert all(r["deduction"] is None or len(r["deduction"]) > 1 for r in runs["normal"][1])
    with pytest.raises(InputError, match="--strategy"):
        AssociationSettings(strategy="few-shot")
    # chains: the selection carries the strategy's worked example in front of the memory and Table 3's question
    chain_dir = write_tiny_chain_files(
        tmp_path_factory.mktemp("assoc-chains"), tasks=["synchronous"], concept_kind="attribute"
    )
    backend = _Chooser()
    evaluate_association(
        chain_dir,
        "synchronous",
        backend_instances=[backend],
        out_dir=tmp_path / "chains",
        n_boot=10,
        limit=1,
        settings=AssociationSettings(strategy="one-shot", memory="nom"),
        progress=False,
        report=False,
    )
    selection = next(p for p in backend.prompts if "Candidate images" in p)
    assert selection.startswith('Example: an original image of an object with the attribute "metal"')
    assert "Answer: Image2.\nDetermine the relationship between the original image" in selection
