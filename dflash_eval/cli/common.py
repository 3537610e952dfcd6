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

# What an output that cannot hold Unicode (PYTHONIOENCODING=ascii, a latin-1 locale, a log piped through an
# ASCII-only tool) shows for the glyphs dflash-eval prints itself; any other character (text from data)
# becomes its \\u escape. Rich draws its tables with ASCII borders by itself on such a stream.
ASCII_GLYPHS = str.maketrans({"\u2013": "-", "\u00b7": ".", "\u2502": "|", "\u2192": "->", "\u21b5": "\\n",
                              "\u240d": "\\r", "\u2205": "(empty)", "\u26a0": "!", "\u25b2": "^", "\u25bc": "v",
                              "\u2039": "<", "\u203a": ">", "\u2026": "...", "\u00b9": "1", "\u2581": "_",
                              "\u2582": ".", "\u2583": ":", "\u2584": "-", "\u2585": "=", "\u2586": "+",
                              "\u2587": "*", "\u2588": "#", "\u2500": "-", "\u2265": ">=", "\u2264": "<=",
                              "\u00b1": "+/-", "\u2014": "--", "\u03c4": "tau"})


class EncodableStream:
    """A text stream that writes only what its encoding holds: dflash-eval's glyphs as ASCII (ASCII_GLYPHS),
    anything else as a backslash escape; never a UnicodeEncodeError over a finished command's output."""

    def __init__(self, stream):
        self.stream = stream
        self.encoding = getattr(stream, "encoding", None) or "ascii"

    def write(self, text: str) -> int:
        try:
            text.encode(self.encoding)
        except UnicodeEncodeError:
            text = text.translate(ASCII_GLYPHS).encode(self.encoding, "backslashreplace").decode(self.encoding)
        return self.stream.write(text)

    def __getattr__(self, name):  # flush, isatty, fileno: the stream's own
        return getattr(self.stream, name)


def encodable(stream):
    """`stream` itself when its encoding holds Unicode (UTF-8), else wrapped in an EncodableStream."""
    encoding = getattr(stream, "encoding", None) or "utf-8"
    try:
        "\u2588\u2502\u2013\u00b7\u2192\u2026".encode(encoding)
        return stream
    except (UnicodeEncodeError, LookupError):
        return EncodableStream(stream)


def stdout_console() -> Console:
    """Created per command so COLUMNS (and a test runner's redirected stdout) are honoured; a stdout that
    cannot hold Unicode gets ASCII (`encodable`)."""
    return Console(highlight=False, file=encodable(sys.stdout))


def write_stdout(text: str) -> None:
    """Plain text (markdown, an export) to stdout, as the console writes it: ASCII where Unicode cannot go."""
    encodable(sys.stdout).write(text)


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
    Console(file=encodable(sys.stderr), highlight=False, soft_wrap=True).print(f"[bold red]error:[/] {safe(message)}",
                                                                                markup=True)
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


def claims_out(lock: str = "run.lock"):
    """A command that writes into its `--out` folder holds that folder's lock from its first line
    (`pipeline/run_folder.claimed`: zero wait), before its heavy imports and any slow check: a run that
    another process is still writing is refused at once, naming the lock, never replaced after it finished
    and printed `results:`. Under torchrun only rank 0 writes OUT (the other ranks write their shard folders)."""

    def decorate(command):
        @functools.wraps(command)
        def wrapper(*args, **kwargs):
            from ..commands.distributed import launched_ranks
            from ..pipeline.run_folder import claimed

            out = kwargs.get("out")
            with claimed(out if out is not None and launched_ranks()[0] == 0 else None, lock):
                return command(*args, **kwargs)

        return wrapper

    return decorate


def save_traceback() -> str:
    """Write the current exception's traceback under the cache dir (or the temp dir); return where."""
    import datetime as dt
    import os
    import tempfile
    import traceback

    from ..core.settings.output import default_cache_dir

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
