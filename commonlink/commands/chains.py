"""``commonlink chains``: a labelled image set -> association chain files (single-step, deduction, chains);
``chains verify`` (the paper's MLLM verification and human decisions) and ``chains review`` (pages for people)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table
from typer.core import TyperGroup

from commonlink.commands._common import console, progress_shown, reports_errors
from commonlink.commands._options import (
    BackendArgOpt,
    BackendsOpt,
    BatchSizeOpt,
    CatalogRootOpt,
    CheckNegativesOpt,
    ConcurrencyOpt,
    LimitOpt,
    ManifestOpt,
    MaxNewTokensOpt,
    MaxPixelsOpt,
    MaxStepsOpt,
    MinPixelsOpt,
    ModelsOpt,
    NegativeModeOpt,
    OptionalOutOpt,
    OutOpt,
    ProtocolOpt,
    QuietOpt,
    SeedOpt,
    SourceSplitOpt,
    ThumbSizeOpt,
    TrustRemoteCodeOpt,
)
from commonlink.commands.eval import backend_options
from commonlink.constants import DEFAULT_MIN_PIXELS
from commonlink.errors import InputError
from commonlink.eval.backends.base import DEFAULT_MAX_PIXELS, GenerationSettings
from commonlink.kinds.association.chain_sources import (
    SourceReport,
    default_concept_kind,
    detect_source_type,
    read_source,
)
from commonlink.kinds.association.chains import (
    TASKS,
    BuildSummary,
    ChainConfig,
    LabelIndex,
    build_chain_files,
    parse_concepts,
    parse_pairs,
    use_preset,
)
from commonlink.kinds.association.presets import PRESET_CHOICES, apply_aliases, resolve_preset
from commonlink.kinds.association.refine.review import export_review
from commonlink.kinds.association.refine.verify import ON_FAIL, UNDECIDED, verify_tasks


class ChainsGroup(TyperGroup):
    """``commonlink chains SOURCE ...`` builds (the ``build`` subcommand is implied); ``chains verify`` and
    ``chains review`` are subcommands."""

    def parse_args(self, ctx, args):
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            args = ["build", *args]
        return super().parse_args(ctx, args)


@reports_errors
def chains(
    source: str = typer.Argument(
        ...,
        help="Image catalog folder, Hugging Face dataset (save_to_disk folder, data folder or repo id), folder of "
        "images with a manifest, or an OCL/Pangea pickle.",
    ),
    out: OptionalOutOpt = None,
    source_type: str = typer.Option(
        "auto", "--source-type", help="auto, catalog, hf, manifest, ocl or pangea (pickles need ocl/pangea)."
    ),
    labels_field: str = typer.Option(
        "objects",
        "--labels-field",
        help="Catalog: record field holding the labels (objects, or a list field kept in the record).",
    ),
    image_column: str = typer.Option("image", "--image-column", help="HF dataset: the Image column."),
    labels_column: str = typer.Option(
        "labels",
        "--labels-column",
        help="HF dataset: the label or label-list column (ClassLabel ids decoded to names).",
    ),
    name_column: str | None = typer.Option(
        None,
        "--name-column",
        help="HF dataset: a string column naming each image (object, caption) for memory text; else images are named "
        "by their labels ('the image with a red circle').",
    ),
    split: SourceSplitOpt = None,
    hf_config: str | None = typer.Option(None, "--hf-config", help="HF dataset config name."),
    manifest: ManifestOpt = None,
    image_root: Path | None = typer.Option(
        None, "--image-root", help="OCL/Pangea: folder holding the images (default: the pickle's folder)."
    ),
    ocl_labels: str = typer.Option("attr", "--ocl-labels", help="OCL: concepts from attr, aff or both."),
    pangea_labels: str = typer.Option(
        "node",
        "--pangea-labels",
        help="Pangea: concepts from node (VerbNet nodes: the paper's actions), action or both label lists; the action "
        "labels name the image.",
    ),
    label_names: Path | None = typer.Option(
        None,
        "--label-names",
        help="OCL/Pangea: id -> name list (JSON list, or one name a line); else ids become attr_<id>, aff_<id>, "
        "action_<id>, node_<id>.",
    ),
    object_names: Path | None = typer.Option(
        None,
        "--object-names",
        help="OCL: id -> object name list, when the pickle's obj fields are ids (names given as strings are used as "
        "they are).",
    ),
    preset: str = typer.Option(
        "auto",
        "--preset",
        help=f"The paper's concept set and pairs: {', '.join(PRESET_CHOICES)}. auto = ocl-attribute / ocl-affordance "
        "for OCL (by --ocl-labels), pangea-action for Pangea, none otherwise. --concepts/--pairs override its parts.",
    ),
    min_pixels: MinPixelsOpt = DEFAULT_MIN_PIXELS,
    concepts: str | None = typer.Option(
        None, "--concepts", help="Concepts to build, comma-separated (default: the --top-k largest pools)."
    ),
    top_k: int = typer.Option(8, "--top-k", help="Without --concepts: how many concepts, by pool size."),
    min_pool: int = typer.Option(10, "--min-pool", help="Without --concepts: smallest pool a concept may have."),
    pairs: str | None = typer.Option(
        None,
        "--pairs",
        help="Asynchronous concept pairs, e.g. metal-furry,ripe-fresh (or a:b). Default: --auto-pairs pairs spread "
        "over the concepts (fewest shared concepts first, then the largest bridge pools).",
    ),
    auto_pairs: int = typer.Option(4, "--auto-pairs", help="Without --pairs: how many pairs to pick."),
    tasks: str = typer.Option(",".join(TASKS), "--tasks", help="Task types to build, comma-separated."),
    memory_size: int = typer.Option(3, "--memory-size", help="Single-step: memory images per task (K)."),
    single_steps: int = typer.Option(100, "--single-steps", help="Single-step tasks per concept."),
    deductions: int = typer.Option(100, "--deductions", help="Deduction tasks per concept."),
    chains_per_concept: int = typer.Option(
        None,
        "--chains",
        show_default=False,
        help="Synchronous chains per concept and asynchronous chains per pair. Default: scaled to the pool, 4 per "
        "image (at least 10), the paper's max(2000, pool size) for pools of 500+ images.",
    ),
    max_steps: MaxStepsOpt = 500,
    warmup: int = typer.Option(
        3, "--warmup", help="Warm-up steps at the start of each chain (marked; the correct choice is forced in eval)."
    ),
    async_run: int = typer.Option(3, "--async-run", help="Asynchronous: steps on one concept before a bridge."),
    bridge_steps: int = typer.Option(
        1, "--bridge-steps", help="Asynchronous: bridge steps (from the pool carrying both concepts) after each run."
    ),
    negatives: NegativeModeOpt = "disjoint",
    concept_kind: str | None = typer.Option(
        None,
        "--concept-kind",
        help="What the concepts are, for prompts (attribute, affordance, action, object...). Default from the source.",
    ),
    seed: SeedOpt = 0,
    list_concepts: bool = typer.Option(False, "--list-concepts", help="Print every label with its pool size and exit."),
    quiet: QuietOpt = False,
) -> None:
    """Build association tasks (single-step, deduction, synchronous and asynchronous chains) from labelled images.

    Two images are associated when their label sets intersect (paper §3). Writes OUT/images.jsonl (the image
    table) and OUT/TASK.jsonl per task type, each with a .meta.json sidecar; rerunning with the same settings
    skips finished task files (--out: the folder for them). Each task and chain gets its own generator from --seed;
    --max-steps is the number of scored steps each chain is pre-sampled to. Then:
    `commonlink release build OUT/*.jsonl --out RELEASE_DIR`.
    """
    kind = detect_source_type(source) if source_type == "auto" else source_type
    images, report = read_source(
        source,
        source_type=kind,
        min_pixels=min_pixels,
        labels_field=labels_field,
        image_column=image_column,
        labels_column=labels_column,
        split=split,
        hf_config=hf_config,
        manifest=str(manifest) if manifest else None,
        image_root=str(image_root) if image_root else None,
        ocl_labels=ocl_labels,
        pangea_labels=pangea_labels,
        label_names=str(label_names) if label_names else None,
        object_names=str(object_names) if object_names else None,
        name_column=name_column,
    )
    chosen_preset = resolve_preset(preset, kind, ocl_labels)
    _print_read_report(report, kind, min_pixels)
    if chosen_preset is not None:
        images = apply_aliases(images, chosen_preset)
    if list_concepts:
        _print_label_table(LabelIndex(images).pool_sizes())
        return
    if out is None:
        raise InputError(
            "--out is required to build.", "Pass --out DIR (or --list-concepts to only look at the labels)."
        )
    config = ChainConfig(
        seed=seed,
        concepts=parse_concepts(concepts),
        top_k=top_k,
        min_pool=min_pool,
        pairs=parse_pairs(pairs, sorted({label for img in images for label in img.labels})),
        auto_pairs=auto_pairs,
        min_pixels=min_pixels,
        memory_size=memory_size,
        single_step_per_concept=single_steps,
        deductions_per_concept=deductions,
        chains_per_concept=chains_per_concept,
        max_steps=max_steps,
        warmup=warmup,
        async_run=async_run,
        bridge_steps=bridge_steps,
        negatives=negatives,
        concept_kind=concept_kind
        or default_concept_kind(kind, ocl_labels, chosen_preset and chosen_preset.concept_kind),
        tasks=[t.strip() for t in tasks.split(",") if t.strip()],
    )
    images = use_preset(images, config, chosen_preset)
    if config.preset:
        console.print(
            f"Preset {config.preset}: concepts {', '.join(config.concepts)}; pairs "
            f"{', '.join('-'.join(p) for p in config.pairs or [])} (--preset none for the largest pools)."
        )
    _print_build_summary(build_chain_files(images, out, config, source=report, progress=progress_shown(quiet)))


def _print_read_report(report: SourceReport, kind: str, min_pixels: int) -> None:
    console.print(
        f"Read {report.read:,} samples from {kind} source; kept {report.kept:,} "
        f"(dropped {report.dropped_small:,} under {min_pixels:,} pixels, {report.dropped_unlabelled:,} unlabelled"
        + (f", {report.dropped_bad_box:,} empty boxes" if report.dropped_bad_box else "")
        + ")."
    )


def _print_label_table(sizes: dict[str, int]) -> None:
    table = Table(title=f"Labels ({len(sizes)})")
    table.add_column("label")
    table.add_column("pool size", justify="right")
    for name, size in sorted(sizes.items(), key=lambda kv: (-kv[1], kv[0])):
        table.add_row(escape(name), f"{size:,}")
    console.print(table)


def _print_build_summary(summary: BuildSummary) -> None:
    plan = summary.plan
    table = Table(title="Concepts")
    table.add_column("concept")
    table.add_column("pool", justify="right")
    table.add_column("negative pool", justify="right")
    for c in plan.concepts:
        table.add_row(escape(c), f"{plan.pool_sizes[c]:,}", f"{plan.negative_pool_sizes[c]:,}")
    console.print(table)
    for a, b in plan.pairs:
        console.print(f"pair {escape(a)} + {escape(b)}: bridge pool {plan.bridge_pool_sizes[f'{a}+{b}']:,}")
    for note in plan.notes:
        console.print(f"[yellow]Note:[/] {escape(note)}")
    for task, path in summary.files.items():
        done = " (already built, kept)" if task in summary.skipped else ""
        console.print(f"{task}: {summary.counts[task]:,} rows -> {escape(str(path))}{done}")
    console.print(f"{summary.steps:,} chain steps in all.")
    _print_next_step(summary.out_dir)


def _print_next_step(chain_files: Path) -> None:
    console.print(
        f"Next: commonlink release build {escape(str(chain_files))}/*.jsonl --out RELEASE_DIR",
        highlight=False,
        soft_wrap=True,
    )


@reports_errors
def verify(
    tasks: list[Path] = typer.Argument(..., help="Chain files of one build (TASK.jsonl), or their folder."),
    out: OutOpt = ...,
    model: ModelsOpt = None,
    backend: BackendsOpt = ["transformers"],  # noqa: B006 (Typer reads it, never mutates it)
    decisions: list[Path] = typer.Option(
        None,
        "--decisions",
        help="Human decisions (decisions.csv of `chains review`, or the JSON its pages save); repeatable; they "
        "override the models.",
    ),
    protocol: ProtocolOpt = "paper",
    on_fail: str | None = typer.Option(
        None,
        "--on-fail",
        show_default=False,
        help=f"--protocol strict: {' or '.join(ON_FAIL)} (default resample): resample redraws a rejected positive "
        "(or negative) from verified images, keeping each chain's period (an asynchronous chain is cut where nothing "
        "fits); drop removes the step (asynchronous runs get shorter).",
    ),
    undecided: str | None = typer.Option(
        None,
        "--undecided",
        show_default=False,
        help=f"{' or '.join(UNDECIDED)}: a claim no verifier could decide keeps its label, or counts as rejected "
        "(strict default keep; paper: always reject). Reported apart from rejections either way.",
    ),
    negatives: CheckNegativesOpt = None,
    batch_size: BatchSizeOpt = None,
    max_new_tokens: MaxNewTokensOpt = 16,
    seed: SeedOpt = 0,
    max_pixels: MaxPixelsOpt = DEFAULT_MAX_PIXELS,
    backend_arg: BackendArgOpt = None,
    trust_remote_code: TrustRemoteCodeOpt = False,
    concurrency: ConcurrencyOpt = None,
    catalog_root: CatalogRootOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Verify association task files (paper §4.2, App. A.1): --protocol paper (default) filters the pools as the
    authors' harness did and rebuilds the chains; --protocol strict corrects the labels and repairs the tasks.

    Each --model is a verifier (the paper's MLLM verification); repeat it for a fallback (paper: Gemini-1.5-Flash,
    then GPT4-V), with one --backend for every --model or one per --model in the same order. Each distinct question
    is asked once per model (answers cached in --out, the new folder for the verified chain files, verification.json
    and verification.md; rerun to resume); a later --model is asked only where the earlier ones were undecided.
    Paper: each image of the concept and bridge pools is asked the harness's question verbatim ('Analyze the
    provided image and determine if it contains the TYPE: CONCEPT ...', images 336x336, only 'Yes' kept); an image
    not confirmed leaves the build and the tasks are rebuilt from the filtered pools with the build's settings.
    Strict: each (image, concept) claim of the built tasks is asked 'Does this image show the
    CONCEPT?'; rejected labels are corrected in the image table; chain steps relying on them are repaired
    (--on-fail); tasks with a rejected image are dropped.
    Then: `commonlink release build OUT/*.jsonl --out RELEASE`.
    """
    generation = GenerationSettings(max_new_tokens=max_new_tokens, seed=seed, max_pixels=max_pixels)
    models = list(model or [])
    backends = backend[0] if len(backend) == 1 else list(backend)
    options = (
        [
            backend_options(b, backend_arg, trust_remote_code=trust_remote_code, concurrency=concurrency)
            for b in ([backends] * len(models) if isinstance(backends, str) else backends)
        ]
        if models
        else None
    )
    summary = verify_tasks(
        [str(t) for t in tasks],
        out,
        models=models,
        backend=backends,
        backend_options=options,
        decisions=[str(d) for d in decisions or []],
        generation=generation,
        batch_size=batch_size,
        on_fail=on_fail,
        undecided=undecided,
        negatives=negatives,
        progress=progress_shown(quiet),
        catalog_root=catalog_root,
        protocol=protocol,
    )
    console.print((summary.out_dir / "verification.md").read_text(encoding="utf-8"), highlight=False, markup=False)
    if summary.undecided:
        console.print(
            f"[yellow]Note:[/] {summary.undecided:,} claims no verifier could decide were "
            f"{'kept as labelled' if protocol == 'strict' and undecided in (None, 'keep') else 'rejected'} "
            "(--undecided); "
            "add a --model to ask them again."
        )
    console.print(
        f"Wrote {escape(str(summary.out_dir))}: verified chain files, {summary.report.name} (every claim and drop)."
    )
    _print_next_step(summary.out_dir)


