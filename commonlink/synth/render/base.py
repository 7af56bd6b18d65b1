"""The one interface every renderer implements: a scene plan in, one :class:`RenderedView` per camera out.

Plans are plain data (:mod:`commonlink.synth.plan`); renderers realise them. Two implementations exist: the
embedded offline renderer (:mod:`commonlink.synth.render.offline`) and Unreal Engine through UnrealCV
(:mod:`commonlink.synth.render.unrealcv`). The synth loop only talks to this interface. As in Kubric, a renderer
keeps its own settings (:class:`RendererSettings`: the offline renderer's shadows, UnrealCV's address and timeouts),
which open it; :data:`commonlink.synth.render.RENDERERS` maps each ``--backend`` name to its settings.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Protocol, runtime_checkable

import numpy as np

from commonlink.synth.assets import AssetCatalog
from commonlink.synth.plan import ScenePlan


@dataclass
class RenderedView:
    """One camera's output: ``rgb`` (H, W, 3) uint8 and ``instance`` (H, W) uint16 (0 = no object, k + 1 =
    the plan's k-th object)."""

    rgb: np.ndarray
    instance: np.ndarray


@runtime_checkable
class Renderer(Protocol):
    """Renders scene plans; one instance serves many scenes and is closed once.

    A renderer may also offer ``render_masks(plan)`` (the instance masks alone) and ``render_colour(plan,
    masks)`` (the shaded pass joined with those masks): the synth loop then judges re-sampled plans on their
    masks and shades only the plan it keeps (the offline renderer does; UnrealCV returns both in one request).
    """

    def render(self, plan: ScenePlan) -> list[RenderedView]:
        """One view per camera of ``plan``, in the plan's camera order."""
        ...

    def close(self) -> None:
        """Release the GL context / connection (safe to call twice)."""
        ...


class RendererSettings:
    """A renderer's own settings (a dataclass in the renderer's module, subclassing this), and how to open it."""

    name: ClassVar[str]  #: the ``--backend`` name, recorded with every image the renderer makes

    def content(self) -> dict:
        """The settings that change the output: recorded in ``synth_config.json``, which a resumed run must match."""
        raise NotImplementedError

    def check_assets(self, catalog: AssetCatalog) -> None:
        """Refuse an asset file this renderer cannot draw, naming every problem, before anything is written."""

    def check_processes(self, workers: int, executor: str) -> None:
        """Refuse a run in more processes than this renderer can serve (by default any number)."""

    def open(self, catalog: AssetCatalog, width: int, height: int) -> Renderer:
        """A renderer of ``width`` x ``height`` images, ready to render (the caller closes it)."""
        raise NotImplementedError


__all__ = ["RenderedView", "Renderer", "RendererSettings"]
