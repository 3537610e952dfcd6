"""TensorBoard scalars for a track (`--tensorboard DIR`), written with torch's SummaryWriter at each
checkpoint's training step, so the acceptance curve sits beside the trainer's own loss curves."""

from __future__ import annotations

from pathlib import Path
from typing import Any


class ScalarLog:
    def __init__(self, directory: Path):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(directory))

    def write(self, row: dict[str, Any], reference_tau: float | None) -> None:
        """A checkpoint's numbers at its step (a reference or a checkpoint without a step has no x: skipped)."""
        step = row.get("step")
        if row.get("role") != "checkpoint" or step is None:
            return
        m = row["metrics"]
        scalars = {"dflash/tau_macro": m.get("tau_macro"), "dflash/tau_micro": m.get("tau_micro"),
                   "dflash/repetition_share": row.get("repetition_share"),
                   "dflash/reference_tau_macro": reference_tau,
                   "dflash/gap_to_reference": (m["tau_macro"] - reference_tau
                                               if m.get("tau_macro") is not None and reference_tau is not None else None)}
        if m.get("tau_macro_ci"):
            scalars["dflash/tau_macro_ci_low"], scalars["dflash/tau_macro_ci_high"] = m["tau_macro_ci"]
        for slot, value in enumerate(m.get("reach") or m.get("expected_reach") or [], 1):
            scalars[f"dflash/reach/slot_{slot:02d}"] = value
        for tag, value in scalars.items():
            if value is not None:
                self.writer.add_scalar(tag, value, global_step=step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()
