"""Validation of a normalized drafter spec against its weights' headers and the target's config: every check
`inspect` shows and loading enforces (present, expected and correctly shaped weights, taps, vocabulary, mask id)."""

from __future__ import annotations

from dataclasses import dataclass

from ..core.spec import DrafterSpec
from .files import TensorMeta


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


def first_failure(checks: list[Check]) -> Check | None:
    return next((c for c in checks if not c.ok), None)
