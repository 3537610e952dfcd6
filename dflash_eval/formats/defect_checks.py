"""The checks engines added after their own bugs that a config.json answers (core/checkpoint_defects.py has the
rules and the issues behind them): a tap on the target's final layer, block_size at two levels, a recorded draft
length past the trained block, a serving window shorter than the one the checkpoint names. `inspect` shows them
before any run, as warnings: the checkpoint is evaluated as it reads, and the check says how an engine that
reads it otherwise serves it. The tensor checks (the MASK row, fc in fp16) are model/probe_checks.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..core import checkpoint_defects as rules
from ..core.spec import DrafterSpec
from .validation import Check, TargetInfo


def block_size_levels(config: dict[str, Any], fmt: str) -> tuple[dict[str, int], str]:
    """Where a config sets block_size (level -> value) and the level dflash-eval reads."""
    values: dict[str, int] = {}
    candidates = [("block_size", config.get("block_size"))]
    if fmt == "zlab":
        candidates.append(("dflash_config.block_size", (config.get("dflash_config") or {}).get("block_size")))
    if fmt == "speculators":
        body = config.get("transformer_layer_config") or {}
        candidates.append(("transformer_layer_config.block_size", body.get("block_size") if isinstance(body, dict) else None))
    for where, value in candidates:
        if isinstance(value, int) and not isinstance(value, bool):
            values[where] = value
    read = "dflash_config.block_size" if "dflash_config.block_size" in values else "block_size"
    return values, read


def trained_window(spec: DrafterSpec) -> tuple[int | None, str]:
    """The context window the checkpoint names: its max_position_embeddings (the 40960 of Luce-Org/lucebox #740)."""
    return spec.max_position_embeddings, "max_position_embeddings"


def defect_checks(spec: DrafterSpec, config: dict[str, Any], target: TargetInfo | None, *,
                  serving_window: int | None = None) -> list[Check]:
    """The config-level checks (module docstring), each a warning when it fires."""
    layers = target.num_layers if target is not None else spec.num_target_layers
    checks = []

    def add(name: str, result: tuple[bool, str]) -> None:
        checks.append(Check(name, result[0], result[1], severity="warning"))

    add("no tap on the target's final layer", rules.final_layer_tap(spec.taps, layers))
    values, read = block_size_levels(config, spec.format)
    add("block_size at one level", rules.block_levels(values, read))
    if spec.speculative_tokens is not None:
        add("recorded draft length within the block",
            rules.draft_length(spec.speculative_tokens, spec.block_size - 1, "speculators_config speculative_tokens"))
    window, source = trained_window(spec)
    add("serving window covers the trained window", rules.serving_window(serving_window, window, source))
    return checks


def config_of(directory: str | Path) -> dict[str, Any]:
    """The checkpoint's config.json as read (muse_glimmer's and DFlash2's own keys included)."""
    from .files import read_config

    return read_config(Path(directory))
