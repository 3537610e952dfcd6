"""Repetition detectors on hand-written drafts: degenerate loops are flagged, repetitive code the target itself
writes is not. Token ids are named after the code they stand for; a draft/reference pair reads like
(what the drafter proposed, what the target wrote at the same positions)."""

import json

import numpy as np
import pytest

from dflash_eval.core.repetition import (
    DEFAULT_THRESHOLDS,
    DETECTORS,
    RepetitionCounts,
    accepted_inside_outside,
    count_walk,
    flag_block,
    flagged_prompts,
    longest_run,
    periodic_repeat,
    repeated_ngrams,
    same_draft_again,
    unique_ratio,
)

(IF, ELIF, ELSE, X, EQ, NE, ONE, TWO, THREE, COLON, SEMI, NL, IND, RET, LP, RP, PRINT, Y,
 F, IZZ, B, UZZ, QUOTE, I, MOD) = range(1, 26)  # noqa: E741 (the token "I"); F IZZ = "Fizz", B UZZ = "Buzz" (two tokens each)


# ---------------------------------------------------------------- the single-sequence detectors

@pytest.mark.parametrize("tokens, expected", [
    ([], 0),
    ([X], 1),
    ([RP, RP, RP, NL], 3),                 # `)))`
    ([IND, IND, RET, IND, IND, IND], 3),   # the later, longer run counts
])
def test_longest_run(tokens, expected):
    assert longest_run(tokens) == expected


@pytest.mark.parametrize("n, expected", [
    (1, 3),  # A B A B A: 5 tokens, 2 distinct -> 3 beyond the first
    (2, 2),  # AB BA AB BA: 4 bigrams, 2 distinct -> 2
    (3, 1),  # ABA BAB ABA: 3 trigrams, 2 distinct -> 1
    (4, 0),  # ABAB BABA: all distinct
])
def test_repeated_ngrams(n, expected):
    assert repeated_ngrams([X, EQ, X, EQ, X], n) == expected


@pytest.mark.parametrize("n", [0, 5])
def test_repeated_ngrams_rejects_n_outside_1_to_4(n):
    with pytest.raises(ValueError):
        repeated_ngrams([X, EQ], n)


@pytest.mark.parametrize("tokens, kwargs, expected", [
    ([F, IZZ, F, IZZ, F, IZZ, B, UZZ], {}, (2, 3)),             # "FizzFizzFizzBuzz"
    ([ELIF, X, COLON] * 3 + [ELIF], {}, (3, 3)),                 # 10 tokens: 3 full repeats of a 3-token unit
    ([X, EQ] * 6, {}, (2, 6)),                                   # not (4, 3): the primitive unit is X EQ
    ([IND] * 6, {}, None),                                       # a plain run is period 1: longest_run's job
    ([F, IZZ, F, IZZ, B, UZZ], {}, None),                        # only 2 repeats
    ([F, IZZ, F, IZZ, B, UZZ], {"min_repeats": 2}, (2, 2)),
    ([X, EQ, ONE, COLON, X, EQ, ONE, COLON, X], {"max_period": 3}, None),  # period 4 not searched
])
def test_periodic_repeat(tokens, kwargs, expected):
    assert periodic_repeat(tokens, **kwargs) == expected


def test_unique_ratio():
    assert unique_ratio([X, EQ, X, EQ]) == 0.5
    assert unique_ratio([X]) == 1.0
    with pytest.raises(ValueError):
        unique_ratio([])


@pytest.mark.parametrize("prev, block, expected", [
    ([PRINT, LP], [PRINT, LP], True),                  # identical, 2 tokens
    ([PRINT], [PRINT], False),                         # one token is no "draft"
    ([PRINT, LP, X], [LP, X, PRINT], True),            # rotation by 1: cycling through the same tokens
    ([PRINT, LP, X], [LP, X, RP], False),              # prefix shift + a new token: a consistent drafter
    ([PRINT, LP, X, RP], [PRINT, LP, X], True),        # clipped last block: compared on 3 common slots
])
def test_same_draft_again(prev, block, expected):
    assert same_draft_again(prev, block) is expected


# ---------------------------------------------------------------- flag_block on one block

