"""The gap between a drafter and a reference, explained by the doctor's variants: plain functions over
per-prompt (steps, committed) pairs, no torch.

One table, one population: every figure of the gap table (the gap itself, what each variant closes, each
share and every interval) is computed on the same paired prompts, those on which the drafter, the reference
and every variant have steps (`paired_prompts` counts them, of all the prompts asked about), and from the
same resampled prompts (numpy default_rng(seed), `n_resamples` draws of prompt indices: 10,000, the very draws
`diff` takes on the same prompts, so the gap's interval is diff's to rounding, only the quantile rule below
differs); `prompt_ids` names them:

gap              tau(reference) - tau(drafter as configured), paired over those prompts
closed by v      tau(drafter under variant v) - tau(drafter as configured), paired likewise
share of gap     closed by v / gap on those prompts (its point value is exactly closed / gap), with the
                 percentile interval of closed_d / gap_d over the same draws d that give the two deltas'
                 intervals. A draw where the gap vanishes (gap_d <= 0) counts as +inf, -inf or 0 by the sign
                 of closed_d, so a share's sign is its delta's sign in every draw; with the order-statistic
                 quantile (numpy method "inverted_cdf") on both, the share's interval lies above 0 exactly
                 when the delta's does. Without a gap above 0 (its own interval) the share has no bounded
                 interval (Fieller) and none is given.

A variant "explains" the gap when it closes a significant part of it (its own delta has an interval above
0 and p < 0.05); the paragraph names the variant that closes most and what to check in the training code.
"""

from __future__ import annotations

from typing import Any, TypedDict, cast

import numpy as np

from .compare import Delta, QuantileMethod, delta_from_table, paired_figure

MIN_EXPLAINED = 0.5  # below this share, the best variant explains only part of the gap (said so)
QUANTILE: QuantileMethod = "inverted_cdf"  # an order statistic: the same draws rank a delta and its share alike


def _taus(per_prompt: dict, ids: list[str]) -> np.ndarray:
    return np.array([per_prompt[p][1] / per_prompt[p][0] for p in ids], dtype=float)


def _paired(a: dict, b: dict, ids: list[str], draws, seed: int, total: int) -> Delta:
    """b - a over exactly `ids`, its interval from exactly `draws`."""
    table = np.array([(*a[p], *b[p]) for p in ids], dtype=float)
    return delta_from_table(table, seed=seed, total=total, draws=draws, method=QUANTILE)


