"""Prompts of the concept-perception grid (Labyrinth of Links App. B, Table 4) and the prompt strategies.

The paper prints the association and deduction prompts (Table 3) but not those of its concept-perception
study; it describes them (App. B): *Task Instruction* and *Meta Instruction* differ in "whether the prompt
includes question instruction that describes the decision-making explanations of the task", and the deduction
step (*w/ DedPo*) is added for combination perception. Its strategies: *ComKnow* "aims to provide foundational
knowledge of object-related concepts, while One-shot and CoT focus on enhancing performance through few-shot
learning. Compared to One-shot, CoT introduces an additional reasoning step". Where a wording below is Table 3's
it says so; every other wording is ours (docs/eval.md shows each next to the paper's words).

A prompt is a list of segments (strings and :class:`ImageSlot`), as in :mod:`commonlink.kinds.association.prompts`.
"""

from __future__ import annotations

from collections.abc import Sequence

from commonlink.kinds.association.prompts import (
    COT_DEDUCTION_OUTPUT,
    COT_SELECTION_OUTPUT,
    ImageSlot,
    Segment,
)

STRATEGIES = ("normal", "comknow", "one-shot", "cot")
STRATEGY_TITLES = {"normal": "Normal", "comknow": "ComKnow", "one-shot": "One-shot", "cot": "CoT"}
#: Table 4's columns, in its order: individual perception, then combination perception (with the deduction).
COMPLEXITIES = ("task", "meta", "task+ded", "meta+ded")
COMPLEXITY_TITLES = {
    "task": "TaskInstr",
    "meta": "MetaInstr",
    "task+ded": "TaskInstr w/ DedPo",
    "meta+ded": "MetaInstr w/ DedPo",
}
#: Table 4's Random row: one of two candidates; with the deduction, also one of two offered concepts.
RANDOM_SUCCESS = {"task": 0.5, "meta": 0.5, "task+ded": 0.25, "meta+ded": 0.25}

#: Table 3, association step, question instruction (verbatim): the *Meta Instruction* explains the decision.
META_INSTRUCTION = (
    "Determine the relationship between the original image and the candidate images, and select the images "
    "with the same {kind} as the original image."
)
#: Ours: the *Task Instruction* states the task (the concept to look for) without explaining how to decide.
TASK_INSTRUCTION = 'Which candidate image has the {kind} "{concept}", as the original image does?'
#: Table 3, association step, output instruction (verbatim).
SELECTION_OUTPUT = (
    "Your response should be direct and exclusively only include one of the following items. Options: [Image1, Image2]."
)
#: Ours (ComKnow): what each kind of concept is, and a gloss of the papers' concepts (OCL attributes and
#: affordances, Pangea actions); concepts without a gloss get the kind's sentence only.
KIND_KNOWLEDGE = {
    "attribute": "An attribute is a property of an object that can be seen: its material, state, freshness or surface.",
    "affordance": "An affordance is an action an object allows a person to do with it.",
    "action": "An action is what the person in the image is doing.",
}
GLOSSES = {
    "attribute": {
        "metal": "made of metal: hard, often shiny or grey",
        "ripe": "fully grown and ready to eat (fruit or vegetables)",
        "fresh": "recently picked or made, not spoiled or dried",
        "natural": "not made by people: plants, animals, stone, food as grown",
        "cooked": "heated to be eaten: baked, fried, boiled or grilled",
        "painted": "covered with paint",
        "rusty": "covered with reddish-brown rust",
        "furry": "covered with fur or hair",
    },
    "affordance": {
        "break": "can be broken by a person",
        "carry": "can be picked up and carried by a person",
        "clean": "can be cleaned, or used to clean",
        "cut": "can be cut, or used to cut",
        "open": "can be opened",
        "push": "can be pushed",
        "sit": "can be sat on",
        "imprint": "can take or leave an imprint (a mark pressed into it)",
    },
    "action": {
        "run": "running",
        "hit": "hitting something or someone",
        "drive": "driving a vehicle",
        "dress": "putting on clothes",
        "cooking": "cooking food",
        "build": "building or assembling something",
        "shake": "shaking something",
        "cut": "cutting something",
    },
}


def common_knowledge(kind: str, concepts: Sequence[str]) -> str:
    """The ComKnow preamble: what the kind of concept is, then a gloss of each concept that has one."""
    lines = [KIND_KNOWLEDGE.get(kind, f"A {kind} is something an image can show about an object.")]
    glosses = GLOSSES.get(kind, {})
    lines += [f'"{c}": {glosses[c]}.' for c in concepts if c in glosses]
    return "Common knowledge: " + " ".join(lines) + "\n"


