"""The gap a run measures, explained in the same run (`run --reference`): doctor's variants replayed on the
run's own trajectories, read back from its rows into one section of run.json. Pure: counts in, figures out.

Why here and not in doctor alone: a user who ran `run --reference` has already paid for the target pass of
every prompt; replaying the drafter under each classic bug's variant on those same trajectories costs
drafter passes only, and the answer ("behaves as if trained with the anchor in its context, which closes
107% of the gap") then sits beside the gap itself, computed on the same prompts (issue 48).

Each explained drafter's samples.jsonl row carries `explain` (commands/explain.py writes it): the
reference's name and, per variant, the walk's (steps, committed tokens) and (flagged blocks, blocks) on that
prompt's trajectory. From every row of the run, `explanation_documents` builds per explained drafter:

| figure            | definition (every one over the same prompts: all the run measured, those with steps)      |
|-------------------|--------------------------------------------------------------------------------------------|
| gap               | tau(reference) - tau(drafter as configured), paired over prompts (core/compare.py)         |
| behind            | the gap's interval above 0 and its permutation p < 0.05: only then is the gap explained     |
| variant delta     | tau(drafter under the variant) - tau(as configured), paired likewise, from the gap table's   |
|                   | own bootstrap draws (core/gap.py): the same figure in the variants table and the verdict    |
| share of the gap  | core/gap.explain_gap: closed / gap, with the interval from the same bootstrap draws          |
| flagged share     | the variant walk's blocks flagged by core/repetition.py / its blocks (does the fix also      |
|                   | remove the loops?); "as configured" is the run's own repetition count                        |
| verdict           | `as_if_verdict` of the variant with the largest delta among those with a significant gain   |
|                   | (`significant_gain`), the rule doctor's verdict follows (doctor/commands/doctor.summarize)  |
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .compare import Delta, paired_figure
from .gap import explain_gap

MIN_GAIN = 0.1  # tau a variant must add (beside its interval above 0 and p < 0.05) to be named


def significant_gain(delta: dict[str, Any], min_gain: float = MIN_GAIN) -> bool:
    """A variant's delta over the configuration that names it: interval above 0, p < 0.05, >= min_gain."""
    return delta["low"] > 0 and delta["p_value"] < 0.05 and delta["estimate"] >= min_gain


def as_if_verdict(bug: str, tau_configured: float, tau_variant: float, delta: dict[str, Any]) -> str:
    """doctor's sentence for a variant that wins: 'behaves as if <bug>: tau a -> b when evaluated that way'."""
    return (f"behaves as if {bug}: tau {tau_configured:.2f} -> {tau_variant:.2f} when evaluated that way "
            f"({paired_figure(delta)})")


def _mean_tau(per_prompt: Mapping[str, tuple[float, float]]) -> float | None:
    taus = [c / s for s, c in (per_prompt[p] for p in sorted(per_prompt)) if s > 0]
    return sum(taus) / len(taus) if taus else None


def _share(flagged: int, blocks: int) -> float | None:
    return flagged / blocks if blocks else None


def is_behind(gap: dict[str, Any] | None) -> bool:
    """The reference is measurably ahead: the gap's interval lies above 0 and p < 0.05 (enough pairs)."""
    return bool(gap and not Delta(0, 0, 0, 1, gap.get("n") or 0).too_few and gap["low"] > 0 and gap["p_value"] < 0.05)


def explanation_documents(rows: list[dict[str, Any]], *, seed: int = 0) -> list[dict[str, Any]]:
    """run.json's `explanation`: one entry per drafter whose rows carry `explain`, in the rows' drafter order."""
    names: list[str] = []
    for row in rows:
        if row.get("explain") and row["drafter"] not in names:
            names.append(row["drafter"])
    return [explain_drafter(rows, name, seed=seed) for name in names]


