"""Validation of a normalized drafter spec against its weights' headers and the target's config: every check
`inspect` shows and loading enforces (present, expected and correctly shaped weights, taps, vocabulary, mask id),
and of every number a config supplies (`number`, `check_rope`, `check_target_config`): finite, in range, and
integral where it counts something, so that a NaN theta or a -4 scaling factor is refused by name instead of
collapsing acceptance to 1.00 in silence."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.errors import InputError
from ..core.spec import DrafterSpec
from .dflash2 import weight_shapes as dflash2_weight_shapes
from .files import FLOAT_DTYPES, TensorMeta, nonfinite_tensors

MAX_BLOCK_SIZE = 1024  # DFlash drafters use 8-16; a block's masks grow as B^2 per anchor, so more is refused


def number(value: Any, key: str, path: Path | str, *, integer: bool = False, low: float | None = None,
           high: float | None = None, low_open: bool = False) -> Any:
    """`value` of config key `key` if it is a finite number (an integer when `integer`: 8.7 is never read
    as 8) within [low, high] (low excluded when `low_open`); else one InputError naming the key."""
    kind = "an integer" if integer else "a finite number"
    ok = not isinstance(value, bool) and (isinstance(value, int) if integer else isinstance(value, (int, float)))
    if ok and not integer:
        ok = math.isfinite(value)
    if ok and low is not None:
        ok = value > low if low_open else value >= low
    if ok and high is not None:
        ok = value <= high
    if not ok:
        bounds = []
        if low is not None:
            bounds.append(f"{'>' if low_open else '>='} {low:g}")
        if high is not None:
            bounds.append(f"<= {high:g}")
        shown = repr(value) if not isinstance(value, str) or len(value) < 40 else repr(value[:37] + "...")
        raise InputError(path, f"config key {key!r}={shown} is not {kind}" + (f" {' and '.join(bounds)}" if bounds else ""))
    return value


ROPE_NUMBERS = ("factor", "attention_factor", "beta_fast", "beta_slow", "low_freq_factor", "high_freq_factor",
                "partial_rotary_factor", "mscale", "mscale_all_dim", "original_max_position_embeddings")


def check_rope(rope: dict[str, Any], path: Path | str, where: str = "", theta_required: bool = True) -> None:
    """RoPE parameters (as transformers normalized them): a rope type transformers implements, a finite
    positive theta, a scaling factor >= 1 (transformers' own rule, which it only warns about), every other
    number finite."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    kind = rope.get("rope_type", rope.get("type", "default"))
    if kind != "default" and kind not in ROPE_INIT_FUNCTIONS:
        raise InputError(path, f"config key '{where}rope_parameters.rope_type'={kind!r} is not a RoPE type transformers "
                               f"implements ({', '.join(['default', *ROPE_INIT_FUNCTIONS])})")
    if theta_required or "rope_theta" in rope:
        number(rope.get("rope_theta"), f"{where}rope_theta", path, low=0, low_open=True)
    for key, value in rope.items():
        name = f"{where}rope_parameters.{key}"
        if key in ("rope_type", "type", "rope_theta") or (key not in ROPE_NUMBERS
                                                           and (value is None or isinstance(value, bool))):
            continue
        if key == "factor":
            number(value, name, path, low=1)
        elif key in ("original_max_position_embeddings",):
            number(value, name, path, integer=True, low=1)
        elif isinstance(value, list):
            for item in value:
                number(item, name, path)
        else:
            number(value, name, path)


TARGET_SIZES = ("num_hidden_layers", "hidden_size", "vocab_size", "num_attention_heads", "intermediate_size")


def check_target_config(config: dict[str, Any], path: Path) -> dict[str, Any]:
    """A target's config.json, checked before anything is loaded (by `run`, `inspect` and `plan` alike):
    `text_config` an object when present, the sizes positive integers, max_position_embeddings and rope_theta
    in range, key/value heads dividing the attention heads (transformers' repeat_kv), the flags booleans.
    Returns the language-model part."""
    text = config.get("text_config", config)
    where = "text_config." if "text_config" in config else ""
    if text is None:
        text, where = config, ""
    if not isinstance(text, dict):
        raise InputError(path, f"config key 'text_config' is {type(text).__name__}, not an object")
    for key in TARGET_SIZES:
        if key in text:
            number(text[key], where + key, path, integer=True, low=1)
        elif key != "intermediate_size":
            raise InputError(path, f"missing config key {where + key!r}")
    if text.get("max_position_embeddings") is not None:
        number(text["max_position_embeddings"], where + "max_position_embeddings", path, integer=True, low=1)
    for key in ("num_key_value_heads", "head_dim"):
        if text.get(key) is not None:
            number(text[key], where + key, path, integer=True, low=1)
    kv = text.get("num_key_value_heads")
    if isinstance(kv, int) and text["num_attention_heads"] % kv:  # grouped-query attention repeats whole groups
        raise InputError(path, f"config key {where + 'num_key_value_heads'!r}={kv} does not divide "
                               f"num_attention_heads={text['num_attention_heads']} (every key/value head serves a "
                               "whole group of query heads)")
    for part, prefix in ((text, where), (config, "")) if text is not config else ((text, where),):
        for key in ("tie_word_embeddings", "attention_bias"):
            if key in part and not isinstance(part[key], bool):
                raise InputError(path, f"config key {prefix + key!r}={part[key]!r} is not true or false")
    if text.get("rope_theta") is not None:
        number(text["rope_theta"], where + "rope_theta", path, low=0, low_open=True)
    for key in ("rope_parameters", "rope_scaling"):
        rope = text.get(key)
        if rope is not None and not isinstance(rope, dict):
            raise InputError(path, f"config key '{where}{key}' is not an object")
        for name, value in (rope or {}).items():
            if name == "factor":
                number(value, f"{where}{key}.factor", path, low=1)
            elif name == "rope_theta" or (isinstance(value, (int, float)) and not isinstance(value, bool)):
                number(value, f"{where}{key}.{name}", path)
    return text


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
    # "error": the checkpoint cannot be evaluated as it is (loading refuses it); "warning": it can, and what the
    # check names changes how some engine serves it (formats/defect_checks.py, model/probe_checks.py)
    severity: str = "error"


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
    shapes.update(dflash2_weight_shapes(spec))  # convolutions and candidate selector (DFlash2 only)
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
    wanted = {n: ("I64", "I32") if n == "d2t" else FLOAT_DTYPES for n in expected}
    wrong_dtype = [f"{n} is {weights[n].dtype}" for n in expected if n in weights and weights[n].dtype not in wanted[n]]
    checks.append(Check("weight dtypes (float; d2t integer)", not wrong_dtype,
                        f"{wrong_dtype[0]}: quantized or integer weights are not supported (never cast)" if wrong_dtype
                        else "all " + "/".join(sorted({weights[n].dtype for n in expected if n in weights}))))
    by_file: dict[Path, dict[str, TensorMeta]] = {}
    for n in expected:
        if n in weights and weights[n].file is not None:
            by_file.setdefault(weights[n].file, {})[n] = weights[n]
    nonfinite = [n for file, metas in sorted(by_file.items()) for n in nonfinite_tensors(file, metas)]
    checks.append(Check("weights finite (no NaN or inf)", not nonfinite,
                        f"{nonfinite[0]} holds NaN or infinite values" + (f" (and {len(nonfinite) - 1} more tensors)"
                                                                          if len(nonfinite) > 1 else "")
                        if nonfinite else f"{sum(len(m) for m in by_file.values())} tensors scanned"))
    checks.append(Check(f"block size in 2..{MAX_BLOCK_SIZE}", 2 <= spec.block_size <= MAX_BLOCK_SIZE,
                        f"block_size={spec.block_size}"))
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


def first_failure(checks: list[Check]) -> Check | None:
    return next((c for c in checks if not c.ok), None)


# the checks that read the weight headers; a drafter planned from its config.json alone has none to read
WEIGHT_CHECKS = ("weights present", "no unexpected weights", "fc width = taps x hidden", "weight shapes",
                 "weight dtypes (float; d2t integer)", "weights finite (no NaN or inf)")


def config_checks(spec: DrafterSpec, target: TargetInfo | None) -> list[Check]:
    """`validate` without the weight checks: every check a config.json alone can fail (plan without weights)."""
    return [c for c in validate(spec, {}, target) if c.name not in WEIGHT_CHECKS]


def check_target_files(target: Path) -> None:
    """A target's config numbers (`check_target_config`) and weight headers (truncation, unknown dtypes,
    offsets that do not match a shape), before anything is loaded or written."""
    from ..core.errors import read_json_object, regular_files
    from .files import TOKENIZER_FILES, read_weight_metadata

    # every file transformers will open itself is a regular file (a FIFO would block the load forever)
    regular_files([Path(target) / n for n in ("config.json", "generation_config.json", *TOKENIZER_FILES)])
    config_file = Path(target) / "config.json"
    text = check_target_config(read_json_object(config_file, missing="not a model folder: no config.json"), config_file)
    check_generation_config(Path(target), text.get("vocab_size"))
    read_weight_metadata(Path(target))


def check_generation_config(target: Path, vocab_size: Any = None) -> None:
    """generation_config.json, when the target has one: a JSON object whose token ids (eos, bos, pad) are ids
    or lists of ids within the vocabulary. transformers ignores a file it cannot parse, with a log line, and
    falls back to config.json's ids: for Qwen3 that drops <|endoftext|> from the stop set, and every
    continuation (and number) changes. Refused by name instead."""
    from ..core.errors import read_json_object, regular_file_present

    path = Path(target) / "generation_config.json"
    if not regular_file_present(path):
        return
    data = read_json_object(path, missing="generation_config.json vanished")
    for key in ("eos_token_id", "bos_token_id", "pad_token_id"):
        value = data.get(key)
        if value is None:
            continue
        ids = value if isinstance(value, list) else [value]
        bad = [i for i in ids if isinstance(i, bool) or not isinstance(i, int) or i < 0
               or (isinstance(vocab_size, int) and i >= vocab_size)]
        if bad or (isinstance(value, list) and not value):
            raise InputError(path, f"key {key!r}={value!r} is not a token id or a list of token ids in the target's "
                                   f"vocabulary{f' of {vocab_size}' if isinstance(vocab_size, int) else ''}")
