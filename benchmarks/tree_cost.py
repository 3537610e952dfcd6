"""What tree verification costs (run --tree-budgets, docs/trees.md): every budget at once against the chain-only
drafter pass, and against a live tree loop per budget. One process, ratios side by side.

    python benchmarks/tree_cost.py                     # the figures of docs/benchmarks.md#trees
    python benchmarks/tree_cost.py --smoke             # tiny shapes, seconds: tests/test_benchmarks.py runs it

1. Overhead, at a real vocabulary: the 0.6B-like bed of benchmarks/real_vocab.py (a random-weight 5-layer
   z-lab drafter, B = 16, bf16, over Qwen3-0.6B-like tables: hidden 1024, vocabulary 151,936), every position
   of a random T-token sequence an anchor, the engine's own `replay()`: chain only vs the same call with
   budgets 16..1024, alternated for --rounds rounds, each configuration's fastest kept; CPU time on one
   thread by default (the project's machine is shared), and the peak resident memory of each (VmHWM, reset
   before each replay). The tree's part is split: the per-piece accumulator
   (logsumexp, the kept top entries), the heaps, the rows computed whole. Random weights give flat drafter
   distributions: the heap then spends its budget on depth 1, and every anchor's depth-1 row is computed again
   whole when a budget passes the 65 kept entries (the worst case for that second product; a trained drafter's
   peaked distributions need it far less, `tree.deep_rows` in run.json counts it).
2. Against a live tree loop per budget: a random-weight Qwen3-0.6B-like target (28 layers, the same tables)
   and the same drafter on its taps; the live DDTree-style loop of tests/reference_ddtree.py (one tree-masked
   verify forward of 1 + budget tokens per step, the cache compacted to the accepted path) run once per budget
   over --live-tokens new tokens, against the offline work for all budgets: the greedy continuation
   (generation, which the chain needs too), one tap pass and one replay with every budget; also the walks are
   compared (they must be equal).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests"))

import torch  # noqa: E402

BUDGETS = (16, 32, 64, 128, 256, 512, 1024)
CLOCK = time.process_time


class Split:
    """Seconds inside the tree's parts (class methods wrapped for the run, restored after)."""

    def __init__(self):
        self.total = {"pieces": 0.0, "heaps": 0.0, "whole rows": 0.0}

    def __enter__(self):
        from dflash_eval.model import tree_scoring as TS

        self.saved = (TS.ChunkTree.observe, TS.ChunkTree.finish, TS.exact_rows)
        observe, finish, exact = self.saved
        split = self

        def timed(name, inner):
            def call(*args, **kwargs):
                started = CLOCK()
                try:
                    return inner(*args, **kwargs)
                finally:
                    split.total[name] += CLOCK() - started
            return call

        TS.ChunkTree.observe = timed("pieces", observe)
        TS.ChunkTree.finish = timed("heaps", finish)  # includes the whole rows: subtracted below
        TS.exact_rows = timed("whole rows", exact)
        return self

    def __exit__(self, *_):
        from dflash_eval.model import tree_scoring as TS

        TS.ChunkTree.observe, TS.ChunkTree.finish, TS.exact_rows = self.saved
        self.total["heaps"] -= self.total["whole rows"]


def overhead(shape: str, T: int, budgets, rounds: int) -> dict:
    from real_vocab import build, peak_bytes, reset_peak

    from dflash_eval.core.settings.run_settings import Scoring
    from dflash_eval.model.engine import replay

    spec, drafter = build(shape, "cpu")
    g = torch.Generator().manual_seed(T)
    taps = (torch.randn(T, spec.fc_in_features, generator=g) * 0.5).bfloat16()
    tokens = torch.randint(0, spec.vocab_size - 1, (T,), generator=g)
    best = {"chain": float("inf"), "trees": float("inf")}
    peaks = {"chain": 0.0, "trees": 0.0}
    split, deep, same = None, 0, True
    for _ in range(rounds):
        for name in ("chain", "trees"):
            with Split() as parts:
                reset_peak()
                started = CLOCK()
                result = replay(drafter, taps, tokens, 1, Scoring(T - 1), tree_budgets=budgets if name == "trees" else ())
                seconds = CLOCK() - started
                peaks[name] = max(peaks[name], peak_bytes())
            if seconds < best[name]:
                best[name] = seconds
                if name == "trees":
                    split, deep = dict(parts.total), result.tree.deep_rows
            if name == "chain":
                chain_drafts = result.drafts
            else:
                same = same and result.drafts == chain_drafts
    return {"shape": shape, "T": T, "anchors": T - 2, "budgets": list(budgets), "chain_seconds": best["chain"],
            "trees_seconds": best["trees"], "ratio": best["trees"] / best["chain"], "tree_split": split,
            "deep_rows": deep, "chain_drafts_identical": same, "peak_bytes": peaks}


def qwen3_target(shape: str, layers: int):
    """A random-weight Qwen3 target with the shape's tables (a dflash_eval Target around an HF model)."""
    from types import SimpleNamespace

    from real_vocab import SHAPES
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from dflash_eval.formats.validation import TargetInfo
    from dflash_eval.model.target import Target

    H, heads, kv, hd, inter, V = SHAPES[shape]
    config = Qwen3Config(vocab_size=V, hidden_size=H, intermediate_size=inter, num_hidden_layers=layers,
                         num_attention_heads=heads, num_key_value_heads=kv, head_dim=hd, tie_word_embeddings=True,
                         max_position_embeddings=4096, eos_token_id=None, bos_token_id=None, pad_token_id=None)
    torch.manual_seed(1)
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        model = Qwen3ForCausalLM(config).eval().requires_grad_(False)
    finally:
        torch.set_default_dtype(default)
    model.generation_config.eos_token_id = None
    return Target(model=model, tokenizer=SimpleNamespace(eos_token_id=None), name="bench", path=Path("."),
                  device=torch.device("cpu"), dtype=torch.bfloat16,
                  info=TargetInfo("bench", num_layers=layers, hidden_size=H, vocab_size=V),
                  layers=model.model.layers)


