"""One vocabulary of options across commands (issue 28): the command tree is walked, not listed by hand."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest
import rich
import typer
from rich.console import Console
from typer.testing import CliRunner

from commonlink.cli import app
from commonlink.commands import export as export_commands
from commonlink.commands._options import option_group
from commonlink.eval.evaluator import default_out_dir

runner = CliRunner()
REPO_ROOT = Path(__file__).resolve().parents[1]

#: Commands that write their result to a file or folder the user names: each takes ``--out``/``-o``.
WRITERS = {
    "ingest",
    "synth",
    "pairs",
    "demo",
    "release build",
    "catalog merge",
    "chains build",
    "chains verify",
    "chains review",
    "eval commono",
    "eval perception",
    "eval score",
    "eval report",
    "eval association",
    "export lmms-eval",
    "export vlmevalkit",
}
#: One concept, one spelling: the visible option, and spellings other commands used for the same thing (which may
#: survive only as hidden aliases).
CANONICAL = {
    "--quiet": ("--progress", "--no-progress", "--silent"),
    "--thumb-size": ("--thumbnail", "--thumbnail-size"),
    "--assets": ("--asset-file",),
    "--out": ("--output", "--output-dir", "--out-dir"),
    "--catalog-root": ("--catalogs-root", "--catalog-dir"),
}


def _commands():
    root = typer.main.get_command(app)

    def walk(command, path):
        if hasattr(command, "commands"):
            for name, sub in command.commands.items():
                yield from walk(sub, [*path, name])
        else:
            yield " ".join(path), command

    return dict(walk(root, []))


def _options(command, *, hidden: bool = False) -> list:
    return [p for p in command.params if p.param_type_name == "option" and (hidden or not p.hidden)]


COMMANDS = _commands()


def test_the_walk_finds_every_command():
    assert {"pairs", "release build", "eval commono", "export lmms-eval", "unreal check", "chains review"} <= set(
        COMMANDS
    )
    assert len(COMMANDS) >= 20


def test_every_writer_takes_out_with_o_and_every_out_has_o():
    for name in WRITERS:
        outs = [p for p in _options(COMMANDS[name]) if "--out" in p.opts]
        assert outs, f"{name} has no --out"
    for name, command in COMMANDS.items():
        for param in _options(command):
            if "--out" in param.opts:
                assert "-o" in param.opts, f"{name}: --out without -o"


def test_shared_options_are_spelled_the_same_everywhere():
    visible = {name: {o for p in _options(c) for o in [*p.opts, *p.secondary_opts]} for name, c in COMMANDS.items()}
    for canonical, others in CANONICAL.items():
        for name, opts in visible.items():
            clash = opts & set(others)
            assert not clash, f"{name} spells {canonical} as {sorted(clash)}"
    # a long name means one thing: the same short alias wherever it appears
    shorts = defaultdict(set)
    for command in COMMANDS.values():
        for param in _options(command):
            longs = [o for o in param.opts if o.startswith("--")]
            short = tuple(sorted(o for o in param.opts if not o.startswith("--")))
            for long in longs:
                shorts[long].add(short)
    inconsistent = {long: s for long, s in shorts.items() if len(s) > 1}
    assert not inconsistent, f"options with different short forms in different commands: {inconsistent}"


def test_old_spellings_still_parse_as_hidden_aliases():
    hidden = {
        name: {o for p in _options(c, hidden=True) if p.hidden for o in [*p.opts, *p.secondary_opts]}
        for name, c in COMMANDS.items()
    }
    assert {"--progress", "--no-progress"} <= hidden["release build"] and {"--progress", "--no-progress"} <= hidden[
        "synth"
    ]
    assert "--asset-file" in hidden["unreal check"]
    assert "--thumbnail" in hidden["chains review"]


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_flags_are_shown_as_flags_in_help(name):
    result = runner.invoke(app, [*name.split(), "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "<bool>" not in result.output


def test_root_help_shows_no_bool_either():
    result = runner.invoke(app, ["--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0 and "<bool>" not in result.output


def test_paths_are_not_wrapped_off_a_terminal():
    """Piped output (not a TTY): a long path stays on one line, so it can be copied back into a shell."""
    path = "/tmp/" + "/".join(["a-rather-long-folder-name"] * 8) + "/report.html"
    code = (
        "from commonlink.commands._common import console, err_console; "
        f"console.print('Report: {path}'); err_console.print('Saw: {path}')"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "COLUMNS": "80"}
    env.pop("FORCE_COLOR", None)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO_ROOT, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"Report: {path}\n"
    assert done.stderr == f"Saw: {path}\n"


def test_export_takes_out_and_still_accepts_the_positional_folder(tmp_path, monkeypatch):
    written = []
    monkeypatch.setattr(export_commands, "export_lmms_eval", lambda out, **kw: written.append(Path(out)) or [])
    new = runner.invoke(app, ["export", "lmms-eval", "-o", str(tmp_path / "a")])
    assert new.exit_code == 0, new.output
    old = runner.invoke(app, ["export", "lmms-eval", str(tmp_path / "b")])
    assert old.exit_code == 0, old.output
    assert "deprecated" in old.output and "--out" in old.output
    assert written == [tmp_path / "a", tmp_path / "b"]
    both = runner.invoke(app, ["export", "lmms-eval", str(tmp_path / "b"), "--out", str(tmp_path / "c")])
    assert both.exit_code == 1 and "Two output folders" in both.output
    none = runner.invoke(app, ["export", "lmms-eval"])
    assert none.exit_code == 1 and "--out" in none.output


def test_baseline_runs_are_not_named_after_a_backend_and_refuse_backend_options():
    assert default_out_dir("main", "random", "transformers", task="commono") == Path("eval-runs/commono-main-random")
    assert default_out_dir("main", "none", "vllm", task="perception") == Path("eval-runs/perception-main-none")
    assert default_out_dir("main", "org/model", "vllm", task="commono") == Path("eval-runs/commono-main-org-model-vllm")
    # the data is in the default name, so a second dataset's run gets its own folder
    hub_run = default_out_dir("main", "random", "x", task="commono", data="facebook/Common-O")
    assert hub_run == Path("eval-runs/commono-Common-O-main-random")
    assert default_out_dir("main", "m", "vllm", task="commono", data="/data/rel-2/") == Path(
        "eval-runs/commono-rel-2-main-m-vllm"
    )
    for command in (["eval", "commono"], ["eval", "perception"]):
        for extra, named in (
            (["--backend", "vllm"], "--backend"),
            (["--backend-arg", "dtype=bfloat16"], "--backend-arg"),
            (["--trust-remote-code"], "--trust-remote-code"),
        ):
            result = runner.invoke(app, [*command, "--model", "random", "--data", "nowhere", *extra])
            assert result.exit_code == 1, result.output
            message = " ".join(result.output.split())
            assert "weight-free baseline" in message and named in message, message
    result = runner.invoke(
        app,
        [
            "eval",
            "association",
            "--model",
            "none",
            "--data",
            "nowhere",
            "--config",
            "synchronous",
            "--backend",
            "openai",
        ],
    )
    assert result.exit_code == 1 and "weight-free baseline" in " ".join(result.output.split())


def test_unreal_check_reads_the_asset_file_under_either_name(tmp_path):
    missing = tmp_path / "no-such-assets.json"
    for option in ("--assets", "--asset-file"):
        result = runner.invoke(app, ["unreal", "check", option, str(missing)])
        assert result.exit_code == 1
        assert str(missing) in " ".join(result.output.split()), result.output
    result = runner.invoke(app, ["unreal", "check"])
    assert result.exit_code == 1 and "--assets" in result.output


@pytest.mark.parametrize("backend", ["transformers", "openai"])
def test_a_wrong_backend_option_lists_the_names_as_the_docs_spell_them(backend):
    from commonlink.errors import InputError
    from commonlink.eval.backends import LazyBackend

    with pytest.raises(InputError) as caught:
        LazyBackend(backend, "some/model", dtyp="bfloat16")
    listed = caught.value.fix.split(": ", 1)[1].rstrip(".").split(", ")
    docs = (REPO_ROOT / "docs" / "eval.md").read_text(encoding="utf-8")
    row = next(line for line in docs.splitlines() if line.startswith(f"| {backend} |"))
    assert listed and all(f"`{name}`" in row for name in listed), (listed, row)


#: Commands whose library call draws progress bars (on a terminal): each takes the one shared ``--quiet``.
SHOWS_PROGRESS = {
    "ingest",
    "synth",
    "pairs",
    "stats",
    "demo",
    "release build",
    "release push",
    "release pull",
    "catalog merge",
    "chains build",
    "chains verify",
    "chains review",
    "eval commono",
    "eval perception",
    "eval score",  # datasets' own bars while it reads the data (the issue-39 user who passed --quiet was refused)
    "eval report",
    "eval association",
    "eval concept",
    "export lmms-eval",
    "export vlmevalkit",
    "unreal check",
}
#: The old switch, kept only as a hidden alias where it was once visible.
OLD_PROGRESS_COMMANDS = {"synth", "release build"}


def test_every_command_that_shows_progress_takes_the_shared_quiet_flag():
    from commonlink.commands._options import QuietOpt

    (quiet_option,) = QuietOpt.__metadata__

    assert SHOWS_PROGRESS <= set(COMMANDS)
    for name, command in COMMANDS.items():
        quiet = [p for p in _options(command) if "--quiet" in p.opts]
        if name not in SHOWS_PROGRESS:
            assert not quiet, f"{name} takes --quiet but draws no progress: add it to SHOWS_PROGRESS if it now does"
            continue
        assert len(quiet) == 1, f"{name} has no --quiet"
        (param,) = quiet
        # the shared option: a plain flag, the same words everywhere (commands/_options.py QuietOpt)
        assert param.is_flag and param.opts == ["--quiet"] and not param.secondary_opts, f"{name}: {param.opts}"
        assert param.help == quiet_option.help, f"{name}: --quiet has its own help {param.help!r}"
        assert param.name == "quiet"
    for name, command in COMMANDS.items():
        others = {
            o
            for p in _options(command, hidden=True)
            for o in [*p.opts, *p.secondary_opts]
            if o != "--quiet" and any(word in o for word in ("progress", "quiet", "silent"))
        }
        if name in OLD_PROGRESS_COMMANDS:
            assert others == {"--progress", "--no-progress"}, f"{name}: {others}"
            assert all(p.hidden for p in _options(command, hidden=True) if "--progress" in p.opts), name
        else:
            assert not others, f"{name} spells the progress switch as {sorted(others)}"


def _terminal_console(monkeypatch, *modules) -> io.StringIO:
    """Progress bars drawn as on a terminal, into a buffer: stdout counts as a terminal for these command modules and
    rich's global console (which the library's bars use) is a forced terminal writing to the buffer."""
    buffer = io.StringIO()
    monkeypatch.setattr(rich, "_console", Console(file=buffer, force_terminal=True, width=120))
    for module in modules:
        monkeypatch.setattr(module, "stdout_is_terminal", lambda: True)
    return buffer


def test_quiet_pairs_and_chains_draw_no_progress_bar_on_a_terminal(tmp_path, monkeypatch):
    from commonlink.commands import _common
    from tests.fixtures.catalogs import family_scenes, write_scene_catalog

    catalog = write_scene_catalog(tmp_path / "real", "real", family_scenes(12, seed=1), views=3, seed=1)
    buffer = _terminal_console(monkeypatch, _common)
    commands = {
        "pairs": lambda out: ["pairs", str(catalog), "--out", str(out / "pairs.jsonl"), "--count", "6", "--seed", "1"],
        "chains": lambda out: [
            "chains",
            str(catalog),
            "--out",
            str(out),
            "--min-pixels",
            "0",
            "--top-k",
            "2",
            "--min-pool",
            "3",
            "--tasks",
            "single_step",
            "--single-steps",
            "2",
            "--memory-size",
            "2",
            "--seed",
            "1",
        ],
    }
    for name, args in commands.items():
        for quiet in (False, True):
            buffer.seek(0)
            buffer.truncate()
            out = tmp_path / f"{name}-{quiet}"
            result = runner.invoke(app, [*args(out), *(["--quiet"] if quiet else [])])
            assert result.exit_code == 0, result.output
            drawn = buffer.getvalue()
            if quiet:
                assert drawn == "", f"{name} --quiet drew: {drawn[:300]!r}"
            else:  # the control: without --quiet the same run does draw its bar (count, ETA) on the terminal
                assert "ETA" in drawn and "\x1b[" in drawn, f"{name} drew no bar: {drawn[:300]!r}"


# ------------------------------------------------------------------------------------ each option declared once
def _declarations():
    """Every option of every registered command, as ``(command, flag, declaration)``: the ``typer.Option`` object the
    parameter was built from (in ``Annotated[...]`` or as the default), read from the command functions themselves."""
    import inspect

    from typer.models import OptionInfo

    def callbacks(typer_app, path):
        for info in typer_app.registered_commands:
            yield " ".join([*path, info.name or info.callback.__name__]), info.callback
        for group in typer_app.registered_groups:
            yield from callbacks(group.typer_instance, [*path, group.name])

    for name, callback in callbacks(app, []):
        for param in inspect.signature(callback, eval_str=True).parameters.values():
            declared = [m for m in getattr(param.annotation, "__metadata__", ()) if isinstance(m, OptionInfo)]
            if isinstance(param.default, OptionInfo):
                declared.append(param.default)
            for info in declared:
                # in Annotated[...] the first name sits in ``default`` (Typer moves it when it builds the command)
                names = [info.default] if isinstance(info.default, str) and info.default.startswith("-") else []
                names += list(info.param_decls or ()) or ([] if names else [f"--{param.name.replace('_', '-')}"])
                for flag in {n.split("/")[0] for n in names if n.startswith("--")}:
                    yield name, flag, info


#: Flags that name different things on different commands: how many declarations (one per meaning) each may have.
MEANINGS = {"--backend": 2, "--split": 2, "--negatives": 2, "--strict": 2, "--format": 2, "--task": 2}


def test_the_declaration_walk_sees_every_command_and_option():
    seen = list(_declarations())
    assert {name for name, _, _ in seen} == set(COMMANDS)
    for name, command in COMMANDS.items():
        flags = {flag for n, flag, _ in seen if n == name}
        assert flags == {o.split("/")[0] for p in _options(command, hidden=True) for o in p.opts if o.startswith("--")}


def test_no_option_is_declared_in_more_than_one_place():
    """A flag used by several commands comes from one ``typer.Option`` (an alias in commands/_options.py), so its
    name, short form and help cannot drift apart; a flag with two meanings has one declaration per meaning."""
    declarations = defaultdict(dict)
    commands = defaultdict(set)
    for name, flag, info in _declarations():
        declarations[flag][id(info)] = info
        commands[flag].add(name)
    repeated = {
        flag: sorted(commands[flag]) for flag, found in declarations.items() if len(found) > MEANINGS.get(flag, 1)
    }
    assert not repeated, f"options declared in more than one place (use an alias of commands/_options.py): {repeated}"


def test_shared_options_are_the_aliases_of_the_options_module():
    from commonlink.commands import _options

    aliases = {id(m): alias for alias, value in vars(_options).items() for m in getattr(value, "__metadata__", ())}
    commands = defaultdict(set)
    for name, flag, _ in _declarations():
        commands[flag].add(name)
    for name, flag, info in _declarations():
        if len(commands[flag]) > 1:
            assert id(info) in aliases, f"{name}: {flag} is shared by {sorted(commands[flag])} but declared in place"
    for flag, names in _options.MEANINGS.items():
        assert MEANINGS[flag] == len(names) and all(hasattr(_options, n) for n in names), flag


def test_option_groups_show_their_fields_as_options_with_each_commands_defaults():
    import inspect

    from commonlink.commands import association_eval, concept_eval
    from commonlink.commands import eval as eval_commands
    from commonlink.commands._options import expand_option_groups

    defaults = {
        name: inspect.signature(command).parameters["max_new_tokens"].default
        for name, command in (
            ("commono", eval_commands.commono),
            ("association", association_eval.association),
            ("concept", concept_eval.concept),
        )
    }
    assert defaults == {"commono": 1024, "association": 64, "concept": 1024}
    for name in ("eval association", "eval concept", "eval commono"):
        flags = {o for p in _options(COMMANDS[name]) for o in p.opts}
        assert {"--backend", "--batch-size", "--temperature", "--gen-arg", "--bootstrap", "--quiet"} <= flags, name

    received = []

    @expand_option_groups
    def command(name: str = "x", pair: _Pair = _Pair(second="c")):  # noqa: B008 (a frozen group)
        received.append((name, pair))

    assert list(inspect.signature(command).parameters) == ["name", "first", "second"]
    command(name="y", first=3, second="d")
    assert received == [("y", _Pair(first=3, second="d"))]
    assert inspect.signature(command).parameters["second"].default == "c"


@option_group
class _Pair:  # groups live at module level: the command's annotations are read there
    first: int = 1
    second: str = "b"
