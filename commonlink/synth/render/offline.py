"""The offline renderer: scene plans to lit RGB images and exact instance-id masks, headless on the CPU.

pyrender on EGL (Mesa llvmpipe on machines without a GPU, the GPU driver where there is one). Every view is
drawn twice: once lit and shaded, once with flat per-object colours (pyrender's segmentation pass), which
gives an exact instance mask with no anti-aliasing. Plans use Unreal Engine's frame (left-handed, x forward,
y right, z up, centimetres, rotations as pitch/yaw/roll in degrees), so the same plan drives the UnrealCV
backend; this module mirrors y to get OpenGL's right-handed frame. What it changes in stock pyrender (a faster
shader, name-ordered scenes, colour-only read-backs) is in :mod:`commonlink.synth.render.pyrender_ext`.

Heavy imports (pyrender, OpenGL, trimesh) happen inside the functions that need them.
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass
from functools import lru_cache, partial
from pathlib import Path
from typing import ClassVar

import numpy as np
from PIL import Image

from commonlink.errors import BackendError, InputError, MissingDependencyError
from commonlink.images import open_image
from commonlink.synth.assets import Asset, AssetCatalog, FloorMaterial
from commonlink.synth.floors import PROCEDURAL_FLOORS, TILE_CM
from commonlink.synth.models import PROCEDURAL_MODELS
from commonlink.synth.plan import CameraPose, Lighting, ScenePlan, ue_rotation_matrix
from commonlink.synth.render.base import RenderedView, RendererSettings
from commonlink.synth.render.pyrender_ext import (
    colour_only_renderer_class,
    fast_shader_dir,
    import_pyrender,
    ordered_scene_class,
)

#: Diagonal matrix that turns Unreal's left-handed coordinates into right-handed ones (and back).
MIRROR = np.diag([1.0, -1.0, 1.0])
FLOOR_EXTENT_CM = 1600.0
BACKGROUND_RGB = (0.72, 0.76, 0.82)


@dataclass
class Placement:
    """An object as the renderer draws it: a mesh key, Unreal location/rotation and a uniform scale."""

    mesh: Asset
    location: tuple[float, float, float]
    rotation: tuple[float, float, float]
    scale: tuple[float, float, float]


def object_pose_gl(location, rotation, scale) -> np.ndarray:
    """4x4 model matrix in OpenGL's frame for an Unreal location, rotation and (x, y, z) scale."""
    pose = np.eye(4)
    pose[:3, :3] = MIRROR @ ue_rotation_matrix(*rotation) @ MIRROR @ np.diag(scale)
    pose[:3, 3] = MIRROR @ np.asarray(location, float)
    return pose


def camera_pose_gl(location, rotation) -> np.ndarray:
    """Camera-to-world matrix (OpenGL: looks down -z, y up) for an Unreal camera location and rotation."""
    forward = MIRROR @ ue_rotation_matrix(rotation[0], rotation[1], 0.0)[:, 0]
    right = np.cross(forward, [0.0, 0.0, 1.0])
    if np.linalg.norm(right) < 1e-6:  # looking straight down or up
        right = np.array([0.0, -1.0, 0.0])
    right /= np.linalg.norm(right)
    up = np.cross(right, forward)
    pose = np.eye(4)
    pose[:3, 0], pose[:3, 1], pose[:3, 2] = right, up, -forward
    pose[:3, 3] = MIRROR @ np.asarray(location, float)
    return pose


def vertical_fov(horizontal_fov_deg: float, width: int, height: int) -> float:
    """Unreal cameras give a horizontal field of view; OpenGL wants the vertical one (radians)."""
    return 2 * math.atan(math.tan(math.radians(horizontal_fov_deg) / 2) * height / width)


def _resolve_source(source: str, base_dir: Path) -> Path:
    if source.startswith("pybullet_data:"):
        try:
            import pybullet_data
        except ImportError as exc:  # pragma: no cover
            raise MissingDependencyError("pybullet", "render", "Meshes from pybullet_data") from exc
        return Path(pybullet_data.getDataPath()) / source.split(":", 1)[1]
    path = Path(source)
    return path if path.is_absolute() else base_dir / path


