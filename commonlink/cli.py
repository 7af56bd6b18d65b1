"""The ``commonlink`` command: a thin Typer shell over the library.

Command functions live in ``commonlink.commands.<area>``; this file only builds the app tree and registers
them, so ``commonlink --help`` reads as a table of contents.
"""

from __future__ import annotations

import os
import sys

import typer
import typer.rich_utils
from typer.models import DefaultPlaceholder

from commonlink import __version__
from commonlink.progress import quiet_library_bars_by_default

app = typer.Typer(
    name="commonlink",
    help=(
        "Make, release and score multi-image reasoning benchmarks (Common-O and association chains).\n\n"
        "Typical flow: `ingest` photos or `synth` renders into an image catalog, sample `pairs` (or `chains`) "
        "from catalogs, `release build` parquet shards with a dataset card, `release push` them to the Hub, "
        "and `eval` a model on a published or built split. `demo` runs the whole flow on embedded defaults."
    ),
    no_args_is_help=True,
    rich_markup_mode="markdown",
    pretty_exceptions_show_locals=False,
)
release_app = typer.Typer(
    help="Build release folders (parquet shards + dataset card) and publish versions to the Hub.", no_args_is_help=True
)
catalog_app = typer.Typer(help="Inspect and combine image catalogs.", no_args_is_help=True)
eval_app = typer.Typer(help="Score models on Common-O and association splits; compare runs.", no_args_is_help=True)
export_app = typer.Typer(
    help="Task files for other evaluation harnesses (lmms-eval, VLMEvalKit).", no_args_is_help=True
)
app.add_typer(release_app, name="release")
app.add_typer(catalog_app, name="catalog")
app.add_typer(eval_app, name="eval")
app.add_typer(export_app, name="export")
unreal_app = typer.Typer(
    help="Check a running Unreal Engine project (UnrealCV plugin) for `synth --backend unrealcv`.", no_args_is_help=True
)
app.add_typer(unreal_app, name="unreal")
human_app = typer.Typer(
    help="Human baselines: a study page people answer in a browser (`study`), and their `agreement`; score a "
    "person's answers with `eval score`.",
    no_args_is_help=True,
)
app.add_typer(human_app, name="human")


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"commonlink {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: bool = typer.Option(
        False, "--version", help="Print the toolkit version and exit.", callback=_version_callback, is_eager=True
    ),
) -> None:
    """Make, release and score multi-image reasoning benchmarks."""


# --- command registration (one line per command; the functions live in commonlink/commands/) ---
# (areas add their commands below)
from commonlink.commands import association_eval as _association_eval_cmds  # noqa: E402
from commonlink.commands import catalog as _catalog_cmds  # noqa: E402
from commonlink.commands import chains as _chains_cmds  # noqa: E402
from commonlink.commands import concept_eval as _concept_eval_cmds  # noqa: E402
from commonlink.commands import demo as _demo_cmds  # noqa: E402
from commonlink.commands import eval as _eval_cmds  # noqa: E402
from commonlink.commands import eval_run as _eval_run_cmds  # noqa: E402
from commonlink.commands import export as _export_cmds  # noqa: E402
from commonlink.commands import hub as _hub_cmds  # noqa: E402
from commonlink.commands import human as _human_cmds  # noqa: E402
from commonlink.commands import ingest as _ingest_cmds  # noqa: E402
from commonlink.commands import pairs as _pairs_cmds  # noqa: E402
from commonlink.commands import release as _release_cmds  # noqa: E402
from commonlink.commands import stats as _stats_cmds  # noqa: E402
from commonlink.commands import synth as _synth_cmds  # noqa: E402
from commonlink.commands import unreal as _unreal_cmds  # noqa: E402

app.command("ingest")(_ingest_cmds.ingest)
app.command("synth")(_synth_cmds.synth)
app.command("pairs")(_pairs_cmds.pairs)
chains_app = typer.Typer(
    cls=_chains_cmds.ChainsGroup,
    no_args_is_help=True,
    help="Association tasks: build from a labelled image set (`chains SOURCE`), `verify`, `review`.",
)
app.add_typer(chains_app, name="chains")
chains_app.command("build")(_chains_cmds.chains)
chains_app.command("verify")(_chains_cmds.verify)
chains_app.command("review")(_chains_cmds.review)
release_app.command("build")(_release_cmds.build)
release_app.command("card-info")(_release_cmds.card_info)
release_app.command("card")(_release_cmds.card)
catalog_app.command("merge")(_catalog_cmds.merge)
catalog_app.command("info")(_catalog_cmds.info)
app.command("stats")(_stats_cmds.stats)
release_app.command("push")(_hub_cmds.push)
release_app.command("versions")(_hub_cmds.versions)
release_app.command("pull")(_hub_cmds.pull)
eval_app.command("commono")(_eval_cmds.commono)
eval_app.command("perception")(_eval_cmds.perception)
eval_app.command("score")(_eval_cmds.score)
eval_app.command("compare")(_eval_cmds.compare)
eval_app.command("report")(_eval_cmds.report)
eval_app.command("association")(_association_eval_cmds.association)
eval_app.command("concept")(_concept_eval_cmds.concept)
eval_app.command("run", context_settings=_eval_run_cmds.RUN_SETTINGS)(_eval_run_cmds.run)
eval_app.command("tasks")(_eval_run_cmds.tasks)
export_app.command("lmms-eval")(_export_cmds.lmms_eval)
export_app.command("vlmevalkit")(_export_cmds.vlmevalkit)
app.command("demo")(_demo_cmds.demo)
unreal_app.command("check")(_unreal_cmds.check)
human_app.command("study")(_human_cmds.study)
human_app.command("agreement")(_human_cmds.agreement)


class _FlagsAsFlags:
    """Mixed into every command and group: on/off flags show no ``<bool>`` type in ``--help`` (they take no value)."""

    def get_params(self, ctx):  # the help option and Typer's completion options included
        params = super().get_params(ctx)
        for param in params:
            if getattr(param, "is_flag", False) and param.metavar is None:
                param.metavar = ""
        return params


def _with_flag_help(cls: type | None, default: type) -> type:
    base = default if cls is None or isinstance(cls, DefaultPlaceholder) else cls
    return base if issubclass(base, _FlagsAsFlags) else type(base.__name__, (_FlagsAsFlags, base), {})


def _use_flag_help(typer_app: typer.Typer) -> None:
    """Every command and group of the tree (registered above) built with :class:`_FlagsAsFlags`."""
    typer_app.info.cls = _with_flag_help(typer_app.info.cls, typer.core.TyperGroup)
    for info in typer_app.registered_commands:
        info.cls = _with_flag_help(info.cls, typer.core.TyperCommand)
    for group in typer_app.registered_groups:
        _use_flag_help(group.typer_instance)


_use_flag_help(app)


#: Width of ``--help`` and tables off a terminal: wide enough that no option, default or path is cut with "…".
LOG_WIDTH = 200


def main() -> None:  # console-script entry point
    if "--quiet" in sys.argv[1:] or not sys.stdout.isatty():
        quiet_library_bars_by_default()
    if not sys.stdout.isatty() and not os.environ.get("TERMINAL_WIDTH"):
        typer.rich_utils.MAX_WIDTH = LOG_WIDTH  # read when help is drawn; on a terminal its width is used
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
