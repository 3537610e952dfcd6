"""A vLLM /metrics dump for `dflash-eval served` without a server: the smoke pass (scripts/smoke.sh) and the
README's commands (tests/test_readme_commands.py) need `before.txt` / `after.txt` files as `curl
localhost:8000/metrics` saves them.

The text is Prometheus' exposition format as prometheus_client writes vLLM 0.33's four spec-decode counters
(`v1/spec_decode/metrics.py`, labels `engine` and `model_name`): a `# HELP` and `# TYPE` line per family,
then `NAME_total{...} VALUE`. The counts come from an offline run's walk at draft length k (drafts = walk
steps, accepted per position = steps reaching that slot), so `served --run` on that run shows a gap of 0:
what a server running the same drafter on the same text would count.

    python -m dflash_eval.testing.served_dump RUN_DIR:DRAFTER --k 3 --model NAME BEFORE AFTER
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

FAMILIES = (("num_drafts", "Number of spec decoding drafts."), ("num_draft_tokens", "Number of draft tokens."),
            ("num_accepted_tokens", "Number of accepted tokens."),
            ("num_accepted_tokens_per_pos", "Accepted tokens per draft position."))


def vllm_metrics(model: str, drafts: int, accepted_per_pos: list[int], engine: str = "0") -> str:
    """vLLM's spec-decode counters after `drafts` drafts of k = len(accepted_per_pos) tokens each."""
    k = len(accepted_per_pos)
    values = {"num_drafts": drafts, "num_draft_tokens": drafts * k, "num_accepted_tokens": sum(accepted_per_pos)}
    labels = f'engine="{engine}",model_name="{model}"'
    lines = []
    for family, doc in FAMILIES:
        name = f"vllm:spec_decode_{family}_total"
        lines += [f"# HELP {name} {doc}", f"# TYPE {name} counter"]
        if family == "num_accepted_tokens_per_pos":
            lines += [f'{name}{{{labels},position="{i}"}} {float(n)!r}' for i, n in enumerate(accepted_per_pos)]
        else:
            lines.append(f"{name}{{{labels}}} {float(values[family])!r}")
    return "\n".join(lines) + "\n"


def counts_at(run_dir: Path, drafter: str, k: int) -> tuple[int, list[int]]:
    """(walk steps, steps reaching slot i for i = 1..k) of `drafter` at draft length k in a finished run:
    its own replay at k (`--draft-lengths`), or the checkpoint's block when k = B - 1."""
    run = json.loads((Path(run_dir) / "run.json").read_text(encoding="utf-8"))
    chosen = next((d for d in run["drafters"] if d["name"] == drafter), None)
    if chosen is None:
        raise SystemExit(f"{run_dir}: no drafter {drafter!r} (drafters: {', '.join(d['name'] for d in run['drafters'])})")
    entries = {e["k"]: e for e in chosen.get("by_draft_length") or []}
    block = chosen["spec"]["block_size"]
    metrics = entries[k]["metrics"] if k in entries else chosen["metrics"] if k == block - 1 else None
    if metrics is None:
        raise SystemExit(f"{run_dir}: {drafter} has no walk at k = {k} (run it with --draft-lengths {k})")
    slots = metrics["slot_counts"]["reach"]
    return int(metrics["steps"]), [int(numerator) for numerator, _ in slots[:k]]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Write two vLLM /metrics dumps (before: zero counters; after: "
                                                 "an offline run's walk at k) for `dflash-eval served`.")
    parser.add_argument("run", help="RUN_DIR:DRAFTER, a finished run of that drafter")
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--k", type=int, required=True, help="draft length (num_speculative_tokens)")
    parser.add_argument("--model", default="served-model", help="the model_name label")
    args = parser.parse_args(argv)
    run_dir, _, drafter = args.run.rpartition(":")
    if not run_dir:
        parser.error("RUN must be RUN_DIR:DRAFTER")
    drafts, accepted = counts_at(Path(run_dir), drafter, args.k)
    args.before.write_text(vllm_metrics(args.model, 0, [0] * args.k), encoding="utf-8")
    args.after.write_text(vllm_metrics(args.model, drafts, accepted), encoding="utf-8")
    print(f"{args.before}, {args.after}: {drafts} drafts of k = {args.k}, accepted per position {accepted}")


if __name__ == "__main__":
    main()
