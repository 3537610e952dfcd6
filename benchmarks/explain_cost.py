"""What `run --reference` spends explaining the gap (commands/explain.py): the same `evaluate()` with the
explanation (doctor's variants replayed on each prompt's trajectory) and with `--no-explain`, in one process,
side by side, on two cases:

    python benchmarks/explain_cost.py [--case demo|issue|both] [--repeat 3]

- demo: the bundled demo (dflash_eval/demo/models): demo-inhouse against demo-reference as --reference, the
  12 demo prompts x 64 new tokens, thinking off (what `dflash-eval demo` runs);
- issue: issue 48's case: the test bed's tiny Qwen3 target (dflash_eval/testing/tiny.py), a speculators-format
  drafter trained with the anchor in its context against a z-lab-format reference folder trained correctly
  (the fixture trainer, demo/train.py, as tests/test_explain.py builds them), 13 coding prompts x 40 tokens.

Continuations are generated once into a temporary cache first, so both sides time the same work (tap pass,
replays, rows, documents). Prints each side's best-of-N seconds, the extra seconds and the ratio, and the
explanation's own seconds timed inside the runs (add_explanation), with the target passes of each side
(equal: the explanation runs no target pass).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

THIRTEEN = ["Write a Python function that reverses a string.",
            "Write a function fizzbuzz(n) that prints Fizz, Buzz or FizzBuzz.",
            "Implement binary search over a sorted list.", "Write a class Stack with push, pop and peek.",
            "Parse a CSV line into a list of fields.", "Return the n-th Fibonacci number iteratively.",
            "Check whether a string is a palindrome.", "Count the words in a text file.",
            "Merge two sorted lists into one sorted list.", "Write a function that flattens a nested list.",
            "Compute the greatest common divisor of two integers.",
            "Remove duplicates from a list while keeping order.",
            "Write a function that sums the digits of an integer."]


def demo_case(tmp: Path) -> dict:
    models = Path(__file__).resolve().parent.parent / "dflash_eval" / "demo" / "models"
    return {"drafters": [f"{models / 'demo-inhouse'}:demo-inhouse"], "reference": f"{models / 'demo-reference'}:demo-reference",
            "target": str(models / "target"), "prompts": "demo", "max_new_tokens": 64, "thinking": False}


def issue_case(tmp: Path) -> dict:
    """The test bed's qwen3 target, an anchor-bug speculators drafter, a z-lab-format reference (trained here)."""
    from dflash_eval.demo.train import TrainConfig, fixture_config, greedy_sequences, train_drafter
    from dflash_eval.model.target import load_target
    from dflash_eval.pipeline.prompts import DEMO_PROMPTS
    from dflash_eval.testing.tiny import build_test_bed

    bed = build_test_bed(tmp / "bed")
    target = load_target(str(bed["qwen3"]), device="cpu", dtype="float32")
    sequences = greedy_sequences(target, list(DEMO_PROMPTS), 40)
    mine = train_drafter(target, sequences, fixture_config(block_size=4, anchor_in_context=True), tmp / "anchor-bug")
    reference = train_drafter(target, sequences, TrainConfig(block_size=4), tmp / "zlab-ref", "zlab")
    prompts = tmp / "coding.jsonl"
    prompts.write_text("".join(json.dumps({"id": f"code-{i}", "prompt": t}) + "\n" for i, t in enumerate(THIRTEEN)))
    return {"drafters": [f"{mine}:mine"], "reference": str(reference), "target": str(bed["qwen3"]),
            "prompts": str(prompts), "max_new_tokens": 40}


def measure(name: str, case: dict, tmp: Path, repeat: int) -> None:
    import dflash_eval.commands.explain as explain_module
    from dflash_eval.commands.evaluate import RunOptions, evaluate

    real = explain_module.add_explanation  # evaluate imports it from there on each run
    spent = [0.0]

    def timed(*a, **k):
        start = time.perf_counter()
        try:
            return real(*a, **k)
        finally:
            spent[0] += time.perf_counter() - start

    explain_module.add_explanation = timed

    def once(label: str, n: int, explain: bool) -> tuple[float, dict]:
        options = RunOptions(**case, out=tmp / f"{name}-{label}-{n}", device="cpu", cache_dir=tmp / "cache",
                             explain=explain, argv=["benchmark"])
        start = time.perf_counter()
        run = evaluate(options).document
        return time.perf_counter() - start, run

    once("warm", 0, False)  # continuations into the cache, libraries imported
    without, with_, own = [], [], []
    for n in range(repeat):
        seconds, plain = once("plain", n, False)
        without.append(seconds)
        spent[0] = 0.0
        seconds, explained = once("explained", n, True)
        with_.append(seconds)
        own.append(spent[0])
    explain_module.add_explanation = real
    (e,) = explained["explanation"]
    best = next((v for v in e["gap"]["variants"] if v["variant"] == e["gap"]["explained_by"]), None)
    b, a = min(without), min(with_)
    variants = len(e["variants"]) - 1
    prompts = explained["provenance"]["prompts"]["count"]
    print(f"\n{name}: {prompts} prompts x {case['max_new_tokens']} new tokens, 1 drafter + the reference, {variants} "
          f"variants, CPU, best of {repeat}")
    print(f"  run --no-explain: {b:.2f} s; run (explained): {a:.2f} s; extra {a - b:+.2f} s ({a / b:.2f}x)")
    print(f"  the explanation's own seconds inside the runs: {min(own):.2f} s (min), {max(own):.2f} s (max)")
    print(f"  target passes: {plain['provenance']['work']['tap_passes']} without, "
          f"{explained['provenance']['work']['tap_passes']} with")
    print(f"  verdict: {e['verdict']}")
    if best is not None:
        ci = best["share_ci"]
        print(f"  share of the gap: {100 * best['share']:.0f}% [{100 * ci[0]:.0f}%, {100 * ci[1]:.0f}%] over "
              f"{e['gap']['paired_prompts']} of {e['gap']['gap']['total']} prompts")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--case", choices=["demo", "issue", "both"], default="both")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for name, build in (("demo", demo_case), ("issue", issue_case)):
            if args.case in (name, "both"):
                measure(name, build(tmp), tmp, args.repeat)


if __name__ == "__main__":
    main()
