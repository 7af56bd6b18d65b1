"""Verification as the Labyrinth authors' harness did it (``LLM_Inception`` data/refinement/refine.py), the
``paper`` protocol of ``chains verify``: every image of the build's concept pools (and so of its bridge pools,
whose images are asked about both concepts) is asked the harness's question, a claim stands only where a
verifier answered "Yes", and the chains are rebuilt from the filtered pools **before** anything is scored,
with the build's own settings and seed. The ``strict`` protocol (:mod:`commonlink.kinds.association.refine.verify`
with :mod:`commonlink.kinds.association.refine.repair`) asks the claims of the built tasks instead and repairs the
tasks afterwards.

The harness keeps an unconfirmed image out of that concept's pool only; the builder has no "neither
positive nor negative" state, so here such an image leaves the build (it could otherwise become a negative
for the very concept it is labelled with). The report lists every image that left and why.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from commonlink.errors import InputError, NotEnoughDataError
from commonlink.eval.backends import GenerationSettings
from commonlink.formats.meta import write_meta
from commonlink.kinds.association.chains import BuildSummary, ChainConfig, build_chain_files
from commonlink.kinds.association.format import TASKS, LabelledImage, read_chain_meta
from commonlink.kinds.association.refine.claims import Claim, Decision
from commonlink.kinds.association.refine.repair import Outcome
from commonlink.kinds.association.refine.verifiers import (
    HARNESS_VERIFY_INSTRUCTION,
    HARNESS_VERIFY_PROTOCOL,
    HARNESS_VERIFY_QUESTION,
)

#: ``paper``: the authors' harness (pools verified, only "Yes" kept, chains rebuilt); ``strict``: ours, post hoc
#: (the built tasks' claims, negatives too, with our question; undecided kept by default; tasks repaired).
VERIFY_PROTOCOLS = ("paper", "strict")


def check_protocol(protocol: str, *, on_fail, undecided, negatives) -> str:
    """``protocol`` if known and the options given belong to it (``None`` = not given): ``on_fail`` and
    ``negatives`` are the strict protocol's; ``undecided`` may only be ``reject`` under paper (only Yes stands)."""
    if protocol not in VERIFY_PROTOCOLS:
        raise InputError(
            f"--protocol {protocol!r} is not a verification protocol.",
            "Use --protocol paper (the authors' harness: pools filtered, chains rebuilt) or strict (post-hoc repair).",
        )
    given = [
        name
        for name, value in (("--on-fail", on_fail), ("--undecided", undecided), ("--negatives", negatives))
        if value is not None and not (name == "--undecided" and value == "reject")
    ]
    if protocol == "paper" and given:
        raise InputError(
            f"{', '.join(given)} belong to --protocol strict (post-hoc repair of the built tasks).",
            "Drop them (the paper protocol keeps only Yes and rebuilds the chains), or add --protocol strict.",
        )
    return protocol


def pool_claims(table: Sequence[LabelledImage], options: Sequence[str]) -> list[Claim]:
    """The paper protocol's claims: every image of every concept pool, for each build concept it is labelled
    with (a bridge image is asked about both of its concepts, as the harness asks ``res1`` and ``res2``)."""
    wanted = set(options)
    return [(i, c) for i, img in enumerate(table) for c in img.labels if c in wanted]


def who_verified(model_infos: list[dict], generation: GenerationSettings, decision_files: list[str]) -> dict:
    """The part of a ``verification`` block (either protocol) that names the verifying models and decision files."""
    return {
        "models": model_infos or None,
        "generation": generation.to_dict() if model_infos else None,
        "model": {**model_infos[0], "generation": generation.to_dict()} if model_infos else None,
        "human_decisions": decision_files or None,
    }


def harness_verification(
    decided: dict[Claim, Decision],
    claims: Sequence[Claim],
    model_infos: list[dict],
    generation: GenerationSettings,
    decision_files: list[str],
) -> dict:
    """The ``verification`` block of the rebuilt files' sidecars and of verification.json."""
    verdicts = Counter(d.verdict for d in decided.values())
    return {
        "protocol": HARNESS_VERIFY_PROTOCOL,
        "verify_protocol": "paper",
        **who_verified(model_infos, generation, decision_files),
        "prompt": f"{HARNESS_VERIFY_QUESTION} <image> {HARNESS_VERIFY_INSTRUCTION}",
        "undecided_rule": "reject",
        "negatives_asked": False,
        "pools_filtered_before_build": True,
        "claims": len(claims),
        "absence_claims": 0,
        "rejected": verdicts["reject"],
        "undecided": verdicts["undecided"],
        "rejected_by": dict(Counter(d.source for d in decided.values() if d.applied("reject") == "reject")),
        "report": "verification.json",
    }


def rebuild_from_verified(
    table: Sequence[LabelledImage],
    decided: dict[Claim, Decision],
    inputs: Sequence,
    config: ChainConfig,
    out_dir: Path,
    verification: dict,
    progress: bool,
) -> tuple[list[str], BuildSummary, dict[str, Outcome]]:
    """Leave out every image with a claim that does not stand (only Yes stands: undecided falls like No, as the
    harness keeps ``res == 1`` only), rebuild the input's task types from the rest with the build's settings,
    and record ``verification`` in each new sidecar. Returns (image ids left out, the build, per-task counts)."""
    leaving = sorted({table[i].id for (i, _), d in decided.items() if d.applied("reject") == "reject"})
    gone = set(leaving)
    verification.update(images_in=len(table), images_left_out=len(leaving))
    config.tasks = [t for t in TASKS if t in {inp.task for inp in inputs}]
    try:
        built = build_chain_files(  # verify_tasks holds out_dir's lock
            [img for img in table if img.id not in gone], out_dir, config, progress=progress, lock=False
        )
    except NotEnoughDataError as exc:
        raise NotEnoughDataError(
            f"After verification {len(leaving)} of {len(table)} images left the build (not confirmed Yes), and the "
            f"chains cannot be rebuilt from the rest: {exc.problem}",
            f"{exc.fix or ''} Or verify with a stronger model, or use --protocol strict (post-hoc repair keeps "
            "the build).",
        ) from None
    outcomes: dict[str, Outcome] = {}
    for task, path in built.files.items():
        meta = read_chain_meta(path)
        before = next(inp for inp in inputs if inp.task == task)
        outcome = outcomes[task] = Outcome(rows=int(before.meta.get("rows", 0)), kept_rows=int(meta.get("rows", 0)))
        outcome.steps, outcome.kept_steps = int(before.meta.get("steps", 0)), int(meta.get("steps", 0))
        outcome.dropped_rows = max(0, outcome.rows - outcome.kept_rows)
        write_meta(
            path,
            {
                **meta,
                "verification": {**verification, "rows_in": outcome.rows, "rows_kept": outcome.kept_rows},
                "verified_from": str(before.path.resolve()),
            },
        )
    return leaving, built, outcomes
