"""Small association chain files for tests: random labelled images and the chain, single-step and deduction
files ``commonlink chains`` would build from them, made in a second with no dataset download.

:func:`write_tiny_chain_files` writes PNGs of random colours labelled with one or two of four concepts (plus an
object-like name such as ``thing3`` the memory can show) and builds every task file from them with the real
builder (:func:`commonlink.sampling.chains.build_chain_files`); the same arguments give the same files.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
from PIL import Image

from commonlink.formats.association import LabelledImage
from commonlink.sampling.chains import ChainConfig, build_chain_files

#: The concepts the tiny images are labelled with (``metal`` + ``furry`` is the asynchronous pair).
TINY_CONCEPTS = ("metal", "furry", "ripe", "painted")


def tiny_labelled_images(folder: str | Path, n: int = 60, *, seed: int = 0, size: tuple[int, int] = (24, 24),
                         concepts: tuple[str, ...] = TINY_CONCEPTS) -> list[LabelledImage]:
    """``n`` one-colour PNGs of ``size`` written to ``folder``, each labelled with one or two of ``concepts`` and
    ``thing{i % 7}``; the records carry the files' true size, so a release build accepts them too."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    images = []
    for i in range(n):
        labels = [str(c) for c in rng.choice(concepts, size=int(rng.integers(1, 3)), replace=False)] + [f"thing{i % 7}"]
        path = folder / f"img{i:03d}.png"
        Image.new("RGB", size, tuple(int(v) for v in rng.integers(0, 255, 3))).save(path)
        images.append(LabelledImage(id=f"img{i:03d}", labels=labels, width=size[0], height=size[1], origin={"type": "file", "path": str(path)}))
    return images


def tiny_chain_config(**changes) -> ChainConfig:
    """A :class:`ChainConfig` small enough for a test (2 chains a concept of 8 scored steps after 3 warm-up steps,
    3 single-step and 3 deduction tasks a concept; no pixel floor, the images are tiny), with ``changes`` applied."""
    config = ChainConfig(seed=3, concepts=list(TINY_CONCEPTS), pairs=[["metal", "furry"]], chains_per_concept=2, max_steps=8,
                         warmup=3, single_step_per_concept=3, deductions_per_concept=3, min_pool=3, memory_size=3, min_pixels=0)
    return replace(config, **changes)


def write_tiny_chain_files(root: str | Path, *, image_seed: int = 0, image_size: tuple[int, int] = (24, 24), **changes) -> Path:
    """Images under ``root/imgs`` and every task file built from them under ``root/chains`` (returned);
    ``changes`` are :class:`ChainConfig` fields that differ from :func:`tiny_chain_config`."""
    root = Path(root)
    images = tiny_labelled_images(root / "imgs", seed=image_seed, size=image_size)
    build_chain_files(images, root / "chains", tiny_chain_config(**changes), progress=False)
    return root / "chains"


__all__ = ["TINY_CONCEPTS", "tiny_chain_config", "tiny_labelled_images", "write_tiny_chain_files"]
