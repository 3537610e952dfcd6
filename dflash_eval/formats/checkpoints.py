"""Read DFlash drafter checkpoints of both formats into one `DrafterSpec`, and validate them.

Why this module is strict: a drafter that loads "fine" but is fed 4 of 5 taps, or the wrong layers,
or has a semantic config switch we silently ignore, produces plausible drafts and a 4x acceptance gap.
So every check is explicit, every failure is a one-line `InputError` naming the file, and a config key
that changes semantics but that we do not implement is refused by name.

Formats (primer section 4):
- z-lab: flat Qwen3 config, `architectures: ["DFlashDraftModel"]`, `dflash_config`; body weights only,
  the target's embedding and lm_head are used.
- speculators: `speculators_model_type: "dflash"`, nested `transformer_layer_config`; body weights plus
  frozen copies of embedding and lm_head, optional `d2t`/`t2d` for a reduced draft vocabulary.
- deepspec: DeepSpec's `Qwen3DSparkModel` (the target's Qwen3 config plus DeepSpec's keys, checked in
  formats/deepspec.py); body weights plus frozen copies of embedding and lm_head; slot 0 drafts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..core.attention import AttentionConfig, Scales
from ..core.errors import InputError
from ..core.semantics import FORMAT_SEMANTICS, apply_semantics
from ..core.spec import DrafterSpec
from . import deepspec, dflash2, muse_glimmer
from .files import CONFIG_NAME, TensorMeta, read_config, read_weight_metadata
from .validation import TargetInfo, check_rope, first_failure, number, validate

# Weights a speculators checkpoint may carry for training only; never used at inference.
TRAINING_ONLY_WEIGHTS = ("verifier_norm.weight", "verifier_lm_head.weight", "t2d")

# dflash_config keys z-lab's `_draft_value` reads (and vLLM's `causal`); anything else there is refused by name
ZLAB_DFLASH_KEYS = {"mask_token_id", "target_layer_ids", "block_size", "input_embedding_scale", "output_multiplier",
                    "final_logit_softcapping", "causal"}
SPECULATORS_KEYS = {
    "speculators_model_type", "speculators_version", "speculators_config", "architectures",
    "transformer_layer_config", "draft_vocab_size", "block_size", "target_hidden_size",
    "aux_hidden_state_layer_ids", "mask_token_id", "sliding_window_non_causal", "sample_from_anchor",
    "torch_dtype", "dtype", "transformers_version", "auto_map", "model_type",
    # generic PretrainedConfig serialization keys (speculators configs are PretrainedConfigs): no DFlash meaning
    "_name_or_path", "name_or_path", "chunk_size_feed_forward", "id2label", "label2id", "is_encoder_decoder",
    "output_attentions", "output_hidden_states", "problem_type", "return_dict", "tie_word_embeddings",
    "use_cache", "bos_token_id", "eos_token_id", "pad_token_id", "has_no_defaults_at_init",
}


# ---------------------------------------------------------------------------------------------------
# safetensors headers (read without loading tensors; detects truncation)


# ---------------------------------------------------------------------------------------------------
# config -> spec


def _architectures(config: dict[str, Any], path: Path) -> list:
    value = config.get("architectures") or []
    if not isinstance(value, list):
        raise InputError(path, f"config key 'architectures'={value!r} is not a list")
    return value


def detect_format(config: dict[str, Any], path: Path) -> str:
    if deepspec.is_deepspec(config):
        return "deepspec"
    if config.get("speculators_model_type") is not None:
        if config["speculators_model_type"] != "dflash":
            dflash2.refuse_other_type(config["speculators_model_type"], path)
        return "speculators"
    if "dflash_config" in config or "DFlashDraftModel" in _architectures(config, path):
        return "zlab"
    raise InputError(path, "not a DFlash checkpoint: unknown format (no dflash_config and no speculators_model_type)")


def _require(config: dict[str, Any], key: str, path: Path, where: str = "") -> Any:
    if config.get(key) is None:
        raise InputError(path, f"missing config key {where}{key!r}")
    return config[key]


def attention_config(body: dict[str, Any], num_layers: int, path: Path, fmt: str,
                     dflash: dict[str, Any] | None = None) -> AttentionConfig:
    """The attention keys, normalized exactly as both references normalize them: through HF `Qwen3Config`
    (z-lab builds its drafter from one, speculators builds `transformer_layer_config` into one). So
    `use_sliding_window` false or missing nulls the window, a missing `layer_types` follows
    `max_window_layers`, and a missing `sliding_window` with `use_sliding_window: true` is HF's default."""
    from transformers import Qwen3Config  # local import: keeps `inspect --help` fast

    types = body.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or len(types) != num_layers:
            raise InputError(path, f"config key 'layer_types' has {len(types) if isinstance(types, list) else '?'} "
                                   f"entries for {num_layers} layers")
        for kind in types:
            if kind not in ("full_attention", "sliding_attention"):
                raise InputError(path, f"config key 'layer_types' has attention kind {kind!r}, which dflash-eval "
                                       "does not implement")
    window = body.get("sliding_window")
    if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window < 1):
        raise InputError(path, f"config key 'sliding_window'={window!r} is not a positive integer")
    keys = {k: body[k] for k in ("layer_types", "sliding_window", "use_sliding_window", "max_window_layers")
            if k in body}
    hf = Qwen3Config(num_hidden_layers=num_layers, **keys)
    layer_types = tuple(hf.layer_types) if hf.layer_types is not None else ("full_attention",) * num_layers
    flags = {}
    for key, where in (("is_causal", body), ("sliding_window_non_causal", body)):
        value = where.get(key)
        if value is not None and not isinstance(value, bool):
            raise InputError(path, f"config key {key!r}={value!r} is not true/false")
        flags[key] = value
    dflash_causal = (dflash or {}).get("causal")
    if dflash_causal is not None and not isinstance(dflash_causal, bool):
        raise InputError(path, f"config key 'dflash_config.causal'={dflash_causal!r} is not true/false")
    return AttentionConfig(layer_types=layer_types, sliding_window=hf.sliding_window, declared_window=window,
                           use_sliding_window=body.get("use_sliding_window"), is_causal=flags["is_causal"],
                           sliding_window_non_causal=flags["sliding_window_non_causal"],
                           dflash_causal=dflash_causal, format=fmt)


