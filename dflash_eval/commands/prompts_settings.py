"""`prompts show`'s own section (core/settings/sections.py): which prompts it prints and through which chat
template. The names echo run's (--target, --thinking, --limit, --prompt-field) but the meanings are a view's
(--target only for its tokenizer, --limit 3 by default, no seed), so they live beside the command;
cli/prompts.py takes the section whole (cli/options.takes)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..core.settings.sections import Section, setting

OPTIONS = "Options"  # Typer's own panel: prompts show has few flags


@dataclass(frozen=True)
class PromptsShown(Section):
    """What `prompts show SOURCE` prints: one prompt or the first N, rendered with a target's chat template."""

    prompt_id: Optional[str] = None
    target: Optional[str] = None
    thinking: Optional[bool] = None
    limit: int = 3
    prompt_field: Optional[str] = None

    FLAGS = (
        setting("prompt_id", "--id", Optional[str], None, "Only this prompt.", OPTIONS),
        setting("target", ("--target", "-t"), Optional[str], None,
                "Tokenizer whose chat template to apply (default: the demo target's).", OPTIONS),
        setting("thinking", "--thinking/--no-thinking", Optional[bool], None,
                "The chat template's thinking flag (default: the target family's, as `run` uses it).", OPTIONS),
        setting("limit", "--limit", int, 3, "How many prompts to show (without --id).", OPTIONS, minimum=1),
        setting("prompt_field", "--prompt-field", Optional[str], None,
                "With hf:REPO: the column holding the prompt.", OPTIONS),
    )
