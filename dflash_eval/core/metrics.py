"""Acceptance metrics for DFlash drafters: store integer counts, divide only when reporting.

A drafter with block size B drafts slots 1..B-1 after an anchor; a speculative-decoding step accepts the
first n drafted slots (n in 0..B-1) and commits n + 1 tokens, the extra one being the target's bonus token.
A *walk* is the list of n over one prompt's steps. *All-anchor* statistics instead score every anchor
position teacher-forced: slot i is right when its draft equals the target token, whatever earlier slots did.

| metric                | definition                                               | peer it matches                 |
|-----------------------|----------------------------------------------------------|---------------------------------|
| tau_macro             | mean over prompts of (committed tokens / steps)          | z-lab's published tau           |
| tau_micro             | all committed / all steps = 1 + accepted / steps         | vLLM mean acceptance length     |
| reach r_i             | steps reaching slot i (n >= i) / steps drafting slot i   | vLLM per-position acceptance    |
|                       | (denominator="all": / all steps, exactly as vLLM)        | speculators acceptance_at_pos_i |
| conditional c_i       | r_i / r_{i-1}, with r_0 = 1                              | EAGLE-style acceptance          |
| marginal m_i          | anchors whose slot i is right / anchors where slot i     | speculators' teacher-forced     |
|                       | exists (teacher-forced: earlier slots ignored)           | training accuracy               |
| histogram h_n         | share of steps that accepted exactly n, n = 0..B-1       | (the distribution behind tau)   |
| token_acceptance_rate | accepted draft tokens / drafted tokens (no bonus)        | vLLM draft acceptance rate      |

Why counts: shards and runs merge by adding integers, so a merged report equals one computed on the union
exactly, and nothing is averaged twice. Undefined ratios (0 / 0) are returned as None, never NaN, so they
survive JSON and show up in tables as blanks. Empty inputs raise ValueError.

The final step: each step's length is the tokens it *commits* (z-lab's `produced`), so the step that
reaches the length cap or the stop token has no bonus token: its accepted length here is committed - 1
and a prompt's committed tokens sum to len(continuation) - 1. vLLM counts accepted drafts before the
output is truncated to max_tokens or a stop token (scheduler `update_from_output`), so on each request's
last step it can count drafts that were never output: its tau_micro can be slightly higher.

Clipped steps: near the end of a generation a step may draft fewer than B-1 slots (`drafted`). It cannot
reach slots beyond `drafted`, so counting it as a failure there would understate reach. The default reach
denominator is therefore "steps that drafted at least i slots". vLLM divides by all steps; ask for that with
`denominator="all"`. Both agree when no step is clipped, and only the "all" form sums to tau_micro - 1.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np


@dataclass(frozen=True)
class AcceptanceCounts:
    """Integer acceptance counts for one or more prompts. Per-slot lists have B-1 entries: index k is slot k+1."""

    block_size: int
    # prompt id -> (steps, committed tokens = sum of n+1); kept per prompt so tau_macro and the bootstrap
    # can be computed exactly after merging.
    per_prompt: dict[str, tuple[int, int]] = field(default_factory=dict)
    steps: int = 0  # vLLM num_drafts
    accepted_draft_tokens: int = 0  # sum of n; vLLM num_accepted_tokens
    drafted_tokens: int = 0  # sum of slots drafted per step; vLLM num_draft_tokens
    accept_length_histogram: list[int] = field(default_factory=list)  # index n = 0..B-1
    reach_counts: list[int] = field(default_factory=list)  # steps with n >= slot
    reach_denominators: list[int] = field(default_factory=list)  # steps that drafted >= slot slots
    marginal_correct: list[int] = field(default_factory=list)  # anchors whose slot is right
    marginal_total: list[int] = field(default_factory=list)  # anchors where the slot is valid

    def __post_init__(self) -> None:
        if self.block_size < 2:
            raise ValueError(f"block_size must be >= 2, got {self.block_size}")
        # Fill omitted per-slot lists with zeros so `AcceptanceCounts(block_size=B)` is the empty count.
        slots = self.block_size - 1
        expected = {"accept_length_histogram": self.block_size, "reach_counts": slots,
                    "reach_denominators": slots, "marginal_correct": slots, "marginal_total": slots}
        for name, length in expected.items():
            values = getattr(self, name)
            if not values:
                object.__setattr__(self, name, [0] * length)
            elif len(values) != length:
                raise ValueError(f"{name} must have {length} entries for block_size {self.block_size}, "
                                 f"got {len(values)}")

    @classmethod
    def from_walk(cls, prompt_id: str, accept_lengths: Sequence[int], block_size: int,
                  drafted: Sequence[int] | None = None) -> AcceptanceCounts:
        """Counts for one prompt's walk. `drafted[s]` is how many slots step s drafted (default B-1 each)."""
        slots = block_size - 1
        lengths = [int(n) for n in accept_lengths]
        if not lengths:
            raise ValueError(f"walk for prompt {prompt_id!r} has no steps")
        drafted_per_step = [slots] * len(lengths) if drafted is None else [int(d) for d in drafted]
        if len(drafted_per_step) != len(lengths):
            raise ValueError(f"prompt {prompt_id!r}: {len(lengths)} accept lengths but "
                             f"{len(drafted_per_step)} drafted counts")
        histogram = [0] * block_size
        reach_counts, reach_denominators = [0] * slots, [0] * slots
        for n, d in zip(lengths, drafted_per_step):
            if not 1 <= d <= slots:
                raise ValueError(f"prompt {prompt_id!r}: drafted {d} is outside 1..{slots}")
            if not 0 <= n <= d:
                raise ValueError(f"prompt {prompt_id!r}: accepted length {n} is outside 0..{d} (drafted)")
            histogram[n] += 1
            for slot in range(1, n + 1):
                reach_counts[slot - 1] += 1
            for slot in range(1, d + 1):
                reach_denominators[slot - 1] += 1
        return cls(block_size=block_size,
                   per_prompt={prompt_id: (len(lengths), sum(lengths) + len(lengths))},
                   steps=len(lengths), accepted_draft_tokens=sum(lengths),
                   drafted_tokens=sum(drafted_per_step), accept_length_histogram=histogram,
                   reach_counts=reach_counts, reach_denominators=reach_denominators)

    @classmethod
    def from_marginal(cls, slot_correct, block_size: int, valid=None) -> AcceptanceCounts:
        """All-anchor counts from a 0/1 array [anchors, B-1]; `valid` (same shape) masks slots past the end.

        Add the result to a walk's counts with `+`: marginal counts carry no steps and no prompt entries.
        """
        correct = np.asarray(slot_correct)
        if correct.ndim != 2 or correct.shape[1] != block_size - 1:
            raise ValueError(f"slot_correct must have shape [anchors, {block_size - 1}], got {correct.shape}")
        if not np.isin(correct, (0, 1)).all():
            raise ValueError("slot_correct must hold only 0/1 (or booleans)")
        mask = np.ones(correct.shape, dtype=bool) if valid is None else np.asarray(valid, dtype=bool)
        if mask.shape != correct.shape:
            raise ValueError(f"valid mask shape {mask.shape} differs from slot_correct shape {correct.shape}")
        correct = correct.astype(bool) & mask  # a masked slot counts neither as right nor as tried
        return cls(block_size=block_size,
                   marginal_correct=[int(x) for x in correct.sum(axis=0)],
                   marginal_total=[int(x) for x in mask.sum(axis=0)])

    def __add__(self, other: AcceptanceCounts) -> AcceptanceCounts:
        return merge(self, other)

    def to_dict(self) -> dict:
        """JSON-ready dict of ints (prompt ids sorted, so equal counts serialise identically)."""
        return {
            "block_size": self.block_size,
            "per_prompt": {pid: list(self.per_prompt[pid]) for pid in sorted(self.per_prompt)},
            "steps": self.steps,
            "accepted_draft_tokens": self.accepted_draft_tokens,
            "drafted_tokens": self.drafted_tokens,
            "accept_length_histogram": list(self.accept_length_histogram),
            "reach_counts": list(self.reach_counts),
            "reach_denominators": list(self.reach_denominators),
            "marginal_correct": list(self.marginal_correct),
            "marginal_total": list(self.marginal_total),
        }

    @classmethod
    def from_dict(cls, data: Mapping) -> AcceptanceCounts:
        values = dict(data)
        values["per_prompt"] = {pid: (int(s), int(t)) for pid, (s, t) in values.get("per_prompt", {}).items()}
        return cls(**values)


