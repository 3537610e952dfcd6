"""The offline estimate of acceptance at temperature > 0: plain functions over per-anchor acceptance
probabilities, no torch. Every number here is an *estimate* and is labelled so wherever it is shown.

Inputs, per sampled continuation (estimation.py computes them on one tap pass): for every anchor a and
drafted slot i, alpha_i(a) = sum_x min(p_i(x), q_i(x)) (policy `sample`) or p_i(argmax q_i) (policy
`argmax`), where p_i is the target's processed distribution at position a + i - 1 and q_i the drafter's
for slot i, both teacher-forced on the sampled text (metrics.acceptance_probability).

| quantity                 | definition                                                                  |
|--------------------------|-----------------------------------------------------------------------------|
| alpha_i (per slot)       | mean over anchors where slot i is drafted of alpha_i(a)                     |
|                          | (speculators' / SpecForge's per-position acceptance 1 - TV(p, q))            |
| expected reach_i         | mean over those anchors of prod_{j<=i} alpha_j(a)                           |
| E[tau] per anchor        | 1 + sum_i expected reach_i (SpecForge `tau_probabilistic`, all anchors)      |
| expected-walk tau        | C(a0) / S(a0) of the walk as a Markov chain: from anchor a a step accepts n  |
|                          | with P(n) = prod_{i<=n} alpha_i (1 - alpha_{n+1}), commits min(n+1, left)   |
|                          | tokens and moves on by them; S, C = expected steps and committed tokens to  |
|                          | the end of the text, by dynamic programming from the end                    |
| tau estimate, macro      | mean over prompts of sum_k C / sum_k S over the prompt's K samples           |
| tau estimate, micro      | sum C / sum S over everything                                                |

Why it is an estimate, not the loop's number: after a rejection the real loop continues from the
residual's token and its own accepted drafts, while here every prefix is the sampled text; the per-slot
acceptances are treated as independent given that prefix. The bias against the live loop is measured by
`benchmarks/estimate_bias.py` and stated in docs/sampling.md: on the bundled demo pair (12 prompts x 8
samples x 64 tokens) +0.057 (T 0.6) and +0.028 (T 1.0) with sampled drafts, +0.002 and -0.000 with argmax
drafts, against live taus of 1.61 / 1.34 / 1.63 / 1.24.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

DEFINITION = ("estimate (temperature > 0, teacher-forced on sampled continuations): per-slot acceptance "
              "alpha = sum min(p, q); tau = expected committed / expected steps of the walk whose steps accept "
              "n drafts with probability prod alpha_i (1 - alpha_{n+1}); not the live loop's count")


def expected_walk(alphas: Sequence[Sequence[float]], seq_len: int, prompt_len: int) -> tuple[float, float]:
    """(expected steps S, expected committed tokens C) from anchor prompt_len to the end of a text of
    seq_len tokens. alphas[a - prompt_len] = the acceptance probabilities of anchor a's drafted slots.

    A step at anchor a commits min(n + 1, seq_len - 1 - a) tokens (the text ends there); the first token
    after the prompt comes from the prefill, as in the loop, so the walk's tokens sum to seq_len - 1 - p."""
    end = seq_len - 1
    steps = [0.0] * (seq_len + 1)
    committed = [0.0] * (seq_len + 1)
    for a in range(end - 1, prompt_len - 1, -1):
        slots = list(alphas[a - prompt_len]) if a - prompt_len < len(alphas) else []
        left = end - a
        reach, s, c = 1.0, 1.0, 0.0
        for n in range(len(slots) + 1):
            stop = 1.0 - slots[n] if n < len(slots) else 1.0  # accepted exactly n: reached n, then rejected
            probability = reach * stop
            if probability > 0:
                moved = min(n + 1, left)
                s += probability * steps[a + moved]
                c += probability * (moved + committed[a + moved])
            if n < len(slots):
                reach *= slots[n]
        steps[a], committed[a] = s, c
    return steps[prompt_len], committed[prompt_len]


