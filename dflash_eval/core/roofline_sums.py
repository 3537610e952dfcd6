"""Sums of roofline times over many steps in closed form, so that `plan` answers in bounded time for any
input (`--max-new-tokens 10000000` looped ten million decode steps per batch and never returned).

Every per-step cost `plan` adds up is affine in the context length at a fixed shape: a decode step
(batch, 1 query token, context c), a tap-pass chunk (1, chunk, start), a drafter forward (A blocks, visible
context v) - FLOPs and bytes moved alike (roofline.forward_flops / forward_bytes, drafter_flops /
drafter_bytes). The roofline time of a step is max(FLOPs / peak, bytes / bandwidth), the maximum of two
affine functions of the step index k; its sum over k = 0..n-1 is two arithmetic series split where the two
lines cross (`affine_max_sum`). Each function below equals the step-by-step loop it replaces (tested
against that loop); the affine coefficients are read off the per-step functions at two points.
"""

from __future__ import annotations

import math

from . import roofline as R


def affine_sum(first: float, second: float, n: int) -> float:
    """sum over k = 0..n-1 of first + (second - first) k."""
    return n * first + (second - first) * n * (n - 1) / 2 if n > 0 else 0.0


def affine_max_sum(f0: float, f1: float, g0: float, g1: float, n: int) -> float:
    """sum over k = 0..n-1 of max(f0 + (f1 - f0) k, g0 + (g1 - g0) k)."""
    if n <= 0:
        return 0.0
    d0, ds = f0 - g0, (f1 - f0) - (g1 - g0)  # f_k - g_k = d0 + ds k
    if ds == 0:
        return affine_sum(f0, f1, n) if d0 >= 0 else affine_sum(g0, g1, n)
    cross = min(max(math.ceil(-d0 / ds), 0), n)  # first k where the sign of f_k - g_k is that of ds
    # the larger line before the crossing and after it (ds > 0: g leads, then f)
    head, tail = ((g0, g1), (f0, f1)) if ds > 0 else ((f0, f1), (g0, g1))

    def part(a0: float, a1: float, lo: int, hi: int) -> float:  # sum over k = lo..hi-1
        slope = a1 - a0
        return affine_sum(a0 + slope * lo, a0 + slope * (lo + 1), hi - lo)

    return part(*head, 0, cross) + part(*tail, cross, n)


def _series(cost, device: R.Accelerator, n: int) -> tuple[float, float]:
    """(FLOPs, seconds) summed over k = 0..n-1 of one step of cost(k) = (FLOPs, bytes), affine in k."""
    (f0, b0), (f1, b1) = cost(0), cost(1)
    flops = affine_sum(f0, f1, n)
    seconds = affine_max_sum(f0 / device.peak_flops, f1 / device.peak_flops, b0 / device.bandwidth,
                             b1 / device.bandwidth, n)
    return flops, seconds


def decode_steps(s: R.ModelShape, device: R.Accelerator, batch: int, context: int, steps: int) -> tuple[float, float]:
    """`steps` decode steps of `batch` sequences at contexts context, context + 1, ...: (FLOPs, seconds)."""
    return _series(lambda k: (R.forward_flops(s, batch, 1, context + k), R.forward_bytes(s, batch, 1, context + k)),
                   device, steps)


def tap_pass(s: R.ModelShape, device: R.Accelerator, tokens: int, chunk: int) -> tuple[float, float]:
    """One target pass over `tokens` positions, `chunk` at a time (the last chunk shorter)."""
    full, rest = divmod(tokens, chunk)
    flops, seconds = _series(lambda k: (R.forward_flops(s, 1, chunk, k * chunk), R.forward_bytes(s, 1, chunk, k * chunk)),
                             device, full)
    if rest:
        flops += R.forward_flops(s, 1, rest, full * chunk)
        seconds += R.step_time(s, device, 1, rest, full * chunk)
    return flops, seconds


def drafter_pass(d: R.DrafterShape, device: R.Accelerator, prompt: int, tokens: int, anchors_per_forward: int
                 ) -> tuple[float, float]:
    """A drafter over one trajectory of `tokens` positions: every anchor prompt .. tokens - 2, A per forward
    (each forward sees the context up to its last anchor), plus the context projection of every position."""
    anchors = max(tokens - 1 - prompt, 0)
    A = anchors_per_forward
    full, rest = divmod(anchors, A)
    flops, seconds = _series(lambda k: (R.drafter_flops(d, A, prompt + (k + 1) * A), R.drafter_bytes(d, A, prompt + (k + 1) * A)),
                             device, full)
    if rest:
        flops += R.drafter_flops(d, rest, tokens - 1)
        seconds += R.drafter_step_time(d, device, rest, tokens - 1)
    context = R.drafter_context_flops(d, tokens)
    return flops + context, seconds + R.roofline_time(context, 0, device)


def forward_steps(s: R.ModelShape, device: R.Accelerator, batch: int, query_tokens: int, context: int, steps: int,
                  logit_positions: int | None = None) -> tuple[float, float]:
    """`steps` target forwards of `batch` sequences, `query_tokens` new tokens each, at contexts context,
    context + 1, ... (the live loop's verify and re-run forwards when each step commits one token)."""
    return _series(lambda k: (R.forward_flops(s, batch, query_tokens, context + k, logit_positions),
                              R.forward_bytes(s, batch, query_tokens, context + k, logit_positions=logit_positions)),
                   device, steps)


def drafter_steps(d: R.DrafterShape, device: R.Accelerator, context: int, steps: int) -> tuple[float, float]:
    """`steps` drafter forwards of one block at visible contexts context, context + 1, ..., each projecting
    one new context token (the live loop when each step commits one token)."""
    return _series(lambda k: (R.drafter_flops(d, 1, context + k, 1), R.drafter_bytes(d, 1, context + k)), device, steps)


def cache_copies(s: R.ModelShape, device: R.Accelerator, context: int, steps: int) -> tuple[float, float]:
    """`steps` copies of one sequence's cache (read and written) at contexts context, context + 1, ...: the
    live loop's snapshot before each verify (a hybrid target's cache cannot be cropped back)."""
    return _series(lambda k: (0.0, 2 * R.cache_bytes(s, context + k)), device, steps)
