"""What an association build is asked for (:class:`ChainConfig`, recorded in every meta sidecar) and the error
a built task that breaks an invariant raises (docs/sampling.md "chains")."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from commonlink.constants import DEFAULT_MIN_PIXELS
from commonlink.errors import CommonlinkError, InputError
from commonlink.kinds.association.format import PLAN_BRIDGE, PLAN_CONCEPT_1, PLAN_CONCEPT_2, TASKS

NEGATIVE_MODES = ("disjoint", "chain")


#: The paper's chains per concept, max(PAPER_CHAINS, pool size), for its pools of thousands of images.
PAPER_CHAINS = 2000
#: Chains per pool image for pools smaller than PAPER_CHAINS / CHAINS_PER_IMAGE (each image starts about that many)
CHAINS_PER_IMAGE = 4
MIN_CHAINS = 10
#: Chain steps in all (chains x pre-sampled steps) above which a build is warned about before it starts
LARGE_BUILD_STEPS = 5_000_000


def scaled_chain_count(pool_size: int) -> int:
    """Chains for a pool of ``pool_size`` images when ``--chains`` is not given: the paper's
    ``max(2000, pool size)`` for pools of 500 images or more (the paper's pools hold thousands), else
    ``CHAINS_PER_IMAGE`` chains per image (at least ``MIN_CHAINS``): a 30-image pool gets 120 chains, not 2000
    near-copies of the same few images."""
    if CHAINS_PER_IMAGE * pool_size >= PAPER_CHAINS:
        return max(PAPER_CHAINS, pool_size)
    return max(MIN_CHAINS, CHAINS_PER_IMAGE * pool_size)


class ChainInvariantError(CommonlinkError):
    """A built task breaks an association invariant (a bug, never bad input)."""


@dataclass
class ChainConfig:
    """Everything that decides what gets built (recorded in every meta sidecar)."""

    seed: int = 0
    concepts: list[str] | None = None  #: explicit concepts; else the top_k largest pools
    top_k: int = 8
    min_pool: int = 10  #: smallest pool a top-k concept may have
    pairs: list[list[str]] | None = None  #: asynchronous concept pairs; None = pick up to auto_pairs
    auto_pairs: int = 4
    min_pixels: int = DEFAULT_MIN_PIXELS  #: applied by the source reader; recorded here
    memory_size: int = 3  #: K memory examples of a single-step task
    single_step_per_concept: int = 100
    deductions_per_concept: int = 100
    #: synchronous chains per concept and asynchronous chains per pair; None: scaled to the pool (chain_count)
    chains_per_concept: int | None = None
    max_steps: int = 500  #: scored steps a chain is pre-sampled to (after the warm-up steps)
    warmup: int = 3  #: warm-up steps at the start of each chain (the correct choice is forced in eval)
    async_run: int = 3  #: steps on one concept before a bridge
    bridge_steps: int = 1
    #: disjoint: a negative shares no label with its query (paper eq. 1); chain: it lacks the task's concepts
    negatives: str = "disjoint"
    preset: str | None = None  #: the paper's concept set the concepts and pairs came from (sampling.presets)
    concept_kind: str = "concept"  #: what the labels are (attribute, affordance, action, object): used by prompts
    tasks: list[str] = field(default_factory=lambda: list(TASKS))

    def validate(self) -> None:
        unknown = [t for t in self.tasks if t not in TASKS]
        if unknown:
            raise InputError(f"Unknown task type(s) {unknown}.", f"Use some of: {', '.join(TASKS)}.")
        if self.negatives not in NEGATIVE_MODES:
            raise InputError(f"--negatives must be one of {NEGATIVE_MODES}, not {self.negatives!r}.")
        checks = {
            "--memory-size": (self.memory_size, 0),
            "--max-steps": (self.max_steps, 1),
            "--warmup": (self.warmup, 0),
            "--async-run": (self.async_run, 1),
            "--bridge-steps": (self.bridge_steps, 1),
            "--top-k": (self.top_k, 1),
            "--chains": (0 if self.chains_per_concept is None else self.chains_per_concept, 0),
            "--single-steps": (self.single_step_per_concept, 0),
            "--deductions": (self.deductions_per_concept, 0),
            "--min-pool": (self.min_pool, 1),
        }
        for option, (value, low) in checks.items():
            if value < low:
                raise InputError(f"{option} must be at least {low}, got {value}.")

    @property
    def builds_chains(self) -> bool:
        return self.chains_per_concept != 0

    def chain_count(self, pool_size: int) -> int:
        """Chains of a concept (synchronous) or pair (asynchronous, ``pool_size``: images of either concept):
        ``--chains`` when given, else scaled to the pool (:func:`scaled_chain_count`)."""
        return self.chains_per_concept if self.chains_per_concept is not None else scaled_chain_count(pool_size)

    def async_period(self) -> str:
        return (
            PLAN_CONCEPT_1 * self.async_run
            + PLAN_BRIDGE * self.bridge_steps
            + PLAN_CONCEPT_2 * self.async_run
            + PLAN_BRIDGE * self.bridge_steps
        )

    def to_json(self) -> dict:
        return dataclasses.asdict(self)
