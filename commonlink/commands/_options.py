"""Every option that more than one command takes, declared once (as ``huggingface_hub/cli/_cli_utils.py`` does).

A command names the alias as the parameter's type and gives its own default with ``=``::

    def pairs(out: OutOpt = ..., seed: SeedOpt = 0, quiet: QuietOpt = False): ...

so a flag, its short form and its help are written in one place and read the same in every ``--help``. What an
option means on one command in particular (what ``--out`` holds, what ``--limit`` counts) is said in that command's
description. A flag that names two different things on different commands (``--backend``: the model's backend for
the eval commands, the renderer for ``synth``) has one declaration per meaning, each here, each named in
:data:`MEANINGS`; ``tests/test_cli_options.py`` walks the command tree and fails on a flag declared anywhere else,
or twice for one meaning.

Options that travel together (a model run's backend options, the generation settings) form an option group
(:func:`option_group`): the command takes the group as one parameter, :func:`expand_option_groups` shows and parses
its fields as options, and the command builds the library's settings from the one object it receives.

Checks of the values (ranges, combinations) live in the library's settings types, not here: the Python API refuses
what the CLI refuses, with the same words.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, get_type_hints

import typer

from commonlink.formats.catalog_refs import CATALOG_ROOT_OPTION

# --- every command -------------------------------------------------------------------------------------------------

_OUT = typer.Option(
    "--out",
    "-o",
    help="Where the command writes (the file or folder its description names); reruns with the same --out resume "
    "or keep what is done.",
)
OutOpt = Annotated[Path, _OUT]
OptionalOutOpt = Annotated[Path | None, _OUT]
SeedOpt = Annotated[
    int,
    typer.Option(
        "--seed",
        help="Seed of every random draw the command makes (sampling, rendering, baselines, bootstrap resamples, "
        "the report's random-mistakes table): the same inputs and seed give the same output.",
    ),
]
# One spelling for "no progress bars" on every command: --quiet. The older --progress/--no-progress of `synth` and
# `release build` still parse (hidden): --no-progress means --quiet.
QuietOpt = Annotated[bool, typer.Option("--quiet", help="No progress bars.")]
OldProgressOpt = Annotated[
    bool | None,
    typer.Option("--progress/--no-progress", hidden=True, help="Old spelling: --no-progress = --quiet."),
]
OverwriteOpt = Annotated[
    bool,
    typer.Option(
        "--overwrite",
        help="Replace what --out holds when it was made from other inputs or settings (only the command's own files "
        "are removed); without it that is refused.",
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the result as JSON instead of tables.")]
CatalogRootOpt = Annotated[
    Path | None,
    typer.Option(
        CATALOG_ROOT_OPTION,
        help="Folder that now holds the catalogs the inputs name (each catalog is looked up as DIR/NAME, NAME being "
        "its folder name); default: where the files name them, relative to each file.",
    ),
]
LimitOpt = Annotated[
    int | None,
    typer.Option(
        "--limit",
        help="Only the first N rows (tasks or chains for association data; of --rows if given; of each file for "
        "`chains review`).",
    ),
]
ThumbSizeOpt = Annotated[
    int, typer.Option("--thumb-size", help="Longest side of a thumbnail, in pixels (at least 32).")
]

# --- images, catalogs, rendering -----------------------------------------------------------------------------------

MinPixelsOpt = Annotated[
    int,
    typer.Option(
        "--min-pixels",
        help="Smallest image accepted, in pixels (width x height; the paper: 50,000): smaller photos, images or OCL "
        "crops are left out and counted.",
    ),
]
ManifestOpt = Annotated[
    Path | None,
    typer.Option(
        "--manifest",
        "-m",
        help="Label manifest of the photos: CSV `file,objects[,scene,background,view]` (objects separated by ';') or "
        "JSONL with the same keys (docs/catalog.md); `chains` defaults to manifest.csv/.jsonl in the folder.",
    ),
]
ObjectsOpt = Annotated[
    str | None,
    typer.Option(
        "--objects",
        help="Objects per image, LOW-HIGH: 3-7 for main, 8-16 for challenge (`pairs`: the default follows --split).",
    ),
]
ResolutionOpt = Annotated[str, typer.Option("--resolution", help="Render size WIDTHxHEIGHT.")]
WorkersOpt = Annotated[
    int,
    typer.Option(
        "--workers",
        min=1,
        help="Worker processes: `synth`/`demo` local render processes; `release build` the processes that read, hash "
        "and verify the images (default: every usable CPU; the release is the same whatever the number).",
    ),
]
AssetsOpt = Annotated[
    Path | None,
    typer.Option(
        "--assets",
        help="Asset file (JSON/YAML; see docs/synth.md; tools/unreal/commonlink_import.py writes one for an Unreal "
        "project). `synth` default: the built-in assets.",
    ),
]
RendererOpt = Annotated[
    str, typer.Option("--backend", help="offline (embedded CPU renderer) or unrealcv (a running Unreal Engine).")
]
HostOpt = Annotated[str, typer.Option("--host", help="UnrealCV server host.")]
PortOpt = Annotated[int, typer.Option("--port", help="UnrealCV server port (unrealcv.ini; 9000 by default).")]
ConnectTimeoutOpt = Annotated[
    float, typer.Option("--connect-timeout", min=0.1, help="Seconds to wait for UnrealCV to start a session.")
]
TimeoutOpt = Annotated[float, typer.Option("--timeout", min=0.1, help="Seconds to wait for each UnrealCV reply.")]
ShardOpt = Annotated[
    str | None,
    typer.Option(
        "--shard",
        help="K/N: this process does part K of N (0 <= K < N, e.g. $SLURM_ARRAY_TASK_ID/8), into the same --out as "
        "the other parts: scenes of `synth`, rows K, K+N, ... of an eval (rerun it without --shard to merge).",
    ),
]

# --- releases and the Hub ------------------------------------------------------------------------------------------

_VERSION = typer.Option(
    "--version",
    help="Release version X.Y.Z (semantic versioning): recorded in the card and manifest by `release build`, the "
    "Hub tag of `release push` (the version the folder was built with), the tag `release pull` downloads.",
)
VersionOpt = Annotated[str, _VERSION]
OptionalVersionOpt = Annotated[str | None, _VERSION]
EndpointOpt = Annotated[
    str | None, typer.Option("--endpoint", help="Hub URL (default: HF_ENDPOINT or https://huggingface.co).")
]
CardInfoOpt = Annotated[
    Path | None,
    typer.Option(
        "--card-info",
        help="YAML file answering the datasheet questions the build cannot answer (start from `commonlink release "
        "card-info --template`).",
    ),
]
StrictCardOpt = Annotated[
    bool,
    typer.Option(
        "--strict",
        help="Refuse to push while the card still marks datasheet questions as unanswered (default: warn).",
    ),
]
StrictIngestOpt = Annotated[
    bool, typer.Option("--strict", help="Exit with status 2 when any photo was refused (for scripts and CI).")
]

# --- data to score -------------------------------------------------------------------------------------------------

DataOpt = Annotated[
    str | None,
    typer.Option(
        "--data",
        help="The benchmark data: a Hub dataset id, a release folder or parquet file, or (association) the "
        "chain-files folder of `commonlink chains`.",
    ),
]
_SPLIT = typer.Option(
    "--split",
    help="main (Common-O Bench) or challenge (Common-O Complex), or any split of a local release; `export` takes "
    "several (repeatable).",
)
SplitOpt = Annotated[str, _SPLIT]
OptionalSplitOpt = Annotated[str | None, _SPLIT]  #: ``eval score``: None = the split the scored file names
SplitsOpt = Annotated[list[str], _SPLIT]
SourceSplitOpt = Annotated[
    str | None, typer.Option("--split", help="HF dataset split (default: the only one, else train).")
]
RevisionOpt = Annotated[
    str | None, typer.Option("--revision", help="Hub revision (tag, branch or commit) of the dataset.")
]
AssociationOpt = Annotated[
    str | None,
    typer.Option("--association", help="Association release (or chain-files folder): adds the single-step task."),
]
RowsOpt = Annotated[str | None, typer.Option("--rows", help="Row range LOW-HIGH (inclusive), e.g. 0-99.")]

# --- models and generation -----------------------------------------------------------------------------------------

_MODEL = typer.Option(
    "--model",
    help="Hub id or local folder of the model (server model name for --backend openai); 'random' or 'none' for a "
    "weight-free baseline. Repeatable where the command's description says so.",
)
ModelOpt = Annotated[str, _MODEL]
ModelsOpt = Annotated[list[str], _MODEL]
_BACKEND = typer.Option(
    "--backend",
    show_default=False,
    help="transformers (local; image-text-to-text, vision2seq or causal-LM models) | vllm (GPU, optional extra) | "
    "openai (any OpenAI-compatible server) | any name added with commonlink.eval.backends.register_backend. "
    "Default: transformers. One for every --model, or (`chains verify`) one per --model in the same order.",
)
BackendOpt = Annotated[str | None, _BACKEND]
BackendsOpt = Annotated[list[str], _BACKEND]
BatchSizeOpt = Annotated[
    int | None,
    typer.Option(
        "--batch-size", help="Requests per model call (default: the backend's safe setting; 1 for transformers)."
    ),
]
MaxNewTokensOpt = Annotated[
    int,
    typer.Option(
        "--max-new-tokens",
        help="Generation length cap, in tokens (each command's default fits its answers: reasoning models and CoT "
        "need room, a yes/no little).",
    ),
]
TemperatureOpt = Annotated[float, typer.Option("--temperature", help="0 = greedy decoding (the paper's setting).")]
TopPOpt = Annotated[float, typer.Option("--top-p", help="Nucleus sampling (only with --temperature > 0).")]
MaxPixelsOpt = Annotated[
    int,
    typer.Option("--max-pixels", help="Downscale each image (aspect kept) to at most this many pixels; 0 = no cap."),
]
SystemPromptOpt = Annotated[
    str | None,
    typer.Option("--system-prompt", help="A system message sent before every request (part of the cache key)."),
]
GenArgOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--gen-arg",
        help="Decoding option KEY=VALUE for the backend's generate call (repeatable), e.g. top_k=20, "
        "repetition_penalty=1.05.",
    ),
]
BackendArgOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--backend-arg",
        help="Backend option KEY=VALUE (repeatable; JSON values), e.g. dtype=bfloat16, processor.max_pixels=1003520, "
        "adapter=minicpm-chat, tensor_parallel_size=2, base_url=http://localhost:8000/v1, api_key_env=MY_KEY. "
        "See docs/eval.md.",
    ),
]
TrustRemoteCodeOpt = Annotated[
    bool,
    typer.Option("--trust-remote-code", help="Allow model repos to run their own code (only for models you trust)."),
]
ConcurrencyOpt = Annotated[
    int | None, typer.Option("--concurrency", help="openai: requests in flight at once (default 8).")
]
ImageProtocolOpt = Annotated[
    str,
    typer.Option(
        "--image-protocol",
        help="Image sizing: shorter-side-384 (the paper's, default), shorter-side-N, native, or max-pixels-N.",
    ),
]

# --- scoring and reports -------------------------------------------------------------------------------------------

BootstrapOpt = Annotated[int, typer.Option("--bootstrap", help="Bootstrap resamples for standard errors.")]
NoReportOpt = Annotated[
    bool,
    typer.Option(
        "--no-report",
        help="Do not write report.html (the HTML page of predictions with images) beside the results.",
    ),
]
_RUN_NAME = typer.Option(
    "--run-name",
    help="What tables and reports call the run (default: the model and the settings that set it apart, or the name "
    "the scored file records); kept in results.json. One per --model, in order, where several models run apart.",
)
RunNameOpt = Annotated[str | None, _RUN_NAME]
RunNamesOpt = Annotated[list[str], _RUN_NAME]
MaxUnparseableShareOpt = Annotated[
    float,
    typer.Option(
        "--max-unparseable-share",
        help="Fail (exit 1, files written) when more than this share of the answers cannot be parsed, or none can.",
    ),
]
AllowUnparseableOpt = Annotated[
    bool,
    typer.Option("--allow-unparseable", help="Accept a run past --max-unparseable-share (it is still warned about)."),
]
DryRunOpt = Annotated[
    bool,
    typer.Option(
        "--dry-run",
        help="Only say what the command would do, and stop: an eval prints the requests, images and estimated "
        "tokens it would send (nothing is sent or written); `release push` the files, sizes, commit and tag (no "
        "network call).",
    ),
]

# --- association ---------------------------------------------------------------------------------------------------

MaxStepsOpt = Annotated[
    int,
    typer.Option(
        "--max-steps",
        help="Chain length cap in scored steps (the paper's 500): `chains` samples each chain to it, an eval stops a "
        "chain there.",
    ),
]
StrategyOpt = Annotated[
    str,
    typer.Option(
        "--strategy",
        help="Prompt strategy (Labyrinth §4.3): normal, comknow (concept knowledge in front), one-shot (a worked "
        "example in words), cot (that example with reasoning; answer on a last 'Answer:' line). `eval concept` takes "
        "several, comma-separated.",
    ),
]
ProtocolOpt = Annotated[
    str,
    typer.Option(
        "--protocol",
        help="paper (the authors' protocol, as their harness ran it: the default) or strict (our stricter choices); "
        "what each changes is in the command's description and docs/eval.md's deviations table.",
    ),
]
DeductionRuleOpt = Annotated[
    str | None,
    typer.Option(
        "--deduction-rule",
        show_default=False,
        help="When a deduction counts: harness (the authors' harness: a gold concept occurs in the answer; `eval "
        "association`'s default under --protocol paper), all-shared (ours: names something, and only shared "
        "concepts; the strict protocol's and `eval concept`'s default), any-shared (names at least one shared "
        "concept), exact (names exactly the shared ones).",
    ),
]
NegativeModeOpt = Annotated[
    str,
    typer.Option(
        "--negatives",
        help="disjoint or chain: disjoint (paper eqs. 1, 4, 5) = a negative shares no label at all with its query; "
        "chain = it only lacks the task's concepts (the earlier default).",
    ),
]
CheckNegativesOpt = Annotated[
    bool | None,
    typer.Option(
        "--negatives/--no-negatives",
        show_default=False,
        help="--protocol strict: also ask whether each negative shows the concept it must lack (default: yes).",
    ),
]

# --- option groups -------------------------------------------------------------------------------------------------


def option_group(cls: type) -> type:
    """A frozen dataclass whose fields are options (aliases above): a command that takes it as one parameter shows
    and parses each field as its own option, and receives one instance (see :func:`expand_option_groups`). The
    default instance in the command's signature gives that command's defaults. Define groups at module level (a
    command's annotations are read in its module)."""
    cls = dataclasses.dataclass(frozen=True)(cls)
    cls.__option_group__ = True
    return cls


def expand_option_groups(func: Callable) -> Callable:
    """Let Typer see the fields of each option-group parameter of ``func`` as options, and call ``func`` with the
    group built from them: options shared by several commands travel as one settings object, not one by one."""
    signature = inspect.signature(func, eval_str=True)
    groups: dict[str, tuple[type, list[str]]] = {}
    params = []
    for param in signature.parameters.values():
        group = param.annotation
        if not getattr(group, "__option_group__", False):
            params.append(param.replace(kind=inspect.Parameter.KEYWORD_ONLY))
            continue
        defaults = param.default if param.default is not param.empty else group()
        hints = get_type_hints(group, include_extras=True)
        names = [f.name for f in dataclasses.fields(group)]
        groups[param.name] = (group, names)
        params += [
            inspect.Parameter(
                name, inspect.Parameter.KEYWORD_ONLY, default=getattr(defaults, name), annotation=hints[name]
            )
            for name in names
        ]

    @functools.wraps(func)
    def command(**options):
        for name, (group, names) in groups.items():
            options[name] = group(**{field: options.pop(field) for field in names})
        return func(**options)

    command.__signature__ = signature.replace(parameters=params)
    return command


#: Flags that name different things on different commands: one declaration per meaning (the aliases named here).
QuestionOpt = Annotated[
    str,
    typer.Option(
        "--question",
        help="Common-O: dataset (a row's own question verbatim; the prompt is built only for rows without one) or "
        "built (always the paper's prompt).",
    ),
]
MemoryOpt = Annotated[
    str,
    typer.Option(
        "--memory",
        help="Memory base: nom (none), structm (concept -> objects dict), nlm (sentences), chainm (obj->concept->obj "
        "subchains concatenated, last 5 kept).",
    ),
]
NoDeductionOpt = Annotated[
    bool,
    typer.Option(
        "--no-deduction",
        help="Skip the deduction step (the memory then learns the gold concept; human studies of chains always "
        "skip it).",
    ),
]
RunTaskOpt = Annotated[
    str | None,
    typer.Option("--task", help="The task to run (`commonlink eval tasks` lists them); its options follow."),
]
StudyTaskOpt = Annotated[
    str,
    typer.Option("--task", help="auto (association for an association config, else commono) | commono | perception."),
]

CompareFormatOpt = Annotated[str, typer.Option("--format", help="md (markdown tables) | csv | json.")]
TasksFormatOpt = Annotated[str, typer.Option("--format", help="text (for people) or json (for scripts).")]

MEANINGS = {
    "--backend": ("BackendOpt", "RendererOpt"),  # the model's backend (eval, chains verify) | the renderer (synth)
    "--split": ("SplitOpt", "SourceSplitOpt"),  # a benchmark split | the split of an HF dataset source (chains)
    "--negatives": ("NegativeModeOpt", "CheckNegativesOpt"),  # how negatives are drawn | whether verify checks them
    "--strict": ("StrictCardOpt", "StrictIngestOpt"),  # push refuses an unfinished card | ingest exits 2 on refusals
    "--format": ("CompareFormatOpt", "TasksFormatOpt"),  # compare's table format | eval tasks' listing format
    "--task": ("RunTaskOpt", "StudyTaskOpt"),  # the registered task `eval run` runs | what a human study asks
}
