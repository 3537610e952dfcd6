"""GPU checks that CI cannot run (no GPU there). Run through `benchmarks/gpu_check.sh` on a CUDA machine.

(a) Tiny hybrid target + trained drafter: `evaluate()` on CUDA in bf16 with the fla kernels bound, next to
    the same run in fp32 with transformers' torch fallback. Prints the kernel function per Gated-DeltaNet
    layer, greedy-continuation agreement, the max relative difference of the taps, and both taus.
(b) Throughput of the tap pass on a random-weight hybrid target built directly on the GPU with a real
    model's shape (Qwen3.5-9B-like, then 27B-like if time and memory allow): tokens/s and the fraction of
    the GPU's bf16 dense peak (989 TFLOP/s for H100/H200 SXM).
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
    from dflash_eval.api import RunOptions, evaluate
    from dflash_eval.prompts import DEMO_PROMPTS
    from dflash_eval.target import capture_taps, kernel_report, load_target, torch_fallback_kernels
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

    from dflash_eval.target import Target, capture_taps, decoder_layers, kernel_report
    from dflash_eval.checkpoints import TargetInfo

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


if __name__ == "__main__":
    if not torch.cuda.is_available():
        sys.exit("gpu_check: no CUDA device")
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    with tempfile.TemporaryDirectory() as tmp:
        part_a(Path(tmp))
    part_b(budget_seconds=float(os.environ.get("GPU_CHECK_B_SECONDS", "240")))
