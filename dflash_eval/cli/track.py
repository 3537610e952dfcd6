"""`dflash-eval track`: every checkpoint of a training run, once each, as a curve against the reference."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from ..core.sections import SECONDS_MAX
from ..pipeline.track_folder import TRACK_LOCK
from . import options as opt
from .common import claims_out, fail, reports_input_errors, safe_line, stdout_console
from .progress import reporter_for
from .root import app


@app.command()
@reports_input_errors
@claims_out(TRACK_LOCK)
def track(
    save_dir: list[Path] = typer.Argument(..., help="A training run's save folder (speculators <epoch>/, HF checkpoint-N/, SpecForge epoch_E_step_S/, any folder of checkpoint folders), or checkpoint folders one by one."),
    target: opt.target.type = opt.target.default,
    reference: Optional[str] = typer.Option(None, "--reference", help="The line to beat: 'z-lab' (published drafter for the target, from the HF cache) or a checkpoint path; evaluated once."),
    prompts: opt.prompts.type = opt.prompts.default,
    prompt_field: opt.prompt_field.type = opt.prompt_field.default,
    out: opt.out_track.type = opt.out_track.default,
    watch: bool = typer.Option(False, "--watch", help="Keep polling for new checkpoints until interrupted (Ctrl-C)."),
    interval: float = typer.Option(60.0, "--interval", parser=opt.finite_number(0, SECONDS_MAX, low_open=True), help="Seconds between polls with --watch."),
    settle: float = typer.Option(2.0, "--settle", parser=opt.finite_number(0, SECONDS_MAX), help="Seconds between the two looks that must find a new checkpoint unchanged before it is evaluated."),
    batch: int = typer.Option(8, "--batch", min=1, help="Checkpoints evaluated together on one target pass per prompt."),
    tensorboard: Optional[Path] = typer.Option(None, "--tensorboard", help="Also write the scalars (tau, interval, reach per slot, repetition, gap) to this TensorBoard log folder."),
    max_new_tokens: opt.max_new_tokens.type = opt.max_new_tokens.default,
    limit: opt.limit.type = opt.limit.default,
    thinking: opt.thinking.type = opt.thinking.default,
    final_block: opt.final_block.type = opt.final_block.default,
    anchor_batch: opt.anchor_batch.type = opt.anchor_batch.default,
    tap_chunk: opt.tap_chunk.type = opt.tap_chunk.default,
    generation_batch: opt.generation_batch.type = opt.generation_batch.default,
    device: opt.device.type = opt.device.default,
    dtype: opt.dtype.type = opt.dtype.default,
    cache_dir: opt.cache_dir.type = opt.cache_dir.default,
    html: bool = typer.Option(True, "--html/--no-html", help="Rewrite DIR/track.html after every batch."),
    kernels: opt.kernels.type = opt.kernels.default,
    seed: opt.seed.type = opt.seed.default,
    semantics: opt.semantics.type = opt.semantics.default,
    overwrite: opt.overwrite_track.type = opt.overwrite_track.default,
    temperature: opt.temperature_offline.type = opt.temperature_offline.default,
    top_p: opt.top_p.type = opt.top_p.default,
    top_k: opt.top_k.type = opt.top_k.default,
    draft_policy: opt.draft_policy_offline.type = opt.draft_policy_offline.default,
    samples: opt.samples.type = opt.samples.default,
    draft_lengths: opt.draft_lengths.type = opt.draft_lengths.default,
    depth_buckets: opt.depth_buckets.type = opt.depth_buckets.default,
    tree_budgets: opt.tree_budgets.type = opt.tree_budgets.default,
) -> None:
    """Evaluate every checkpoint of a training run once, as a curve against the reference (--watch: as they appear)."""
    from ..commands.evaluate import RunOptions
    from ..commands.track import Tracker, TrackOptions
    from ..render.track import render_track

    console = stdout_console()
    reporter = reporter_for(console)
    shared = opt.shared_settings(target=target, prompts=prompts, limit=limit, seed=seed, max_new_tokens=max_new_tokens,
                                 thinking=thinking, device=device, dtype=dtype, cache_dir=cache_dir, semantics=semantics,
                                 prompt_field=prompt_field)
    run_options = RunOptions(drafters=[], out=out, reference=reference, final_block=final_block,
                             anchor_batch=anchor_batch, tap_chunk=tap_chunk, kernels=kernels,
                             generation_batch=generation_batch, overwrite=overwrite, temperature=temperature,
                             top_p=top_p, top_k=top_k, draft_policy=draft_policy, samples=samples,
                             draft_lengths=draft_lengths, depth_buckets=depth_buckets, tree_budgets=tree_budgets,
                             argv=["dflash-eval", *sys.argv[1:]], **shared)
    options = TrackOptions(sources=list(save_dir), run=run_options, watch=watch, interval=interval, settle=settle,
                           max_batch=batch)
    scalars = None
    if tensorboard is not None:
        import importlib.util

        from ..core.paths import output_path

        output_path(tensorboard, "--tensorboard", folder=True)
        if importlib.util.find_spec("tensorboard") is None:
            raise fail("--tensorboard needs the tensorboard package (pip install tensorboard)")

    def after_batch(tracker) -> None:
        if html:
            from ..pipeline.run_folder import write_run_html
            from ..render.track import render_track_html

            page = render_track_html(tracker.rows, tracker.present(), tracker.folder.settings, seed=run_options.seed)
            write_run_html(out, page, "track.html")
        if watch:
            reporter.close()
            render_track(console, tracker.rows, tracker.present(), seed=run_options.seed)

    def on_row(row, reference_tau) -> None:
        nonlocal scalars
        if tensorboard is not None:
            from ..render.tensorboard import ScalarLog

            scalars = scalars or ScalarLog(tensorboard)
            scalars.write(row, reference_tau)

    tracker = Tracker(options, reporter, after_batch, on_row)
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
        if scalars is not None:
            scalars.close()
    render_track(console, tracker.rows, tracker.present(), tracker.pending(), seed=run_options.seed)
    written = f"results: {out}/track.jsonl, track.csv, runs/"
    if html and tracker.rows:
        written += ", track.html"
    console.print(safe_line(written))