def _build_procedural(source: str, builders: dict, what: str):
    """Build ``procedural:<name>`` with its builder from ``builders`` (the built-in models or floors)."""
    name = source.split(":", 1)[1]
    if name not in builders:
        raise InputError(f"Unknown procedural {what} {name!r}.", f"Use one of: {', '.join(sorted(builders))}.")
    return builders[name]()


@lru_cache(maxsize=256)
def _load_mesh_cached(source: str, base_dir: str, mesh_up: str, color: tuple | None, size_cm: tuple):
    _, trimesh = import_pyrender()
    if source.startswith("procedural:"):
        mesh = _build_procedural(source, PROCEDURAL_MODELS, "model")
    else:
        path = _resolve_source(source, Path(base_dir))
        if not path.is_file():
            raise InputError(
                f"Mesh file not found: {path}", "Fix the asset's 'mesh' entry (paths are relative to the asset file)."
            )
        problem = f"Mesh file {path} holds no triangles the offline renderer can read"
        fix = "Export it as .obj, .glb or .ply with triangle faces, or fix the asset's 'mesh' entry."
        try:
            mesh = trimesh.load(str(path), force="mesh")
        except (
            ValueError,
            KeyError,
            IndexError,
            TypeError,
            OSError,
        ) as exc:  # what trimesh's loaders raise on bad files
            raise InputError(f"{problem} ({type(exc).__name__}: {exc}).", fix) from exc
        if len(mesh.vertices) == 0 or len(mesh.faces) == 0:  # trimesh reads a garbage .obj as an empty mesh
            raise InputError(f"{problem}.", fix)
        if mesh_up == "y":
            mesh.apply_transform(trimesh.transformations.rotation_matrix(math.pi / 2, [1, 0, 0]))
        if color is not None:
            mesh.visual = trimesh.visual.ColorVisuals(
                mesh, vertex_colors=np.tile([*color, 255], (len(mesh.vertices), 1))
            )
    # Normalise: largest extent equals the asset's largest size hint; pivot at the bottom centre.
    lo, hi = mesh.bounds
    factor = max(size_cm) / float(max(hi - lo))
    mesh.apply_translation([-(lo[0] + hi[0]) / 2, -(lo[1] + hi[1]) / 2, -lo[2]])
    mesh.apply_scale(factor)
    return mesh


def asset_mesh(asset: Asset, catalog: AssetCatalog):
    """The trimesh for an asset, normalised to its size hint, bottom-centred, z up (cached)."""
    if not asset.mesh:
        raise InputError(
            f"Asset {asset.name!r} has no 'mesh' entry, so the offline renderer cannot draw it.",
            "Add a mesh source to the asset file.",
        )
    return _load_mesh_cached(asset.mesh, str(catalog.base_dir), asset.mesh_up, asset.color, asset.size_cm)


