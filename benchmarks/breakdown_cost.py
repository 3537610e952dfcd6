"""What the "where acceptance is lost" bookkeeping costs a run: the same `evaluate()` with the breakdown
(core/breakdown.py: per-anchor slot bits in each row, the depth / segment / token-class split of every
drafter's counts in every run.json written, partial ones included) and without it, in one process.

    python benchmarks/breakdown_cost.py [--prompts humaneval] [--limit 12] [--max-new-tokens 128] [--repeat 3]

On the bundled demo pair (dflash_eval/demo/models: a tiny target and two drafters, CPU). "Before" replaces
`breakdown_documents` with one returning nothing and `slot_bits` with one returning an empty list: the run
without the bookkeeping. Continuations are generated once into a temporary cache first, so both sides time
the same work (tap pass, drafter replay, rows, documents). Prints each side's best-of-N seconds, the
bookkeeping's own seconds measured inside the "after" runs (each continuation labelled afresh), the overhead
in percent, and the one-time cost per process of importing Pygments and compiling its lexer.
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
    parser.add_argument("--prompts", default="humaneval")
    parser.add_argument("--limit", type=int, default=12)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    import dflash_eval.pipeline.document as document
    import dflash_eval.pipeline.rows as rows
    from dflash_eval.commands.evaluate import RunOptions, evaluate
    from dflash_eval.core.text_kinds import _labels, _lexer

    models = Path(__file__).resolve().parent.parent / "dflash_eval" / "demo" / "models"
    real_docs, real_bits = document.breakdown_documents, rows.slot_bits
    spent = [0.0]

    def timed(function):
        def wrapper(*a, **k):
            start = time.perf_counter()
            try:
                return function(*a, **k)
            finally:
                spent[0] += time.perf_counter() - start
        return wrapper

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)

        def once(label: str, n: int) -> float:
            options = RunOptions(drafters=[f"{models / 'demo-inhouse'}:inhouse", f"{models / 'demo-reference'}:reference"],
                                 target=str(models / "target"), out=tmp / f"{label}-{n}", prompts=args.prompts,
                                 limit=args.limit, max_new_tokens=args.max_new_tokens, device="cpu",
                                 cache_dir=tmp / "cache", argv=["benchmark"])
            start = time.perf_counter()
            evaluate(options)
            return time.perf_counter() - start

        start = time.perf_counter()  # one-time per process: Pygments imported, its Python lexer compiled
        list(_lexer("python").get_tokens_unprocessed("def f(x):\n    return 'a' + 1  # c\n"))
        warm_up = time.perf_counter() - start
        once("warm", 0)  # continuations into the cache, libraries imported
        before, after, own = [], [], []
        for n in range(args.repeat):
            document.breakdown_documents, rows.slot_bits = (lambda *a, **k: {}), (lambda table: [])
            before.append(once("before", n))
            document.breakdown_documents, rows.slot_bits = timed(real_docs), timed(real_bits)
            spent[0] = 0.0
            _labels.cache_clear()  # every continuation labelled again, as in a fresh run
            after.append(once("after", n))
            own.append(spent[0])
        document.breakdown_documents, rows.slot_bits = real_docs, real_bits
    b, a = min(before), min(after)
    print(f"{args.limit} prompts of {args.prompts}, {args.max_new_tokens} new tokens, 2 drafters, CPU, best of {args.repeat}")
    print(f"run without the breakdown: {b:.2f} s")
    print(f"run with the breakdown:    {a:.2f} s  ({100 * (a - b) / b:+.1f}%)")
    print(f"the bookkeeping itself:    {min(own):.3f} s  ({100 * min(own) / a:.1f}% of the run), timed inside it")
    print(f"once per process:          {warm_up:.3f} s  (Pygments imported and its lexer compiled)")


if __name__ == "__main__":
    main()
