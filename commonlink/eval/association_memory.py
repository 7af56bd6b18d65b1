"""The memory base of the association protocol (paper §4.3, appendix A.2).

Each step of a chain leaves *evidence*: the concept(s) deduced for the query and the selected image, and the
names of those two images. The memory keeps weighted entries ``(concept, object)``:

* a new entry starts at weight ``1.0``;
* an entry that appears again in a step's evidence gains the repetition weight ``w_r`` (default ``+1.0``);
* every other entry loses the forgetting decrement ``d_f`` (default ``0.2``) each step and is dropped at ``<= 0``.

StructM renders the memory as a ``{concept: [objects]}`` dictionary, NLM as sentences, ChainM keeps the last
five ``obj -> concept -> obj`` links (no weights, as in the authors' harness). NoM has no memory.
"""

from __future__ import annotations

from dataclasses import dataclass, field

MEMORY_KINDS = ("nom", "structm", "nlm", "chainm")
CHAINM_LINKS = 5


@dataclass
class MemoryBase:
    """The memory of one chain. Pure data; ``update`` is called once per step."""

    kind: str = "structm"
    repetition: float = 1.0
    forgetting: float = 0.2
    concept_kind: str = "attribute"  #: word used in NLM sentences ("attribute", "affordance", "action", ...)
    weights: dict[tuple[str, str], float] = field(default_factory=dict)
    links: list[tuple[str, str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.kind not in MEMORY_KINDS:
            raise ValueError(f"memory kind must be one of {MEMORY_KINDS}, got {self.kind!r}")

    def update(self, query_name: str, selected_name: str, concepts: list[str]) -> None:
        """Record one step: the query, the image chosen, and the concept(s) deduced for the pair."""
        if self.kind == "nom":
            return
        if self.kind == "chainm":
            for concept in concepts[:1] or ["?"]:
                self.links.append((query_name, concept, selected_name))
            del self.links[:-CHAINM_LINKS]
            return
        evidence = {(c, name) for c in concepts for name in (query_name, selected_name)}
        for key in list(self.weights):
            if key in evidence:
                self.weights[key] += self.repetition
            else:
                self.weights[key] = round(self.weights[key] - self.forgetting, 10)
                if self.weights[key] <= 0:
                    del self.weights[key]
        for key in sorted(evidence):
            self.weights.setdefault(key, 1.0)

    def by_concept(self) -> dict[str, list[str]]:
        """``{concept: [objects by weight, then name]}``; concepts ordered by their strongest entry."""
        grouped: dict[str, list[tuple[float, str]]] = {}
        for (concept, name), weight in self.weights.items():
            grouped.setdefault(concept, []).append((weight, name))
        ordered = sorted(grouped.items(), key=lambda kv: (-max(w for w, _ in kv[1]), kv[0]))
        return {c: [n for _, n in sorted(items, key=lambda wn: (-wn[0], wn[1]))] for c, items in ordered}

    def render(self) -> str:
        """The memory context inserted before the question ("" for NoM or an empty memory)."""
        if self.kind == "nom":
            return ""
        if self.kind == "chainm":
            if not self.links:
                return ""
            chain = " ".join(f"{a}->{c}->{b}" for a, c, b in self.links)
            return f"Before this question, you have learnt the following association chain: {chain}"
        memory = self.by_concept()
        if not memory:
            return ""
        if self.kind == "structm":
            body = "{" + ", ".join(f"'{c}': [" + ", ".join(f"'{n}'" for n in names) + "]" for c, names in memory.items()) + "}"
            return f"Given the memory: {body}"
        sentences = "; ".join(
            "[" + ", ".join(f"'{n}'" for n in names) + f"] have {c} {self.concept_kind}" for c, names in memory.items()
        )
        return f"Before this question, you have learnt that related pictures may have the following {self.concept_kind}: {sentences}"

    def snapshot(self) -> dict:
        """A JSON-able copy for the per-step log."""
        if self.kind == "chainm":
            return {"links": [list(link) for link in self.links]}
        return {"weights": {f"{c}|{n}": round(w, 6) for (c, n), w in sorted(self.weights.items())}}

    def seed_fixed(self, examples: list[tuple[str, str, str]]) -> None:
        """Load a fixed correct memory (single-step task): ``(query, concept, other)`` examples."""
        for query_name, concept, other in examples:
            if self.kind == "chainm":
                self.update(query_name, other, [concept])
            elif self.kind != "nom":
                # A fixed memory does not decay between its own examples: every entry is equally trusted.
                for key in ((concept, query_name), (concept, other)):
                    self.weights[key] = self.weights.get(key, 0.0) + 1.0
