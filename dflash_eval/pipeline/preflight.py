"""Preflight: the checks of a run's arguments and files that need neither torch nor transformers, made before
either is imported (seconds on a laptop) and before any model loads (issue 48: a mistyped --reference, an
unknown target or a resume with other settings used to be refused after 9-11 s of imports and loading).

Nothing here decides anything new: `pipeline/inputs.prepare_inputs` and `RunFolder.check` make the same
checks again, in full, before the folder is touched. Preflight only answers sooner, with the same message:

- every rule of the settings (`RunSettings.check`: each section's, and those between sections);

- every --drafter and --reference (z-lab, PATH or PATH:NAME) resolved to a folder with a config.json, names
  unique, the target resolved (given, or recorded by the drafters), its config and weight headers checked
  (`inputs.resolve_drafters` with the recorded verifier for a spec, `formats/validation.check_target_files`);
  each drafter's full spec needs transformers (its RoPE is normalized by Qwen3Config) and is read later;
- a resume (--out holds a run and no --overwrite): each setting that can be known without a tokenizer or
  torch (target, generation cap, mode, final block, kernels, tap chunk, draft window, responses file, the
  explanation) compared with the recorded one, a difference refused as `RunFolder.check` refuses it, naming
  the setting. The drafters are left to the full check: a damaged checkpoint given to a folder of another
  run is refused for its damage first, as before, not for its name.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.documents.results import STATE
from ..core.errors import read_json_object
from ..core.settings.run_settings import RunSettings
from ..formats.checkpoints import recorded_verifier
from ..formats.validation import check_target_files
from .inputs import resolve_drafters
from .run_folder import different_settings, settings_differences


@dataclass(frozen=True)
class Recorded:
    """What `resolve_drafters` reads of a spec, read from config.json alone (no transformers): the verifier."""

    verifier: str | None


def read_recorded(path: Path) -> tuple[Recorded, None, None]:
    return Recorded(recorded_verifier(path)), None, None


def preflight(settings: RunSettings) -> None:
    """Refuse what can be refused without a heavy import (module docstring); returns nothing, changes nothing."""
    settings.check()
    _, target_path, _ = resolve_drafters(settings, read=read_recorded)
    check_target_files(target_path)
    if not settings.output.overwrite:
        check_resume(settings, target_path)


def cheap_settings(settings: RunSettings, target_path: Path) -> dict[str, Any]:
    """The settings a run folder records (`Inputs.settings`) that need no tokenizer, model or torch to know,
    as that function writes them."""
    given, replay = settings.inputs, settings.replay
    return {"target": str(target_path), "max_new_tokens": given.max_new_tokens, "mode": replay.mode,
            "final_block": replay.final_block, "kernels": replay.kernels, "tap_chunk": settings.batching.tap_chunk,
            "responses": str(given.responses) if given.responses else None,
            "draft_window": settings.breakdown.draft_window or None,
            "explain": True if settings.explains_gap() else None}


def check_resume(settings: RunSettings, target_path: Path) -> None:
    """--out holding a run recorded with other settings: refused by name, as RunFolder.check refuses it."""
    state_path = settings.out / STATE
    if not state_path.is_file():
        return
    state = read_json_object(state_path, missing="run state missing")
    recorded = state.get("settings")
    if not isinstance(recorded, dict):
        return  # an older run without its settings: RunFolder.check says so, after the full digest
    given = cheap_settings(settings, target_path)
    differences = settings_differences({key: recorded.get(key) for key in given}, given)
    if differences:
        raise different_settings(settings.out, "; ".join(differences))


def check_paths(values: list[str]) -> None:
    """Each checkpoint value (PATH or PATH:NAME, 'z-lab' aside) names a folder that exists: doctor's first
    check, made before its imports, whatever its --out holds (its target may come from that run)."""
    from ..formats.files import resolve_local_or_cached
    from .inputs import reference_value

    for value in values:
        raw, _ = reference_value(value)
        if raw != "z-lab":
            resolve_local_or_cached(raw)

