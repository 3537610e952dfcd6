"""Progress of the long phases (generate, prompts, target pass, variants) as the library's stages report it.

On a terminal: Rich bars with ETA, redrawn in place. Anywhere else (SLURM, nohup, `> log`, CI) a bar is
never drawn until it is finished, so a 15-minute phase would leave the log silent: there the reporter
prints one plain line at the start of a phase, then one whenever EVERY_SECONDS have passed or another
EVERY_PERCENT of the phase is done, and one at its end: `prompts 12/164 (7%), 3m05s elapsed, eta 38m`.
"""

from __future__ import annotations

import time
from typing import Callable

from rich.console import Console

EVERY_SECONDS = 60.0  # a plain line at least this often while a phase runs (when anything advanced)
EVERY_PERCENT = 10  # ... and whenever another 10% of the phase is done


def reporter_for(console: Console):
    """Bars on a terminal, plain periodic lines elsewhere (the console decides what it writes to)."""
    return RichReporter(console) if console.is_terminal else LineReporter(console)


def duration(seconds: float) -> str:
    """45s, 3m05s, 1h02m: exact enough for a log line, short enough to read at a glance."""
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def eta(seconds: float) -> str:
    """The remaining time, rounded as a person says it: 40s, 38m, 1h05m."""
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{round(seconds / 60)}m"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def progress_line(name: str, done: int, total: int, elapsed: float) -> str:
    """`prompts 12/164 (7%), 3m05s elapsed, eta 38m` (no eta before the first item is done)."""
    text = f"{name} {done}/{total} ({100 * done // total if total else 100}%), {duration(elapsed)} elapsed"
    if done >= total:
        return text + ", done"
    if done:
        text += f", eta {eta(elapsed / done * (total - done))}"
    return text


class LineReporter:
    """Plain progress lines for logs: start, every EVERY_SECONDS or EVERY_PERCENT, end."""

    def __init__(self, console: Console, *, every_seconds: float = EVERY_SECONDS, every_percent: int = EVERY_PERCENT,
                 clock: Callable[[], float] = time.monotonic):
        self.console, self.every_seconds, self.every_percent, self.clock = console, every_seconds, every_percent, clock
        self.phases: dict[str, dict] = {}

    def phase(self, name: str, total: int) -> None:
        if not total:
            return
        now = self.clock()
        self.phases[name] = {"total": total, "done": 0, "start": now, "printed": now, "percent": 0}
        self._print(name)

    def advance(self, name: str, detail: str = "") -> None:
        state = self.phases.get(name)
        if state is None:
            return
        state["done"] += 1
        now = self.clock()
        percent = 100 * state["done"] // state["total"]
        if (state["done"] >= state["total"] or now - state["printed"] >= self.every_seconds
                or percent >= state["percent"] + self.every_percent):
            self._print(name)

    def _print(self, name: str) -> None:
        state = self.phases[name]
        now = self.clock()
        state["printed"] = now
        state["percent"] = 100 * state["done"] // state["total"] // self.every_percent * self.every_percent
        self.console.print(progress_line(name, state["done"], state["total"], now - state["start"]),
                           markup=False, highlight=False, soft_wrap=True)

    def note(self, message: str) -> None:
        from ..core.safe_text import printable

        self.console.print(printable(message), markup=False, highlight=False, soft_wrap=True)

    def close(self) -> None:
        """Nothing is drawn in place, so nothing to take down."""


class RichReporter:
    """Progress bars with ETA for the long phases of a run (a terminal only)."""

    def __init__(self, console: Console):
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.console = console
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(), console=console,
                                 transient=False)
        self.tasks: dict[str, int] = {}

    def phase(self, name: str, total: int) -> None:
        if total:
            self.progress.start()
            self.tasks[name] = self.progress.add_task(name, total=total)

    def advance(self, name: str, detail: str = "") -> None:
        self.progress.advance(self.tasks[name])

    def note(self, message: str) -> None:
        from ..core.safe_text import safe

        self.console.print(safe(message))

    def close(self) -> None:
        self.progress.stop()
