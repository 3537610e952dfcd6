"""`dflash-eval inspect`: a checkpoint's normalized spec and every validation result."""

from __future__ import annotations

from typing import Optional

import typer

from .common import fail, reports_input_errors, stdout_console


@reports_input_errors
def inspect(
    drafter: str = typer.Argument(..., help="Drafter checkpoint folder (z-lab or speculators format) or HF cache name."),
    target: Optional[str] = typer.Option(None, "--target", "-t", help="Target folder or HF cache name, for the checks that need it."),
    semantics: Optional[str] = typer.Option(None, "--semantics", help="Show the drafter under these rules (zlab, speculators or vllm) instead of its format's."),
) -> None:
    """Show the normalized drafter spec and every validation result. Run this first when numbers look wrong."""
    from ..commands.inspect import inspect_drafter
    from ..render.terminal_inspect import render_inspection

    result = inspect_drafter(drafter, target, semantics)
    render_inspection(stdout_console(), result)
    if result.failed:
        first = result.failed[0]
        raise fail(f"{result.spec.path}: {first.name} failed: {first.detail}")
