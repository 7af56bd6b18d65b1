"""Memory weights and answer parsing of the association protocol, worked out by hand."""

import pytest

from commonlink.kinds.association.memory import (
    MemoryBase,
    chain_text,
    image_name,
)
from commonlink.kinds.association.prompts import (
    ImageSlot,
    deduction_prompt,
    parse_concepts,
    parse_selection,
    prompt_text,
    selection_prompt,
)


def test_weights_repeat_and_forget_step_by_step():
    m = MemoryBase("structm")
    m.update("apple", "pear", ["ripe"])
    assert m.weights == {("ripe", "apple"): 1.0, ("ripe", "pear"): 1.0}
    m.update("pear", "plum", ["ripe"])  # pear repeats (+1), apple decays (-0.2), plum is new (1)
    assert m.weights == {("ripe", "apple"): 0.8, ("ripe", "pear"): 2.0, ("ripe", "plum"): 1.0}
    m.update("plum", "fig", ["fresh"])  # all old entries decay except none in evidence
    assert m.weights == {
        ("ripe", "apple"): 0.6,
        ("ripe", "pear"): 1.8,
        ("ripe", "plum"): 0.8,
        ("fresh", "plum"): 1.0,
        ("fresh", "fig"): 1.0,
    }
    for _ in range(3):
        m.update("x", "y", ["other"])
    # apple: 0.6 -> 0.4 -> 0.2 -> 0.0 dropped; plum(ripe): 0.8 -> 0.2; pear: 1.8 -> 1.2
    assert ("ripe", "apple") not in m.weights
    assert m.weights[("ripe", "plum")] == pytest.approx(0.2)
    assert m.weights[("ripe", "pear")] == pytest.approx(1.2)
    assert m.weights[("other", "x")] == pytest.approx(3.0)


def test_custom_repetition_and_forgetting():
    m = MemoryBase("nlm", repetition=0.5, forgetting=0.5)
    m.update("a", "b", ["c"])
    m.update("b", "d", ["c"])
    assert m.weights == {("c", "a"): 0.5, ("c", "b"): 1.5, ("c", "d"): 1.0}
    m.update("e", "f", ["g"])
    assert ("c", "a") not in m.weights  # 0.5 - 0.5 = 0 -> dropped


def test_renderings():
    s = MemoryBase("structm")
    s.update("broccoli", "pizza", ["eat"])
    assert s.render() == "Given the memory: {'eat': ['broccoli', 'pizza']}"
    n = MemoryBase("nlm", concept_kind="affordance")
    n.update("broccoli", "orange", ["eat"])
    assert "['broccoli', 'orange'] have eat affordance" in n.render()
    c = MemoryBase("chainm")
    for i in range(7):
        c.update(f"o{i}", f"o{i + 1}", ["eat"])
    assert len(c.links) == 5 and c.links[0] == ("o2", "eat", "o3")  # the harness's window of 5 subchains
    assert "\no2->eat->o3 ->eat->o4 ->eat->o5 ->eat->o6 ->eat->o7. " in c.render()
    everything = MemoryBase("chainm", chainm_window=0)
    for i in range(7):
        everything.update(f"o{i}", f"o{i + 1}", ["eat"])
    assert len(everything.links) == 7 and "\no0->eat->o1 ->eat->o2" in everything.render()
    assert MemoryBase("nom").render() == ""
    with pytest.raises(ValueError):
        MemoryBase("bogus")


def test_chainm_after_three_steps_matches_the_paper_example():
    """Table 3 shows ChainM memory after two steps as ``broccoli->eat->pizza ->eat->baked``: each subchain
    obj1->concept->obj2 is concatenated into the prior memory (§4.3). Worked out by hand for a third step."""
    c = MemoryBase("chainm", concept_kind="affordance")
    c.update("broccoli", "pizza", ["eat"])
    assert chain_text(c.links) == "broccoli->eat->pizza"
    c.update("pizza", "baked", ["eat"])
    assert chain_text(c.links) == "broccoli->eat->pizza ->eat->baked"  # the paper's Table 3, verbatim
    c.update("baked", "sandwich", ["cut"])
    assert c.render() == (
        "Before this question, you have learnt that related pictures may have the following memory:\n"
        "broccoli->eat->pizza ->eat->baked ->cut->sandwich. Based on these knowledge, answer the follwing quesion:"
    )
    # a subchain that does not continue from the last object starts afresh (e.g. a fixed single-step memory)
    c.update("apple", "pear", ["cut", "eat"])
    assert chain_text(c.links).endswith("->cut->sandwich apple->cut eat->pear")
    # no deduced option: the link says so instead of vanishing
    c.update("pear", "fig", [])
    assert chain_text(c.links).endswith("->?->fig")