def merge(a: AcceptanceCounts, b: AcceptanceCounts) -> AcceptanceCounts:
    """Exact sum of two counts (shards or runs). Prompt ids must not overlap: a repeat would count twice."""
    if a.block_size != b.block_size:
        raise ValueError(f"cannot merge block sizes {a.block_size} and {b.block_size}")
    overlap = a.per_prompt.keys() & b.per_prompt.keys()
    if overlap:
        raise ValueError(f"prompt ids present in both counts: {sorted(overlap)[:5]}")

    def add(x: list[int], y: list[int]) -> list[int]:
        return [i + j for i, j in zip(x, y)]

    return AcceptanceCounts(
        block_size=a.block_size, per_prompt={**a.per_prompt, **b.per_prompt}, steps=a.steps + b.steps,
        accepted_draft_tokens=a.accepted_draft_tokens + b.accepted_draft_tokens,
        drafted_tokens=a.drafted_tokens + b.drafted_tokens,
        accept_length_histogram=add(a.accept_length_histogram, b.accept_length_histogram),
        reach_counts=add(a.reach_counts, b.reach_counts),
        reach_denominators=add(a.reach_denominators, b.reach_denominators),
        marginal_correct=add(a.marginal_correct, b.marginal_correct),
        marginal_total=add(a.marginal_total, b.marginal_total))