@dataclass
class EstimateSums:
    """Additive sums behind every estimate (floats: expectations, not counts); merged by adding."""

    block_size: int
    per_prompt: dict[str, tuple[float, float]] = field(default_factory=dict)  # id -> (S, C), samples pooled
    anchors: int = 0
    alpha_sum: list[float] = field(default_factory=list)  # per slot i = 1..B-1
    reach_sum: list[float] = field(default_factory=list)
    slot_anchors: list[int] = field(default_factory=list)  # anchors where slot i was drafted

    def __post_init__(self) -> None:
        slots = self.block_size - 1
        for name in ("alpha_sum", "reach_sum", "slot_anchors"):
            if not getattr(self, name):
                setattr(self, name, [0] * slots)

    @classmethod
    def from_anchors(cls, prompt_id: str, block_size: int, alphas: Sequence[Sequence[float]], seq_len: int,
                     prompt_len: int) -> EstimateSums:
        out = cls(block_size)
        for slots in alphas:
            reach = 1.0
            for i, alpha in enumerate(slots):
                reach *= alpha
                out.alpha_sum[i] += alpha
                out.reach_sum[i] += reach
                out.slot_anchors[i] += 1
        out.anchors = len(alphas)
        out.per_prompt[prompt_id] = expected_walk(alphas, seq_len, prompt_len)
        return out

    def pooled(self, other: EstimateSums) -> EstimateSums:
        """Sum; a prompt in both (its samples) gets its S and C added."""
        if other.block_size != self.block_size:
            raise ValueError(f"cannot add block sizes {self.block_size} and {other.block_size}")
        from .metrics import add_pairs

        per_prompt = add_pairs(self.per_prompt, other.per_prompt)
        return EstimateSums(self.block_size, per_prompt, self.anchors + other.anchors,
                            [x + y for x, y in zip(self.alpha_sum, other.alpha_sum)],
                            [x + y for x, y in zip(self.reach_sum, other.reach_sum)],
                            [x + y for x, y in zip(self.slot_anchors, other.slot_anchors)])

    def to_dict(self) -> dict:
        return {"block_size": self.block_size, "anchors": self.anchors, "alpha_sum": list(self.alpha_sum),
                "reach_sum": list(self.reach_sum), "slot_anchors": list(self.slot_anchors),
                "per_prompt": {pid: list(self.per_prompt[pid]) for pid in sorted(self.per_prompt)}}

    @classmethod
    def from_dict(cls, data: dict) -> EstimateSums:
        return cls(int(data["block_size"]), {k: (float(s), float(c)) for k, (s, c) in data["per_prompt"].items()},
                   int(data["anchors"]), [float(x) for x in data["alpha_sum"]],
                   [float(x) for x in data["reach_sum"]], [int(x) for x in data["slot_anchors"]])


def _ratio(x: float, n: float) -> float | None:
    return x / n if n else None


def summary(sums: EstimateSums, *, seed: int = 0, min_prompts: int = 5, n_resamples: int = 2000) -> dict:
    """The estimate's numbers, divided here; a percentile bootstrap over prompts for tau (samples pooled)."""
    taus = np.array([c / s for s, c in sums.per_prompt.values() if s > 0])
    total_s = sum(s for s, _ in sums.per_prompt.values())
    total_c = sum(c for _, c in sums.per_prompt.values())
    ci = None
    if len(taus) >= min_prompts:
        draws = np.random.default_rng(seed).integers(0, len(taus), size=(n_resamples, len(taus)))
        ci = [float(x) for x in np.quantile(taus[draws].mean(axis=1), [0.025, 0.975])]
    reach = [_ratio(r, n) for r, n in zip(sums.reach_sum, sums.slot_anchors)]
    return {
        "estimate": True, "definition": DEFINITION,
        "tau_macro": float(taus.mean()) if len(taus) else None,
        "tau_micro": _ratio(total_c, total_s),
        "tau_macro_ci": ci,
        "tau_macro_ci_note": None if ci else f"n/a (n = {len(taus)} < {min_prompts} prompts)",
        "expected_steps": total_s, "anchors": sums.anchors,
        "alpha": [_ratio(a, n) for a, n in zip(sums.alpha_sum, sums.slot_anchors)],
        "expected_reach": reach,
        "tau_per_anchor": 1.0 + sum(_ratio(r, sums.anchors) or 0.0 for r in sums.reach_sum) if sums.anchors else None,
    }
