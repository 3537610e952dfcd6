"""Command signatures generated from the sections' flags: `takes(*sections, **named)` names the sections a
command takes (core/settings/sections.py: a `Section` owns its flags, their help, default and panel) and
builds the command's Typer signature from their `Flag`s plus the command's own parameters; the command
receives the settings built (`RunSettings` made of the sections it takes, the others at their defaults) and
its own values, never a flag's value to pass on by hand. So adding an option is a field and a `Flag` in its
section: every command that takes the section gains it, with one name, default and help.

    @takes(Drafters, InputSettings, Output, Replay, Placement, Batching, Sampling, Serving, ...)
    def run(settings: RunSettings) -> None: ...

    @takes(Use(Sampling, help=Sampling.OFFLINE_HELP), ..., tracking=Tracking)   # a section of its own,
    def track(settings: RunSettings, tracking: Tracking, save_dir: list[Path] = typer.Argument(...)): ...

A section passed by keyword (`tracking=`) reaches the command as that argument instead of inside the
RunSettings (a wing's own section: the training wing's `Tracking`). `finite_number` is the parser of every
float option.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
import sys
import typing
from typing import Any

import typer

from ..core.settings.run_settings import RunSettings
from ..core.settings.sections import Flag, Section, Use, use


def finite_number(low: float | None = None, high: float | None = None, *, low_open: bool = False):
    """The parser of every float option: a finite number within [low, high] (low excluded when `low_open`).
    Why one rule: NaN passes click's ranges (every comparison with it is false) and inf reached time.sleep
    after the expensive work; both are refused here, at the command line, as a usage error naming the option."""
    def parse(value) -> float:
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise typer.BadParameter(f"{value!r} is not a number") from None
        if not math.isfinite(number):
            raise typer.BadParameter(f"{value!r} is not a finite number")
        if low is not None and (number <= low if low_open else number < low):
            raise typer.BadParameter(f"{value} is not {'>' if low_open else '>='} {low:g}")
        if high is not None and number > high:
            raise typer.BadParameter(f"{value} is not <= {high:g}")
        return number

    parse.__name__ = "float"  # help shows NUMBER for it, as for any float (root._WORDS)
    return parse


def option(flag: Flag, help: str | None = None):
    """A section's flag as the Typer option a command declares (its default, names, help, panel, bounds)."""
    extra: dict[str, Any] = {}
    if flag.minimum is not None:
        extra["min"] = flag.minimum
    if flag.maximum is not None:
        extra["max"] = flag.maximum
    if flag.metavar is not None:
        extra["metavar"] = flag.metavar
    if flag.number is not None:
        low, high, low_open = flag.number
        extra["parser"] = finite_number(low, high, low_open=low_open)
    return typer.Option(flag.default, *flag.names, help=help or flag.help, rich_help_panel=flag.panel, **extra)


def command_line() -> tuple[str, ...]:
    """What run.json records of the command line: the program's name and the words after it."""
    return ("dflash-eval", *sys.argv[1:])


def takes(*sections: type[Section] | Use, **named: type[Section] | Use):
    """The decorator (module docstring): the command's signature is its own parameters (its first one,
    `settings`, and the ones named in `named` excepted) followed by the flags of `sections` and `named`."""
    uses = [use(s) for s in sections]
    named_uses = {name: use(s) for name, s in named.items()}
    homes = RunSettings.sections()
    for u in uses:
        if u.section not in homes:
            raise TypeError(f"{u.section.__name__} is not a section of RunSettings; pass it by name")

    def decorate(command):
        own = [p for p in inspect.signature(command).parameters.values()
               if p.name != "settings" and p.name not in named_uses]
        try:
            hints = typing.get_type_hints(command)
        except NameError:  # a section named by a local (the tests' exercise): only the own parameters' types matter
            hints = {p.name: eval(p.annotation, command.__globals__) if isinstance(p.annotation, str) else p.annotation
                     for p in own}
        takes_settings = "settings" in inspect.signature(command).parameters
        params = [p.replace(annotation=hints.get(p.name, p.annotation), kind=inspect.Parameter.KEYWORD_ONLY)
                  for p in own]
        seen = {p.name for p in params}
        for u in [*uses, *named_uses.values()]:
            for flag in u.flags:
                if flag.field in seen:
                    raise TypeError(f"{command.__name__}: two parameters named {flag.field!r}")
                seen.add(flag.field)
                params.append(inspect.Parameter(flag.field, inspect.Parameter.KEYWORD_ONLY,
                                                default=option(flag, u.help.get(flag.field)), annotation=flag.type))

        @functools.wraps(command)
        def wrapper(**values):
            def section_of(u: Use) -> Section:
                return u.section.from_flags({f.field: values.pop(f.field) for f in u.flags})

            built = {homes[u.section]: section_of(u) for u in uses}
            mine = {name: section_of(u) for name, u in named_uses.items()}
            if takes_settings:
                built["output"] = dataclasses.replace(built.get("output", RunSettings().output), argv=command_line())
                mine["settings"] = RunSettings(**built)
            return command(**mine, **values)

        wrapper.__signature__ = inspect.Signature(params)  # what Typer reads (inspect stops at it)
        wrapper.__annotations__ = {p.name: p.annotation for p in params}
        return wrapper

    return decorate
