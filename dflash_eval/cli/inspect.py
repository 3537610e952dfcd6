"""`dflash-eval inspect`: a checkpoint's normalized spec and every validation result. Its flags are its own
section's (commands/inspect_settings.InspectSettings) and --draft-window."""

from __future__ import annotations

import typer

from ..commands.inspect_settings import InspectSettings
from ..core.settings.sections import Use
from ..core.settings.work import Breakdown
from .common import fail, reports_input_errors, stdout_console
from .options import takes


@reports_input_errors
@takes(shown=InspectSettings, window=Use(Breakdown, only=("draft_window",)))  # --draft-window: the window judged
def inspect(
    shown: InspectSettings,
    window: Breakdown,
    drafter: str = typer.Argument(..., help="Drafter checkpoint folder (z-lab or speculators format) or HF cache name."),
) -> None:
    """Show the normalized drafter spec and every validation result. Run this first when numbers look wrong."""
    from ..commands.inspect import inspect_drafter
    from ..render.terminal_inspect import render_inspection

    shown.check()  # --probe-dtype (commands/inspect_settings.py)
    result = inspect_drafter(drafter, shown.target, shown.semantics, base=shown.base, probe=shown.probe,
                             probe_dtype=shown.probe_dtype, draft_window=window.draft_window, engines=shown.engines)
    render_inspection(stdout_console(), result)
    if result.failed:
        first = result.failed[0]
        raise fail(f"{result.spec.path}: {first.name} failed: {first.detail}")
