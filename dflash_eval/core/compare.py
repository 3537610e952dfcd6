"""Paired comparison of drafters A and B evaluated on the same prompts: the statistics of `dflash-eval diff`.

Every delta is B - A, so a positive delta means B accepts more. Prompts are paired by id; prompts are the unit
of resampling (steps within one generation are correlated, see metrics.bootstrap_tau_ci).

| quantity         | definition                                                            | peer convention         |
|------------------|-----------------------------------------------------------------------|-------------------------|
| delta tau, macro | mean over prompts p of (t_Bp / s_Bp - t_Ap / s_Ap)                    | z-lab's published tau   |
| delta tau, micro | sum t_B / sum s_B - sum t_A / sum s_A over the paired prompts         | vLLM mean accept. len.  |
| interval         | paired percentile bootstrap: resample prompt indices with replacement | scipy.stats.bootstrap   |
|                  | (numpy default_rng(seed)), recompute both drafters on the same draw   | (method="percentile")   |
| p-value          | two-sided paired permutation test. macro: flip the sign of per-prompt | scipy.stats.            |
|                  | differences; micro: swap A/B labels per prompt. n <= 16 prompts:      | permutation_test        |
|                  | exact over all 2^n patterns, p = #(|stat| >= |observed|) / 2^n;       | (permutation_type=      |
|                  | else Monte Carlo, p = (#hits + 1) / (n_resamples + 1)                 | "samples")              |
| sign test        | exact two-sided binomial test on the signs of nonzero differences     | scipy.stats.binomtest   |
| slot deltas      | per slot i, B - A of reach r_i (all-steps denominator, as vLLM),      | metrics.py definitions  |
|                  | conditional c_i, marginal m_i; None where either side is undefined    |                         |
| histogram shift  | h_B(n) - h_A(n), mean n difference, total variation sum|h_B - h_A|/2  |                         |

Here s = steps and t = committed tokens (sum of n + 1) per prompt. Ties in the permutation test are compared
with a 1e-9 relative tolerance, so patterns that equal the observed statistic up to rounding count as hits.
If no prompt's tau differs (micro: no prompt's counts differ) the delta is exactly 0 with interval [0, 0]
and p = 1. Drafters with different block sizes can be compared on tau; per-slot lists then run to the larger
block and read None (slots) or 0 (histogram shares) where a drafter has no such slot.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Literal

import numpy as np

from dflash_eval.core.metrics import AcceptanceCounts, check_resampling, conditional, histogram, marginal, reach

# the numpy quantile rules this package uses (numpy types `method` as the literal names it knows)
QuantileMethod = Literal["linear", "inverted_cdf"]

EXACT_MAX_PROMPTS = 16  # up to 2^16 = 65536 sign patterns are enumerated exactly
_TIE_TOLERANCE = 1e-9


@dataclass(frozen=True)
class Delta:
    """tau(B) - tau(A) with its paired-bootstrap interval [low, high], permutation p-value and prompt count:
    `n` prompts paired (steps on both sides) of the `total` the comparison was asked about."""

    estimate: float
    low: float
    high: float
    p_value: float
    n: int
    total: int | None = field(default=None, compare=False)  # None: not known (a Delta made by hand)

    @property
    def too_few(self) -> bool:
        """Fewer pairs than an exact permutation test needs to reach p < 0.05 (n < 6): no interval or p
        means anything then, and none is shown."""
        from .metrics import smallest_attainable_p

        return smallest_attainable_p(self.n) >= 0.05

    def to_dict(self) -> dict:
        data = asdict(self)
        if self.total is None:
            del data["total"]
        return data


def paired_figure(delta: Delta | dict, digits: int = 2) -> str:
    """The one way a paired delta is written out: estimate, interval and p, and how many prompts it pairs
    of how many; over too few pairs (n < 6) the estimate alone, saying so, never a verdict-shaped line."""
    d = delta.to_dict() if isinstance(delta, Delta) else delta
    n, total = d.get("n"), d.get("total")
    pairs = f"{n} of {total} prompts paired" if total is not None and total != n else f"{n} prompts paired"
    if Delta(0, 0, 0, 1, n or 0).too_few:
        return (f"delta {d['estimate']:+.{digits}f} over {pairs}: too few pairs for an interval or a p-value "
                "(6 or more needed)")
    p = "p < 0.001" if d["p_value"] < 0.001 else f"p = {d['p_value']:.3g}"
    return f"delta {d['estimate']:+.{digits}f} [{d['low']:.{digits}f}, {d['high']:.{digits}f}], {p}, {pairs}"


def paired_prompts(a: AcceptanceCounts, b: AcceptanceCounts) -> list[str]:
    """Sorted ids present in both counts with steps > 0 in both. ValueError if the two prompt sets differ."""
    only_a = sorted(a.per_prompt.keys() - b.per_prompt.keys())
    only_b = sorted(b.per_prompt.keys() - a.per_prompt.keys())
    if only_a or only_b:
        example = (only_a or only_b)[0]
        raise ValueError(f"A and B were evaluated on different prompts: {len(only_a)} only in A, "
                         f"{len(only_b)} only in B (e.g. {example!r}); compare runs on the same prompt set")
    return sorted(pid for pid in a.per_prompt if a.per_prompt[pid][0] > 0 and b.per_prompt[pid][0] > 0)


def _paired_arrays(a: AcceptanceCounts, b: AcceptanceCounts) -> tuple[list[str], np.ndarray]:
    """(ids, int array [prompts, 4] of steps_A, committed_A, steps_B, committed_B)."""
    ids = paired_prompts(a, b)
    if not ids:
        raise ValueError("no prompt has steps in both A and B; nothing to compare")
    rows = [(*a.per_prompt[pid], *b.per_prompt[pid]) for pid in ids]
    return ids, np.array(rows, dtype=np.int64)


def delta_tau_per_prompt(a: dict, b: dict, *, kind: str = "macro", seed: int = 0,
                         common_only: bool = False) -> Delta:
    """`delta_tau` over per-prompt (steps, committed) pairs given as dicts: integer counts, or the expected
    steps and committed tokens of an offline estimate (estimates.EstimateSums.per_prompt), paired alike.
    `common_only`: pair the prompts both have (doctor's context variants make new continuations, and a
    prompt whose continuation ends at once has no step there); otherwise different prompt sets are refused."""
    only_a, only_b = sorted(a.keys() - b.keys()), sorted(b.keys() - a.keys())
    total = len(a.keys() | b.keys())
    if (only_a or only_b) and common_only:
        a, b = ({k: v for k, v in d.items() if k in a.keys() & b.keys()} for d in (a, b))
    elif only_a or only_b:
        raise ValueError(f"prompt sets differ: {len(only_a)} only in A, {len(only_b)} only in B")
    ids = sorted(pid for pid in a if a[pid][0] > 0 and b[pid][0] > 0)
    if not ids:
        raise ValueError("no prompt has steps in both A and B; nothing to compare")
    table = np.array([(*a[pid], *b[pid]) for pid in ids], dtype=float)
    return delta_from_table(table, kind=kind, seed=seed, total=total)


def paired_row(a: dict, b: dict, *, seed: int = 0) -> dict | None:
    """One table row comparing A and B: each side's steps and tau macro and the paired delta B - A, every
    figure over the same prompts (those with steps on both sides), so that the delta is exactly
    tau_macro_b - tau_macro_a of the row it sits in; None when no prompt has steps on both."""
    ids = sorted(p for p in a.keys() & b.keys() if a[p][0] > 0 and b[p][0] > 0)
    if not ids:
        return None
    delta = delta_tau_per_prompt(a, b, seed=seed, common_only=True)
    return {"steps_a": sum(a[p][0] for p in ids), "steps_b": sum(b[p][0] for p in ids),
            "tau_macro_a": float(np.mean([a[p][1] / a[p][0] for p in ids])),
            "tau_macro_b": float(np.mean([b[p][1] / b[p][0] for p in ids])), "delta_tau_macro": delta.to_dict()}


def _statistic(kind: str, s_a, t_a, s_b, t_b) -> np.ndarray:
    """tau(B) - tau(A) along the last axis (each argument [..., prompts])."""
    if kind == "macro":
        return (t_b / s_b - t_a / s_a).mean(axis=-1)
    return t_b.sum(axis=-1) / s_b.sum(axis=-1) - t_a.sum(axis=-1) / s_a.sum(axis=-1)


def delta_tau(a: AcceptanceCounts, b: AcceptanceCounts, *, kind: str = "macro", n_resamples: int = 10_000,
              seed: int = 0, level: float = 0.95) -> Delta:
    """tau(B) - tau(A) on the paired prompts, with paired bootstrap interval and permutation p-value.

    Deterministic for a fixed seed: one numpy default_rng(seed) draws the bootstrap indices, then (for more
    than 16 prompts) the Monte Carlo swap patterns.
    """
    check_resampling(kind, level, n_resamples)
    _, table = _paired_arrays(a, b)
    return delta_from_table(table, kind=kind, n_resamples=n_resamples, seed=seed, level=level,
                             total=len(a.per_prompt))


def delta_from_table(table: np.ndarray, *, kind: str = "macro", n_resamples: int = 10_000, seed: int = 0,
                      level: float = 0.95, total: int | None = None, draws: np.ndarray | None = None,
                      method: QuantileMethod = "linear") -> Delta:
    """`draws` (resampled prompt indices, [resamples, prompts]): given, the interval comes from exactly these
    draws (a table of several deltas over one population shares them); `method`: numpy's quantile rule."""
    s_a, t_a, s_b, t_b = table.T
    n = len(table)
    # Exactly zero when every prompt's tau agrees (integer cross-multiplication, no rounding).
    unchanged = (t_a * s_b == t_b * s_a) if kind == "macro" else (table[:, :2] == table[:, 2:]).all(axis=1)
    if unchanged.all():
        return Delta(estimate=0.0, low=0.0, high=0.0, p_value=1.0, n=n, total=total)
    estimate = float(_statistic(kind, s_a, t_a, s_b, t_b))

    rng = np.random.default_rng(seed)
    if draws is None:
        draws = rng.integers(0, n, size=(n_resamples, n))
    resampled = _statistic(kind, s_a[draws], t_a[draws], s_b[draws], t_b[draws])
    tail = (1 - level) / 2
    low, high = np.quantile(resampled, [tail, 1 - tail], method=method)

    if n <= EXACT_MAX_PROMPTS:
        swap = np.array(list(itertools.product((False, True), repeat=n)), dtype=bool)
    else:
        swap = rng.integers(0, 2, size=(n_resamples, n)).astype(bool)
    # Swapping a prompt's labels flips the sign of its difference (macro) or moves its counts across (micro).
    permuted = _statistic(kind, np.where(swap, s_b, s_a), np.where(swap, t_b, t_a),
                          np.where(swap, s_a, s_b), np.where(swap, t_a, t_b))
    hits = int((np.abs(permuted) >= abs(estimate) * (1 - _TIE_TOLERANCE)).sum())
    p_value = hits / len(swap) if n <= EXACT_MAX_PROMPTS else (hits + 1) / (n_resamples + 1)
    return Delta(estimate=estimate, low=float(low), high=float(high), p_value=min(1.0, p_value), n=n, total=total)


