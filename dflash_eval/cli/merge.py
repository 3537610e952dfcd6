"""`dflash-eval merge`: join the shard folders of one `run --shard I/N` into the run folder one process would
have written (commands/merge.py does the work)."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from .common import claims_out, program, reports_input_errors, safe_line, stdout_console
from .root import app


@app.command()
@reports_input_errors
@claims_out()
def merge(
    shards: list[Path] = typer.Argument(..., help="The N shard folders of one run (`run --shard I/N`)."),
    out: Path = typer.Option(..., "--out", "-o", help="The merged run folder (what one process would have written)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace a run folder that dflash-eval wrote."),
    html: bool = typer.Option(True, "--html/--no-html", help="Write DIR/report.html."),
) -> None:
    """Join shard runs into one run folder: counts add exactly; shards of other runs, missing or overlapping ones are refused."""
    from ..commands.merge import merge as merge_shards
    from ..core.documents.results import read_samples
    from ..render.html import render_run_html
    from ..render.terminal import render_report

    console = stdout_console()
    result = merge_shards(list(shards), out, overwrite=overwrite, argv=["dflash-eval", *sys.argv[1:]],
                          report=render_run_html if html else None)
    rows = read_samples(out / "samples.jsonl")
    render_report(console, result, rows, run_dir=str(out), program=program())
    written = f"merged {len(shards)} shards: {out}/run.json, samples.jsonl, per_position.csv"
    console.print(safe_line(written + (", report.html" if html else "")))