def share_interval(closed_draws: np.ndarray, gap_draws: np.ndarray, level: float = 0.95) -> list[float]:
    """The percentile interval of closed_d / gap_d; a draw without a gap (gap_d <= 0) is sign(closed_d) x inf,
    so the ratio's sign is the delta's in every draw (module docstring)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = np.where(gap_draws > 0, closed_draws / np.where(gap_draws > 0, gap_draws, 1.0),
                          np.sign(closed_draws) * np.inf)
    tail = (1 - level) / 2
    return [float(x) for x in np.quantile(ratios, [tail, 1 - tail], method=QUANTILE)]


class VariantRow(TypedDict):
    """One variant's row of explain_gap's table (run.json keeps part of it: documents' GapRow)."""

    variant: str
    closed: dict[str, Any] | None  # Delta.to_dict(); None without a paired prompt
    share: float | None  # closed / gap; None where the gap is not above 0 (or too few pairs)
    share_ci: list[float] | None  # the share's bootstrap interval (share_interval); None without a gap
    significant: bool  # the variant's own delta: interval above 0 and p < 0.05
    bug: str  # what a gain suggests
    check: str  # what to check in training


def explain_gap(base: dict, reference: dict, variants: list[tuple[str, dict, str, str]], *, base_name: str,
                reference_name: str, seed: int = 0, n_resamples: int = 10_000) -> dict[str, Any]:
    """variants: (name, per_prompt, what a gain suggests, what to check in training). Per-prompt dicts map
    prompt id -> (steps, committed) (counted or expected)."""
    total = len(base)
    ids = sorted(p for p in base if base[p][0] > 0 and reference.get(p, (0, 0))[0] > 0
                 and all(v[1].get(p, (0, 0))[0] > 0 for v in variants))  # prompts every side has steps on
    draws = np.random.default_rng(seed).integers(0, len(ids), size=(n_resamples, len(ids)))
    if Delta(0, 0, 0, 1, len(ids)).too_few:  # no share of a gap can be estimated on fewer than 6 pairs
        gap = _paired(base, reference, ids, draws, seed, total) if ids else None
        rows: list[VariantRow] = [{"variant": name, "closed": _paired(base, per_prompt, ids, draws, seed, total).to_dict() if ids else None,
                 "share": None, "share_ci": None, "significant": False, "bug": bug, "check": check}
                for name, per_prompt, bug, check in variants]
        paragraph = (f"{base_name} vs {reference_name}: " + (f"{paired_figure(gap)}; " if gap else "")
                     + f"only {len(ids)} of {total} prompts have steps on every side, too few to explain a gap")
        return {"base": base_name, "reference": reference_name, "gap": gap.to_dict() if gap else None,
                "variants": rows, "explained_by": None, "paragraph": paragraph, "paired_prompts": len(ids),
                "prompt_ids": ids,
                "reference_tau_macro": float(_taus(reference, ids).mean()) if ids else None}
    gap = _paired(base, reference, ids, draws, seed, total)
    t_base, t_ref = _taus(base, ids), _taus(reference, ids)
    gap_draws = (t_ref[draws] - t_base[draws]).mean(axis=1)
    rows = []
    for name, per_prompt, bug, check in variants:
        closed = _paired(base, per_prompt, ids, draws, seed, total)
        t_v = _taus(per_prompt, ids)
        share = closed.estimate / gap.estimate if gap.estimate > 0 else None
        interval = share_interval((t_v[draws] - t_base[draws]).mean(axis=1), gap_draws) if gap.low > 0 else None
        rows.append({"variant": name, "closed": closed.to_dict(), "share": share, "share_ci": interval,
                     "significant": closed.low > 0 and closed.p_value < 0.05, "bug": bug, "check": check})
    significant_gap = gap.low > 0 and gap.p_value < 0.05
    explained = [r for r in rows if r["significant"] and r["share"] is not None and r["share"] > 0]
    best = max(explained, key=lambda r: cast(float, r["share"])) if explained else None  # each has a share
    if not significant_gap:
        paragraph = (f"{base_name} is not significantly behind {reference_name} (gap: {paired_figure(gap)}): there "
                     "is no gap to explain.")
    elif best is None:
        paragraph = (f"{base_name} trails {reference_name} by {gap.estimate:.2f} tau ({paired_figure(gap)}), "
                     "and no classic train/eval mismatch closes any of it: the difference most likely lies in "
                     "training itself (data, length, capacity, learning rate), not in how the drafter is evaluated.")
    else:
        ci, share = best["share_ci"], best["share"]
        assert share is not None  # best is one of `explained`, each with a share
        part = "most of" if share > MIN_EXPLAINED else "part of"
        paragraph = (f"{base_name} trails {reference_name} by {gap.estimate:.2f} tau ({paired_figure(gap)}). "
                     f"Most likely it was {best['bug']}: evaluated that way ({best['variant']}) it closes {part} the "
                     f"gap, {100 * share:.0f}%" + (f" [{100 * ci[0]:.0f}%, {100 * ci[1]:.0f}%]" if ci else "")
                     + f". Check {best['check']}."
                     + ("" if share > MIN_EXPLAINED else
                        " The rest of the gap is not explained by any variant: look at training itself as well."))
    return {"base": base_name, "reference": reference_name, "gap": gap.to_dict(), "variants": rows,
            "explained_by": best["variant"] if best else None, "paragraph": paragraph, "paired_prompts": len(ids),
            "prompt_ids": ids,
            "reference_tau_macro": float(t_ref.mean())}  # on the paired prompts, as every figure beside it
