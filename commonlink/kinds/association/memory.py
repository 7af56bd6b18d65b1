"""The memory base of the association protocol (paper §4.3, appendix A.2, Table 3).

Each step of a chain leaves *evidence*: the concept(s) deduced for the query and the selected image, and the
names of those two images (the OCL object, the Pangea action phrase: :func:`image_name`). Four strategies:

* **NoM** -- no memory;
* **StructM** -- ``Given the memory: {'eat': ['sandwich', 'pizza']}`` (Table 3, verbatim: the memory is the
  Python dictionary ``{concept: [objects]}``);
* **NLM** -- ``Before this question, you have learnt that related pictures may have the following
  affordance:`` then ``['broccoli', 'orange'] have eat affordance`` per concept (Table 3, verbatim), closed by
  the harness's ``Based on these knowledge, answer the follwing quesion:`` (the "more detailed memory
  instruction" of A.2; kept letter for letter, typos included, so prompts equal the authors');
* **ChainM** -- each step is a subchain ``obj1->concept->obj2`` *concatenated into the prior memory* (§4.3):
  a subchain that continues from the last object adds only ``->concept->obj2``, after a space, so three steps
  read ``broccoli->eat->pizza ->eat->baked ->eat->sandwich`` (Table 3 shows the first two); the instruction is
  the harness's ChainM one (``... the following memory:`` / ``Based on these knowledge ...``).

StructM and NLM weight their entries ``(concept, object)`` by eq. (6): an entry in a step's evidence gains the
repetition weight ``w_r`` (1.0), every other entry loses the forgetting decrement ``d_f`` (0.2) and is dropped
at ``<= 0``; a new entry starts at 1.0. ChainM keeps the last ``chainm_window`` subchains (5, as the authors'
harness does; the paper states no cap; 0 keeps every one). Differences from the paper are listed in
docs/eval.md ("Association memory: deviations").
"""

from __future__ import annotations

from dataclasses import dataclass, field

from commonlink.kinds.association.format import describe_labels

MEMORY_KINDS = ("nom", "structm", "nlm", "chainm")
CHAINM_WINDOW = 5
STRUCTM_INSTRUCTION = "Given the memory:"
NLM_INSTRUCTION = "Before this question, you have learnt that related pictures may have the following {kind}:"
CHAINM_INSTRUCTION = "Before this question, you have learnt that related pictures may have the following memory:"
DETAILED_CLOSING = "Based on these knowledge, answer the follwing quesion:"  # sic: the authors' harness
UNKNOWN_CONCEPT = "?"  #: ChainM link text when the deduction named no option


def image_name(image) -> str:
    """How memory and review pages call an image: its ``name`` (OCL object, Pangea action phrase, or what its
    labels say, given when the chains were built), else what its labels say ("the image with a red circle")
    -- never a hash id, which would read as an object name."""
    name = getattr(image, "name", None)
    return name if name else describe_labels(getattr(image, "labels", None) or [])


def chain_text(links: list[tuple[str, str, str]]) -> str:
    """Subchains concatenated into one chain: ``a->c->b ->c->d`` (a subchain continuing from ``b``), or
    ``a->c->b x->c->y`` where it starts afresh."""
    parts: list[str] = []
    previous_end = None
    for start, concept, end in links:
        parts.append(f"->{concept}->{end}" if start == previous_end else f"{start}->{concept}->{end}")
        previous_end = end
    return " ".join(parts)


@dataclass
class MemoryBase:
    """The memory of one chain. Pure data; ``update`` is called once per step."""

    kind: str = "structm"
    repetition: float = 1.0
    forgetting: float = 0.2
    concept_kind: str = "attribute"  #: word used in NLM sentences ("attribute", "affordance", "action", ...)
    chainm_window: int = CHAINM_WINDOW  #: ChainM subchains kept (0 = all)
    weights: dict[tuple[str, str], float] = field(default_factory=dict)
    links: list[tuple[str, str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.kind not in MEMORY_KINDS:
            raise ValueError(f"memory kind must be one of {MEMORY_KINDS}, got {self.kind!r}")
        if self.chainm_window < 0:
            raise ValueError(f"chainm_window must be >= 0, got {self.chainm_window}")

    def update(self, query_name: str, selected_name: str, concepts: list[str]) -> None:
        """Record one step: the query, the image chosen, and the concept(s) deduced for the pair."""
        if self.kind == "nom":
            return
        if self.kind == "chainm":
            # The harness writes every deduced concept into the link, space-separated.
            self.links.append((query_name, " ".join(concepts) or UNKNOWN_CONCEPT, selected_name))
            if self.chainm_window:
                del self.links[: -self.chainm_window]
            return
        # in the order the harness writes them: per concept, the query's object, then the selected one
        evidence = dict.fromkeys((c, name) for c in concepts for name in (query_name, selected_name))
        for key in list(self.weights):
            if key in evidence:
                self.weights[key] += self.repetition
            else:
                self.weights[key] = round(self.weights[key] - self.forgetting, 10)
                if self.weights[key] <= 0:
                    del self.weights[key]
        for key in evidence:
            self.weights.setdefault(key, 1.0)

    def by_concept(self) -> dict[str, list[str]]:
        """``{concept: [objects by weight]}``, concepts by their strongest entry; ties keep first-seen order."""
        grouped: dict[str, list[tuple[float, str]]] = {}
        for (concept, name), weight in self.weights.items():
            grouped.setdefault(concept, []).append((weight, name))
        ordered = sorted(grouped.items(), key=lambda kv: -max(w for w, _ in kv[1]))
        return {c: [n for _, n in sorted(items, key=lambda wn: -wn[0])] for c, items in ordered}

    def render(self) -> str:
        """The memory context inserted before the question ("" for NoM or an empty memory)."""
        if self.kind == "nom":
            return ""
        if self.kind == "chainm":
            if not self.links:
                return ""
            return f"{CHAINM_INSTRUCTION}\n{chain_text(self.links)}. {DETAILED_CLOSING}"
        memory = self.by_concept()
        if not memory:
            return ""
        if self.kind == "structm":
            return f"{STRUCTM_INSTRUCTION} {memory!r}"
        sentences = ", ".join(f"{names!r} have {c} {self.concept_kind}" for c, names in memory.items())
        return f"{NLM_INSTRUCTION.format(kind=self.concept_kind)}\n{sentences}. {DETAILED_CLOSING}"

    def snapshot(self) -> dict:
        """A JSON-able copy for the per-step log, in the memory's own order: equal weights render in first-seen
        order, so a sorted copy would rebuild another prompt than the one the model saw."""
        if self.kind == "chainm":
            return {"links": [list(link) for link in self.links]}
        return {"weights": {f"{c}|{n}": round(w, 6) for (c, n), w in self.weights.items()}}

    def seed_fixed(self, examples: list[tuple[str, str, str]]) -> None:
        """Load a fixed correct memory (single-step task): ``(query, concept, other)`` examples."""
        for query_name, concept, other in examples:
            if self.kind == "chainm":
                self.update(query_name, other, [concept])
            elif self.kind != "nom":
                # A fixed memory does not decay between its own examples: every entry is equally trusted.
                for key in ((concept, query_name), (concept, other)):
                    self.weights[key] = self.weights.get(key, 0.0) + 1.0