def against_live(shape: str, layers: int, prompt_len: int, new_tokens: int, budgets) -> dict:
    from real_vocab import build
    from reference_ddtree import ddtree_loop

    from dflash_eval.core.settings.run_settings import Scoring
    from dflash_eval.model.engine import replay
    from dflash_eval.model.target import cached_step, capture_taps

    spec, drafter = build(shape, "cpu")
    target = qwen3_target(shape, layers)
    drafter.attach_target(target.embed_tokens, target.lm_head)
    prompt = torch.randint(0, spec.vocab_size - 1, (prompt_len,), generator=torch.Generator().manual_seed(2)).tolist()
    taps_at = list(spec.taps)
    started = CLOCK()
    _, logits, cache = cached_step(target, torch.tensor(prompt), taps_at, None)
    text = [int(logits[-1].argmax())]
    while len(text) < new_tokens:  # greedy generation with the cache: what run does before any drafter
        _, logits, cache = cached_step(target, torch.tensor(text[-1:]), taps_at, cache)
        text.append(int(logits[-1].argmax()))
    generation = CLOCK() - started
    tokens = torch.tensor(prompt + text)
    started = CLOCK()
    capture = capture_taps(target, tokens, taps_at)
    tap_pass = CLOCK() - started
    started = CLOCK()
    offline = replay(drafter, capture.taps, tokens, prompt_len, Scoring(new_tokens), tree_budgets=budgets)
    drafter_pass = CLOCK() - started
    live, equal = {}, True
    for budget in budgets:
        started = CLOCK()
        loop = ddtree_loop(target, drafter, prompt, new_tokens, budget, hybrid=False)
        live[budget] = CLOCK() - started
        walk = offline.tree.walks[budget]
        equal = equal and loop.tokens[prompt_len:] == text and walk["walk_accept_lengths"] == loop.accept_lengths
    offline_total = generation + tap_pass + drafter_pass
    return {"shape": shape, "target_layers": layers, "prompt_len": prompt_len, "new_tokens": new_tokens,
            "budgets": list(budgets), "generation_seconds": generation, "tap_pass_seconds": tap_pass,
            "replay_all_budgets_seconds": drafter_pass, "live_seconds": {str(b): s for b, s in live.items()},
            "live_total_seconds": sum(live.values()), "ratio_live_over_offline": sum(live.values()) / offline_total,
            "ratio_live_over_replay": sum(live.values()) / drafter_pass, "walks_equal": equal}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="tiny shapes, seconds (the test suite)")
    parser.add_argument("--length", type=int, default=512, help="T of the overhead part (default 512)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--live-tokens", type=int, default=12, help="new tokens of the live comparison (default 12)")
    parser.add_argument("--target-layers", type=int, default=28)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--skip-live", action="store_true")
    parser.add_argument("--skip-overhead", action="store_true")
    parser.add_argument("--json", type=Path, default=None, help="write every figure here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    shape = "smoke" if args.smoke else "0.6b"
    T = 40 if args.smoke else args.length
    budgets = (2, 16, 64) if args.smoke else BUDGETS
    layers = 26 if args.smoke else args.target_layers
    out = {"threads": args.threads, "clock": "process CPU time"}
    with torch.inference_mode():
        o = None if args.skip_overhead else overhead(shape, T, budgets, args.rounds)
        out["overhead"] = o
        if o is not None:
            print(f"{shape}, T = {T}, {o['anchors']} anchors, budgets {','.join(map(str, budgets))}: chain only "
                  f"{o['chain_seconds']:.2f} s, all budgets {o['trees_seconds']:.2f} s: ratio {o['ratio']:.3f} "
                  f"(+{100 * (o['ratio'] - 1):.1f}%); tree parts: "
                  + ", ".join(f"{k} {v:.2f} s" for k, v in o["tree_split"].items())
                  + f"; {o['deep_rows']} rows computed whole; chain drafts identical: {o['chain_drafts_identical']}; "
                  f"peak resident memory {o['peak_bytes']['chain'] / 2**30:.2f} GiB chain, "
                  f"{o['peak_bytes']['trees'] / 2**30:.2f} GiB trees")
        if not args.skip_live:
            out["live"] = live = against_live(shape, layers, 8 if args.smoke else 32, 6 if args.smoke else args.live_tokens,
                                              budgets)
            print(f"live tree loop per budget vs offline, {shape} target of {layers} layers, {live['new_tokens']} new "
                  f"tokens: live {live['live_total_seconds']:.2f} s ("
                  + ", ".join(f"{b}: {s:.2f}" for b, s in live["live_seconds"].items())
                  + f"); offline {live['generation_seconds']:.2f} s generation + {live['tap_pass_seconds']:.2f} s tap "
                  f"pass + {live['replay_all_budgets_seconds']:.2f} s replay with every budget: live / offline "
                  f"{live['ratio_live_over_offline']:.1f}x, live / replay {live['ratio_live_over_replay']:.1f}x; "
                  f"walks equal: {live['walks_equal']}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
