"""The section of where a run writes (core/settings/sections.py): its folder (--out, resumed when interrupted), whether
a folder dflash-eval wrote may be replaced (--overwrite), the continuation cache (--cache-dir), its HTML page
(--html) and the command line it records."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ..paths import writable_dir
from .sections import Section, setting


def default_cache_dir() -> Path:
    """$DFLASH_EVAL_CACHE, else $XDG_CACHE_HOME/dflash-eval, else ~/.cache/dflash-eval."""
    base = os.environ.get("DFLASH_EVAL_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "dflash-eval")
    return Path(base)

OUTPUT = "Output"


@dataclass(frozen=True)
class Output(Section):
    """--out (required by run and track), --overwrite, --cache-dir (None: ~/.cache/dflash-eval or
    $DFLASH_EVAL_CACHE, `default_cache_dir`), --html."""

    out: Optional[Path] = None
    overwrite: bool = False
    cache_dir: Optional[Path] = None
    html: bool = True
    argv: tuple[str, ...] = ()  # the command line run.json records (no flag: the command's own words)
    cached: bool = True  # no flag: False for continuations never cached (a GGUF serving target has no folder)

    FLAGS = (
        setting("out", ("--out", "-o"), Path, ..., "Output folder (created; an interrupted run in it is resumed).",
                OUTPUT),
        setting("overwrite", "--overwrite", bool, False,
                "Replace a run folder that dflash-eval wrote (a foreign folder is never touched).", OUTPUT),
        setting("cache_dir", "--cache-dir", Optional[Path], None,
                "Continuation cache (default ~/.cache/dflash-eval or $DFLASH_EVAL_CACHE).", OUTPUT),
        setting("html", "--html/--no-html", bool, True, "Write DIR/report.html at the end.", OUTPUT),
    )
    # track writes a track folder (one run per checkpoint batch), the same flags said for it
    TRACK_HELP = {
        "out": "Track folder (created; rerun the same command to continue it).",
        "overwrite": "Replace a track folder that dflash-eval wrote.",
        "html": "Rewrite DIR/track.html after every batch.",
    }

    @property
    def cache(self) -> Path | None:
        """Where continuations are cached: --cache-dir, else the user's cache (`default_cache_dir`); None when
        they are not (`cached` False)."""
        if not self.cached:
            return None
        return Path(self.cache_dir) if self.cache_dir is not None else default_cache_dir()

    def check(self) -> None:
        """--cache-dir: a folder this process can write (created when missing)."""
        if self.cache_dir is not None:
            writable_dir(Path(self.cache_dir), "--cache-dir")


OUTPUT_SECTIONS = (Output,)
