"""`dflash-eval show`: a run folder's decoded draft blocks along the walk, next to the target's tokens."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..core.settings.inputs import InputSettings
from .common import fail, incomplete_banner, reports_input_errors, stdout_console


@reports_input_errors
def show(
    run_dir: Path = typer.Argument(..., help="A run folder written by `dflash-eval run`."),
    prompt: Optional[str] = typer.Option(None, "--prompt", help="Only this prompt id."),
    drafter: Optional[str] = typer.Option(None, "--drafter-name", help="Only this drafter (its name in the run)."),
    worst: Optional[int] = typer.Option(None, "--worst", min=0, metavar="K", help="The K blocks with the shortest accepted prefix, taken across prompts (each prompt's worst before any prompt's second)."),
    first: Optional[int] = typer.Option(None, "--first", min=1, metavar="N", help="The first N blocks (default 10 unless --prompt is given)."),
    sample: Optional[int] = typer.Option(None, "--random", min=1, metavar="K", help="K blocks at random."),
    seed: int = typer.Option(0, "--seed", min=InputSettings.flag("seed").minimum, help="Seed of the --random choice."),
    partial: bool = typer.Option(False, "--partial", help="On an unfinished run: the prompts done so far, under a banner."),
    flagged: bool = typer.Option(False, "--flagged", help="Only the blocks a repetition detector flagged, worst first (with --worst K: the K worst of them)."),
) -> None:
    """Decoded draft blocks along the walk, next to the target's tokens."""
    from ..core.documents.results import read_run_document
    from ..core.documents.run_rows import run_rows
    from ..core.samples import select_blocks
    from ..render.terminal import SAMPLE_LEGEND, render_blocks

    chosen = [name for name, value in (("--worst", worst), ("--first", first), ("--random", sample)) if value is not None]
    if len(chosen) > 1:
        raise fail(f"{' and '.join(chosen)} choose blocks in different ways: give one of them")
    if flagged and first is not None:
        raise fail("--flagged shows the flagged blocks worst first; --first N would take them in walk order: give "
                   "--worst N instead")
    run = read_run_document(run_dir, partial=partial)
    console = stdout_console()
    incomplete_banner(console, run)
    names = [d["name"] for d in run["drafters"]]
    if drafter is not None and drafter not in names:
        raise fail(f"{run_dir}: no drafter {drafter!r} in this run (drafters: {', '.join(names)})")
    rows = run_rows(run_dir, run)
    if prompt is not None and not any(r["prompt_id"] == prompt for r in rows):
        raise fail(f"{run_dir}: no prompt {prompt!r} in this run")
    if first is None and worst is None and sample is None and prompt is None and not flagged:
        first = 10
    blocks = select_blocks(rows, prompt=prompt, drafter=drafter, first=first, worst=worst, sample=sample, seed=seed,
                           flagged=flagged)
    with console.capture() as captured:
        if flagged:
            total = len(select_blocks(rows, prompt=prompt, drafter=drafter, flagged=True))
            console.print(f"{len(blocks)} of {total} blocks flagged as repetitive, worst first")
        render_blocks(console, blocks)
        console.print(SAMPLE_LEGEND)
    console.file.write(captured.get())