# Keys of architectures dflash-eval does not implement: refused by name, never ignored.
UNSUPPORTED_KEYS = {
    "conv_kernel_size": "DFlash2 grouped dynamic convolutions", "conv_group_size": "DFlash2 grouped dynamic convolutions",
    "selector_rank": "DFlash2 candidate selector", "selector_top_k": "DFlash2 candidate selector",
    "use_swa": "vLLM's all-layers sliding-window switch", "swa_window_size": "vLLM's sliding-window override",
}


def _refuse_architectures(*sections: dict[str, Any], path: Path, prefix: str = "") -> None:
    for section, where in zip(sections, ("", "dflash_config.")):
        for key in section:
            if key in UNSUPPORTED_KEYS:
                raise InputError(path, f"config key '{prefix}{where}{key}' ({UNSUPPORTED_KEYS[key]}) is not supported "
                                       "by dflash-eval")
            if "sink" in key.lower():
                raise InputError(path, f"config key '{prefix}{where}{key}' (attention sinks) is not supported by dflash-eval")


def _scales(config: dict[str, Any], dflash: dict[str, Any], path: Path) -> Scales:
    """z-lab's `_draft_value`: dflash_config first, then the top level."""
    values = {}
    for key in ("input_embedding_scale", "output_multiplier", "final_logit_softcapping"):
        value = dflash.get(key, config.get(key))
        if value is not None:  # a scale of 0, a negative cap or NaN would silently wreck every logit
            number(value, key, path, low=0, low_open=True)
        values[key] = None if value is None else float(value)
    return Scales(**values)


