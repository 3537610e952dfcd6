"""Paired A-vs-B statistics on walks small enough to check by hand (B = 4, so n in 0..3; tau = mean of n + 1)."""

import pytest

from dflash_eval.core.compare import (
    Delta,
    delta_tau,
    histogram_shift,
    paired_prompts,
    per_prompt_differences,
    sign_test,
    slot_deltas,
    top_changes,
    verdict,
)
from dflash_eval.core.metrics import AcceptanceCounts

B = 4


def run(walks: dict[str, list[int]]) -> AcceptanceCounts:
    """One drafter's counts: {prompt id: accepted lengths n per step}, merged with +."""
    counts = AcceptanceCounts(block_size=B)
    for prompt_id, lengths in walks.items():
        counts = counts + AcceptanceCounts.from_walk(prompt_id, lengths, block_size=B)
    return counts


# Three prompts; each prompt commits the same text under both drafters, as greedy decoding does.
#   p1: A [1, 1]       -> 4 tokens / 2 steps = 2.0   B [3]    -> 4 / 1 = 4.0   B - A = +2.0
#   p2: A [0, 0, 0, 2] -> 6 tokens / 4 steps = 1.5   B [2, 2] -> 6 / 2 = 3.0   B - A = +1.5
#   p3: A [2]          -> 3 tokens / 1 step  = 3.0   B [0, 1] -> 3 / 2 = 1.5   B - A = -1.5
A3 = run({"p1": [1, 1], "p2": [0, 0, 0, 2], "p3": [2]})
B3 = run({"p1": [3], "p2": [2, 2], "p3": [0, 1]})


def test_paired_prompts_sorted_and_shared():
    assert paired_prompts(B3, A3) == ["p1", "p2", "p3"]


def test_mismatched_prompt_sets_raise():
    with pytest.raises(ValueError, match=r"1 only in A, 0 only in B \(e.g. 'p4'\)"):
        paired_prompts(A3 + run({"p4": [0]}), B3)


def test_delta_macro_three_prompts_by_hand():
    # estimate = mean(+2, +1.5, -1.5) = 2/3 (= 8.5/3 - 6.5/3).
    # Exact sign flips of |d| = (2, 1.5, 1.5), observed sum 2; the 1.5s give 3, 0, 0, -3:
    #   +2 -> 5, 2, 2, -1 (3 with |sum| >= 2);  -2 -> 1, -2, -2, -5 (3 more)  => p = 6/8.
    delta = delta_tau(A3, B3, kind="macro")
    assert delta.estimate == pytest.approx(2 / 3)
    assert delta.p_value == 6 / 8
    assert delta.n == 3


def test_delta_micro_three_prompts_by_hand():
    # Pooled: A 13 tokens / 7 steps, B 13 / 5  => 13/5 - 13/7 = 26/35.
    # Swapping labels keeps 13 tokens per side, so the statistic is 13/S_B - 13/(12 - S_B); B's step count
    # S_B over the 8 swaps (p1: 1|2, p2: 2|4, p3: 2|1) is 5, 4, 7, 6, 6, 5, 8, 7, and |stat| >= 26/35
    # for S_B in {4, 5, 7, 8}: 6 of 8 swaps => p = 0.75.
    delta = delta_tau(A3, B3, kind="micro")
    assert delta.estimate == pytest.approx(26 / 35)
    assert delta.p_value == 6 / 8


@pytest.mark.parametrize("b_lengths, p_value", [
    # Four one-step prompts, A accepts n = 0 everywhere (tau 1); B's n is the difference.
    # +1, +1, +1, +1: only all-plus and all-minus reach |sum| 4 => 2/16.
    ([1, 1, 1, 1], 2 / 16),
    # +1, +1, +1, -1 (sum 2): |sum| >= 2 for sums 4, -4 (1 each) and 2, -2 (4 each) => 10/16.
    ([1, 1, 1, -1], 10 / 16),
    # +3, +2, +1, -1 (sum 5): +-3+-2 in {5, 1, -1, -5}, +-1+-1 in {2, 0 (twice), -2};
    #   5 + {2, 0, 0} and -5 + {-2, 0, 0} reach |sum| >= 5 => 6/16.
    ([3, 2, 1, -1], 6 / 16),
])
def test_exact_permutation_p_value(b_lengths, p_value):
    # A "-1" difference is A at n = 1, B at n = 0.
    a = run({f"q{i}": [1 if d < 0 else 0] for i, d in enumerate(b_lengths)})
    b = run({f"q{i}": [max(d, 0)] for i, d in enumerate(b_lengths)})
    assert delta_tau(a, b).p_value == pytest.approx(p_value)