@reports_errors
def review(
    tasks: list[Path] = typer.Argument(..., help="Chain files of one build (TASK.jsonl), or their folder."),
    out: OutOpt = ...,
    limit: LimitOpt = None,
    thumbnail: ThumbSizeOpt = 200,
    old_thumbnail: int | None = typer.Option(
        None, "--thumbnail", min=32, hidden=True, help="Old name of --thumb-size."
    ),
    catalog_root: CatalogRootOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Export review pages for people (paper §4.2 human review); read the decisions back with
    `chains verify --decisions`.

    --out: the folder for index.html, one page per chain/task, thumbnails and decisions.csv. --limit: the first N
    rows of each task file.
    """
    summary = export_review(
        [str(t) for t in tasks],
        out,
        limit=limit,
        thumbnail=old_thumbnail or thumbnail,
        progress=progress_shown(quiet),
        catalog_root=catalog_root,
    )
    console.print(
        f"Wrote {summary.pages:,} pages ({summary.claims:,} claims, {summary.images:,} thumbnails) to "
        f"{escape(str(summary.out_dir))}; open index.html."
    )
    console.print(
        f"Then: commonlink chains verify TASKS --decisions {escape(str(summary.out_dir))}/decisions.csv --out VERIFIED",
        highlight=False,
        soft_wrap=True,
    )
