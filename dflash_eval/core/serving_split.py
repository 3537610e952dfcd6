"""The drop from the evaluated target A to the served target B (a quantised copy), split in two: plain functions
over per-prompt (steps, committed) counts, no torch (commands/serving_target.py measures the counts).

Serving a drafter with another copy of its target changes two things at once: B verifies (its argmax, on the
same text, is not always A's: a B-verified walk runs on B's own greedy text), and B's hidden states feed the
drafter (its taps are perturbed). Four replays of the drafter on each prompt separate them, each named by
(whose taps, who verifies):

| cell | taps from | text verified (a target's greedy continuation) |
|------|-----------|------------------------------------------------|
| AA   | A         | A's: what `run` measures                       |
| BB   | B         | B's: what serving with B gives                 |
| AB   | A         | B's: B verifies, the drafter's inputs are A's  |
| BA   | B         | A's: A verifies, the drafter's inputs are B's  |

drop                 tau(AA) - tau(BB)
target disagreement  ((AA - AB) + (BA - BB)) / 2: the verifier swapped, the taps held (either taps), averaged
drafter inputs       ((AA - BA) + (AB - BB)) / 2: the taps swapped, the verifier held, averaged
The two sum to the drop exactly (the Shapley split of two factors; each order alone is also reported). tau is
macro (the mean over prompts of each prompt's committed / steps, z-lab's convention); every figure is over the
prompts on which all four cells have steps, and every interval is the percentile interval (numpy quantile rule
"inverted_cdf") over the same 10,000 resamplings of those prompts (numpy default_rng(seed)), so a part's
interval and the drop's come from the same draws; a part is "within noise" when its interval holds 0.

Beside the split: the share of A's text where B's argmax differs from A's (teacher-forced, each position of the
continuation: the flips a quantised target makes on the same text; 0 for a copy that changes nothing).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .compare import Delta, QuantileMethod, delta_from_table, paired_figure

CELLS = ("AA", "AB", "BA", "BB")
N_RESAMPLES = 10_000
QUANTILE: QuantileMethod = "inverted_cdf"


def _interval(draws_values: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    tail = (1 - level) / 2
    low, high = np.quantile(draws_values, [tail, 1 - tail], method=QUANTILE)
    return float(low), float(high)


def split_drop(cells: dict[str, dict], *, seed: int = 0, n_resamples: int = N_RESAMPLES) -> dict[str, Any]:
    """cells: {"AA", "AB", "BA", "BB"} -> {prompt id: (steps, committed)}. The drop and its two parts (module
    docstring), each {"estimate", "low", "high"}, plus each cell's tau and the prompts paired."""
    total = len(set().union(*(c.keys() for c in cells.values())))
    ids = sorted(p for p in cells["AA"] if all(cells[c].get(p, (0, 0))[0] > 0 for c in CELLS))
    out: dict[str, Any] = {"prompts": total, "paired_prompts": len(ids), "prompt_ids": ids}
    if not ids:
        return {**out, "tau": None, "drop": None, "target_disagreement": None, "drafter_inputs": None}
    tau = {c: np.array([cells[c][p][1] / cells[c][p][0] for p in ids], dtype=float) for c in CELLS}
    draws = np.random.default_rng(seed).integers(0, len(ids), size=(n_resamples, len(ids)))
    table = np.array([(*cells["BB"][p], *cells["AA"][p]) for p in ids], dtype=float)
    drop = delta_from_table(table, seed=seed, total=total, draws=draws, method=QUANTILE)  # tau(AA) - tau(BB)

    def part(values: np.ndarray) -> dict[str, float]:
        low, high = _interval(values[draws].mean(axis=1))
        return {"estimate": float(values.mean()), "low": low, "high": high}

    verifier = ((tau["AA"] - tau["AB"]) + (tau["BA"] - tau["BB"])) / 2
    inputs = ((tau["AA"] - tau["BA"]) + (tau["AB"] - tau["BB"])) / 2
    out.update(
        tau={c: float(tau[c].mean()) for c in CELLS},
        drop=drop.to_dict(),
        target_disagreement=part(verifier), drafter_inputs=part(inputs),
        orders={"verifier first": {"target_disagreement": float((tau["AA"] - tau["AB"]).mean()),
                                   "drafter_inputs": float((tau["AB"] - tau["BB"]).mean())},
                "taps first": {"drafter_inputs": float((tau["AA"] - tau["BA"]).mean()),
                               "target_disagreement": float((tau["BA"] - tau["BB"]).mean())}})
    return out


def disagreement(flips: dict[str, tuple[int, int]]) -> dict[str, Any]:
    """flips: prompt id -> (positions compared, positions where B's argmax differs from A's on A's text)."""
    positions = sum(n for n, _ in flips.values())
    differ = sum(d for _, d in flips.values())
    return {"positions": positions, "differ": differ, "share": differ / positions if positions else None,
            "definition": "share of A's continuation positions where B's argmax (teacher-forced on A's text) "
                          "differs from A's"}


def _within(part: dict[str, float]) -> bool:
    return part["low"] <= 0 <= part["high"]


def verdict(name: str, serving: str, split: dict[str, Any], flips: dict[str, Any]) -> str:
    """The one sentence: the drop, and how much of it is the target's own disagreement and how much the
    drafter's inputs, with intervals and shares."""
    if split.get("drop") is None:
        return f"{name}: no prompt has steps in all four replays; the serving-target split has nothing to say"
    tau, drop = split["tau"], split["drop"]
    flip = (f"B's argmax differs from A's at {100 * flips['share']:.1f}% of A's text positions"
            if flips.get("share") is not None else "no position compared")
    figure = paired_figure(Delta(**drop), 3).replace("delta", "drop", 1)
    head = f"{name} served with {serving}: tau {tau['AA']:.2f} -> {tau['BB']:.2f} ({figure})"
    if Delta(**drop).too_few:
        return f"{head}; {flip}; too few prompts to split the drop"
    parts = []
    for key, label in (("target_disagreement", "the target's own disagreement"),
                       ("drafter_inputs", "the drafter's inputs (B's taps)")):
        p = split[key]
        share = (f", {100 * p['estimate'] / drop['estimate']:.0f}% of it" if abs(drop["estimate"]) > 1e-12 else "")
        noise = " (within noise)" if _within(p) else ""
        parts.append(f"{label} {p['estimate']:+.3f} [{p['low']:.3f}, {p['high']:.3f}]{share}{noise}")
    return f"{head}; of the drop, " + " and ".join(parts) + f"; {flip}"
