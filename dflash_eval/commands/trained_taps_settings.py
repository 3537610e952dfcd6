"""trained-taps' own section (core/settings/sections.py): the training data it reads and how. Apart from
commands/trained_taps.py so that the CLI builds its flags without importing torch; doctor --trained-taps
builds one too (doctor/commands/trained_taps.py)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Optional

from ..core.errors import InputError
from ..core.settings.sections import SECONDS_MAX, Section, setting
from ..core.settings.seeds import statistics_seed

TRAINED_TAPS = "Training data"


@dataclass(frozen=True)
class TrainedTapsSettings(Section):
    """What trained-taps reads and how: the training data (`data`, the command's argument), the target it was
    extracted from, a drafter trained on it, which samples, the layers stored, the noise floor's samples, the
    dtype of our reference taps, how long to wait for a file a writer holds, the bootstrap's seed. The device
    and the anchors per forward are the run's (RunSettings: --device, --anchor-batch)."""

    data: Optional[Path] = None
    target: str = ""
    drafter: Optional[str] = None  # "PATH" or "PATH:NAME"
    limit: Optional[int] = 64  # the first N samples of the split (None: all of them)
    split: Optional[str] = None  # default: validation where the trainer has one, else all
    train_ratio: float = 0.9
    layer_ids: Optional[str] = None  # in the data's own numbering (speculators: vLLM aux ids), "2,14,27"
    noise_samples: int = 8  # samples the bf16-vs-fp32 noise floor is measured on
    dtype: str = "float32"  # our reference taps; the floor pass runs the other of bfloat16 / float32
    lock_timeout: float = 10.0
    seed: int = 0  # the bootstrap of the paired gap (trained vs our taps); the samples are the first N, not drawn

    FLAGS = (
        setting("target", ("--target", "-t"), str, ..., "The target the data was extracted from (folder or HF cache "
                "name).", TRAINED_TAPS),
        setting("drafter", ("--drafter", "-d"), Optional[str], None, "A drafter trained on the data: its layer ids, "
                "and its acceptance on the stored taps next to ours.", TRAINED_TAPS),
        setting("limit", "--limit", Optional[int], 64, "The first N samples of the split (each one target pass).",
                TRAINED_TAPS, minimum=1),
        setting("split", "--split", Optional[str], None, "validation (default where the trainer has one: "
                "speculators' last 10%), train or all.", TRAINED_TAPS),
        setting("train_ratio", "--train-ratio", float, 0.9, "The trainer's train share (speculators "
                "--train-data-ratio).", TRAINED_TAPS, number=(0, 1, False)),
        setting("layer_ids", "--layer-ids", Optional[str], None, "The stored layers in the data's own numbering "
                "(speculators: vLLM aux ids, as aux_hidden_state_layer_ids; others: z-lab ids), when neither the "
                "data nor -d says.", TRAINED_TAPS),
        setting("noise_samples", "--noise-samples", int, 8, "Samples the bf16-vs-fp32 noise floor is measured on "
                "(one more target pass each, in the other dtype).", TRAINED_TAPS, minimum=1),
        setting("dtype", "--dtype", str, "float32", "Our reference taps: float32 (exact) or bfloat16; the noise "
                "floor's pass runs the other.", TRAINED_TAPS),
        setting("lock_timeout", "--lock-timeout", float, 10.0, "Seconds to wait for a hidden-state file whose .lock "
                "a writer still holds.", TRAINED_TAPS, number=(0, SECONDS_MAX, False)),
        statistics_seed(TRAINED_TAPS),  # the bootstrap of the gap; the samples are the split's first N, never drawn
    )

    @cached_property
    def layers(self) -> tuple[int, ...] | None:
        """--layer-ids parsed once (None: from the data or the drafter)."""
        if self.layer_ids is None:
            return None
        try:
            return tuple(int(part) for part in str(self.layer_ids).split(","))
        except ValueError:
            raise InputError(None, f"--layer-ids {self.layer_ids!r}: expected integers separated by commas "
                                   "(e.g. 2,14,27)") from None

    def check(self) -> None:
        _ = self.layers
        if self.dtype not in ("float32", "bfloat16"):
            raise InputError(None, f"--dtype {self.dtype!r}: trained-taps compares against float32 or bfloat16 taps")
        if self.noise_samples < 1:
            raise InputError(None, "--noise-samples must be >= 1 (the noise floor is what every slot is judged against)")
