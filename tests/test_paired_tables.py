"""Every figure of one table comes from the same paired prompts (issue 36, class 8).

The doctor's gap table printed "taps through final norm closes +0.017 [-0.067, +0.088] (p = 0.625)" beside
"3% [1%, 7%] of the gap": the delta was paired on the prompts that variant had steps on, the share on the
prompts every side had steps on, with other resamples. Here the gap table is checked as a property over
random per-prompt counts: one population, share = delta / gap on it, and a share interval on the side of 0
its delta's interval is on. The same mistake is looked for in diff's depth buckets and track's latest vs best.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dflash_eval.core.gap import explain_gap

PROPERTY = settings(max_examples=int(os.environ.get("FUZZ_EXAMPLES", "60")), deadline=None, database=None,
                    derandomize=not os.environ.get("FUZZ_RANDOM"),
                    suppress_health_check=[HealthCheck.too_slow])


def per_prompt(draw, ids, empty_share: float):
    """prompt id -> (steps, committed), some prompts without steps."""
    out = {}
    for p in ids:
        steps = 0 if draw(st.floats(0, 1)) < empty_share else draw(st.integers(1, 12))
        out[p] = (steps, steps * draw(st.integers(1, 5)) + draw(st.integers(0, steps)))
    return out


@PROPERTY
@given(data=st.data())
def test_the_gap_table_is_one_population(data):
    n = data.draw(st.integers(1, 24))
    ids = [f"p{i}" for i in range(n)]
    base = per_prompt(data.draw, ids, 0.1)
    reference = per_prompt(data.draw, ids, 0.1)
    variants = [(f"v{k}", per_prompt(data.draw, ids, 0.2), "bug", "check") for k in range(data.draw(st.integers(1, 3)))]
    result = explain_gap(base, reference, variants, base_name="mine", reference_name="ref", n_resamples=400)
    paired = [p for p in ids if base[p][0] and reference[p][0] and all(v[p][0] for _, v, _, _ in variants)]
    assert result["paired_prompts"] == len(paired)
    if not paired:
        assert result["gap"] is None and "0 of" in result["paragraph"]
        return
    gap = result["gap"]
    assert (gap["n"], gap["total"]) == (len(paired), n)  # the gap on the same prompts as its rows

    def tau(counts, p):
        return counts[p][1] / counts[p][0]

    expected_gap = sum(tau(reference, p) - tau(base, p) for p in paired) / len(paired)
    assert gap["estimate"] == pytest.approx(expected_gap, abs=1e-12)
    assert result["reference_tau_macro"] == pytest.approx(sum(tau(reference, p) for p in paired) / len(paired))
    for (_name, counts, _, _), row in zip(variants, result["variants"]):
        closed = row["closed"]
        assert (closed["n"], closed["total"]) == (len(paired), n)
        assert closed["estimate"] == pytest.approx(sum(tau(counts, p) - tau(base, p) for p in paired) / len(paired),
                                                   abs=1e-12)
        if row["share"] is not None:
            assert row["share"] == pytest.approx(closed["estimate"] / gap["estimate"])
        ci = row["share_ci"]
        if ci is None:
            continue
        assert gap["low"] > 0 and ci[0] <= ci[1]
        # the share's interval is on the side of 0 its delta's interval is on, never the other
        assert (ci[0] > 0) == (closed["low"] > 0), (ci, closed)
        assert (ci[1] < 0) == (closed["high"] < 0), (ci, closed)
        if row["significant"]:
            assert ci[0] > 0


def test_the_readme_doctor_case_no_longer_disagrees():
    """A variant that closes little on the prompts it has and nothing significant: its share's interval
    contains 0, as its delta's does, and its point share is its delta over the gap."""
    ids = [f"p{i}" for i in range(12)]
    base = {p: (10, 20) for p in ids}
    reference = {p: (10, 30 + (i % 3)) for i, p in enumerate(ids)}
    wobble = {p: (10, 20 + (1 if i % 2 else -1) + (1 if i == 0 else 0)) for i, p in enumerate(ids)}
    missing = dict(wobble, p0=(0, 0), p1=(0, 0))  # no steps on two prompts: they leave every row
    result = explain_gap(base, reference, [("wobble", missing, "b", "c"), ("other", wobble, "b", "c")],
                         base_name="mine", reference_name="ref")
    assert result["paired_prompts"] == 10 and result["gap"]["n"] == 10
    row = result["variants"][0]
    assert row["closed"]["low"] <= 0 <= row["closed"]["high"] and not row["significant"]
    assert row["share_ci"][0] <= 0 <= row["share_ci"][1]
    assert row["share"] == pytest.approx(row["closed"]["estimate"] / result["gap"]["estimate"])


def _row(pid: str, lengths: list[int]) -> dict:
    """A samples row of a 9-token continuation after a 2-token prompt, walked with these n + 1 (B = 4)."""
    anchors = [2]
    for n_plus_1 in lengths[:-1]:
        anchors.append(anchors[-1] + n_plus_1)
    return {"prompt_id": pid, "prompt_len": 2, "continuation_len": 9, "walk_anchors": anchors,
            "walk_accept_lengths": lengths, "walk_drafted": [3] * len(lengths), "continuation_pieces": ["x"] * 9}


def test_a_depth_bucket_row_is_one_population():
    """diff by depth: in the bucket 7+, A has steps on p0 and p1, B only on p1. The row showed A's tau over both
    prompts (1.5) beside a delta over p1 alone (-1.0): now tau A, tau B, their steps and the delta are all over
    p1, so the delta is tau B - tau A of its own row."""
    from dflash_eval.core.breakdown import depth_pairs

    rows_a = [_row("p0", [1] * 8), _row("p1", [2, 2, 2, 2])]
    rows_b = [_row("p0", [4, 4]), _row("p1", [1] * 8)]
    deep = depth_pairs(rows_a, rows_b, 4, 4, [7])[1]
    assert deep["bucket"] == "7+"
    assert (deep["tau_macro_a"], deep["tau_macro_b"], deep["steps_a"], deep["steps_b"]) == (2.0, 1.0, 1, 3)
    assert deep["delta_tau_macro"]["estimate"] == deep["tau_macro_b"] - deep["tau_macro_a"] == -1.0
    assert (deep["delta_tau_macro"]["n"], deep["delta_tau_macro"]["total"]) == (1, 2)
