"""`plan`'s own section (core/settings/sections.py): the target it reads the configs of, the accelerator it
plans on and whether it plans `doctor` too. No other command shares them in this form (plan's --target is
required and read from configs alone), so they live beside the command; cli/plan.py takes the section whole
with the run sections it shares (cli/options.takes)."""

from __future__ import annotations

from dataclasses import dataclass

from ..core.settings.sections import Section, setting

OPTIONS = "Options"  # Typer's own panel, where plan's own flags have always been listed


@dataclass(frozen=True)
class PlanChoices(Section):
    """What `plan` plans: which target (required), on which accelerator, and doctor as well or not."""

    target: str = ""
    accelerator: str = "h200"
    doctor: bool = False

    FLAGS = (
        setting("target", ("--target", "-t"), str, ..., "Target folder or HF cache name (its config.json; its "
                "tokenizer when present).", OPTIONS),
        setting("accelerator", "--accelerator", str, "h200", "h100, h200, a100 or b200 (published bf16 peak, "
                "bandwidth, memory).", OPTIONS),
        setting("doctor", "--doctor/--no-doctor", bool, False, "Also plan `doctor` on the first drafter.", OPTIONS),
    )