FLAGGED = [
    # id, draft, reference (target's tokens at the same slots), detectors that fire
    # Same token 5x. run: 5 vs target's 1, excess 4 >= 2. ngram: bigram (ELIF ELIF) 4x -> 3 repeats vs 0.
    # unique: only 5 slots (< 6), not judged.
    ("same token 5x", [ELIF] * 5, [ELIF, X, EQ, ONE, COLON], {"run", "ngram"}),
    # A B A B A B. period 2: span 6 (x3) vs target's 2 (nothing repeats), excess 4. ngram: 5 bigrams, 2 distinct
    # -> 3 vs 0. unique: 2 distinct of 6 <= 3, target has 5 distinct: gap 3 >= 0.25 * 6.
    ("A B A B A B", [X, EQ] * 3, [X, EQ, ONE, NL, RET, X], {"period", "ngram", "unique"}),
    # "FizzFizzFizzBuzz": period 2 x3 (span 6 vs 2). ngram: 7 bigrams, 4 distinct -> 3 vs 0.
    # unique: 4 distinct of 8 <= 4, target 8 distinct: gap 4 >= 2.
    ("Fizz x3 Buzz", [F, IZZ, F, IZZ, F, IZZ, B, UZZ], [F, IZZ, QUOTE, RP, NL, ELIF, I, MOD],
     {"period", "ngram", "unique"}),
    # The target writes "elif x == 2:\n return 2\n"; the draft gets "elif x == 2:" right, then "elif" x4.
    # run: 4 vs 1. ngram: (ELIF ELIF) 3x -> 2 repeats vs 0, below 3. unique: 6 distinct of 10 > 5.
    ("elif x4 inside an elif chain", [ELIF, X, EQ, TWO, COLON, ELIF, ELIF, ELIF, ELIF, NL],
     [ELIF, X, EQ, TWO, COLON, NL, IND, RET, TWO, NL], {"run"}),
    # "elif x: elif x: elif x:" where the target writes one elif with its body. period 3: span 9 vs 3.
    # ngram: 8 bigrams, 3 distinct -> 5 vs 0. unique: 3 of 9 <= 4.5, target 8: gap 5 >= 2.25.
    ("elif x: x3", [ELIF, X, COLON] * 3, [ELIF, X, EQ, TWO, COLON, NL, IND, RET, TWO],
     {"period", "ngram", "unique"}),
    # B = 4, 3 slots: all three the same token, target writes a newline then a statement. run 3 vs 1.
    ("3 slots all newline", [NL, NL, NL], [NL, IND, RET], {"run"}),
]


@pytest.mark.parametrize("name, draft, reference, expected", FLAGGED, ids=[row[0] for row in FLAGGED])
def test_degenerate_drafts_are_flagged(name, draft, reference, expected):
    flags = flag_block(draft, reference)
    assert flags.degenerate
    assert {d for d in DETECTORS if getattr(flags, d)} == expected
    assert [r.split(":")[0] for r in flags.reasons] == [d for d in DETECTORS if d in expected]


def test_slots_in_the_pattern():
    # "elif x4" above: the run sits in slots 6..9; slots 1..5 ("elif x == 2:") and 10 are right and not in it.
    flags = flag_block(*FLAGGED[3][1:3])
    assert flags.slots == (6, 7, 8, 9)


ELIF_CHAIN = [ELIF, X, EQ, ONE, COLON, RET, ONE, ELIF, X, EQ, TWO, COLON, RET, TWO, ELSE]  # 15 slots, B = 16

NOT_FLAGGED = [
    # The target's own if/elif/else chain, predicted exactly: 3 repeated bigrams, but the target has them too.
    ("elif chain the target writes", ELIF_CHAIN, ELIF_CHAIN),
    # Same chain, wrong literal twice ("== 3: return 3"): 3 repeated bigrams in both, 8 distinct of 15 > 7.5.
    ("elif chain, wrong literal", [THREE if i in (10, 13) else t for i, t in enumerate(ELIF_CHAIN)], ELIF_CHAIN),
    ("indentation the target writes", [NL, IND, IND, IND, IND, RET, X], [NL, IND, IND, IND, IND, RET, X]),
    # One indentation token too many: run 5 vs 4 (excess 1 < 2); bigrams 3 vs 2 (excess 1 < 3);
    # unique 3 of 7 <= 3.5, but the target has 4: gap 1 < 0.25 * 7.
    ("one indent too many", [NL, IND, IND, IND, IND, IND, RET], [NL, IND, IND, IND, IND, RET, X]),
    ("`)))` the target writes", [RP, RP, RP, NL, RET], [RP, RP, RP, NL, RET]),
    ("`))))` for `)))`", [RP, RP, RP, RP, NL], [RP, RP, RP, NL, RET]),  # run 4 vs 3; bigrams 2 vs 1
    # "FizzFizz" x2 only: period 2 spans 4 (2 repeats < 3); bigrams 1; 4 distinct of 6 > 3.
    ("Fizz x2 Buzz", [F, IZZ, F, IZZ, B, UZZ], [F, IZZ, QUOTE, RP, NL, ELIF]),
    ("elif x2", [ELIF, ELIF, X, EQ, ONE], [ELIF, X, EQ, ONE, COLON]),  # run 2 < 3
    ("distinct wrong tokens", [PRINT, LP, X, RP, NL, RET], [RET, X, EQ, ONE, COLON, NL]),
    # The target really writes "FizzFizzFizzBuzz": the same loop as above, not blamed on the drafter.
    ("the target's own Fizz loop", [F, IZZ, F, IZZ, F, IZZ, B, UZZ], [F, IZZ, F, IZZ, F, IZZ, B, UZZ]),
    # The target's text ends after 1 slot: slots 2..5 have nothing to compare with and are not judged.
    ("past the end of the text", [ELIF] * 5, [ELIF]),
]


