"""Dataset card of an association release: configs block, concepts and pool sizes, counts, construction settings."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from commonlink.formats.card import (
    REPO_PLACEHOLDER,
    code_span,
    configs_entry,
    dataset_info_entry,
    markdown_table,
    markdown_text,
    render_card,
    size_category,
)
from commonlink.release.card_info import card_citation, card_description, publisher_section
from commonlink.release.licences import credit_columns, credits_section

_CONFIG_TEXT = {
    "single_step": (
        "single-step association: a query, K memory images with their shared concept, two candidates "
        "(answer = index of the positive)"
    ),
    "deduction": "deduction: two associated images, the option list, the gold shared concepts",
    "synchronous": "synchronous chains: one concept throughout; the positive of step t is the query of step t+1",
    "asynchronous": "asynchronous chains: two concepts alternating through bridge images that carry both",
    "images": "every image once: id, image, labels (tasks reference images by id)",
}


def negatives_and_preset_line(construction: Mapping[str, Any]) -> str:
    """The card's one-line statement of how negatives were drawn and which concept set was used."""
    negatives = construction.get("negatives", "chain")
    rule = (
        "a negative shares no label at all with its query (paper eqs. 1, 4, 5)"
        if negatives == "disjoint"
        else (
            "a negative only lacks the task's concepts; it may share other labels with its query (not the paper's rule)"
        )
    )
    preset = construction.get("preset")
    concepts = (
        f"concept preset {code_span(preset)} (the paper's named concepts and asynchronous pairs)"
        if preset
        else "no concept preset (concepts and pairs chosen by the builder's options)"
    )
    return f"**Sampling:** negatives {code_span(negatives)}: {rule}; {concepts}."


def verification_text(verification: Mapping[str, Any] | None) -> str:
    """What the card says about the paper's MLLM verification and human review (§4.2)."""
    if not verification:
        return (
            "Not verified: labels come from the source dataset unchanged; the paper's MLLM verification and human "
            "review (§4.2) were not applied (`commonlink chains "
            "verify`), so annotation errors of the source carry over."
        )
    models = verification.get("models") or ([verification["model"]] if verification.get("model") else [])
    who = (
        [" then ".join(f"model {code_span(m.get('model'))} ({markdown_text(m.get('backend'))})" for m in models)]
        if models
        else []
    )
    if verification.get("human_decisions"):
        who.append("human review decisions")
    repair = (
        "chain steps relying on them got a positive or negative redrawn from verified images (or the chain was cut "
        "there when none fitted)"
        if verification.get("on_fail") == "resample"
        else "the chain steps relying on them dropped"
    )
    return (
        f"Verified with {' and '.join(who)}: {verification.get('claims', 0):,} (image, concept) claims asked, "
        f"{verification.get('rejected', 0):,} rejected, {verification.get('undecided', 0):,} undecided (kept "
        "as labelled unless --undecided reject); rejected labels were corrected in the image table, "
        f"{repair}, and tasks relying on them dropped (every claim and drop: the build's verification.json). "
        f'Question asked per claim: "{markdown_text(verification.get("prompt", ""))}"'
    )


def _config_order(configs: Mapping[str, dict]) -> list[str]:
    return [c for c in ("single_step", "deduction", "synchronous", "asynchronous", "images") if c in configs]


def association_card_metadata(
    *, name: str, license: str, configs: Mapping[str, dict], features: Mapping[str, Any]
) -> dict:
    """The card's YAML header: Hub tags, one ``configs`` entry and one ``dataset_info`` block per config."""
    order = _config_order(configs)
    return {
        "license": license,
        "pretty_name": name,
        "task_categories": ["visual-question-answering"],
        "tags": ["association", "multi-image", "commonlink"],
        "size_categories": [size_category(sum(configs[c]["rows"] for c in order if c != "images"))],
        "configs": [configs_entry({"test": f"{c}/test-*"}, config_name=c) for c in order],
        "dataset_info": [
            dataset_info_entry(
                features[c],
                {"test": (configs[c]["rows"], configs[c]["num_bytes"])},
                config_name=c,
                download_size=configs[c]["download_size"],
            )
            for c in order
        ],
    }


def _concepts_section(stats: Mapping[str, Any]) -> str:
    """Concepts with their pool sizes, the asynchronous pairs, task and image counts."""
    concept_rows = [(c["name"], c["pool_size"], c.get("negative_pool_size", "")) for c in stats.get("concepts", [])]
    pair_rows = [(" + ".join(p["concepts"]), p["bridge_pool_size"]) for p in stats.get("pairs", [])]
    counts = ", ".join(f"{markdown_text(k)}: {v:,}" for k, v in stats.get("counts", {}).items())
    pairs = "### Asynchronous pairs\n\n" + markdown_table(["pair", "bridge pool size"], pair_rows) if pair_rows else ""
    return f"""## Concepts ({markdown_text(stats.get("concept_kind", "concept"))})

Pool = images carrying the concept; negative pool = images carrying none of a task's concepts.

{markdown_table(["concept", "pool size", "negative pool size"], concept_rows) if concept_rows else "(none)"}

{pairs}

Task counts: {counts}. Images stored: {stats.get("images", 0):,}.
"""


