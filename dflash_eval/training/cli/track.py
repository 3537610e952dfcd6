"""`dflash-eval track`: every checkpoint of a training run, once each, as a curve against the reference. Its
flags are the sections' (cli/options.takes), with the track's own `Tracking`; the library (training/commands/track.py)
writes every file of the track folder."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ...cli.common import claims_out, fail, reports_input_errors, safe_line, stdout_console
from ...cli.options import takes
from ...cli.progress import reporter_for
from ...core.settings.execution import Placement, Replay
from ...core.settings.inputs import InputSettings
from ...core.settings.output import Output
from ...core.settings.run_settings import RunSettings
from ...core.settings.sections import Use
from ...core.settings.work import Batching, Breakdown, Sampling, Serving, Trees
from ...pipeline.track_folder import TRACK_LOCK
from ..commands.track_settings import Tracking

REFERENCE_HELP = ("The line to beat: 'z-lab' (published drafter for the target, from the HF cache) or a checkpoint "
                  "path; evaluated once.")


@reports_input_errors
@claims_out(TRACK_LOCK)
@takes(Use(InputSettings, without=("responses",)), Use(Output, help=Output.TRACK_HELP),
       Use(Replay, without=("mode",)), Batching, Use(Placement, only=("device", "dtype")),
       Use(Sampling, help=Sampling.OFFLINE_HELP), Use(Serving, only=("draft_lengths",)),
       Use(Breakdown, only=("depth_buckets",)), Trees, tracking=Tracking)
def track(
    settings: RunSettings,
    tracking: Tracking,
    save_dir: list[Path] = typer.Argument(..., help="A training run's save folder (speculators <epoch>/, HF checkpoint-N/, SpecForge epoch_E_step_S/, any folder of checkpoint folders), or checkpoint folders one by one."),
    reference: Optional[str] = typer.Option(None, "--reference", help=REFERENCE_HELP),
) -> None:
    """Evaluate every checkpoint of a training run once, as a curve against the reference (--watch: as they appear)."""
    import dataclasses

    from ..commands.track import Tracker, TrackOptions
    from ..views.track import render_track

    console = stdout_console()
    reporter = reporter_for(console)
    settings = settings.with_sections(dataclasses.replace(settings.drafters, reference=reference))
    out, seed = settings.out, settings.seed

    def after_batch(tracker) -> None:  # the library wrote the track's files; with --watch the table is redrawn
        if tracking.watch:
            reporter.close()
            render_track(console, tracker.rows, tracker.present(), seed=seed)

    tracker = Tracker(TrackOptions(list(save_dir), settings, tracking), reporter, after_batch)
    try:
        tracker.run()
    except KeyboardInterrupt:
        reporter.close()
        if tracker.busy:
            raise fail(f"interrupted inside a batch; the prompts done are kept in {out}: rerun the same command to "
                       "continue", 130) from None
        console.print(safe_line(f"stopped; {len(tracker.rows)} rows in {out / 'track.jsonl'} (rerun to continue)"))
    finally:
        reporter.close()
        tracker.close()
    render_track(console, tracker.rows, tracker.present(), tracker.pending(), seed=seed)
    written = f"results: {out}/track.jsonl, track.csv, runs/"
    if settings.output.html and tracker.rows:
        written += ", track.html"
    console.print(safe_line(written))
