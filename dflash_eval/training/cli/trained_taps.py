"""`dflash-eval trained-taps DATA`: the hidden states the drafter was trained on, read back from the trainer's
files, against the taps dflash-eval computes; with -d, the drafter evaluated on both. Its flags are the
sections' (cli/options.takes): its own `TrainedTapsSettings`, and the run's --device and --anchor-batch."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ...cli.common import claims_out, reports_input_errors, safe_line, stdout_console
from ...cli.options import takes
from ...cli.progress import reporter_for
from ...commands.trained_taps_settings import TrainedTapsSettings
from ...core.settings.execution import Placement
from ...core.settings.run_settings import RunSettings
from ...core.settings.sections import Use
from ...core.settings.work import Batching

OUT_HELP = ("Write trained_taps.json and trained_taps.html here; with -d also run.json / samples.jsonl (drafters "
            "NAME@trained-taps and NAME@our-taps, for diff and report).")


@reports_input_errors
@claims_out()
@takes(Use(Placement, only=("device",)), Use(Batching, only=("anchor_batch",)), taps=TrainedTapsSettings)
def trained_taps(
    settings: RunSettings,
    taps: TrainedTapsSettings,
    data: Path = typer.Argument(..., help="The training run's hidden-state data folder: speculators (state.json + hidden_states/), SpecForge (rows_*/data_*.ckpt), DeepSpec (manifest.json + samples.idx) or speculators < 0.6 (data_config.json + data_*.pt)."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help=OUT_HELP),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace a folder dflash-eval wrote with other settings."),
    as_json: bool = typer.Option(False, "--json", help="The result document on stdout."),
) -> None:
    """Compare the hidden states a drafter was trained on with the target's own, slot by slot against the
    measured bf16 noise floor, and evaluate the drafter on both."""
    import dataclasses
    import json as json_module
    import sys

    from ...commands.trained_taps import trained_taps as run_trained_taps

    taps = dataclasses.replace(taps, data=data)
    taps.check()
    # its run.json has always recorded the command line exactly as the shell gave it (the program's own path first)
    settings = settings.with_sections(dataclasses.replace(settings.output, argv=tuple(sys.argv)))
    folder = None
    if out is not None:
        from ..commands.trained_taps_output import check_out

        folder = check_out(out, taps, settings, overwrite)
    console = stdout_console()
    reporter = reporter_for(console) if not as_json else None
    try:
        done = run_trained_taps(taps, settings, reporter)
    finally:
        if reporter is not None:
            reporter.close()
    result = done.result
    if as_json:
        typer.echo(json_module.dumps(result, indent=1))
    else:
        from ...render.terminal_trained_taps import render_trained_taps

        render_trained_taps(console, result)
    if folder is not None:
        from ..commands.trained_taps_output import write_outputs

        written = write_outputs(folder, result, done.rows, taps, settings, done.target, done.entry, done.drafter)
        if not as_json:
            console.print(safe_line(f"written: {', '.join(str(p) for p in written)}"))