def per_prompt_of(rows: list[dict[str, Any]], name: str) -> dict[str, tuple[int, int]]:
    """prompt id -> (steps, committed) of one drafter's rows (their counts' per_prompt), (0, 0) for a prompt
    whose continuation ended at once (no step): every prompt the run measured is counted."""
    out: dict[str, tuple[int, int]] = {}
    for row in rows:
        if row["drafter"] == name:
            out.setdefault(row["prompt_id"], (0, 0))
            for pid, (steps, committed) in ((row.get("counts") or {}).get("per_prompt") or {}).items():
                out[pid] = (int(steps), int(committed))
    return out


def explain_drafter(rows: list[dict[str, Any]], name: str, *, seed: int = 0) -> dict[str, Any]:
    """One drafter's explanation from the run's rows (module docstring)."""
    mine = [r for r in rows if r["drafter"] == name]
    reference = mine[0]["explain"]["reference"]
    missing = [r["prompt_id"] for r in mine if not r.get("explain")]
    if missing:  # a row without its variants: the explanation would cover fewer prompts than the run
        raise ValueError(f"drafter {name!r}: the rows of prompts {missing[:3]} carry no explanation")
    base, ref = per_prompt_of(rows, name), per_prompt_of(rows, reference)
    variants: dict[str, dict[str, Any]] = {}
    for row in mine:
        for entry in row["explain"]["variants"]:
            v = variants.setdefault(entry["variant"], {"variant": entry["variant"], "bug": entry["bug"],
                                                       "check": entry["check"], "per_prompt": {},
                                                       "flagged_blocks": 0, "blocks": 0})
            v["per_prompt"][row["prompt_id"]] = tuple(entry["counts"])
            v["flagged_blocks"] += entry["flagged"][0]
            v["blocks"] += entry["flagged"][1]
    flagged = sum((r.get("repetition") or {}).get("flagged_blocks", 0) for r in mine)
    blocks = sum((r.get("repetition") or {}).get("blocks", 0) for r in mine)
    tau0 = _mean_tau(base)
    table = [{"variant": "as configured", "tau_macro": tau0, "flagged_share": _share(flagged, blocks),
              "flagged_blocks": flagged, "blocks": blocks}]
    gap = explain_gap(base, ref, [(v["variant"], v["per_prompt"], v["bug"], v["check"]) for v in variants.values()],
                      base_name=name, reference_name=reference, seed=seed)
    # each variant's delta is the gap table's own (the same prompts, the same bootstrap draws): one figure for
    # one quantity, in the variants table, the gap table and the verdict alike
    closed = {row["variant"]: row["closed"] for row in gap["variants"]}
    wins = []
    for v in variants.values():
        delta = closed[v["variant"]]  # None: no prompt has steps on every side (every continuation ended at once)
        entry = {"variant": v["variant"], "bug": v["bug"], "tau_macro": _mean_tau(v["per_prompt"]), "delta": delta,
                 "flagged_share": _share(v["flagged_blocks"], v["blocks"]), "flagged_blocks": v["flagged_blocks"],
                 "blocks": v["blocks"]}
        table.append(entry)
        if delta is not None and not Delta(0, 0, 0, 1, delta.get("n") or 0).too_few and significant_gain(delta):
            wins.append(entry)
    behind = is_behind(gap["gap"])
    if not behind:
        figure = paired_figure(gap["gap"]) if gap["gap"] else "no prompt with steps on both sides"
        verdict, finding = f"{name} is not measurably behind {reference} (gap: {figure}): no gap to explain", None
    elif wins:
        best = max(wins, key=lambda e: e["delta"]["estimate"])
        assert tau0 is not None  # behind: the gap has enough paired prompts, each with steps in the configuration
        verdict, finding = as_if_verdict(best["bug"], tau0, best["tau_macro"], best["delta"]), best["variant"]
    else:
        verdict, finding = (f"no variant beats the configuration (tau {tau0:.2f}): the gap to {reference} most "
                            "likely lies in training itself, not in how the drafter is evaluated"), None
    return {"drafter": name, "reference": reference, "prompts": len(mine), "behind": behind, "verdict": verdict,
            "finding": finding, "variants": table, "gap": gap}
