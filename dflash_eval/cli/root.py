"""The Typer application every command module registers on (cli/__init__.py imports them in help order)."""

from __future__ import annotations

import typer

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Offline evaluation of DFlash speculative-decoding drafters.")


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



def main() -> None:  # pragma: no cover - console entry point
    app(prog_name="dflash-eval")
