"""How the phases of a run grow with the continuation length, on a scaled-down pair with a real pair's
proportions (random weights: cost only), one process.

    python benchmarks/scaling.py [--lengths 128,256,512,1024,2048] [--anchor-batch 64,256]

Target: a Qwen3.5-style hybrid, 3 Gated-DeltaNet layers per gated-attention layer (16 layers), about 15x
the drafter's non-embedding parameters; drafter: 5 layers (4 sliding, window 2048, + 1 full), B = 16, in
z-lab format. For each length T (a random prompt of 64 tokens + T continuation tokens): seconds and peak
resident memory of the tap pass (one target forward) and of the drafter pass (every position an anchor,
`--anchor-batch` anchors per forward), then the fitted growth exponent of each phase in T. Peak memory is
the process's high-water mark, reset before each phase (Linux /proc/self/clear_refs), so it includes the
resident model weights.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dflash_eval.core.settings.run_settings import Scoring


def reset_peak() -> None:
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def peak_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def exponent(xs, ys) -> float:
    lx, ly = [math.log(x) for x in xs], [math.log(max(y, 1e-9)) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly)) / sum((a - mx) ** 2 for a in lx)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", default="128,256,512,1024,2048")
    parser.add_argument("--anchor-batch", default="64,256")
    args = parser.parse_args()

    import torch
    from transformers import AutoModelForCausalLM, Qwen3_5TextConfig

    from dflash_eval.demo.checkpoint_writer import design_spec, save_checkpoint
    from dflash_eval.model.drafter import DFlashDrafter
    from dflash_eval.model.engine import replay
    from dflash_eval.model.target import capture_taps, load_target
    from dflash_eval.testing.testbed import random_state_dict
    from dflash_eval.testing.tiny import build_test_bed

    torch.manual_seed(0)
    tmp = Path(tempfile.mkdtemp(prefix="dflash-scaling-"))
    bed = build_test_bed(tmp / "bed")  # for its tokenizer files and chat template
    hidden, vocab = 384, 4096
    config = Qwen3_5TextConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=8 * hidden, num_hidden_layers=16,
                               num_attention_heads=6, num_key_value_heads=2, head_dim=64,
                               layer_types=(["linear_attention"] * 3 + ["full_attention"]) * 4,
                               linear_num_value_heads=6, linear_num_key_heads=3,
                               linear_key_head_dim=64, linear_value_head_dim=64, max_position_embeddings=8192)
    model = AutoModelForCausalLM.from_config(config).float()
    target_dir = tmp / "target"
    model.save_pretrained(target_dir)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        source = bed["qwen3_5_text"] / name
        if source.exists():
            (target_dir / name).write_bytes(source.read_bytes())
    target = load_target(str(target_dir), device="cpu", dtype="float32")
    spec = design_spec(target.info, mask_token_id=vocab - 1, block_size=16, num_layers=5, num_attention_heads=4,
                       num_key_value_heads=1, head_dim=32, intermediate_size=hidden, sliding_window=2048,
                       sliding_layers=4, fmt="zlab")
    drafter_dir = save_checkpoint(tmp / "drafter", spec, random_state_dict(spec), "zlab")
    drafter = DFlashDrafter(spec).float().eval().requires_grad_(False)
    drafter.load_state_dict({k: v for k, v in random_state_dict(spec).items()}, strict=True)
    drafter.attach_target(target.embed_tokens, target.lm_head)
    def body(m):
        return sum(p.numel() for n, p in m.named_parameters() if "embed" not in n and "lm_head" not in n)
    print(f"target {body(target.model) / 1e6:.1f}M non-embedding parameters ({config.layer_types.count('linear_attention')} "
          f"Gated-DeltaNet + {config.layer_types.count('full_attention')} attention layers), drafter "
          f"{body(drafter) / 1e6:.2f}M ({body(target.model) / body(drafter):.1f}x smaller), B = 16, {drafter_dir.name}")
    batches = [int(x) for x in args.anchor_batch.split(",")]
    print(f"{'T':>6} {'tap pass':>9} {'peak MiB':>9}" + "".join(f" {'drafter b=' + str(b):>14} {'peak MiB':>9}" for b in batches))
    lengths = [int(x) for x in args.lengths.split(",")]
    taps_s, drafter_s = [], {b: [] for b in batches}
    with torch.inference_mode():
        for T in lengths:
            tokens = torch.randint(0, vocab - 2, (64 + T,))
            reset_peak()
            started = time.perf_counter()
            capture = capture_taps(target, tokens, list(spec.taps))
            taps_s.append(time.perf_counter() - started)
            line = f"{T:>6} {taps_s[-1]:>8.2f}s {peak_mib():>9.0f}"
            for b in batches:
                reset_peak()
                started = time.perf_counter()
                replay(drafter, capture.taps, tokens, 64, Scoring(T, anchor_batch=b))
                drafter_s[b].append(time.perf_counter() - started)
                line += f" {drafter_s[b][-1]:>13.2f}s {peak_mib():>9.0f}"
            print(line, flush=True)
    if len(lengths) >= 2:
        print(f"growth in T: tap pass ~T^{exponent(lengths, taps_s):.2f}; " + "; ".join(
            f"drafter pass (b={b}) ~T^{exponent(lengths, drafter_s[b]):.2f}" for b in batches))


if __name__ == "__main__":
    main()
