"""Harness versions: the VLMEvalKit module's minimum (vlmeval.smp.get_intermediate_file_path, commit 9cc14cd0 of
2025-09-12; no release has it) is checked at export and when the module is imported."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from commonlink.errors import InputError
from commonlink.eval.export.writers import VLMEVAL_MIN_COMMIT, export_vlmevalkit

ROOT = Path(__file__).resolve().parents[1]


def _fake_vlmeval(folder: Path, *, new: bool) -> Path:
    """The names commonlink_vlmeval.py imports, from VLMEvalKit before (new=False) or after 9cc14cd0."""
    smp = folder / "vlmeval" / "smp"
    (folder / "vlmeval" / "dataset").mkdir(parents=True)
    smp.mkdir()
    (folder / "vlmeval" / "__init__.py").write_text("__version__ = '0.2rc1'  # unchanged across both\n")
    (folder / "vlmeval" / "dataset" / "__init__.py").write_text("")
    (folder / "vlmeval" / "dataset" / "image_base.py").write_text("class ImageBaseDataset:\n    pass\n")
    functions = ["LMUDataRoot", "d2df", "dump", "load"] + (["get_intermediate_file_path"] if new else [])
    (smp / "__init__.py").write_text("".join(f"def {name}(*args, **kwargs):\n    pass\n" for name in functions))
    return folder


@pytest.fixture()
def forget_vlmeval():
    yield
    for name in [n for n in sys.modules if n == "vlmeval" or n.startswith("vlmeval.")]:
        del sys.modules[name]


def test_export_refuses_a_vlmevalkit_too_old_for_the_module(tmp_path, monkeypatch, forget_vlmeval):
    old = _fake_vlmeval(tmp_path / "old", new=False)
    monkeypatch.syspath_prepend(str(old))
    with pytest.raises(InputError, match="get_intermediate_file_path") as info:
        export_vlmevalkit(tmp_path / "vlm", data=tmp_path / "not-read", progress=False)
    assert VLMEVAL_MIN_COMMIT in str(info.value) and "git pull" in str(info.value)
    assert not (tmp_path / "vlm").exists()  # refused before anything is written


def test_the_exported_module_says_which_vlmevalkit_it_needs(tmp_path):
    from commonlink.eval.export.writers import vlmeval_module

    (tmp_path / "vlm").mkdir()
    (tmp_path / "vlm" / "commonlink_vlmeval.py").write_text(vlmeval_module(["CommonO"]))
    for new in (False, True):
        fake = _fake_vlmeval(tmp_path / f"vlmeval-{new}", new=new)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(fake), str(ROOT)])}
        run = subprocess.run(
            [sys.executable, "-c", "import commonlink_vlmeval"],
            cwd=tmp_path / "vlm",
            env=env,
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        if new:
            assert run.returncode == 0, run.stderr
        else:
            assert (
                run.returncode != 0
                and "too old for commonlink_vlmeval.py" in run.stderr
                and VLMEVAL_MIN_COMMIT in run.stderr
            )