def test_bootstrap_is_deterministic_and_brackets_estimate():
    # Ten one-step prompts, n = i % 4 under A and 3i % 4 under B: differences 0, +2, 0, -2, 0, +2, 0, -2, 0, +2,
    # mean +0.2. Resampled means stay within [-2, +2] and, with ten prompts, well inside it.
    a = run({f"r{i}": [i % 4] for i in range(10)})
    b = run({f"r{i}": [3 * i % 4] for i in range(10)})
    first = delta_tau(a, b, n_resamples=2000, seed=7)
    assert first == delta_tau(a, b, n_resamples=2000, seed=7)
    assert first.estimate == pytest.approx(0.2)
    assert -2 < first.low < first.estimate < first.high < 2
    assert delta_tau(a, b, n_resamples=2000, seed=8) != first


@pytest.mark.parametrize("kind", ["macro", "micro"])
def test_drafter_against_itself(kind):
    delta = delta_tau(A3, A3, kind=kind)
    assert delta == Delta(estimate=0.0, low=0.0, high=0.0, p_value=1.0, n=3)
    # three prompts: an exact permutation test cannot go below p = 2 / 2^3 = 0.25, so no verdict is given
    assert verdict(delta, "base", "base") == \
        "too few prompts for a verdict (n = 3, smallest attainable p = 0.25 >= 0.05): delta tau = +0.00 for base vs base"