def check_sources(catalog: AssetCatalog) -> None:
    """Refuse an asset file whose meshes or floor textures the offline renderer could not find, naming every bad
    entry at once, before anything is rendered (the files are only looked up here; they are read when first drawn)."""
    problems = []
    for asset in catalog.assets:
        if not asset.mesh:
            problems.append(f"asset {asset.name!r} has no 'mesh' entry")
        elif asset.mesh.startswith("procedural:"):
            if asset.mesh.split(":", 1)[1] not in PROCEDURAL_MODELS:
                problems.append(
                    f"asset {asset.name!r}: unknown procedural model {asset.mesh!r}"
                    + _did_you_mean(asset.mesh.split(":", 1)[1], PROCEDURAL_MODELS)
                )
        elif not _resolve_source(asset.mesh, catalog.base_dir).is_file():
            problems.append(
                f"asset {asset.name!r}: mesh file not found: {_resolve_source(asset.mesh, catalog.base_dir)}"
            )
    for floor in catalog.floors:
        texture = floor.texture or "procedural:concrete"
        if texture.startswith("procedural:"):
            if texture.split(":", 1)[1] not in PROCEDURAL_FLOORS:
                problems.append(
                    f"floor {floor.name!r}: unknown procedural floor {texture!r}"
                    + _did_you_mean(texture.split(":", 1)[1], PROCEDURAL_FLOORS)
                )
        elif not _resolve_source(texture, catalog.base_dir).is_file():
            problems.append(
                f"floor {floor.name!r}: texture file not found: {_resolve_source(texture, catalog.base_dir)}"
            )
    if problems:
        raise InputError(
            f"The offline renderer cannot draw {len(problems)} entries of the asset file {catalog.path}:\n"
            + "\n".join(f"  - {p}" for p in problems),
            "Fix those 'mesh' / 'texture' entries: file paths are relative to the asset file, and procedural names "
            "are those of the built-in asset file (docs/synth.md, 'Asset file').",
        )


def _did_you_mean(name: str, known) -> str:
    close = difflib.get_close_matches(name, list(known), n=3)
    return f" (did you mean {', '.join(close)}?)" if close else ""


@lru_cache(maxsize=32)
def _floor_texture_cached(source: str, base_dir: str) -> np.ndarray:
    if source.startswith("procedural:"):
        return _build_procedural(source, PROCEDURAL_FLOORS, "floor")
    return np.asarray(open_image(_resolve_source(source, Path(base_dir)), what="floor texture").convert("RGB"))


def floor_texture(floor: FloorMaterial, catalog: AssetCatalog) -> np.ndarray:
    return _floor_texture_cached(floor.texture or "procedural:concrete", str(catalog.base_dir))


