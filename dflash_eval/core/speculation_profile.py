"""`speculation_profile.json` v1.0 (NVIDIA Model-Optimizer `examples/specdec_bench/specdec_bench/
speculation_profile.py`, `build_profile`) built from a run's counts, so the profile a drafter ships with is the
one dflash-eval measured, in the schema Model-Optimizer's own producers write and its consumers read.

The names are a trap, so once, exactly:

- `marginal_accept_rates`: P(first i+1 drafts all accepted) (`_dense_survival`), what vLLM's
  `synthetic_acceptance_rates` take: our reach r_i (all-steps denominator).
- `conditional_accept_rates`: marginal[i] / marginal[i-1] (0.0 when the previous is 0), what Dynamo's
  `--aic-nextn-accept-rates` take: our conditional c_i = r_i / r_(i-1).
- `mean_accept_length`: the per-step mean of the length histogram: tau_micro.
- `mean_accept_length_per_request`: `AcceptanceRate.out["Average_AL"]`, a mean over requests: tau_macro.
- `acceptance_length_histogram`: {drafts + the bonus token: steps}: our histogram h_n keyed n + 1.

dflash-eval's own "marginal" m_i (teacher-forced: slot i right whatever earlier slots did) is neither, and is
never written here. Model-Optimizer rounds to 6 digits; these rates are written unrounded, so they equal the
run's numbers exactly. A step with no bonus token (the one that reaches the length cap) counts its committed
tokens as its length, as the run's histogram does (metrics.py), so 1 + sum(marginals) = tau_micro holds exactly.

Model-Optimizer's `validation` block, transcribed: `mean_consistency` (|1 + sum(marginals) - mean| <= 0.02,
`_consistency_check`) and `marginal_monotonicity` (no marginal above the previous by more than 1e-9,
`_monotonicity_check`). DFlash re-plans its block when k changes (`accept_length_model: measured_per_k`), so
a profile holds one entry per k the run measured with its own walk (`run --draft-lengths`), never the full
block's walk cut at k: the top level is the chosen k, `profiles_by_k` every measured k.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

SCHEMA_VERSION = "1.0"
TOLERANCE = 0.02  # _consistency_check's default
MONOTONE_SLACK = 1e-9  # _monotonicity_check's
CONVENTIONS = {
    "marginal_accept_rates": "reach r_i: share of all steps whose accepted prefix reaches draft slot i (unconditional; "
                             "vLLM synthetic_acceptance_rates); not dflash-eval's teacher-forced marginal m_i",
    "conditional_accept_rates": "c_i = r_i / r_(i-1), r_0 = 1 (0.0 where r_(i-1) = 0): P(draft i accepted | drafts "
                                "1..i-1 accepted) (Dynamo --aic-nextn-accept-rates)",
    "mean_accept_length": "tau_micro: committed tokens / steps (drafts + the bonus token)",
    "mean_accept_length_per_request": "tau_macro: mean over prompts of committed tokens / steps",
    "acceptance_length_histogram": "{n + 1: steps that accepted exactly n drafts}",
    "block_size": "the drafter's trained block B (slot 0 is the anchor): vLLM num_speculative_tokens = k, SGLang "
                  "--speculative-num-draft-tokens = k + 1",
}


def checkpoint_id(path: str | None) -> str | None:
    """Model-Optimizer's `checkpoint_id`: a path reduced to its last two components (the HF-style org/model),
    so a published profile carries no local directory layout."""
    parts = [p for p in str(path or "").replace("\\", "/").split("/") if p]
    if not parts:
        return None
    return "/".join(parts[-2:])


def mean_consistency(mean: float, marginals: Sequence[float]) -> dict[str, Any]:
    implied = 1.0 + sum(marginals)
    delta = abs(implied - mean)
    return {"implied_mean_accept_length": implied, "reported_mean_accept_length": mean, "abs_delta": delta,
            "tolerance": TOLERANCE, "passed": delta <= TOLERANCE}


def marginal_monotonicity(marginals: Sequence[float]) -> dict[str, Any]:
    violations = [{"position": i, "value": marginals[i], "previous": marginals[i - 1]}
                  for i in range(1, len(marginals)) if marginals[i] > marginals[i - 1] + MONOTONE_SLACK]
    return {"passed": not violations, "violations": violations}


def entry(k: int, metrics: Mapping[str, Any], per_category: dict[str, Any] | None = None) -> dict[str, Any]:
    """The per-k part of a profile from one draft length's metrics (its own walks, all-steps denominators)."""
    marginals = [float(r) for r in metrics["reach"]]
    if len(marginals) != k:
        raise ValueError(f"metrics at k = {k} hold {len(marginals)} reach values")
    conditional, previous = [], 1.0
    for r in marginals:
        conditional.append(r / previous if previous > 0 else 0.0)
        previous = r
    mean = float(metrics["tau_micro"])
    return {
        "num_speculative_tokens": k,
        "conditional_accept_rates": conditional,
        "marginal_accept_rates": marginals,
        "mean_accept_length": mean,
        "mean_accept_length_per_request": float(metrics["tau_macro"]),
        "steps": int(metrics["steps"]),
        "acceptance_length_histogram": {str(n + 1): int(c) for n, c in enumerate(metrics["histogram"]) if c},
        "per_category": per_category,
        "validation": {"mean_consistency": mean_consistency(mean, marginals),
                       "marginal_monotonicity": marginal_monotonicity(marginals)},
    }


def build(k: int, by_k: Mapping[int, Mapping[str, Any]], *, method: str, block_size: int,
          draft_checkpoint: dict[str, Any], target_model: dict[str, Any],
          measurement_conditions: dict[str, Any], per_category: dict[str, Any] | None = None) -> dict[str, Any]:
    """The profile: the identity, the entry at `k` at the top level, every measured k in `profiles_by_k`.
    `by_k` maps each measured draft length to its metrics; `per_category` belongs to k = B - 1 only."""
    entries = {j: entry(j, by_k[j], per_category if j == block_size - 1 else None) for j in sorted(by_k)}
    top = entries[k]
    return {
        "schema_version": SCHEMA_VERSION,
        "measured": True,
        "method": method,
        "draft_checkpoint": draft_checkpoint,
        "target_model": target_model,
        "num_speculative_tokens": k,
        "block_size": block_size,
        "max_supported_k": block_size - 1,
        "verification_method": "longest_prefix",
        "conditional_accept_rates": top["conditional_accept_rates"],
        "marginal_accept_rates": top["marginal_accept_rates"],
        "mean_accept_length": top["mean_accept_length"],
        "mean_accept_length_per_request": top["mean_accept_length_per_request"],
        "accept_length_model": "measured_per_k",
        "accept_length_by_k": {str(j): e["mean_accept_length"] for j, e in entries.items()},
        "acceptance_length_histogram": top["acceptance_length_histogram"],
        "per_category": top["per_category"],
        "measurement_conditions": measurement_conditions,
        "validation": top["validation"],
        "profiles_by_k": {str(j): e for j, e in entries.items()},
        "conventions": CONVENTIONS,
    }
