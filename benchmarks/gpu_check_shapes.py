"""The parts of the GPU check at real shapes, on random weights built directly on the accelerator
(`gpu_check.py throughput|phases`): the tap pass of 9B- and 27B-like hybrid targets, and the phases of a
run on a 27B-like target with a 5-layer B = 16 drafter. FLOPs are counted by torch's FlopCounterMode on
the warm-up call of the very computation that is then timed (every matmul and attention, the drafter's
lm_head over all slots included), never from a parameter count; Triton kernels (fla) are not seen by it,
so a hybrid target's count leaves out the Gated-DeltaNet recurrence (small next to its projections).
"""

from __future__ import annotations

import copy
import time
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

from dflash_eval.core.settings.run_settings import Scoring

HYBRID_27B = dict(hidden_size=5120, intermediate_size=17408, num_hidden_layers=64, num_attention_heads=24,
                  num_key_value_heads=4, head_dim=256, linear_num_value_heads=48, linear_num_key_heads=16,
                  linear_key_head_dim=128, linear_value_head_dim=128)
HYBRID_9B = dict(hidden_size=4096, intermediate_size=12288, num_hidden_layers=32, num_attention_heads=16,
                 num_key_value_heads=4, head_dim=256, linear_num_value_heads=32, linear_num_key_heads=16,
                 linear_key_head_dim=128, linear_value_head_dim=128)
TINY = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=8, num_attention_heads=4, num_key_value_heads=2,
            head_dim=32, linear_num_value_heads=4, linear_num_key_heads=2, linear_key_head_dim=16,
            linear_value_head_dim=16)


def hybrid_target(shape: dict, vocab: int, device: torch.device, dtype: torch.dtype, name: str):
    from transformers import AutoModelForCausalLM, Qwen3_5TextConfig

    from dflash_eval.formats.validation import TargetInfo
    from dflash_eval.model.kernels import decoder_layers
    from dflash_eval.model.target import Target

    layers = shape["num_hidden_layers"]
    config = Qwen3_5TextConfig(vocab_size=vocab, max_position_embeddings=32768, tie_word_embeddings=False,
                               layer_types=["linear_attention" if (i + 1) % 4 else "full_attention" for i in range(layers)],
                               **shape)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.eval().requires_grad_(False)
    return Target(model=model, tokenizer=None, name=name, path=Path("."), device=device, dtype=dtype,
                  info=TargetInfo(name, layers, shape["hidden_size"], vocab), layers=decoder_layers(model))


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, device: torch.device, reps: int = 1) -> tuple[float, int]:
    """(seconds per call, FLOPs per call): one counted warm-up call, then `reps` timed calls."""
    with FlopCounterMode(display=False) as counter:
        fn()
    _sync(device)
    started = time.perf_counter()
    for _ in range(reps):
        fn()
    _sync(device)
    return (time.perf_counter() - started) / reps, int(counter.get_total_flops())


def _share(flops: int, seconds: float, peak: float | None) -> str:
    return f"{flops / seconds / peak:.1%} of bf16 peak" if peak else "share of peak: n/a (no known accelerator)"


