"""``commonlink eval run --task NAME [task options]`` and ``commonlink eval tasks``: every task of
:mod:`commonlink.registry` through one command, as lm-eval and lmms-eval users expect.

``eval run --task NAME`` runs the task's own command (``eval commono``, ``eval perception``, ``eval association``,
``eval concept``) with the options that follow, so both spellings take the same options and write the same files;
``eval run --task NAME --help`` shows that task's options and ``eval tasks`` lists every task with its options.
"""

from __future__ import annotations

import json

import typer

from commonlink import registry
from commonlink.commands._common import print_error
from commonlink.commands._options import RunTaskOpt, TasksFormatOpt
from commonlink.errors import CommonlinkError, InputError

__all__ = ["RUN_SETTINGS", "run", "task_options", "tasks"]

#: ``eval run`` passes every option it does not know itself (and ``--help``) on to the task's command.
RUN_SETTINGS = {"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []}


def _task_command(ctx: typer.Context, info: registry.TaskInfo):
    """The eval command of ``info`` (a sibling of ``eval run`` in the ``eval`` group)."""
    group = ctx.parent.command if ctx.parent is not None else None
    command = group.get_command(ctx.parent, info.command) if hasattr(group, "get_command") else None
    if command is None:
        raise InputError(
            f"Task {info.name!r} names the command `eval {info.command}`, which this CLI does not have.",
            "Run the task from Python with its evaluate function, or register a task whose command exists.",
        )
    return command


def run(
    ctx: typer.Context,
    task: RunTaskOpt = None,
) -> None:
    """Run one registered eval task with that task's options (the same as its own `eval` command).

    `commonlink eval run --task common_o --data facebook/Common-O --model none` equals
    `commonlink eval commono --data facebook/Common-O --model none`; `eval run --task NAME --help` shows the options.
    """
    if task is None:
        typer.echo(ctx.get_help())
        typer.echo("\nTasks: " + ", ".join(registry.task_names()) + " (`commonlink eval tasks` shows their options).")
        if ctx.args and ctx.args != ["--help"]:
            print_error("eval run needs --task NAME.", "e.g. commonlink eval run --task common_o --model none")
            raise typer.Exit(2)
        return
    try:
        info = registry.get_task(task)
        command = _task_command(ctx, info)
    except CommonlinkError as exc:
        print_error(exc.problem, exc.fix)
        raise typer.Exit(1) from None
    with command.make_context(f"run --task {info.name}", list(ctx.args), parent=ctx.parent) as sub:
        command.invoke(sub)


def task_options(command) -> list[dict]:
    """The visible parameters of a task's command: ``{"name", "flags", "argument", "required", "help"}`` each."""
    listed = []
    for param in command.params:
        if getattr(param, "hidden", False) or param.name in ("help",):
            continue
        listed.append(
            {
                "name": param.name,
                "flags": sorted(param.opts + param.secondary_opts, key=len, reverse=True),
                "argument": param.param_type_name == "argument",
                "required": bool(param.required),
                "help": " ".join((getattr(param, "help", None) or "").split()),
            }
        )
    return listed


def _describe(ctx: typer.Context) -> list[dict]:
    described = []
    for name in registry.task_names():
        info = registry.get_task(name)
        described.append(
            {
                "name": info.name,
                "kind": info.kind,
                "summary": info.summary,
                "command": f"eval {info.command}",
                "options": task_options(_task_command(ctx, info)),
            }
        )
    return described


def tasks(
    ctx: typer.Context,
    output_format: TasksFormatOpt = "text",
) -> None:
    """List every registered eval task with its options (each runs with `commonlink eval run --task NAME`)."""
    if output_format not in ("text", "json"):
        print_error(f"--format {output_format}: not one of text, json.", "Use --format text or --format json.")
        raise typer.Exit(1)
    try:
        described = _describe(ctx)
    except CommonlinkError as exc:
        print_error(exc.problem, exc.fix)
        raise typer.Exit(1) from None
    if output_format == "json":
        typer.echo(json.dumps({"tasks": described}, indent=1, ensure_ascii=False))
        return
    for number, entry in enumerate(described):
        lines = [""] if number else []
        lines += [
            f"{entry['name']}  (kind {entry['kind']}; also `commonlink {entry['command']}`)",
            f"  {entry['summary']}",
            f"  commonlink eval run --task {entry['name']} [OPTIONS]",
        ]
        for option in entry["options"]:
            flags = option["name"].upper() if option["argument"] else ", ".join(option["flags"])
            required = " (required)" if option["required"] else ""
            lines.append(f"    {flags}{required}" + (f"  {option['help']}" if option["help"] else ""))
        typer.echo("\n".join(lines))
