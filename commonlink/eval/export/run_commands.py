"""The commands that run an export in its harness, as that harness's users run it: a model in the harness's own
process, or an OpenAI-compatible server. Printed by ``commonlink export`` and documented in docs/eval.md.

What they take care of, from the harnesses' source (lmms-eval 0.7.3, VLMEvalKit e8e78f05):
- lmms-eval's ``openai`` model builds ``OpenAI(api_key=api_key or $OPENAI_API_KEY)``: with neither it logs "Missing
  credentials", writes nothing and still exits 0, so the command sets the variable (any value serves a local server);
- lmms-eval exits 0 when a run fails: no ``*_results.json`` under ``--output_path`` means nothing was scored;
- VLMEvalKit has one ``--max-tokens`` for a whole run (default 32,768): one command per token cap of our protocol;
- VLMEvalKit's API wrappers re-encode every image as JPEG (quality 75) before sending; ``--local-media`` sends the
  image file's path instead, which keeps the pixels ours where the server can read that path (same machine).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from commonlink.eval.export.writers import exporters

LOCAL_SERVER = "http://127.0.0.1:8000/v1"


def _cap(dataset: str) -> int:
    """Our protocol's generation cap for a VLMEvalKit dataset (the YAML's ``generation_kwargs.max_new_tokens``): its
    kind's; a dataset of no kind's list (another split) gets the largest cap, so no answer is cut short."""
    found = exporters()
    caps = {name: e.max_new_tokens for e in found for name in e.vlmeval_names}
    return caps.get(dataset, max((e.max_new_tokens for e in found), default=1024))


def lmms_eval_commands(task_dir: Path, tasks: Iterable[str]) -> list[tuple[str, str]]:
    """(what it is for, command line) for the exported lmms-eval tasks."""
    joined = ",".join(tasks)
    base = f"lmms-eval --include_path {task_dir} --tasks {joined}"
    out = "--output_path lmms-runs/ --log_samples"
    return [
        ("a model in lmms-eval's process", f"{base} --model qwen2_vl --model_args pretrained=MODEL_ID {out}"),
        (
            "an OpenAI-compatible server (lmms-eval's openai model needs OPENAI_API_KEY set even for a local server)",
            f"OPENAI_API_KEY=${{OPENAI_API_KEY:-EMPTY}} {base} --model openai "
            f"--model_args model=SERVED_MODEL_NAME,base_url={LOCAL_SERVER} {out}",
        ),
        (
            "then score it (lmms-eval exits 0 even when a run fails: no *_results.json under lmms-runs/ means nothing "
            "was scored)",
            "commonlink eval score lmms-runs/MODEL/DATETIME_samples_TASK.jsonl --data DATA --split SPLIT",
        ),
    ]


def vlmevalkit_commands(script: Path, datasets: Iterable[str]) -> list[tuple[str, str]]:
    """(what it is for, command line) for the exported VLMEvalKit datasets: one server command per token cap."""
    datasets = list(datasets)
    lines = [("a model in VLMEvalKit's process", f"python {script} --data {' '.join(datasets)} --model MODEL_NAME")]
    by_cap: dict[int, list[str]] = {}
    for name in datasets:
        by_cap.setdefault(_cap(name), []).append(name)
    for cap, names in by_cap.items():
        lines.append(
            (
                f"an OpenAI-compatible server, {' '.join(names)} (our cap of {cap} tokens; --local-media sends the "
                "image files' paths, so a server on this machine sees our pixels, not VLMEvalKit's JPEG re-encoding)",
                f"python {script} --data {' '.join(names)} --model SERVED_MODEL_NAME --base-url {LOCAL_SERVER} "
                f"--key ${{OPENAI_API_KEY:-EMPTY}} --max-tokens {cap} --local-media",
            )
        )
    return lines


def format_commands(commands: list[tuple[str, str]]) -> str:
    return "\n".join(f"  # {purpose}\n  {line}" for purpose, line in commands)


__all__ = ["format_commands", "lmms_eval_commands", "vlmevalkit_commands"]
