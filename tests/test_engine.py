"""The trajectory engine equals an independent, real step-by-step speculative-decoding loop.

On tiny fp32 targets (dense and hybrid Gated-DeltaNet), with drafters trained by the fixture trainer to a
tau well above 1, the offline replay's walk must equal the live loop's accept lengths step for step on
every prompt, and the live loop's output must equal plain greedy generation.
"""

from __future__ import annotations

import pytest
import torch

from dflash_eval.core.settings.run_settings import Scoring
from dflash_eval.formats.checkpoints import checked_spec
from dflash_eval.formats.files import weight_files
from dflash_eval.model.drafter import load_drafter
from dflash_eval.model.engine import block_length, replay, self_consistency
from dflash_eval.model.live import live_generate
from dflash_eval.model.target import capture_taps, load_target
from dflash_eval.pipeline.continuations import Prompt, generate_greedy, prompt_ids, stop_token_ids
from dflash_eval.pipeline.prompts import DEMO_PROMPTS

# transformers' internals: also run on the oldest supported transformers (scripts/compat.sh)
pytestmark = pytest.mark.compat

MAX_NEW = 40
# Prompts the fixture drafters never saw: acceptance drops and drafts get rejected, which exercises the
# live loop's cache restore (the training prompts alone are accepted almost everywhere).
HELD_OUT = (
    "Write a function that returns the maximum of three numbers.",
    "Sort a dictionary by its values.",
    "Write a generator that yields prime numbers.",
    "Convert a Roman numeral to an integer.",
)


@pytest.fixture(scope="module", params=["qwen3", "qwen3_5_text"])
def setup(request, trained):
    kind = request.param
    target = load_target(str(trained[kind]["target"]), device="cpu", dtype="float32")
    path = trained[kind]["good"]
    spec, _ = checked_spec(path, target.info)
    drafter = load_drafter(spec, weight_files(path)).attach_target(target.embed_tokens, target.lm_head)
    return kind, target, drafter


@pytest.mark.parametrize("max_new,final_block", [(MAX_NEW, "shorter"), (MAX_NEW, "full"), (13, "shorter")])
def test_replay_walk_equals_live_loop_and_live_output_is_greedy(setup, max_new, final_block):
    kind, target, drafter = setup
    shorter = final_block == "shorter"
    taus, ended_by_stop, rejected_steps = [], 0, 0
    for i, text in enumerate(DEMO_PROMPTS + HELD_OUT):
        ids = prompt_ids(target.tokenizer, Prompt(str(i), text), enable_thinking=False)
        greedy = generate_greedy(target, [ids], max_new)[0]
        ended_by_stop += greedy[-1] in stop_token_ids(target)
        tokens = torch.tensor(ids + greedy)
        capture = capture_taps(target, tokens, list(drafter.spec.taps))
        assert self_consistency(capture.greedy, tokens, len(ids)) == (len(greedy), len(greedy))
        offline = replay(drafter, capture.taps, tokens, len(ids), Scoring(max_new, "shorter" if shorter else "full", anchor_batch=7))
        live = live_generate(target, drafter, ids, Scoring(max_new, "shorter" if shorter else "full"))
        assert live.continuation == greedy, f"{kind} prompt {i}: live loop output differs from greedy generation"
        assert offline.walk_anchors == live.walk_anchors, f"{kind} prompt {i}"
        assert offline.walk_accept_lengths == live.walk_accept_lengths, f"{kind} prompt {i}"
        assert offline.walk_drafted == live.walk_drafted
        rejected_steps += sum(n - 1 < d for n, d in zip(live.walk_accept_lengths, live.walk_drafted))
        if offline.walk_accept_lengths:
            taus.append(sum(offline.walk_accept_lengths) / len(offline.walk_accept_lengths))
    tau = sum(taus) / len(taus)
    print(f"{kind} max_new={max_new} {final_block}: tau macro {tau:.2f} over {len(taus)} prompts, "
          f"{ended_by_stop} ended by a stop token, {rejected_steps} steps with a rejected draft")
    assert tau > 2.0  # B = 4: at most 4; a random drafter scores ~1.0
    assert rejected_steps >= 10  # the restore path ran


def test_anchor_batching_does_not_change_results(setup):
    _, target, drafter = setup
    ids = prompt_ids(target.tokenizer, Prompt("x", DEMO_PROMPTS[0]), enable_thinking=False)
    tokens = torch.tensor(ids + generate_greedy(target, [ids], MAX_NEW)[0])
    taps = capture_taps(target, tokens, list(drafter.spec.taps)).taps
    one = replay(drafter, taps, tokens, len(ids), Scoring(MAX_NEW, anchor_batch=1))
    many = replay(drafter, taps, tokens, len(ids), Scoring(MAX_NEW, anchor_batch=1000))
    assert one.accepted == many.accepted and one.drafts == many.drafts


@pytest.mark.parametrize("anchor,cap_end,B,shorter,expected", [
    (10, 30, 4, True, 4),    # far from the cap: full block
    (27, 30, 4, True, 3),    # 2 tokens may still follow the anchor: anchor + 2 drafted slots
    (28, 30, 4, True, 2),
    (28, 30, 4, False, 4),   # vLLM keeps full blocks
])
def test_block_length_near_the_cap(anchor, cap_end, B, shorter, expected):
    assert block_length(anchor, cap_end, B, shorter) == expected
