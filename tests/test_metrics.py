"""Acceptance metrics on small walks computed by hand (block size B = 4, so slots 1..3, n in 0..3)."""

import json

import numpy as np
import pytest

from dflash_eval.core.metrics import (
    AcceptanceCounts,
    bootstrap_tau_ci,
    by_prompt_set,
    conditional,
    histogram,
    marginal,
    merge,
    reach,
    steps,
    tau_macro,
    tau_micro,
    token_acceptance_rate,
)

B = 4


def walk(prompt_id, accept_lengths, drafted=None):
    return AcceptanceCounts.from_walk(prompt_id, accept_lengths, block_size=B, drafted=drafted)


# Hand computations, one walk per row:
#   [3, 1, 0, 2]: commits 4+2+1+3 = 10 tokens in 4 steps, tau 2.5; n >= 1 in 3 steps, n >= 2 in 2, n = 3 in 1
#   [0, 0, 2]:    commits 1+1+3 = 5 in 3 steps, tau 5/3; n >= 1 once, n >= 2 once, never 3
#   [3, 3]:       commits 4+4 = 8 in 2 steps, tau 4; every slot reached every step
#   [0, 0]:       commits 2 in 2 steps, tau 1; no slot reached
WALKS = [
    # accept lengths, steps, committed, histogram,    reach counts, reach,                conditional
    ([3, 1, 0, 2],    4,     10,        [1, 1, 1, 1], [3, 2, 1],    [3 / 4, 2 / 4, 1 / 4], [3 / 4, 2 / 3, 1 / 2]),
    ([0, 0, 2],       3,     5,         [2, 0, 1, 0], [1, 1, 0],    [1 / 3, 1 / 3, 0.0],   [1 / 3, 1.0, 0.0]),
    ([3, 3],          2,     8,         [0, 0, 0, 2], [2, 2, 2],    [1.0, 1.0, 1.0],       [1.0, 1.0, 1.0]),
    # Nothing reaches slot 1, so slots 2 and 3 have nothing to condition on: None, not NaN or 0.
    ([0, 0],          2,     2,         [2, 0, 0, 0], [0, 0, 0],    [0.0, 0.0, 0.0],       [0.0, None, None]),
]


@pytest.mark.parametrize("lengths, n_steps, committed, hist, reach_counts, expected_reach, expected_conditional", WALKS)
def test_walk_metrics_by_hand(lengths, n_steps, committed, hist, reach_counts, expected_reach, expected_conditional):
    counts = walk("p", lengths)
    assert counts.per_prompt == {"p": (n_steps, committed)}
    assert steps(counts) == n_steps
    assert counts.accept_length_histogram == hist
    assert counts.reach_counts == reach_counts
    assert counts.drafted_tokens == 3 * n_steps
    assert tau_micro(counts) == pytest.approx(committed / n_steps)
    assert tau_macro(counts) == pytest.approx(committed / n_steps)  # one prompt: macro == micro
    assert reach(counts) == pytest.approx(expected_reach)
    assert reach(counts, denominator="all") == pytest.approx(expected_reach)  # nothing clipped: same
    assert conditional(counts) == pytest.approx(expected_conditional)
    assert histogram(counts, normalized=False) == hist
    assert histogram(counts) == pytest.approx([h / n_steps for h in hist])
    assert token_acceptance_rate(counts) == pytest.approx(sum(lengths) / (3 * n_steps))


@pytest.mark.parametrize("lengths", [w[0] for w in WALKS])
def test_sum_of_reach_is_tau_micro_minus_one(lengths):
    counts = walk("p", lengths)
    # Exact on the stored ints: each accepted draft token reaches exactly one slot.
    assert sum(counts.reach_counts) == counts.accepted_draft_tokens
    assert sum(reach(counts, denominator="all")) == pytest.approx(tau_micro(counts) - 1)


def test_macro_and_micro_differ_when_prompts_are_unbalanced():
    # A: [3, 3] -> tau 8/2 = 4.   B: [0, 0, 0, 0] -> tau 4/4 = 1.
    # macro = (4 + 1) / 2 = 2.5 (each prompt weighs the same)
    # micro = (8 + 4) / (2 + 4) = 2.0 (each step weighs the same, so the long prompt B dominates)
    counts = walk("A", [3, 3]) + walk("B", [0, 0, 0, 0])
    assert tau_macro(counts) == 2.5
    assert tau_micro(counts) == 2.0


