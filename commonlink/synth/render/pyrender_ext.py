"""What the offline renderer changes in stock pyrender (0.1.45), in one place.

- :data:`FAST_MESH_FRAG` / :func:`fast_shader_dir`: a cheaper forward shader for renders without shadow maps;
- :func:`ordered_scene_class`: a scene that iterates its nodes in name order (the same pixels in every process)
  and draws and bounds only its visible meshes (the renderer keeps every mesh it ever drew, hidden, so that it is
  uploaded once);
- :func:`colour_only_renderer_class`: pyrender's renderer reading back only the colour of a pass, and drawing the
  flat-colour segmentation pass into a single-sample framebuffer (pyrender reads and linearises a depth image per
  pass and resolves a 4x multisampled one that the segmentation pass leaves unused).

The same pixels as stock pyrender, byte for byte (``tests/test_synth.py`` compares them). pyrender, OpenGL and
trimesh are imported inside the functions.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from functools import lru_cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import numpy as np

from commonlink.errors import BackendError, MissingDependencyError

#: Replaces pyrender's mesh.frag when shadow maps are off: the same inputs and uniforms, Lambert diffuse plus a
#: small Blinn-Phong highlight instead of the full PBR BRDF. About 3x cheaper per pixel on llvmpipe and visually
#: close (checked side by side).
FAST_MESH_FRAG = """#version 330 core
// commonlink's fast forward shader: pyrender's inputs and uniforms, Lambert diffuse + a small Blinn-Phong
// highlight instead of the full PBR BRDF (several times cheaper per pixel on a CPU rasteriser).
struct DirectionalLight {
    vec3 color;
    float intensity;
    vec3 direction;
};
struct Material {
    vec3 emissive_factor;
    vec4 base_color_factor;
    float metallic_factor;
    float roughness_factor;
#ifdef HAS_BASE_COLOR_TEX
    sampler2D base_color_texture;
#endif
};
uniform Material material;
uniform DirectionalLight directional_lights[MAX_DIRECTIONAL_LIGHTS];
uniform int n_directional_lights;
uniform vec3 cam_pos;
uniform vec3 ambient_light;

in vec3 frag_position;
#ifdef NORMAL_LOC
in vec3 frag_normal;
#endif
#ifdef TEXCOORD_0_LOC
in vec2 uv_0;
#endif
#ifdef COLOR_0_LOC
in vec4 color_multiplier;
#endif
out vec4 frag_color;

const float PI = 3.141592653589793;

void main()
{
    vec4 base_color = material.base_color_factor;
#ifdef HAS_BASE_COLOR_TEX
    vec4 texel = texture(material.base_color_texture, uv_0);
    base_color = base_color * vec4(pow(texel.rgb, vec3(2.2)), texel.a);
#endif
    vec3 v = normalize(cam_pos - frag_position);
#ifdef NORMAL_LOC
    vec3 n = normalize(frag_normal);
#else
    vec3 n = v;
#endif
    float shininess = mix(64.0, 4.0, material.roughness_factor);
    vec3 diffuse = base_color.rgb * (1.0 - 0.04) / PI;
    vec3 color = base_color.rgb * ambient_light;
    for (int i = 0; i < n_directional_lights; i++) {
        vec3 l = normalize(-directional_lights[i].direction);
        float nl = max(dot(n, l), 0.0);
        float nh = max(dot(n, normalize(l + v)), 0.0);
        vec3 radiance = directional_lights[i].intensity * directional_lights[i].color;
        color += radiance * nl * (diffuse + 0.04 * (shininess + 2.0) / (8.0 * PI) * pow(nh, shininess));
    }
    vec4 result = vec4(color, 1.0);
#ifdef COLOR_0_LOC
    result *= color_multiplier;
#endif
    frag_color = clamp(vec4(pow(result.xyz, vec3(1.0 / 2.2)), result.a * base_color.a), 0.0, 1.0);
}
"""


def check_pyopengl() -> None:
    """pyrender's `PyOpenGL==3.1.0` pin is broken with EGL; `pip install commonlink[render]` keeps the pin."""
    try:
        installed = version("PyOpenGL")
    except PackageNotFoundError:
        return  # reported as a missing dependency by the import below
    parts = tuple(int(p) for p in installed.split(".")[:3] if p.isdigit())
    if parts < (3, 1, 7):
        raise BackendError(
            f"PyOpenGL {installed} is installed (pyrender pins 3.1.0), which cannot render headless with EGL.",
            "pip install 'PyOpenGL>=3.1.7'   (scripts/setup.sh does this for you)",
        )


def import_pyrender():
    # pyrender picks its OpenGL platform at import; headless rendering needs EGL unless the user chose.
    os.environ.setdefault("PYOPENGL_PLATFORM", "egl")
    check_pyopengl()
    try:
        import pyrender
        import trimesh
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise MissingDependencyError(exc.name or "pyrender", "render", "The offline renderer") from exc
    if not hasattr(np, "infty"):
        # pyrender 0.1.45 still spells np.inf as np.infty (removed in NumPy 2) when computing scene bounds
        # for shadow maps; restore the alias instead of pinning NumPy < 2.
        np.infty = np.inf  # type: ignore[attr-defined]
    return pyrender, trimesh