def part_throughput(rehearse: bool, record, accelerator, peak_flops) -> None:
    from dflash_eval.model.kernels import kernel_report
    from dflash_eval.model.target import capture_taps

    device, dtype = accelerator(rehearse)
    peak = peak_flops(device)
    shapes = {"tiny": (TINY, 1024, (64, 128))} if rehearse else {"9B-like": (HYBRID_9B, 248320, (2048, 4096)),
                                                                 "27B-like": (HYBRID_27B, 248320, (2048,))}
    for name, (shape, vocab, lengths) in shapes.items():
        target = hybrid_target(shape, vocab, device, dtype, name)
        params = sum(p.numel() for p in target.model.parameters())
        accelerated = sum(k.accelerated for k in kernel_report(target.model))
        layers = shape["num_hidden_layers"]
        taps = [1, layers // 4, layers // 2, 3 * layers // 4, layers - 1]
        for seq in lengths:
            ids = torch.randint(0, vocab - 2, (seq,))
            seconds, flops = timed(lambda t=target, ids=ids, taps=taps: capture_taps(t, ids, taps), device,
                                   reps=1 if rehearse else 3)
            record(f"tap pass {name} at {seq}", {
                "parameters_billion": round(params / 1e9, 3), "accelerated_ops": accelerated,
                "tokens_per_s": round(seq / seconds), "ms_per_pass": round(seconds * 1e3, 1), "counted_flops": flops,
                "share": _share(flops, seconds, peak),
                "peak_gib": round(torch.cuda.max_memory_allocated() / 2**30, 1) if device.type == "cuda" else None})
        del target
        if device.type == "cuda":
            torch.cuda.empty_cache()


def drafter_for(target, device, dtype, *, heads: int, kv_heads: int, head_dim: int, intermediate: int):
    from dflash_eval.demo.checkpoint_writer import design_spec
    from dflash_eval.model.drafter import DFlashDrafter
    from dflash_eval.testing.testbed import random_state_dict

    spec = design_spec(target.info, mask_token_id=target.info.vocab_size - 1, block_size=16, num_layers=5,
                       sliding_window=2048, sliding_layers=4, fmt="zlab", num_attention_heads=heads,
                       num_key_value_heads=kv_heads, head_dim=head_dim, intermediate_size=intermediate)
    drafter = DFlashDrafter(spec).to(device=device, dtype=dtype).eval().requires_grad_(False)
    drafter.load_state_dict({k: v.to(dtype) for k, v in random_state_dict(spec).items()}, strict=True)
    return drafter.attach_target(target.embed_tokens, target.lm_head)


def part_phases(rehearse: bool, record, accelerator, peak_flops) -> list[tuple[str, str]]:
    """The phases of a run, one summary table (also returned: (row, text) pairs)."""
    from dflash_eval.model.drafting import draft_logits
    from dflash_eval.model.engine import block_length, drafter_anchor_batch, replay
    from dflash_eval.model.target import cached_step, capture_taps, indexed_device
    from dflash_eval.pipeline.continuations import generation_batch_size, greedy_config, only_this_config

    device, dtype = accelerator(rehearse)
    device = indexed_device(device)  # `cuda:0` as the run resolves it: generation counts the weights placed there
    peak = peak_flops(device)
    if rehearse:
        shape, vocab, T, prompt, gen_tokens = TINY, 1024, 96, 32, 16
        drafter_shape = dict(heads=4, kv_heads=2, head_dim=32, intermediate=256)
    else:
        shape, vocab, T, prompt, gen_tokens = HYBRID_27B, 248320, 2048, 128, 128
        drafter_shape = dict(heads=32, kv_heads=8, head_dim=128, intermediate=17408)
    target = hybrid_target(shape, vocab, device, dtype, "27B-like")
    params = sum(p.numel() for p in target.model.parameters())
    drafter = drafter_for(target, device, dtype, **drafter_shape)
    spec = drafter.spec
    rows: list[tuple[str, str]] = []

    def row(key: str, text: str, figures: dict) -> None:
        rows.append((key, text))
        record(key, {"text": text, **figures})

    with torch.inference_mode():
        batch = generation_batch_size(target, [prompt] * 64, T) if device.type == "cuda" else 2
        ids = torch.randint(0, vocab - 2, (batch, prompt), device=device)
        config = greedy_config(gen_tokens, [], 0)
        config.min_new_tokens, config.eos_token_id = gen_tokens, None

        def generate():
            with only_this_config(target.model):
                target.model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), generation_config=config)

        seconds, _ = timed(generate, device)
        rate = batch * gen_tokens / seconds
        row("generation", f"{rate:,.0f} tokens/s at batch {batch} ({gen_tokens} new tokens each)",
            {"tokens_per_s": round(rate), "batch": batch})

        tokens = torch.randint(0, vocab - 2, (prompt + T,))
        taps = list(spec.taps)
        tap_s, tap_flops = timed(lambda: capture_taps(target, tokens, taps), device)
        row("tap pass", f"{tap_s * 1e3:.0f} ms at {prompt + T} tokens, {_share(tap_flops, tap_s, peak)}",
            {"seconds": tap_s, "counted_flops": tap_flops})

        capture = capture_taps(target, tokens, taps)
        anchors = drafter_anchor_batch(drafter, prompt + T)
        drafter_s, drafter_flops = timed(lambda: replay(drafter, capture.taps, tokens, prompt, Scoring(T)), device)
        slots = sum(block_length(a, prompt + T, spec.block_size, True) for a in range(prompt, prompt + T - 1))
        lm_head = 2 * spec.hidden_size * spec.draft_vocab_size * slots
        row("drafter pass", f"{drafter_s * 1e3:.0f} ms over {T} anchors x B = {spec.block_size} at {anchors} anchors per "
                            f"forward, {_share(drafter_flops, drafter_s, peak)} (every FLOP; lm_head "
                            f"{lm_head / drafter_flops:.0%} of them)",
            {"seconds": drafter_s, "counted_flops": drafter_flops, "lm_head_flops": lm_head, "anchor_batch": anchors})

        _, _, cache = cached_step(target, tokens[:prompt + T - 16], taps, None)
        ctx = drafter.context(capture.taps[:prompt + T - 16].to(dtype))
        steps = []
        for _ in range(3):
            snapshot = copy.deepcopy(cache)
            _sync(device)
            started = time.perf_counter()
            draft_logits(drafter, ctx, tokens.to(device), [prompt + T - 17], [16])
            cached_step(target, tokens[prompt + T - 17:prompt + T - 1], taps, snapshot)
            _sync(device)
            steps.append(time.perf_counter() - started)
        step_s = min(steps)
        row("live-loop step", f"{step_s * 1e3:.1f} ms (draft + verify of 16 tokens on a {prompt + T}-token cache)",
            {"seconds": step_s})
        per_prompt_generation = T / rate  # a prompt's share of batched generation, paid once for all drafters
        for tau in (2.0, 4.0):
            live = T / tau * step_s
            for n in (1, 5):
                ours = per_prompt_generation + tap_s + n * drafter_s
                row(f"modelled speedup, tau {tau:g}, {n} drafter(s)",
                    f"{n * live / ours:.1f}x (live loop {n * live:.2f} s vs dflash-eval {ours:.2f} s per prompt)",
                    {"speedup": n * live / ours})
    drafter_params = sum(p.numel() for p in drafter.parameters())
    width = max(len(k) for k, _ in rows)
    print(f"(phases) {params / 1e9:.2f}B-parameter hybrid target, {drafter_params / 1e6:.0f}M-parameter drafter"
          + (" [rehearsal: CPU, tiny shape; the numbers mean nothing]" if rehearse else ""))
    for key, value in rows:
        print(f"    {key:<{width}}  {value}", flush=True)
    return rows
