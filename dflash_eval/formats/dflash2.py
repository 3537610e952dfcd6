"""Read DFlash2 drafter checkpoints: the DFlash-specific part `checkpoints.read_spec` hands over.

Why apart from `checkpoints.py`: a DFlash2 drafter is a DFlash drafter (same body, taps, block, mask, attention
keys) plus grouped dynamic causal convolutions around each layer's attention and MLP and a candidate
selector that reranks each slot's unary top-K. So a DFlash2 config is split here into the DFlash config the
DFlash readers already validate, and the DFlash2 keys, which are validated here and put on the spec.

Two layouts, read from the packages themselves:
- speculators 0.9.0 (`speculators/models/dflash2/config.py`, `DFlash2SpeculatorConfig`):
  `speculators_model_type: "dflash2"`, top-level `conv_kernel_size` (default 2), `conv_group_size` (16),
  `selector_rank` (256), `selector_top_k` (16), `sliding_window_non_causal` default **true** (DFlash's is
  false). `DFlash2DraftModel.__init__` (`core.py`) refuses `draft_vocab_size != vocab_size` and a top-K
  above the vocabulary; `save_pretrained` writes no `embed_tokens`/`lm_head` (the target's are used).
- the layout vLLM 0.33.0 serves (`model_executor/models/qwen3_dflash2.py`): z-lab's flat config with
  `architectures: ["DFlash2DraftModel"]` and `dflash_config` holding `conv_kernel_size`, `conv_group_size`,
  `selector_rank`, `selector_top_k` (all four required: `int(draft_config[...])`) and optionally
  `input_embedding_scale` (block embeddings), `output_multiplier` and `final_logit_softcapping` (the unary
  candidates' logits: multiplier, then the cap, `LogitsProcessor.get_top_k_tokens`; a cap <= 0 is none),
  read from `dflash_config` only. vLLM has no other reference for this layout (z-lab's 0.1.0 release has
  no DFlash2), so its attention follows vLLM's rules (`semantics.py`, "vllm") by default.
Weights (both layouts, same names): `layers.{i}.{attention,mlp}_conv.base_kernel` [2, K, H] and
`.kernel_projection.weight` [2 K H/g, H]; `candidate_selector.{predecessor,successor}_codebook` [V, R] and
`candidate_selector.hidden_projection.weight` [R, H].
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from ..core.attention import Scales
from ..core.errors import InputError
from ..core.semantics import apply_semantics
from ..core.spec import DrafterSpec

ARCHITECTURE = "DFlash2DraftModel"
KEYS = ("conv_kernel_size", "conv_group_size", "selector_rank", "selector_top_k")
# DFlash2SpeculatorConfig's field defaults (speculators 0.9.0 models/dflash2/config.py)
SPECULATORS_DEFAULTS = {"conv_kernel_size": 2, "conv_group_size": 16, "selector_rank": 256, "selector_top_k": 16}
SCALE_KEYS = ("input_embedding_scale", "output_multiplier", "final_logit_softcapping")
# speculators types that are neither DFlash nor DFlash2: refused by name
OTHER_TYPES = {"dspark": "DSpark (Markov logit-bias head)", "xpress": "Xpress", "eagle3": "EAGLE-3",
               "peagle": "P-EAGLE", "eagle": "EAGLE", "mtp": "MTP"}


def is_dflash2(config: dict[str, Any]) -> bool:
    archs = config.get("architectures")
    return config.get("speculators_model_type") == "dflash2" or (
        isinstance(archs, list) and ARCHITECTURE in archs and config.get("speculators_model_type") is None)


def _positive_int(value: Any, name: str, path: Path) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(path, f"config key {name!r}={value!r} is not a positive integer (DFlash2)")
    return value


def base_config(config: dict[str, Any], path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the DFlash config the DFlash readers validate, the DFlash2 settings read here).

    The settings hold the four keys, the layout ("speculators" / "vllm") and notes for the spec."""
    config = dict(config)
    notes: list[str] = []
    if config.get("speculators_model_type") == "dflash2":
        layout = "speculators"
        values = {}
        for key in KEYS:
            if config.get(key) is None:
                values[key] = SPECULATORS_DEFAULTS[key]
                notes.append(f"{key} absent: DFlash2SpeculatorConfig's default {values[key]}")
            else:
                values[key] = _positive_int(config[key], key, path)
            config.pop(key, None)
        if config.get("sliding_window_non_causal") is None:
            config["sliding_window_non_causal"] = True
            notes.append("sliding_window_non_causal absent: DFlash2SpeculatorConfig's default true")
        config["speculators_model_type"] = "dflash"
        config["architectures"] = ["DFlashDraftModel"]
    else:
        layout = "vllm"
        dflash = config.get("dflash_config")
        if not isinstance(dflash, dict):
            raise InputError(path, "missing config key 'dflash_config' (DFlash2DraftModel keeps its settings there)")
        dflash = dict(dflash)
        values = {}
        for key in KEYS:
            if dflash.get(key) is None:
                raise InputError(path, f"missing config key 'dflash_config.{key}' (DFlash2: vLLM 0.33 requires it)")
            values[key] = _positive_int(dflash.pop(key), f"dflash_config.{key}", path)
        for key in SCALE_KEYS:
            if key in config:  # z-lab's DFlash reader falls back to the top level; vLLM's DFlash2 never does
                raise InputError(path, f"config key {key!r} at the top level is not read by vLLM 0.33's DFlash2 "
                                       f"(only dflash_config.{key}): ambiguous, move it into dflash_config")
        multiplier = dflash.get("output_multiplier")
        if isinstance(multiplier, (int, float)) and not isinstance(multiplier, bool) and multiplier <= 0:
            raise InputError(path, f"config key 'dflash_config.output_multiplier'={multiplier!r}: vLLM's candidate "
                                   "top-K refuses a non-positive multiplier")
        if dflash.get("sample_from_anchor") is True:
            raise InputError(path, "config key 'dflash_config.sample_from_anchor'=true is not implemented "
                                   "(slot 0 would be a prediction)")
        if dflash.get("sample_from_anchor") is False:
            dflash.pop("sample_from_anchor")
        config["dflash_config"] = dflash
        config["architectures"] = ["DFlashDraftModel"]
    return config, {"values": values, "layout": layout, "notes": notes}