@lru_cache(maxsize=1)
def ordered_scene_class():
    """A pyrender Scene whose mesh and light nodes come out in name order instead of set order, and whose
    ``mesh_nodes`` (what pyrender draws, sorts by distance and fits shadow maps to) are the visible ones only.

    pyrender keeps nodes in Python sets of objects hashed by address, and iterates them when it sums the lights
    in the shader and when it breaks ties in its draw order. Summing sun + fill or fill + sun rounds differently
    in the last bit, so a fresh process could write a pixel one level off (a different PNG, id and catalog).
    Name order is the same in every process, whatever was rendered before. Hidden nodes (objects of earlier
    plans, kept so that their meshes stay uploaded) must not count either: shadow maps are fitted to the scene's
    bounds, and sorting them cost time on every pass. ``meshes`` still lists every mesh, so that none is
    deleted from the GL context and uploaded again."""
    pyrender, _ = import_pyrender()

    class OrderedScene(pyrender.Scene):
        @property
        def mesh_nodes(self):
            return sorted((n for n in self._mesh_nodes if n.mesh.is_visible), key=lambda n: n.name or "")

        @property
        def meshes(self):
            return {node.mesh for node in self._mesh_nodes}

        @property
        def light_nodes(self):
            return sorted(
                self._point_light_nodes | self._spot_light_nodes | self._directional_light_nodes,
                key=lambda n: n.name or "",
            )

    return OrderedScene


@lru_cache(maxsize=1)
def fast_shader_dir() -> str:
    """pyrender's shader folder with mesh.frag replaced by :data:`FAST_MESH_FRAG` (one per process)."""

    import pyrender

    folder = tempfile.mkdtemp(prefix="commonlink-shaders-")
    atexit.register(shutil.rmtree, folder, True)
    source = Path(pyrender.__file__).parent / "shaders"
    for item in source.iterdir():
        if item.is_file():
            shutil.copy(item, folder)
    (Path(folder) / "mesh.frag").write_text(FAST_MESH_FRAG, encoding="utf-8")
    return folder


@lru_cache(maxsize=1)
def colour_only_renderer_class():
    """pyrender's ``Renderer`` with two passes made cheaper, same pixels (install it on an ``OffscreenRenderer``'s
    ``_renderer`` by setting its ``__class__``).

    Stock pyrender draws every offscreen pass into a 4x multisampled framebuffer, resolves colour and depth into
    a single-sample one and reads back both, turning depth into linear units with NumPy: several milliseconds a
    pass on a CPU rasteriser, for a depth image we never use. Here a pass reads back its colour only. The
    segmentation pass (flat colours, multisampling off, so every sample of a pixel holds the same value) draws
    straight into the single-sample framebuffer, which then needs no resolve. Depth-only and RGBA passes, and
    macOS (where pyrender rescales the read-back), keep pyrender's own code."""
    from OpenGL.GL import (
        GL_COLOR_BUFFER_BIT,
        GL_DRAW_FRAMEBUFFER,
        GL_LINEAR,
        GL_READ_FRAMEBUFFER,
        GL_RGB,
        GL_UNSIGNED_BYTE,
        glBindFramebuffer,
        glBlitFramebuffer,
        glReadPixels,
    )
    from pyrender.constants import RenderFlags
    from pyrender.renderer import Renderer

    stock = RenderFlags.DEPTH_ONLY | RenderFlags.RGBA

    class ColourOnlyRenderer(Renderer):
        def _configure_forward_pass_viewport(self, flags):
            super()._configure_forward_pass_viewport(flags)
            if flags & RenderFlags.OFFSCREEN and flags & RenderFlags.SEG and sys.platform != "darwin":
                glBindFramebuffer(GL_DRAW_FRAMEBUFFER, self._main_fb)

        def _read_main_framebuffer(self, scene, flags):
            if flags & stock or sys.platform == "darwin":
                return super()._read_main_framebuffer(scene, flags)
            width, height = self._main_fb_dims[0], self._main_fb_dims[1]
            if not flags & RenderFlags.SEG:  # resolve the multisampled colour as pyrender does
                glBindFramebuffer(GL_READ_FRAMEBUFFER, self._main_fb_ms)
                glBindFramebuffer(GL_DRAW_FRAMEBUFFER, self._main_fb)
                glBlitFramebuffer(0, 0, width, height, 0, 0, width, height, GL_COLOR_BUFFER_BIT, GL_LINEAR)
            glBindFramebuffer(GL_READ_FRAMEBUFFER, self._main_fb)
            colour = glReadPixels(0, 0, width, height, GL_RGB, GL_UNSIGNED_BYTE)
            return np.flip(np.frombuffer(colour, dtype=np.uint8).reshape((height, width, 3)), axis=0), None

    return ColourOnlyRenderer
