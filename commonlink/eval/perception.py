"""Single-image perception baseline (paper §3.2): "Is <object> in this image?" answered yes or no.

For every row, one of its two images is drawn (seeded per row), and two questions are asked about it: one
object that *is* in that image (from its object list) and one that is *not* (a choice of the same row absent
from that image). Positives and negatives are therefore balanced and come from the same rows. A row whose
image has no listed objects, or no absent choice, is skipped with that reason.

Metrics: accuracy over all questions; hallucination rate = share of absent objects answered "yes";
recall on present objects; parse failures (neither yes nor no) count as wrong.
"""

from __future__ import annotations

import os
from pathlib import Path

from commonlink import __version__
from commonlink.constants import NO_COMMON_OBJECTS
from commonlink.errors import NotEnoughDataError
from commonlink.eval.backends import GenerationRequest, GenerationSettings, LazyBackend
from commonlink.eval.backends.base import Backend
from commonlink.eval.cache import open_run_cache, run_key, shard_suffix
from commonlink.eval.commono import row_indices, write_outputs
from commonlink.eval.metrics import N_BOOTSTRAP, perception_metrics
from commonlink.eval.parsing import parse_yes_no
from commonlink.eval.runner import run_over_split
from commonlink.formats.common_o import PERCEPTION_PROMPT
from commonlink.formats.meta import utc_now
from commonlink.loaders.common_o import open_common_o
from commonlink.seeding import rng_for


def perception_items(example, *, seed: int) -> list[tuple[GenerationRequest, dict]]:
    """The two questions (present, absent) for one row, on one seeded-randomly chosen image."""
    rng = rng_for(seed, "perception", example.id)
    side = int(rng.integers(2))
    image = example.image_1 if side == 0 else example.image_2
    objects = example.objects_1 if side == 0 else example.objects_2
    if not objects:
        raise NotEnoughDataError(f"row {example.row_index}: image_{side + 1} has no object list, so no question can be asked.")
    present = {o.casefold() for o in objects}
    absent = [c for c in example.choices if c != NO_COMMON_OBJECTS and c.casefold() not in present]
    if not absent:
        raise NotEnoughDataError(f"row {example.row_index}: every choice is in image_{side + 1}; no absent object to ask about.")
    positive = objects[int(rng.integers(len(objects)))]
    negative = absent[int(rng.integers(len(absent)))]
    items = []
    for obj, is_present in ((positive, True), (negative, False)):
        request = GenerationRequest(
            id=f"{example.id}/image_{side + 1}/{'present' if is_present else 'absent'}/{obj}",
            images=[image],
            prompt=PERCEPTION_PROMPT.format(obj),
            choices=["yes", "no"],
            multi_select=False,
        )
        meta = {"id": request.id, "row_index": example.row_index, "row_id": example.id, "image": f"image_{side + 1}", "object": obj,
                "present": is_present, "source": example.source}
        items.append((request, meta))
    return items


def score_perception(meta: dict, output: str) -> dict:
    answer = parse_yes_no(output)
    return dict(meta, raw_output=output, answer=answer, parse_ok=answer is not None, correct=answer is not None and answer == meta["present"])


def evaluate_perception(
    data: str | os.PathLike,
    split: str = "main",
    model: str = "none",
    backend: str = "transformers",
    out_dir: str | os.PathLike | None = None,
    *,
    revision: str | None = None,
    settings: GenerationSettings | None = None,
    batch_size: int | None = None,
    limit: int | None = None,
    rows: tuple[int, int] | None = None,
    shard: tuple[int, int] | None = None,
    backend_options: dict | None = None,
    backend_instance: Backend | None = None,
    seed: int = 0,
    n_boot: int = N_BOOTSTRAP,
    show_progress: bool = True,
    overwrite: bool = False,
) -> dict:
    """Run the single-image yes/no baseline on one split; same outputs and resume rules as Common-O."""

    settings = settings or GenerationSettings(seed=seed, max_new_tokens=64)
    dataset = open_common_o(data, split, revision=revision)
    indices = row_indices(len(dataset), limit, rows, shard)
    own_backend = backend_instance is None
    model_backend = backend_instance or LazyBackend(backend, model, **(backend_options or {}))
    try:
        info = model_backend.info
        run = run_key(task="perception", dataset=dataset.fingerprint, split=split, model=info.fingerprint, backend=info.backend,
                      prompt=PERCEPTION_PROMPT, sampling_seed=seed, settings=settings.to_dict(),
                      **({"backend_options": info.output_options} if info.output_options else {}))
        outcome = run_over_split(
            dataset, indices,
            build=lambda ex: perception_items(ex, seed=seed),
            finish=score_perception,
            backend=model_backend, settings=settings, cache=open_run_cache(out_dir, run, shard, overwrite=overwrite), run=run,
            batch_size=batch_size or info.default_batch_size, total=len(indices),
            description=f"perception {split}", show_progress=show_progress,
        )
        generate_s = model_backend.generate_seconds
        info = model_backend.info  # a lazy backend knows its dtype/device once loaded
    finally:
        if own_backend:
            model_backend.close()
    results = {
        "task": "perception",
        "toolkit_version": __version__,
        "created": utc_now(),
        "model": info.model, "backend": info.backend, "model_fingerprint": info.fingerprint, "backend_details": info.details,
        "prompt": {"template": PERCEPTION_PROMPT},
        "generation": settings.to_dict(),
        "seed": seed, "bootstrap_resamples": n_boot, "shard": list(shard) if shard else None,
        "dataset": {"source": dataset.source_name, "split": split, "revision": dataset.revision, "fingerprint": dataset.fingerprint,
                    "rows_in_split": len(dataset), "rows_requested": len(indices), "questions_scored": len(outcome.records)},
        "metrics": perception_metrics(outcome.records, seed=seed, n_boot=n_boot),
        "skipped": len(outcome.skipped), "skipped_rows": outcome.skipped,
        "timing": {"wall_s": round(outcome.wall_s, 4), "generate_s": round(generate_s, 4), "from_cache": outcome.cached, "generated": outcome.generated},
        "run_key": run,
    }
    if out_dir is not None:
        write_outputs(Path(out_dir), results, outcome.records, suffix=shard_suffix(shard))
    return results