def _pair_queries(stats: Mapping[str, Any]) -> str:
    """Images an asynchronous pair keeps out of its queries beyond those above (its negatives carry neither concept)."""
    rows = [
        f"{markdown_text(' + '.join(p['concepts']))} {markdown_text(p['no_disjoint_negative'])}"
        for p in stats.get("pairs", [])
        if p.get("no_disjoint_negative")
    ]
    if not rows:
        return ""
    return (
        " Per asynchronous pair, images of its pools that are never its queries (those above included; its negatives "
        f"carry neither of its concepts): {', '.join(rows)}."
    )


def construction_rows(stats: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(setting, value) of the build, each the value used: concepts and pairs the builder chose itself (asked as
    ``null``) are shown as chosen, a build without a preset says so."""
    used = {
        "concepts": ([c["name"] for c in stats.get("concepts", [])], "chosen by the builder: the largest pools"),
        "pairs": ([p["concepts"] for p in stats.get("pairs", [])], "chosen by the builder, spread over the concepts"),
    }
    rows = []
    for key, value in (stats.get("construction") or {}).items():
        if value is None and key in used:
            rows.append((key, f"{json.dumps(used[key][0])} ({used[key][1]})"))
        elif value is None and key == "chains_per_concept":
            rows.append((key, "scaled to the pool sizes (counts per concept and pair in the chain files' meta)"))
        elif value is None and key == "preset":
            rows.append((key, "none (concepts and pairs from the builder's options)"))
        else:
            rows.append((key, json.dumps(value)))
    return rows


def _construction_section(stats: Mapping[str, Any]) -> str:
    """Construction settings, the source read, and the invariants the builder checks."""
    source = stats.get("source") or {}

    def count(key: str) -> str:
        return markdown_text(source.get(key, "?"))

    return f"""## Construction settings

{markdown_table(["setting", "value"], construction_rows(stats))}

Source: {markdown_text(source.get("source_type", "?"))} {code_span(source.get("source", ""))}; \
samples read {count("read")}, kept
{count("kept")}, dropped under the pixel minimum {count("dropped_small")}, unlabelled {count("dropped_unlabelled")};
images that share a label with every other image, so never a query or a negative (no disjoint negative exists
for them): {markdown_text(stats.get("images_without_disjoint_negative", 0))}. They stay in use where no negative is
drawn for them (single-step positives, memory and deduction images, a chain's last positive).{_pair_queries(stats)}
Images without a name in the source are named by
their labels ("the image with a red circle and a blue square"), one distinct name each.

Invariants checked while building: a positive always shares the step's concept with its query, a negative
never carries any of the task's concepts (with disjoint negatives: no label of its query), the two candidates
of a step differ. Every chain is drawn from its own generator (seed, task, concept(s), chain index), so any
chain can be rebuilt alone.
"""


def _citation(card_info: Mapping[str, str] | None) -> str:
    lines = card_citation(card_info)
    return "\n".join(["## Citation", "", *lines]) if lines else ""


def _credits_section(stats: Mapping[str, Any], license: str) -> str:
    """Under which licences the photos are and whom to credit (release/licences.py), where the build knows."""
    credits = stats.get("image_credits")
    columns = [f"images.{c}" for c in credit_columns([""])] if credits and credits.get("columns") else []
    lines = credits_section(credits, license, columns)
    return "\n".join(lines) + "\n" if lines else ""


def render_association_card(
    *,
    name: str,
    version: str,
    license: str,
    configs: Mapping[str, dict],
    features: Mapping[str, Any],
    stats: Mapping[str, Any],
    seed: Any,
    toolkit_version: str,
    card_info: Mapping[str, str] | None = None,
) -> str:
    """The README.md of an association release (YAML header readable by ``datasets`` and the Hub). Every value
    from data goes in escaped (``markdown_text``, ``code_span``, table cells); ``card_info`` answers the
    publisher's questions."""
    steps = stats.get("steps", {})
    config_rows = [(c, _CONFIG_TEXT[c], configs[c]["rows"], steps.get(c, "")) for c in _config_order(configs)]
    repo = json.dumps(REPO_PLACEHOLDER)
    body = f"""
# {markdown_text(name)}

Association tasks (Labyrinth of Links, "annotation-free association construction") built with
commonlink {toolkit_version} from a labelled image set: two images are *associated*
when their label sets intersect. Version {markdown_text(version)}, seed {code_span(json.dumps(seed))}.

{chr(10).join(card_description(card_info))}
## Configs

{markdown_table(["config", "content", "rows", "steps"], config_rows)}

```python
from datasets import load_dataset
chains = load_dataset({repo}, "synchronous", split="test")
images = load_dataset({repo}, "images", split="test")   # id -> image
# or typed tasks with images resolved:
from commonlink.loaders import load_association
for chain in load_association({repo}, "synchronous"):
    step = chain.steps[0]; step.query.image, step.candidates, step.answer
```

Chains are pre-sampled to their cap: `positive[t]` is the query of step `t+1` (`start` is the first query);
`answer[t]` is the index of the positive among the two candidates of step `t` (the other is `negative[t]`);
the first `warmup` steps are warm-up steps (the harness forces the correct choice); `plan` has one character a
step: `1`/`2` on concept 1/2, `b` a bridge step whose positive carries both concepts.

{negatives_and_preset_line(stats.get("construction", {}))}

{_concepts_section(stats)}
{_construction_section(stats)}
{_credits_section(stats, license)}## Verification

{verification_text(stats.get("verification"))}

{publisher_section(card_info)}
{_citation(card_info)}"""
    return render_card(association_card_metadata(name=name, license=license, configs=configs, features=features), body)