def _refuse_unimplemented(body: dict[str, Any], path: Path) -> None:
    """Config switches that would change the computation and that this drafter does not implement."""
    if body.get("hidden_act", "silu") != "silu":
        raise InputError(path, f"config key 'hidden_act'={body['hidden_act']!r} is not implemented (only silu)")
    if body.get("mlp_bias"):
        raise InputError(path, "config key 'mlp_bias'=true is not implemented")
    if body.get("use_qk_norm") is False:
        raise InputError(path, "config key 'use_qk_norm'=false is not implemented")


def _rope_parameters(body: dict[str, Any], path: Path, where: str) -> dict[str, Any]:
    """Normalize rope_theta / rope_scaling / rope_parameters through transformers' own Qwen3Config, then check
    every number in the result (`check_rope`: transformers accepts a NaN theta or a negative factor)."""
    from transformers import Qwen3Config  # local import: keeps `inspect --help` fast

    if body.get("rope_theta") is not None:
        number(body["rope_theta"], f"{where}rope_theta", path, low=0, low_open=True)
    for key in ("rope_scaling", "rope_parameters"):  # checked as given too: transformers warns on a bad factor
        if body.get(key) is not None and not isinstance(body[key], dict):
            raise InputError(path, f"config key '{where}{key}'={body[key]!r} is not an object")
        if body.get(key) is not None:
            check_rope(body[key], path, where, theta_required=False)
    keys = ("rope_theta", "rope_scaling", "rope_parameters", "max_position_embeddings", "partial_rotary_factor")
    config = Qwen3Config(**{k: body[k] for k in keys if body.get(k) is not None})
    rope = dict(config.rope_parameters)
    check_rope(rope, path, where)
    return rope


def _positive(body: dict[str, Any], key: str, path: Path, where: str, default: Any = None) -> int:
    value = body.get(key, default) if default is not None else _require(body, key, path, where)
    if value is None:
        value = default
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(path, f"config key '{where}{key}'={value!r} is not a positive integer")
    return value


