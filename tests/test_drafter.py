"""The native drafter computes what the primer's equations say, in both checkpoint formats."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from reference_dflash import reference_block_logits
from safetensors.torch import load_file

from dflash_eval.formats.checkpoints import checked_spec
from dflash_eval.formats.files import weight_files
from dflash_eval.model.drafter import load_drafter
from dflash_eval.model.drafting import draft_logits
from dflash_eval.model.target import capture_taps, load_target


@pytest.fixture(scope="module")
def qwen3(test_bed):
    return load_target(str(test_bed["qwen3"]), device="cpu", dtype="float32")


@pytest.fixture(scope="module")
def sequence(qwen3):
    text = "def fizzbuzz(n):\n    for i in range(n):\n        if i % 15 == 0:\n"
    return torch.tensor(qwen3.tokenizer(text)["input_ids"])


def load(path, target):
    spec, owners = checked_spec(path, target.info)
    drafter = load_drafter(spec, weight_files(path)).attach_target(target.embed_tokens, target.lm_head)
    return spec, drafter


def reference_config(spec):
    return dict(eps=spec.rms_norm_eps, hd=spec.head_dim, heads=spec.num_attention_heads,
                kv_heads=spec.num_key_value_heads, theta=spec.rope["rope_theta"],
                layers=[(layer.window, layer.causal_in_block, layer.window_from) for layer in spec.layers])


ANCHORS = [3, 7, 12]


def test_same_weights_in_both_formats_give_identical_logits(drafter_dirs, qwen3, sequence):
    zlab_spec, zlab = load(drafter_dirs["zlab"], qwen3)
    spec_spec, spec = load(drafter_dirs["speculators"], qwen3)
    assert zlab_spec.taps == spec_spec.taps == (1, 2, 3)
    assert spec_spec.speculators_taps == (2, 3, 4)
    assert (zlab_spec.embedding_source, spec_spec.embedding_source) == ("target", "checkpoint")
    taps = capture_taps(qwen3, sequence, list(zlab_spec.taps)).taps
    lengths = [4] * len(ANCHORS)
    a = draft_logits(zlab, zlab.context(taps), sequence, ANCHORS, lengths)
    b = draft_logits(spec, spec.context(taps), sequence, ANCHORS, lengths)
    assert torch.equal(a, b)


@pytest.mark.parametrize("variant,causal", [("zlab", False), ("zlab", True), ("sliding", True), ("sliding", False)])
def test_logits_equal_an_independent_restatement(drafter_dirs, qwen3, sequence, variant, causal):
    spec, drafter = load(drafter_dirs[variant], qwen3)
    drafter.spec = spec = spec.with_causality(causal, causal, "test")
    taps = capture_taps(qwen3, sequence, list(spec.taps)).taps
    weights = load_file(str(drafter_dirs[variant] / "model.safetensors"))
    embed, head = qwen3.embed_tokens.weight, qwen3.lm_head.weight
    got = draft_logits(drafter, drafter.context(taps), sequence, ANCHORS, [4] * len(ANCHORS))
    for i, anchor in enumerate(ANCHORS):
        block = [int(sequence[anchor])] + [spec.mask_token_id] * 3
        want = reference_block_logits(weights, reference_config(spec), taps, anchor, block, embed, head)
        torch.testing.assert_close(got[4 * i: 4 * i + 4], want, rtol=1e-4, atol=1e-4)
    if variant == "sliding":
        assert spec.layers[0].kind == "sliding" and spec.layers[0].window == 3


def test_mask_token_embedding_comes_from_the_target(drafter_dirs, qwen3, sequence):
    """z-lab drafters have no embedding of their own: changing the target's MASK row changes the drafts."""
    spec, drafter = load(drafter_dirs["zlab"], qwen3)
    taps = capture_taps(qwen3, sequence, list(spec.taps)).taps
    before = draft_logits(drafter, drafter.context(taps), sequence, [5], [4])
    table = torch.nn.Embedding.from_pretrained(qwen3.embed_tokens.weight.clone())
    table.weight[spec.mask_token_id] += 1.0
    drafter.attach_target(table, qwen3.lm_head)
    after = draft_logits(drafter, drafter.context(taps), sequence, [5], [4])
    assert not torch.allclose(before[1:], after[1:])


def test_reduced_vocabulary_maps_draft_ids_to_target_ids(drafter_dirs, qwen3, sequence):
    spec, drafter = load(drafter_dirs["d2t"], qwen3)
    assert spec.has_d2t and spec.draft_vocab_size == 200 and spec.lm_head_source == "checkpoint"
    weights = load_file(str(drafter_dirs["d2t"] / "model.safetensors"))
    taps = capture_taps(qwen3, sequence, list(spec.taps)).taps
    got = draft_logits(drafter, drafter.context(taps), sequence, [6], [4])
    block = [int(sequence[6])] + [spec.mask_token_id] * 3
    want = reference_block_logits(weights, reference_config(spec), taps, 6, block, weights["embed_tokens.weight"],
                                  weights["lm_head.weight"])
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    draft_ids = got.argmax(-1)
    target_ids = drafter.to_target_ids(draft_ids)
    assert torch.equal(target_ids, draft_ids + weights["d2t"][draft_ids])
    # the reduced head is the target's head restricted to the mapped rows
    rows = torch.arange(200) + weights["d2t"]
    assert torch.equal(weights["lm_head.weight"], qwen3.lm_head.weight[rows])


def test_causality_override_is_reported(drafter_dirs):
    from dflash_eval.formats.checkpoints import read_spec

    spec, _, _ = read_spec(drafter_dirs["sliding"])
    assert spec.layers[0].causal_in_block is True and spec.layers[1].causal_in_block is False
    flipped = spec.with_causality(False, None, "override: --block-attention bidirectional")
    assert [layer.causal_in_block for layer in flipped.layers] == [False, False]
    assert flipped.causality_source.startswith("override")
    assert replace(spec, path="x").taps == spec.taps