class OfflineRenderer:
    """Renders scenes at a fixed resolution; keep one per process and call :meth:`close` when done.

    ``shadows=True`` adds shadow-mapped sunlight (about 3.5x the CPU time per view); by default each object gets
    a soft contact shadow instead (a blended disc: about a quarter of a view's render time on llvmpipe, 12 of
    50 ms at 512² with 7 objects), which still shows that objects rest on the floor.
    """

    _live = 0  #: renderers open in this process (they share one EGL display)

    def __init__(self, width: int, height: int, catalog: AssetCatalog, *, shadows: bool = False):
        self.width, self.height, self.catalog, self.shadows = width, height, catalog, shadows
        self._pyrender, self._trimesh = import_pyrender()
        try:
            self._renderer = self._pyrender.OffscreenRenderer(width, height)
        except Exception as exc:  # noqa: BLE001 - EGL/driver failures come in many types
            raise BackendError(
                f"Could not start the headless OpenGL renderer ({type(exc).__name__}: {exc}).",
                "Install the EGL libraries (Debian: apt-get install libegl1 libegl-mesa0 libgl1-mesa-dri) "
                "and PyOpenGL>=3.1.7, or set PYOPENGL_PLATFORM=osmesa with OSMesa installed.",
            ) from exc
        OfflineRenderer._live += 1
        self._renderer._renderer.__class__ = colour_only_renderer_class()  # same pixels, less read back
        if not shadows:
            from pyrender.shader_program import ShaderProgramCache

            self._renderer._renderer._program_cache = ShaderProgramCache(shader_dir=fast_shader_dir())
        self._meshes: dict[tuple, object] = {}
        self._floors: dict[str, object] = {}
        self._scene = None
        self._pool: dict[tuple, object] = {}

    # -- cached GPU-side meshes -------------------------------------------------------------------------
    def _pyrender_mesh(self, asset: Asset, copy: int = 0):
        """The asset's pyrender mesh; each ``copy`` is a separate mesh so that copies can be hidden separately."""
        key = (asset.name, copy)
        if key not in self._meshes:
            pyrender = self._pyrender
            mesh = pyrender.Mesh.from_trimesh(asset_mesh(asset, self.catalog), smooth=True)
            for primitive in mesh.primitives:
                # pyrender's defaults (blended, fairly metallic) look dull and sort badly; keep the colours
                # and textures, make the surfaces opaque, non-metallic plastic/ceramic.
                material = primitive.material
                material.alphaMode = "OPAQUE"
                material.metallicFactor = 0.0
                material.roughnessFactor = 0.6
            self._meshes[key] = mesh
        return self._meshes[key]

    def _floor_mesh(self, floor: FloorMaterial):
        if floor.name not in self._floors:
            trimesh, pyrender = self._trimesh, self._pyrender

            half = FLOOR_EXTENT_CM / 2
            repeats = FLOOR_EXTENT_CM / TILE_CM
            vertices = np.array([[-half, -half, 0], [half, -half, 0], [half, half, 0], [-half, half, 0]], float)
            faces = np.array([[0, 1, 2], [0, 2, 3]])
            uv = np.array([[0, 0], [repeats, 0], [repeats, repeats], [0, repeats]], float)
            texture = Image.fromarray(floor_texture(floor, self.catalog))
            material = trimesh.visual.material.PBRMaterial(
                baseColorTexture=texture, metallicFactor=0.0, roughnessFactor=0.9
            )
            quad = trimesh.Trimesh(
                vertices, faces, visual=trimesh.visual.TextureVisuals(uv=uv, material=material), process=False
            )
            self._floors[floor.name] = pyrender.Mesh.from_trimesh(quad, smooth=False)
        return self._floors[floor.name]

    def _contact_shadow(self):
        """A unit disc, dark in the middle and fading out (vertex alpha), blended onto the floor under an object."""
        pyrender = self._pyrender
        mesh = pyrender.Mesh.from_trimesh(_contact_disc(), smooth=True)
        for primitive in mesh.primitives:
            primitive.material.alphaMode = "BLEND"
            primitive.material.metallicFactor = 0.0
            primitive.material.roughnessFactor = 1.0
        return mesh

    # -- scenes -----------------------------------------------------------------------------------------
    def build_scene(self, placements: list[Placement], floor: FloorMaterial | None, lighting: Lighting):
        """Pose the floor, the objects and the lights; returns (scene, object nodes in placement order).

        The renderer keeps one scene whose nodes are reused from plan to plan (hidden when unused), so meshes and
        textures are uploaded to the GL context once instead of for every scene.
        """
        pyrender = self._pyrender
        if self._scene is None:
            self._scene = ordered_scene_class()(bg_color=[*BACKGROUND_RGB, 1.0])
            self._sun = pyrender.DirectionalLight()
            self._sun_node = self._scene.add(self._sun, name="light:sun")
        scene = self._scene
        scene.ambient_light = [lighting.ambient] * 3
        self._sun.color = list(lighting.sun_color)
        self._sun.intensity = lighting.sun_intensity
        sun_dir = MIRROR @ ue_rotation_matrix(-lighting.sun_elevation, lighting.sun_azimuth, 0.0)[:, 0]
        scene.set_pose(self._sun_node, _light_pose(sun_dir))
        for node in self._pool.values():
            node.mesh.is_visible = False
        if floor is not None:
            self._pooled_node(("floor", floor.name), lambda: self._floor_mesh(floor)).mesh.is_visible = True
        nodes = []
        copies: dict[str, int] = {}
        for placement in placements:
            name = placement.mesh.name
            copy = copies[name] = copies.get(name, -1) + 1  # the same asset twice (possible on the test server)
            node = self._pooled_node(("object", name, copy), partial(self._pyrender_mesh, placement.mesh, copy))
            scene.set_pose(node, object_pose_gl(placement.location, placement.rotation, placement.scale))
            node.mesh.is_visible = True
            nodes.append(node)
            if not self.shadows and floor is not None:
                shadow = self._pooled_node(("shadow", name, copy), self._contact_shadow)
                scene.set_pose(shadow, _contact_shadow_pose(placement))
                shadow.mesh.is_visible = True
        return scene, nodes

    def _pooled_node(self, key: tuple, make_mesh):
        if key not in self._pool:
            # Unique names: the scene draws in name order (see ordered_scene_class).
            self._pool[key] = self._scene.add(make_mesh(), name=":".join(str(k) for k in key))
        return self._pool[key]

    def render_view(self, scene, nodes, camera: CameraPose, lighting: Lighting, seg_colors=None, colour=True):
        """Render one camera of a built scene: (rgb, seg) where seg is the flat-colour pass (or None) and rgb is
        None when ``colour`` is False (the mask pass alone is what a plan's checks need)."""
        pyrender = self._pyrender
        cam = pyrender.PerspectiveCamera(
            yfov=vertical_fov(camera.fov, self.width, self.height),
            znear=5.0,
            zfar=5000.0,
            aspectRatio=self.width / self.height,
        )
        pose = camera_pose_gl(camera.location, camera.rotation)
        cam_node = scene.add(cam, pose=pose, name="camera")
        # A dim fill light from the camera keeps the shadowed sides readable.
        fill = scene.add(
            pyrender.DirectionalLight(color=[1.0, 1.0, 1.0], intensity=lighting.fill_intensity),
            pose=pose,
            name="light:fill",
        )
        try:
            flags = pyrender.RenderFlags.SHADOWS_DIRECTIONAL if self.shadows else pyrender.RenderFlags.NONE
            rgb = self._renderer.render(scene, flags=flags)[0] if colour else None
            seg = None
            if seg_colors is not None:
                seg_map = {node: color for node, color in zip(nodes, seg_colors)}
                seg, _ = self._renderer.render(scene, flags=pyrender.RenderFlags.SEG, seg_node_map=seg_map)
        finally:
            scene.remove_node(cam_node)
            scene.remove_node(fill)
        return (None if rgb is None else np.ascontiguousarray(rgb[..., :3])), seg

    def _built(self, plan: ScenePlan):
        if tuple(plan.resolution) != (self.width, self.height):
            raise InputError(
                f"Plan resolution {plan.resolution} differs from the renderer's {self.width}x{self.height}."
            )
        placements = [
            Placement(self.catalog.asset(obj.asset), obj.location, obj.rotation, (obj.scale,) * 3)
            for obj in plan.objects
        ]
        return self.build_scene(placements, self.catalog.floor(plan.floor.material), plan.lighting)

    def render(self, plan: ScenePlan) -> list[RenderedView]:
        """Render every camera of a plan (its resolution must be this renderer's)."""
        scene, nodes = self._built(plan)
        ids = [(k + 1, 0, 0) for k in range(len(nodes))]
        views = []
        for camera in plan.cameras:
            rgb, seg = self.render_view(scene, nodes, camera, plan.lighting, seg_colors=ids)
            views.append(RenderedView(rgb=rgb, instance=seg[..., 0].astype(np.uint16)))
        return views

    def render_masks(self, plan: ScenePlan) -> list[np.ndarray]:
        """Only the instance masks of every camera (the flat-colour pass): a re-sampled plan is judged on these,
        so the shaded pass is drawn once, for the plan that is kept (see :meth:`render_colour`)."""
        scene, nodes = self._built(plan)
        ids = [(k + 1, 0, 0) for k in range(len(nodes))]
        return [
            self.render_view(scene, nodes, camera, plan.lighting, seg_colors=ids, colour=False)[1][..., 0].astype(
                np.uint16
            )
            for camera in plan.cameras
        ]

    def render_colour(self, plan: ScenePlan, instances: list[np.ndarray]) -> list[RenderedView]:
        """The shaded pass of every camera, joined with masks :meth:`render_masks` drew for the same plan (the
        same pixels :meth:`render` gives: each pass is deterministic and independent of the other)."""
        scene, nodes = self._built(plan)
        views = []
        for camera, instance in zip(plan.cameras, instances, strict=True):
            rgb, _ = self.render_view(scene, nodes, camera, plan.lighting)
            views.append(RenderedView(rgb=rgb, instance=instance))
        return views

    def close(self) -> None:
        renderer, self._renderer = getattr(self, "_renderer", None), None
        if renderer is None:
            return
        OfflineRenderer._live -= 1
        platform = getattr(renderer, "_platform", None)
        if OfflineRenderer._live > 0 and type(platform).__name__ == "EGLPlatform":
            # pyrender's delete() also calls eglTerminate on the display, which every renderer of this process
            # shares: it would break the others (e.g. a test server rendering in another thread). Free our GL
            # objects and our context only; the last renderer to close terminates the display.
            from OpenGL.EGL import eglDestroyContext

            platform.make_current()
            renderer._renderer.delete()
            eglDestroyContext(platform._egl_display, platform._egl_context)
            platform._egl_context = platform._egl_display = None
        else:
            renderer.delete()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


