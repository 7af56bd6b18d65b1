"""Renderers of scene plans behind one small interface (:class:`Renderer`, :class:`RenderedView`), each with its own
settings (:class:`RendererSettings`), found by ``--backend`` name in :data:`RENDERERS`:

- :mod:`commonlink.synth.render.offline`: the embedded CPU renderer (pyrender on EGL) with exact instance masks;
- :mod:`commonlink.synth.render.unrealcv`: Unreal Engine 5 through the UnrealCV plugin (the session with the plugin
  is :mod:`commonlink.synth.render.unrealcv_transport`);
- :mod:`commonlink.synth.render.unreal_check`: the preflight of an Unreal project.

Heavy dependencies (pyrender, OpenGL, unrealcv) are imported only when a renderer is opened.
"""

from __future__ import annotations

import importlib
from dataclasses import fields

from commonlink.errors import InputError
from commonlink.synth.render.base import RenderedView, Renderer, RendererSettings

#: ``--backend`` name -> "module:settings class", imported when asked for.
RENDERERS = {
    "offline": "commonlink.synth.render.offline:OfflineSettings",
    "unrealcv": "commonlink.synth.render.unrealcv:UnrealCVSettings",
}


def settings_class(name: str) -> type[RendererSettings]:
    """The settings class of the renderer called ``name``."""
    if name not in RENDERERS:
        raise InputError(
            f"--backend {name!r} is not one of {', '.join(RENDERERS)}.",
            f"Use {' or '.join(f'--backend {n}' for n in RENDERERS)}.",
        )
    module, cls = RENDERERS[name].split(":")
    return getattr(importlib.import_module(module), cls)


def renderer_settings(name: str, **options) -> RendererSettings:
    """The settings of the renderer called ``name``, from ``options``, which may also hold the other renderers'
    settings (as the CLI's options do: ``--shadows`` and ``--host`` are both always there); a name that no
    renderer has is refused."""
    cls = settings_class(name)
    everyone = {f.name for other in RENDERERS for f in fields(settings_class(other))}
    unknown = sorted(set(options) - everyone)
    if unknown:
        raise TypeError(f"renderer_settings() got options no renderer has: {', '.join(unknown)}")
    own = {f.name for f in fields(cls)}
    return cls(**{key: value for key, value in options.items() if key in own})


def recorded_keys() -> set[str]:
    """Every renderer's recorded settings (the keys of their :meth:`~RendererSettings.content`, as set by default)."""
    return {key for name in RENDERERS for key in settings_class(name)().content()}


__all__ = [
    "RENDERERS",
    "RenderedView",
    "Renderer",
    "RendererSettings",
    "recorded_keys",
    "renderer_settings",
    "settings_class",
]