def add_pairs(a: Mapping, b: Mapping) -> dict:
    """Per-prompt pairs added where both have the prompt, kept where one has it (pooling samples)."""
    out = dict(a)
    for key, (x, y) in b.items():
        x0, y0 = out.get(key, (0, 0))
        out[key] = (x0 + x, y0 + y)
    return out


def pool_samples(a: AcceptanceCounts, b: AcceptanceCounts) -> AcceptanceCounts:
    """Two samples of the same prompt(s) as one: every count adds, and a prompt present in both gets its
    steps and committed tokens added (its tau is then sum committed / sum steps over its samples).

    Why pooled: at temperature > 0 a prompt is run K times; the K walks are not independent evidence about
    the drafter (they share the prompt), so the prompt stays the unit of tau_macro and of the bootstrap
    (a cluster bootstrap over prompts), and `merge` keeps refusing the same prompt twice across prompts."""
    if a.block_size != b.block_size:
        raise ValueError(f"cannot pool block sizes {a.block_size} and {b.block_size}")
    per_prompt = add_pairs(a.per_prompt, b.per_prompt)
    rest = merge(AcceptanceCounts(a.block_size, {}, a.steps, a.accepted_draft_tokens, a.drafted_tokens,
                                  a.accept_length_histogram, a.reach_counts, a.reach_denominators,
                                  a.marginal_correct, a.marginal_total),
                 AcceptanceCounts(b.block_size, {}, b.steps, b.accepted_draft_tokens, b.drafted_tokens,
                                  b.accept_length_histogram, b.reach_counts, b.reach_denominators,
                                  b.marginal_correct, b.marginal_total))
    return AcceptanceCounts(**{**rest.to_dict(), "per_prompt": per_prompt})


def acceptance_probability(p: Sequence[float], q: Sequence[float]) -> float:
    """alpha = sum_x min(p(x), q(x)) = 1 - TV(p, q): the probability that the rejection rule accepts a draft
    drawn from q when the target's distribution is p (Leviathan et al. 2023; speculators' and SpecForge's
    per-position acceptance). With q one-hot at x (argmax drafts) it is p(x)."""
    if len(p) != len(q):
        raise ValueError(f"p has {len(p)} entries, q {len(q)}")
    return float(sum(min(a, b) for a, b in zip(p, q)))


def expected_accepted_length(alphas: Sequence[float]) -> float:
    """E[n] = sum_k prod_{i<=k} alpha_i over the drafted slots: the expected accepted drafts of one block
    when slot i is accepted with probability alpha_i given the slots before it were (SpecForge's
    `tau_probabilistic` minus its bonus 1). A block of 3 (2 slots) with alphas 0.7, 0.5: 0.7 + 0.35."""
    total, reach = 0.0, 1.0
    for alpha in alphas:
        reach *= float(alpha)
        total += reach
    return total


