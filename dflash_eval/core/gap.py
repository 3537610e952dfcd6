"""The gap between a drafter and a reference, explained by the doctor's variants: plain functions over
per-prompt (steps, committed) pairs, no torch.

gap              tau(reference) - tau(drafter as configured), paired over prompts (compare.delta_tau_per_prompt)
closed by v      tau(drafter under variant v) - tau(drafter as configured), paired likewise
share of gap     closed by v / gap, with a paired percentile bootstrap interval: the same resampled prompts
                 give both the numerator and the denominator (numpy default_rng(seed), 2000 draws)

A variant "explains" the gap when it closes a significant part of it (its own delta has an interval above
0 and p < 0.05); the paragraph names the variant that closes most and what to check in the training code.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .compare import Delta, delta_tau_per_prompt, paired_figure

MIN_EXPLAINED = 0.5  # below this share, the best variant explains only part of the gap (said so)


def _taus(per_prompt: dict, ids: list[str]) -> np.ndarray:
    return np.array([per_prompt[p][1] / per_prompt[p][0] for p in ids], dtype=float)


def explain_gap(base: dict, reference: dict, variants: list[tuple[str, dict, str, str]], *, base_name: str,
                reference_name: str, seed: int = 0, n_resamples: int = 2000) -> dict[str, Any]:
    """variants: (name, per_prompt, what a gain suggests, what to check in training). Per-prompt dicts map
    prompt id -> (steps, committed) (counted or expected)."""
    gap = delta_tau_per_prompt(base, reference, seed=seed)
    ids = sorted(p for p in base if base[p][0] > 0 and reference.get(p, (0, 0))[0] > 0
                 and all(v[1].get(p, (0, 0))[0] > 0 for v in variants))  # prompts every side has steps on
    if Delta(0, 0, 0, 1, len(ids)).too_few:  # no share of a gap can be estimated on fewer than 6 pairs
        rows = [{"variant": name, "closed": delta_tau_per_prompt(base, per_prompt, seed=seed, common_only=True).to_dict(),
                 "share": None, "share_ci": None, "significant": False, "bug": bug, "check": check}
                for name, per_prompt, bug, check in variants]
        paragraph = (f"{base_name} vs {reference_name}: {paired_figure(gap)}; only {len(ids)} of {len(base)} prompts "
                     "have steps on every side, too few to explain a gap")
        return {"base": base_name, "reference": reference_name, "gap": gap.to_dict(), "variants": rows,
                "explained_by": None, "paragraph": paragraph, "paired_prompts": len(ids)}
    t_base, t_ref = _taus(base, ids), _taus(reference, ids)
    draws = np.random.default_rng(seed).integers(0, len(ids), size=(n_resamples, len(ids)))
    gap_draws = (t_ref[draws] - t_base[draws]).mean(axis=1)
    rows = []
    for name, per_prompt, bug, check in variants:
        closed = delta_tau_per_prompt(base, per_prompt, seed=seed, common_only=True)
        t_v = _taus(per_prompt, ids)
        share = float((t_v - t_base).mean() / (t_ref - t_base).mean()) if (t_ref - t_base).mean() else None
        with np.errstate(divide="ignore", invalid="ignore"):
            ratios = (t_v[draws] - t_base[draws]).mean(axis=1) / gap_draws
        ratios = ratios[np.isfinite(ratios)]
        interval = [float(x) for x in np.quantile(ratios, [0.025, 0.975])] if len(ratios) else None
        rows.append({"variant": name, "closed": closed.to_dict(), "share": share, "share_ci": interval,
                     "significant": closed.low > 0 and closed.p_value < 0.05, "bug": bug, "check": check})
    significant_gap = gap.low > 0 and gap.p_value < 0.05
    explained = [r for r in rows if r["significant"] and r["share"] is not None and r["share"] > 0]
    best = max(explained, key=lambda r: r["share"]) if explained else None
    if not significant_gap:
        paragraph = (f"{base_name} is not significantly behind {reference_name} (gap: {paired_figure(gap)}): there "
                     "is no gap to explain.")
    elif best is None:
        paragraph = (f"{base_name} trails {reference_name} by {gap.estimate:.2f} tau ({paired_figure(gap)}), "
                     "and no classic train/eval mismatch closes any of it: the difference most likely lies in "
                     "training itself (data, length, capacity, learning rate), not in how the drafter is evaluated.")
    else:
        ci = best["share_ci"]
        part = "most of" if best["share"] > MIN_EXPLAINED else "part of"
        paragraph = (f"{base_name} trails {reference_name} by {gap.estimate:.2f} tau ({paired_figure(gap)}). "
                     f"Most likely it was {best['bug']}: evaluated that way ({best['variant']}) it closes {part} the "
                     f"gap, {100 * best['share']:.0f}%" + (f" [{100 * ci[0]:.0f}%, {100 * ci[1]:.0f}%]" if ci else "")
                     + f". Check {best['check']}."
                     + ("" if best["share"] > MIN_EXPLAINED else
                        " The rest of the gap is not explained by any variant: look at training itself as well."))
    return {"base": base_name, "reference": reference_name, "gap": gap.to_dict(), "variants": rows,
            "explained_by": best["variant"] if best else None, "paragraph": paragraph, "paired_prompts": len(ids)}