@pytest.mark.parametrize("name, draft, reference", NOT_FLAGGED, ids=[row[0] for row in NOT_FLAGGED])
def test_legitimate_code_is_not_flagged(name, draft, reference):
    flags = flag_block(draft, reference)
    assert not flags.degenerate, flags.reasons
    assert flags.reasons == () and flags.slots == ()


# ---------------------------------------------------------------- consecutive walk steps

# Target text, positions 0..17: "if x == 1:\n" then "x = x = x = ..." (period 2 from position 6).
TEXT = [IF, X, EQ, ONE, COLON, NL] + [X, EQ] * 6


def ref(anchor, slots=4):
    """The target's tokens at slots 1..slots of the block anchored at `anchor`."""
    return TEXT[anchor + 1:anchor + 1 + slots]


CONSECUTIVE = [
    # id, anchor, previous draft, its n, this draft (at anchor + n + 1), fires?
    # ref(0) = [X EQ ONE COLON], ref(1) = [EQ ONE COLON NL]: the target's pair is no rotation; the draft's is.
    ("identical draft at consecutive anchors", 0, [PRINT, LP, X, RP], 0, [PRINT, LP, X, RP], True),
    ("same tokens rotated", 0, [PRINT, LP, X, RP], 0, [LP, X, RP, PRINT], True),
    # The drafter keeps its earlier guess SEMI for position 3: block[:3] == prev[1:], then a new token.
    ("consistent re-prediction", 0, [Y, EQ, SEMI, COLON], 0, [EQ, SEMI, COLON, NL], False),
    # Periodic text, n = 2, advance 3 (odd): ref(6) = [EQ X EQ X], ref(9) = [X EQ X EQ], the target's pair is a
    # rotation by 1 (and 3). The drafter repeats its block unchanged (rotation 0): stuck at the old phase.
    ("periodic text, draft stuck at the old phase", 6, [EQ, X, SEMI, X], 2, [EQ, X, SEMI, X], True),
    # n = 3, advance 4 (even): ref(6) == ref(10) == [EQ X EQ X]. The target repeats itself with the step, and
    # so does the (wrong at slot 4) draft: rotation 0 is in the target's pair too, not flagged.
    ("text repeats with the step", 6, [EQ, X, EQ, SEMI], 3, [EQ, X, EQ, SEMI], False),
    # Wrong at anchor 5 (ref(5) = [X EQ X EQ]); the same draft at anchor 6 is exactly ref(6): never flagged.
    ("repeated draft that is now right", 5, [EQ, X, EQ, X], 0, [EQ, X, EQ, X], False),
    # Periodic text drafted right at anchors 5 and 10 (n = 4, advance 5): rotated by 1, as the target's text is.
    ("periodic text drafted right", 5, [X, EQ, X, EQ], 4, [EQ, X, EQ, X], False),
]


@pytest.mark.parametrize("name, anchor, prev, n, block, fires", CONSECUTIVE, ids=[row[0] for row in CONSECUTIVE])
def test_same_draft_across_steps(name, anchor, prev, n, block, fires):
    flags = flag_block(block, ref(anchor + n + 1), prev, ref(anchor))
    assert flags.same_draft is fires and flags.degenerate is fires
    if fires:
        assert flags.reasons[0].startswith("same_draft: previous draft again (rotation")
        assert flags.slots == (1, 2, 3, 4)


def test_prev_block_needs_prev_reference():
    with pytest.raises(ValueError):
        flag_block([X, EQ], [X, EQ], prev_block=[X, EQ])


def test_block_equal_to_reference_is_never_flagged():
    # Random drafts over 3 tokens are as repetitive as it gets; whatever the previous step drafted,
    # a block equal to its reference is never flagged.
    rng = np.random.default_rng(0)
    for _ in range(2000):
        length = int(rng.integers(1, 16))
        reference = [int(t) for t in rng.integers(0, 3, size=length)]
        prev_block = [int(t) for t in rng.integers(0, 3, size=length)]
        prev_reference = [int(t) for t in rng.integers(0, 3, size=length)]
        assert not flag_block(reference, reference, prev_block, prev_reference).degenerate


