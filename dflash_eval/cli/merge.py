"""`dflash-eval merge`: join the shard folders of one `run --shard I/N` into the run folder one process would
have written (commands/merge.py does the work)."""

from __future__ import annotations

from pathlib import Path

import typer

from ..core.settings.output import Output
from ..core.settings.run_settings import RunSettings
from ..core.settings.sections import Use
from .common import claims_out, program, reports_input_errors, safe_line, stdout_console
from .options import takes

MERGE_HELP = {"out": "The merged run folder (what one process would have written).",
              "overwrite": "Replace a run folder that dflash-eval wrote."}


@reports_input_errors
@claims_out()
@takes(Use(Output, only=("out", "overwrite", "html"), help=MERGE_HELP))
def merge(settings: RunSettings,
          shards: list[Path] = typer.Argument(..., help="The N shard folders of one run (`run --shard I/N`).")) -> None:
    """Join shard runs into one run folder: counts add exactly; shards of other runs, missing or overlapping ones are refused."""
    from ..commands.merge import merge as merge_shards
    from ..render.terminal import render_report

    output, console = settings.output, stdout_console()
    result = merge_shards(list(shards), settings.out, overwrite=output.overwrite, argv=list(output.argv),
                          html=output.html)
    render_report(console, result.document, result.rows, run_dir=str(settings.out), program=program())
    written = f"merged {len(shards)} shards: {settings.out}/run.json, samples.jsonl, per_position.csv"
    console.print(safe_line(written + (", report.html" if output.html else "")))
