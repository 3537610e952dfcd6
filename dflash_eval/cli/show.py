"""`dflash-eval show`: a run folder's decoded draft blocks along the walk, next to the target's tokens. Its
flags are its section's (commands/results_settings.ShowSettings)."""

from __future__ import annotations

from pathlib import Path

import typer

from ..commands.results_settings import ShowSettings
from .common import fail, incomplete_banner, reports_input_errors, stdout_console
from .options import takes


@reports_input_errors
@takes(choice=ShowSettings)
def show(
    choice: ShowSettings,
    run_dir: Path = typer.Argument(..., help="A run folder written by `dflash-eval run`."),
) -> None:
    """Decoded draft blocks along the walk, next to the target's tokens."""
    from ..core.documents.results import read_run_document
    from ..core.documents.run_rows import run_rows
    from ..core.samples import select_blocks
    from ..render.terminal import SAMPLE_LEGEND, render_blocks

    choice.check()  # one way of choosing blocks (commands/results_settings.py)
    prompt, drafter = choice.prompt, choice.drafter
    run = read_run_document(run_dir, partial=choice.partial)
    console = stdout_console()
    incomplete_banner(console, run)
    names = [d["name"] for d in run["drafters"]]
    if drafter is not None and drafter not in names:
        raise fail(f"{run_dir}: no drafter {drafter!r} in this run (drafters: {', '.join(names)})")
    rows = run_rows(run_dir, run)
    if prompt is not None and not any(r["prompt_id"] == prompt for r in rows):
        raise fail(f"{run_dir}: no prompt {prompt!r} in this run")
    blocks = select_blocks(rows, **choice.selection())
    with console.capture() as captured:
        if choice.flagged:
            total = len(select_blocks(rows, prompt=prompt, drafter=drafter, flagged=True))
            console.print(f"{len(blocks)} of {total} blocks flagged as repetitive, worst first")
        render_blocks(console, blocks)
        console.print(SAMPLE_LEGEND)
    console.file.write(captured.get())
