"""Batched greedy generation is exact: on fp32 CPU a prompt generates the same tokens in a left-padded
batch of prompts of other lengths as alone, for a dense and a hybrid (Gated-DeltaNet) target, whose
recurrent state must not see the pads."""

from __future__ import annotations

import json

import pytest

from dflash_eval.model.target import load_target
from dflash_eval.pipeline.continuations import generate_greedy
from dflash_eval.pipeline.prompts import DEMO_PROMPTS, Prompt, prompt_ids

# transformers' internals: also run on the oldest supported transformers (scripts/compat.sh)
pytestmark = pytest.mark.compat


@pytest.mark.parametrize("kind", ["qwen3", "qwen3_5_text"])
def test_batched_generation_equals_one_prompt_at_a_time(kind, test_bed):
    target = load_target(str(test_bed[kind]), device="cpu", dtype="float32")
    ids = [prompt_ids(target.tokenizer, Prompt(f"p{i}", text), False) for i, text in enumerate(DEMO_PROMPTS[:8])]
    assert len({len(p) for p in ids}) > 3  # prompts of different lengths: the batches are really padded
    alone = generate_greedy(target, ids, 24, batch_size=1)
    for batch in (3, 8):
        assert generate_greedy(target, ids, 24, batch_size=batch) == alone
    assert all(alone)


def _target_with_generation_config(test_bed, tmp_path, kind: str, dtype: str = "float32"):
    """A copy of a test-bed target whose generation_config.json asks for everything greedy must ignore."""
    import json
    import shutil

    folder = tmp_path / f"{kind}-sampling-config"
    shutil.copytree(test_bed[kind], folder)
    config = json.loads((folder / "generation_config.json").read_text())
    config.update(do_sample=True, temperature=0.7, top_p=0.8, top_k=20, repetition_penalty=1.3,
                  no_repeat_ngram_size=3, min_new_tokens=20)
    (folder / "generation_config.json").write_text(json.dumps(config))
    target = load_target(str(folder), device="cpu", dtype=dtype)
    assert target.model.generation_config.repetition_penalty == 1.3  # the checkpoint's config is really loaded
    return target


def _argmax_loop(target, ids: list[int], max_new_tokens: int) -> list[int]:
    """The definition of greedy: one full forward per token, argmax, stop after a stop token."""
    import torch

    from dflash_eval.model.target import stop_token_ids

    stops, tokens, out = set(stop_token_ids(target)), list(ids), []
    with torch.inference_mode():
        for _ in range(max_new_tokens):
            token = int(target.model(input_ids=torch.tensor([tokens])).logits[0, -1].argmax())
            tokens.append(token)
            out.append(token)
            if token in stops:
                break
    return out


@pytest.mark.parametrize("kind", ["qwen3", "qwen3_5_text"])
def test_greedy_is_the_argmax_whatever_the_generation_config_says(kind, test_bed, tmp_path):
    target = _target_with_generation_config(test_bed, tmp_path, kind)
    ids = [prompt_ids(target.tokenizer, Prompt(f"p{i}", text), False) for i, text in enumerate(DEMO_PROMPTS[:4])]
    expected = [_argmax_loop(target, p, 24) for p in ids]
    assert generate_greedy(target, ids, 24, batch_size=1) == expected
    assert generate_greedy(target, ids, 24, batch_size=4) == expected
    assert target.model.generation_config.repetition_penalty == 1.3  # left as it was


@pytest.mark.parametrize("kind", ["qwen3", "qwen3_5_text"])
def test_sampled_continuations_batched_equal_one_prompt_at_a_time(kind, test_bed, tmp_path):
    from dflash_eval.model.sampling import Sampling, generator_for
    from dflash_eval.pipeline.continuations import generate_sampled, generate_sampled_batch

    target = _target_with_generation_config(test_bed, tmp_path, kind)
    ids = [prompt_ids(target.tokenizer, Prompt(f"p{i}", text), False) for i, text in enumerate(DEMO_PROMPTS[:5])]
    sampling = Sampling(temperature=0.9, top_p=0.95, top_k=0)
    alone = [generate_sampled(target, p, 20, sampling, generator_for(3, f"p{i}", 0)) for i, p in enumerate(ids)]
    batched = generate_sampled_batch(target, ids, 20, sampling, [generator_for(3, f"p{i}", 0) for i in range(len(ids))])
    assert batched == alone
    assert len({tuple(a) for a in alone}) > 1


