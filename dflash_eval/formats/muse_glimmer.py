"""Read `muse_glimmer_assistant` checkpoints (Meta's `MuseGlimmerAssistantModel`, the DFlash drafter of
Muse-Glimmer) as the DFlash v1 drafter they are: the config is rewritten into the z-lab layout the DFlash
readers validate, and two weight prefixes are renamed.

What the format is, read in the programs that define and serve it:
- transformers >= 5.15 `models/muse_glimmer_assistant` (`MuseGlimmerAssistantConfig`, `MuseGlimmerAssistantModel`):
  `block_size`, `mask_token_id`, `target_layer_ids` at the top level (no `dflash_config`; class defaults 16,
  201818, [1, 13, 25, 37, 49]), `layer_types` default all `sliding_attention`, `sliding_window` 2048 always in
  force (the config has no `use_sliding_window` switch), RoPE theta default 500000; no `vocab_size` (embedding
  and lm_head are the target's); weights `encoder.fc` and `encoder.output_norm_enc` (the context projection and
  its norm: our `fc` and `hidden_norm`), `layers.*`, `norm`; `MuseGlimmerAssistantAttention.is_causal = False`
  and bidirectional masks on every layer.
- vLLM 0.33 `config/speculative.py`: `MuseGlimmerAssistantModel` in the draft's architectures selects
  method "dflash" (served by `qwen3_dflash.py`), with `dflash_config.causal = False` injected: in-block
  attention bidirectional on every layer.
- z-lab `dflash/model_mlx.py` `_meta_v1_config_kwargs` / `_remap_meta_v1_weights`: the same keys at the top
  level, `vocab_size` default 202048, `is_causal=False` ("vLLM's dflash_config sets causal=False for this
  head"), `encoder.fc.` -> `fc.`, `encoder.output_norm_enc.` -> `hidden_norm.`.

So the rewritten config carries `dflash_config.causal = false` (what vLLM reads) and a top-level `is_causal =
false` (what z-lab's rules read): every `--semantics` choice then applies its own rules to the same declared
keys (speculators' rules read neither, and run sliding layers causal from the anchor). The window follows
z-lab's and vLLM's rule (q - k < W); transformers' bidirectional sliding mask admits one row more
(`sliding_window_bidirectional_overlay`: |q - k| <= W), so its logits at W equal ours at W + 1 (noted).
z-lab's MLX `bind` copies a Muse-Glimmer target's own `output_multiplier` / `final_logit_softcapping` onto a
drafter that declares neither; the Qwen-class targets dflash-eval loads have neither, so nothing is copied.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

from ..core.errors import InputError
from ..core.spec import DrafterSpec

ARCHITECTURE = "MuseGlimmerAssistantModel"
MODEL_TYPE = "muse_glimmer_assistant"
LAYOUT = "muse_glimmer_assistant"
WEIGHT_RENAMES = (("encoder.fc.", "fc."), ("encoder.output_norm_enc.", "hidden_norm."))
# MuseGlimmerAssistantConfig's class defaults (transformers 5.24), and z-lab's MLX vocabulary default
DEFAULTS = {"block_size": 16, "mask_token_id": 201818, "target_layer_ids": [1, 13, 25, 37, 49],
            "sliding_window": 2048, "vocab_size": 202048}
DEFAULT_THETA = 500000.0
NOTE = ("muse_glimmer_assistant: in-block attention bidirectional on every layer (vLLM 0.33 config/speculative.py "
        "injects dflash_config.causal = false; z-lab's MLX adapter sets is_causal = False; transformers' "
        "MuseGlimmerAssistantAttention.is_causal = False); weights encoder.fc -> fc, encoder.output_norm_enc -> "
        "hidden_norm; window q - k < W (z-lab, vLLM; transformers' bidirectional sliding mask admits |q - k| <= W)")

T = TypeVar("T")


def is_muse_glimmer(config: dict[str, Any]) -> bool:
    archs = config.get("architectures")
    return config.get("model_type") == MODEL_TYPE or (isinstance(archs, list) and ARCHITECTURE in archs)


def zlab_config(config: dict[str, Any], path: Path) -> tuple[dict[str, Any], list[str]]:
    """(the z-lab-layout config the DFlash reader validates, the notes for the spec)."""
    for key in ("dflash_config", "speculators_model_type"):
        if key in config:
            raise InputError(path, f"config key {key!r} in a {MODEL_TYPE} config: not part of the format "
                                   "(MuseGlimmerAssistantConfig keeps block_size, mask_token_id and "
                                   "target_layer_ids at the top level); ambiguous, remove one")
    for key in ("is_causal", "causal"):
        if config.get(key) is True:
            raise InputError(path, f"config key {key!r}=true in a {MODEL_TYPE} config: every reference runs this "
                                   "drafter bidirectional (none reads a causal switch for it)")
    out = {k: v for k, v in config.items() if k not in ("model_type", "architectures", "causal", *DEFAULTS)}
    notes = [NOTE]
    dflash: dict[str, Any] = {"causal": False}
    for key in ("block_size", "mask_token_id", "target_layer_ids"):
        dflash[key] = config[key] if config.get(key) is not None else DEFAULTS[key]
        if config.get(key) is None:
            notes.append(f"{key} absent: MuseGlimmerAssistantConfig's default {DEFAULTS[key]}")
    for key, why in (("vocab_size", "z-lab's MLX adapter default (Muse-Glimmer's vocabulary)"),
                     ("sliding_window", "MuseGlimmerAssistantConfig's default")):
        out[key] = config[key] if config.get(key) is not None else DEFAULTS[key]
        if config.get(key) is None:
            notes.append(f"{key} absent: {why} {DEFAULTS[key]}")
    num_layers = config.get("num_hidden_layers")
    if config.get("layer_types") is None and isinstance(num_layers, int) and not isinstance(num_layers, bool):
        out["layer_types"] = ["sliding_attention"] * num_layers
        notes.append("layer_types absent: MuseGlimmerAssistantConfig's default (every layer sliding)")
    if config.get("rope_parameters") is None and config.get("rope_theta") is None:
        out["rope_parameters"] = {"rope_type": "default", "rope_theta": DEFAULT_THETA}
        notes.append(f"RoPE absent: MuseGlimmerAssistantConfig's default theta {DEFAULT_THETA:g}")
    out.update(architectures=["DFlashDraftModel"], dflash_config=dflash, is_causal=False, use_sliding_window=True)
    return out, notes


def finish_spec(spec: DrafterSpec, notes: list[str]) -> DrafterSpec:
    """The z-lab spec the reader built, marked as this layout with its weight names and notes."""
    kept = tuple(n for n in spec.config_notes if not n.startswith("dflash_config.causal="))  # said in NOTE instead
    return replace(spec, layout=LAYOUT, weight_renames=WEIGHT_RENAMES, config_notes=(*kept, *notes))


def renamed(by_name: dict[str, T]) -> dict[str, T]:
    """Checkpoint names -> the native drafter's (`_remap_meta_v1_weights`); a name present under both is refused."""
    out: dict[str, T] = {}
    for name, value in by_name.items():
        new = next((native + name[len(old):] for old, native in WEIGHT_RENAMES if name.startswith(old)), name)
        if new in out:
            raise InputError(new, f"tensor {new!r} appears twice in the {MODEL_TYPE} checkpoint (as {name!r} too)")
        out[new] = value
    return out
