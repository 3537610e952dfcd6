"""`plan`'s inputs, read and checked by `run`'s own code before anything is planned: the settings
(core/settings/run_settings.RunSettings.check), the target's config (formats.validation.check_target_config), each drafter
against the target (formats.checkpoints.checked_spec; from config.json alone, every check a config can fail),
`--reference z-lab` resolved as run resolves it, and the prompts' lengths within the target's positions
(model.target.check_prompt_lengths). So plan never says `fits` for a pair or a setting run refuses, and gives
the very line run gives.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from ..core import roofline as R
from ..core.errors import InputError, read_json_object
from ..core.plan_document import Model
from ..core.spec import DrafterSpec

TEMPLATE_TOKENS = 16  # assumed chat-template tokens around a prompt when the target has no tokenizer
CHARS_PER_TOKEN = 3  # assumed without a tokenizer (code and English run at 3-4 characters per token)


def check_settings(target: str, drafters: list[str], settings, reference: str | None) -> list:
    """What `run` refuses of these settings, refused here by the same code (RunSettings.check); the drafter
    folders, `--reference z-lab` resolved as run resolves it."""
    from ..core.settings.run_settings import RunOptions
    from ..formats.files import resolve_local_or_cached

    if not drafters and not reference:
        raise InputError(None, "give at least one --drafter (or --reference)")
    RunOptions(drafters=list(drafters), out=Path("."), target=target, reference=reference,
               prompts=settings.prompts, limit=settings.limit, max_new_tokens=settings.max_new_tokens,
               anchor_batch=settings.anchor_batch, tap_chunk=settings.tap_chunk,
               generation_batch=settings.generation_batch, temperature=settings.temperature,
               samples=settings.samples, thinking=settings.thinking, numerics_check=settings.numerics_check).check()
    paths = [resolve_local_or_cached(d) for d in drafters]
    if reference == "z-lab":
        from ..formats.references import resolve_zlab_reference

        paths.append(resolve_zlab_reference(target))
    elif reference is not None:
        paths.append(resolve_local_or_cached(reference))
    return paths



def plan_target(name: str):
    """(the target as plan's Model, its config, its folder)."""
    from ..core.errors import regular_files
    from ..formats.files import TOKENIZER_FILES, resolve_local_or_cached
    from ..formats.validation import check_generation_config, check_target_config

    path = resolve_local_or_cached(name)
    regular_files([path / n for n in ("config.json", "generation_config.json", *TOKENIZER_FILES)])  # as run
    config = read_json_object(path / "config.json", missing="not a model folder: no config.json")
    text = check_target_config(config, path / "config.json")  # run's own check of the target's numbers
    check_generation_config(path, text.get("vocab_size"))  # and of its stop ids
    try:
        shape = R.model_shape(config)
    except InputError as exc:
        raise InputError(path / "config.json", exc.problem) from None
    return Model(str(path), shape.model_type, R.parameters(shape), R.weight_bytes(shape), shape, config), config, path


def drafter_spec(name: str | Path, target=None) -> DrafterSpec:
    """The run's own reader and checks (formats.checkpoints.checked_spec against the target, as `run` and
    `inspect` refuse a pair) when the checkpoint has weights; from config.json alone the same reader with the
    format's convention for the tables (speculators: copies of both) and every check a config can fail."""
    from ..formats import checkpoints as C
    from ..formats.files import INDEX_WEIGHTS, SINGLE_WEIGHTS, read_config, resolve_local_or_cached
    from ..formats.validation import config_checks, first_failure

    path = resolve_local_or_cached(str(name))
    config = read_config(path)
    fmt = C.detect_format(config, path / "config.json")
    has_weights = any(os.path.lexists(path / name) for name in (SINGLE_WEIGHTS, INDEX_WEIGHTS)) or any(
        path.glob("*.safetensors"))  # else a folder with config.json only: plan from the config
    if has_weights:
        return C.checked_spec(path, target)[0]
    if fmt == "speculators":
        body = config.get("transformer_layer_config") or {}
        reduced = (config.get("draft_vocab_size") or body.get("vocab_size")) != body.get("vocab_size")
        weights = dict.fromkeys(["embed_tokens.weight", "lm_head.weight"] + (["d2t"] if reduced else []))
    else:
        weights = {}
    spec = (C.spec_from_speculators if fmt == "speculators" else C.spec_from_zlab)(config, path, weights)
    failed = first_failure(config_checks(spec, target))
    if failed is not None:
        raise InputError(path, f"{failed.name} failed: {failed.detail}")
    return spec


def prompt_lengths(target_path: Path, config: dict, settings) -> tuple[list[int], str]:
    """Tokens of every prompt through the target's chat template, or the stated assumption without a tokenizer."""
    from ..model.target import TOKENIZER_FILES, check_prompt_lengths, load_tokenizer
    from ..pipeline.inputs import thinking_default
    from ..pipeline.prompts import load_prompts, prompt_ids

    prompts = load_prompts(settings.prompts, settings.limit)
    if not prompts:
        raise InputError(settings.prompts, "no prompts to plan for")
    thinking = thinking_default(config.get("model_type", "")) if settings.thinking is None else settings.thinking
    if any((target_path / f).is_file() for f in TOKENIZER_FILES):
        tokenizer = load_tokenizer(target_path)
        lengths = [len(prompt_ids(tokenizer, p, thinking)) for p in prompts]
        source = f"the target's tokenizer and chat template (thinking {'on' if thinking else 'off'})"
    else:
        lengths = [math.ceil(sum(len(str(m.get("content", ""))) for m in p.chat()) / CHARS_PER_TOKEN) + TEMPLATE_TOKENS
                   for p in prompts]
        source = (f"ASSUMED (no tokenizer in {target_path}): 1 token per {CHARS_PER_TOKEN} characters "
                  f"+ {TEMPLATE_TOKENS} chat-template tokens")
    check_prompt_lengths(target_path, {p.id: n for p, n in zip(prompts, lengths)}, settings.max_new_tokens)  # run's
    samples = settings.samples if settings.temperature > 0 else 1
    return [n for n in lengths for _ in range(samples)], source


