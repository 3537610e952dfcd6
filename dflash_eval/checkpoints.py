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
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import InputError, read_json_object
from .semantics import FORMAT_SEMANTICS, AttentionConfig, Scales, apply_semantics
from .spec import DrafterSpec

CONFIG_NAME = "config.json"
SINGLE_WEIGHTS = "model.safetensors"
INDEX_WEIGHTS = "model.safetensors.index.json"

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


@dataclass(frozen=True)
class TargetInfo:
    """What validation needs to know about a target, read from its config (no weights loaded)."""

    name: str
    num_layers: int
    hidden_size: int
    vocab_size: int


@dataclass(frozen=True)
class Check:
    """One validation result, shown by `inspect` and enforced at load."""

    name: str
    ok: bool
    detail: str


@dataclass(frozen=True)
class TensorMeta:
    shape: tuple[int, ...]
    dtype: str


# ---------------------------------------------------------------------------------------------------
# safetensors headers (read without loading tensors; detects truncation)


def read_safetensors_header(path: Path) -> dict[str, TensorMeta]:
    """Parse a safetensors header and check that the file holds every byte the header promises."""
    try:
        size = path.stat().st_size
        with path.open("rb") as handle:
            prefix = handle.read(8)
            if len(prefix) < 8:
                raise InputError(path, "corrupted safetensors file: shorter than its 8-byte header length")
            (header_len,) = struct.unpack("<Q", prefix)
            if header_len > size - 8:
                raise InputError(path, f"corrupted or truncated safetensors file: header claims {header_len} bytes, file has {size}")
            header = json.loads(handle.read(header_len))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(path, f"corrupted safetensors file: unreadable header ({exc.__class__.__name__})") from None
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror}") from None
    if not isinstance(header, dict):
        raise InputError(path, "corrupted safetensors file: header is not a JSON object")
    tensors: dict[str, TensorMeta] = {}
    data_end = 0
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            tensors[name] = TensorMeta(tuple(int(d) for d in entry["shape"]), str(entry["dtype"]))
            data_end = max(data_end, int(entry["data_offsets"][1]))
        except (KeyError, TypeError, ValueError, IndexError):
            raise InputError(path, f"corrupted safetensors file: bad header entry for {name!r}") from None
    if 8 + header_len + data_end > size:
        raise InputError(path, f"truncated safetensors file: needs {8 + header_len + data_end} bytes, has {size}")
    return tensors


def weight_files(directory: str | Path) -> list[Path]:
    """The safetensors files of a checkpoint: one file, or the shards listed by the index."""
    directory = Path(directory)
    single = directory / SINGLE_WEIGHTS
    index = directory / INDEX_WEIGHTS
    if single.is_file():
        return [single]
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
        except (json.JSONDecodeError, KeyError, TypeError):
            raise InputError(index, "not a valid safetensors index (no weight_map)") from None
        files = sorted({directory / shard for shard in weight_map.values()})
        for file in files:
            if not file.is_file():
                raise InputError(file, "shard listed in model.safetensors.index.json is missing")
        return files
    loose = sorted(directory.glob("*.safetensors"))
    if loose:
        return loose
    if any(directory.glob("*.bin")) or any(directory.glob("*.pt")):
        raise InputError(directory, "only pickle weights (.bin/.pt) found; dflash-eval reads safetensors only")
    raise InputError(directory, "no safetensors weights found (expected model.safetensors)")


def read_weight_metadata(directory: Path) -> tuple[dict[str, TensorMeta], dict[str, Path]]:
    metas: dict[str, TensorMeta] = {}
    owners: dict[str, Path] = {}
    for file in weight_files(directory):
        for name, meta in read_safetensors_header(file).items():
            metas[name] = meta
            owners[name] = file
    return metas, owners


# ---------------------------------------------------------------------------------------------------
# config -> spec


def read_config(directory: Path) -> dict[str, Any]:
    if not directory.is_dir():
        raise InputError(directory, "not a directory (expected a drafter checkpoint folder with config.json)")
    if not (directory / CONFIG_NAME).is_file():
        raise InputError(directory, "not a DFlash checkpoint: no config.json")
    return read_json_object(directory / CONFIG_NAME, missing="not a DFlash checkpoint: no config.json")


