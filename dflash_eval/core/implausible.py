"""Numbers that should not be, flagged where they appear (run, served, diff, report), each with what it
usually means.

serving/counters/checks.py refuses what no run can produce when counts are given (accepted above drafted, per-position
counts that rise, more steps than tokens): those never reach a table. What is left to flag here is a number
without counts behind it, or a pattern real counts can produce but that almost always means a broken
pipeline:

| rule | flagged when | what it usually means |
|---|---|---|
| tau_above_block | a tau above B = k + 1 (a reported length, a gauge, a CSV cell) | `MEANINGS` |
| tau_below_one | a tau below 1 | |
| all_one | every position's acceptance exactly 1, over at least `MIN_STEPS` steps | |
| all_zero | every position's acceptance exactly 0, over at least `MIN_STEPS` steps | |
| non_monotone | a reach (acceptance at slot i at a fixed k, over all steps) that rises with i | |
| text_not_greedy | a served greedy text that is not the offline greedy text | |

`MIN_STEPS`: below it, a short text accepted whole (or never) is ordinary and not flagged.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

MIN_STEPS = 32
RATE_TOLERANCE = 1e-9

MEANINGS = {
    "tau_above_block": "more tokens per step than a step can commit (B = k + 1): usually tokens per request, a sum "
                       "over engines or ranks divided by one engine's steps, counters from two server lifetimes, or "
                       "another column (a throughput) read as a tau",
    "tau_below_one": "every step commits at least its bonus token: usually an acceptance rate, or accepted drafts "
                     "per step without the + 1, read as a tau",
    "all_one": "a drafter that is always right is the target itself (or its copy), or the metric counts drafted "
               "tokens as accepted (acceptance exactly 1.0 at every position: microsoft/onnxruntime-genai #2460)",
    "all_zero": "a drafter that is never right: a wrong mask token id, wrong tapped layers, a target and drafter "
                "that do not share a vocabulary, or speculation that never ran",
    "non_monotone": "a slot is accepted only after every slot before it, so at a fixed k its acceptance cannot rise "
                    "with the slot: usually per-slot shares over different denominators (drafts that were not all "
                    "k long), several k mixed, or conditional rates read as reach",
    "text_not_greedy": "the server's greedy text left the offline greedy text: a near-tie its kernels moved (fused "
                       "attention, other GEMM shapes, bf16), or speculation that changes the output (vllm #54928: "
                       "DFlash2 changed greedy output); --non-speculative tells the two apart, --logit-gap gives "
                       "the target's margin at the first differing token, and every number after that token is "
                       "measured on another text",
}


def flag(rule: str, what: str, detail: str) -> dict[str, str]:
    return {"rule": rule, "where": what, "detail": detail, "means": MEANINGS[rule]}


def tau_flags(tau: float | None, block_size: int | None, what: str) -> list[dict[str, str]]:
    """A tau outside [1, B] (B unknown: only the lower bound)."""
    if tau is None:
        return []
    if tau < 1:
        return [flag("tau_below_one", what, f"tau {tau:g} < 1")]
    if block_size and tau > block_size:
        return [flag("tau_above_block", what, f"tau {tau:g} > the block size {block_size} (k = {block_size - 1})")]
    return []


def position_flags(rates: Sequence[float | None] | None, steps: int | None, what: str) -> list[dict[str, str]]:
    """Every position exactly 1, or exactly 0 (over at least MIN_STEPS steps), and a rise with the slot."""
    values = [r for r in rates or [] if r is not None]
    if not values:
        return []
    out = []
    if steps is not None and steps >= MIN_STEPS:
        if all(r == 1 for r in values):
            out.append(flag("all_one", what, f"acceptance exactly 1 at all {len(values)} positions over {steps} steps"))
        elif all(r == 0 for r in values):
            out.append(flag("all_zero", what, f"acceptance exactly 0 at all {len(values)} positions over {steps} steps"))
    out.extend(monotone_flags(values, what))
    return out


def monotone_flags(reach: Sequence[float], what: str) -> list[dict[str, str]]:
    """The first slot whose reach is above the slot before it (RATE_TOLERANCE for float rounding)."""
    for i in range(1, len(reach)):
        if reach[i] > reach[i - 1] + RATE_TOLERANCE:
            return [flag("non_monotone", what, f"slot {i + 1} {reach[i]:.4f} > slot {i} {reach[i - 1]:.4f}")]
    return []


def drafter_flags(drafter: dict[str, Any]) -> list[dict[str, str]]:
    """A run document's drafter: its tau against its block size, its reach (over all steps: the vLLM form, so
    non-increasing at a fixed k) or an estimate's expected reach."""
    m = drafter.get("metrics") or {}
    block = (drafter.get("spec") or {}).get("block_size")
    what = f"drafter {drafter.get('name')}"
    out = tau_flags(m.get("tau_macro"), block, f"{what} tau macro") + tau_flags(m.get("tau_micro"), block,
                                                                                 f"{what} tau micro")
    counts = drafter.get("counts") or {}
    steps = counts.get("steps") if counts else m.get("steps")
    if counts.get("reach_counts") and steps:
        reach = [n / steps for n in counts["reach_counts"]]
    else:
        reach = m.get("expected_reach") or []
    return out + position_flags(reach, steps if steps else None, f"{what} reach by slot")


def flag_lines(flags: Sequence[dict[str, str]]) -> list[str]:
    """One plain line per flag: where, what, and what it usually means."""
    return [f"IMPLAUSIBLE ({f['rule']}): {f['where']}: {f['detail']}; usually: {f['means']}" for f in flags]
