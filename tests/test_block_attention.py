"""The linear-cost drafter pass (each slot against the context and its own block, one shared softmax)
gives the same drafts as the dense training layout (queries x [context | all blocks]) for every mask
rule, block lengths that differ (the short final block), GQA and the doctor's mask variants."""

from __future__ import annotations

import itertools

import pytest
import torch

from dflash_eval.core.attention import LayerAttention
from dflash_eval.formats.checkpoints import checked_spec
from dflash_eval.formats.files import weight_files
from dflash_eval.model.drafter import load_drafter
from dflash_eval.model.drafting import dense_draft_logits, draft_logits
from dflash_eval.model.masks import anchor_block_mask, block_masks
from dflash_eval.model.target import capture_taps, load_target

RULES = [LayerAttention(kind, window, causal, origin)
         for kind, window in (("full", None), ("sliding", 1), ("sliding", 3), ("sliding", 6))
         for causal, origin in itertools.product((True, False), ("anchor", "query"))
         if not (window is None and origin == "query")]


@pytest.mark.parametrize("rule", RULES, ids=str)
@pytest.mark.parametrize("anchor_in_context", [False, True])
def test_block_masks_are_the_dense_mask_cut_per_block(rule, anchor_in_context):
    anchors, lengths, C = [3, 4, 9, 10], [4, 4, 4, 2], 12
    dense = anchor_block_mask(anchors, lengths, C, rule, anchor_in_context=anchor_in_context)
    ctx, own = block_masks(anchors, lengths, C, rule, anchor_in_context=anchor_in_context)
    start = 0
    for i, length in enumerate(lengths):
        rows = dense[start:start + length]
        assert torch.equal(rows[:, :C], ctx[i, :length])
        assert torch.equal(rows[:, C + start:C + start + length], own[i, :length, :length])
        others = torch.cat([rows[:, C:C + start], rows[:, C + start + length:]], dim=1)
        assert not others.any()  # other blocks are never visible
        assert not own[i, :length, length:].any()  # padding is invisible to real slots
        start += length


@pytest.fixture(scope="module")
def setup(test_bed, drafter_dirs):
    target = load_target(str(test_bed["qwen3"]), device="cpu", dtype="float32")
    spec, _ = checked_spec(drafter_dirs["sliding"], target.info)
    drafter = load_drafter(spec, weight_files(drafter_dirs["sliding"])).attach_target(target.embed_tokens, target.lm_head)
    tokens = torch.tensor(target.tokenizer("def fizzbuzz(n):\n    for i in range(1, n + 1):\n        print(i)\n")["input_ids"])
    ctx = drafter.context(capture_taps(target, tokens, list(spec.taps)).taps)
    return drafter, tokens, ctx


@pytest.mark.parametrize("rule", RULES, ids=str)
def test_block_path_equals_the_dense_path(rule, setup):
    drafter, tokens, ctx = setup
    spec = drafter.spec
    drafter.spec = spec.__class__(**{**spec.__dict__, "layers": (rule, spec.layers[1])})
    try:
        T = tokens.shape[0]
        anchors = list(range(2, T - 1))
        lengths = [min(4, T - a) for a in anchors]  # the last blocks are shorter
        for anchor_in_context in (False, True):
            dense = dense_draft_logits(drafter, ctx, tokens, anchors, lengths, anchor_in_context=anchor_in_context)
            block = draft_logits(drafter, ctx, tokens, anchors, lengths, anchor_in_context=anchor_in_context)
            assert torch.allclose(block, dense, atol=1e-5, rtol=1e-5), (block - dense).abs().max()
            assert torch.equal(block.argmax(-1), dense.argmax(-1))
        shifted = draft_logits(drafter, ctx, tokens, anchors, lengths, block_offset=1)
        assert torch.allclose(shifted, dense_draft_logits(drafter, ctx, tokens, anchors, lengths, block_offset=1),
                              atol=1e-5, rtol=1e-5)
    finally:
        drafter.spec = spec
