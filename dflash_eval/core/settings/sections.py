"""Settings as small typed sections: each section owns its flags (name, type, default, help, help panel),
its one check (an `InputError` naming the flag), the parsed values the stages read, and what run.json
records of it (`provenance`) and reads back (`from_provenance`: merge, resume, diff).

Why: a setting used to live in six places (an alias in cli/options.py, a default in every command's
signature, a field of RunOptions, a validator, each reader of the raw string, the provenance writer), and
the copies drifted (`tap_chunk=4096` five times; plan's `--anchor-batch` with its own help). A `Flag` is
declared once, in its section; a command names the sections it takes (`Use`, and the `takes` decorator of
cli/options.py builds its signature from their flags), so adding an option is a field and a `Flag`.

No typer here (core/ stays free of the CLI): a `Flag` and a `Use` are plain data.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

from ..errors import InputError


@dataclass(frozen=True)
class Flag:
    """One command-line setting: its flag names (`--name/--no-name` for a yes/no one), its Python type, its
    default, its help and the panel `--help` groups it under. `minimum`/`maximum`: click's range (ints);
    `parser`: the name of a cli/options.py parser for floats (`finite_number`), with its bounds."""

    field: str
    names: tuple[str, ...]
    type: Any
    default: Any
    help: str
    panel: str
    minimum: int | None = None
    maximum: int | None = None
    metavar: str | None = None
    number: tuple | None = None  # (low, high, low_open) for cli/options.finite_number; None: no float parser

    @property
    def flag(self) -> str:
        """The long name as a user types it (`--anchor-batch`; `--thinking` for `--thinking/--no-thinking`)."""
        return self.names[0].split("/")[0]


# every option that is a number of seconds (--interval, --settle, --lock-timeout, --dist-timeout) is at most
# this: time.sleep, datetime.timedelta and torch's collective timeouts overflow on 1e30 (issue 49)
SECONDS_MAX = 30 * 24 * 3600.0


def setting(field: str, names: str | tuple[str, ...], type: Any, default: Any, help: str, panel: str,
            **extra: Any) -> Flag:
    """A `Flag` from its parts: `setting("tap_chunk", "--tap-chunk", int, 4096, "...", BATCHING_PANEL, minimum=1)`."""
    return Flag(field, (names,) if isinstance(names, str) else tuple(names), type, default, help, panel, **extra)


class Section:
    """Base of the frozen dataclasses that hold one idea's settings. A subclass sets `FLAGS` (one `Flag` per
    field, in the order `--help` lists them) and may override `check` (raise `InputError` naming the flag),
    `provenance` (the dict run.json records) and `from_provenance` (its inverse)."""

    FLAGS: ClassVar[tuple[Flag, ...]] = ()

    @classmethod
    def flag(cls, field: str) -> Flag:
        for f in cls.FLAGS:
            if f.field == field:
                return f
        raise KeyError(f"{cls.__name__} has no setting {field!r}")

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        return {f.field: f.default for f in cls.FLAGS}

    @classmethod
    def pick(cls, values: dict[str, Any]):
        """The section from a flat mapping of fields (extra keys ignored, missing ones at their default)."""
        names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        return cls(**{k: v for k, v in values.items() if k in names})

    @classmethod
    def from_flags(cls, values: dict[str, Any]):
        """The section from the values a command received for its flags (the ones it does not take stay at
        their default); InputSettings overrides it (a flag not given means the run default there)."""
        return cls.pick(values)

    def check(self) -> None:
        """Refuse a value by its flag's name (InputError); nothing to check by default."""

    def provenance(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}  # type: ignore[arg-type]

    @classmethod
    def from_provenance(cls, recorded: dict[str, Any]):
        return cls.pick(recorded)


@dataclass(frozen=True)
class Use:
    """Which of a section's flags a command takes (all, `only` some, or all `without` some) and the help it
    gives one of them instead of the section's (the same meaning, said for what that command does with it:
    track and doctor evaluate offline). Defaults are never overridden: one flag, one meaning."""

    section: type[Section]
    only: tuple[str, ...] = ()
    without: tuple[str, ...] = ()
    help: dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def flags(self) -> tuple[Flag, ...]:
        return tuple(f for f in self.section.FLAGS
                     if (not self.only or f.field in self.only) and f.field not in self.without)


def use(section: type[Section] | Use) -> Use:
    return section if isinstance(section, Use) else Use(section)


def refuse(flag: Flag | str, problem: str) -> InputError:
    """The one shape of a refused setting: `--flag VALUE: problem`, no file named."""
    return InputError(None, f"{flag.flag if isinstance(flag, Flag) else flag} {problem}")


