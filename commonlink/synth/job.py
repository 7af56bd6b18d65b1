"""What a synthetic catalog is made from: :class:`SynthJob` (how many scenes, the seed, the asset file) holding each
stage's own settings: the plan's (:class:`~commonlink.synth.plan.PlanConfig`), the checks a rendered plan must pass
(:class:`SceneChecks`) and the renderer's (:mod:`commonlink.synth.render`: ``OfflineSettings``, ``UnrealCVSettings``).

:meth:`SynthJob.content` is the record of the options that shape the output, kept in a catalog folder's
``synth_config.json`` so that a resumed run cannot mix scenes made another way (:func:`changed_options`). How a job
runs (shards, worker processes, Ray, resuming) is :func:`commonlink.synth.runner.synthesize`'s.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from pathlib import Path

from commonlink.constants import AREA_BAND
from commonlink.errors import InputError
from commonlink.synth.assets import AssetCatalog
from commonlink.synth.plan import PLAN_VERSION, PlanConfig
from commonlink.synth.render import Renderer, RendererSettings, recorded_keys
from commonlink.synth.render.offline import OfflineSettings
from commonlink.synth.visibility import default_min_visible_pixels

SYNTH_CONFIG_FILE = "synth_config.json"
#: The plan settings ``commonlink synth`` has options for, recorded under their own keys; any other plan setting
#: set away from its default is recorded under ``plan_options``.
_RECORDED_PLAN_FIELDS = frozenset(
    {"min_objects", "max_objects", "views", "width", "height", "max_yaw_deg", "set_size", "set_pool", "set_share"}
)


@dataclass
class SceneChecks:
    """When a rendered plan is kept: a plan is re-sampled (``max_attempts`` plans at most, the best one kept) while
    more of its (object, view) pairs than ``max_hidden_share`` show fewer than the pixel threshold, or fewer than
    ``min_in_band`` of them fall in the area band."""

    min_visible_pixels: int | None = None  #: None = 0.05% of the image (at least 16 px)
    max_hidden_share: float = 0.25  #: re-sample a plan when more (object, view) pairs than this are hidden
    #: Object area band (fraction of the image; Common-O reports 2-22%) and the share of a scene's (object, view)
    #: pairs that must fall in it; a plan below it is re-sampled. None: no area gate.
    area_band: tuple[float, float] | None = AREA_BAND
    min_in_band: float | None = None  #: None: 0.8 for scenes of up to 7 objects, 0.55 for more (min_in_band_for)
    max_attempts: int = 5  #: plans tried per scene before keeping the best one

    def __post_init__(self) -> None:
        if not 0.0 <= self.max_hidden_share <= 1.0:
            raise InputError(
                f"--max-hidden {self.max_hidden_share}: must be between 0 and 1.", "e.g. --max-hidden 0.25."
            )
        if self.area_band is not None:
            self.area_band = tuple(float(v) for v in self.area_band)  # type: ignore[assignment]
            low, high = self.area_band
            if not 0.0 <= low < high <= 1.0:
                raise InputError(
                    f"--area-band {low}-{high}: need 0 <= LOW < HIGH <= 1 (fractions of the image).",
                    "e.g. --area-band 0.02-0.22, or --area-band off to drop the gate.",
                )
        if self.min_in_band is not None and not 0.0 <= self.min_in_band <= 1.0:
            raise InputError(f"--min-in-band {self.min_in_band}: must be between 0 and 1.", "e.g. --min-in-band 0.7.")
        if self.max_attempts < 1:
            raise InputError(f"--max-attempts {self.max_attempts}: must be >= 1.", "e.g. --max-attempts 5.")
        if self.min_visible_pixels is not None and self.min_visible_pixels < 1:
            raise InputError(
                f"--min-visible-pixels {self.min_visible_pixels}: must be at least 1 pixel.",
                "Leave it out for the default (0.05% of the image, at least 16), or e.g. --min-visible-pixels 50.",
            )

    def pixel_threshold(self, width: int, height: int) -> int:
        """Visible pixels an object needs in a ``width`` x ``height`` image to count as present."""
        if self.min_visible_pixels is not None:
            return int(self.min_visible_pixels)
        return default_min_visible_pixels(width, height)

    def min_in_band_for(self, n_objects: int) -> float:
        """The share of a scene's (object, view) pairs that must fall in the area band: ``min_in_band``, or by
        default 0.8 for up to 7 objects and 0.55 for more (16 objects on 16 positions leave thin objects little
        room, and re-sampling such scenes again and again would mostly cost time)."""
        if self.min_in_band is not None:
            return self.min_in_band
        return 0.8 if n_objects <= 7 else 0.55


@dataclass
class SynthJob:
    """Everything that decides what ``commonlink synth`` renders: scene ``i`` of the job depends only on these
    settings and ``i``."""

    scenes: int
    seed: int = 0
    assets: str | None = None  #: asset file; None = the built-in one
    plan: PlanConfig = field(default_factory=PlanConfig)
    checks: SceneChecks = field(default_factory=SceneChecks)
    renderer: RendererSettings = field(default_factory=OfflineSettings)

    def __post_init__(self) -> None:
        if self.assets is not None:  # worker processes and Ray tasks may run in another directory
            self.assets = str(Path(self.assets).resolve())
        if self.scenes < 0:
            raise InputError(f"--scenes {self.scenes}: must be >= 0.", "e.g. --scenes 100.")

    @property
    def pixel_threshold(self) -> int:
        return self.checks.pixel_threshold(self.plan.width, self.plan.height)

    def open_renderer(self, catalog: AssetCatalog) -> Renderer:
        """The job's renderer, open at the plan's resolution (close it when done)."""
        return self.renderer.open(catalog, self.plan.width, self.plan.height)

    def content(self, catalog: AssetCatalog) -> dict:
        """The options that change the output (a resumed run must match them); not the scene count, the server
        address or the timeouts."""
        plan, checks = self.plan, self.checks
        content = {
            "plan_version": PLAN_VERSION,
            "objects": [plan.min_objects, plan.max_objects],
            "views": plan.views,
            "resolution": [plan.width, plan.height],
            "seed": self.seed,
            "backend": self.renderer.name,
            "assets_sha256": catalog.sha256,
            "min_visible_pixels": self.pixel_threshold,
            "max_hidden_share": checks.max_hidden_share,
            "max_attempts": checks.max_attempts,
            **self.renderer.content(),
            "area_band": list(checks.area_band) if checks.area_band else None,
            "min_in_band": checks.min_in_band,
            "max_yaw": plan.max_yaw_deg,
            "set_size": plan.set_size,
            "set_pool": plan.set_pool,
            "set_share": plan.set_share,
        }
        other = {
            f.name: getattr(plan, f.name)
            for f in fields(plan)
            if f.name not in _RECORDED_PLAN_FIELDS and getattr(plan, f.name) != f.default
        }
        if other:  # as read back from JSON (tuples become lists)
            content["plan_options"] = json.loads(json.dumps(other))
        return content


def changed_options(recorded: dict, content: dict) -> list[str]:
    """The options whose value in a folder's record differs from ``content`` (:meth:`SynthJob.content`).

    Another renderer's settings in the record are not compared (the backend itself is): records written before the
    settings moved onto the renderers hold both renderers' (``shadows``, ``mask_tolerance``) whatever the backend."""
    others = recorded_keys() - set(content)
    return sorted(k for k in set(recorded) | set(content) if k not in others and recorded.get(k) != content.get(k))


__all__ = ["SYNTH_CONFIG_FILE", "SceneChecks", "SynthJob", "changed_options"]