def _real_cache_bytes(cache) -> int:
    import torch

    total = 0
    for layer in cache.layers:
        for value in vars(layer).values():
            tensors = value.values() if isinstance(value, dict) else [value]
            total += sum(t.nbytes for t in tensors if torch.is_tensor(t))
    return total


@pytest.mark.parametrize("kind", ["qwen3", "qwen3_5_text", "qwen3_next"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_cache_bytes_per_sequence_equal_the_real_cache(kind, dtype, test_bed):
    import torch

    from dflash_eval.model.hf_forward import output_cache
    from dflash_eval.pipeline.continuations import cache_bytes_per_sequence, cache_fixed_bytes

    target = load_target(str(test_bed[kind]), device="cpu", dtype=dtype)
    for length, batch in ((7, 1), (33, 1), (9, 3)):
        with torch.inference_mode():
            out = target.model(input_ids=torch.arange(1, length + 1).repeat(batch, 1), use_cache=True)
        per_sequence = cache_bytes_per_sequence(target.model.config, target.dtype, length)
        assert batch * per_sequence + cache_fixed_bytes(target.model.config) == _real_cache_bytes(output_cache(out))


def test_the_fixed_cache_bytes_are_transformers_per_layer_token_counter():
    """transformers 5.25 added, per Gated-DeltaNet layer, a 0-dim int64 `cumulative_length_linear` (8 bytes per
    layer per cache, whatever the batch); 5.17 (the GPU image's) holds no such tensor."""
    import transformers
    from packaging.version import Version
    from transformers import Qwen3_5TextConfig

    from dflash_eval.pipeline.continuations import cache_fixed_bytes, linear_layer_fixed_bytes

    expected = 8 if Version(transformers.__version__) >= Version("5.25") else 0
    assert linear_layer_fixed_bytes() == expected
    config = Qwen3_5TextConfig(num_hidden_layers=8, layer_types=["linear_attention"] * 6 + ["full_attention"] * 2)
    assert cache_fixed_bytes(config) == 6 * expected


def test_generation_batch_from_total_memory_on_a_27b_like_hybrid(monkeypatch):
    """Qwen3.6-27B's public shape on the meta device: per sequence at 2048 + 128 tokens ~150 MB of
    Gated-DeltaNet state (not 1 GB) and the KV of 16 attention layers; a 141 GB H200 holds the batch cap."""
    import torch
    from transformers import Qwen3_5TextConfig

    from dflash_eval.pipeline.continuations import cache_bytes_per_sequence, cache_fixed_bytes, generation_budget

    config = Qwen3_5TextConfig(vocab_size=248320, hidden_size=5120, intermediate_size=17408, num_hidden_layers=64,
                               num_attention_heads=24, num_key_value_heads=4, head_dim=256, linear_num_value_heads=48,
                               linear_num_key_heads=16, linear_key_head_dim=128, linear_value_head_dim=128,
                               linear_conv_kernel_dim=4,
                               layer_types=["linear_attention" if (i + 1) % 4 else "full_attention" for i in range(64)])
    per_sequence = cache_bytes_per_sequence(config, torch.bfloat16, 2176)
    recurrent = 48 * 48 * 128 * 128 * 4
    assert 150e6 < recurrent < 152e6
    assert per_sequence == recurrent + 48 * 10240 * 4 * 2 + 16 * 2 * 4 * 256 * 2176 * 2
    assert generation_budget(config, torch.bfloat16, [128] * 164, 2048, 141 * 10**9, 54 * 10**9).batch == 64
    budget = generation_budget(config, torch.bfloat16, [128] * 164, 2048, 80 * 10**9, 54 * 10**9)
    assert budget.batch == 30  # (72 - 54) GB / 2 over ~300 MB
    fixed = cache_fixed_bytes(config)  # 48 x 8 bytes on transformers >= 5.25, nothing on 5.17
    assert budget.predicted_bytes == 54 * 10**9 + 30 * (per_sequence + 248320 * 4 * 2) + fixed
    assert generation_budget(config, torch.bfloat16, [128] * 10, 2048, 141 * 10**9, 54 * 10**9).batch == 10


def test_a_shard_or_a_resume_gets_the_continuation_of_the_full_run_in_bf16(test_bed, tmp_path):
    """Generation batches come from the run's prompt set (`universe`): a subset of it (a shard, a rank, a
    resume) is generated with the companions the whole run gives it, so its bf16 continuations are the
    whole run's bit for bit (the companions are cached too)."""
    from dflash_eval.core.progress import Reporter
    from dflash_eval.core.settings.run_settings import RunOptions
    from dflash_eval.pipeline.continuations import continuations_for

    target = load_target(str(test_bed["qwen3_5_text"]), device="cpu", dtype="bfloat16")
    prompts = [Prompt(f"p{i:02d}", text) for i, text in enumerate(DEMO_PROMPTS)]
    ids = {p.id: prompt_ids(target.tokenizer, p, False) for p in prompts}

    def options(name):
        return RunOptions(drafters=[], out=tmp_path / "unused", max_new_tokens=20, cache_dir=tmp_path / name,
                          generation_batch=5)

    full, generated = continuations_for(target, prompts, ids, options("full"), False, None, Reporter(), universe=prompts)
    assert generated == len(prompts)
    subset = prompts[1::4]
    part, generated = continuations_for(target, subset, {p.id: ids[p.id] for p in subset}, options("part"), False, None,
                                        Reporter(), universe=prompts)
    assert generated == len(subset) and part == {p.id: full[p.id] for p in subset}
    cached = sorted((tmp_path / "part").glob("*.json"))
    assert len(cached) > len(subset)  # the companions of the planned batches were cached as well


def _big_copy(test_bed, tmp_path) -> tuple:
    """A copy of the dense target whose weight file is past the 4 MiB the sampled fingerprint hashes whole
    (a 5 MiB rotary `inv_freq` buffer added: older checkpoints carry one and transformers drops it by design, so
    the load's weight-presence check does not count it as foreign), and a byte of a real weight that none of
    its 64 windows covers."""
    import shutil

    import torch
    from safetensors import safe_open
    from safetensors.torch import save_file

    folder = tmp_path / "big"
    shutil.copytree(test_bed["qwen3"], folder)
    file = folder / "model.safetensors"
    with safe_open(str(file), "pt") as handle:
        tensors = {k: handle.get_tensor(k) for k in handle.keys()}
    save_file({**tensors, "model.layers.0.self_attn.rotary_emb.inv_freq": torch.zeros(5 * 2**20 // 4)}, str(file),
              metadata={"format": "pt"})
    size = file.stat().st_size
    windows = [(k * (size - 65536) // 63, k * (size - 65536) // 63 + 65536) for k in range(64)]
    header = json.loads(file.read_bytes()[8:8 + int.from_bytes(file.read_bytes()[:8], "little")])
    start = 8 + int.from_bytes(file.read_bytes()[:8], "little")
    begin, end = header["model.embed_tokens.weight"]["data_offsets"]
    offset = next(o for o in range(start + begin, start + end, 4) if not any(a <= o < b for a, b in windows))
    return folder, offset


def test_the_continuation_cache_misses_on_another_dtype_or_one_weight_byte(test_bed, tmp_path):
    """The cache key holds the content digests of provenance (every weight byte), the dtype and the
    generation settings: neither a bf16 run reading fp32 continuations nor a checkpoint changed in a byte
    that the sampled fingerprint (`Target.fingerprint`) does not read gets a cached continuation."""
    from dflash_eval.core.progress import Reporter
    from dflash_eval.core.settings.run_settings import RunOptions
    from dflash_eval.pipeline.continuations import continuations_for

    folder, offset = _big_copy(test_bed, tmp_path)
    prompts = [Prompt(f"p{i}", text) for i, text in enumerate(DEMO_PROMPTS[:2])]
    options = RunOptions(drafters=[], out=tmp_path / "unused", max_new_tokens=4, cache_dir=tmp_path / "cache")

    def generated(dtype: str) -> tuple[int, str]:
        target = load_target(str(folder), device="cpu", dtype=dtype)
        ids = {p.id: prompt_ids(target.tokenizer, p, False) for p in prompts}
        return continuations_for(target, prompts, ids, options, False, None, Reporter())[1], target.fingerprint()

    assert generated("float32")[0] == 2
    assert generated("bfloat16")[0] == 2  # another dtype: not the fp32 continuations
    count, fingerprint = generated("float32")
    assert count == 0  # the same settings: cached
    data = bytearray((folder / "model.safetensors").read_bytes())
    data[offset] ^= 1  # the lowest mantissa bit of one embedding weight
    (folder / "model.safetensors").write_bytes(bytes(data))
    count, changed = generated("float32")
    assert changed == fingerprint  # the sampled fingerprint does not see it...
    assert count == 2  # ...the cache key does
