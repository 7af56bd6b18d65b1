"""The paper's named concept sets and asynchronous pairs (Labyrinth of Links §4.2 and Tables 5-13).

A preset fixes what ``commonlink chains`` builds for a source, so that a build from OCL or Pangea uses the
concepts the published numbers were measured on rather than the largest label pools:

* ``ocl-attribute`` -- 8 OCL attributes and the pairs of Table 11;
* ``ocl-affordance`` -- 8 OCL affordances and the pairs of Table 12, listed in the order Table 3's deduction
  prompt offers them (``[break, carry, clean, cut, open, push, sit, imprint]``; §4.2 names the same eight in
  another order): a build's deduction options are its concepts in preset order, so prompts match Table 3;
* ``pangea-action`` -- 8 Pangea actions and the pairs of Table 13.

Pangea's action concepts are VerbNet nodes (``hit-18.1``); the authors' harness (``map_dict`` in
``LLM_Inception``) names each paper action by one node, and prompts show the plain verb. A preset lists those
nodes as *aliases*: a label equal to an alias is renamed to the paper's name when the preset is applied, so
prompts, memory and the deduction options read ``hit`` as in the paper.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from commonlink.errors import InputError
from commonlink.kinds.association.format import LabelledImage


@dataclass(frozen=True)
class ConceptPreset:
    name: str
    concept_kind: str  #: the word prompts use: attribute, affordance, action
    concepts: tuple[str, ...]
    pairs: tuple[tuple[str, str], ...]
    source: str  #: the paper's source dataset
    where: str  #: where the paper names them
    aliases: dict[str, str] = field(default_factory=dict)  #: source label -> paper name


PRESETS: dict[str, ConceptPreset] = {
    "ocl-attribute": ConceptPreset(
        "ocl-attribute",
        "attribute",
        ("metal", "ripe", "fresh", "natural", "cooked", "painted", "rusty", "furry"),
        (("furry", "metal"), ("fresh", "cooked"), ("natural", "ripe"), ("painted", "rusty")),
        "OCL",
        "§4.2 (eight attributes); Table 11 (pairs)",
    ),
    "ocl-affordance": ConceptPreset(
        "ocl-affordance",
        "affordance",
        ("break", "carry", "clean", "cut", "open", "push", "sit", "imprint"),  # Table 3's option order
        (("sit", "imprint"), ("push", "carry"), ("cut", "clean"), ("open", "break")),
        "OCL",
        "§4.2 (eight affordances); Table 12 (pairs)",
    ),
    "pangea-action": ConceptPreset(
        "pangea-action",
        "action",
        ("run", "hit", "drive", "dress", "cooking", "build", "shake", "cut"),
        (("run", "hit"), ("drive", "dress"), ("cooking", "build"), ("shake", "cut")),
        "Pangea",
        "§4.2 (eight actions); Table 13 (pairs)",
        aliases={
            "run-51.3.2": "run",
            "hit-18.1": "hit",
            "drive-11.5": "drive",
            "dress-41.1.1-1-1": "dress",
            "cooking-45.3": "cooking",
            "build-26.1": "build",
            "shake-22.3-2": "shake",
            "cut-21.1-1": "cut",
        },
    ),
}
PRESET_CHOICES = ("auto", "none", *PRESETS)


def default_preset(source_type: str, ocl_labels: str = "attr") -> str | None:
    """The preset ``--preset auto`` means: the paper's set for OCL attributes/affordances and Pangea, else none."""
    if source_type == "ocl":
        return {"attr": "ocl-attribute", "aff": "ocl-affordance"}.get(ocl_labels)
    if source_type == "pangea":
        return "pangea-action"
    return None


def resolve_preset(name: str | None, source_type: str, ocl_labels: str = "attr") -> ConceptPreset | None:
    """``auto``/``none``/a preset name -> the preset (or None); unknown names are an error naming the choices."""
    if name is None or name == "auto":
        chosen = default_preset(source_type, ocl_labels)
        return PRESETS[chosen] if chosen else None
    if name == "none":
        return None
    if name not in PRESETS:
        raise InputError(f"--preset {name!r} is not a preset.", f"Use one of: {', '.join(PRESET_CHOICES)}.")
    return PRESETS[name]


def apply_aliases(images: Sequence[LabelledImage], preset: ConceptPreset) -> list[LabelledImage]:
    """Rename labels that are aliases of the preset's concepts (``hit-18.1`` -> ``hit``); others unchanged."""
    if not preset.aliases:
        return list(images)
    out = []
    for img in images:
        renamed = list(dict.fromkeys(preset.aliases.get(label, label) for label in img.labels))
        out.append(
            img
            if renamed == img.labels
            else LabelledImage(img.id, renamed, img.width, img.height, img.origin, img.crop, img.name)
        )
    return out


def check_preset_labels(preset: ConceptPreset, labels: set[str], needed: Sequence[str]) -> None:
    """Every ``needed`` concept of the preset must be a label of the source; the error names the missing ones."""
    missing = [c for c in dict.fromkeys(needed) if c not in labels]
    if missing:
        raise InputError(
            f"Preset {preset.name!r} ({preset.source}, paper {preset.where}) needs labels {missing} that no image of "
            "the source carries.",
            "Pass --label-names so label ids become the dataset's names, choose concepts with --concepts/--pairs, "
            "or build without the paper's set with --preset none.",
        )
