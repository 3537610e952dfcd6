"""What a long command tells its caller as it goes: `Reporter`, the progress callbacks every stage reports to
(no-ops here; the CLI draws bars on a terminal and plain lines in a log: cli/progress.py), and the test hook
that slows a run down between prompts."""

from __future__ import annotations

import os


class Reporter:
    """Progress callbacks (no-ops here; the CLI draws Rich progress bars)."""

    def phase(self, name: str, total: int) -> None: ...

    def advance(self, name: str, detail: str = "") -> None: ...

    def note(self, message: str) -> None: ...


def pause_after_prompt() -> None:
    """Test hook: `DFLASH_EVAL_SLOW_PROMPTS=S` sleeps S seconds after each prompt of run and track, leaving
    the resume tests time to kill the process between prompts. Unset, it does nothing."""
    seconds = float(os.environ.get("DFLASH_EVAL_SLOW_PROMPTS", "0") or 0)
    if seconds:
        import time

        time.sleep(seconds)
