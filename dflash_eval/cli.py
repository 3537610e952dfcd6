"""`dflash-eval`: a thin Typer layer. Commands parse options, call the library, hand results to render."""

from __future__ import annotations

import functools
import sys
from typing import Optional

import typer
from rich.console import Console

from .errors import EXIT_BAD_INPUT, InputError

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Offline evaluation of DFlash speculative-decoding drafters.")


def stdout_console() -> Console:
    """Created per command so COLUMNS (and a test runner's redirected stdout) are honoured."""
    return Console(highlight=False)


def fail(message: str, code: int = EXIT_BAD_INPUT) -> typer.Exit:
    """Print one line to stderr and return the Exit to raise."""
    Console(stderr=True, highlight=False, soft_wrap=True).print(f"[bold red]error:[/] {message}", markup=True)
    return typer.Exit(code)


def reports_input_errors(command):
    """Bad input -> one line naming the file and the problem, exit code 2, no traceback."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except InputError as exc:
            raise fail(exc.one_line()) from None

    return wrapper


@app.callback()
def root() -> None:
    """Offline evaluation of DFlash speculative-decoding drafters."""


@app.command()
@reports_input_errors
def inspect(
    drafter: str = typer.Argument(..., help="Drafter checkpoint folder (z-lab or speculators format) or HF cache name."),
    target: Optional[str] = typer.Option(None, "--target", "-t", help="Target folder or HF cache name, for the checks that need it."),
) -> None:
    """Show the normalized drafter spec and every validation result. Run this first when numbers look wrong."""
    from .inspection import inspect_drafter
    from .render.terminal import render_inspection

    result = inspect_drafter(drafter, target)
    render_inspection(stdout_console(), result)
    if result.failed:
        first = result.failed[0]
        raise fail(f"{result.spec.path}: {first.name} failed: {first.detail}")


def main() -> None:  # pragma: no cover - console entry point
    app(prog_name="dflash-eval")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
