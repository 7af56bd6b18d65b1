"""``commonlink export lmms-eval|vlmevalkit``: thin CLI over :mod:`commonlink.eval.export.writers`."""

from __future__ import annotations

from pathlib import Path

import typer

from commonlink.commands._common import console, err_console, reports_errors
from commonlink.commands._options import (
    AssociationOpt,
    CatalogRootOpt,
    DataOpt,
    OptionalOutOpt,
    QuietOpt,
    RevisionOpt,
    SplitsOpt,
    expand_option_groups,
    option_group,
)
from commonlink.errors import InputError
from commonlink.eval.export.run_commands import format_commands, lmms_eval_commands, vlmevalkit_commands
from commonlink.eval.export.writers import (
    LMMS_TASK_DIR,
    export_lmms_eval,
    export_vlmevalkit,
)

#: The positional OUT of earlier versions, still accepted (with a note) so that old scripts keep working.
OLD_OUT = typer.Argument(None, metavar="OUT", hidden=True, help="Old form of --out.")


def _out_folder(out: Path | None, old_out: Path | None, command: str) -> Path:
    """--out, or the positional OUT of earlier versions (with a note saying to use --out)."""
    if out is not None and old_out is not None and out != old_out:
        raise InputError(f"Two output folders given: --out {out} and {old_out}.", "Pass only --out.")
    if out is None and old_out is None:
        raise InputError("No output folder given.", f"Pass --out DIR, e.g. commonlink export {command} --out harness/.")
    if out is None:
        err_console.print(
            f"[yellow]Note:[/] a positional OUT is deprecated; write `commonlink export {command} --out {old_out}`.",
            highlight=False,
            soft_wrap=True,
        )
    return out or old_out


@option_group
class ExportInputs:
    """What both exports read, and where they write."""

    out: OptionalOutOpt = None
    data: DataOpt = "facebook/Common-O"
    association: AssociationOpt = None
    revision: RevisionOpt = None
    split: SplitsOpt = ("main", "challenge")
    catalog_root: CatalogRootOpt = None
    quiet: QuietOpt = False

    def write(self, writer, old_out: Path | None, command: str) -> tuple[Path, list]:
        """``writer`` (an export of :mod:`commonlink.eval.export.writers`) run on these inputs: (out, files)."""
        out = _out_folder(self.out, old_out, command)
        written = writer(
            out,
            data=self.data,
            association=self.association,
            revision=self.revision,
            splits=tuple(self.split),
            catalog_root=self.catalog_root,
            progress=not self.quiet,
        )
        return out, written


@reports_errors
@expand_option_groups
def lmms_eval(old_out: Path = OLD_OUT, inputs: ExportInputs = ExportInputs()) -> None:
    """lmms-eval tasks common_o, common_o_challenge (and association_single_step) scored with commonlink's parser
    and metrics, written into --out (required)."""
    out, written = inputs.write(export_lmms_eval, old_out, "lmms-eval")
    tasks = [p.stem for p in written if p.suffix == ".yaml"]
    console.print(
        f"Wrote {len(written)} files to {out / LMMS_TASK_DIR} (tasks {', '.join(tasks)}). Run them with "
        "(commonlink must be installed in lmms-eval's environment):\n"
        + format_commands(lmms_eval_commands(out / LMMS_TASK_DIR, tasks)),
        highlight=False,
        markup=False,
    )


@reports_errors
@expand_option_groups
def vlmevalkit(old_out: Path = OLD_OUT, inputs: ExportInputs = ExportInputs()) -> None:
    """VLMEvalKit TSV files and a dataset class (commonlink_vlmeval.py) scored with commonlink's parser and metrics,
    written into --out (required)."""
    out, written = inputs.write(export_vlmevalkit, old_out, "vlmevalkit")
    datasets = [p.stem for p in written if p.suffix == ".tsv"]
    console.print(
        f"Wrote {', '.join(p.name for p in written)} to {out}. Run them with VLMEvalKit's run.py options "
        "(commonlink must be installed in VLMEvalKit's environment; docs/eval.md has the install recipe):\n"
        + format_commands(vlmevalkit_commands(out / "commonlink_vlmeval.py", datasets)),
        highlight=False,
        markup=False,
    )
