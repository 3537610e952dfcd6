"""The section of where a run writes (core/settings/sections.py): its folder (--out, resumed when interrupted), whether
a folder dflash-eval wrote may be replaced (--overwrite) and the continuation cache (--cache-dir)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ..paths import writable_dir
from .sections import Section, setting

OUTPUT = "Output"


@dataclass(frozen=True)
class Output(Section):
    """--out (required by run and track), --overwrite, --cache-dir (None: ~/.cache/dflash-eval or
    $DFLASH_EVAL_CACHE, core/settings/run_settings.default_cache_dir)."""

    out: Optional[Path] = None
    overwrite: bool = False
    cache_dir: Optional[Path] = None

    FLAGS = (
        setting("out", ("--out", "-o"), Path, ..., "Output folder (created; an interrupted run in it is resumed).",
                OUTPUT),
        setting("overwrite", "--overwrite", bool, False,
                "Replace a run folder that dflash-eval wrote (a foreign folder is never touched).", OUTPUT),
        setting("cache_dir", "--cache-dir", Optional[Path], None,
                "Continuation cache (default ~/.cache/dflash-eval or $DFLASH_EVAL_CACHE).", OUTPUT),
    )
    # track writes a track folder (one run per checkpoint batch), the same flags said for it
    TRACK_HELP = {
        "out": "Track folder (created; rerun the same command to continue it).",
        "overwrite": "Replace a track folder that dflash-eval wrote.",
    }

    def check(self) -> None:
        """--cache-dir: a folder this process can write (created when missing)."""
        if self.cache_dir is not None:
            writable_dir(Path(self.cache_dir), "--cache-dir")


OUTPUT_SECTIONS = (Output,)