def _ratio(numerator: int, denominator: int) -> float | None:
    return None if denominator == 0 else numerator / denominator


def _require_steps(counts: AcceptanceCounts) -> None:
    if counts.steps == 0:
        raise ValueError("no speculative-decoding steps recorded; acceptance metrics are undefined")


def steps(counts: AcceptanceCounts) -> int:
    """Total speculative-decoding steps (vLLM num_drafts)."""
    return counts.steps


def tau_macro(counts: AcceptanceCounts) -> float:
    """mean over prompts p of committed_p / steps_p (incl. bonus token). z-lab's published tau."""
    if not counts.per_prompt:
        raise ValueError("no prompts recorded; tau_macro is undefined")
    # Sorted ids: the float sum then does not depend on the order shards were merged in.
    return float(np.mean([counts.per_prompt[pid][1] / counts.per_prompt[pid][0]
                          for pid in sorted(counts.per_prompt)]))


def tau_micro(counts: AcceptanceCounts) -> float:
    """sum committed / sum steps = 1 + accepted draft tokens / steps. vLLM's mean acceptance length."""
    _require_steps(counts)
    # One integer division (not 1 + a/s) so it matches the bootstrap's resampled ratios to the last bit.
    return (counts.accepted_draft_tokens + counts.steps) / counts.steps


def reach(counts: AcceptanceCounts, denominator: str = "drafted") -> list[float | None]:
    """r_i for slots i = 1..B-1: share of steps whose accepted prefix reaches slot i (n >= i).

    Equals vLLM's per-position acceptance and speculators' acceptance_at_pos_i. denominator="drafted" (default)
    divides by steps that drafted at least i slots, so clipped final steps are not failures there (None when
    no step drafted slot i); denominator="all" divides by all steps, as vLLM does, and then
    sum(r_i) == tau_micro - 1.
    """
    _require_steps(counts)
    if denominator == "drafted":
        return [_ratio(k, d) for k, d in zip(counts.reach_counts, counts.reach_denominators)]
    if denominator == "all":
        return [k / counts.steps for k in counts.reach_counts]
    raise ValueError(f"denominator must be 'drafted' or 'all', got {denominator!r}")


def conditional(counts: AcceptanceCounts, denominator: str = "drafted") -> list[float | None]:
    """c_i = r_i / r_{i-1} with r_0 = 1 (EAGLE style): acceptance at slot i given slot i-1 was accepted.

    None where r_{i-1} is 0 or undefined (no step got that far, so there is nothing to condition on).
    """
    reaches = [1.0, *reach(counts, denominator)]
    return [None if prev is None or cur is None or prev == 0 else cur / prev
            for prev, cur in zip(reaches, reaches[1:])]


def marginal(counts: AcceptanceCounts) -> list[float | None]:
    """m_i = anchors whose slot i is right / anchors where slot i is valid (teacher-forced, over all anchors).

    speculators' training metric. None for a slot no anchor could score. High m_i with low r_i means the
    drafter's errors sit early in the block and cut off later, correct slots.
    """
    if sum(counts.marginal_total) == 0:
        raise ValueError("no all-anchor statistics recorded; marginal is undefined")
    return [_ratio(c, t) for c, t in zip(counts.marginal_correct, counts.marginal_total)]


def histogram(counts: AcceptanceCounts, normalized: bool = True) -> list[float] | list[int]:
    """Distribution of accepted length n over 0..B-1: shares of steps, or raw counts if not normalized."""
    _require_steps(counts)
    if not normalized:
        return list(counts.accept_length_histogram)
    return [k / counts.steps for k in counts.accept_length_histogram]


def token_acceptance_rate(counts: AcceptanceCounts) -> float:
    """accepted draft tokens / drafted tokens (bonus tokens excluded). vLLM's draft acceptance rate."""
    _require_steps(counts)
    return counts.accepted_draft_tokens / counts.drafted_tokens


class TauInterval(NamedTuple):
    estimate: float
    low: float
    high: float


