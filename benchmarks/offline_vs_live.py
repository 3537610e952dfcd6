"""Trajectory replay vs the live speculative-decoding loop: cost ratio and tau, side by side, one process.

    python benchmarks/offline_vs_live.py [--kinds qwen3,qwen3_5_text] [--max-new-tokens 64] [--drafters 3]

Builds the tiny test bed, trains fixture drafters on each target, then for every target measures
  offline: one target tap pass per prompt + every drafter replayed with all anchors (what `run` does),
  live:    the step-by-step loop per drafter per prompt (draft, verify with the cache, restore, re-run).
Both modes run on the same prompts, drafters and continuations, so their tau must agree exactly; the
ratio says what the replay saves. On big GPU targets the gap grows: the live loop's cost is dominated
by one target forward per step, the replay's by one forward per prompt.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch

from dflash_eval.core.settings.run_settings import Scoring


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kinds", default="qwen3,qwen3_5_text")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--drafters", type=int, default=3, help="drafters per target (different seeds)")
    args = parser.parse_args()

    from dflash_eval.demo.train import fixture_config, greedy_sequences, train_drafter
    from dflash_eval.formats.checkpoints import checked_spec
    from dflash_eval.formats.files import weight_files
    from dflash_eval.model.drafter import load_drafter
    from dflash_eval.model.engine import replay
    from dflash_eval.model.live import live_generate
    from dflash_eval.model.target import capture_taps, load_target
    from dflash_eval.pipeline.continuations import Prompt, generate_greedy, prompt_ids
    from dflash_eval.pipeline.prompts import DEMO_PROMPTS
    from dflash_eval.testing.tiny import build_test_bed

    torch.set_grad_enabled(False)
    with tempfile.TemporaryDirectory() as tmp:
        bed = build_test_bed(Path(tmp) / "bed")
        print(f"{'target':14s} {'drafters':>8s} {'prompts':>7s} {'offline s':>9s} {'live s':>8s} {'live/offline':>12s}  tau offline = tau live")
        for kind in args.kinds.split(","):
            target = load_target(str(bed[kind]), device="cpu", dtype="float32")
            with torch.enable_grad():
                sequences = greedy_sequences(target, list(DEMO_PROMPTS), args.max_new_tokens)
                paths = [train_drafter(target, sequences, fixture_config(seed=seed, steps=200), Path(tmp) / f"{kind}-{seed}")
                         for seed in range(args.drafters)]
            drafters = []
            for path in paths:
                spec, _ = checked_spec(path, target.info)
                drafters.append(load_drafter(spec, weight_files(path)).attach_target(target.embed_tokens, target.lm_head))
            prompts = [prompt_ids(target.tokenizer, Prompt(str(i), t), False) for i, t in enumerate(DEMO_PROMPTS)]
            continuations = [generate_greedy(target, [ids], args.max_new_tokens)[0] for ids in prompts]
            union = sorted({t for d in drafters for t in d.spec.taps})
            H = target.info.hidden_size

            started = time.perf_counter()
            offline_taus = [[] for _ in drafters]
            for ids, cont in zip(prompts, continuations):
                tokens = torch.tensor(ids + cont)
                taps = capture_taps(target, tokens, union).taps
                for k, drafter in enumerate(drafters):
                    cols = torch.cat([torch.arange(union.index(t) * H, (union.index(t) + 1) * H) for t in drafter.spec.taps])
                    walk = replay(drafter, taps[:, cols], tokens, len(ids), Scoring(args.max_new_tokens)).walk_accept_lengths
                    if walk:
                        offline_taus[k].append(sum(walk) / len(walk))
            offline = time.perf_counter() - started

            started = time.perf_counter()
            live_taus = [[] for _ in drafters]
            for ids in prompts:
                for k, drafter in enumerate(drafters):
                    walk = live_generate(target, drafter, ids, Scoring(args.max_new_tokens)).walk_accept_lengths
                    if walk:
                        live_taus[k].append(sum(walk) / len(walk))
            live = time.perf_counter() - started

            taus = [f"{sum(o) / len(o):.3f}={sum(v) / len(v):.3f}" for o, v in zip(offline_taus, live_taus)]
            agree = all(o == v for o, v in zip(offline_taus, live_taus))
            print(f"{kind:14s} {len(drafters):8d} {len(prompts):7d} {offline:9.2f} {live:8.2f} {live / offline:12.1f}x  "
                  f"{' '.join(taus)} {'(agree)' if agree else '(DISAGREE)'}")


if __name__ == "__main__":
    main()
