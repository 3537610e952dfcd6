"""`dflash-eval run`: evaluate drafters on one target, also under torchrun (`merge`, joining shard runs, is in
cli/merge.py). Its flags are the sections' (cli/options.takes)."""

from __future__ import annotations

import os

from rich.console import Console

from ..core.settings.execution import Doctor, Explanation, Numerics, Placement, Replay
from ..core.settings.inputs import Drafters, InputSettings, ServingTarget
from ..core.settings.output import Output
from ..core.settings.run_settings import RunSettings
from ..core.settings.work import Batching, Breakdown, LongContext, Sampling, Serving, Trees
from .common import claims_out, fail, program, reports_input_errors, safe_line, stdout_console
from .options import takes
from .progress import reporter_for

RUN_SECTIONS = (Drafters, Explanation, InputSettings, Output, Replay, Batching, Numerics, Placement, Sampling, Serving,
                Breakdown, LongContext, Trees, ServingTarget)
assert Doctor not in RUN_SECTIONS  # doctor's own flags are not run's


@reports_input_errors
@claims_out()
@takes(*RUN_SECTIONS)
def run(settings: RunSettings) -> None:
    """Evaluate drafters on one target: acceptance per prompt, per slot, with intervals."""
    from ..pipeline.preflight import preflight

    preflight(settings)  # every rule, paths, target, a resume with other settings: refused before torch is imported
    from ..commands.distributed import launched_ranks
    from ..render.terminal import render_report

    console = stdout_console()
    reporter = reporter_for(console)
    rank, world = launched_ranks()
    if world > 1 and rank > 0:  # torchrun: only rank 0 talks; the other ranks work quietly
        console = Console(file=open(os.devnull, "w"), highlight=False)
        reporter = reporter_for(console)
    out = settings.out
    try:
        from ..commands.distributed import evaluate_launched

        result = evaluate_launched(settings, reporter)  # report.html is written with the results, under the lock
    except KeyboardInterrupt as exc:  # evaluate's Interrupted says what was kept at that moment
        reporter.close()
        raise fail(getattr(exc, "message", None) or f"interrupted; run the same command again (--out {out})", 130) from None
    finally:
        reporter.close()
    if world > 1 and rank > 0:
        return  # rank 0 merged the shards into --out and writes the report
    render_report(console, result.document, result.rows, run_dir=str(out), program=program())
    written = f"results: {out}/run.json, samples.jsonl, per_position.csv" + (", report.html" if settings.output.html else "")
    console.print(safe_line(written))
