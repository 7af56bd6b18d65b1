"""docs/api.md is true: every ```python block runs, in order, in an empty folder (one namespace, as a reader
following the page would), and the packages export what the page names without importing anything heavy."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import commonlink

API_DOC = Path(__file__).resolve().parents[1] / "docs" / "api.md"


def python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, re.DOTALL)


def test_the_page_has_a_snippet_for_every_stage():
    text = API_DOC.read_text(encoding="utf-8")
    blocks = python_blocks(text)
    assert len(blocks) >= 10
    joined = "\n".join(blocks)
    for name in (
        "ingest_photos",
        "make_pairs_file",
        "build_chain_files",
        "build_release",
        "push_release",
        "load_common_o",
        "evaluate_common_o",
        "evaluate_association",
        "parse_common_o_answer",
        "score_common_o",
        "score_predictions",
        "compare_runs",
        "write_report",
    ):
        assert name in joined, name


RUNNER = """
import sys
blocks = {blocks!r}
namespace = {{"__name__": "__main__"}}
for number, block in enumerate(blocks, start=1):
    print(f"=== block {{number}}", flush=True)
    exec(compile(block, f"docs/api.md block {{number}}", "exec"), namespace)
rows = namespace["comparison"].tables[0].rows
print("=== runs compared:", sorted(r["run"] for r in rows))
"""


@pytest.mark.slow
def test_every_snippet_in_docs_api_runs(tmp_path):
    """The page's blocks run in order in a fresh interpreter, in an empty folder (as a reader would run them),
    with the environment the page asks for (HF_HUB_DISABLE_XET=1 for the local test Hub)."""
    blocks = python_blocks(API_DOC.read_text(encoding="utf-8"))
    script = tmp_path / "run_api_doc.py"
    script.write_text(RUNNER.format(blocks=blocks), encoding="utf-8")
    work = tmp_path / "work"
    work.mkdir()
    root = str(API_DOC.parents[1])
    env = {
        **os.environ,
        "HF_HUB_DISABLE_XET": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "COMMONLINK_HOME": str(tmp_path / "home"),
        "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run([sys.executable, str(script)], cwd=work, env=env, capture_output=True, text=True, timeout=600)
    last = [line for line in done.stdout.splitlines() if line.startswith("=== block")][-1:]
    assert done.returncode == 0, f"{last} of docs/api.md failed:\n{done.stderr[-3000:]}"
    assert f"=== block {len(blocks)}" in done.stdout
    assert "=== runs compared: ['always none', 'random']" in done.stdout
    assert (
        (work / "report.html").is_file()
        and (work / "association.html").is_file()
        and (work / "release" / "README.md").is_file()
    )


def test_packages_export_the_api_lazily():
    for package in (
        "commonlink",
        "commonlink.eval",
        "commonlink.catalog",
        "commonlink.sampling",
        "commonlink.release",
        "commonlink.loaders",
        "commonlink.eval.report",
    ):
        module = __import__(package, fromlist=["__all__"])
        missing = [name for name in module.__all__ if not hasattr(module, name)]
        assert not missing, (package, missing)
    assert commonlink.parse_common_o_answer("Answer: B", ["x", "y"]).letters == ["B"]
    with pytest.raises(AttributeError):
        commonlink.not_a_function  # noqa: B018
    # importing the packages loads no heavy dependency (their functions load them when called)
    code = (
        "import sys, commonlink, commonlink.eval, commonlink.catalog, commonlink.sampling, commonlink.release, "
        "commonlink.loaders, commonlink.eval.report; "
        "heavy = [m for m in ('torch', 'transformers', 'datasets', 'vllm', 'pandas', 'pyarrow') if m in sys.modules]; "
        "print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout
