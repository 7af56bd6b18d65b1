"""Association tasks built annotation-free from a labelled image set (paper §3, §4.1; docs/sampling.md).

Two samples are associated when their label sets intersect. For every chosen concept ``c`` the *positive pool*
holds the images labelled ``c``; the *negative pool* of a task holds the images that carry none of the task's
concepts. By default (``negatives="disjoint"``, the paper's eqs. 1, 4, 5: ``y_query ∩ y_q = ∅``) a negative
also shares no label at all with the step's query; ``negatives="chain"`` (the earlier default) only asks that
it lack the task's concepts. From the pools:

* **single_step** -- a query, ``memory_size`` memory images that share the concept, and two candidates (the
  positive and a negative, shuffled) with the answer index;
* **deduction** -- two images from one concept's pool, the option list (the chosen concepts) and the gold
  shared concepts;
* **synchronous** -- per concept, chains pre-sampled to ``warmup + max_steps`` steps: the positive of step
  ``t`` is the query of step ``t + 1``; each step has one positive and one negative candidate;
* **asynchronous** -- per concept pair, the period schedule ``run`` steps on concept 1, ``bridge`` steps from
  the pool sharing both, ``run`` steps on concept 2, ``bridge`` steps (3-1-3-1 in the authors' harness).

Every unit (one task, one chain) has its own generator ``rng_for(seed, kind, concept(s), index)``, so any
chain can be rebuilt alone and results do not depend on build order. Chains are drawn with numpy a chain at a
time and written as they are made (memory stays flat as the number of chains grows). Invariants are checked
on every task: a positive shares the step's concept with its query, a negative carries none of the task's
concepts (and, with disjoint negatives, no label of its query), the two candidates differ, and a positive is
never its own query.

Files written into the output folder (see README "chains"): ``images.jsonl`` (the image table) and one
``<task>.jsonl`` per task type with a ``<task>.jsonl.meta.json`` sidecar of kind ``association_chains``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from commonlink import __version__
from commonlink.errors import NotEnoughDataError
from commonlink.fileio import atomic_write, remove_stale_temp_files, sha256_file
from commonlink.formats.meta import (
    ASSOCIATION_CHAINS_KIND,
    meta_path,
    utc_now,
    write_meta,
)
from commonlink.kinds.association.chain_builder import AssociationBuilder, ChainArrays
from commonlink.kinds.association.chain_config import NEGATIVE_MODES, ChainConfig, ChainInvariantError
from commonlink.kinds.association.chain_plan import BuildPlan, parse_concepts, parse_pairs, plan_build, use_preset
from commonlink.kinds.association.chain_sources import SourceReport
from commonlink.kinds.association.format import (
    IMAGE_TABLE_TASK,
    IMAGES_FILENAME,
    TASKS,
    LabelledImage,
    name_unnamed,
    task_file,
    with_sha256,
)
from commonlink.kinds.association.label_index import LabelIndex, without_disjoint_negative
from commonlink.locks import output_lock
from commonlink.progress import track


# ---------------------------------------------------------------------------------------------- writing
@dataclass
class BuildSummary:
    out_dir: Path
    files: dict[str, Path]  #: task -> chain file
    counts: dict[str, int]
    steps: int
    skipped: list[str]  #: tasks found already built with the same settings
    plan: BuildPlan


def _write_images(out_dir: Path, index: LabelIndex) -> Path:
    path = out_dir / IMAGES_FILENAME
    with atomic_write(path, "w") as handle:
        for i, img in enumerate(index.images):
            # the file's sha256, recorded now (the release refuses an image changed after `chains`); catalogs named
            # relative to the table (formats.catalog_refs)
            handle.write(
                json.dumps(
                    {"index": i, **dataclasses.replace(img, origin=with_sha256(img.origin)).to_json(path)},
                    ensure_ascii=False,
                )
                + "\n"
            )
    return path


def _iter_units(plan: BuildPlan, config: ChainConfig, task: str) -> list[tuple]:
    if task == "single_step":
        return [(c, i) for c in plan.concepts for i in range(config.single_step_per_concept)]
    if task == "deduction":
        return [(c, i) for c in plan.concepts for i in range(config.deductions_per_concept)]
    if task == "synchronous":
        return [(c, i) for c in plan.concepts for i in range(plan.chain_counts[c])]
    return [(tuple(p), i) for p in plan.pairs for i in range(plan.chain_counts[f"{p[0]}+{p[1]}"])]


def _lines(builder: AssociationBuilder, task: str, units: list[tuple]) -> Iterator[str]:
    method = getattr(builder, task)
    for unit, number in units:
        made = method(unit, number)
        if isinstance(made, ChainArrays):
            yield made.to_line(builder.index.digits())
        else:
            yield json.dumps(made, ensure_ascii=False, separators=(",", ":"))


def build_chain_files(
    images: Sequence[LabelledImage],
    out_dir: str | os.PathLike,
    config: ChainConfig,
    *,
    source: SourceReport | None = None,
    progress: bool = True,
    lock: bool = True,
) -> BuildSummary:
    """Build every task type of ``config.tasks`` into ``out_dir`` (one JSONL + meta sidecar per task).

    A task whose meta already records the same settings, source and image table is skipped (rerunning after an
    interruption redoes only what is missing); every file is written atomically. One run per ``out_dir`` at a
    time (a second is refused, naming the first); temporary files that killed runs left there are removed first.
    ``lock=False``: the caller already holds ``out_dir``'s writer lock (``chains verify`` rebuilding into its
    output), so the build does not take it again.
    """
    out_dir = Path(out_dir)
    with output_lock(out_dir, what="commonlink chains") if lock else contextlib.nullcontext():
        remove_stale_temp_files(out_dir)
        return _build_chain_files(images, out_dir, config, source=source, progress=progress)


def _build_chain_files(
    images: Sequence[LabelledImage], out_dir: Path, config: ChainConfig, *, source: SourceReport | None, progress: bool
) -> BuildSummary:
    index, plan = _index_and_plan(images, config)
    out_dir.mkdir(parents=True, exist_ok=True)
    builder = AssociationBuilder(index, config, plan.options)
    images_path = _write_images(out_dir, index)
    # The image table gets a sidecar too, so `release build OUT/*.jsonl` accepts it (and skips it).
    images_sha = write_meta(
        images_path,
        {
            "kind": ASSOCIATION_CHAINS_KIND,
            "task": IMAGE_TABLE_TASK,
            "toolkit_version": __version__,
            "seed": config.seed,
            "images": len(index),
        },
    )["sha256"]
    counts = {task: len(_iter_units(plan, config, task)) for task in config.tasks}
    base_meta = _base_meta(config, source, plan, counts, images=len(index), images_sha=images_sha)
    steps_per_chain = config.warmup + config.max_steps
    files, skipped = {}, []
    for task in config.tasks:
        meta = {
            **base_meta,
            "task": task,
            "rows": counts[task],
            "steps": counts[task] * steps_per_chain if task in ("synchronous", "asynchronous") else counts[task],
        }
        files[task] = task_file(out_dir, task)
        if _already_built(files[task], meta):
            skipped.append(task)
        else:
            _write_task(files[task], meta, builder, _iter_units(plan, config, task), progress=progress)
    total_steps = sum(counts.get(t, 0) for t in ("synchronous", "asynchronous")) * steps_per_chain
    return BuildSummary(out_dir, files, counts, total_steps, skipped, plan)


def _index_and_plan(images: Sequence[LabelledImage], config: ChainConfig) -> tuple[LabelIndex, BuildPlan]:
    """The images over the pixel floor, each named, as a :class:`LabelIndex`, and the plan drawn from it (its notes
    say what was left out and why, and which images are kept out of query and negative positions)."""
    small = sum(1 for img in images if img.pixels < config.min_pixels)
    if small:  # readers already drop these; callers passing their own lists get the same rule
        images = [img for img in images if img.pixels >= config.min_pixels]
    images = name_unnamed(images)  # memories, prompts and review pages name every image by what it shows
    index = LabelIndex(images)
    if len(index) == 0:
        raise NotEnoughDataError(
            "The source has no labelled image left to build from.",
            "Check the label column/field, and lower --min-pixels if images were dropped as too small.",
        )
    plan = plan_build(index, config)
    if small:
        plan.notes.append(f"{small} image(s) under {config.min_pixels:,} pixels left out")
    return index, plan


def _base_meta(
    config: ChainConfig,
    source: SourceReport | None,
    plan: BuildPlan,
    counts: dict[str, int],
    *,
    images: int,
    images_sha: str,
) -> dict:
    """What every task file's sidecar records (the settings, the source, the image table and the plan)."""
    return {
        "kind": ASSOCIATION_CHAINS_KIND,
        "toolkit_version": __version__,
        "seed": config.seed,
        "config": config.to_json(),
        "source": dataclasses.asdict(source) if source else None,
        "images_file": IMAGES_FILENAME,
        "images": images,
        "images_sha256": images_sha,
        "concept_kind": config.concept_kind,
        "options": plan.options,
        "concepts": [
            {
                "name": c,
                "pool_size": plan.pool_sizes[c],
                "negative_pool_size": plan.negative_pool_sizes.get(c),
                "no_disjoint_negative": plan.no_disjoint_negative.get(c, 0),
            }
            for c in plan.concepts
        ],
        "pairs": [
            {
                "concepts": p,
                "bridge_pool_size": plan.bridge_pool_sizes[f"{p[0]}+{p[1]}"],
                "no_disjoint_negative": plan.no_disjoint_negative.get(f"{p[0]}+{p[1]}", 0),
            }
            for p in plan.pairs
        ],
        "counts": counts,
        "notes": plan.notes,
        "chain_counts": plan.chain_counts,
        "images_without_disjoint_negative": plan.without_disjoint_negative,
    }


