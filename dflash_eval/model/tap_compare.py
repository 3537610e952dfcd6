"""The sums core/tap_skew.py judges, computed on tensors: one stored slot against one tensor of ours, in fp64,
a chunk of positions at a time; and the greedy token a stored teacher gives as its trainer computes it.

Why fp64 sums: the relative L2 of a correct bf16 slot is ~1e-3 over millions of elements; fp32 accumulation
would blur exactly the difference the noise floor is about.
"""

from __future__ import annotations

import torch

from ..core.tap_skew import TapStats


@torch.inference_mode()
def tap_stats(stored: torch.Tensor, ours: torch.Tensor, chunk: int = 1024) -> TapStats:
    """stored, ours: [T, H] on any device. Elements that are not finite in `stored` are counted, not summed."""
    if stored.shape != ours.shape:
        raise ValueError(f"shapes differ: stored {tuple(stored.shape)}, ours {tuple(ours.shape)}")
    stats = TapStats(samples=1)
    all_zero, any_bad = True, False
    for start in range(0, stored.shape[0], chunk):
        s = stored[start:start + chunk].to(ours.device).double()
        o = ours[start:start + chunk].double()
        finite = torch.isfinite(s)
        bad = int((~finite).sum())
        s_f = torch.where(finite, s, torch.zeros_like(s))
        o_f = torch.where(finite, o, torch.zeros_like(o))
        diff = s_f - o_f
        equal = (s_f.to(torch.bfloat16) == o_f.to(torch.bfloat16)) & finite
        zero = int((s == 0).sum())
        all_zero = all_zero and zero == s.numel()
        any_bad = any_bad or bad > 0
        stats = stats + TapStats(
            elements=s.numel(), compared=s.numel() - bad, nonfinite=bad, zero=zero,
            dot=float((s_f * o_f).sum()), ss_stored=float((s_f * s_f).sum()), ss_ours=float((o_f * o_f).sum()),
            ss_diff=float((diff * diff).sum()), max_abs=float(diff.abs().max()) if diff.numel() else 0.0,
            bf16_equal=int(equal.sum()))
    stats.zero_samples = int(all_zero and stats.elements > 0)
    stats.nonfinite_samples = int(any_bad)
    return stats


@torch.inference_mode()
def teacher_tokens(target, teacher: torch.Tensor, kind: str, chunk: int = 1024) -> torch.Tensor:
    """[T] the argmax next token after every position as the trainer reads its stored teacher: "pre-norm"
    (speculators: lm_head(verifier_norm(h)), the target's own final norm, speculators.models.utils.
    resolve_verifier_norm_class) or "post-norm" (DeepSpec: lm_head(h))."""
    from .lm_head import greedy_ids
    from .target import lens_tokens

    dtype = target.lm_head.weight.dtype
    states = teacher.to(target.device, dtype)
    if kind == "pre-norm":
        return lens_tokens(target, states, chunk)
    return torch.cat([greedy_ids(states[i:i + chunk], target.lm_head).cpu() for i in range(0, states.shape[0], chunk)])


def fp8_round_trip(stack: torch.Tensor) -> torch.Tensor:
    """[T, L, H] our states through hs_connectors' fp8 writer and reader (the fp8 noise floor)."""
    from .training_taps import dequantize_fp8, quantize_fp8

    return dequantize_fp8(*quantize_fp8(stack))