def sign_test(differences: Sequence[float]) -> float:
    """Two-sided exact binomial sign test, zeros dropped: 2 * P(X <= min(#pos, #neg)), X ~ Bin(#nonzero, 1/2)."""
    positive = sum(1 for d in differences if d > 0)
    negative = sum(1 for d in differences if d < 0)
    n = positive + negative
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(positive, negative) + 1))
    return min(1.0, 2 * tail / 2**n)  # int / int: exact big-integer ratio, rounded once


def _subtract(xs: list[float | None], ys: list[float | None], length: int) -> list[float | None]:
    xs = xs + [None] * (length - len(xs))
    ys = ys + [None] * (length - len(ys))
    return [None if x is None or y is None else y - x for x, y in zip(xs, ys)]


def slot_deltas(a: AcceptanceCounts, b: AcceptanceCounts) -> dict[str, list[float | None]]:
    """Per slot i = 1..B-1, B - A of reach (all-steps denominator), conditional and marginal.

    Marginal is all None when either side has no all-anchor statistics (live runs have none).
    """
    paired_prompts(a, b)
    slots = max(a.block_size, b.block_size) - 1

    def marginal_or_none(counts: AcceptanceCounts) -> list[float | None]:
        return marginal(counts) if sum(counts.marginal_total) else [None] * slots

    return {"reach": _subtract(reach(a, "all"), reach(b, "all"), slots),
            "conditional": _subtract(conditional(a, "all"), conditional(b, "all"), slots),
            "marginal": _subtract(marginal_or_none(a), marginal_or_none(b), slots)}