def selection_instruction(instruction: str, kind: str, concept: str) -> str:
    return (META_INSTRUCTION if instruction == "meta" else TASK_INSTRUCTION).format(kind=kind, concept=concept)


def _triple(first: int) -> list[Segment]:
    return [
        " Original image:",
        ImageSlot(first),
        ". Candidate images: Image1:",
        ImageSlot(first + 1),
        ", Image2:",
        ImageSlot(first + 2),
        ".",
    ]


def selection_example(example: dict, kind: str, strategy: str) -> list[Segment]:
    """A solved example in front of the question (One-shot; CoT adds the reasoning). ``example``: ``names``
    (query, Image1, Image2), ``answer`` (0/1), ``concept``; its three images are the request's first three."""
    names, answer, concept = example["names"], example["answer"], example["concept"]
    reasoning = ""
    if strategy == "cot":
        parts = [f'The original image shows {names[0]}, which has the {kind} "{concept}".']
        for k in (0, 1):
            has = "also has" if k == answer else "does not have"
            parts.append(f"Image{k + 1} shows {names[k + 1]}, which {has} it.")
        reasoning = " Reasoning: " + " ".join(parts)
    return ["Here is an example.", *_triple(0), f"{reasoning} Answer: Image{answer + 1}.\nNow the question."]


def concept_selection_prompt(
    instruction: str, strategy: str, kind: str, concept: str, options: Sequence[str], example: dict | None = None
) -> list[Segment]:
    """Individual perception: which candidate shares the concept with the original image (three images, or six
    with a One-shot/CoT example first)."""
    head: list[Segment] = (
        [common_knowledge(kind, [concept] if instruction == "task" else options)] if strategy == "comknow" else []
    )
    first = 0
    if strategy in ("one-shot", "cot"):
        head += selection_example(example, kind, strategy)
        first = 3
    output = COT_SELECTION_OUTPUT if strategy == "cot" else SELECTION_OUTPUT
    return [*head, selection_instruction(instruction, kind, concept), *_triple(first), " " + output]


def concept_deduction_prompt(
    strategy: str, kind: str, offered: Sequence[str], example: dict | None = None
) -> list[Segment]:
    """The deduction step (Table 3's wording) over two offered concepts; with a One-shot/CoT example first."""
    listed = ", ".join(f"'{o}'" for o in offered)
    head: list[Segment] = [common_knowledge(kind, offered)] if strategy == "comknow" else []
    first = 0
    if strategy in ("one-shot", "cot"):
        names, concept = example["names"], example["concept"]
        reasoning = (
            f" Reasoning: the original image shows {names[0]} and the selected image shows {names[1]}; both have the "
            f'{kind} "{concept}".'
            if strategy == "cot"
            else ""
        )
        head += [
            "Here is an example. Original image:",
            ImageSlot(0),
            ". Selected image: ",
            ImageSlot(1),
            f".{reasoning} Answer: {concept}.\nNow the question. ",
        ]
        first = 2
    output = (
        COT_DEDUCTION_OUTPUT.format(kind=kind) + f" Options:[{listed}]"
        if strategy == "cot"
        else f"Your response should only include shared {kind} in the following options. Options:[{listed}]"
    )
    return [
        *head,
        f"Generate the common {kind} between the original image and selected images. Original image:",
        ImageSlot(first),
        ". Selected image: ",
        ImageSlot(first + 1),
        ". " + output,
    ]


def strategy_preamble(strategy: str, kind: str, concepts: Sequence[str]) -> str:
    """Text-only strategy for association tasks (their prompts carry memory and no room for example images):
    ComKnow's knowledge, or a worked example in words (One-shot; CoT with its reasoning)."""
    if strategy == "comknow":
        return common_knowledge(kind, concepts)
    if strategy in ("one-shot", "cot"):
        concept = concepts[0] if concepts else kind
        why = (
            f' Reasoning: the original image shows an object with the {kind} "{concept}"; Image1 shows one without it; '
            f"Image2 shows another object with it."
            if strategy == "cot"
            else ""
        )
        return (
            f'Example: an original image of an object with the {kind} "{concept}", Image1 of an object without it, '
            "Image2 of "
            f"an object with it.{why} Answer: Image2.\n"
        )
    return ""
