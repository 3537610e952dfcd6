"""The offline estimate at temperature > 0 against the live loop, side by side in one process.

    python benchmarks/estimate_bias.py [--samples 8] [--tokens 40]

Builds the tiny test bed (dense qwen3 and hybrid qwen3_5_text targets), trains the fixture drafter on
each target's greedy continuations of the demo prompts (as tests do), then at T = 0.6 and 1.0 and for
both draft policies runs `dflash-eval run` twice on the same 12 prompts: the default offline estimate
(K sampled continuations per prompt, one tap pass each) and `--mode live` (the real loop with rejection
sampling, K seeded samples per prompt). Prints tau of each with its 95% bootstrap interval over prompts,
the bias (estimate - live) and the time of each.
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=40)
    parser.add_argument("--temperatures", default="0.6,1.0")
    parser.add_argument("--targets", default="qwen3,qwen3_5_text")
    parser.add_argument("--demo", action="store_true",
                        help="the bundled demo pair instead (a trained target: peaked distributions, real acceptance)")
    args = parser.parse_args()

    from dflash_eval.commands.evaluate import RunOptions, evaluate
    from dflash_eval.demo.train import fixture_config, greedy_sequences, train_drafter
    from dflash_eval.model.target import load_target
    from dflash_eval.pipeline.prompts import DEMO_PROMPTS
    from dflash_eval.testing.tiny import build_test_bed

    tmp = Path(tempfile.mkdtemp(prefix="dflash-bias-"))
    bed = None if args.demo else build_test_bed(tmp / "bed")
    print(f"{'target':>13} {'T':>4} {'policy':>7} {'estimate [95% CI]':>22} {'live [95% CI]':>22} {'bias':>7} "
          f"{'est s':>6} {'live s':>6}")
    pairs = []
    if args.demo:
        from dflash_eval.demo.build import REFERENCE_NAME, TARGET_NAME

        models = Path(__file__).resolve().parent.parent / "dflash_eval" / "demo" / "models"
        pairs.append(("demo", models / TARGET_NAME, models / REFERENCE_NAME))
    else:
        for kind in args.targets.split(","):
            target = load_target(str(bed[kind]), device="cpu", dtype="float32")
            pairs.append((kind, bed[kind], train_drafter(target, greedy_sequences(target, list(DEMO_PROMPTS), 40),
                                                         fixture_config(block_size=4), tmp / f"{kind}-good")))
    for kind, target_dir, drafter in pairs:
        for temperature in [float(t) for t in args.temperatures.split(",")]:
            for policy in ("sample", "argmax"):
                taus = {}
                for mode in ("trajectory", "live"):
                    began = time.perf_counter()
                    run = evaluate(RunOptions(drafters=[str(drafter)], target=str(target_dir), thinking=False, out=tmp / f"{kind}-{temperature}-{policy}-{mode}",
                                              max_new_tokens=args.tokens, device="cpu", dtype="float32",
                                              cache_dir=tmp / "cache", mode=mode, temperature=temperature,
                                              samples=args.samples, draft_policy=policy)).document
                    m = run["drafters"][0]["metrics"]
                    taus[mode] = (m["tau_macro"], m["tau_macro_ci"], time.perf_counter() - began)
                (e, e_ci, e_s), (lv, l_ci, l_s) = taus["trajectory"], taus["live"]
                print(f"{kind:>13} {temperature:>4} {policy:>7} {e:>8.3f} [{e_ci[0]:.2f}, {e_ci[1]:.2f}] "
                      f"{lv:>8.3f} [{l_ci[0]:.2f}, {l_ci[1]:.2f}] {e - lv:>+7.3f} {e_s:>6.1f} {l_s:>6.1f}", flush=True)


if __name__ == "__main__":
    main()
