"""What every command shares: the console, the one-line error path (bad input -> one line naming the file and
the problem, exit 2, no traceback; an internal error -> one line and the traceback in a file), the incomplete-run
banner (the progress reporter is in progress.py)."""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import typer
from rich.console import Console

from ..core.errors import EXIT_BAD_INPUT, InputError


def stdout_console() -> Console:
    """Created per command so COLUMNS (and a test runner's redirected stdout) are honoured."""
    return Console(highlight=False)


def safe_line(text: str) -> str:
    from ..core.safe_text import safe

    return safe(text)


def incomplete_banner(console: Console, run: dict) -> None:
    state = run.get("incomplete") if isinstance(run, dict) else None
    if isinstance(state, dict):
        console.print(f"[bold white on red] INCOMPLETE RUN: {safe_line(str(state.get('done')))} of "
                      f"{safe_line(str(state.get('total')))} prompts done; rerun the same command to finish [/]")


def fail(message: str, code: int = EXIT_BAD_INPUT) -> typer.Exit:
    """Print one line to stderr and return the Exit to raise."""
    from ..core.safe_text import safe

    # the message quotes paths, names and file content: shown escaped, never interpreted
    Console(stderr=True, highlight=False, soft_wrap=True).print(f"[bold red]error:[/] {safe(message)}", markup=True)
    return typer.Exit(code)


def reports_input_errors(command):
    """Bad input -> one line naming the file and the problem, exit code 2, no traceback."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        import click

        try:
            return command(*args, **kwargs)
        except InputError as exc:
            raise fail(exc.one_line()) from None
        except (typer.Exit, typer.Abort, click.exceptions.ClickException, KeyboardInterrupt, SystemExit):
            raise
        except OSError as exc:  # a path the system refused: still the user's input, still one line
            where = f"{exc.filename}: " if exc.filename else ""
            raise fail(f"{where}{exc.strerror or exc}") from None
        except Exception as exc:  # an internal error: one line here, the traceback in a file
            raise fail(f"internal error ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}); "
                       f"full traceback saved to {save_traceback()}", 1) from None

    return wrapper


def save_traceback() -> str:
    """Write the current exception's traceback under the cache dir (or the temp dir); return where."""
    import datetime as dt
    import os
    import tempfile
    import traceback

    from ..pipeline.continuations import default_cache_dir

    text = traceback.format_exc()
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    for folder in (Path(default_cache_dir()) / "errors", Path(tempfile.gettempdir()) / "dflash-eval-errors"):
        try:
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f"{stamp}-{os.getpid()}.log"
            path.write_text(f"argv: {sys.argv}\n\n{text}")
            return str(path)
        except OSError:
            continue
    return "(nowhere: no writable folder)"


def program() -> list[str]:
    """How to call dflash-eval again from this shell, as argv words: the bare name when it is on PATH, else
    the full path of this installation's script (a venv that was not activated), else `python -m
    dflash_eval.cli`."""
    import shutil

    here = Path(sys.executable).parent / "dflash-eval"
    found = shutil.which("dflash-eval")
    if found and (not here.exists() or Path(found).resolve() == here.resolve()):
        return ["dflash-eval"]
    if here.exists():
        return [str(here)]
    return [sys.executable, "-m", "dflash_eval.cli"]
