"""The thinking flag a run sends to the target's chat template, and where it came from: one rule for `run`,
`doctor`, `track`, `plan` and `prompts show` (so that `prompts show` prints exactly what `run` sends)."""

from __future__ import annotations

import json
from pathlib import Path


def thinking_default(model_type: str) -> bool:
    # z-lab's Qwen3 b16 drafters were trained without thinking; Qwen3.5/3.6 (and Next) with it (primer 7)
    return model_type in ("qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text", "qwen3_next")


def thinking_source(given: bool | None, model_type: str) -> str:
    return "given (--thinking/--no-thinking)" if given is not None else f"family default for {model_type or 'this target'}"


def target_thinking(target_path: Path, given: bool | None) -> tuple[bool, str]:
    """(flag, source) for this target: `given` when the user gave --thinking/--no-thinking, else the family's."""
    model_type = json.loads((Path(target_path) / "config.json").read_text()).get("model_type", "")
    return (thinking_default(model_type) if given is None else bool(given)), thinking_source(given, model_type)