def _architectures(config: dict[str, Any], path: Path) -> list:
    value = config.get("architectures") or []
    if not isinstance(value, list):
        raise InputError(path, f"config key 'architectures'={value!r} is not a list")
    return value


def detect_format(config: dict[str, Any], path: Path) -> str:
    if config.get("speculators_model_type") is not None:
        if config["speculators_model_type"] != "dflash":
            raise InputError(path, f"not a DFlash checkpoint: speculators_model_type is {config['speculators_model_type']!r}")
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
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise InputError(path, f"config key {key!r}={value!r} is not a number")
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


def _rope_parameters(body: dict[str, Any]) -> dict[str, Any]:
    """Normalize rope_theta / rope_scaling / rope_parameters through transformers' own Qwen3Config."""
    from transformers import Qwen3Config  # local import: keeps `inspect --help` fast

    keys = ("rope_theta", "rope_scaling", "rope_parameters", "max_position_embeddings")
    config = Qwen3Config(**{k: body[k] for k in keys if body.get(k) is not None})
    return dict(config.rope_parameters)


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
        rope=_rope_parameters(body),
        max_position_embeddings=_positive(body, "max_position_embeddings", path, where, 32768),
    )


def _optional_int(config: dict[str, Any], key: str, path: Path) -> int | None:
    value = config.get(key)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise InputError(path, f"config key {key!r}={value!r} is not an integer")
    return value


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
        taps = zlab_default_taps(_optional_int(config, "num_target_layers", path), fields["num_layers"])
        notes.append(f"target_layer_ids absent: z-lab's default rule gives {taps}")
    if not isinstance(taps, list) or not taps or not all(isinstance(t, int) and not isinstance(t, bool) for t in taps):
        raise InputError(path, f"config key 'target_layer_ids'={taps!r} is not a non-empty list of integers")
    block_size = draft_value("block_size")
    if block_size is None:
        block_size = 16
        notes.append("block_size absent: z-lab's default 16")
    mask_id = draft_value("mask_token_id")
    if mask_id is None:
        raise InputError(path, "missing config key 'dflash_config.mask_token_id'")
    attention = attention_config(config, fields["num_layers"], path, "zlab", dflash)
    if attention.dflash_causal is not None:
        notes.append(f"dflash_config.causal={attention.dflash_causal}: read by vLLM only (not by z-lab's code)")
    spec = DrafterSpec(
        format="zlab", path=str(directory), **fields,
        target_hidden_size=fields["hidden_size"],
        draft_vocab_size=fields["vocab_size"],
        taps=tuple(int(t) for t in taps),
        num_target_layers=_optional_int(config, "num_target_layers", path),
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
    if config.get("sample_from_anchor"):
        raise InputError(path, "config key 'sample_from_anchor'=true is not implemented (slot 0 would be a prediction)")
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
    block_size = int(_require(config, "block_size", path))
    method = ((config.get("speculators_config") or {}).get("proposal_methods") or [{}])[0]
    spec_tokens = method.get("speculative_tokens")
    if spec_tokens is not None and spec_tokens not in (block_size - 1, block_size):
        raise InputError(path, f"speculators_config speculative_tokens={spec_tokens} matches neither block_size-1 nor block_size ({block_size})")
    verifier = ((config.get("speculators_config") or {}).get("verifier") or {}).get("name_or_path")
    if verifier is not None and not isinstance(verifier, str):
        raise InputError(path, f"config key 'speculators_config.verifier.name_or_path'={verifier!r} is not a string")
    flags = dict(body)  # a body is_causal (a converted z-lab config) is read only under z-lab / vLLM rules
    flags["sliding_window_non_causal"] = config.get("sliding_window_non_causal")
    attention = attention_config(flags, fields["num_layers"], path, "speculators")
    notes = [f"transformer_layer_config.{key}={body[key]!r}: read by z-lab's code only, ignored under speculators rules"
             for key in ("is_causal", "input_embedding_scale", "output_multiplier", "final_logit_softcapping")
             if body.get(key) is not None]
    has_d2t = "d2t" in weights
    draft_vocab = int(config.get("draft_vocab_size") or fields["vocab_size"])
    ignored = tuple(name for name in TRAINING_ONLY_WEIGHTS if name in weights)
    spec = DrafterSpec(
        format="speculators", path=str(directory), **fields,
        target_hidden_size=int(config.get("target_hidden_size") or fields["hidden_size"]),
        draft_vocab_size=draft_vocab,
        taps=tuple(int(k) - 1 for k in aux),
        num_target_layers=None,
        block_size=block_size, mask_token_id=int(_require(config, "mask_token_id", path)),
        layers=(), causality_source="",
        embedding_source="checkpoint" if "embed_tokens.weight" in weights else "target",
        lm_head_source="checkpoint" if "lm_head.weight" in weights else "target",
        has_d2t=has_d2t, verifier=verifier, ignored_weights=ignored,
        attention_config=attention,
        # a converted z-lab checkpoint carries z-lab's keys in its body: kept, applied only under z-lab rules
        scales=_scales(body, {}, path), config_notes=tuple(notes),
    )
    return _format_default(spec)


# ---------------------------------------------------------------------------------------------------
# expected weights and validation


def expected_weights(spec: DrafterSpec) -> dict[str, tuple[int, ...]]:
    """Every tensor the native drafter needs from the checkpoint, with its shape."""
    h, hd = spec.hidden_size, spec.head_dim
    q, kv = spec.num_attention_heads * hd, spec.num_key_value_heads * hd
    shapes: dict[str, tuple[int, ...]] = {
        "fc.weight": (h, spec.fc_in_features),
        "hidden_norm.weight": (h,),
        "norm.weight": (h,),
    }
    for i in range(spec.num_layers):
        p = f"layers.{i}."
        shapes.update({
            p + "input_layernorm.weight": (h,),
            p + "post_attention_layernorm.weight": (h,),
            p + "self_attn.q_proj.weight": (q, h),
            p + "self_attn.k_proj.weight": (kv, h),
            p + "self_attn.v_proj.weight": (kv, h),
            p + "self_attn.o_proj.weight": (h, q),
            p + "self_attn.q_norm.weight": (hd,),
            p + "self_attn.k_norm.weight": (hd,),
            p + "mlp.gate_proj.weight": (spec.intermediate_size, h),
            p + "mlp.up_proj.weight": (spec.intermediate_size, h),
            p + "mlp.down_proj.weight": (h, spec.intermediate_size),
        })
        if spec.attention_bias:
            shapes.update({p + "self_attn.q_proj.bias": (q,), p + "self_attn.k_proj.bias": (kv,),
                           p + "self_attn.v_proj.bias": (kv,), p + "self_attn.o_proj.bias": (h,)})
    if spec.embedding_source == "checkpoint":
        shapes["embed_tokens.weight"] = (spec.vocab_size, h)
    if spec.lm_head_source == "checkpoint":
        shapes["lm_head.weight"] = (spec.draft_vocab_size, h)
    if spec.has_d2t:
        shapes["d2t"] = (spec.draft_vocab_size,)
    return shapes


def validate(spec: DrafterSpec, weights: dict[str, TensorMeta], target: TargetInfo | None) -> list[Check]:
    """All checks, in the order a user should read them. `load_drafter` raises on the first failure."""
    checks: list[Check] = []
    expected = expected_weights(spec)
    missing = [n for n in expected if n not in weights]
    unexpected = [n for n in weights if n not in expected and n not in spec.ignored_weights]
    checks.append(Check("weights present", not missing,
                        f"missing {len(missing)}: {', '.join(missing[:4])}" if missing else f"{len(expected)} tensors"))
    checks.append(Check("no unexpected weights", not unexpected,
                        f"unexpected {len(unexpected)}: {', '.join(unexpected[:4])}" if unexpected
                        else ("ignored (training only): " + ", ".join(spec.ignored_weights)) if spec.ignored_weights else "none"))
    fc = weights.get("fc.weight")
    if fc is not None:
        n_fed = fc.shape[1] / spec.target_hidden_size if len(fc.shape) == 2 else float("nan")
        checks.append(Check("fc width = taps x hidden", len(fc.shape) == 2 and fc.shape[1] == spec.fc_in_features,
                            f"fc expects {fc.shape[1] if len(fc.shape) == 2 else '?'} = {n_fed:g} x {spec.target_hidden_size}; "
                            f"config lists {len(spec.taps)} taps ({spec.fc_in_features})"))
    wrong_shape = [f"{n} {weights[n].shape} != {s}" for n, s in expected.items()
                   if n in weights and n != "fc.weight" and weights[n].shape != s]
    checks.append(Check("weight shapes", not wrong_shape, wrong_shape[0] if wrong_shape else "all match the config"))
    checks.append(Check("block size >= 2", spec.block_size >= 2, f"block_size={spec.block_size}"))
    checks.append(Check("mask token id in drafter vocab", 0 <= spec.mask_token_id < spec.vocab_size,
                        f"mask_token_id={spec.mask_token_id}, vocab_size={spec.vocab_size}"))
    checks.append(Check("taps are distinct and >= 0", min(spec.taps) >= 0 and len(set(spec.taps)) == len(spec.taps),
                        f"taps {list(spec.taps)}"))
    if spec.num_target_layers is not None:
        checks.append(Check("taps < recorded num_target_layers", max(spec.taps) < spec.num_target_layers,
                            f"max tap {max(spec.taps)}, num_target_layers={spec.num_target_layers}"))
    if target is not None:
        checks.append(Check("taps < target layers", max(spec.taps) < target.num_layers,
                            f"max tap {max(spec.taps)} (speculators id {max(spec.taps) + 1}), target has {target.num_layers} layers"))
        checks.append(Check("hidden size matches target", spec.target_hidden_size == target.hidden_size,
                            f"drafter taps are {spec.target_hidden_size} wide, target hidden_size={target.hidden_size}"))
        vocab_ok = spec.vocab_size == target.vocab_size and (spec.has_d2t or spec.draft_vocab_size == target.vocab_size)
        checks.append(Check("vocabulary matches target", vocab_ok,
                            f"drafter vocab {spec.vocab_size} (draft {spec.draft_vocab_size}{', d2t' if spec.has_d2t else ''}), target vocab {target.vocab_size}"))
        checks.append(Check("mask token id in target vocab", 0 <= spec.mask_token_id < target.vocab_size,
                            f"mask_token_id={spec.mask_token_id}, target vocab {target.vocab_size}"))
    return checks


def read_spec(directory: str | Path) -> tuple[DrafterSpec, dict[str, TensorMeta], dict[str, Path]]:
    """Config and weight headers -> spec (raises InputError on unreadable or unknown checkpoints)."""
    directory = Path(directory)
    config = read_config(directory)
    fmt = detect_format(config, directory / CONFIG_NAME)
    weights, owners = read_weight_metadata(directory)
    builder = spec_from_zlab if fmt == "zlab" else spec_from_speculators
    try:
        spec = builder(config, directory, weights)
    except InputError:
        raise
    except Exception as exc:  # noqa: BLE001 - any other failure here is a config value of the wrong type or range
        first = str(exc).splitlines()[0] if str(exc) else ""
        raise InputError(directory / CONFIG_NAME, f"a config value has the wrong type or range "
                                                  f"({type(exc).__name__}: {first[:160]})") from None
    return spec, weights, owners


def first_failure(checks: list[Check]) -> Check | None:
    return next((c for c in checks if not c.ok), None)


def checked_spec(directory: str | Path, target: TargetInfo | None = None) -> tuple[DrafterSpec, dict[str, Path]]:
    """Read and validate; raise a one-line InputError at the first failed check."""
    spec, weights, owners = read_spec(directory)
    failed = first_failure(validate(spec, weights, target))
    if failed is not None:
        raise InputError(directory, f"{failed.name} failed: {failed.detail}")
    return spec, owners


def checkpoint_fingerprint(directory: str | Path) -> str:
    """sha256 over the config and weight files (streamed), for provenance and caching."""
    import hashlib

    directory = Path(directory)
    digest = hashlib.sha256()
    for file in [directory / CONFIG_NAME, *weight_files(directory)]:
        digest.update(file.name.encode())
        with file.open("rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()


def resolve_local_or_cached(name_or_path: str) -> Path:
    """A local folder, or a Hugging Face repo id found in the local cache (never downloads here)."""
    path = Path(os.path.expanduser(name_or_path))
    if path.exists():
        return path
    if name_or_path.count("/") == 1 and not name_or_path.startswith((".", "/")):
        try:
            from huggingface_hub import snapshot_download

            return Path(snapshot_download(name_or_path, local_files_only=True))
        except Exception:  # noqa: BLE001 - any cache miss becomes one clear message
            raise InputError(name_or_path, "not a local folder and not found in the Hugging Face cache (offline lookup)") from None
    raise InputError(name_or_path, "no such file or directory")