def test_clipped_final_step_is_not_a_failure_beyond_what_it_drafted():
    # Walk [3, 3, 1]; the last step drafted only 1 slot (end of generation) and accepted it.
    # commits 4+4+2 = 10 in 3 steps -> tau 10/3; accepted 7 of 3+3+1 = 7 drafted -> rate 1.0
    # reach counts: slot 1: 3, slot 2: 2, slot 3: 2; steps that drafted >= i: 3, 2, 2
    counts = walk("p", [3, 3, 1], drafted=[3, 3, 1])
    assert counts.reach_counts == [3, 2, 2]
    assert counts.reach_denominators == [3, 2, 2]
    assert counts.drafted_tokens == 7
    assert token_acceptance_rate(counts) == 1.0
    assert reach(counts) == [1.0, 1.0, 1.0]  # honest: every drafted slot was accepted
    assert reach(counts, denominator="all") == pytest.approx([1.0, 2 / 3, 2 / 3])  # vLLM style
    assert sum(reach(counts, denominator="all")) == pytest.approx(tau_micro(counts) - 1)  # 7/3
    assert tau_micro(counts) == pytest.approx(10 / 3)


def test_reach_is_none_for_a_slot_no_step_drafted():
    counts = walk("p", [1], drafted=[1])  # one clipped step: slots 2 and 3 never drafted
    assert reach(counts) == [1.0, None, None]
    assert conditional(counts) == [1.0, None, None]


@pytest.mark.parametrize("lengths, drafted", [
    ([4], None),        # n above B-1
    ([-1], None),       # negative n
    ([2], [1]),         # accepted more than it drafted
    ([0], [0]),         # drafted must be 1..B-1
    ([0, 0], [3]),      # one drafted count per step
    ([], None),         # an empty walk has no tau
])
def test_invalid_walks_raise(lengths, drafted):
    with pytest.raises(ValueError):
        walk("p", lengths, drafted=drafted)


def test_marginal_on_a_hand_table_with_invalid_slots_masked():
    # 4 anchors x slots 1..3. The last two anchors sit near the end of the sequence: their later slots
    # have no target token, so they count neither as right nor as tried (the 1s there are ignored).
    correct = np.array([[1, 1, 0],
                        [1, 0, 1],
                        [0, 1, 1],
                        [1, 1, 1]])
    valid = np.array([[1, 1, 1],
                      [1, 1, 1],
                      [1, 1, 0],
                      [1, 0, 0]])
    # slot 1: (1+1+0+1) / 4 = 3/4;  slot 2: (1+0+1) / 3 = 2/3;  slot 3: (0+1) / 2 = 1/2
    counts = AcceptanceCounts.from_marginal(correct, block_size=B, valid=valid)
    assert counts.marginal_correct == [3, 2, 1]
    assert counts.marginal_total == [4, 3, 2]
    assert marginal(counts) == pytest.approx([3 / 4, 2 / 3, 1 / 2])
    assert counts.steps == 0 and counts.per_prompt == {}  # marginal counts carry no walk


def test_marginal_is_none_for_a_slot_no_anchor_can_score():
    counts = AcceptanceCounts.from_marginal(np.ones((2, 3), dtype=bool), block_size=B,
                                            valid=[[1, 1, 0], [1, 0, 0]])
    assert marginal(counts) == [1.0, 1.0, None]


@pytest.mark.parametrize("rows, valid", [
    (np.ones((2, 4)), None),                 # B-1 = 3 columns expected
    (np.full((2, 3), 2), None),              # not 0/1
    (np.ones((2, 3)), np.ones((3, 3))),      # mask shape differs
])
def test_invalid_marginal_tables_raise(rows, valid):
    with pytest.raises(ValueError):
        AcceptanceCounts.from_marginal(rows, block_size=B, valid=valid)


def test_merging_shards_equals_the_union_exactly():
    rows = np.array([[1, 1, 0], [1, 0, 1], [0, 1, 1], [1, 1, 1], [0, 0, 0]])
    shard_1 = walk("a", [3, 1, 0, 2]) + walk("b", [0, 0, 2]) + AcceptanceCounts.from_marginal(rows[:2], B)
    shard_2 = walk("c", [3, 3, 1], drafted=[3, 3, 1]) + AcceptanceCounts.from_marginal(rows[2:], B)
    union = (walk("c", [3, 3, 1], drafted=[3, 3, 1]) + walk("a", [3, 1, 0, 2]) + walk("b", [0, 0, 2])
             + AcceptanceCounts.from_marginal(rows, B))
    merged = merge(shard_1, shard_2)
    assert merged == union  # dataclass equality: every stored int
    assert merged.to_dict() == union.to_dict()
    assert merge(shard_2, shard_1) == merged
    # Hand totals: 4+3+3 = 10 steps; accepted 6+2+7 = 15; drafted 12+9+7 = 28
    assert (merged.steps, merged.accepted_draft_tokens, merged.drafted_tokens) == (10, 15, 28)
    assert merged.accept_length_histogram == [3, 2, 2, 3]  # tally of n over 3,1,0,2 | 0,0,2 | 3,3,1
    assert merged.marginal_correct == [3, 3, 3] and merged.marginal_total == [5, 5, 5]
    assert tau_micro(merged) == (10 + 5 + 10) / 10


