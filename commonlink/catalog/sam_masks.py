"""Segment Anything (SAM) for object-area statistics of real photos (Common-O paper §3.1: objects cover 2–22%).

What can be measured honestly depends on what the catalog knows about a photo:

* **Prompted** (``extra.boxes`` ``{name: [x0, y0, x1, y1]}`` and/or ``extra.points`` ``{name: [x, y] or
  [[x, y], ...]}``, pixel coordinates of the stored image): SAM segments each named object from its prompt,
  so the area belongs to that name → ``object_area`` ``{name: fraction}``.
* **Automatic** (names only, the usual case): SAM's automatic mask generator proposes masks with no names.
  We keep masks of plausible object size (``min_fraction``–``max_fraction`` of the image), drop masks nested
  inside a bigger kept candidate (parts of one object), and keep the ``N`` best by SAM's predicted IoU, where
  ``N`` is the number of labelled objects. The result is a list of ``N`` (or fewer) fractions that cannot be
  tied to names → ``extra.estimated_object_areas``.

The model is any ``segment_anything.modeling.Sam`` (injected by tests, or built from a checkpoint with
:func:`load_sam`); the real ``SamPredictor`` / ``SamAutomaticMaskGenerator`` code runs in both cases.

segment-anything imports two small torchvision utilities. Where torchvision is missing or cannot load (the
CPU build of torch has no matching torchvision wheel on PyPI), :func:`import_segment_anything` provides
equivalent implementations of exactly those (``resize``, ``to_pil_image``, ``batched_nms``, ``box_area``)
while segment-anything is imported, then removes them again, so nothing else in the process sees a fake
torchvision. With a working torchvision, the real one is used.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
import traceback
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from commonlink.errors import (
    BackendError,
    InputError,
    MissingDependencyError,
    SchemaError,
    check_at_least,
)
from commonlink.fileio import sha256_file

#: Where the official SAM checkpoints are published (never downloaded by commonlink).
SAM_CHECKPOINTS = {
    "vit_b": ("sam_vit_b_01ec64.pth", "375 MB", "https://dl.fbaipublicfiles.com/segment_anything/sam_vit_b_01ec64.pth"),
    "vit_l": ("sam_vit_l_0b3195.pth", "1.2 GB", "https://dl.fbaipublicfiles.com/segment_anything/sam_vit_l_0b3195.pth"),
    "vit_h": ("sam_vit_h_4b8939.pth", "2.6 GB", "https://dl.fbaipublicfiles.com/segment_anything/sam_vit_h_4b8939.pth"),
}

#: Plausible size of one tabletop object, as a fraction of the image (the paper measured 2–22%).
DEFAULT_MIN_FRACTION = 0.005
DEFAULT_MAX_FRACTION = 0.40
#: A mask with at least this share of its pixels inside a bigger candidate is treated as a part of it.
NESTED_OVERLAP = 0.9
#: Photos are scaled so their long side is at most this before SAM (SAM works at 1024 anyway; fractions
#: are scale-free, and memory stays flat for 12-megapixel phone photos).
MAX_SIDE = 1024


def checkpoint_help(model_type: str = "vit_b") -> str:
    """What a SAM checkpoint is for and where to get one (printed when none is given)."""
    lines = [
        "Real photos have no masks, so `commonlink stats` estimates how much of each photo the objects cover "
        "with Segment Anything (SAM). It needs a SAM checkpoint file, which commonlink never downloads by itself.",
        "Get one of the official checkpoints (github.com/facebookresearch/segment-anything, 'Model Checkpoints'):",
    ]
    for name, (filename, size, url) in SAM_CHECKPOINTS.items():
        mark = "  <- smallest, fine for area statistics" if name == "vit_b" else ""
        lines.append(f"  --sam-model {name}: {filename} ({size})  {url}{mark}")
    lines.append(f"then rerun with --sam-checkpoint PATH --sam-model {model_type}.")
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------- import


def import_segment_anything() -> types.ModuleType:
    """Import ``segment_anything``; use torchvision stand-ins only when torchvision cannot be imported."""
    try:
        import torch  # noqa: F401
    except ImportError:
        raise MissingDependencyError("torch", "sam", "Object-area statistics with Segment Anything") from None
    if "segment_anything" in sys.modules:
        return sys.modules["segment_anything"]
    try:
        import segment_anything

        return segment_anything
    except ModuleNotFoundError as exc:
        if exc.name == "segment_anything":
            raise MissingDependencyError(
                "segment-anything", "sam", "Object-area statistics with Segment Anything"
            ) from None
        if not (exc.name or "").startswith("torchvision"):
            raise
    except (ImportError, RuntimeError) as exc:  # torchvision installed but broken (e.g. CUDA build beside CPU torch)
        frames = traceback.extract_tb(exc.__traceback__)
        if "torchvision" not in str(exc) and not any("torchvision" in frame.filename for frame in frames):
            raise
    with _torchvision_stand_in():
        import segment_anything
    return segment_anything


@contextlib.contextmanager
def _torchvision_stand_in():
    names = [
        "torchvision",
        "torchvision.ops",
        "torchvision.ops.boxes",
        "torchvision.transforms",
        "torchvision.transforms.functional",
    ]
    saved = {
        name: sys.modules[name]
        for name in list(sys.modules)
        if name == "torchvision" or name.startswith("torchvision.")
    }
    for name in saved:
        del sys.modules[name]
    modules = {name: types.ModuleType(name) for name in names}
    modules["torchvision.ops.boxes"].batched_nms = batched_nms
    modules["torchvision.ops.boxes"].box_area = box_area
    modules["torchvision.transforms.functional"].resize = _resize
    modules["torchvision.transforms.functional"].to_pil_image = _to_pil_image
    modules["torchvision"].ops = modules["torchvision.ops"]
    modules["torchvision"].transforms = modules["torchvision.transforms"]
    modules["torchvision.ops"].boxes = modules["torchvision.ops.boxes"]
    modules["torchvision.transforms"].functional = modules["torchvision.transforms.functional"]
    sys.modules.update(modules)
    try:
        yield
    finally:
        for name in names:
            sys.modules.pop(name, None)
        sys.modules.update(saved)


def box_area(boxes):
    """Area of ``(x0, y0, x1, y1)`` boxes (torchvision.ops.box_area)."""
    return (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])


def batched_nms(boxes, scores, idxs, iou_threshold: float):
    """Greedy non-maximum suppression within each category (torchvision.ops.batched_nms semantics).

    Returns the indices of kept boxes, highest score first.
    """
    import torch

    if boxes.numel() == 0:
        return torch.empty((0,), dtype=torch.int64, device=boxes.device)
    # Offsetting boxes by category keeps categories from overlapping (torchvision's own trick).
    offsets = idxs.to(boxes) * (boxes.max() + 1)
    shifted = boxes + offsets[:, None]
    order = torch.argsort(scores, descending=True)
    shifted = shifted[order]
    area = box_area(shifted)
    top_left = torch.maximum(shifted[:, None, :2], shifted[None, :, :2])
    bottom_right = torch.minimum(shifted[:, None, 2:], shifted[None, :, 2:])
    inter = (bottom_right - top_left).clamp(min=0).prod(dim=2)
    iou = (inter / (area[:, None] + area[None, :] - inter).clamp(min=1e-12)).cpu().numpy()
    suppressed = np.zeros(len(order), dtype=bool)
    keep = []
    for i in range(len(order)):
        if suppressed[i]:
            continue
        keep.append(i)
        suppressed |= iou[i] > iou_threshold
    return order[torch.as_tensor(keep, dtype=torch.int64, device=order.device)]


def _to_pil_image(pic):
    if isinstance(pic, np.ndarray):
        return Image.fromarray(pic)
    return Image.fromarray(pic.detach().cpu().permute(1, 2, 0).numpy())  # CHW tensor


def _resize(img, size):
    height, width = size  # torchvision takes (h, w)
    return img.resize((int(width), int(height)), Image.BILINEAR)


# ----------------------------------------------------------------------------------------------- loading


def load_sam(checkpoint: str | os.PathLike, model_type: str = "vit_b", device: str = "cpu"):
    """Build ``model_type`` from ``sam_model_registry`` and load ``checkpoint`` (weights only, no pickle code)."""
    import torch

    sam_lib = import_segment_anything()
    registry = sam_lib.sam_model_registry
    if model_type not in registry:
        raise InputError(f"Unknown SAM model {model_type!r}.", f"Use one of: {', '.join(sorted(registry))}.")
    path = Path(checkpoint)
    if not path.is_file():
        raise InputError(f"SAM checkpoint not found: {path}.", checkpoint_help(model_type))
    check_device(device)
    sam = registry[model_type](checkpoint=None)
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any unreadable file ends up here
        raise InputError(
            f"{path} is not a readable SAM checkpoint ({exc.__class__.__name__}).",
            "Pass the .pth file of an official SAM checkpoint.",
        ) from exc
    if isinstance(state, dict) and "model" in state and isinstance(state["model"], dict):
        state = state["model"]
    try:
        sam.load_state_dict(state)
    except (RuntimeError, TypeError) as exc:
        raise InputError(
            f"{path.name} does not fit SAM model {model_type!r} ({str(exc).splitlines()[0]}).",
            "Pass the --sam-model that matches the checkpoint: "
            + ", ".join(f"{filename} -> {name}" for name, (filename, _, _) in SAM_CHECKPOINTS.items()),
        ) from exc
    sam.eval()
    return sam.to(device)


def check_device_name(device: str) -> None:
    """Refuse a device name torch does not know (cpu, cuda, cuda:N), without importing torch."""
    if device not in ("cpu", "cuda") and not (device.startswith("cuda:") and device[5:].isdigit()):
        raise InputError(f"Unknown device {device!r}.", "Use --device cpu, --device cuda or --device cuda:N.")


def check_device(device: str) -> None:
    import torch

    check_device_name(device)
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise InputError("--device cuda was asked for, but torch sees no CUDA GPU here.", "Use --device cpu.")


def checkpoint_fingerprint(checkpoint: str | os.PathLike) -> str:
    """Short content hash of a checkpoint, so cached areas are redone when the weights change."""

    return sha256_file(checkpoint)[:16]


# ----------------------------------------------------------------------------------------------- estimation


@dataclass
class AreaEstimate:
    method: str  #: "sam-prompt" | "sam-auto"
    object_area: dict[str, float] | None = None  #: prompted: {name: fraction}
    estimated_areas: list[float] | None = None  #: automatic: unnamed fractions, largest first
    candidates: int = 0  #: automatic: masks SAM proposed before filtering

    def to_json(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "object_area": self.object_area,
            "estimated_areas": self.estimated_areas,
            "candidates": self.candidates,
        }

    @classmethod
    def from_json(cls, data: dict) -> AreaEstimate:
        return cls(
            method=data["method"],
            object_area=data.get("object_area"),
            estimated_areas=data.get("estimated_areas"),
            candidates=int(data.get("candidates", 0)),
        )


@dataclass(frozen=True)
class AutoMaskSettings:
    """Settings of the automatic path (SAM's own defaults for the generator thresholds)."""

    points_per_side: int = 32
    points_per_batch: int = 64
    pred_iou_thresh: float = 0.88
    stability_score_thresh: float = 0.95
    min_fraction: float = DEFAULT_MIN_FRACTION
    max_fraction: float = DEFAULT_MAX_FRACTION

    def __post_init__(self) -> None:
        """The CLI's checks (``commonlink stats --min-area/--max-area``), in its words."""
        check_at_least("--points-per-side", self.points_per_side, 1)
        if not 0 <= self.min_fraction < self.max_fraction <= 1:
            raise InputError(
                f"--min-area {self.min_fraction} must be below --max-area {self.max_fraction} (both in [0, 1]).",
                "e.g. --min-area 0.005 --max-area 0.4",
            )

    def key(self) -> str:
        text = repr(sorted(self.__dict__.items()))
        return hashlib.sha256(text.encode()).hexdigest()[:12]


def prompts_for(extra: dict, objects: list[str], *, where: str) -> dict[str, dict]:
    """``{name: {"box": [...]} | {"points": [[x, y], ...]}}`` from a record's ``extra.boxes``/``extra.points``."""
    prompts: dict[str, dict] = {}
    for field_name in ("boxes", "points"):
        given = extra.get(field_name) or {}
        if not isinstance(given, dict):
            raise SchemaError(
                f"{where}: extra.{field_name} must map object names to coordinates.",
                'Write it as {"apple": [x0, y0, x1, y1]} (boxes) or {"apple": [x, y]} (points).',
            )
        for name, value in given.items():
            if name not in objects:
                raise SchemaError(
                    f"{where}: extra.{field_name} names {name!r}, which is not in 'objects'.",
                    "Fix the name or add the object to the record's objects.",
                )
            try:
                arr = np.asarray(value, dtype=float)
            except (TypeError, ValueError):
                arr = np.zeros((0,))
            if field_name == "boxes":
                if arr.shape != (4,) or not (arr[2] > arr[0] and arr[3] > arr[1]):
                    raise SchemaError(
                        f"{where}: box of {name!r} must be [x0, y0, x1, y1] with x1 > x0, y1 > y0; got {value!r}."
                    )
                prompts.setdefault(name, {})["box"] = arr.tolist()
            else:
                arr = arr.reshape(1, 2) if arr.shape == (2,) else arr
                if arr.ndim != 2 or arr.shape[1] != 2 or len(arr) == 0:
                    raise SchemaError(f"{where}: point(s) of {name!r} must be [x, y] or [[x, y], ...]; got {value!r}.")
                prompts.setdefault(name, {})["points"] = arr.tolist()
    return prompts


def prepare_image(img) -> tuple[np.ndarray, float]:
    """RGB uint8 array with the long side at most :data:`MAX_SIDE`, and the scale applied."""
    img = img.convert("RGB")
    scale = min(1.0, MAX_SIDE / max(img.size))
    if scale < 1.0:
        img = img.resize((max(1, round(img.width * scale)), max(1, round(img.height * scale))))
    return np.asarray(img, dtype=np.uint8), scale


def estimate_prompted(sam, image: np.ndarray, prompts: dict[str, dict], *, scale: float = 1.0) -> AreaEstimate:
    """Segment each prompted object with ``SamPredictor``; area fraction per name."""
    import torch

    predictor = import_segment_anything().SamPredictor(sam)
    total = float(image.shape[0] * image.shape[1])
    areas: dict[str, float] = {}
    with torch.inference_mode():
        predictor.set_image(image)
        for name, prompt in prompts.items():
            box = np.asarray(prompt["box"], dtype=float) * scale if "box" in prompt else None
            points = np.asarray(prompt["points"], dtype=float) * scale if "points" in prompt else None
            labels = np.ones(len(points), dtype=int) if points is not None else None
            # one point is ambiguous (part / object / group): ask for 3 masks and keep SAM's best guess
            multimask = box is None and points is not None and len(points) == 1
            masks, scores, _ = predictor.predict(
                point_coords=points, point_labels=labels, box=box, multimask_output=multimask
            )
            best = int(np.argmax(scores))
            areas[name] = float(masks[best].sum()) / total
    return AreaEstimate(method="sam-prompt", object_area=areas)


def estimate_automatic(
    sam, image: np.ndarray, n_objects: int, settings: AutoMaskSettings = AutoMaskSettings()
) -> AreaEstimate:
    """SAM's automatic masks, filtered to ``n_objects`` plausible object masks (see module docstring)."""
    import torch

    generator = import_segment_anything().SamAutomaticMaskGenerator(
        sam,
        points_per_side=settings.points_per_side,
        points_per_batch=settings.points_per_batch,
        pred_iou_thresh=settings.pred_iou_thresh,
        stability_score_thresh=settings.stability_score_thresh,
    )
    try:
        with torch.inference_mode():
            masks = generator.generate(image)
    except torch.cuda.OutOfMemoryError as exc:  # pragma: no cover - GPU only
        raise BackendError(
            "SAM ran out of GPU memory.", "Lower --points-per-side or use a smaller --sam-model."
        ) from exc
    fractions = select_object_masks(
        masks,
        n_objects,
        image.shape[0] * image.shape[1],
        min_fraction=settings.min_fraction,
        max_fraction=settings.max_fraction,
    )
    return AreaEstimate(method="sam-auto", estimated_areas=fractions, candidates=len(masks))


def select_object_masks(
    masks: list[dict],
    n_objects: int,
    image_pixels: int,
    *,
    min_fraction: float = DEFAULT_MIN_FRACTION,
    max_fraction: float = DEFAULT_MAX_FRACTION,
    nested_overlap: float = NESTED_OVERLAP,
) -> list[float]:
    """Area fractions of up to ``n_objects`` masks that look like whole objects, largest first.

    ``masks`` are ``SamAutomaticMaskGenerator`` records (``segmentation`` bool array, ``area``,
    ``predicted_iou``). Steps: keep sizes within [min_fraction, max_fraction]; drop a mask when at least
    ``nested_overlap`` of it lies inside a bigger candidate; keep the ``n_objects`` best by predicted IoU.
    """
    candidates = [m for m in masks if min_fraction <= m["area"] / image_pixels <= max_fraction]
    if not candidates or n_objects <= 0:
        return []
    # compare masks on a coarse grid: nesting is a large-scale property and this keeps it O(M^2 * 64k)
    first = candidates[0]["segmentation"]
    step = max(1, int(np.ceil(max(first.shape) / 256)))
    flat = np.stack([m["segmentation"][::step, ::step].reshape(-1) for m in candidates]).astype(np.float32)
    inter = flat @ flat.T
    sizes = np.diag(inter).copy()
    areas = np.array([m["area"] for m in candidates], dtype=float)
    iou_pred = np.array([m.get("predicted_iou", 0.0) for m in candidates], dtype=float)
    keep = []
    for i in range(len(candidates)):
        inside = inter[i] / max(sizes[i], 1.0)
        # bigger candidates (ties broken by predicted IoU) that contain most of mask i
        bigger = (
            (areas > areas[i])
            | ((areas == areas[i]) & (iou_pred > iou_pred[i]))
            | ((areas == areas[i]) & (iou_pred == iou_pred[i]) & (np.arange(len(areas)) < i))
        )
        bigger[i] = False
        if not np.any(bigger & (inside >= nested_overlap)):
            keep.append(i)
    keep.sort(key=lambda i: (-iou_pred[i], -areas[i]))
    chosen = keep[:n_objects]
    return sorted((float(areas[i]) / image_pixels for i in chosen), reverse=True)
