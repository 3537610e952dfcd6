"""GPU checks that CI cannot run (no GPU there). Run through `benchmarks/gpu_check.sh` on a CUDA machine.

(a) Tiny hybrid target + trained drafter: `evaluate()` on CUDA in bf16 with the fla kernels bound, next to
    the same run in fp32 with transformers' torch fallback. Prints the kernel function per Gated-DeltaNet
    layer, greedy-continuation agreement, the max relative difference of the taps, and both taus.
(b) Throughput of the tap pass on a random-weight hybrid target built directly on the GPU with a real
    model's shape (Qwen3.5-9B-like, then 27B-like if time and memory allow): tokens/s and the fraction of
    the GPU's bf16 dense peak (989 TFLOP/s for H100/H200 SXM).
(c) The phases of a run on a 27B-like hybrid target and a 5-layer drafter (4 sliding + 1 full, B = 16),
    random weights in bf16: generation tokens/s at the batch `generation_batch_size` chooses, the tap pass
    and the drafter pass at 2048 tokens with their share of the bf16 peak, one live-loop step (draft +
    verify of a 16-token block on a 2048-token cache), and the modelled speedup of dflash-eval over a live
    loop for 1 and 5 drafters at 2048 tokens (tau 2 and 4), as one summary table.
    `python benchmarks/gpu_check.py --smoke` runs (c) alone on the CPU with a tiny shape: the code path,
    not the numbers (tests/test_benchmarks.py runs it).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

H200_BF16_PEAK = 989e12


def part_a(root: Path) -> None:
    from dflash_eval.commands.evaluate import RunOptions, evaluate
    from dflash_eval.pipeline.prompts import DEMO_PROMPTS
    from dflash_eval.model.target import capture_taps, load_target
    from dflash_eval.model.kernels import kernel_report, torch_fallback_kernels
    from dflash_eval.testing.tiny import build_test_bed
    from dflash_eval.testing.train import TrainConfig, greedy_sequences, train_drafter

    bed = build_test_bed(root / "bed")
    cpu_target = load_target(str(bed["qwen3_5_text"]), device="cpu", dtype="float32")
    sequences = greedy_sequences(cpu_target, list(DEMO_PROMPTS), 48)
    drafter = train_drafter(cpu_target, sequences, TrainConfig(block_size=4, steps=300), root / "drafter")
    del cpu_target

    gpu = load_target(str(bed["qwen3_5_text"]), device="cuda", dtype="bfloat16")
    print("(a) kernel bound per Gated-DeltaNet layer (bf16 run):")
    for k in kernel_report(gpu.model):
        print(f"    layer {k.layer:2d} {k.operation:28s} {k.function}  accelerated={k.accelerated}")
    ids, prompt_len = sequences[0]
    taps = list(range(gpu.info.num_layers))
    fla = capture_taps(gpu, ids, taps)
    with torch_fallback_kernels(gpu.model):
        fallback = capture_taps(gpu, ids, taps)
    H = gpu.info.hidden_size
    for t in taps:
        a, b = fla.taps[:, t * H:(t + 1) * H].float(), fallback.taps[:, t * H:(t + 1) * H].float()
        rel = ((a - b).abs().max() / b.abs().max().clamp_min(1e-12)).item()
        print(f"    tap {t}: max abs diff {(a - b).abs().max().item():.3e}, max rel diff {rel:.3e}")
    print(f"    greedy-token agreement fla vs fallback (bf16): {(fla.greedy == fallback.greedy).float().mean().item():.4f}")
    del gpu

    runs = {}
    for label, dtype, kernels in (("cuda-bf16-fla", "bfloat16", "auto"), ("cuda-fp32-torch", "float32", "torch")):
        runs[label] = evaluate(RunOptions(drafters=[str(drafter)], out=root / f"run-{label}", target=str(bed["qwen3_5_text"]),
                                          max_new_tokens=48, device="cuda", dtype=dtype, kernels=kernels,
                                          cache_dir=root / f"cache-{label}"))
    conts = {label: {json.loads(line)["prompt_id"]: json.loads(line)["continuation_ids"]
                     for line in (root / f"run-{label}" / "samples.jsonl").read_text().splitlines()}
             for label in runs}
    a, b = conts["cuda-bf16-fla"], conts["cuda-fp32-torch"]
    same = sum(x == y for pid in a for x, y in zip(a[pid], b[pid]))
    total = sum(max(len(a[pid]), len(b[pid])) for pid in a)
    print(f"(a) greedy continuations bf16+fla vs fp32+torch: {same}/{total} tokens agree position by position, "
          f"{sum(a[p] == b[p] for p in a)}/{len(a)} prompts identical")
    for label, run in runs.items():
        d = run["drafters"][0]["metrics"]
        sc = run["provenance"]["self_consistency"]
        print(f"(a) {label:16s} tau macro {d['tau_macro']:.3f} micro {d['tau_micro']:.3f} "
              f"self-consistency {sc['agree']}/{sc['total']} chunk kernel "
              f"{run['provenance']['kernels'].get('chunk_gated_delta_rule')}")


def part_b(budget_seconds: float) -> None:
    from transformers import AutoModelForCausalLM, Qwen3_5TextConfig

    from dflash_eval.model.target import Target, capture_taps
    from dflash_eval.model.kernels import decoder_layers, kernel_report
    from dflash_eval.formats.validation import TargetInfo

    shapes = {
        "9B-like": dict(hidden_size=4096, intermediate_size=12288, num_hidden_layers=32, num_attention_heads=16,
                        num_key_value_heads=4, head_dim=256, linear_num_value_heads=32, linear_num_key_heads=16),
        "27B-like": dict(hidden_size=5120, intermediate_size=17408, num_hidden_layers=64, num_attention_heads=24,
                         num_key_value_heads=4, head_dim=256, linear_num_value_heads=48, linear_num_key_heads=16),
    }
    started = time.time()
    for name, shape in shapes.items():
        if time.time() - started > budget_seconds:
            print(f"(b) {name}: skipped (time budget)")
            continue
        layers = shape["num_hidden_layers"]
        config = Qwen3_5TextConfig(vocab_size=248320, linear_key_head_dim=128, linear_value_head_dim=128,
                                   layer_types=["linear_attention" if (i + 1) % 4 else "full_attention" for i in range(layers)],
                                   max_position_embeddings=32768, tie_word_embeddings=False, **shape)
        with torch.device("cuda"):
            model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
        model.eval().requires_grad_(False)
        params = sum(p.numel() for p in model.parameters())
        target = Target(model=model, tokenizer=None, name=name, path=Path("."), device=torch.device("cuda"),
                        dtype=torch.bfloat16, info=TargetInfo(name, layers, shape["hidden_size"], 248320),
                        layers=decoder_layers(model))
        accelerated = sum(k.accelerated for k in kernel_report(model))
        taps = [1, layers // 4, layers // 2, 3 * layers // 4, layers - 1]
        for seq in (2048, 4096):
            ids = torch.randint(0, 248000, (seq,))
            capture_taps(target, ids, taps)  # warm-up (kernel autotune)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            reps = 3
            for _ in range(reps):
                capture_taps(target, ids, taps)
            torch.cuda.synchronize()
            elapsed = (time.perf_counter() - t0) / reps
            flops = 2 * params * seq  # matmul FLOPs; attention's quadratic part not counted
            print(f"(b) {name} ({params / 1e9:.1f}B params, {accelerated} accelerated GDN ops) seq {seq}: "
                  f"{seq / elapsed:,.0f} tokens/s, {elapsed * 1e3:.0f} ms/pass, "
                  f"{flops / elapsed / H200_BF16_PEAK:.1%} of bf16 peak, peak mem {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB")
        del model, target
        torch.cuda.empty_cache()


def part_c(smoke: bool = False) -> list[tuple[str, str]]:
    """The phases of issue 15 item 6; returns (and prints) the summary table's rows."""
    from transformers import AutoModelForCausalLM, Qwen3_5TextConfig

    from dflash_eval.formats.validation import TargetInfo
    from dflash_eval.pipeline.continuations import generation_batch_size
    from dflash_eval.model.drafter import DFlashDrafter
    from dflash_eval.model.engine import replay
    from dflash_eval.model.target import Target, cached_step, capture_taps
    from dflash_eval.model.kernels import decoder_layers
    from dflash_eval.model.drafting import draft_logits
    from dflash_eval.testing.checkpoint_writer import design_spec
    from dflash_eval.testing.testbed import random_state_dict

    device = torch.device("cpu" if smoke else "cuda")
    dtype = torch.float32 if smoke else torch.bfloat16
    if smoke:
        shape = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=8, num_attention_heads=4,
                     num_key_value_heads=2, head_dim=32, linear_num_value_heads=4, linear_num_key_heads=2)
        vocab, T, prompt, gen_tokens, drafter_shape = 1024, 96, 32, 16, dict(num_attention_heads=4, num_key_value_heads=2,
                                                                            head_dim=32, intermediate_size=256)
    else:
        shape = dict(hidden_size=5120, intermediate_size=17408, num_hidden_layers=64, num_attention_heads=24,
                     num_key_value_heads=4, head_dim=256, linear_num_value_heads=48, linear_num_key_heads=16)
        vocab, T, prompt, gen_tokens, drafter_shape = 248320, 2048, 128, 128, dict(num_attention_heads=32, num_key_value_heads=8,
                                                                                  head_dim=128, intermediate_size=17408)
    layers = shape["num_hidden_layers"]
    config = Qwen3_5TextConfig(vocab_size=vocab, linear_key_head_dim=shape["head_dim"] // 2,
                               linear_value_head_dim=shape["head_dim"] // 2,
                               layer_types=["linear_attention" if (i + 1) % 4 else "full_attention" for i in range(layers)],
                               max_position_embeddings=32768, tie_word_embeddings=False, **shape)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.eval().requires_grad_(False)
    params = sum(p.numel() for p in model.parameters())
    target = Target(model=model, tokenizer=None, name="27B-like", path=Path("."), device=device, dtype=dtype,
                    info=TargetInfo("27B-like", layers, shape["hidden_size"], vocab), layers=decoder_layers(model))
    spec = design_spec(target.info, mask_token_id=vocab - 1, block_size=16, num_layers=5, sliding_window=2048,
                       sliding_layers=4, fmt="zlab", **drafter_shape)
    drafter = DFlashDrafter(spec).to(device=device, dtype=dtype).eval().requires_grad_(False)
    drafter.load_state_dict({k: v.to(dtype) for k, v in random_state_dict(spec).items()}, strict=True)
    drafter.attach_target(target.embed_tokens, target.lm_head)
    drafter_params = sum(p.numel() for n, p in drafter.named_parameters())

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    peak = H200_BF16_PEAK if not smoke else float("nan")
    rows = []
    with torch.inference_mode():
        batch = generation_batch_size(target, [prompt] * 64, T) if not smoke else 2
        ids = torch.randint(0, vocab - 2, (batch, prompt), device=device)
        model.generate(input_ids=ids[:, :8], max_new_tokens=2, do_sample=False, pad_token_id=0)  # warm-up
        sync()
        t0 = time.perf_counter()
        model.generate(input_ids=ids, max_new_tokens=gen_tokens, min_new_tokens=gen_tokens, do_sample=False,
                       pad_token_id=0, eos_token_id=None)
        sync()
        gen_rate = batch * gen_tokens / (time.perf_counter() - t0)
        rows.append(("generation", f"{gen_rate:,.0f} tokens/s at batch {batch} ({gen_tokens} new tokens each)"))

        tokens = torch.randint(0, vocab - 2, (prompt + T,))
        taps = list(spec.taps)
        capture_taps(target, tokens, taps)  # warm-up
        sync()
        t0 = time.perf_counter()
        capture = capture_taps(target, tokens, taps)
        sync()
        tap_s = time.perf_counter() - t0
        rows.append(("tap pass", f"{tap_s * 1e3:.0f} ms at {prompt + T} tokens, "
                                 f"{2 * params * (prompt + T) / tap_s / peak:.1%} of bf16 peak"))

        replay(drafter, capture.taps, tokens, prompt, T, anchor_batch=64)  # warm-up
        sync()
        t0 = time.perf_counter()
        replay(drafter, capture.taps, tokens, prompt, T)
        sync()
        drafter_s = time.perf_counter() - t0
        flops = 2 * drafter_params * T * spec.block_size
        rows.append(("drafter pass", f"{drafter_s * 1e3:.0f} ms over {T} anchors x B = 16, "
                                     f"{flops / drafter_s / peak:.1%} of bf16 peak (matmuls only)"))

        _, _, cache = cached_step(target, tokens[:prompt + T - 16], taps, None)
        ctx = drafter.context(capture.taps[:prompt + T - 16].to(dtype))
        step_times = []
        for _ in range(3):
            import copy

            snapshot = copy.deepcopy(cache)
            sync()
            t0 = time.perf_counter()
            draft_logits(drafter, ctx, tokens.to(device), [prompt + T - 17], [16])
            cached_step(target, tokens[prompt + T - 17:prompt + T - 1], taps, snapshot)
            sync()
            step_times.append(time.perf_counter() - t0)
        step_s = min(step_times)
        rows.append(("live-loop step", f"{step_s * 1e3:.1f} ms (draft + verify of 16 tokens on a {prompt + T}-token cache)"))
        per_prompt_generation = T / gen_rate  # a prompt's share of batched generation, paid once for all drafters
        for tau in (2.0, 4.0):
            live = T / tau * step_s
            for n in (1, 5):
                ours = per_prompt_generation + tap_s + n * drafter_s
                rows.append((f"modelled speedup, tau {tau:g}, {n} drafter(s)",
                             f"{n * live / ours:.1f}x (live loop {n * live:.2f} s vs dflash-eval {ours:.2f} s per prompt)"))
    width = max(len(k) for k, _ in rows)
    print(f"(c) phases on a {params / 1e9:.1f}B-parameter hybrid target, {drafter_params / 1e6:.0f}M-parameter drafter"
          + (" [smoke: CPU, tiny shape; the numbers mean nothing]" if smoke else ""))
    for key, value in rows:
        print(f"    {key:<{width}}  {value}")
    return rows


if __name__ == "__main__":
    if "--smoke" in sys.argv:
        part_c(smoke=True)
        sys.exit(0)
    if not torch.cuda.is_available():
        sys.exit("gpu_check: no CUDA device")
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    with tempfile.TemporaryDirectory() as tmp:
        part_a(Path(tmp))
    part_b(budget_seconds=float(os.environ.get("GPU_CHECK_B_SECONDS", "240")))
    part_c()