def _write_task(path: Path, meta: dict, builder: AssociationBuilder, units: list[tuple], *, progress: bool) -> None:
    """Draw every unit of one task type into ``path`` (atomically), then its sidecar (sha256 and rows)."""
    task = meta["task"]
    lines = _lines(builder, task, units)
    if progress:
        lines = track(lines, f"{task} ({len(units)})", total=len(units), unit="tasks")
    with atomic_write(path, "w") as handle:
        for line in lines:
            handle.write(line + "\n")
    meta["created"] = utc_now()
    write_meta(path, meta)


_VOLATILE = ("created", "sha256")


def _already_built(path: Path, meta: dict) -> bool:
    mp = meta_path(path)
    if not (path.is_file() and mp.is_file()):
        return False
    try:
        old = json.loads(mp.read_text(encoding="utf-8"))
    except (OSError, ValueError):  # unreadable, not UTF-8 or not JSON: rebuilt
        return False
    if not isinstance(old, dict):
        return False
    if {k: v for k, v in old.items() if k not in _VOLATILE} != {k: v for k, v in meta.items() if k not in _VOLATILE}:
        return False
    return old.get("sha256") == sha256_file(path)


#: The builder's public names, importable from here as before the split into modules.
__all__ = [
    "NEGATIVE_MODES",
    "TASKS",
    "AssociationBuilder",
    "BuildPlan",
    "BuildSummary",
    "ChainArrays",
    "ChainConfig",
    "ChainInvariantError",
    "LabelIndex",
    "build_chain_files",
    "meta_path",
    "parse_concepts",
    "parse_pairs",
    "plan_build",
    "use_preset",
    "without_disjoint_negative",
]
