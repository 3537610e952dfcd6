"""The sections of three Results commands (core/settings/sections.py): `diff`'s fairness and statistics,
`show`'s choice of blocks and `report`'s view. Each command's flags are its section's (cli/options.takes), and the section hands
the library its keywords whole, so no call site lists them again. Apart from commands/diff.py so that the CLI
builds its flags without importing the comparison."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Optional

from ..core.errors import InputError
from ..core.settings.sections import Section, setting
from ..core.settings.seeds import choice_seed, statistics_seed

OPTIONS = "Options"  # Typer's own panel: these commands have few flags


@dataclass(frozen=True)
class DiffSettings(Section):
    """`diff A B`: compare even when the settings differ (--force), the share of differing continuation tokens
    still fair, the prompts shown per direction, the seed of the bootstrap and the permutation test, and
    whether unfinished runs are read (--partial)."""

    force: bool = False
    max_mismatch: float = 0.001
    top: int = 3
    seed: int = 0
    partial: bool = False

    FLAGS = (
        setting("force", "--force", bool, False, "Compare even when the settings differ (loudly flagged).", OPTIONS),
        setting("max_mismatch", "--max-continuation-mismatch", float, 0.001, "Largest share of differing target "
                "continuation tokens accepted as fair.", OPTIONS, number=(0, 1, False)),
        setting("top", "--top", int, 3, "Most regressed and most improved prompts to show.", OPTIONS, minimum=0),
        statistics_seed(OPTIONS),  # core/settings/seeds.py: --seed's statistics family
        setting("partial", "--partial", bool, False, "Allow unfinished runs (the prompts done so far, under a "
                "banner).", OPTIONS),
    )

    def keywords(self) -> dict[str, Any]:
        """commands.diff.diff's keywords, every field under its own name."""
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class ShowSettings(Section):
    """`show RUN`: which blocks: one prompt, one drafter, and one way of choosing (the K worst, the first N,
    K at random with --seed, or only the flagged ones); --partial reads an unfinished run."""

    prompt: Optional[str] = None
    drafter: Optional[str] = None
    worst: Optional[int] = None
    first: Optional[int] = None
    sample: Optional[int] = None
    seed: int = 0
    partial: bool = False
    flagged: bool = False

    FLAGS = (
        setting("prompt", "--prompt", Optional[str], None, "Only this prompt id.", OPTIONS),
        setting("drafter", "--drafter-name", Optional[str], None, "Only this drafter (its name in the run).", OPTIONS),
        setting("worst", "--worst", Optional[int], None, "The K blocks with the shortest accepted prefix, taken "
                "across prompts (each prompt's worst before any prompt's second).", OPTIONS, minimum=0, metavar="K"),
        setting("first", "--first", Optional[int], None, "The first N blocks (default 10 unless --prompt is given).",
                OPTIONS, minimum=1, metavar="N"),
        setting("sample", "--random", Optional[int], None, "K blocks at random.", OPTIONS, minimum=1, metavar="K"),
        choice_seed(OPTIONS),  # core/settings/seeds.py: --seed's choice family
        setting("partial", "--partial", bool, False, "On an unfinished run: the prompts done so far, under a banner.",
                OPTIONS),
        setting("flagged", "--flagged", bool, False, "Only the blocks a repetition detector flagged, worst first "
                "(with --worst K: the K worst of them).", OPTIONS),
    )

    def check(self) -> None:
        """One way of choosing blocks; --flagged orders worst first, which --first N would not."""
        chosen = [name for name, value in (("--worst", self.worst), ("--first", self.first), ("--random", self.sample))
                  if value is not None]
        if len(chosen) > 1:
            raise InputError(None, f"{' and '.join(chosen)} choose blocks in different ways: give one of them")
        if self.flagged and self.first is not None:
            raise InputError(None, "--flagged shows the flagged blocks worst first; --first N would take them in walk "
                                   "order: give --worst N instead")

    def selection(self) -> dict[str, Any]:
        """core.samples.select_blocks' keywords: the first 10 blocks when nothing narrows the choice."""
        first = self.first
        if first is None and self.worst is None and self.sample is None and self.prompt is None and not self.flagged:
            first = 10
        return {"prompt": self.prompt, "drafter": self.drafter, "first": first, "worst": self.worst,
                "sample": self.sample, "seed": self.seed, "flagged": self.flagged}


@dataclass(frozen=True)
class ReportSettings(Section):
    """`report RUN`: the worst blocks shown per drafter, whether an unfinished run is read (--partial) and the
    summary as markdown. (--json and --html-file, the output forms diff and report word each their own way,
    stay in the command.)"""

    worst: int = 2
    partial: bool = False
    markdown: bool = False

    FLAGS = (
        setting("worst", "--worst", int, 2, "Worst blocks shown per drafter.", OPTIONS, minimum=0, metavar="N"),
        setting("partial", "--partial", bool, False, "On an unfinished run: show the prompts done so far, under a "
                "banner.", OPTIONS),
        setting("markdown", "--markdown", bool, False, "Print the same summary as markdown tables, to paste into an "
                "issue or a PR.", OPTIONS),
    )