def histogram_shift(a: AcceptanceCounts, b: AcceptanceCounts) -> dict:
    """Shares of steps accepting exactly n for A and B, their difference B - A, mean n and total variation."""
    paired_prompts(a, b)
    size = max(a.block_size, b.block_size)
    h_a = histogram(a) + [0.0] * (size - a.block_size)
    h_b = histogram(b) + [0.0] * (size - b.block_size)
    difference = [y - x for x, y in zip(h_a, h_b)]
    mean_a, mean_b = a.accepted_draft_tokens / a.steps, b.accepted_draft_tokens / b.steps
    return {"a": h_a, "b": h_b, "difference": difference, "mean_n_a": mean_a, "mean_n_b": mean_b,
            "mean_n_difference": mean_b - mean_a,
            "total_variation": 0.5 * sum(abs(d) for d in difference)}


def _signed(x: float) -> str:
    return f"{round(x, 2) + 0.0:+.2f}"  # + 0.0 turns -0.0 into 0.0, so no "-0.00"


def verdict(delta: Delta, name_a: str, name_b: str, *, threshold: float = 0.0, alpha: float = 0.05) -> str:
    """One line: B is better / worse than / indistinguishable from A, with delta, interval, p and prompt count.

    Better when the whole interval lies above `threshold` and the permutation test agrees (p < alpha), worse
    when it lies below -threshold with p < alpha; anything else is indistinguishable. The p condition
    matters on few prompts, where a bootstrap interval can collapse to a point that excludes 0 while the
    exact permutation test (p = 1 on one prompt) says nothing is shown.
    """
    from .metrics import smallest_attainable_p

    floor = smallest_attainable_p(delta.n)
    prompts = "prompt" if delta.n == 1 else "prompts"
    of = f" of {delta.total}" if delta.total is not None and delta.total != delta.n else ""
    if floor >= alpha:
        return (f"too few prompts for a verdict (n = {delta.n}{of + ' paired' if of else ''}, smallest attainable "
                f"p = {floor:.3g} >= {alpha:g}): delta tau = {_signed(delta.estimate)} for {name_b} vs {name_a}")
    significant = delta.p_value < alpha
    excludes_zero = delta.low > 0 or delta.high < 0
    if significant and delta.low > threshold and delta.low > 0:
        relation = "is better than"
    elif significant and delta.high < -threshold and delta.high < 0:
        relation = "is worse than"
    else:
        relation = "is indistinguishable from"
    p = "p < 0.001" if delta.p_value < 0.001 else f"p = {delta.p_value:.3g}"
    why = (f"; the interval excludes 0 but the permutation test does not (p >= {alpha:g})"
           if relation == "is indistinguishable from" and excludes_zero and not significant else "")
    return (f"{name_b} {relation} {name_a}: delta tau = {_signed(delta.estimate)} "
            f"[{round(delta.low, 2) + 0.0:.2f}, {round(delta.high, 2) + 0.0:.2f}] ({p}, {delta.n}{of} {prompts}"
            f"{' paired' if of else ''}){why}")


def per_prompt_differences(a: AcceptanceCounts, b: AcceptanceCounts) -> list[tuple[str, float, float, float]]:
    """(prompt id, tau A, tau B, B - A) per paired prompt, most regressed first (ties by id)."""
    ids, table = _paired_arrays(a, b)
    rows = [(pid, t_a / s_a, t_b / s_b, t_b / s_b - t_a / s_a)
            for pid, (s_a, t_a, s_b, t_b) in zip(ids, table.tolist())]
    return sorted(rows, key=lambda row: (row[3], row[0]))


def top_changes(a: AcceptanceCounts, b: AcceptanceCounts, k: int = 10) -> tuple[list, list]:
    """(up to k most regressed prompts, most regressed first; up to k most improved, most improved first).

    Unchanged prompts appear in neither list.
    """
    rows = per_prompt_differences(a, b)
    regressed = [row for row in rows if row[3] < 0][:k]
    improved = [row for row in reversed(rows) if row[3] > 0][:k]
    return regressed, improved