def _body_spec_fields(body: dict[str, Any], path: Path, where: str) -> dict[str, Any]:
    hidden = _positive(body, "hidden_size", path, where)
    heads = _positive(body, "num_attention_heads", path, where)
    kv_heads = _positive(body, "num_key_value_heads", path, where, heads)
    head_dim = _positive(body, "head_dim", path, where, max(hidden // heads, 1))
    if heads % kv_heads:
        raise InputError(path, f"config keys '{where}num_attention_heads'={heads} and 'num_key_value_heads'={kv_heads}: "
                               "heads must be a multiple of key/value heads")
    eps = body.get("rms_norm_eps", 1e-6)
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not 0 < eps < 1:
        raise InputError(path, f"config key '{where}rms_norm_eps'={eps!r} is not a number in (0, 1)")
    bias = body.get("attention_bias", False)
    if not isinstance(bias, bool):
        raise InputError(path, f"config key '{where}attention_bias'={bias!r} is not true/false")
    return dict(
        num_layers=_positive(body, "num_hidden_layers", path, where),
        hidden_size=hidden,
        intermediate_size=_positive(body, "intermediate_size", path, where),
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=head_dim,
        rms_norm_eps=float(eps),
        attention_bias=bias,
        vocab_size=_positive(body, "vocab_size", path, where),
        rope=_rope_parameters(body, path, where),
        partial_rotary_top_level=body.get("partial_rotary_factor") is not None,
        max_position_embeddings=_positive(body, "max_position_embeddings", path, where, 32768),
    )


def _optional_int(config: dict[str, Any], key: str, path: Path, low: int | None = None) -> int | None:
    value = config.get(key)
    return None if value is None else number(value, key, path, integer=True, low=low)


def zlab_default_taps(num_target_layers: int, num_draft_layers: int) -> list[int]:
    """z-lab's `build_target_layer_ids`: the taps a config without `target_layer_ids` gets."""
    if num_draft_layers == 1:
        return [num_target_layers // 2]
    start, end = 1, num_target_layers - 3
    return [round(start + (i * (end - start)) / (num_draft_layers - 1)) for i in range(num_draft_layers)]


def _format_default(spec: DrafterSpec) -> DrafterSpec:
    semantics = FORMAT_SEMANTICS[spec.format]
    return apply_semantics(spec, semantics, f"format default ({spec.format} checkpoint)")


def spec_from_zlab(config: dict[str, Any], directory: Path, weights: dict[str, TensorMeta]) -> DrafterSpec:
    path = directory / CONFIG_NAME
    dflash = config.get("dflash_config") or {}
    if not isinstance(dflash, dict):
        raise InputError(path, "config key 'dflash_config' is not an object")
    _refuse_architectures(config, dflash, path=path)
    if "DFlash2DraftModel" in _architectures(config, path):
        raise InputError(path, "config key 'architectures'=DFlash2DraftModel (DFlash2) is not supported by dflash-eval")
    unknown = sorted(set(dflash) - ZLAB_DFLASH_KEYS)
    if unknown:
        raise InputError(path, f"config key 'dflash_config.{unknown[0]}' is not implemented by dflash-eval")
    _refuse_unimplemented(config, path)
    fields = _body_spec_fields(config, path, "")
    notes: list[str] = []

    def draft_value(name: str) -> Any:  # z-lab's _draft_value: dflash_config first, then the top level
        return dflash.get(name, config.get(name))

    taps = draft_value("target_layer_ids")
    if taps is None:
        if config.get("num_target_layers") is None:
            raise InputError(path, "missing config key 'dflash_config.target_layer_ids' (and no num_target_layers "
                                   "for z-lab's default rule)")
        taps = zlab_default_taps(_optional_int(config, "num_target_layers", path, 1), fields["num_layers"])
        notes.append(f"target_layer_ids absent: z-lab's default rule gives {taps}")
    if not isinstance(taps, list) or not taps or not all(isinstance(t, int) and not isinstance(t, bool) for t in taps):
        raise InputError(path, f"config key 'target_layer_ids'={taps!r} is not a non-empty list of integers")
    block_size = draft_value("block_size")
    if block_size is None:  # required: z-lab's DFlashDraftModel reads `config.block_size` with no default
        # (z-lab/dflash model/dflash.py; the dflash package's 16 is a guess, and `null` crashes it): a drafter
        # trained with B = 8 and read as 16 drafts 15 tokens where it learned 7, and every number moves
        given = "is null" if "block_size" in dflash or "block_size" in config else "is missing"
        raise InputError(path, f"config key 'dflash_config.block_size' {given}: z-lab's DFlashDraftModel has no "
                               "default block size; write the block size the drafter was trained with")
    number(block_size, "block_size", path, integer=True, low=1)
    mask_id = draft_value("mask_token_id")
    if mask_id is None:
        raise InputError(path, "missing config key 'dflash_config.mask_token_id'")
    number(mask_id, "mask_token_id", path, integer=True, low=0)
    attention = attention_config(config, fields["num_layers"], path, "zlab", dflash)
    if attention.dflash_causal is not None:
        notes.append(f"dflash_config.causal={attention.dflash_causal}: read by vLLM only (not by z-lab's code)")
    spec = DrafterSpec(
        format="zlab", path=str(directory), **fields,
        target_hidden_size=fields["hidden_size"],
        draft_vocab_size=fields["vocab_size"],
        taps=tuple(int(t) for t in taps),
        num_target_layers=_optional_int(config, "num_target_layers", path, 1),
        block_size=int(block_size), mask_token_id=int(mask_id),
        layers=(), causality_source="",
        embedding_source="target", lm_head_source="target", has_d2t=False,
        attention_config=attention, scales=_scales(config, dflash, path), config_notes=tuple(notes),
    )
    return _format_default(spec)


def spec_from_speculators(config: dict[str, Any], directory: Path, weights: dict[str, TensorMeta]) -> DrafterSpec:
    path = directory / CONFIG_NAME
    _refuse_architectures(config, path=path)
    unknown = sorted(set(config) - SPECULATORS_KEYS)
    if unknown:
        raise InputError(path, f"config key {unknown[0]!r} is not implemented by dflash-eval")
    anchor_drafts = config.get("sample_from_anchor")
    if anchor_drafts is not None and not isinstance(anchor_drafts, bool):
        raise InputError(path, f"config key 'sample_from_anchor'={anchor_drafts!r} is not true/false")
    body = _require(config, "transformer_layer_config", path)
    if not isinstance(body, dict):
        raise InputError(path, "config key 'transformer_layer_config' is not an object")
    _refuse_architectures(body, path=path, prefix="transformer_layer_config.")
    if body.get("model_type", "qwen3") != "qwen3":
        raise InputError(path, f"config key 'transformer_layer_config.model_type'={body['model_type']!r} is not "
                               "supported (dflash-eval implements the Qwen3 drafter layer)")
    _refuse_unimplemented(body, path)
    fields = _body_spec_fields(body, path, "transformer_layer_config.")
    aux = _require(config, "aux_hidden_state_layer_ids", path)
    if not isinstance(aux, list) or not aux or not all(isinstance(k, int) and not isinstance(k, bool) for k in aux):
        raise InputError(path, f"config key 'aux_hidden_state_layer_ids'={aux!r} is not a non-empty list of integers")
    block_size = number(_require(config, "block_size", path), "block_size", path, integer=True, low=1)
    number(_require(config, "mask_token_id", path), "mask_token_id", path, integer=True, low=0)
    for key in ("draft_vocab_size", "target_hidden_size"):
        if config.get(key) is not None:
            number(config[key], key, path, integer=True, low=1)
    speculators = config.get("speculators_config") or {}
    if not isinstance(speculators, dict):
        raise InputError(path, f"config key 'speculators_config'={speculators!r} is not an object (expected "
                               "{\"proposal_methods\": [...], \"verifier\": {...}})")
    methods = speculators.get("proposal_methods") or [{}]
    if not isinstance(methods, list) or not all(isinstance(m, dict) for m in methods):
        raise InputError(path, "config key 'speculators_config.proposal_methods' is not a list of objects")
    spec_tokens = methods[0].get("speculative_tokens")
    if spec_tokens is not None:
        number(spec_tokens, "speculators_config.proposal_methods[0].speculative_tokens", path, integer=True, low=1)
    # speculators' from_training_args writes B - 1 (B with sample_from_anchor); older versions wrote B either way,
    # which a server reading it as num_speculative_tokens takes past the trained block (a check: checks.py)
    if spec_tokens is not None and spec_tokens > block_size:
        raise InputError(path, f"speculators_config speculative_tokens={spec_tokens} exceeds block_size ({block_size})")
    verifier_section = speculators.get("verifier") or {}
    if not isinstance(verifier_section, dict):
        raise InputError(path, "config key 'speculators_config.verifier' is not an object")
    verifier = verifier_section.get("name_or_path")
    if verifier is not None and not isinstance(verifier, str):
        raise InputError(path, f"config key 'speculators_config.verifier.name_or_path'={verifier!r} is not a string")
    flags = dict(body)  # a body is_causal (a converted z-lab config) is read only under z-lab / vLLM rules
    flags["sliding_window_non_causal"] = config.get("sliding_window_non_causal")
    attention = attention_config(flags, fields["num_layers"], path, "speculators")
    notes = [f"transformer_layer_config.{key}={body[key]!r}: read by z-lab's code only, ignored under speculators rules"
             for key in ("is_causal", "input_embedding_scale", "output_multiplier", "final_logit_softcapping")
             if body.get(key) is not None]
    if anchor_drafts:  # speculators 0.9.0 models/dflash/core.py: targets at the anchored block indices, slot 0 drafts
        notes.append(f"sample_from_anchor=true: slot 0 drafts (speculators' targets at anchor + j + 1), so the block "
                     f"of {block_size} drafts {block_size} tokens (block size B = {block_size + 1} as read here)")
    has_d2t = "d2t" in weights
    draft_vocab = int(config.get("draft_vocab_size") or fields["vocab_size"])
    ignored = tuple(name for name in TRAINING_ONLY_WEIGHTS if name in weights)
    spec = DrafterSpec(
        format="speculators", path=str(directory), **fields,
        target_hidden_size=int(config.get("target_hidden_size") or fields["hidden_size"]),
        draft_vocab_size=draft_vocab,
        taps=tuple(int(k) - 1 for k in aux),
        num_target_layers=None,
        block_size=block_size + 1 if anchor_drafts else block_size, sample_from_anchor=bool(anchor_drafts),
        mask_token_id=int(_require(config, "mask_token_id", path)),
        layers=(), causality_source="",
        embedding_source="checkpoint" if "embed_tokens.weight" in weights else "target",
        lm_head_source="checkpoint" if "lm_head.weight" in weights else "target",
        has_d2t=has_d2t, verifier=verifier, ignored_weights=ignored, speculative_tokens=spec_tokens,
        attention_config=attention,
        # a converted z-lab checkpoint carries z-lab's keys in its body: kept, applied only under z-lab rules
        scales=_scales(body, {}, path), config_notes=tuple(notes),
    )
    return _format_default(spec)


def spec_from_deepspec(config: dict[str, Any], directory: Path, weights: dict[str, TensorMeta]) -> DrafterSpec:
    """DeepSpec's layout (formats/deepspec.py checks its keys): the target's Qwen3 config as the body, the taps
    in z-lab numbering, slot 0 drafting, the checkpoint's own embedding and lm_head."""
    path = directory / CONFIG_NAME
    keys = deepspec.checked_keys(config, path)
    _refuse_architectures(config, path=path)
    _refuse_unimplemented(config, path)
    fields = _body_spec_fields(config, path, "")
    attention = attention_config(config, fields["num_layers"], path, "deepspec")
    spec = DrafterSpec(
        format="deepspec", path=str(directory), **fields,
        target_hidden_size=fields["hidden_size"], draft_vocab_size=fields["vocab_size"],
        taps=keys["taps"], num_target_layers=keys["num_target_layers"],
        block_size=keys["block_size"] + 1, sample_from_anchor=True, mask_token_id=keys["mask_token_id"],
        layers=(), causality_source="",
        embedding_source="checkpoint" if "embed_tokens.weight" in weights else "target",
        lm_head_source="checkpoint" if "lm_head.weight" in weights else "target", has_d2t=False,
        attention_config=attention, config_notes=tuple(keys["notes"]),
    )
    return _format_default(spec)


# ---------------------------------------------------------------------------------------------------
# expected weights and validation


def typed_like_the_reference(config: dict[str, Any], fmt: str, path: Path) -> None:
    """Every key of the drafter's body config, the ones dflash-eval does not read included (attention_dropout,
    initializer_range, use_cache, ...), of the type transformers' `Qwen3Config` declares: the class z-lab's
    `DFlashDraftModel` and speculators' `transformer_layer_config` are loaded with refuses any other
    (transformers >= 5.2x validates its config fields strictly), so a checkpoint neither reference can load
    is refused here too, by the key, instead of being evaluated. (A transformers that does not validate its
    config strictly raises nothing here, so this checks nothing more there.)"""
    from huggingface_hub.errors import StrictDataclassFieldValidationError  # in every hub >= 1.0 (pyproject)
    from transformers import Qwen3Config  # local import: keeps `inspect --help` fast

    body, where = ((config, "") if fmt in ("zlab", "deepspec") else
                   (config.get("transformer_layer_config") or {}, "transformer_layer_config."))
    skip = {"dflash_config", "speculators_config", "transformer_layer_config", "architectures", "auto_map", "model_type"}
    try:
        Qwen3Config(**{k: v for k, v in body.items() if k not in skip})
    except StrictDataclassFieldValidationError as exc:
        import re

        text = str(exc)
        field = re.search(r"field '([^']+)'", text)
        key = field.group(1) if field else "?"
        detail = re.search(r"expected ([^,]+), got", text)
        expected = f" ({detail.group(1)})" if detail else ""
        raise InputError(path, f"config key {where + key!r}={body.get(key)!r} is not of the type transformers' "
                               f"Qwen3Config declares for it{expected}; both references load the drafter with that "
                               "class") from None


def recorded_verifier(directory: str | Path) -> str | None:
    """The verifier a checkpoint records (speculators_config.verifier.name_or_path), read from its config alone,
    without transformers: what a run takes as its target when --target is not given, known before any heavy
    import (pipeline/preflight.py). A malformed section reads as none here; `read_spec` refuses it by name."""
    config = read_config(Path(directory))
    section = config.get("speculators_config") if isinstance(config, dict) else None
    verifier = section.get("verifier") if isinstance(section, dict) else None
    value = verifier.get("name_or_path") if isinstance(verifier, dict) else None
    return value if isinstance(value, str) else None


def read_spec(directory: str | Path) -> tuple[DrafterSpec, dict[str, TensorMeta], dict[str, Path]]:
    """Config and weight headers -> spec (raises InputError on unreadable or unknown checkpoints)."""
    directory = Path(directory)
    config = read_config(directory)
    dflash2_settings = None
    muse = muse_glimmer.is_muse_glimmer(config)  # Meta's layout of a DFlash v1 drafter, read as z-lab's
    if muse:
        config, muse_notes = muse_glimmer.zlab_config(config, directory / CONFIG_NAME)
    if dflash2.is_dflash2(config):  # DFlash2: its own keys read there, the rest by the DFlash readers
        config, dflash2_settings = dflash2.base_config(config, directory / CONFIG_NAME)
    fmt = detect_format(config, directory / CONFIG_NAME)
    weights, owners = read_weight_metadata(directory)
    if muse:
        weights, owners = muse_glimmer.renamed(weights), muse_glimmer.renamed(owners)
    builder = {"zlab": spec_from_zlab, "speculators": spec_from_speculators, "deepspec": spec_from_deepspec}[fmt]
    try:
        spec = builder(config, directory, weights)
        if dflash2_settings is not None:
            spec = dflash2.finish_spec(spec, dflash2_settings, directory / CONFIG_NAME)
        if muse:
            spec = muse_glimmer.finish_spec(spec, muse_notes)
        elif dflash2_settings is None:
            typed_like_the_reference(config, fmt, directory / CONFIG_NAME)
    except InputError:
        raise
    except Exception as exc:  # any other failure here is a config value of the wrong type or range
        first = str(exc).splitlines()[0] if str(exc) else ""
        raise InputError(directory / CONFIG_NAME, f"a config value has the wrong type or range "
                                                  f"({type(exc).__name__}: {first[:160]})") from None
    return spec, weights, owners


def checked_spec(directory: str | Path, target: TargetInfo | None = None) -> tuple[DrafterSpec, dict[str, Path]]:
    """Read and validate; raise a one-line InputError at the first failed check."""
    spec, weights, owners = read_spec(directory)
    failed = first_failure(validate(spec, weights, target))
    if failed is not None:
        raise InputError(directory, f"{failed.name} failed: {failed.detail}")
    return spec, owners