def check_resampling(kind: str, level: float, n_resamples: int) -> None:
    """Argument checks shared by the resampling statistics here and in compare.py."""
    if kind not in ("macro", "micro"):
        raise ValueError(f"kind must be 'macro' or 'micro', got {kind!r}")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}")


# Fewer prompts than this: no interval is shown ("n/a (n < 5)"). A percentile bootstrap over 1-4 prompts
# has at most a few hundred distinct resamples and collapses towards the point estimate (one prompt gives
# [x, x]), which reads as certainty when it is the opposite.
MIN_PROMPTS_FOR_INTERVAL = 5


def slot_fractions(counts: AcceptanceCounts) -> dict[str, list[list[int]]]:
    """The integer numerator and denominator behind every per-slot ratio, so a report can show "0.83
    (45/54)" and nobody reads a conditional rate from 5 steps as if it meant something:
    reach r_i = steps reaching i / all steps; conditional c_i = steps reaching i / steps reaching i-1;
    marginal m_i = anchors right at slot i / anchors where slot i exists."""
    reach_counts = list(counts.reach_counts)
    previous = [counts.steps, *reach_counts[:-1]]
    return {
        "reach": [[r, counts.steps] for r in reach_counts],
        "conditional": [[r, p] for r, p in zip(reach_counts, previous)],
        "marginal": [[c, t] for c, t in zip(counts.marginal_correct, counts.marginal_total)],
    }


def smallest_attainable_p(n: int) -> float:
    """The smallest two-sided p an exact sign-flip permutation test can give on n paired prompts: 2 / 2^n
    (n = 4: 0.125). Below alpha only from n = 6 on, so fewer prompts cannot support a verdict at 0.05."""
    return 1.0 if n <= 0 else min(1.0, 2.0 / 2**n)


def bootstrap_tau_ci(counts: AcceptanceCounts, n_resamples: int = 10_000, seed: int = 0,
                     level: float = 0.95, kind: str = "macro") -> TauInterval:
    """Percentile bootstrap interval for tau, resampling *prompts* with replacement.

    Prompts, not steps, are resampled because steps within one generation are correlated; resampling steps
    would give intervals that are too narrow. kind="macro" recomputes tau_macro on each resample, kind="micro"
    recomputes tau_micro (sum committed / sum steps over the drawn prompts). Deterministic for a fixed seed
    (numpy default_rng; prompts taken in sorted id order).
    """
    check_resampling(kind, level, n_resamples)
    if not counts.per_prompt:
        raise ValueError("no prompts recorded; cannot bootstrap tau")
    ordered = [counts.per_prompt[pid] for pid in sorted(counts.per_prompt)]
    step_counts = np.array([s for s, _ in ordered], dtype=np.int64)
    committed = np.array([t for _, t in ordered], dtype=np.int64)
    draws = np.random.default_rng(seed).integers(0, len(ordered), size=(n_resamples, len(ordered)))
    if kind == "macro":
        estimate = tau_macro(counts)
        resampled = (committed / step_counts)[draws].mean(axis=1)
    else:
        estimate = tau_micro(counts)
        resampled = committed[draws].sum(axis=1) / step_counts[draws].sum(axis=1)
    tail = (1 - level) / 2
    low, high = np.quantile(resampled, [tail, 1 - tail])
    return TauInterval(estimate=estimate, low=float(low), high=float(high))


def by_prompt_set(counts_by_prompt: Mapping[str, AcceptanceCounts],
                  prompt_set_of: Mapping[str, str] | Callable[[str], str]) -> dict[str, AcceptanceCounts]:
    """Merge per-prompt counts into one AcceptanceCounts per prompt set (e.g. "humaneval", "mbpp").

    Keep counts per prompt (walk + its all-anchor rows) and group here: the pooled counts cannot be split
    back, because the histogram, reach and marginal counts are not stored per prompt.
    """
    lookup = prompt_set_of if callable(prompt_set_of) else prompt_set_of.__getitem__
    grouped: dict[str, AcceptanceCounts] = {}
    for prompt_id in sorted(counts_by_prompt):
        name = lookup(prompt_id)
        counts = counts_by_prompt[prompt_id]
        grouped[name] = counts if name not in grouped else grouped[name] + counts
    return grouped
