"""Anchors per drafter forward: one rule (core/batching.py), and run.json records what the engine ran.

The rule on hand-computed shapes (the rows it wants, the memory bound where it binds, CPU and GPU apart);
its per-sequence record and the merge of shards' records; and end to end: a run where the memory bound binds
(its budget made small, so the tiny test bed's sequences get 1-4 anchors per forward, differently per
prompt and per drafter) records in run.json, per drafter, exactly the anchors per forward the engine's
drafter forwards had (observed on `DFlashDrafter.forward_blocks`, the one place a chunk is drafted).
"""

from __future__ import annotations

from collections import Counter

from dflash_eval.core import batching
from dflash_eval.core.batching import anchor_batch, anchor_batches, merged_anchor_batches


def test_the_rule_on_hand_computed_shapes():
    # 0.6B-like drafter (B 16, 16 heads), 512 tokens, CPU: the rows decide, 512 / 16 = 32 anchors
    assert anchor_batch(512, 16, 16, "cpu") == 32
    # 2,048 tokens: 32 MiB of fp32 scores hold 15 anchors (16 x 16 x 2064 x 4 bytes each), the floor is 256 / 16
    assert 32 * 2**20 // (16 * 16 * 2064 * 4) == 15 and anchor_batch(2048, 16, 16, "cpu") == 16
    assert anchor_batch(1024, 16, 16, "cpu") == 32 * 2**20 // (16 * 16 * 1040 * 4) == 31
    # a 32K-token context: 16 x 16 x (32768 + 16) x 16 bytes per anchor; 1 GiB holds 7 of them
    assert anchor_batch(32768, 16, 16, "cpu") == 2**30 // (16 * 16 * 32784 * 16) == 7
    # a 27B-like pair on a GPU (B 16, 32 heads, 2,176 tokens): 8,192 rows would be 512 anchors; 4 GiB holds 239
    assert anchor_batch(2176, 16, 32, "cuda") == 4 * 2**30 // (16 * 32 * 2192 * 16) == 239
    assert anchor_batch(2176, 16, 32, "cuda:1") == 239  # a device string counts as its type
    # the test bed's drafters (B 4, 4 heads): 512 / 4 = 128 (their scores are a few KiB per anchor)
    assert anchor_batch(96, 4, 4, "cpu") == 128
    assert anchor_batch(96, 4, 4, None) == 128  # no device: the CPU's rule
    assert anchor_batch(10**9, 16, 64, "cpu") == 1  # never 0


def test_the_record_counts_sequences_per_value_and_merges_by_summing():
    # heads 16, B 16, CPU: 32 anchors at 100 and 512 tokens, 16 at 2,048, 7 at 32,768 (above)
    assert anchor_batches([100, 2048, 512, 32768], 16, 16, "cpu") == {"7": 1, "16": 1, "32": 2}
    assert anchor_batches([100, 2048], 16, 16, "cpu", given=5) == {"5": 2}
    assert anchor_batches([], 16, 16, "cpu") == {}
    merged = merged_anchor_batches([{"a": {"7": 1, "32": 2}}, None, {"a": {"32": 3}, "b": {"4": 1}}])
    assert merged == {"a": {"7": 1, "32": 5}, "b": {"4": 1}}
    assert list(merged["a"]) == ["7", "32"]  # ascending as numbers, not as strings


def test_run_json_records_the_anchors_per_forward_the_engine_ran(test_bed, tmp_path, monkeypatch):
    from dflash_eval.commands.evaluate import evaluate
    from dflash_eval.core.settings.run_settings import RunOptions
    from dflash_eval.model.drafter import DFlashDrafter
    from dflash_eval.pipeline import scoring
    from dflash_eval.testing.testbed import write_random_drafter

    design = dict(block_size=4, num_layers=2)
    drafters = {"four": write_random_drafter(test_bed["qwen3"], tmp_path / "four", "zlab", seed=1, **design),
                "eight": write_random_drafter(test_bed["qwen3"], tmp_path / "eight", "zlab", seed=2,
                                              num_attention_heads=8, **design)}
    monkeypatch.setitem(batching.BUDGET, "cpu", 60_000)  # 256 (T + 4) bytes per anchor at 4 heads: binds
    forwards: list[int] = []
    observed: dict[int, list[int]] = {4: [], 8: []}  # heads -> the largest forward of each replayed sequence
    forward_blocks, replay = DFlashDrafter.forward_blocks, scoring.replay

    def counted_forward(self, context, block_embeds, *args, **kwargs):
        forwards.append(int(block_embeds.shape[0]))
        return forward_blocks(self, context, block_embeds, *args, **kwargs)

    def observed_replay(drafter, *args, **kwargs):
        forwards.clear()
        result = replay(drafter, *args, **kwargs)
        observed[drafter.spec.num_attention_heads].append(max(forwards))
        assert result.anchor_batch == max(forwards)
        return result

    monkeypatch.setattr(DFlashDrafter, "forward_blocks", counted_forward)
    monkeypatch.setattr(scoring, "replay", observed_replay)
    run = evaluate(RunOptions(drafters=[f"{drafters['four']}:four", f"{drafters['eight']}:eight"],
                              out=tmp_path / "run", target=str(test_bed["qwen3"]), limit=4, max_new_tokens=16,
                              device="cpu", dtype="float32", cache_dir=tmp_path / "cache")).document
    numerics = run["provenance"]["numerics"]
    recorded = numerics["anchor_batch"]
    for name, heads in (("four", 4), ("eight", 8)):
        expected = {str(a): n for a, n in sorted(Counter(observed[heads]).items())}
        assert recorded[name] == expected, (name, recorded, observed)
        assert all(a < 128 for a in observed[heads])  # the bound decided, not the rows (128 at B = 4)
    assert len(recorded["four"]) >= 2 or len(set(observed[4])) == 1  # per sequence, not one value per run
    assert max(observed[8]) < max(observed[4])  # twice the heads, twice the scores per anchor
    assert "core/batching.py" in numerics["anchor_batch_rule"]


def test_plan_calls_the_same_rule(monkeypatch):
    from dflash_eval.commands.plan import anchor_batch as planned
    from dflash_eval.demo.checkpoint_writer import design_spec
    from dflash_eval.formats.validation import TargetInfo

    spec = design_spec(TargetInfo("t", num_layers=8, hidden_size=64, vocab_size=512), mask_token_id=0,
                       block_size=16, num_attention_heads=32)
    assert planned(spec, 2176) == anchor_batch(2176, 16, 32, "cuda") == 239
    monkeypatch.setitem(batching.BUDGET, "gpu", 60_000)
    assert planned(spec, 2176) == anchor_batch(2176, 16, 32, "cuda") == 1