def test_empty_counts_are_the_identity_for_merge():
    counts = walk("a", [3, 1])
    assert AcceptanceCounts(block_size=B) + counts == counts


@pytest.mark.parametrize("left, right", [
    (walk("a", [1]), AcceptanceCounts.from_walk("b", [1], block_size=8)),  # different block sizes
    (walk("a", [1]), walk("a", [2])),  # same prompt twice would double-count it in tau_macro
])
def test_incompatible_merges_raise(left, right):
    with pytest.raises(ValueError):
        merge(left, right)


def test_json_round_trip_keeps_every_int():
    counts = (walk("b", [0, 0, 2]) + walk("a", [3, 3, 1], drafted=[3, 3, 1])
              + AcceptanceCounts.from_marginal(np.eye(3, dtype=int), B))
    data = json.loads(json.dumps(counts.to_dict()))
    assert AcceptanceCounts.from_dict(data) == counts
    assert list(data["per_prompt"]) == ["a", "b"]  # sorted, so equal counts serialise identically

    def leaves(value):
        if isinstance(value, dict):
            return [leaf for v in value.values() for leaf in leaves(v)]
        if isinstance(value, list):
            return [leaf for v in value for leaf in leaves(v)]
        return [value]

    assert all(type(leaf) is int for leaf in leaves(data))


VARIED = (walk("p1", [3, 3, 2]) + walk("p2", [0, 1, 0, 0]) + walk("p3", [2, 2, 3, 1])
          + walk("p4", [1, 0, 3]) + walk("p5", [3, 2]))


@pytest.mark.parametrize("kind", ["macro", "micro"])
def test_bootstrap_is_deterministic_and_contains_the_estimate(kind):
    first = bootstrap_tau_ci(VARIED, n_resamples=2000, seed=7, kind=kind)
    assert bootstrap_tau_ci(VARIED, n_resamples=2000, seed=7, kind=kind) == first
    assert bootstrap_tau_ci(VARIED, n_resamples=2000, seed=8, kind=kind) != first
    assert first.estimate == (tau_macro(VARIED) if kind == "macro" else tau_micro(VARIED))
    assert first.low < first.estimate < first.high


@pytest.mark.parametrize("kind", ["macro", "micro"])
def test_bootstrap_collapses_when_every_prompt_has_the_same_tau(kind):
    # Every prompt commits twice as many tokens as it takes steps: tau 2 whichever prompts are drawn.
    # [1, 1]: 4 / 2;  [0, 2]: 4 / 2;  [2, 0, 1, 1, 0, 2]: 12 / 6
    counts = walk("a", [1, 1]) + walk("b", [0, 2]) + walk("c", [2, 0, 1, 1, 0, 2])
    assert bootstrap_tau_ci(counts, n_resamples=500, seed=0, kind=kind) == (2.0, 2.0, 2.0)


@pytest.mark.parametrize("kwargs", [{"kind": "median"}, {"level": 1.0}, {"n_resamples": 0}])
def test_bootstrap_rejects_bad_options(kwargs):
    with pytest.raises(ValueError):
        bootstrap_tau_ci(VARIED, **kwargs)


def test_by_prompt_set_groups_per_prompt_counts():
    per_prompt = {
        "humaneval/0": walk("humaneval/0", [3, 3]),           # tau 4
        "humaneval/1": walk("humaneval/1", [0, 0, 0, 0]),     # tau 1
        "mbpp/11": walk("mbpp/11", [1, 2]),                   # tau 5/2
    }
    sets = by_prompt_set(per_prompt, lambda prompt_id: prompt_id.split("/")[0])
    assert sorted(sets) == ["humaneval", "mbpp"]
    assert tau_macro(sets["humaneval"]) == 2.5  # (4 + 1) / 2
    assert tau_micro(sets["mbpp"]) == 2.5
    everything = per_prompt["humaneval/0"] + per_prompt["humaneval/1"] + per_prompt["mbpp/11"]
    assert sets["humaneval"] + sets["mbpp"] == everything
    # A mapping works as well as a function.
    by_mapping = by_prompt_set(per_prompt, {"humaneval/0": "he", "humaneval/1": "he", "mbpp/11": "mbpp"})
    assert by_mapping["he"] == sets["humaneval"]


EMPTY = AcceptanceCounts(block_size=B)


@pytest.mark.parametrize("metric", [tau_macro, tau_micro, reach, conditional, histogram, token_acceptance_rate,
                                    marginal, bootstrap_tau_ci])
def test_empty_counts_raise_a_clear_value_error(metric):
    with pytest.raises(ValueError, match="no .* recorded"):
        metric(EMPTY)


def test_marginal_without_all_anchor_rows_raises():
    with pytest.raises(ValueError, match="all-anchor"):
        marginal(walk("p", [1, 2]))


def test_block_size_must_leave_at_least_one_slot():
    with pytest.raises(ValueError):
        AcceptanceCounts(block_size=1)
