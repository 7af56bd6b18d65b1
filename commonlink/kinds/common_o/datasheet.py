"""Datasheets for datasets (Gebru et al., 2021): the seven sections, filled from build statistics.

:func:`render_datasheet` turns ``[(section, [(question, answer), ...]), ...]`` into Markdown and is shared by
every release kind. :func:`common_o_datasheet` asks every question of the Common-O paper's datasheet (§10) in its
words and answers the ones the data can, with the numbers computed from the rows actually written; questions only
the publisher can answer (funding, contact, consent of photographed people, DOI, ...) say so instead of guessing.
:func:`render_common_o_card` assembles the whole README.md (YAML metadata + body).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from commonlink.constants import NO_COMMON_OBJECTS
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
from commonlink.release.card_claims import claim
from commonlink.release.card_info import PUBLISHER_TO_FILL, card_citation, card_description, datasheet_sections
from commonlink.release.licences import credit_column_descriptions, credit_columns, credits_answer, credits_section

#: The seven sections of a datasheet, in Gebru et al.'s order.
DATASHEET_SECTIONS: tuple[str, ...] = (
    "Motivation",
    "Composition",
    "Collection Process",
    "Preprocessing/Cleaning/Labeling",
    "Uses",
    "Distribution",
    "Maintenance",
)
PAPER = (
    "Ross, Ibrahim et al., *What's in Common? Multimodal Models Hallucinate When Reasoning Across Scenes* "
    "(arXiv:2511.03768)"
)

Datasheet = list[tuple[str, list[tuple[str, str]]]]


def render_datasheet(sections: Datasheet, *, heading_level: int = 2) -> str:
    """Markdown for a datasheet: one heading per section, each question in bold followed by its answer."""
    names = [name for name, _ in sections]
    if names != list(DATASHEET_SECTIONS):
        raise ValueError(f"a datasheet has the sections {DATASHEET_SECTIONS}, got {names}")
    top = "#" * heading_level
    out = [f"{top} Datasheet", "", "Following *Datasheets for Datasets* (Gebru et al., 2021).", ""]
    for name, answers in sections:
        out += [f"{top}# {name}", ""]
        for question, answer in answers:
            out += [f"**{question}**", "", answer.strip(), ""]
    return "\n".join(out).rstrip() + "\n"


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _dist(d: Mapping[str, Any]) -> str:
    if not d or not d.get("count"):
        return "none"
    return f"{d['min']}–{d['max']} (mean {d['mean']:.2f})"


def baseline_accuracies(split_stats: Mapping[str, Any]) -> tuple[float, float]:
    """(none, random) accuracy on a split: the floor a model must beat. ``none`` always answers "No objects
    are in common", so it scores the share of examples with nothing in common; ``random`` (see
    ``eval/backends/baselines.py``) picks each object choice with probability 1/2 and answers "none" when it
    picks nothing, so every example is right with probability 2^-(choices - 1): its expected accuracy."""
    histogram = (split_stats.get("choices_per_example") or {}).get("histogram") or {}
    n = sum(histogram.values())
    random = sum(count * 0.5 ** (int(choices) - 1) for choices, count in histogram.items()) / n if n else 0.0
    return float(split_stats.get("no_common_share", 0.0)), random


def common_o_datasheet(
    stats: Mapping[str, Any],
    *,
    name: str,
    license: str,
    seed: Any,
    toolkit_version: str,
    card_info: Mapping[str, str] | None = None,
) -> Datasheet:
    """Every question of the Common-O paper's datasheet for a Common-O build: the ones the data answers from
    ``stats`` (``CommonOStatsAccumulator.summary()``), the rest from the publisher's ``card_info`` (see
    ``card_info.py``), marked as unanswered where the publisher gave none."""
    answers = _common_o_answers(stats, license=license, seed=seed, toolkit_version=toolkit_version)
    return datasheet_sections(answers | _image_claims(stats, card_info), card_info)


def _image_claims(stats: Mapping[str, Any], card_info: Mapping[str, str] | None) -> dict[str, str]:
    """The sentences of what the toolkit's images are meant to be (no people, logos or private information), put
    before the answers to the publisher's questions ``sensitive_data`` and ``consent``: claims, shown only when the
    publisher did not answer and no label contradicts them (:func:`commonlink.release.card_claims.claim`; the
    contradicting labels are stated instead)."""
    return {
        "sensitive_data": claim(
            stats,
            card_info,
            "sensitive_data",
            "It is meant to show objects only, without people, logos or private information.",
        ),
        "consent": claim(stats, card_info, "consent", "The images are meant to contain no people."),
    }


def _common_o_answers(stats: Mapping[str, Any], *, license: str, seed: Any, toolkit_version: str) -> dict[str, str]:
    """What a Common-O build knows, by datasheet question key (``card_info.DATASHEET_QUESTIONS``)."""
    splits = stats.get("splits", {})
    total = stats.get("total_rows", 0)
    split_counts = ", ".join(f"{markdown_text(s)}: {info['rows']:,}" for s, info in splits.items()) or "none"
    top_text = ", ".join(f"{markdown_text(n)} ({c:,})" for n, c in stats.get("object_frequency", [])[:10]) or "none"
    per_split = "; ".join(
        f"{markdown_text(s)}: objects per image {_dist(i['objects_per_image'])}, common objects per example "
        f"{_dist(i['common_objects_per_example'])}, {_pct(i['no_common_share'])} with "
        f"no object in common, choices per example {_dist(i['choices_per_example'])}"
        for s, i in splits.items()
    )
    sources = "; ".join(
        f"{markdown_text(s)}: {_pct(i['real_share'])} real, {_pct(i['synthetic_share'])} synthetic"
        for s, i in splits.items()
    )
    seed_text = code_span(json.dumps(seed))
    return {
        "purpose": "To test whether multimodal models can reason across scenes: given two images of several objects "
        "each, pick every object present in both (the Common-O task of " + PAPER + "). Evaluation only.",
        "motivation_comments": f"Built with the commonlink toolkit {toolkit_version} (seed {seed_text}).",
        "instances": "One type: each instance is a pair of images (real photos or synthetic renders of household "
        f"objects), a lettered list of candidate objects, and the set of objects present in both images (or "
        f'"{NO_COMMON_OBJECTS}").',
        "instance_count": f"{total:,} examples ({split_counts}), built from {stats.get('distinct_images', 0):,} "
        f"distinct images of {stats.get('distinct_scenes', 0):,} scenes showing "
        f"{stats.get('distinct_objects', 0):,} distinct objects.",
        "sample": "A sample: pairs are drawn (seeded, reproducible) from image catalogs of labelled photos and "
        "renders; every image pair meeting the sampling options could have been drawn. Two views of one scene are "
        "never paired. " + per_split + ".",
        "label": "Yes: the set of objects in common (the ground-truth objects and their answer letters). Each row also "
        "holds both images embedded as bytes, the question with lettered choices, the choices, both images' object "
        "lists, and provenance ids (example, images, scenes, views).",
        "missing_information": "No; every row has all columns (provenance ids may be null where a catalog did not "
        "record them).",
        "relationships": "Yes: the image_1_id/image_2_id and scene/view columns show which examples share an image or "
        "a scene.",
        "splits": f"The splits above ({', '.join(map(markdown_text, splits)) or 'none'}) are all evaluation splits; "
        "there is no training split.",
        "noise": "Labels come from the image catalogs: human labels for photos, scene plans verified by instance "
        "masks for renders. Ambiguous or heavily occluded objects are the main source of noise. Images are reused "
        "across examples by design.",
        "self_contained": "Self-contained: the images are embedded in the parquet files.",
        "composition_comments": f"Most frequent objects (counted once per distinct image): {top_text}."
        f"{_area_text(stats.get('object_area'))} Overall {_pct(stats.get('real_share', 0))} real, "
        f"{_pct(stats.get('synthetic_share', 0))} synthetic ({sources or 'no rows'}).",
        **_collection_and_use_answers(stats, license=license, seed_text=seed_text, toolkit_version=toolkit_version),
    }


def _collection_and_use_answers(
    stats: Mapping[str, Any], *, license: str, seed_text: str, toolkit_version: str
) -> dict[str, str]:
    """The build's answers from Collection Process on: how the images were made and sampled, and how the release is
    processed, used, distributed and maintained."""
    real, synthetic = bool(stats.get("real_share")), bool(stats.get("synthetic_share"))
    return {
        "acquisition": " ".join(
            filter(
                None,
                [
                    "Real photos were ingested with their labels from a manifest (`commonlink ingest`)."
                    if real
                    else "",
                    "Synthetic images were rendered from seeded scene plans (`commonlink synth`), with visibility "
                    "checked on instance masks." + _asset_text(stats)
                    if synthetic
                    else "",
                ],
            )
        )
        or "No rows.",
        "mechanisms": "Software: the commonlink toolkit "
        + (
            "(photo ingestion: orientation fixed, metadata stripped, small and duplicate photos refused)"
            if real
            else ""
        )
        + (" and " if real and synthetic else "")
        + (
            "(a renderer driven by seeded scene plans, object visibility checked on instance masks)"
            if synthetic
            else ""
        )
        + ".",
        "sampling_strategy": "Seeded random sampling of image pairs and distractor choices (`commonlink pairs`), "
        f"seed {seed_text}; the exact options are in manifest.json.",
        "preprocessing": "Object names were normalised to one vocabulary; photo location metadata is stripped at "
        "ingestion; images are stored as ingested or rendered (no resizing at release time).",
        "raw_data": "The image catalogs the build read are the raw data; their sha256 ids are in the rows.",
        "preprocessing_software": f"Yes: the commonlink toolkit {toolkit_version} (open source); manifest.json "
        "records the version, the seed and every option of this build.",
        "other_tasks": 'Open-ended multi-image question answering; single-image perception probes ("Is \\<object\\> '
        'in this image?", `commonlink eval perception`). Tested here as multiple-choice, multiple-answer question '
        "answering over two images (exact set match, hallucination rate).",
        "not_for": "It is an evaluation benchmark: do not train or fine-tune on it.",
        "distribution_method": "As parquet shards with this card, on the Hugging Face Hub or as a folder; "
        "manifest.json lists the sha256 of every file.",
        "distribution_date": "Each version when it is published; on the Hub every version is a tag, and the card on "
        "`main` lists them (Versions).",
        "license": f"{markdown_text(license)}.",
        "image_licences": " ".join(
            filter(
                None,
                [
                    credits_answer(stats.get("image_credits")),
                    # renders have no author or licence of their own: the release's, over the assets' (next question)
                    f"The synthetic renders are released under {markdown_text(license)}; the licences of the 3D "
                    "assets they show are listed in the next answer."
                    if synthetic
                    else "",
                ],
            )
        ),
        "third_party_restrictions": _asset_text(stats).strip(),
        "updates": "Each release has a version (X.Y.Z); a fix is a new version.",
        "older_versions": "Yes: on the Hub every version is a tag, so `load_dataset(repo, revision=TAG)` keeps loading "
        "old versions.",
        "contributions": "Rebuild with more catalogs and the same toolkit: the build is deterministic given the seed "
        "and inputs.",
    }


def _asset_text(stats: Mapping[str, Any]) -> str:
    """The sentence naming the licences of the 3D assets the renders used ("" when no catalog recorded them)."""
    asset_licenses = stats.get("synthetic_asset_licenses")
    if not asset_licenses:
        return ""
    return (
        " Rendered objects come from the asset files recorded with the synthetic catalogs ("
        + "; ".join(f"{n} under {markdown_text(lic)}" for lic, n in asset_licenses.items())
        + ")."
    )


def _area_text(area: Mapping[str, Any] | None) -> str:
    """The sentence on how much of its image each object covers ("" when no catalog recorded object areas)."""
    if not area:
        return ""
    return (
        f" Where object areas are known ({area['images']:,} images), each "
        f"object covers {_pct(area['min'])}–{_pct(area['max'])} of its image"
        + (
            f"; {_pct(area['in_band'] / area['pairs'])} of the {area['pairs']:,} (object, image) pairs fall in "
            f"{100 * area['band'][0]:g}–{100 * area['band'][1]:g}%, the band Common-O reports."
            if area.get("pairs")
            else "."
        )
    )


#: What each column holds (shown in the card).
COLUMN_DESCRIPTIONS: dict[str, str] = {
    "image_1": "first image (embedded bytes; decodes to PIL)",
    "image_2": "second image",
    "question": "the prompt with lettered choices (paper §3.2)",
    "answer": 'ground-truth letters, sorted, joined by ", "',
    "objects_1": "objects in image 1 (JSON list)",
    "objects_2": "objects in image 2 (JSON list)",
    "num_objects_image_1": "number of objects in image 1",
    "num_objects_image_2": "number of objects in image 2",
    "question_template": "id of the prompt template",
    "answer_type": 'always "multiple_choice" (pick every correct letter)',
    "choices": "candidate objects in letter order (JSON list)",
    "num_choices": "number of choices",
    "num_ground_truth_objects": f'number of common objects (0 when the answer is "{NO_COMMON_OBJECTS}")',
    "real_or_synthetic": '"real" or "synthetic"',
    "ground_truth_objects": f'objects in both images, or ["{NO_COMMON_OBJECTS}"] (JSON list)',
    "id": "example id (provenance)",
    "image_1_id": "catalog id of image 1 (sha256-derived)",
    "image_2_id": "catalog id of image 2",
    "scene_1_id": "scene of image 1",
    "scene_2_id": "scene of image 2",
    "view_1": "camera/orientation of image 1",
    "view_2": "camera/orientation of image 2",
}


def render_common_o_card(
    *,
    name: str,
    version: str,
    license: str,
    splits: Mapping[str, Mapping[str, Any]],
    stats: Mapping[str, Any],
    figures: Mapping[str, str],
    features: Any,
    seed: Any,
    toolkit_version: str,
    config: Mapping[str, Any],
    card_info: Mapping[str, str] | None = None,
) -> str:
    """README.md of a Common-O release: Hub YAML metadata + summary, usage, tables, figures, datasheet (the
    publisher's answers from ``card_info``). Every value from data goes in escaped (``markdown_text``)."""
    total = sum(int(info["rows"]) for info in splits.values())
    first_split = next(iter(splits), "main")
    body = [
        f"# {markdown_text(name)}",
        "",
        f"Version **{markdown_text(version)}** of a Common-O style benchmark: two images, a lettered list "
        f"of objects, and the task of picking every object present in both images ({PAPER}). {total:,} "
        f"examples, built with commonlink {toolkit_version} (seed {code_span(json.dumps(seed))}).",
        "",
        *card_description(card_info),
        *_usage_section(first_split),
        *_splits_section(splits, stats),
        *_columns_section(features),
        *_credits_section(stats, license),
        "## Object frequency",
        "",
        markdown_table(["object", "images"], stats.get("object_frequency", [])[:30]),
        "",
        *_figures_section(figures),
        render_datasheet(
            common_o_datasheet(
                stats, name=name, license=license, seed=seed, toolkit_version=toolkit_version, card_info=card_info
            )
        ),
        *_build_section(toolkit_version, seed, config),
        *_CITATION[:2],
        *card_citation(card_info),
        *_CITATION[2:],
    ]
    return render_card(_card_metadata(name, license, splits, features, total), "\n".join(body))


def _card_metadata(name: str, license: str, splits: Mapping[str, Mapping[str, Any]], features: Any, total: int) -> dict:
    """The card's YAML front matter: Hub tags, the ``data/{split}-*`` configs and ``dataset_info``."""
    return {
        "license": license,
        "pretty_name": name,
        "language": ["en"],
        "task_categories": ["visual-question-answering", "image-text-to-text"],
        "tags": ["common-o", "multi-image", "benchmark", "hallucination", "commonlink"],
        "size_categories": [size_category(total)],
        "configs": [configs_entry({split: f"data/{split}-*" for split in splits})],
        "dataset_info": dataset_info_entry(
            features,
            {split: (int(info["rows"]), int(info.get("num_bytes", 0))) for split, info in splits.items()},
            download_size=sum(int(info.get("download_size", 0)) for info in splits.values()),
        ),
    }


def _usage_section(split: str) -> list[str]:
    return [
        "## Usage",
        "",
        "```python",
        "from datasets import load_dataset",
        "",
        f'ds = load_dataset("{REPO_PLACEHOLDER}", split={json.dumps(split)})   # images decode to PIL',
        "",
        "from commonlink.kinds.common_o.loader import load_common_o   # typed examples: lists parsed, letters resolved",
        "",
        f'for example in load_common_o("{REPO_PLACEHOLDER}", {json.dumps(split)}):',
        "    example.image_1, example.choices, example.ground_truth",
        "```",
        "",
    ]


def _splits_section(splits: Mapping[str, Mapping[str, Any]], stats: Mapping[str, Any]) -> list[str]:
    """Per-split table (rows, sources, objects, common objects, shards) and the baselines' accuracy on each."""
    split_rows = []
    for split, info in splits.items():
        s = stats["splits"].get(split, {})
        split_rows.append(
            [
                split,
                int(info["rows"]),
                _pct(s.get("real_share", 0)),
                _pct(s.get("synthetic_share", 0)),
                s.get("distinct_images", 0),
                _dist(s.get("objects_per_image", {})),
                _dist(s.get("common_objects_per_example", {})),
                _pct(s.get("no_common_share", 0)),
                len(info.get("files", [])),
            ]
        )
    return [
        "## Splits",
        "",
        markdown_table(
            [
                "split",
                "rows",
                "real",
                "synthetic",
                "distinct images",
                "objects per image",
                "common objects",
                "no common",
                "shards",
            ],
            split_rows,
        ),
        "",
        "Baselines (the floor a model must beat): "
        + "; ".join(
            f"{markdown_text(split)}: `none` {_pct(none)}, `random` {_pct(rnd)} (expected) accuracy"
            for split, (none, rnd) in ((s, baseline_accuracies(stats["splits"].get(s, {}))) for s in splits)
        )
        + '. `none` always answers "No objects are in common"; `random` picks each object with probability 1/2 '
        "(`commonlink eval commono --model none|random`).",
        "",
        *_unreached_lines(splits, stats),
    ]


def _unreached_lines(splits: Mapping[str, Any], stats: Mapping[str, Any]) -> list[str]:
    """A warning per split whose rows miss some numbers of common objects its options allow (0..max_common)."""
    lines = []
    for split in splits:
        s = stats["splits"].get(split, {})
        missing = s.get("common_objects_missing")
        if missing:
            lines += [
                f"**Not reached in {split}:** no example has {', '.join(map(str, missing))} object(s) in common "
                f"(the split allows 0–{s.get('max_common')}): the catalogs it was sampled from had no such pairs to "
                "spare, and their share went to the other counts (see the pairs file's sidecar notes).",
                "",
            ]
    return lines


def _columns_section(features: Any) -> list[str]:
    return [
        "## Columns",
        "",
        "The columns and types of the published `facebook/Common-O` dataset, then provenance columns. List-valued "
        "fields are JSON strings.",
        "",
        markdown_table(
            ["column", "type", "content"],
            [
                [col, _feature_type(feat), COLUMN_DESCRIPTIONS.get(col) or _CREDIT_DESCRIPTIONS.get(col, "")]
                for col, feat in features.items()
            ],
        ),
        "",
    ]


_IMAGE_COLUMNS = ("image_1", "image_2")
_CREDIT_DESCRIPTIONS = credit_column_descriptions(_IMAGE_COLUMNS)


def _credits_section(stats: Mapping[str, Any], license: str) -> list[str]:
    """Under which licences the photos are and whom to credit (release/licences.py), where the build knows."""
    credits = stats.get("image_credits")
    columns = credit_columns(_IMAGE_COLUMNS) if credits and credits.get("columns") else []
    return credits_section(credits, license, columns)


def _figures_section(figures: Mapping[str, str]) -> list[str]:
    if not figures:
        return []
    lines = ["## Figures", ""]
    for title, path in figures.items():
        lines += [f"### {title}", "", f"![{title}]({path})", ""]
    return lines


def _build_section(toolkit_version: str, seed: Any, config: Mapping[str, Any]) -> list[str]:
    return [
        "## Build",
        "",
        "`manifest.json` lists the sha256 and size of every file, the "
        "toolkit version, the seed and the full build configuration.",
        "",
        "```json",
        json.dumps(
            {
                "toolkit_version": toolkit_version,
                "seed": seed,
                "inputs": [
                    {k: i.get(k) for k in ("file", "sha256", "split", "count")} for i in config.get("inputs", [])
                ],
            },
            indent=2,
        ),
        "```",
        "",
    ]


_CITATION = [
    "## Citation",
    "",
    "```bibtex",
    "@article{ross2025common,",
    "  title={What's in Common? Multimodal Models Hallucinate When Reasoning Across Scenes},",
    "  author={Ross, Candace and Ibrahim, Mark and others},",
    "  journal={arXiv preprint arXiv:2511.03768},",
    "  year={2025}",
    "}",
    "```",
]


def _feature_type(feature: Any) -> str:
    dtype = getattr(feature, "dtype", None)
    return "Image" if type(feature).__name__ == "Image" else f"Value({dtype!r})"


__all__: Sequence[str] = [
    "PUBLISHER_TO_FILL",
    "baseline_accuracies",
    "DATASHEET_SECTIONS",
    "render_datasheet",
    "common_o_datasheet",
    "render_common_o_card",
    "COLUMN_DESCRIPTIONS",
]