# 20 prompts (> 16, so Monte Carlo): the weak drafter accepts 0 or 1, the strong one 2 or 3, on every prompt;
# per-prompt differences cycle +2.5, +2, +3, +2.5 (macro and micro delta both +2.5).
WEAK = run({f"w{i:02d}": [i % 2, 0] for i in range(20)})
STRONG = run({f"w{i:02d}": [3, 2 + i // 2 % 2] for i in range(20)})


@pytest.mark.parametrize("kind", ["macro", "micro"])
def test_clear_difference_excludes_zero(kind):
    better = delta_tau(WEAK, STRONG, kind=kind, n_resamples=999)
    assert better.low > 0 and better.p_value == pytest.approx(1 / 1000)  # no swap beats it: (0 + 1) / (999 + 1)
    assert verdict(better, "weak", "strong").startswith("strong is better than weak: delta tau = +2.")
    worse = delta_tau(STRONG, WEAK, kind=kind, n_resamples=999)
    assert worse.high < 0
    assert verdict(worse, "strong", "weak").startswith("weak is worse than strong: delta tau = -2.")


def test_verdict_format_and_threshold():
    delta = Delta(estimate=0.42, low=0.21, high=0.63, p_value=0.003, n=20)
    assert verdict(delta, "A", "B") == "B is better than A: delta tau = +0.42 [0.21, 0.63] (p = 0.003, 20 prompts)"
    assert verdict(delta, "A", "B", threshold=0.3).startswith("B is indistinguishable from A")
    straddles = Delta(estimate=-0.1, low=-0.3, high=0.1, p_value=0.5, n=12)
    assert verdict(straddles, "A", "B").endswith("delta tau = -0.10 [-0.30, 0.10] (p = 0.5, 12 prompts)")


@pytest.mark.parametrize("n, floor", [(1, 1.0), (4, 0.125), (5, 0.0625)])
def test_too_few_prompts_for_a_verdict_says_why(n, floor):
    """The smallest p an exact sign-flip test can reach on n prompts is 2 / 2^n; below 6 prompts that is
    >= 0.05, so an interval that excludes 0 still gives no verdict, and the line says so."""
    delta = Delta(estimate=0.8, low=0.5, high=1.1, p_value=floor, n=n)
    assert verdict(delta, "A", "B") == (f"too few prompts for a verdict (n = {n}, smallest attainable p = "
                                        f"{floor:.3g} >= 0.05): delta tau = +0.80 for B vs A")


def test_an_interval_that_excludes_zero_without_significance_is_explained():
    delta = Delta(estimate=0.3, low=0.05, high=0.6, p_value=0.09, n=8)
    assert verdict(delta, "A", "B").startswith("B is indistinguishable from A")
    assert verdict(delta, "A", "B").endswith("the interval excludes 0 but the permutation test does not (p >= 0.05)")


def test_micro_and_macro_differ_on_unbalanced_prompts():
    # long: 8 steps of n = 1 under both (tau 2, 16 tokens); short: A [0] (tau 1, 1 token), B [3] (tau 4).
    #   macro: mean(2, 4) - mean(2, 1) = 3 - 1.5 = 1.5;   micro: 20/9 - 17/9 = 1/3.
    a = run({"long": [1] * 8, "short": [0]})
    b = run({"long": [1] * 8, "short": [3]})
    assert delta_tau(a, b, kind="macro").estimate == pytest.approx(1.5)
    assert delta_tau(a, b, kind="micro").estimate == pytest.approx(1 / 3)


@pytest.mark.parametrize("differences, p_value", [
    ([1, 1, 1, 1], 2 / 16),  # 2 * P(X <= 0), X ~ Bin(4, 1/2)
    ([0.5, 2, 1, 1, 3, 0, -1], 2 * (1 + 6) / 64),  # zero dropped: 5 up, 1 down of 6 => 2 * (C(6,0) + C(6,1)) / 2^6
    ([1, -1], 1.0),  # 2 * 3/4 capped at 1
    ([0, 0], 1.0),  # nothing to test
])
def test_sign_test(differences, p_value):
    assert sign_test(differences) == pytest.approx(p_value)


def test_slot_deltas_by_hand():
    # A [3, 1, 0, 2]: reach 3/4, 2/4, 1/4; conditional 3/4, 2/3, 1/2.
    # B [3, 3, 0, 3]: reach 3/4, 3/4, 3/4; conditional 3/4, 1, 1.
    # All-anchor rows: A [[1,0,0],[1,1,0]] -> 1, 1/2, 0;  B [[1,1,1],[1,1,0]] -> 1, 1, 1/2.
    a = run({"p": [3, 1, 0, 2]})
    b = run({"p": [3, 3, 0, 3]})
    deltas = slot_deltas(a, b)
    assert deltas["reach"] == [0, 0.25, 0.5]
    assert deltas["conditional"] == pytest.approx([0, 1 / 3, 0.5])
    assert deltas["marginal"] == [None] * 3  # no all-anchor rows on either side
    a_all = a + AcceptanceCounts.from_marginal([[1, 0, 0], [1, 1, 0]], block_size=B)
    b_all = b + AcceptanceCounts.from_marginal([[1, 1, 1], [1, 1, 0]], block_size=B)
    assert slot_deltas(a_all, b_all)["marginal"] == pytest.approx([0, 0.5, 0.5])
    assert slot_deltas(a_all, b)["marginal"] == [None] * 3  # a live run has no marginal


def test_slot_deltas_undefined_conditional():
    # A [0, 0] never reaches slot 1, so c_2, c_3 are undefined: None, not a number.
    # B [1, 2]: reach 1, 1/2, 0 -> conditional 1, 1/2, 0.
    deltas = slot_deltas(run({"p": [0, 0]}), run({"p": [1, 2]}))
    assert deltas["reach"] == pytest.approx([1, 0.5, 0])
    assert deltas["conditional"] == [1.0, None, None]


def test_histogram_shift_by_hand():
    # A [3, 1, 0, 2]: shares 1/4 each, mean n 1.5;  B [3, 3, 0, 3]: 1/4, 0, 0, 3/4, mean n 9/4.
    # Difference 0, -1/4, -1/4, +1/2; total variation = (0 + 1/4 + 1/4 + 1/2) / 2 = 1/2.
    shift = histogram_shift(run({"p": [3, 1, 0, 2]}), run({"p": [3, 3, 0, 3]}))
    assert shift["a"] == [0.25] * 4
    assert shift["b"] == [0.25, 0, 0, 0.75]
    assert shift["difference"] == [0, -0.25, -0.25, 0.5]
    assert shift["mean_n_difference"] == pytest.approx(0.75)
    assert shift["total_variation"] == pytest.approx(0.5)


def test_per_prompt_differences_and_top_changes():
    assert per_prompt_differences(A3, B3) == [("p3", 3.0, 1.5, -1.5), ("p2", 1.5, 3.0, 1.5), ("p1", 2.0, 4.0, 2.0)]
    regressed, improved = top_changes(A3, B3, k=1)
    assert [row[0] for row in regressed] == ["p3"] and [row[0] for row in improved] == ["p1"]
    regressed, improved = top_changes(A3, B3, k=5)
    assert [row[0] for row in regressed] == ["p3"] and [row[0] for row in improved] == ["p1", "p2"]


def test_delta_to_dict():
    assert Delta(0.5, 0.1, 0.9, 0.01, 4).to_dict() == {"estimate": 0.5, "low": 0.1, "high": 0.9,
                                                       "p_value": 0.01, "n": 4}
