"""The offline tree walk equals a live DDTree-style loop (tests/reference_ddtree.py) on the tiny test beds.

For every prompt and every budget in BUDGETS, on the dense (qwen3: one tree-masked verify forward per step,
the KV cache compacted to the accepted path) and the hybrid target (qwen3_5_text: the tree walked along the
target's path, one token per forward), the live loop's committed tokens equal the greedy continuation and
its per-step committed lengths and anchors equal the replay's walk for that budget, all budgets scored from
the one drafter pass per anchor the chain uses (model/tree_scoring.py). Drafters: the `trained` fixture's
(B = 4, a depth limit of 3) and, on the dense bed, the in-house drafter with the anchor bug and a DFlash2
drafter (its unary tree: the per-slot logits, not its selector's pairwise scores).
"""

from __future__ import annotations

import pytest
import torch
from reference_ddtree import ddtree_loop

from dflash_eval.core.settings.run_settings import Scoring
from dflash_eval.formats.checkpoints import checked_spec
from dflash_eval.formats.files import weight_files
from dflash_eval.model.drafter import load_drafter
from dflash_eval.model.engine import replay
from dflash_eval.model.target import capture_taps, load_target
from dflash_eval.pipeline.continuations import Prompt, generate_greedy, prompt_ids
from dflash_eval.pipeline.prompts import DEMO_PROMPTS

pytestmark = pytest.mark.compat

BUDGETS = (1, 2, 4, 7, 8, 16, 32, 64, 128)
MAX_NEW = 24
HELD_OUT = ("Write a function that returns the maximum of three numbers.", "Sort a dictionary by its values.",
            "Convert a Roman numeral to an integer.")


def _drafter(path, target):
    spec, _ = checked_spec(path, target.info)
    return load_drafter(spec, weight_files(path)).attach_target(target.embed_tokens, target.lm_head)


@pytest.mark.parametrize("kind,which", [("qwen3", "good"), ("qwen3", "anchor_bug"), ("qwen3_5_text", "good")])
def test_offline_tree_walk_equals_live_ddtree_loop_at_every_budget(trained, kind, which):
    target = load_target(str(trained[kind]["target"]), device="cpu", dtype="float32")
    drafter = _drafter(trained[kind][which], target)
    gains, budget_failures, deep = [], 0, 0
    for i, text in enumerate(DEMO_PROMPTS[:4] + HELD_OUT):
        ids = prompt_ids(target.tokenizer, Prompt(str(i), text), enable_thinking=False)
        greedy = generate_greedy(target, [ids], MAX_NEW)[0]
        tokens = torch.tensor(ids + greedy)
        capture = capture_taps(target, tokens, list(drafter.spec.taps))
        offline = replay(drafter, capture.taps, tokens, len(ids), Scoring(MAX_NEW, anchor_batch=5), tree_budgets=BUDGETS)
        tree = offline.tree
        deep += tree.deep_rows
        for budget in BUDGETS:
            live = ddtree_loop(target, drafter, ids, MAX_NEW, budget, hybrid=kind != "qwen3")
            walk = tree.walks[budget]
            assert live.tokens[len(ids):] == greedy, f"{kind} prompt {i} budget {budget}: output is not greedy"
            assert walk["walk_anchors"] == live.anchors, f"{kind}/{which} prompt {i} budget {budget}"
            assert walk["walk_accept_lengths"] == live.accept_lengths, f"{kind}/{which} prompt {i} budget {budget}"
            budget_failures += walk["walk_failures"].count(1)
        chain = sum(offline.walk_accept_lengths) / len(offline.walk_accept_lengths)
        best = sum(tree.walks[128]["walk_accept_lengths"]) / len(tree.walks[128]["walk_accept_lengths"])
        gains.append(best - chain)
    print(f"{kind}/{which}: tree(128) - chain tau per prompt {[round(g, 2) for g in gains]}, "
          f"{budget_failures} budget failures, {deep} rows recomputed whole")
    assert max(gains) > 0  # the tree accepted more than the chain somewhere: not a chain in disguise
    assert budget_failures > 0  # small budgets cut paths whose tokens were candidates


@pytest.fixture(scope="module")
def dflash2_good(test_bed, tmp_path_factory):
    from dflash_eval.demo.train import greedy_sequences
    from dflash_eval.pipeline.prompts import DEMO_PROMPTS
    from dflash_eval.testing.train_dflash2 import dflash2_fixture_config, train_dflash2_drafter

    target = load_target(str(test_bed["qwen3"]), device="cpu", dtype="float32")
    sequences = greedy_sequences(target, list(DEMO_PROMPTS)[:6], 40)
    return train_dflash2_drafter(target, sequences, dflash2_fixture_config(), tmp_path_factory.mktemp("d2") / "good")


def test_dflash2_unary_tree_equals_the_live_loop(test_bed, dflash2_good):
    target = load_target(str(test_bed["qwen3"]), device="cpu", dtype="float32")
    drafter = _drafter(dflash2_good, target)
    assert drafter.spec.is_dflash2
    gains = []
    for i, text in enumerate(DEMO_PROMPTS[4:7] + HELD_OUT[:2]):
        ids = prompt_ids(target.tokenizer, Prompt(str(i), text), enable_thinking=False)
        greedy = generate_greedy(target, [ids], MAX_NEW)[0]
        tokens = torch.tensor(ids + greedy)
        capture = capture_taps(target, tokens, list(drafter.spec.taps))
        offline = replay(drafter, capture.taps, tokens, len(ids), Scoring(MAX_NEW, anchor_batch=3),
                         tree_budgets=(1, 4, 16, 64))
        for budget in (1, 4, 16, 64):
            live = ddtree_loop(target, drafter, ids, MAX_NEW, budget, hybrid=False)
            assert live.tokens[len(ids):] == greedy
            assert offline.tree.walks[budget]["walk_accept_lengths"] == live.accept_lengths, f"prompt {i} budget {budget}"
        chain = sum(offline.walk_accept_lengths) / len(offline.walk_accept_lengths)
        gains.append(sum(offline.tree.walks[64]["walk_accept_lengths"]) / len(offline.tree.walks[64]["walk_accept_lengths"])
                     - chain)
    print(f"dflash2: tree(64) - chain (selector walk) tau per prompt {[round(g, 2) for g in gains]}")
