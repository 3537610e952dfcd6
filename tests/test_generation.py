"""Batched greedy generation is exact: on fp32 CPU a prompt generates the same tokens in a left-padded
batch of prompts of other lengths as alone, for a dense and a hybrid (Gated-DeltaNet) target, whose
recurrent state must not see the pads."""

from __future__ import annotations

import pytest

from dflash_eval.pipeline.continuations import generate_greedy
from dflash_eval.pipeline.prompts import DEMO_PROMPTS, Prompt, prompt_ids
from dflash_eval.model.target import load_target


@pytest.mark.parametrize("kind", ["qwen3", "qwen3_5_text"])
def test_batched_generation_equals_one_prompt_at_a_time(kind, test_bed):
    target = load_target(str(test_bed[kind]), device="cpu", dtype="float32")
    ids = [prompt_ids(target.tokenizer, Prompt(f"p{i}", text), False) for i, text in enumerate(DEMO_PROMPTS[:8])]
    assert len({len(p) for p in ids}) > 3  # prompts of different lengths: the batches are really padded
    alone = generate_greedy(target, ids, 24, batch_size=1)
    for batch in (3, 8):
        assert generate_greedy(target, ids, 24, batch_size=batch) == alone
    assert all(alone)
