"""The drafter pass: dense training layout (queries x [context | all blocks]) vs the block path (each slot
against the context and its own block), side by side in one process, at growing sequence lengths.

    python benchmarks/drafter_pass.py [--lengths 256,512,1024,2048] [--block-size 16] [--anchor-batch 256]

A random-weight drafter with a real pair's shape ratios, scaled down (5 layers: 4 sliding + 1 full,
window 2048, GQA 4:1, B = 16) over random context features: cost only, the drafts are compared for
equality on every anchor. Prints seconds per pass, the ratio, and the fitted growth exponent of each
path in the sequence length (every position is an anchor, so the dense path's block-to-block part grows
with the square of the anchors per chunk, the block path's linearly).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", default="256,512,1024,2048")
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--anchor-batch", type=int, default=256)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--vocab", type=int, default=4096)
    args = parser.parse_args()

    from dflash_eval.demo.checkpoint_writer import design_spec
    from dflash_eval.formats.validation import TargetInfo
    from dflash_eval.model.drafter import DFlashDrafter
    from dflash_eval.model.drafting import dense_draft_logits, draft_logits

    torch.manual_seed(0)
    info = TargetInfo("bench", num_layers=24, hidden_size=args.hidden, vocab_size=args.vocab)
    spec = design_spec(info, mask_token_id=args.vocab - 1, block_size=args.block_size, num_layers=5,
                       num_attention_heads=8, num_key_value_heads=2, head_dim=args.hidden // 8,
                       sliding_window=2048, sliding_layers=4, fmt="zlab")
    drafter = DFlashDrafter(spec).float().eval().requires_grad_(False)
    embed = torch.nn.Embedding(args.vocab, args.hidden)
    head = torch.nn.Linear(args.hidden, args.vocab, bias=False)
    drafter.attach_target(embed, head)
    B = args.block_size
    rows = []
    for T in [int(x) for x in args.lengths.split(",")]:
        tokens = torch.randint(0, args.vocab - 1, (T,))
        taps = torch.randn(T, spec.fc_in_features)
        ctx = drafter.context(taps)
        anchors = list(range(T - 1))
        timings, drafts = {}, {}
        for name, function in (("dense", dense_draft_logits), ("block", draft_logits)):
            started = time.perf_counter()
            out = []
            with torch.inference_mode():
                kv = drafter.context_kv(ctx, torch.arange(T)) if name == "block" else None
                for start in range(0, len(anchors), args.anchor_batch):
                    chunk = anchors[start:start + args.anchor_batch]
                    lengths = [min(B, T - a) for a in chunk]
                    extra = {"context_kv": kv} if kv is not None else {}
                    out.append(function(drafter, ctx, tokens, chunk, lengths, **extra).argmax(-1))
            timings[name] = time.perf_counter() - started
            drafts[name] = torch.cat(out)
        same = bool(torch.equal(drafts["dense"], drafts["block"]))
        rows.append((T, timings["dense"], timings["block"], same))
        print(f"T={T:5d}  dense {timings['dense']:7.2f} s  block {timings['block']:7.2f} s  "
              f"dense/block {timings['dense'] / timings['block']:5.2f}x  identical drafts: {same}", flush=True)
    if len(rows) >= 2:
        for index, name in ((1, "dense"), (2, "block")):
            xs = [math.log(r[0]) for r in rows]
            ys = [math.log(r[index]) for r in rows]
            mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
            slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
            print(f"{name}: seconds ~ T^{slope:.2f}")


if __name__ == "__main__":
    main()