def test_structm_and_nlm_text_is_the_papers():
    s = MemoryBase("structm")
    s.update("sandwich", "pizza", ["eat"])
    assert s.render() == "Given the memory: {'eat': ['sandwich', 'pizza']}"  # Table 3, verbatim
    n = MemoryBase("nlm", concept_kind="affordance")
    n.update("broccoli", "orange", ["eat"])
    assert n.render() == (
        "Before this question, you have learnt that related pictures may have the following affordance:\n"
        "['broccoli', 'orange'] have eat affordance. Based on these knowledge, answer the follwing quesion:"
    )
    n.update("orange", "knife", ["cut"])  # eat entries decay to 0.8; cut entries are new at 1.0 and come first
    assert "\n['orange', 'knife'] have cut affordance, ['broccoli', 'orange'] have eat affordance. Based" in n.render()


def test_images_without_a_name_are_named_by_what_they_show():
    class Img:
        def __init__(self, name, labels):
            self.name, self.labels, self.id = name, labels, "105cc6325a037a5d"

    assert image_name(Img("sandwich", ["green", "shiny"])) == "sandwich"
    assert image_name(Img(None, ["red circle", "blue square"])) == "the image with a red circle and a blue square"
    assert image_name(Img(None, ["orange", "egg", "cup"])) == "the image with an orange, an egg and a cup"
    assert "105cc" not in image_name(Img(None, ["green"]))


def test_name_unnamed_gives_every_image_its_own_name():
    from commonlink.kinds.association.format import LabelledImage, name_unnamed

    images = [
        LabelledImage(i, labels, 8, 8, {})
        for i, labels in (("c", ["red circle"]), ("a", ["red circle"]), ("b", ["red circle", "blue square"]))
    ]
    images.append(LabelledImage("d", ["red circle"], 8, 8, {}, name="mug"))
    named = {img.id: img.name for img in name_unnamed(images)}
    assert named == {
        "a": "the image with a red circle (1)",
        "c": "the image with a red circle (2)",
        "b": "the image with a red circle and a blue square",
        "d": "mug",
    }
    m = MemoryBase("structm")
    for img in ("a", "c", "b"):
        m.update(named[img], named["d"], ["red circle"])
    assert len(m.by_concept()["red circle"]) == 4  # three memory images stay three entries (plus the mug)


def test_fixed_memory_has_no_decay():
    m = MemoryBase("structm")
    m.seed_fixed([("a", "ripe", "b"), ("c", "ripe", "d"), ("e", "fresh", "f")])
    assert set(m.weights.values()) == {1.0}


@pytest.mark.parametrize(
    "text,expected",
    [
        ("Image1", 0),
        ("image 2", 1),
        ("**Image2**", 1),
        ("The answer is Image_1.", 0),
        ("<think>Image1 looks metal but</think>\nImage2", 1),
        ("Reasoning: maybe Image1...\nAnswer: Image 2", 1),
        ("the second image", 1),
        ("2", 1),
        ("Image1 or Image2", None),
        ("I cannot tell", None),
        ("<think>never finished Image1", None),
        # the chat template opened <think> in the prompt: only the close tag is in the output
        ("Image1 is wooden, Image2 is metal like the original.\n</think>\n\nImage2", 1),
    ],
)
def test_parse_selection(text, expected):
    assert parse_selection(text) == expected


def test_parse_concepts():
    options = ["cut", "clean", "open", "push"]
    assert parse_concepts("Clean", options) == ["clean"]
    assert parse_concepts("['open', 'Push']", options) == ["open", "push"]
    assert parse_concepts("uncut", options) is None  # whole words only
    assert parse_concepts("nothing", options) is None
    # reasoning before a lone </think> (template-opened block) is not the answer
    assert parse_concepts("Could be cut or push... both open?\n</think>\nclean", options) == ["clean"]


def test_prompts_follow_table_3():
    segs = selection_prompt("attribute", "Given the memory: {'ripe': ['apple']}")
    assert [s.index for s in segs if isinstance(s, ImageSlot)] == [0, 1, 2]
    text = prompt_text(segs)
    assert text.startswith("Given the memory:")
    assert "select the images with the same attribute as the original image" in text
    assert text.endswith("Options: [Image1, Image2].")
    ded = prompt_text(deduction_prompt("affordance", ["cut", "open"]))
    assert "Options:['cut', 'open']" in ded and ded.count("<image>") == 2
