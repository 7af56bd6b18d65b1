"""What every evaluator's ``results.json`` shares, and the same results in lmms-eval's file convention.

:func:`results_header` is the common head of the Common-O, perception and association results (task, toolkit
version, time, model(s) and backend, generation settings, seed, bootstrap); each evaluator adds its dataset,
metrics and timing. :func:`write_lmms_eval_files` writes, beside our files, the two files lmms-eval writes for
a run (``lmms_eval/results.json`` with ``results[task]["acc,none"]``-style keys, and
``lmms_eval/samples_TASK.jsonl`` with ``doc_id``, ``resps``, ``filtered_resps`` per sample), so tools built on
lmms-eval's output read our runs. lmms-eval names them ``<datetime>_results.json`` /
``<datetime>_samples_<task>.jsonl``; ours keep fixed names so a rerun replaces them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from pathlib import Path

from commonlink import __version__
from commonlink.eval.backends.base import BackendInfo, GenerationSettings
from commonlink.fileio import atomic_write_json, write_jsonl
from commonlink.formats.meta import utc_now

LMMS_EVAL_DIR = "lmms_eval"


def results_header(
    task: str,
    infos: Sequence[BackendInfo],
    generation: GenerationSettings,
    *,
    seed: int,
    n_boot: int,
    several_models: bool = False,
) -> dict:
    """The head of a results.json. One model: ``model``, ``model_fingerprint``, ``backend_details``; with
    ``several_models`` (association, where ``--moe`` may combine models): ``models``, ``model_fingerprints`` and a
    list of ``backend_details``."""
    first = infos[0]
    header = {"task": task, "toolkit_version": __version__, "created": utc_now()}
    if several_models:
        header.update(
            models=[i.model for i in infos],
            model_fingerprints=[i.fingerprint for i in infos],
            backend=first.backend,
            backend_details=[i.details for i in infos],
            moe=len(infos) > 1,
        )
    else:
        header.update(
            model=first.model,
            backend=first.backend,
            model_fingerprint=first.fingerprint,
            backend_details=first.details,
            batch_invariant=first.batch_invariant,
        )
    header.update(generation=generation.to_dict(), seed=seed, bootstrap_resamples=n_boot)
    return header


def timing(wall_s: float, generate_s: float, *, from_cache: int, generated: int, scored: int | None = None) -> dict:
    out = {
        "wall_s": round(wall_s, 4),
        "generate_s": round(generate_s, 4),
        "from_cache": from_cache,
        "generated": generated,
    }
    if scored is not None:
        out["examples_per_s"] = round(scored / wall_s, 3) if wall_s > 0 else None
    return out


# ------------------------------------------------------------------------------------------ lmms-eval convention
def lmms_eval_metrics(summary: dict, names: dict[str, str]) -> dict:
    """``{"acc,none": ..., "acc_stderr,none": ...}`` from our summary (``names``: lmms-eval name -> our key;
    our ``KEY_se`` becomes ``NAME_stderr,none``)."""
    out = {}
    for name, key in names.items():
        if summary.get(key) is not None:
            out[f"{name},none"] = summary[key]
            if summary.get(f"{key}_se") is not None:
                out[f"{name}_stderr,none"] = summary[f"{key}_se"]
    return out


def _hash(value) -> str:
    return hashlib.sha256(
        json.dumps(value, sort_keys=True, ensure_ascii=False, default=str).encode("utf-8")
    ).hexdigest()


def write_lmms_eval_files(
    out_dir: Path, task: str, results: dict, metrics: dict, samples: Iterable[dict], *, suffix: str = ""
) -> None:
    """``lmms_eval/results{suffix}.json`` and ``lmms_eval/samples_{task}{suffix}.jsonl`` in lmms-eval's layout.

    ``metrics``: ``{"acc,none": ..., ...}`` (see :func:`lmms_eval_metrics`); ``samples``: dicts with ``doc_id``,
    ``doc``, ``target``, ``prompt``, ``response``, ``filtered`` and per-sample metric values in ``scores``.
    """
    folder = out_dir / LMMS_EVAL_DIR
    folder.mkdir(parents=True, exist_ok=True)
    count = 0
    not_sent = results.get("generation_not_sent") or {}
    generation_kwargs = {
        k: v
        for k, v in results.get("generation", {}).items()
        if k in ("max_new_tokens", "temperature", "top_p") and k not in not_sent
    }

    def logged():
        nonlocal count
        for sample in samples:
            count += 1
            yield {
                "doc_id": sample["doc_id"],
                "doc": sample["doc"],
                "target": sample["target"],
                "arguments": [[sample["prompt"], generation_kwargs]],
                "resps": [[sample["response"]]],
                "filtered_resps": [sample["filtered"]],
                "doc_hash": _hash(sample["doc"]),
                "prompt_hash": _hash(sample["prompt"]),
                "target_hash": _hash(sample["target"]),
                **sample["scores"],
            }

    write_jsonl(folder / f"samples_{task}{suffix}.jsonl", logged())
    models = results.get("models") or [results.get("model")]
    atomic_write_json(
        folder / f"results{suffix}.json",
        {
            "results": {task: {"alias": task, **metrics}},
            "group_subtasks": {task: []},
            "configs": {
                task: {
                    "task": task,
                    "output_type": "generate_until",
                    "generation_kwargs": results.get("generation", {}),
                    "metadata": {"commonlink_task": results["task"], "version": __version__},
                }
            },
            "versions": {task: __version__},
            "n-shot": {task: 0},
            "higher_is_better": {
                task: {
                    name.split(",")[0]: not name.startswith(("hallucination", "parse_failure"))
                    for name in metrics
                    if "_stderr" not in name
                }
            },
            "n-samples": {task: {"original": count, "effective": count}},
            "config": {
                "model": results.get("backend"),
                "model_args": ",".join(f"pretrained={m}" for m in models if m),
                "batch_size": results.get("batch_size"),
                "random_seed": results.get("seed"),
            },
            "date": results.get("created"),
            "commonlink_results": "../results.json",
        },
    )
