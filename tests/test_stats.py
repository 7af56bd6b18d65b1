"""`commonlink stats`: exact areas from render masks, SAM (tiny random model, real code path) for photos."""

from __future__ import annotations

import json
import sys
from functools import partial

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from commonlink.catalog.areas import CACHE_FILENAME, SUMMARY_FILENAME, compute_object_stats, mask_area_fractions
from commonlink.catalog.sam_masks import (
    AutoMaskSettings,
    batched_nms,
    import_segment_anything,
    load_sam,
    select_object_masks,
)
from commonlink.cli import app
from commonlink.errors import InputError, MissingDependencyError, SchemaError
from commonlink.formats.catalog import CatalogRecord, read_catalog, write_catalog

torch = pytest.importorskip("torch")
try:
    import_segment_anything()  # with torchvision stand-ins where torchvision cannot load
except MissingDependencyError:  # pragma: no cover - light installs without the sam extra
    pytest.skip("segment-anything is not installed", allow_module_level=True)

# thresholds off: a random model's predicted IoU means nothing, but every stage of SAM's pipeline still runs
PERMISSIVE = AutoMaskSettings(
    points_per_side=4, pred_iou_thresh=0.0, stability_score_thresh=0.0, min_fraction=0.0, max_fraction=1.0
)


def build_tiny_sam(checkpoint=None, *, embed_dim=32, seed=0):
    """A randomly initialised SAM mirroring segment_anything.build_sam._build_sam, a few thousand times smaller."""
    from segment_anything.modeling import ImageEncoderViT, MaskDecoder, PromptEncoder, Sam, TwoWayTransformer

    torch.manual_seed(seed)
    image_size, patch = 64, 16
    sam = Sam(
        image_encoder=ImageEncoderViT(
            depth=1,
            embed_dim=embed_dim,
            img_size=image_size,
            mlp_ratio=2,
            norm_layer=partial(torch.nn.LayerNorm, eps=1e-6),
            num_heads=2,
            patch_size=patch,
            qkv_bias=True,
            use_rel_pos=True,
            global_attn_indexes=[0],
            window_size=0,
            out_chans=32,
        ),
        prompt_encoder=PromptEncoder(
            embed_dim=32,
            image_embedding_size=(image_size // patch,) * 2,
            input_image_size=(image_size, image_size),
            mask_in_chans=4,
        ),
        mask_decoder=MaskDecoder(
            num_multimask_outputs=3,
            transformer=TwoWayTransformer(depth=1, embedding_dim=32, mlp_dim=64, num_heads=2),
            transformer_dim=32,
            iou_head_depth=2,
            iou_head_hidden_dim=32,
        ),
        pixel_mean=[123.675, 116.28, 103.53],
        pixel_std=[58.395, 57.12, 57.375],
    )
    sam.eval()
    if checkpoint is not None:
        sam.load_state_dict(torch.load(checkpoint, weights_only=True))
    return sam


def _photo(path, seed):
    pixels = (np.random.default_rng(seed).random((48, 80, 3)) * 255).astype(np.uint8)
    pixels[10:30, 10:40] = (220, 30, 30)  # a red "object"
    Image.fromarray(pixels).save(path)


def _record(ident, objects, source="real", **kwargs):
    return CatalogRecord(
        id=ident,
        path=f"images/{ident}.png",
        objects=objects,
        source=source,
        scene_id="s",
        width=80,
        height=48,
        sha256="0" * 64,
        **kwargs,
    )


def _photo_catalog(tmp_path):
    cat = tmp_path / "cat"
    (cat / "images").mkdir(parents=True)
    _photo(cat / "images" / "auto.png", 1)
    _photo(cat / "images" / "prompted.png", 2)
    records = [
        _record("auto", ["apple", "keys", "mug"]),
        _record(
            "prompted",
            ["apple", "keys", "mug"],
            extra={"boxes": {"apple": [10, 10, 40, 30]}, "points": {"keys": [60, 20]}},
        ),
    ]
    write_catalog(cat, records)
    return cat


def test_render_mask_areas_are_exact(tmp_path):
    cat = tmp_path / "synth"
    (cat / "scenes").mkdir(parents=True)
    mask = np.zeros((50, 100), dtype=np.uint16)
    mask[0:10, 0:50] = 1  # 500 px = 10%
    mask[20:45, 0:50] = 2  # 1250 px = 25%
    mask[45:50, 90:100] = 7  # 50 px = 1%, a second instance of "apple"
    Image.fromarray(mask).save(cat / "scenes" / "mask_0.png")
    Image.new("RGB", (100, 50)).save(cat / "scenes" / "view_0.png")
    record = CatalogRecord(
        id="r0",
        path="scenes/view_0.png",
        objects=["apple", "duck", "ball"],
        source="synthetic",
        scene_id="s0",
        width=100,
        height=50,
        sha256="0" * 64,
        object_area={"apple": 0.5},
        extra={"mask": "scenes/mask_0.png", "mask_ids": {"1": "apple", "2": "duck", "3": "ball", "7": "apple"}},
    )
    write_catalog(cat, [record])

    result = compute_object_stats(cat, progress=False)  # no model needed for renders

    stored = read_catalog(cat)[0]
    assert stored.object_area == {"apple": 0.11, "duck": 0.25, "ball": 0.0}  # recomputed, old 0.5 replaced
    assert stored.extra["area_method"] == "mask"
    assert result.measured == {"mask": 1} and result.needs_sam == 0
    summary = json.loads((cat / SUMMARY_FILENAME).read_text())
    assert summary["per_object"]["duck"]["mean"] == 0.25
    assert summary["per_source"]["synthetic"]["count"] == 3
    assert summary["images"] == {
        "total": 1,
        "measured_by_method": {"mask": 1},
        "not_measured": 0,
        "sam_auto_without_object_masks": 0,
        "cached_sam_results": 0,
        "computed_sam_results": 0,
    }


def test_synth_layout_planned_objects(tmp_path):
    """The layout `commonlink synth` writes: extra.mask + extra.planned_objects (id k + 1 = planned object k)."""
    cat = tmp_path / "synth"
    scene = cat / "scenes" / "scene_000000"
    scene.mkdir(parents=True)
    mask = np.zeros((40, 40), dtype=np.uint16)
    mask[:4, :] = 1  # 160 px = 10% "mug"
    mask[4:6, :10] = 3  # 20 px: "duck", too hidden to be listed in objects
    mask[10:30, 10:30] = 2  # 400 px = 25% "ball"
    Image.fromarray(mask).save(scene / "mask_0.png")
    Image.new("RGB", (40, 40)).save(scene / "view_0.png")
    record = CatalogRecord(
        id="v0",
        path="scenes/scene_000000/view_0.png",
        objects=["mug", "ball"],
        source="synthetic",
        scene_id="scene_000000",
        width=40,
        height=40,
        sha256="0" * 64,
        object_area={"mug": 0.1, "ball": 0.25},
        extra={"mask": "scenes/scene_000000/mask_0.png", "planned_objects": ["mug", "ball", "duck"]},
    )
    write_catalog(cat, [record])
    compute_object_stats(cat, progress=False)
    stored = read_catalog(cat)[0]
    assert stored.object_area == {"mug": 0.1, "ball": 0.25}
    assert stored.extra["area_method"] == "mask"


def test_refuses_catalog_being_written_and_missing_catalog(tmp_path):
    from commonlink.formats.catalog import catalog_lock

    cat = _photo_catalog(tmp_path)
    before = (cat / "catalog.jsonl").read_bytes()
    with catalog_lock(cat, what="commonlink ingest"):
        with pytest.raises(InputError, match="being written by commonlink ingest"):
            compute_object_stats(cat, progress=False)
    assert (cat / "catalog.jsonl").read_bytes() == before
    with pytest.raises(InputError, match="not an image catalog"):
        compute_object_stats(tmp_path / "nowhere", progress=False)
    assert not (tmp_path / "nowhere").exists()


def test_mask_area_fractions_rgb_ids_and_errors():
    mask = np.array([[1, 1, 2, 2], [0, 0, 0, 2]])
    assert mask_area_fractions(mask, {1: "a", 2: "b"}) == {"a": 0.25, "b": 0.375}
    with pytest.raises(SchemaError):
        mask_area_fractions(np.zeros((2, 2, 3)), {1: "a"})


def test_mask_naming_unknown_object_is_refused(tmp_path):
    cat = tmp_path / "c"
    cat.mkdir()
    Image.new("L", (4, 4)).save(cat / "m.png")
    Image.new("RGB", (4, 4)).save(cat / "v.png")
    rec = CatalogRecord(
        id="x",
        path="v.png",
        objects=["apple"],
        source="synthetic",
        scene_id="s",
        width=4,
        height=4,
        sha256="0",
        extra={"mask": "m.png", "mask_ids": {"1": "pear"}},
    )
    write_catalog(cat, [rec])
    with pytest.raises(SchemaError, match="pear"):
        compute_object_stats(cat, progress=False)


def test_tiny_sam_automatic_and_prompted_then_cached(tmp_path):
    cat = _photo_catalog(tmp_path)
    sam = build_tiny_sam()
    first = compute_object_stats(cat, sam=sam, model_id="tiny", settings=PERMISSIVE, progress=False)
    assert first.computed == 2 and first.cached == 0
    auto, prompted = read_catalog(cat)

    estimates = auto.extra["estimated_object_areas"]
    assert auto.extra["area_method"] == "sam-auto" and auto.extra["area_model"] == "tiny"
    assert auto.object_area is None  # unnamed estimates are never passed off as per-object areas
    assert 1 <= len(estimates) <= 3 and estimates == sorted(estimates, reverse=True)
    assert all(0.0 < v <= 1.0 for v in estimates)
    assert auto.extra["sam_candidate_masks"] >= len(estimates)

    assert prompted.extra["area_method"] == "sam-prompt"
    assert set(prompted.object_area) == {"apple", "keys"}  # only the prompted names
    assert all(0.0 < v <= 1.0 for v in prompted.object_area.values())
    assert len((cat / CACHE_FILENAME).read_text().splitlines()) == 2

    def must_not_load():
        raise AssertionError("everything is cached; the model must not be loaded")

    second = compute_object_stats(cat, load_sam=must_not_load, model_id="tiny", settings=PERMISSIVE, progress=False)
    assert (second.cached, second.computed) == (2, 0)
    assert read_catalog(cat) == [auto, prompted]

    _photo(cat / "images" / "auto.png", 99)  # a changed image is measured again, the other stays cached
    third = compute_object_stats(cat, sam=sam, model_id="tiny", settings=PERMISSIVE, progress=False)
    assert (third.cached, third.computed) == (1, 1)
    summary = json.loads((cat / SUMMARY_FILENAME).read_text())
    assert summary["images"]["measured_by_method"] == {"sam-auto": 1, "sam-prompt": 1}
    assert set(summary["per_object"]) == {"apple", "keys"}
    assert summary["per_source"]["real"]["count"] == len(read_catalog(cat)[0].extra["estimated_object_areas"]) + 2


@pytest.mark.slow
def test_torn_cache_line_is_redone(tmp_path):
    cat = _photo_catalog(tmp_path)
    sam = build_tiny_sam()
    compute_object_stats(cat, sam=sam, model_id="tiny", settings=PERMISSIVE, progress=False)
    lines = (cat / CACHE_FILENAME).read_text().splitlines()
    (cat / CACHE_FILENAME).write_text(lines[0] + "\n" + lines[1][: len(lines[1]) // 2])  # crash mid-write
    again = compute_object_stats(cat, sam=sam, model_id="tiny", settings=PERMISSIVE, progress=False)
    assert (again.cached, again.computed) == (1, 1)


@pytest.mark.slow
def test_interrupted_run_keeps_work_and_resumes(tmp_path, monkeypatch):
    import commonlink.catalog.areas as stats_module

    cat = _photo_catalog(tmp_path)  # records: "auto" first, then "prompted"
    sam = build_tiny_sam()

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(stats_module, "estimate_prompted", interrupted)
        with pytest.raises(KeyboardInterrupt):
            compute_object_stats(cat, sam=sam, model_id="tiny", settings=PERMISSIVE, progress=False)
    auto, prompted = read_catalog(cat)
    assert auto.extra["area_method"] == "sam-auto" and "area_method" not in prompted.extra  # first one kept
    resumed = compute_object_stats(cat, sam=sam, model_id="tiny", settings=PERMISSIVE, progress=False)
    assert (resumed.cached, resumed.computed) == (1, 1)


def test_bad_prompt_names_record(tmp_path):
    cat = _photo_catalog(tmp_path)
    records = read_catalog(cat)
    records[1].extra["boxes"] = {"apple": [40, 10, 10, 30]}  # x1 < x0
    write_catalog(cat, records)
    with pytest.raises(SchemaError, match="prompted.*apple"):
        compute_object_stats(cat, sam=build_tiny_sam(), model_id="tiny", settings=PERMISSIVE, progress=False)


def test_select_object_masks_filters_sizes_nesting_and_count():
    h, w = 100, 100

    def mask(y0, y1, x0, x1, iou):
        seg = np.zeros((h, w), dtype=bool)
        seg[y0:y1, x0:x1] = True
        return {"segmentation": seg, "area": int(seg.sum()), "predicted_iou": iou}

    masks = [
        mask(0, 80, 0, 75, 0.99),  # 60%: background/table, too big
        mask(0, 20, 0, 100, 0.90),  # 20%: an object
        mask(2, 8, 2, 10, 0.98),  # 0.48%: inside the 20% object -> a part, dropped
        mask(50, 60, 80, 90, 0.95),  # 1%: a small object
        mask(90, 92, 0, 2, 0.97),  # 0.04%: speck, too small
        mask(30, 40, 80, 100, 0.80),  # 2%: a third object, lowest predicted IoU
    ]
    assert select_object_masks(masks, 3, h * w) == [0.20, 0.02, 0.01]
    assert select_object_masks(masks, 2, h * w) == [0.20, 0.01]  # best two by predicted IoU
    assert select_object_masks(masks, 1, h * w, min_fraction=0.001) == [0.01]  # the part stays nested
    assert select_object_masks([], 3, h * w) == []


def test_batched_nms_matches_torchvision_semantics():
    boxes = torch.tensor([[0, 0, 10, 10], [1, 1, 10, 10], [20, 20, 30, 30], [0, 0, 10, 10]], dtype=torch.float)
    scores = torch.tensor([0.9, 0.8, 0.7, 0.95])
    keep = batched_nms(boxes, scores, torch.tensor([0, 0, 0, 1]), 0.5)
    assert keep.tolist() == [3, 0, 2]  # box 1 suppressed by box 0; box 3 is another category
    import segment_anything  # noqa: F401

    # the stand-in (if it was needed) is not left behind for other libraries to trip over
    assert "torchvision" not in sys.modules or hasattr(sys.modules["torchvision"], "__version__")


def test_load_sam_from_checkpoint_and_mismatch(tmp_path, monkeypatch):
    import segment_anything

    monkeypatch.setitem(segment_anything.sam_model_registry, "tiny_test", build_tiny_sam)
    checkpoint = tmp_path / "tiny.pth"
    torch.save(build_tiny_sam(seed=3).state_dict(), checkpoint)
    loaded = load_sam(checkpoint, "tiny_test")
    expected = build_tiny_sam(seed=3).state_dict()
    assert all(torch.equal(v, expected[k]) for k, v in loaded.state_dict().items())

    torch.save(build_tiny_sam(embed_dim=16).state_dict(), tmp_path / "other.pth")
    with pytest.raises(InputError, match="does not fit SAM model 'tiny_test'"):
        load_sam(tmp_path / "other.pth", "tiny_test")
    with pytest.raises(InputError, match="Unknown SAM model"):
        load_sam(checkpoint, "vit_zz")


def test_cli_without_checkpoint_explains_and_measures_renders_only(tmp_path):
    cat = _photo_catalog(tmp_path)
    result = CliRunner().invoke(app, ["stats", str(cat)])
    assert result.exit_code == 0, result.output
    assert "2 photo(s) were not measured" in result.output
    assert "sam_vit_b_01ec64.pth" in result.output and "never downloads" in result.output
    assert (cat / SUMMARY_FILENAME).is_file()
    assert all("area_method" not in r.extra for r in read_catalog(cat))

    missing = CliRunner().invoke(app, ["stats", str(cat), "--sam-checkpoint", str(tmp_path / "nope.pth")])
    assert missing.exit_code == 1 and "SAM checkpoint not found" in missing.output


@pytest.mark.slow
def test_cli_with_checkpoint_runs_sam(tmp_path, monkeypatch):
    import segment_anything

    monkeypatch.setitem(segment_anything.sam_model_registry, "tiny_test", build_tiny_sam)
    checkpoint = tmp_path / "tiny.pth"
    torch.save(build_tiny_sam().state_dict(), checkpoint)
    cat = _photo_catalog(tmp_path)
    args = [
        "stats",
        str(cat),
        "--sam-checkpoint",
        str(checkpoint),
        "--sam-model",
        "tiny_test",
        "--points-per-side",
        "4",
        "--min-area",
        "0",
        "--max-area",
        "1",
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "Object area fraction by source" in result.output and "sam-prompt: 1" in result.output
    auto, prompted = read_catalog(cat)
    assert auto.extra["area_method"] == "sam-auto" and auto.extra["area_model"].startswith("tiny_test:")
    assert set(prompted.object_area) == {"apple", "keys"}

    rerun = CliRunner().invoke(app, args + ["--device", "cuda"])
    assert rerun.exit_code == 0, rerun.output  # everything cached: the model (and a GPU) is never needed
    assert "cached 2, computed 0" in rerun.output

    bad_device = CliRunner().invoke(app, args + ["--device", "tpu"])
    assert bad_device.exit_code == 1 and "Unknown device 'tpu'" in bad_device.output


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_tiny_sam_on_cuda(tmp_path):
    cat = _photo_catalog(tmp_path)
    sam = build_tiny_sam().to("cuda")
    result = compute_object_stats(cat, sam=sam, model_id="tiny", settings=PERMISSIVE, progress=False)
    assert result.computed == 2
    assert read_catalog(cat)[0].extra["area_method"] == "sam-auto"
