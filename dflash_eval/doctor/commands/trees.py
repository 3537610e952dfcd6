"""`doctor --tree-budgets`: the doctor's variants under DDTree's tree as well as the chain.

Why: a mismatch can cost more or less when the server verifies trees (a drafter whose second choices still
hold the target's token loses less under a tree). With budgets, every variant (and the --reference) is
replayed with the trees computed from the same drafter pass (core/tree.py, model/tree_scoring.py), and this
section gives, per variant, tau macro as a chain and at each budget, and the gap to the reference at each
budget beside the chain's. The verdict stays the chain's (the variants are judged as the checkpoint is
trained and served by default).
"""

from __future__ import annotations

from typing import Any

from ...core import metrics as M


def tree_taus(result, trajectories, budgets) -> dict[str, float | None]:
    """{budget: tau macro} of one variant's tree walks over the trajectories (its replays' trees)."""
    out = {}
    for budget in budgets:
        counts = None
        for traj, replay in zip(trajectories, result.replays):
            lengths = replay.tree.walks[budget]["walk_accept_lengths"] if replay.tree is not None else []
            if not lengths:
                continue
            part = M.AcceptanceCounts.from_walk(traj.id, [n - 1 for n in lengths], result.counts.block_size,
                                                replay.tree.walks[budget]["walk_drafted"])
            counts = part if counts is None else counts + part
        out[str(budget)] = M.tau_macro(counts) if counts is not None and counts.steps else None
    return out


def tree_section(results: list, ref_result, trajectories: list, budgets: tuple[int, ...],
                 reference_name: str | None) -> dict[str, Any] | None:
    """doctor.json's `trees`: budgets, per variant {variant, chain, tree {budget: tau}} (greedy variants with
    replays only), the reference's row and the gap (reference - configuration) per budget and for the chain."""
    if not budgets or not results or not results[0].replays:
        return None
    rows = [{"variant": r.variant.name, "chain": r.tau(), "tree": tree_taus(r, trajectories, budgets)}
            for r in results if r.replays]
    section: dict[str, Any] = {"budgets": list(budgets), "variants": rows}
    if ref_result is not None and ref_result.replays:
        ref = {"variant": reference_name or "reference", "chain": ref_result.tau(),
               "tree": tree_taus(ref_result, trajectories, budgets)}
        base = rows[0]

        def gap(a, b):
            return None if a is None or b is None else a - b

        section["reference"] = ref
        section["gap"] = {"chain": gap(ref["chain"], base["chain"]),
                          "tree": {b: gap(ref["tree"][b], base["tree"][b]) for b in ref["tree"]}}
    return section
