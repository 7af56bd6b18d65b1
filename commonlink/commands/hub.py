"""``commonlink release push`` and ``commonlink release versions``: versioned releases on the Hugging Face Hub."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from commonlink.commands._common import (
    console,
    err_console,
    progress_shown,
    reports_errors,
)
from commonlink.commands._options import DryRunOpt, EndpointOpt, OutOpt, QuietOpt, StrictCardOpt, VersionOpt
from commonlink.formats.release import manifest_units, read_release_manifest
from commonlink.redact import redact_text, redact_url
from commonlink.release.hub import PushPlan, list_versions, plan_push, push_release, resolve_endpoint
from commonlink.release.pull import pull_release


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return f"{n} B"  # pragma: no cover


def print_plan(plan: PushPlan, *, private: bool, endpoint: str | None) -> None:
    table = Table(
        title=escape(f"Dry run: {plan.release_dir} -> {plan.repo_id} version {plan.version}"), show_lines=False
    )
    table.add_column("file", overflow="fold")
    table.add_column("size", justify="right")
    table.add_column("sha256")
    for f in plan.files:
        table.add_row(
            escape(f.path), _size(f.size), f.sha256[:12] + ("  (+ Versions table)" if f.path == "README.md" else "")
        )
    console.print(table)
    console.print(
        f"Endpoint: {redact_url(resolve_endpoint(endpoint))}\n"
        f"1. create the dataset repo {plan.repo_id} ({'private' if private else 'public'}) if it does not exist\n"
        f"2. one commit on main: {escape(repr(plan.commit_message))} with the {len(plan.files)} files above "
        f"({_size(plan.total_bytes)}; only those whose hash differs from the Hub are sent, large files through LFS), "
        "deleting shards of these splits that the release no longer has\n"
        f"3. tag {plan.tag} on that commit (refused if the tag already holds other content)\n"
        f"Rows: {plan.rows_summary()}\n"
        "No network call was made.",
        highlight=False,
        soft_wrap=True,
    )


@reports_errors
def push(
    release_dir: Path = typer.Argument(..., help="Release folder written by `commonlink release build`."),
    repo: str = typer.Option(..., "--repo", help="Dataset repo on the Hub, ORG/NAME (created when missing)."),
    version: VersionOpt = ...,
    private: bool = typer.Option(
        False, "--private", help="Create the repo private (an existing repo keeps its visibility)."
    ),
    endpoint: EndpointOpt = None,
    message: str | None = typer.Option(
        None, "--message", "-m", help="What changed; goes in the commit title, the tag and the card's Versions table."
    ),
    dry_run: DryRunOpt = False,
    force: bool = typer.Option(
        False, "--force", help="Move an existing version tag to the new content (with a warning)."
    ),
    move_main: bool = typer.Option(
        False,
        "--move-main",
        help="Put this version on main even when main holds a higher one (by default an older version is only tagged).",
    ),
    strict: StrictCardOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Publish a release folder as a version of a Hub dataset repo.

    Uploads shards, card, figures and manifest in one commit (only what differs from the Hub, checked by hash),
    removes shards of the release's splits that the new version replaces, tags the commit with the version and adds
    the version to the card's Versions table; the card's usage examples name the repo. main always holds the highest
    version: an older version is only tagged (--move-main puts it on main on purpose). The release folder is locked
    for the whole push (a rebuild waits) and every file is checked against the manifest as it is committed. The
    token comes from HF_TOKEN or `hf auth login` and is checked before anything is uploaded. An interrupted push is
    finished by running the same command again.
    """
    if dry_run:
        plan = plan_push(release_dir, repo, version, message=message, progress=progress_shown(quiet))
        print_plan(plan, private=private, endpoint=endpoint)
        return
    result = push_release(
        release_dir,
        repo,
        version,
        private=private,
        endpoint=endpoint,
        message=message,
        force=force,
        progress=progress_shown(quiet),
        move_main=move_main,
        strict=strict,
    )
    for note in result.notes:
        err_console.print(f"[bold yellow]Warning:[/] {escape(note)}", highlight=False, soft_wrap=True)
    if result.already_published:
        console.print(
            f"{repo} version {version} is already published at commit {result.commit[:12]}; nothing to do.",
            highlight=False,
        )
        return
    if result.repo_created:
        console.print(f"Created dataset repo {redact_text(str(result.url))}", highlight=False)
    where = "main" if result.main_moved else "tag only; main keeps the highest version"
    console.print(
        f"Pushed {repo} version {version}: commit {result.commit[:12]} ({where}), tag {version}; "
        f"{len(result.uploaded)} file(s) sent, {len(result.unchanged)} already there, {len(result.deleted)} removed.\n"
        f"Load it with: datasets.load_dataset({repo!r}, {_config_argument(release_dir)}revision={version!r})",
        highlight=False,
        soft_wrap=True,
    )


def _config_argument(release_dir: Path) -> str:
    """An association release has several configs and no default: the load hint must name one."""

    manifest = read_release_manifest(release_dir)
    configs = [name for name in manifest_units(manifest) if name != "images"]
    return f"{configs[0]!r}, " if manifest.get("kind") == "association" and configs else ""


@reports_errors
def pull(
    repo: str = typer.Argument(..., help="Dataset repo on the Hub, ORG/NAME."),
    version: VersionOpt = ...,
    out: OutOpt = ...,
    endpoint: EndpointOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Download one published version into --out (a new or empty folder) and verify every file against the
    version's manifest (sha256 and size); nothing is kept when a file does not match. Into a folder an earlier
    pull of the same version filled, it verifies that folder again and says it is up to date."""
    result = pull_release(repo, version, out, endpoint=endpoint, progress=progress_shown(quiet))
    for note in result.notes:
        err_console.print(f"[yellow]Note:[/] {escape(note)}", highlight=False, soft_wrap=True)
    if result.up_to_date:
        console.print(
            f"{result.out_dir} already holds {repo} version {version}, up to date: {result.files} files "
            f"({_size(result.total_bytes)}), every one matching the version's manifest; nothing was downloaded.",
            highlight=False,
            soft_wrap=True,
        )
        return
    console.print(
        f"Downloaded {repo} version {version} into {result.out_dir}: {result.files} files "
        f"({_size(result.total_bytes)}), every one matching the version's manifest.",
        highlight=False,
        soft_wrap=True,
    )


@reports_errors
def versions(
    repo: str = typer.Argument(..., help="Dataset repo on the Hub, ORG/NAME."),
    endpoint: EndpointOpt = None,
) -> None:
    """List the published versions of a Hub dataset repo (tags), newest first, with dates and row counts."""
    found = list_versions(repo, endpoint=endpoint)
    if not found:
        console.print(
            f"{repo} has no version tags yet. Publish one with "
            f"`commonlink release push DIR --repo {repo} --version 1.0.0`.",
            highlight=False,
        )
        return
    table = Table(title=f"Versions of {repo}")
    for column in ("version", "date", "commit", "rows", "message"):
        table.add_column(column, overflow="fold")
    for v in found:
        rows = ", ".join(f"{name}: {count:,}" for name, count in v.rows.items()) or "-"
        date = v.date.strftime("%Y-%m-%d %H:%M UTC") if v.date else "-"
        table.add_row(v.version, date, v.commit[:12], escape(rows), escape(v.message))
    console.print(table)
