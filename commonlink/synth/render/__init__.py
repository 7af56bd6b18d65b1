"""Renderers of scene plans behind one small interface (:class:`Renderer`, :class:`RenderedView`):

- :mod:`commonlink.synth.render.offline`: the embedded CPU renderer (pyrender on EGL) with exact instance masks;
- :mod:`commonlink.synth.render.unrealcv`: Unreal Engine 5 through the UnrealCV plugin;
- :mod:`commonlink.synth.render.unreal_check`: the preflight of an Unreal project.

Heavy dependencies (pyrender, OpenGL, unrealcv) are imported only when a renderer is opened.
"""

from commonlink.synth.render.base import RenderedView, Renderer

__all__ = ["RenderedView", "Renderer"]
