"""`dflash-eval trained-taps DATA`: the hidden states the drafter was trained on, read back from the trainer's
files, against the taps dflash-eval computes; with -d, the drafter evaluated on both."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..core.settings.sections import SECONDS_MAX
from . import options as opt
from .common import claims_out, reports_input_errors, safe_line, stdout_console
from .progress import reporter_for
from .root import app


def _layer_ids(value: str | None) -> tuple[int, ...] | None:
    from ..core.errors import InputError

    if value is None:
        return None
    try:
        return tuple(int(part) for part in value.split(","))
    except ValueError:
        raise InputError(None, f"--layer-ids {value!r}: expected integers separated by commas (e.g. 2,14,27)") from None


@app.command("trained-taps")
@reports_input_errors
@claims_out()
def trained_taps(
    data: Path = typer.Argument(..., help="The training run's hidden-state data folder: speculators (state.json + hidden_states/), SpecForge (rows_*/data_*.ckpt), DeepSpec (manifest.json + samples.idx) or speculators < 0.6 (data_config.json + data_*.pt)."),
    target: str = typer.Option(..., "--target", "-t", help="The target the data was extracted from (folder or HF cache name)."),
    drafter: Optional[str] = typer.Option(None, "--drafter", "-d", help="A drafter trained on the data: its layer ids, and its acceptance on the stored taps next to ours."),
    limit: int = typer.Option(64, "--limit", min=1, help="The first N samples of the split (each one target pass)."),
    split: Optional[str] = typer.Option(None, "--split", help="validation (default where the trainer has one: speculators' last 10%), train or all."),
    train_ratio: float = typer.Option(0.9, "--train-ratio", parser=opt.finite_number(0, 1), help="The trainer's train share (speculators --train-data-ratio)."),
    layer_ids: Optional[str] = typer.Option(None, "--layer-ids", help="The stored layers in the data's own numbering (speculators: vLLM aux ids, as aux_hidden_state_layer_ids; others: z-lab ids), when neither the data nor -d says."),
    noise_samples: int = typer.Option(8, "--noise-samples", min=1, help="Samples the bf16-vs-fp32 noise floor is measured on (one more target pass each, in the other dtype)."),
    device: opt.device.type = opt.device.default,
    dtype: str = typer.Option("float32", "--dtype", help="Our reference taps: float32 (exact) or bfloat16; the noise floor's pass runs the other."),
    lock_timeout: float = typer.Option(10.0, "--lock-timeout", parser=opt.finite_number(0, SECONDS_MAX), help="Seconds to wait for a hidden-state file whose .lock a writer still holds."),
    anchor_batch: opt.anchor_batch.type = opt.anchor_batch.default,
    seed: opt.seed.type = opt.seed.default,
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Write trained_taps.json and trained_taps.html here; with -d also run.json / samples.jsonl (drafters NAME@trained-taps and NAME@our-taps, for diff and report)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace a folder dflash-eval wrote with other settings."),
    as_json: bool = typer.Option(False, "--json", help="The result document on stdout."),
) -> None:
    """Compare the hidden states a drafter was trained on with the target's own, slot by slot against the
    measured bf16 noise floor, and evaluate the drafter on both."""
    import json as json_module
    import sys

    from ..commands.trained_taps import TrainedTapsOptions
    from ..commands.trained_taps import trained_taps as run_trained_taps
    from ..core.errors import InputError

    if dtype not in ("float32", "bfloat16"):
        raise InputError(None, f"--dtype {dtype!r}: trained-taps compares against float32 or bfloat16 taps")
    options = TrainedTapsOptions(data=data, target=target, drafter=drafter, limit=limit, split=split,
                                 train_ratio=train_ratio, layer_ids=_layer_ids(layer_ids), noise_samples=noise_samples,
                                 device=device, dtype=dtype, lock_timeout=lock_timeout, seed=seed or 0,
                                 anchor_batch=anchor_batch, argv=list(sys.argv))
    folder = None
    if out is not None:
        from ..commands.trained_taps_output import check_out

        folder = check_out(out, options, overwrite)
    console = stdout_console()
    reporter = reporter_for(console) if not as_json else None
    try:
        done = run_trained_taps(options, reporter)
    finally:
        if reporter is not None:
            reporter.close()
    result = done.result
    if as_json:
        typer.echo(json_module.dumps(result, indent=1))
    else:
        from ..render.terminal_trained_taps import render_trained_taps

        render_trained_taps(console, result)
    if folder is not None:
        from ..commands.trained_taps_output import TRAINED_TAPS_HTML, write_outputs
        from ..pipeline.run_folder import write_run_html
        from ..render.html_trained_taps import render_trained_taps_html

        written = write_outputs(folder, result, done.rows, options, done.target, done.entry, done.drafter)
        write_run_html(out, render_trained_taps_html(result), TRAINED_TAPS_HTML)
        if not as_json:
            console.print(safe_line(f"written: {', '.join(str(p) for p in written + [out / TRAINED_TAPS_HTML])}"))
