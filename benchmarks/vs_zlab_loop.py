"""dflash-eval against z-lab's own `dflash_generate` loop, side by side in one process.

    python benchmarks/vs_zlab_loop.py [--lengths 64,256,1024] [--prompts 12] [--drafters 3]

Needs the conformance extra (`bash scripts/bootstrap.sh test` installs z-lab's dflash==0.1.0). Builds the
tiny dense test bed, trains `--drafters` z-lab-format drafters (full attention, B = 8, different seeds),
then for each continuation length, on the same prompts and drafters:
  z-lab:   its `dflash_generate` at temperature 0 for every drafter and prompt (the target runs every step);
  cold:    dflash-eval's stages from scratch: generation, one tap pass per prompt, every drafter replayed,
           rows and the run document;
  warm:    the same with the continuations cached (what a second run, or `track`, pays).
Each phase is timed; the ratios are the goals of issue 15: each further drafter on a cached trajectory
versus z-lab's loop for that drafter, and a cold run of all drafters versus z-lab's loop for all of them.
The walks are compared too (they must be equal: the conformance tests prove it at every commit).
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
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", default="64,256,1024")
    parser.add_argument("--prompts", type=int, default=12)
    parser.add_argument("--drafters", type=int, default=3)
    args = parser.parse_args()

    import reference_code as ref  # tests/reference_code.py: z-lab's loop, its CUDA timer swapped for CPU
    import torch

    from dflash_eval.core.progress import Reporter
    from dflash_eval.core.settings.run_settings import RunOptions
    from dflash_eval.demo.tiny_tokenizer import train_tokenizer
    from dflash_eval.demo.train import TrainConfig, greedy_sequences, train_drafter
    from dflash_eval.model.target import load_target, stop_token_ids
    from dflash_eval.pipeline.continuations import continuations_for
    from dflash_eval.pipeline.document import assemble
    from dflash_eval.pipeline.inputs import prepare_inputs
    from dflash_eval.pipeline.prompts import DEMO_PROMPTS
    from dflash_eval.pipeline.rows import finish_rows, piece_decoder, trajectory_row
    from dflash_eval.pipeline.scoring import load_drafters, score_on_trajectory
    from dflash_eval.pipeline.trajectories import capture_trajectory
    from dflash_eval.testing.tiny import build_target

    torch.set_num_threads(max(1, torch.get_num_threads()))
    tmp = Path(tempfile.mkdtemp(prefix="dflash-bench-"))
    tokenizer = train_tokenizer(tmp / "tokenizer")
    target_dir = build_target("qwen3", tmp / "qwen3", tokenizer)
    target = load_target(str(target_dir), device="cpu", dtype="float32")
    sequences = greedy_sequences(target, list(DEMO_PROMPTS), 48)
    drafter_dirs = [train_drafter(target, sequences, TrainConfig(block_size=8, seed=s, steps=150), tmp / f"d{s}", "zlab")
                    for s in range(args.drafters)]
    zlab_models = [ref.zlab_drafter(d) for d in drafter_dirs]
    stops = stop_token_ids(target)
    print(f"tiny qwen3 target, {args.drafters} z-lab-format drafters (B = 8), {args.prompts} prompts, "
          f"{torch.get_num_threads()} threads")
    header = (f"{'new':>5} {'z-lab/drafter':>13} {'cold all':>9} {'gen':>6} {'taps':>6} {'drafters':>9} {'rows+doc':>8} "
              f"{'warm 1':>7} {'warm all':>8} {'next drafter':>12} {'z-lab/next':>10} {'z-lab/cold':>10} {'equal':>5}")
    print(header)
    for max_new in [int(x) for x in args.lengths.split(",")]:
        options = RunOptions(drafters=[str(d) for d in drafter_dirs], out=tmp / "unused", target=str(target_dir),
                             limit=args.prompts, max_new_tokens=max_new, thinking=False, device="cpu",
                             dtype="float32", cache_dir=tmp / f"cache-{max_new}")
        inputs = prepare_inputs(options)
        ids = inputs.prompt_ids()

        # z-lab's loop, every drafter on every prompt
        started = time.perf_counter()
        zlab_walks = {}
        for d, model in zip(drafter_dirs, zlab_models):
            for prompt in inputs.prompts:
                _, lengths = ref.zlab_generate(target.model, d, ids[prompt.id], max_new, stops, drafter=model)
                zlab_walks[(d.name, prompt.id)] = lengths
        zlab_seconds = time.perf_counter() - started

        def dflash_eval(drafter_subset, cold: bool, options=options, inputs=inputs, ids=ids):
            phases = {}
            t0 = time.perf_counter()
            conts, _ = continuations_for(target, inputs.prompts, ids, options, False, None, Reporter())
            phases["gen"] = time.perf_counter() - t0
            entries = [e for e in inputs.entries if e.name in drafter_subset]
            drafters = load_drafters(entries, target)
            layers = sorted({t for dr in drafters.values() for t in dr.spec.taps})
            decode = piece_decoder(target.tokenizer)
            phases["taps"] = phases["drafters"] = phases["rows"] = 0.0
            rows, walks = [], {}
            for prompt in inputs.prompts:
                t0 = time.perf_counter()
                trajectory = capture_trajectory(target, prompt, ids[prompt.id], conts[prompt.id], layers)
                phases["taps"] += time.perf_counter() - t0
                for name, drafter in drafters.items():
                    t0 = time.perf_counter()
                    scored = score_on_trajectory(drafter, trajectory, options)
                    phases["drafters"] += time.perf_counter() - t0
                    walks[(Path(drafter.spec.path).name, prompt.id)] = scored.walk_accept_lengths
                    t0 = time.perf_counter()
                    rows.append(trajectory_row(prompt, name, drafter.spec.block_size, scored, trajectory.prompt_len,
                                               conts[prompt.id], trajectory.self_consistency()))
                    phases["rows"] += time.perf_counter() - t0
            t0 = time.perf_counter()
            finish_rows(rows, decode)
            assemble(options, target, entries, drafters, rows, inputs.prompts, False, [], inputs.fingerprints, {},
                     {n: dr.spec.block_size for n, dr in drafters.items()}, generated_count=0,
                     evaluated_count=len(inputs.prompts))
            phases["rows"] += time.perf_counter() - t0
            return sum(phases.values()), phases, walks

        names = [e.name for e in inputs.entries]
        cold_all, cold_phases, walks = dflash_eval(set(names), cold=True)
        warm_one, _, _ = dflash_eval({names[0]}, cold=False)
        warm_all, warm_phases, _ = dflash_eval(set(names), cold=False)
        next_drafter = (warm_all - warm_one) / max(1, len(names) - 1)
        per_drafter = zlab_seconds / len(names)
        equal = all(walks[key] == zlab_walks[key] for key in zlab_walks)
        print(f"{max_new:>5} {per_drafter:>12.2f}s {cold_all:>8.2f}s {cold_phases['gen']:>5.1f}s {cold_phases['taps']:>5.1f}s "
              f"{cold_phases['drafters']:>8.2f}s {cold_phases['rows']:>7.2f}s {warm_one:>6.2f}s {warm_all:>7.2f}s "
              f"{next_drafter:>11.2f}s {per_drafter / next_drafter:>9.1f}x {zlab_seconds / cold_all:>9.1f}x {str(equal):>5}",
              flush=True)


if __name__ == "__main__":
    main()
