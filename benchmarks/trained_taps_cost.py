"""What `trained-taps` costs on 64 samples: one reference pass per sample (fp32), the stored-vs-ours sums
against three layers per slot, the noise floor's second pass (bf16) on K samples, and with a drafter its replay
on the stored fc input and on ours; for the tiny dense and hybrid test targets, speculators-format data
written by the fixture writer (dflash_eval/testing/trainer_data.py), in one process.

    python benchmarks/trained_taps_cost.py [--samples 64] [--tokens 64] [--noise-samples 8]

Prints, per target, the seconds of the whole command (best of --repeat) split into the reference pass with the
evaluation and the noise floor, with and without a (random-weight) drafter, and the same command's `run`-side
equivalent for scale: one tap pass per sample alone (`capture_taps`).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--noise-samples", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()

    import torch

    from dflash_eval.commands.trained_taps import TrainedTapsSettings, trained_taps
    from dflash_eval.core.settings.run_settings import RunOptions
    from dflash_eval.model.target import capture_taps, load_target
    from dflash_eval.pipeline.continuations import Prompt, generate_greedy, prompt_ids
    from dflash_eval.pipeline.prompts import load_prompts
    from dflash_eval.testing import trainer_data as W
    from dflash_eval.testing.testbed import write_random_drafter
    from dflash_eval.testing.tiny import build_test_bed

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        bed = build_test_bed(tmp / "bed")
        prompts = load_prompts("humaneval")[:args.samples]
        for kind in ("qwen3", "qwen3_5_text"):
            t32 = load_target(str(bed[kind]), device="cpu", dtype="float32")
            t16 = load_target(str(bed[kind]), device="cpu", dtype="bfloat16")
            ids = [prompt_ids(t32.tokenizer, Prompt(p.id, p.text), False) for p in prompts]
            continuations = generate_greedy(t32, ids, args.tokens)
            samples = W.samples_from([(torch.tensor(a + b), len(a)) for a, b in zip(ids, continuations)])
            pairs = [W.states(t16, s, [1, 2, 3]) for s in samples]
            data = W.write_speculators(tmp / f"{kind}-data", samples, [a for a, _ in pairs], [b for _, b in pairs])
            drafter = write_random_drafter(bed[kind], tmp / f"{kind}-drafter", "speculators", block_size=8, num_layers=2)
            start = time.perf_counter()
            for s in samples:
                capture_taps(t32, s.ids, [0, 1, 2, 3, 4, 5], keep_hidden=True)
            tap_pass = time.perf_counter() - start
            tokens = sum(len(s.ids) for s in samples)
            print(f"{kind}: {len(samples)} samples, {tokens} tokens; one fp32 tap pass over them alone: {tap_pass:.2f} s")
            for label, extra in (("comparison only", {}), ("with a drafter (B = 8)", {"drafter": str(drafter)})):
                best = None
                for _ in range(args.repeat):
                    taps = TrainedTapsSettings(data=data, target=str(bed[kind]), split="all", limit=args.samples,
                                               noise_samples=args.noise_samples,
                                               layer_ids=None if extra else "2,3,4", **extra)
                    seconds = trained_taps(taps, RunOptions(device="cpu")).result["seconds"]
                    best = seconds if best is None or seconds["total"] < best["total"] else best
                print(f"  {label}: {best['total']:.2f} s (reference pass, comparison"
                      f"{' and evaluation' if extra else ''} {best['reference_and_evaluation']:.2f} s, noise floor on "
                      f"{args.noise_samples} samples {best['noise_floor']:.2f} s)")


if __name__ == "__main__":
    main()
