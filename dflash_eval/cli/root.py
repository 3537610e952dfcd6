"""The Typer application every command module registers on (cli/__init__.py imports them in help order),
and what every command shares before it runs: help that reads as prose (no type metavars, no stray line
breaks), usage errors as the one-line `error:` every other error prints, and torch's CPU thread count."""

from __future__ import annotations

import os
import re
import sys

import typer
from typer.core import TyperArgument, TyperGroup, TyperOption

# ------------------------------------------------------------------------------------------------ help

_WORDS = (("bool", None), ("int", "N"), ("float", "NUMBER"), ("path", "PATH"))  # Typer's type label -> a word


def _prose(text: str | None) -> str | None:
    """A docstring or help text as paragraphs: single line breaks (source wrapping) become spaces."""
    return re.sub(r"(?<!\n)\n(?!\n)\s*", " ", text).strip() if text else text


class _Option(TyperOption):
    """An option as help shows it: a plain word for what it takes (N, PATH, TEXT), nothing for a flag, no
    `[x>=1]` range (a value out of range is refused by a one-line error that states the range)."""

    def display_type_rich(self, ctx) -> str | None:
        if self.metavar or self.is_flag or self.count:
            return self.metavar or None
        label = super().display_type(ctx) or ""
        return next((word for key, word in _WORDS if key in label), "TEXT")

    def _get_number_range_help_str(self) -> str | None:
        return None


class _Argument(TyperArgument):
    """An argument is named by its own upper-case name (RUN_DIR); no `<path>` beside it."""

    def display_type_rich(self, ctx) -> str | None:
        return None

    def _get_number_range_help_str(self) -> str | None:
        return None


def _plain(param) -> None:
    if isinstance(param, TyperOption) and not isinstance(param, _Option):
        param.__class__ = _Option
    elif isinstance(param, TyperArgument) and not isinstance(param, _Argument):
        param.__class__ = _Argument
        param.metavar = param.metavar or param.name.upper()  # RUN_DIR, as the help text calls it
    param.help = _prose(getattr(param, "help", None))


def _plain_help(command) -> None:
    """Every command below `command` (this one included): prose help, plain option words."""
    command.help = _prose(command.help)
    for param in command.params:
        _plain(param)
    help_option = command.get_help_option  # made on first use: made plain then

    def plain_help_option(ctx, _made=help_option):
        option = _made(ctx)
        if option is not None:
            _plain(option)
        return option

    command.get_help_option = plain_help_option
    for sub in (getattr(command, "commands", None) or {}).values():
        _plain_help(sub)


def usage_error_line(exc) -> str:
    """A click usage error as one line: what was wrong and where the help is."""
    message = " ".join(exc.format_message().split())
    ctx = getattr(exc, "ctx", None)
    where = f" (see `{ctx.command_path} --help`)" if ctx is not None else ""
    return f"{message[:1].lower()}{message[1:]}{where}"


class Root(TyperGroup):
    """The `dflash-eval` group: plain help for every command; usage errors in one line, exit 2."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        _plain_help(self)

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        from typer._click.exceptions import ClickException, NoArgsIsHelpError
        from typer.exceptions import Abort

        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except NoArgsIsHelpError as exc:  # `dflash-eval` or `dflash-eval prompts` alone: the help, as always
            exc.show()
            sys.exit(exc.exit_code)
        except ClickException as exc:
            from .common import fail

            fail(usage_error_line(exc), exc.exit_code)
            sys.exit(exc.exit_code)
        except Abort:
            from .common import fail

            fail("aborted", 1)
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)


app = typer.Typer(cls=Root, add_completion=False, no_args_is_help=True,
                  help="Offline evaluation of DFlash speculative-decoding drafters.")

# --------------------------------------------------------------------------------------------- threads

MAX_DEFAULT_THREADS = 8


def default_threads() -> int:
    """torch's intra-op threads when OMP_NUM_THREADS is not set: half the CPUs this process may use (at
    least 1, at most MAX_DEFAULT_THREADS). Measured on a small live run of the demo models on 2 shared cores:
    one thread per core spun against the other jobs, 108-450 s against 37-49 s with one thread."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(1, min(cpus // 2, MAX_DEFAULT_THREADS))


def configure_threads() -> int:
    """Respect OMP_NUM_THREADS when set; otherwise set it (torch reads it when first imported) and, when
    torch is already imported (tests calling the app in-process), torch's own count. Returns the count."""
    given = os.environ.get("OMP_NUM_THREADS", "").strip()
    if given.isdigit() and int(given) > 0:
        threads = int(given)
    else:
        threads = default_threads()
        os.environ["OMP_NUM_THREADS"] = str(threads)
    if "torch" in sys.modules:
        import torch

        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)
    return threads


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"dflash-eval {version('dflash-eval')}")
        raise typer.Exit()


@app.callback()
def root(
    show_version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                      help="Print the version and exit."),
) -> None:
    """Offline evaluation of DFlash speculative-decoding drafters."""
    configure_threads()


def main() -> None:  # pragma: no cover - console entry point
    app(prog_name="dflash-eval")
