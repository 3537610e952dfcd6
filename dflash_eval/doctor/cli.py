"""`dflash-eval doctor`: replay one drafter under each classic bug's variant and name the mismatch. Its flags
are the sections' (cli/options.takes); the library (doctor/commands/doctor.run_doctor) takes a run folder's
settings, holds the folder's lock and writes every file, so the CLI parses, calls and prints."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..cli.common import claims_out, reports_input_errors, safe_line, stdout_console
from ..cli.options import takes
from ..cli.progress import reporter_for
from ..core.settings.execution import Doctor, Placement, Replay
from ..core.settings.inputs import InputSettings, ServingTarget
from ..core.settings.output import Output
from ..core.settings.run_settings import RunSettings
from ..core.settings.sections import Use
from ..core.settings.work import Breakdown, Sampling, Trees

OUT_HELP = ("Write doctor.json here; when it is a run folder, doctor uses that run's settings (prompts, tokens, "
            "thinking, target, final block) and adds a 'doctor' section to its run.json.")


@reports_input_errors
@claims_out()
@takes(Use(InputSettings, without=("responses",)), Use(Replay, only=("final_block",)),
       Use(Output, only=("cache_dir",)), Use(Sampling, help=Sampling.OFFLINE_HELP), Doctor,
       Use(Breakdown, help=Breakdown.DOCTOR_HELP), Trees, Use(Placement, only=("device", "dtype")), ServingTarget)
def doctor(
    settings: RunSettings,
    drafter: str = typer.Option(..., "--drafter", "-d", help="The drafter checkpoint to examine."),
    reference: Optional[str] = typer.Option(None, "--reference", help="Explain the gap to this drafter ('z-lab', PATH or PATH:NAME, as run's --reference): how much of it each variant closes."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help=OUT_HELP),
    engines: bool = typer.Option(False, "--engines", help="Instead of the variants: the drafter under every engine's reading of its checkpoint (z-lab, speculators, vLLM, SGLang, llama.cpp) on the same trajectories, tau per engine and the rule responsible for each difference; writes engines.json with --out."),
) -> None:
    """Name the train/eval mismatch behind a gap: replay the drafter under each classic bug's variant."""
    import dataclasses

    from ..pipeline.preflight import check_paths

    check_paths([drafter, *([reference] if reference else [])])  # before any heavy import (pipeline/preflight.py)
    settings = settings.with_sections(
        dataclasses.replace(settings.drafters, drafters=(drafter,), reference=reference),
        dataclasses.replace(settings.output, out=out))
    console = stdout_console()
    reporter = reporter_for(console)
    if engines:
        from .commands.engines import run_engines
        from .views.engines import render_engines

        try:
            result = run_engines(settings, reporter, write=out is not None)
        finally:
            reporter.close()
        render_engines(console, result)
        if out is not None:
            console.print(safe_line(f"written: {out / 'engines.json'}"))
        return
    from .commands.doctor import run_doctor
    from .views.terminal import render_doctor

    try:
        result = run_doctor(settings, reporter, write=out is not None)
    finally:
        reporter.close()
    render_doctor(console, result)
    if out is not None:
        console.print(safe_line(f"written: {out / 'doctor.json'}"))