@dataclass
class OfflineSettings(RendererSettings):
    """The offline renderer's settings for ``commonlink synth --backend offline`` (the default)."""

    name: ClassVar[str] = "offline"
    shadows: bool = False  #: shadow-mapped sunlight (slower) instead of soft contact shadows

    def content(self) -> dict:
        """The settings that change the output."""
        return {"shadows": self.shadows}

    def check_assets(self, catalog: AssetCatalog) -> None:
        check_sources(catalog)

    def open(self, catalog: AssetCatalog, width: int, height: int) -> OfflineRenderer:
        return OfflineRenderer(width, height, catalog, shadows=self.shadows)


@lru_cache(maxsize=1)
def _contact_disc():
    """Triangle-fan disc of radius 1 with alpha 0.5 at the centre fading to 0 at the rim."""
    _, trimesh = import_pyrender()
    segments, rings = 32, (0.0, 0.45, 0.8, 1.0)
    alphas = (0.5, 0.36, 0.14, 0.0)
    angles = np.linspace(0, 2 * np.pi, segments, endpoint=False)
    vertices, colors = [[0.0, 0.0, 0.0]], [[0, 0, 0, int(alphas[0] * 255)]]
    for radius, alpha in zip(rings[1:], alphas[1:]):
        vertices += [[radius * np.cos(a), radius * np.sin(a), 0.0] for a in angles]
        colors += [[0, 0, 0, int(alpha * 255)]] * segments
    faces = [[0, 1 + i, 1 + (i + 1) % segments] for i in range(segments)]
    for ring in range(len(rings) - 2):
        base = 1 + ring * segments
        for i in range(segments):
            j = (i + 1) % segments
            faces += [[base + i, base + segments + i, base + segments + j], [base + i, base + segments + j, base + j]]
    return trimesh.Trimesh(np.array(vertices), np.array(faces), vertex_colors=np.array(colors, np.uint8), process=False)


def _contact_shadow_pose(placement: Placement) -> np.ndarray:
    """Pose of the contact-shadow disc: under the object, as wide as its footprint, just above the floor."""
    size = placement.mesh.size_cm
    radius = 0.62 * float(np.hypot(size[0], size[1])) * float(max(placement.scale[:2]))
    pose = np.diag([radius, radius, 1.0, 1.0])
    pose[:3, 3] = MIRROR @ np.array([placement.location[0], placement.location[1], 0.15])
    return pose


def _light_pose(direction: np.ndarray) -> np.ndarray:
    """Pose of a directional light shining along ``direction`` (pyrender lights shine down their -z)."""
    direction = np.asarray(direction, float)
    direction = direction / np.linalg.norm(direction)
    z = -direction
    x = np.cross([0.0, 0.0, 1.0], z)
    if np.linalg.norm(x) < 1e-6:
        x = np.array([1.0, 0.0, 0.0])
    x /= np.linalg.norm(x)
    y = np.cross(z, x)
    pose = np.eye(4)
    pose[:3, 0], pose[:3, 1], pose[:3, 2] = x, y, z
    return pose
