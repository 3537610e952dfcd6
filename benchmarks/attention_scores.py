"""What fp32 attention scores change (issue 47): the bundled demo pair in bf16, every anchor of HumanEval
continuations drafted twice by the engine's own `replay()`, once with the product's attention (raw scores
in fp32, as FlashAttention, SDPA's kernels, vLLM, SGLang and z-lab's SDPA path keep them) and once with the
arithmetic it replaced (the score GEMM's output in bf16, scaled in bf16, then an fp32 softmax), restated
here. One process, the same trajectories for both.

    python benchmarks/attention_scores.py [--limit 24] [--max-new-tokens 96] [--json FILE]

Per drafter: anchors whose draft differs and draft tokens that differ (of all anchors' drafts, not only
the walk's), the walks' tau both ways, seconds of the replays both ways; and, on the activations of the
first chunk of every layer of every prompt, the relative attention error (Frobenius) of each arithmetic
against an fp64 attention of the same bf16 inputs, and their ratio (min, median, max).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch

from dflash_eval.core.settings.run_settings import Scoring

MODELS = Path(__file__).resolve().parent.parent / "dflash_eval" / "demo" / "models"


def bf16_scores_attention(q, k, v, context, masks, scale):
    """The block attention as `DrafterAttention.forward_blocks` computed it before issue 47: the score
    GEMMs' output in the operands' dtype (bf16) and scaled there, then fp32 for the masked softmax."""
    k_ctx, v_ctx = context
    ctx_mask, block_mask = masks
    C, L = k_ctx.shape[1], q.shape[2]
    scores_ctx = torch.einsum("ahqd,hcd->ahqc", q, k_ctx).mul_(scale)
    scores_ctx.masked_fill_(~ctx_mask[:, None], float("-inf"))
    scores_blk = (q @ k.transpose(-1, -2)).mul_(scale)
    scores_blk.masked_fill_(~block_mask[:, None], float("-inf"))
    scores = torch.empty(*scores_ctx.shape[:-1], C + L, dtype=torch.promote_types(q.dtype, torch.float32),
                         device=q.device)
    scores[..., :C].copy_(scores_ctx)
    scores[..., C:].copy_(scores_blk)
    probs = torch.softmax(scores, dim=-1).to(v.dtype)
    return torch.einsum("ahqc,hcd->ahqd", probs[..., :C], v_ctx) + probs[..., C:] @ v


@contextmanager
def attention(function):
    from dflash_eval.model import drafter as module

    real = module.block_attention
    module.block_attention = function
    try:
        yield
    finally:
        module.block_attention = real


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", default="humaneval")
    parser.add_argument("--limit", type=int, default=24)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    from dflash_eval.formats.checkpoints import checked_spec
    from dflash_eval.formats.files import weight_files
    from dflash_eval.model import drafter as module
    from dflash_eval.model.drafter import load_drafter
    from dflash_eval.model.engine import replay
    from dflash_eval.model.target import capture_taps, load_target
    from dflash_eval.pipeline.continuations import generate_greedy
    from dflash_eval.pipeline.prompts import load_prompts, prompt_ids

    target = load_target(str(MODELS / "target"), device="cpu", dtype="bfloat16")
    drafters = {}
    for name in ("demo-reference", "demo-inhouse"):
        spec, _ = checked_spec(str(MODELS / name), target.info)
        drafters[name] = load_drafter(spec, weight_files(str(MODELS / name)), dtype=torch.bfloat16).attach_target(
            target.embed_tokens, target.lm_head)
    prompts = load_prompts(args.prompts, limit=args.limit)
    ids = [prompt_ids(target.tokenizer, p, False) for p in prompts]
    continuations = generate_greedy(target, ids, args.max_new_tokens, batch_size=8)
    layers = sorted({t for d in drafters.values() for t in d.spec.taps})
    trajectories = []
    for p_ids, cont in zip(ids, continuations):
        tokens = torch.tensor(p_ids + cont)
        trajectories.append((tokens, len(p_ids), len(cont), capture_taps(target, tokens, layers).taps))

    errors: list[tuple[float, float]] = []  # (fp32 scores, bf16 scores) relative error vs fp64, per layer call

    def measuring(q, k, v, context, masks, scale):
        out = module_real(q, k, v, context, masks, scale)
        if len(errors) < 10_000 and q.dtype == torch.bfloat16:
            ref = module_real(q.double(), k.double(), v.double(), tuple(c.double() for c in context), masks, scale)
            old = bf16_scores_attention(q, k, v, context, masks, scale)
            norm = ref.norm()
            errors.append((float((out.double() - ref).norm() / norm), float((old.double() - ref).norm() / norm)))
        return out

    module_real = module.block_attention
    report = {"prompts": f"{len(prompts)} of {args.prompts}", "max_new_tokens": args.max_new_tokens,
              "dtype": "bfloat16", "device": "cpu", "drafters": {}}
    for name, drafter in drafters.items():
        spec = drafter.spec
        results = {}
        seconds = {}
        for label, function in (("fp32 scores", module_real), ("bf16 scores", bf16_scores_attention)):
            with attention(function), torch.inference_mode():
                started = time.perf_counter()
                results[label] = [replay(drafter, taps.to(torch.bfloat16), tokens, p_len, Scoring(n))
                                  for tokens, p_len, n, taps in trajectories]
                seconds[label] = time.perf_counter() - started
        anchors = tokens_total = anchors_changed = tokens_changed = 0
        for new, old in zip(results["fp32 scores"], results["bf16 scores"]):
            assert new.anchors == old.anchors
            for a, b in zip(new.drafts, old.drafts):
                anchors += 1
                tokens_total += len(a)
                anchors_changed += a != b
                tokens_changed += sum(x != y for x, y in zip(a, b))

        def tau(results_):
            steps = sum(len(r.walk_accept_lengths) for r in results_)
            return sum(sum(r.walk_accept_lengths) for r in results_) / steps if steps else None

        report["drafters"][name] = {
            "block_size": spec.block_size, "anchors": anchors, "drafts_changed": anchors_changed,
            "draft_tokens": tokens_total, "draft_tokens_changed": tokens_changed,
            "tau_fp32_scores": tau(results["fp32 scores"]), "tau_bf16_scores": tau(results["bf16 scores"]),
            "seconds_fp32_scores": round(seconds["fp32 scores"], 3), "seconds_bf16_scores": round(seconds["bf16 scores"], 3)}
    with attention(measuring), torch.inference_mode():
        for drafter in drafters.values():
            for tokens, p_len, n, taps in trajectories[:8]:
                replay(drafter, taps.to(torch.bfloat16), tokens, p_len, Scoring(n))
    ratios = [old / new for new, old in errors if new > 0]
    report["attention_error_vs_fp64"] = {
        "calls": len(errors), "fp32_scores_median": statistics.median(e[0] for e in errors),
        "bf16_scores_median": statistics.median(e[1] for e in errors),
        "ratio_min": min(ratios), "ratio_median": statistics.median(ratios), "ratio_max": max(ratios)}

    total_a = sum(d["anchors"] for d in report["drafters"].values())
    total_c = sum(d["drafts_changed"] for d in report["drafters"].values())
    print(f"{report['prompts']} prompts x {args.max_new_tokens} new tokens, demo pair, bf16 on CPU")
    for name, d in report["drafters"].items():
        print(f"  {name:15s} drafts changed {d['drafts_changed']}/{d['anchors']} ({d['drafts_changed'] / d['anchors']:.2%}), "
              f"draft tokens {d['draft_tokens_changed']}/{d['draft_tokens']}; tau {d['tau_fp32_scores']:.3f} "
              f"(fp32 scores) vs {d['tau_bf16_scores']:.3f} (bf16 scores); replay {d['seconds_fp32_scores']:.2f} s "
              f"vs {d['seconds_bf16_scores']:.2f} s")
    print(f"  both: {total_c}/{total_a} drafts changed ({total_c / total_a:.2%})")
    e = report["attention_error_vs_fp64"]
    print(f"  attention error vs fp64 ({e['calls']} layer calls): fp32 scores {e['fp32_scores_median']:.2e}, bf16 scores "
          f"{e['bf16_scores_median']:.2e} (median); bf16/fp32 ratio {e['ratio_min']:.1f}-{e['ratio_max']:.1f}x "
          f"(median {e['ratio_median']:.1f}x)")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