def finish_spec(spec: DrafterSpec, settings: dict[str, Any], path: Path) -> DrafterSpec:
    """The DFlash spec the readers built, made DFlash2: the four keys checked against it, speculators'
    vocabulary rule, and (vLLM layout) vLLM's rules and scales."""
    values = settings["values"]
    if spec.sample_from_anchor:  # speculators 0.9.0 dflash2/core.py reads it; vLLM's DFlash2 walk starts at slot 1
        raise InputError(path, "config key 'sample_from_anchor'=true in a DFlash2 checkpoint is not implemented "
                               "(vLLM 0.33's DFlash2 walk drafts the slots after the anchor)")
    if spec.has_d2t or spec.draft_vocab_size != spec.vocab_size:
        raise InputError(path, f"config key 'draft_vocab_size'={spec.draft_vocab_size} (vocab_size {spec.vocab_size}): "
                               "DFlash2 requires the full target vocabulary (speculators 0.9.0 and vLLM 0.33)")
    if spec.hidden_size % values["conv_group_size"]:
        raise InputError(path, f"config key 'conv_group_size'={values['conv_group_size']} does not divide "
                               f"hidden_size={spec.hidden_size}")
    if values["conv_kernel_size"] > spec.block_size:
        raise InputError(path, f"config key 'conv_kernel_size'={values['conv_kernel_size']} exceeds "
                               f"block_size={spec.block_size}")
    if values["selector_top_k"] > spec.vocab_size:
        raise InputError(path, f"config key 'selector_top_k'={values['selector_top_k']} exceeds "
                               f"vocab_size={spec.vocab_size}")
    spec = replace(spec, config_notes=spec.config_notes + tuple(settings["notes"]), **values)
    if settings["layout"] == "speculators":  # vLLM's adapter copies no scale key into dflash_config
        spec = apply_semantics(replace(spec, scales=Scales()), spec.semantics, spec.semantics_source)
    else:
        spec = apply_semantics(spec, "vllm", "format default (DFlash2 in the layout vLLM serves: vLLM 0.33 "
                                             "qwen3_dflash2.py is its only reference)")
    return spec


def weight_shapes(spec: DrafterSpec) -> dict[str, tuple[int, ...]]:
    """The DFlash2 tensors on top of DFlash's (empty for a DFlash spec)."""
    if not spec.is_dflash2:
        return {}
    h, k = spec.hidden_size, spec.conv_kernel_size
    groups = h // spec.conv_group_size
    shapes: dict[str, tuple[int, ...]] = {}
    for i in range(spec.num_layers):
        for conv in ("attention_conv", "mlp_conv"):
            shapes[f"layers.{i}.{conv}.base_kernel"] = (2, k, h)
            shapes[f"layers.{i}.{conv}.kernel_projection.weight"] = (2 * k * groups, h)
    shapes["candidate_selector.predecessor_codebook"] = (spec.vocab_size, spec.selector_rank)
    shapes["candidate_selector.successor_codebook"] = (spec.vocab_size, spec.selector_rank)
    shapes["candidate_selector.hidden_projection.weight"] = (spec.selector_rank, h)
    return shapes


def refuse_other_type(model_type: Any, path: Path) -> None:
    """A speculators type that is not DFlash or DFlash2: one line naming it."""
    what = OTHER_TYPES.get(model_type) if isinstance(model_type, str) else None
    raise InputError(path, f"not a DFlash checkpoint: speculators_model_type is {model_type!r}"
                           + (f" ({what}), which dflash-eval does not evaluate" if what else ""))
