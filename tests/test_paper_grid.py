"""The papers' experiment grid as defaults: Table 3's deduction options, the deduction scoring rules, the
perception baseline's generation room, and Common-O §4.2's hallucination-vs-similarity analysis."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from commonlink.errors import InputError
from commonlink.kinds.association.chains import build_chain_files, use_preset
from commonlink.kinds.association.loader import load_association
from commonlink.kinds.association.presets import PRESETS
from commonlink.kinds.association.prompts import deduction_prompt, prompt_text
from commonlink.kinds.association.task import AssociationSettings, deduction_correct, evaluate_association
from tests.fixtures.tiny_chains import tiny_chain_config, tiny_labelled_images

#: Labyrinth of Links, Table 3, deduction step, output instruction (verbatim, the paper's quotes normalised).
TABLE_3_OPTIONS = ["break", "carry", "clean", "cut", "open", "push", "sit", "imprint"]


@pytest.fixture(scope="module")
def affordance_build(tmp_path_factory):
    root = tmp_path_factory.mktemp("aff")
    images = tiny_labelled_images(root / "imgs", n=80, concepts=tuple(PRESETS["ocl-affordance"].concepts[::-1]))
    config = replace(
        tiny_chain_config(concepts=None, pairs=None, tasks=["deduction"], deductions_per_concept=2),
        concept_kind="affordance",
    )
    images = use_preset(images, config, PRESETS["ocl-affordance"])
    build_chain_files(images, root / "chains", config, progress=False)
    return root / "chains"


def test_affordance_deduction_options_are_table_3s(affordance_build):
    assert list(PRESETS["ocl-affordance"].concepts) == TABLE_3_OPTIONS
    meta = json.loads((affordance_build / "deduction.jsonl.meta.json").read_text())
    assert meta["options"] == TABLE_3_OPTIONS
    task = next(iter(load_association(affordance_build, "deduction")))
    assert list(task.options) == TABLE_3_OPTIONS
    text = prompt_text(deduction_prompt(task.concept_kind, list(task.options)))
    assert text.endswith(
        "Your response should only include shared affordance in the following options. "
        "Options:['break', 'carry', 'clean', 'cut', 'open', 'push', 'sit', 'imprint']"
    )


def test_deduction_rules():
    gold = ["metal", "rusty"]
    assert deduction_correct(["metal"], gold) and not deduction_correct(["metal", "furry"], gold)
    assert deduction_correct(["metal", "furry"], gold, "any-shared") and not deduction_correct(
        ["furry"], gold, "any-shared"
    )
    assert deduction_correct(["rusty", "metal"], gold, "exact") and not deduction_correct(["metal"], gold, "exact")
    assert not any(
        deduction_correct(p, gold, rule) for p in (None, []) for rule in ("all-shared", "any-shared", "exact")
    )
    with pytest.raises(InputError, match="deduction-rule"):
        AssociationSettings(deduction_rule="most-shared")


class _Deducer:
    """Names the first and the last option (Table 3's: break and imprint) whatever the images show, so some
    deductions name one shared concept and one that is not."""

    def __init__(self):
        from commonlink.eval.backends.base import BackendInfo

        self.info = BackendInfo(
            backend="scripted",
            model="deducer",
            fingerprint="deducer",
            batch_invariant=True,
            default_batch_size=8,
            uses_images=False,
        )
        self.generate_seconds = 0.0

    def generate(self, requests, settings):
        return [f"{r.choices[0]}, {r.choices[-1]}" for r in requests]

    def close(self):
        pass


def test_deduction_rule_changes_the_score_and_is_recorded(affordance_build, tmp_path):
    scores = {}
    for rule in ("all-shared", "any-shared"):
        results = evaluate_association(
            affordance_build,
            "deduction",
            backend_instances=[_Deducer()],
            out_dir=tmp_path / rule,
            settings=AssociationSettings(deduction_rule=rule),
            progress=False,
            report=False,
            n_boot=10,
        )
        assert results["association"]["deduction_rule"] == rule
        records = [json.loads(x) for x in (tmp_path / rule / "predictions.jsonl").read_text().splitlines()]
        for r in records:
            named = set(r["deduction"] or [])
            expected = (
                (named <= set(r["deduction_gold"])) if rule == "all-shared" else bool(named & set(r["deduction_gold"]))
            )
            assert r["deduction_correct"] == (bool(named) and expected)
        scores[rule] = sum(r["deduction_correct"] for r in records)
    assert scores["any-shared"] > scores["all-shared"]


# ---------------------------------------------------------------------------------------------- perception room
class _Recorder:
    """Answers the first choice / "yes" and records the generation settings each call was given."""

    def __init__(self):
        from commonlink.eval.backends.base import BackendInfo

        self.info = BackendInfo(
            backend="scripted",
            model="recorder",
            fingerprint="recorder",
            batch_invariant=True,
            default_batch_size=8,
            uses_images=True,
        )
        self.generate_seconds = 0.0
        self.settings = []

    def generate(self, requests, settings):
        self.settings.append(settings)
        return ["yes" for _ in requests]

    def close(self):
        pass


def test_perception_and_commono_allow_the_same_generation_length(tmp_path):
    """A reasoning model cut off at a shorter cap in the single-image baseline would be scored wrong there only."""
    import inspect

    from commonlink.commands import eval as eval_commands
    from commonlink.kinds.common_o.perception import evaluate_perception
    from commonlink.kinds.common_o.task import evaluate_common_o
    from tests.fixtures.tiny_models import common_o_rows, write_common_o_split

    data = write_common_o_split(tmp_path / "data", common_o_rows(2))
    caps = {}
    ALLOW = {"allow_unparseable": True}  # the recorder answers no letters
    for name, run in (("commono", evaluate_common_o), ("perception", evaluate_perception)):
        backend = _Recorder()
        run(data, "main", out_dir=tmp_path / name, backend_instance=backend, progress=False, n_boot=10, **ALLOW)
        caps[name] = {s.max_new_tokens for s in backend.settings}
    assert caps["commono"] == caps["perception"] == {1024}
    cli = {
        name: inspect.signature(getattr(eval_commands, name)).parameters["max_new_tokens"].default
        for name in ("commono", "perception")
    }
    assert cli["commono"] == cli["perception"] == 1024


# ---------------------------------------------------------------------------------------- hallucination vs similarity
class _SimilarityHallucinator:
    """Answers the objects in common plus every distractor at least ``threshold`` similar to one of them (the
    behaviour Common-O §4.2 reports), by the same character-trigram embedder the analysis uses by default."""

    def __init__(self, rows, threshold: float, name: str):
        from commonlink.eval.backends.base import BackendInfo
        from commonlink.kinds.common_o.similarity import char_ngram_embedder

        self.truth = {tuple(json.loads(r["choices"])): json.loads(r["ground_truth_objects"]) for r in rows}
        self.embed, self.threshold = char_ngram_embedder(), threshold
        self.info = BackendInfo(
            backend="scripted",
            model=name,
            fingerprint="halluc",
            batch_invariant=True,
            default_batch_size=8,
            uses_images=True,
        )
        self.generate_seconds = 0.0

    def generate(self, requests, settings):
        from commonlink.constants import NO_COMMON_OBJECTS

        out = []
        for r in requests:
            truth = self.truth[tuple(r.choices)]
            common = [t for t in truth if t != NO_COMMON_OBJECTS]
            picked = set(truth)
            for c in r.choices:
                if common and c not in truth and c != NO_COMMON_OBJECTS:
                    vectors = self.embed([c, *common])
                    if max(float(vectors[0] @ v) for v in vectors[1:]) >= self.threshold:
                        picked.add(c)
            out.append("Answer: " + ", ".join(chr(65 + k) for k, c in enumerate(r.choices) if c in picked))
        return out

    def close(self):
        pass


def test_hallucination_by_distractor_similarity_in_results_and_report(tmp_path):
    from commonlink.kinds.common_o.task import evaluate_common_o
    from tests.fixtures.tiny_models import common_o_rows, write_common_o_split

    rows = common_o_rows(40, seed=5)
    data = write_common_o_split(tmp_path / "data", rows)
    name = "<script>alert(1)</script>"
    backend = _SimilarityHallucinator(rows, 0.25, name)
    results = evaluate_common_o(
        data,
        "main",
        out_dir=tmp_path / "run",
        backend_instance=backend,
        similarity=True,
        progress=False,
        n_boot=10,
    )
    analysis = results["hallucination_similarity"]
    assert analysis["embedding"] == "char-ngram" and len(analysis["bins"]) == 4
    assert sum(b["n"] for b in analysis["bins"]) == analysis["examples_used"] > 10
    assert json.loads((tmp_path / "run" / "results.json").read_text())["hallucination_similarity"] == analysis
    records = [json.loads(x) for x in (tmp_path / "run" / "predictions.jsonl").read_text().splitlines()]
    scored = [r for r in records if r["distractor_similarity"] is not None]
    assert len(scored) == analysis["examples_used"]
    # per example: it hallucinated exactly when a distractor was at least the threshold similar to a common object
    assert all((r["hallucinated"] >= 1) == (r["distractor_similarity"] >= 0.25) for r in scored)
    assert {r["hallucinated"] >= 1 for r in scored} == {True, False}
    lows = [b["low"] for b in analysis["bins"]]
    assert (
        lows == sorted(lows)
        and analysis["bins"][-1]["hallucination_1plus"] > analysis["bins"][0]["hallucination_1plus"]
    )
    assert analysis["r"] > 0.5
    page = (tmp_path / "run" / "report.html").read_text()
    assert "Hallucination by distractor similarity: &lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<script>alert(1)</script>" not in page
    assert "Hallucination by distractor similarity" in (tmp_path / "run" / "results.md").read_text()