# ---------------------------------------------------------------- counts

# Walk over TEXT2 (B = 5, 4 slots): anchors 0 -> 5 -> 7 -> 8.
TEXT2 = [IF, X, EQ, ONE, COLON, NL, ELIF, X, EQ, TWO, COLON, NL, IND]
WALK_BLOCKS = [
    [X, EQ, ONE, COLON],     # anchor 0, ref [X EQ ONE COLON]: right, n = 4           -> clean
    [ELIF] * 4,              # anchor 5, ref [ELIF X EQ TWO]: n = 1, run 4 vs 1       -> run, slots 1..4
    [ELIF] * 4,              # anchor 7, ref [EQ TWO COLON NL]: n = 0, run + identical -> run, same_draft
    [TWO, COLON, NL, IND],   # anchor 8, ref [TWO COLON NL IND]: right, n = 4         -> clean
]
WALK_REFS = [TEXT2[1:5], TEXT2[6:10], TEXT2[8:12], TEXT2[9:13]]
WALK_N = [4, 1, 0, 4]
# Hand counts: 4 blocks, 2 flagged (run 2, same_draft 1); slots 1..4 in the pattern in both flagged blocks;
# accepted inside flagged blocks 1 + 0 = 1 (mean 0.5), outside 4 + 4 = 8 (mean 4.0).
WALK_COUNTS = RepetitionCounts(blocks=4, flagged_blocks=2, flagged_by_detector={"run": 2, "same_draft": 1},
                               flagged_by_slot=[2, 2, 2, 2], accepted_flagged=1, accepted_clean=8,
                               per_prompt={"p": (2, 4)})
# A clean walk with 3-slot blocks (B = 4): 2 blocks, n = 3 each.
CLEAN_COUNTS = RepetitionCounts(blocks=2, flagged_by_slot=[0, 0, 0], accepted_clean=6, per_prompt={"q": (0, 2)})


def test_count_walk_by_hand():
    counts = count_walk("p", WALK_BLOCKS, WALK_REFS, WALK_N)
    assert counts == WALK_COUNTS
    assert counts.flagged_by_detector == {"run": 2, "period": 0, "ngram": 0, "unique": 0, "same_draft": 1}
    assert accepted_inside_outside(counts) == (0.5, 4.0)
    assert count_walk("q", [[X, EQ, ONE], [NL, IND, RET]], [[X, EQ, ONE], [NL, IND, RET]], [3, 3]) == CLEAN_COUNTS


def test_merge_is_exact_and_json_round_trips():
    # p + q: 6 blocks, 2 flagged; q's 3-slot list is padded to 4; accepted 1 inside, 8 + 6 = 14 outside.
    expected = RepetitionCounts(blocks=6, flagged_blocks=2, flagged_by_detector={"run": 2, "same_draft": 1},
                                flagged_by_slot=[2, 2, 2, 2], accepted_flagged=1, accepted_clean=14,
                                per_prompt={"p": (2, 4), "q": (0, 2)})
    assert WALK_COUNTS + CLEAN_COUNTS == expected == CLEAN_COUNTS + WALK_COUNTS
    assert RepetitionCounts() + expected == expected
    assert accepted_inside_outside(expected) == (0.5, 14 / 4)
    for counts in (expected, RepetitionCounts()):
        assert RepetitionCounts.from_dict(json.loads(json.dumps(counts.to_dict()))) == counts
    with pytest.raises(ValueError):
        WALK_COUNTS + WALK_COUNTS  # the same prompt twice would count twice


def test_flagged_prompts_share():
    # 2/4 and 1/4 reach 25%; 1/5 and 0/2 do not.
    counts = RepetitionCounts(per_prompt={"a": (2, 4), "b": (1, 4), "c": (1, 5), "d": (0, 2)})
    assert flagged_prompts(counts) == {"a", "b"}
    assert flagged_prompts(counts, share=0.5) == {"a"}
    assert DEFAULT_THRESHOLDS.prompt_share == 0.25


@pytest.mark.parametrize("blocks, refs, n", [
    ([], [], []),                              # no steps
    ([[X, EQ]], [[X, EQ], [X, EQ]], [0]),      # lengths differ
    ([[X, EQ]], [[X, EQ]], [3]),               # n beyond the block
])
def test_count_walk_rejects_bad_input(blocks, refs, n):
    with pytest.raises(ValueError):
        count_walk("p", blocks, refs, n)
