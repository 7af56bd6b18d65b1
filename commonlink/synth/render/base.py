"""The one interface every renderer implements: a scene plan in, one :class:`RenderedView` per camera out.

Plans are plain data (:mod:`commonlink.synth.plan`); renderers realise them. Two implementations exist: the
embedded offline renderer (:mod:`commonlink.synth.render.offline`) and Unreal Engine through UnrealCV
(:mod:`commonlink.synth.render.unrealcv`). The synth loop only talks to this interface.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from commonlink.synth.plan import ScenePlan


@dataclass
class RenderedView:
    """One camera's output: ``rgb`` (H, W, 3) uint8 and ``instance`` (H, W) uint16 (0 = no object, k + 1 =
    the plan's k-th object)."""

    rgb: np.ndarray
    instance: np.ndarray


@runtime_checkable
class Renderer(Protocol):
    """Renders scene plans; one instance serves many scenes and is closed once."""

    def render(self, plan: ScenePlan) -> list[RenderedView]:
        """One view per camera of ``plan``, in the plan's camera order."""
        ...

    def close(self) -> None:
        """Release the GL context / connection (safe to call twice)."""
        ...


__all__ = ["RenderedView", "Renderer"]
