"""VLMEvalKit as its users run it with an API model: the command ``commonlink export vlmevalkit`` prints for an
OpenAI-compatible server, run by the real VLMEvalKit against a local server that answers by a hash of the text and
the decoded pixels it receives. With ``--local-media`` (the image files' paths) every row's answer, and so every
score, equals ``commonlink eval commono`` with the openai backend on the same server; without it VLMEvalKit
re-encodes the images as JPEG, so the model sees other pixels (what docs/eval.md warns about).

Runs where ``COMMONLINK_VLMEVAL_PYTHON`` names the python of an environment with VLMEvalKit (docs/eval.md has the
recipe); skips cleanly elsewhere."""

from __future__ import annotations

import base64
import io
import json
import os
import subprocess
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest
from PIL import Image

from commonlink.eval.export.run_commands import vlmevalkit_commands
from commonlink.eval.export.writers import export_vlmevalkit
from tests.fixtures.harness_models import content_answer
from tests.fixtures.openai_server import LatencyServer
from tests.fixtures.tiny_models import common_o_rows, write_common_o_split

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]


def chat_parts(body: dict) -> list[tuple[str, object]]:
    """The parts of a chat-completions request in order: texts, and images decoded from data: URLs or read from
    file:// paths (what an OpenAI-compatible server on this machine does with --local-media)."""
    parts: list[tuple[str, object]] = []
    for message in body.get("messages", []):
        content = message.get("content")
        for part in [{"type": "text", "text": content}] if isinstance(content, str) else content or []:
            if part.get("type") == "text":
                parts.append(("text", part["text"]))
            elif part.get("type") == "image_url":
                url = part["image_url"]["url"]
                if url.startswith("data:"):
                    image = Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1])))
                else:
                    image = Image.open(unquote(urlparse(url).path))
                image.load()
                parts.append(("image", image))
    return parts


def test_vlmevalkit_with_an_api_model_scores_like_us_with_local_media(tmp_path):
    python = os.environ.get("COMMONLINK_VLMEVAL_PYTHON")
    if not python:
        pytest.skip("VLMEvalKit not installed (docs/eval.md: its environment; then COMMONLINK_VLMEVAL_PYTHON)")
    pytest.importorskip("openai")
    from commonlink.kinds.common_o.task import evaluate_common_o

    release = write_common_o_split(tmp_path / "data", common_o_rows(16, seed=7, num_choices=4), split="main")
    export = tmp_path / "export"
    export_vlmevalkit(export, data=release, splits=("main",), progress=False)
    env = {k: v for k, v in os.environ.items() if k not in ("LMUData", "PRED_FORMAT", "EVAL_FORMAT", "OPENAI_API_KEY")}
    env.update(PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    [(_, line)] = [
        c for c in vlmevalkit_commands(export / "commonlink_vlmeval.py", ["CommonO"]) if "--base-url" in c[1]
    ]

    with LatencyServer(latency_s=(0, 0), answer=lambda body: content_answer(chat_parts(body))) as server:
        ours = evaluate_common_o(
            release,
            "main",
            "m",
            "openai",
            tmp_path / "ours",
            backend_options={"base_url": server.url},
            progress=False,
            n_boot=20,
        )
        runs = {}
        for name, command in (("local", line), ("jpeg", line.replace(" --local-media", ""))):
            command = command.replace("python ", f"{python} ", 1).replace("SERVED_MODEL_NAME", "m")
            command = command.replace("http://127.0.0.1:8000/v1", server.url) + f" --work-dir {tmp_path / name}"
            done = subprocess.run(
                ["bash", "-c", command], env=env, capture_output=True, text=True, timeout=900, check=False, cwd=tmp_path
            )
            assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-3000:])
            # VLMEvalKit keeps the file in its run folder and links it from the model's folder: one file
            [predictions] = {p.resolve() for p in (tmp_path / name).rglob("m_CommonO.xlsx")}
            import pandas as pd

            table = pd.read_excel(predictions)
            runs[name] = {int(i): str(a) for i, a in zip(table["index"], table["prediction"])}
    theirs_local = runs["local"]
    our_rows = [json.loads(x) for x in (tmp_path / "ours" / "predictions.jsonl").read_text().splitlines()]
    assert theirs_local == {p["row_index"]: p["raw_output"] for p in our_rows}  # the same pixels, row by row
    assert runs["jpeg"] != theirs_local  # JPEG q75: the hash model saw other pixels
    assert ours["metrics"]["overall"]["n"] == 16
