"""The track's own section (core/settings/sections.py): how it follows a training run. Apart from
training/commands/track.py so that the CLI builds `track`'s flags without importing torch."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ...core.errors import InputError
from ...core.settings.sections import SECONDS_MAX, Section, setting

TRACKING = "Tracking (polling, batches, logs)"


@dataclass(frozen=True)
class Tracking(Section):
    """How a track follows a training run: once, or polling for new checkpoints (--watch) every --interval
    seconds, a new one evaluated once it looks the same --settle seconds apart; up to --batch checkpoints on
    one target pass per prompt; the curve also written as TensorBoard scalars (--tensorboard DIR)."""

    watch: bool = False
    interval: float = 60.0
    settle: float = 2.0
    batch: int = 8
    tensorboard: Optional[Path] = None

    FLAGS = (
        setting("watch", "--watch", bool, False, "Keep polling for new checkpoints until interrupted (Ctrl-C).",
                TRACKING),
        setting("interval", "--interval", float, 60.0, "Seconds between polls with --watch.", TRACKING,
                number=(0, SECONDS_MAX, True)),
        setting("settle", "--settle", float, 2.0,
                "Seconds between the two looks that must find a new checkpoint unchanged before it is evaluated.",
                TRACKING, number=(0, SECONDS_MAX, False)),
        setting("batch", "--batch", int, 8, "Checkpoints evaluated together on one target pass per prompt.",
                TRACKING, minimum=1),
        setting("tensorboard", "--tensorboard", Optional[Path], None,
                "Also write the scalars (tau, interval, reach per slot, repetition, gap) to this TensorBoard log "
                "folder.", TRACKING),
    )

    def check(self) -> None:
        import math

        for name, value, low in (("--interval", self.interval, 0.0), ("--settle", self.settle, 0.0)):
            # NaN compares false with everything, inf reached time.sleep after the checkpoints were evaluated and
            # 1e30 overflowed it (issue 49): the flags' parser has the same bounds (cli/options.finite_number)
            if not (math.isfinite(value) and (value > low if name == "--interval" else value >= low)
                    and value <= SECONDS_MAX):
                raise InputError(None, f"{name} must be a finite number {'>' if name == '--interval' else '>='} 0 "
                                       f"seconds and at most {SECONDS_MAX:g} (got {value})")
        if self.batch < 1:
            raise InputError(None, "--batch must be >= 1")
        if self.tensorboard is not None:
            import importlib.util

            from ...core.paths import output_path

            output_path(Path(self.tensorboard), "--tensorboard", folder=True)
            if importlib.util.find_spec("tensorboard") is None:
                raise InputError(None, "--tensorboard needs the tensorboard package (pip install tensorboard)")
