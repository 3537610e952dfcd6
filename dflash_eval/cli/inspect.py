"""`dflash-eval inspect`: a checkpoint's normalized spec and every validation result."""

from __future__ import annotations

from typing import Optional

import typer

from ..core.settings.sections import Use
from ..core.settings.work import Breakdown
from .common import fail, reports_input_errors, stdout_console
from .options import takes


@reports_input_errors
@takes(window=Use(Breakdown, only=("draft_window",)))  # --draft-window: the serving window the checks judge
def inspect(
    window: Breakdown,
    drafter: str = typer.Argument(..., help="Drafter checkpoint folder (z-lab or speculators format) or HF cache name."),
    target: Optional[str] = typer.Option(None, "--target", "-t", help="Target folder or HF cache name, for the checks that need it."),
    semantics: Optional[str] = typer.Option(None, "--semantics", help="Show the drafter under these rules (zlab, speculators, vllm, sglang, llamacpp or deepspec) instead of its format's."),
    engines: bool = typer.Option(False, "--engines", help="Also the table of how each engine (z-lab, speculators, vLLM, SGLang, llama.cpp, DeepSpec) reads this checkpoint, one row per reading, each cell with the file and function that decides it; cells that differ from the checkpoint's own rules marked."),
    base: Optional[str] = typer.Option(None, "--base", help="The checkpoint the embedding table was initialised from: is the MASK row still its initialisation (never trained)?"),
    probe: bool = typer.Option(False, "--probe/--no-probe", help="Load the target and run it over a short probe text: fc's output range at --probe-dtype, overflows counted (needs --target)."),
    probe_dtype: str = typer.Option("float16", "--probe-dtype", help="The dtype the fc probe computes in (float16, bfloat16, float32)."),
) -> None:
    """Show the normalized drafter spec and every validation result. Run this first when numbers look wrong."""
    from ..commands.inspect import inspect_drafter
    from ..render.terminal_inspect import render_inspection

    if probe_dtype not in ("float16", "bfloat16", "float32"):
        raise fail(f"--probe-dtype {probe_dtype!r}: one of float16, bfloat16, float32")
    result = inspect_drafter(drafter, target, semantics, base=base, probe=probe, probe_dtype=probe_dtype,
                             draft_window=window.draft_window, engines=engines)
    render_inspection(stdout_console(), result)
    if result.failed:
        first = result.failed[0]
        raise fail(f"{result.spec.path}: {first.name} failed: {first.detail}")
