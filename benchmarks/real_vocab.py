"""The drafter pass at a real vocabulary: seconds, peak memory and share of the machine's bf16 peak per anchor
batch, the rule's default among them, and where the time and the FLOPs go. One process, one run.

    python benchmarks/real_vocab.py            # the table of docs/performance.md (see there for its length)
    python benchmarks/real_vocab.py --quick    # 0.6B-like only, T = 256 and 512, four configurations
    python benchmarks/real_vocab.py --smoke    # tiny shapes, seconds: tests/test_benchmarks.py runs it

Shapes (random weights, bf16: cost only): a 5-layer z-lab drafter (4 sliding layers, window 2048, + 1 full),
B = 16, over the tables of a Qwen3-0.6B-like target (hidden 1024, 16 heads, 8 KV heads, MLP 3072, vocab
151,936) and, without --quick, an 8B-like one (hidden 4096, 32 heads, MLP 12288, same vocabulary). Every
position of a random T-token sequence is an anchor (prompt of 1 token, max_new_tokens = T - 1), run by the
engine's own `replay()`.

Per configuration and T: seconds of one replay; peak resident memory of the process (VmHWM, reset before
the replay: weights included); FLOPs counted by torch's FlopCounterMode on the same computation run on the
meta device (every GEMM of the pass, shapes only, so counting costs no time); their share of the bf16 peak
measured in this run (a 4096 x 4096 bf16 matmul, best of 5, before and after); and the split by part, of the
seconds (timed around the modules in the timed run itself) and of the FLOPs: lm_head, MLP, attention
projections, attention products (scores, softmax, values), context (fc and the context keys/values, once per
sequence), other (embeddings, masks, norms, RoPE, the walk). Configurations: each --batches value, the rule's
default (`core/batching.py`), and "before": the whole-logits lm_head at the default of the rule it replaced
(min(1024, ceil(4 H / B), 4 GiB of one chunk's fp32 logits and scores)), the path of the issue's table.
The drafts of every configuration are compared with the default's (bf16 moves near-tie argmaxes).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch

from dflash_eval.core.settings.run_settings import Scoring

SHAPES = {  # hidden, heads, kv heads, head dim, MLP, vocab
    "0.6b": (1024, 16, 8, 128, 3072, 151936),
    "8b": (4096, 32, 8, 128, 12288, 151936),
    "smoke": (64, 4, 2, 16, 128, 1000),
}
PARTS = ("lm_head", "mlp", "projections", "attention products", "context", "other")


def reset_peak() -> None:
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def peak_bytes() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return float("nan")


CLOCK = time.perf_counter  # --clock cpu: time.process_time (with --threads 1 on a shared machine)


def bf16_peak(size: int) -> float:
    """FLOP/s of a size^3 bf16 matmul, best of 5."""
    a, b = torch.randn(size, size).bfloat16(), torch.randn(size, size).bfloat16()
    a @ b
    best = float("inf")
    for _ in range(5):
        started = CLOCK()
        a @ b
        best = min(best, CLOCK() - started)
    return 2 * size ** 3 / best


def old_default(T: int, B: int, V: int, heads: int, H: int) -> int:
    """The rule before issue 41 (model/engine.py `auto_anchor_batch`), for the "before" configuration."""
    fits = 4 * 2 ** 30 // (B * (V * 4 + heads * 4 * T * 2))
    return int(max(1, min(1024, -(-4 * H // B), fits)))


class Parts:
    """Seconds or FLOPs by part, from a clock read when a part starts and ends (nested parts are
    subtracted from their parent; inside the context everything is context)."""

    def __init__(self, clock):
        self.clock, self.stack, self.total = clock, [], dict.fromkeys(PARTS, 0.0)

    @contextmanager
    def part(self, name: str):
        if self.stack and self.stack[-1][0] in ("context", "lm_head"):
            yield
            return
        self.stack.append([name, self.clock(), 0.0])
        try:
            yield
        finally:
            _, start, children = self.stack.pop()
            spent = self.clock() - start
            self.total[name] += spent - children
            if self.stack:
                self.stack[-1][2] += spent

    @contextmanager
    def attached(self, drafter, before: bool = False):
        """The drafter's parts wrapped (instance attributes and module hooks: the code that runs is the
        same), and with `before` the whole-logits lm_head; all undone on exit."""
        if before:
            drafter.greedy_ids = lambda rows: drafter.to_target_ids(drafter.logits(rows).argmax(-1))
        wrapped, handles = [], []

        def wrap(owner, attribute, name):
            inner = getattr(owner, attribute)

            def call(*args, **kwargs):
                with self.part(name):
                    return inner(*args, **kwargs)
            setattr(owner, attribute, call)
            wrapped.append((owner, attribute))

        def hooks(module, name):
            entered = []

            def pre(_m, _a):
                entered.append(self.part(name))
                entered[-1].__enter__()

            def post(_m, _a, _o):
                entered.pop().__exit__(None, None, None)
            handles.extend([module.register_forward_pre_hook(pre), module.register_forward_hook(post)])

        wrap(drafter, "greedy_ids", "lm_head")
        wrap(drafter, "context", "context")
        wrap(drafter, "context_kv", "context")
        for layer in drafter.layers:
            wrap(layer.self_attn, "forward_blocks", "attention products")
            hooks(layer.mlp, "mlp")
            for p in ("q_proj", "k_proj", "v_proj", "o_proj"):
                hooks(getattr(layer.self_attn, p), "projections")
        try:
            yield
        finally:
            for handle in handles:
                handle.remove()
            for owner, attribute in wrapped:
                owner.__dict__.pop(attribute, None)
            drafter.__dict__.pop("greedy_ids", None)

    def split(self, whole: float) -> dict[str, float]:
        out = dict(self.total)
        out["other"] = max(0.0, whole - sum(v for k, v in self.total.items() if k != "other"))
        return out


def build(shape: str, device: str, seed: int = 0):
    from dflash_eval.demo.checkpoint_writer import design_spec
    from dflash_eval.formats.validation import TargetInfo
    from dflash_eval.model.drafter import DFlashDrafter

    H, heads, kv, hd, inter, V = SHAPES[shape]
    info = TargetInfo("bench", num_layers=28, hidden_size=H, vocab_size=V)
    spec = design_spec(info, mask_token_id=V - 1, block_size=16, num_layers=5, num_attention_heads=heads,
                       num_key_value_heads=kv, head_dim=hd, intermediate_size=inter, sliding_window=2048,
                       sliding_layers=4, fmt="zlab", taps=[1, 7, 13, 19, 25])
    torch.manual_seed(seed)
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)  # built in bf16: no fp32 copy of the weights on the way
    try:
        with torch.device(device):
            drafter = DFlashDrafter(spec).to(torch.bfloat16).eval().requires_grad_(False)
            embed = torch.nn.Embedding(V, H).requires_grad_(False)
            head = torch.nn.Linear(H, V, bias=False).requires_grad_(False)
    finally:
        torch.set_default_dtype(default)
    drafter.rotary = type(drafter.rotary)(drafter.rope_config).to(device)  # fp32 frequencies, as load_drafter
    if device != "meta":
        with torch.no_grad():
            for p in [*drafter.parameters(), embed.weight, head.weight]:
                p.normal_(0.0, 0.02) if p.dim() > 1 else p.fill_(1.0)
    return spec, drafter.attach_target(embed, head)


def count_flops(meta_drafter, T: int, A: int, before: bool) -> dict[str, float]:
    """FLOPs by part of the replay's drafter work at T tokens and A anchors per forward, on the meta device."""
    import torch.fx.experimental._config as fx_config
    from torch.utils.flop_counter import FlopCounterMode

    from dflash_eval.model.engine import anchor_chunks

    fx_config.meta_nonzero_assume_all_nonzero = True  # the valid-slot mask: every slot counted, trimmed below
    spec, drafter = meta_drafter
    taps = torch.empty(T, spec.fc_in_features, device="meta", dtype=torch.bfloat16)
    tokens = torch.zeros(T, dtype=torch.long)
    with FlopCounterMode(display=False) as counter:
        parts = Parts(counter.get_total_flops)
        with parts.attached(drafter, before):
            ctx = drafter.context(taps)
            for _, lengths, rows in anchor_chunks(drafter, ctx, tokens, 1, T - 1, anchor_batch=A):
                drafter.greedy_ids(rows[:sum(lengths)])
    return parts.split(float(counter.get_total_flops()))


def run_one(spec_drafter, T: int, A: int, before: bool, seed: int):
    from dflash_eval.model.engine import replay

    spec, drafter = spec_drafter
    g = torch.Generator().manual_seed(seed + T)
    taps = (torch.randn(T, spec.fc_in_features, generator=g) * 0.5).bfloat16()
    tokens = torch.randint(0, spec.vocab_size - 1, (T,), generator=g)
    parts = Parts(CLOCK)
    with parts.attached(drafter, before):
        reset_peak()
        started = CLOCK()
        result = replay(drafter, taps, tokens, 1, Scoring(T - 1, anchor_batch=A))
        seconds = CLOCK() - started
        peak = peak_bytes()
    return seconds, peak, parts.split(seconds), result.drafts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="0.6B-like only, T = 256, 512; batches 32, 64")
    parser.add_argument("--smoke", action="store_true", help="tiny shapes, seconds (the test suite)")
    parser.add_argument("--shapes", default=None, help="comma-separated: 0.6b, 8b (default both; --quick: 0.6b)")
    parser.add_argument("--lengths", default=None, help="T values for 0.6b (default 512,1024,2048)")
    parser.add_argument("--lengths-8b", default="512", help="T values for 8b (default 512)")
    parser.add_argument("--batches", default=None, help="anchors per forward besides the default (default 16,32,64,128,256,512)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=1,
                        help="run the configurations R times round-robin, each keeping its fastest replay")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="cpu: the process's CPU time, for a shared machine (use with --threads 1)")
    parser.add_argument("--json", type=Path, default=None, help="write every figure here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    global CLOCK
    CLOCK = time.process_time if args.clock == "cpu" else time.perf_counter

    from dflash_eval.core.batching import anchor_batch

    if args.smoke:
        plan = {"smoke": [int(x) for x in (args.lengths or "40").split(",")]}
        batches, peak_size = [int(x) for x in (args.batches or "8").split(",")], 256
    else:
        shapes = (args.shapes or ("0.6b" if args.quick else "0.6b,8b")).split(",")
        lengths = {"0.6b": args.lengths or ("256,512" if args.quick else "512,1024,2048"), "8b": args.lengths_8b}
        plan = {s: [int(x) for x in lengths[s].split(",")] for s in shapes}
        batches = [int(x) for x in (args.batches or ("32,64" if args.quick else "16,32,64,128,256,512")).split(",")]
        peak_size = 4096
    peak_before = bf16_peak(peak_size)
    print(f"bf16 peak: {peak_before / 1e9:.0f} GFLOP/s ({peak_size}^3 matmul, best of 5), {args.threads} threads, "
          f"{args.clock} clock", flush=True)
    report = {"threads": args.threads, "clock": args.clock, "rounds": args.rounds, "bf16_peak_flops": peak_before, "shapes": {}}
    for shape, Ts in plan.items():
        H, heads, _, _, _, V = SHAPES[shape]
        live, meta = build(shape, "cpu"), build(shape, "meta")
        B = live[0].block_size
        print(f"\n{shape}-like: hidden {H}, vocab {V}, 5 layers (4 sliding + 1 full), B = {B}, bf16", flush=True)
        rows = report["shapes"][shape] = []
        for T in Ts:
            default = anchor_batch(T, B, heads, "cpu")
            configs = [("default", default, False), *[(str(a), a, False) for a in batches if a != default],
                       ("before", old_default(T, B, V, heads, H), True)]
            reference = None
            # --rounds R: the configurations run R times round-robin and each keeps its fastest replay, so the
            # first one of a length does not alone pay the process's first touches of that length's buffers
            timed = {}
            for _ in range(args.rounds):
                for label, A, before in configs:
                    measured = run_one(live, T, A, before, seed=0)
                    if label not in timed or measured[0] < timed[label][0]:
                        timed[label] = measured
            for label, A, before in configs:
                flops = count_flops(meta, T, A, before)
                seconds, peak, split, drafts = timed[label]
                if reference is None:
                    reference = drafts
                slots = sum(len(d) for d in drafts)
                changed = sum(x != y for d, r in zip(drafts, reference) for x, y in zip(d, r))
                total = sum(flops.values())
                share = total / seconds / peak_before
                row = {"T": T, "config": label, "anchors": A, "seconds": seconds, "peak_bytes": peak,
                       "flops": total, "share_of_peak": share, "seconds_by_part": split, "flops_by_part": flops,
                       "slots": slots, "slots_changed_vs_default": changed}
                rows.append(row)
                name = f"{label} ({A})" if label in ("default", "before") else label
                print(f"T={T:5d} {name:>15}: {seconds:8.2f} s  {peak / 1e9:5.2f} GB  {100 * share:5.1f}% of peak  "
                      f"lm_head {100 * split['lm_head'] / seconds:4.1f}% of the time at "
                      f"{100 * flops['lm_head'] / max(split['lm_head'], 1e-9) / peak_before:4.1f}% of peak  "
                      f"drafts changed vs default {changed}/{slots}", flush=True)
            best = min((r for r in rows if r["T"] == T and r["config"] != "before"), key=lambda r: r["seconds"])
            mine = next(r for r in rows if r["T"] == T and r["config"] == "default")
            old = next(r for r in rows if r["T"] == T and r["config"] == "before")
            print(f"T={T:5d}: default / best ({best['anchors']}) {mine['seconds'] / best['seconds']:.2f}x; "
                  f"before / default {old['seconds'] / mine['seconds']:.2f}x, peak {old['peak_bytes'] / 1e9:.2f} -> "
                  f"{mine['peak_bytes'] / 1e9:.2f} GB", flush=True)
            print("         split of the default's seconds / FLOPs: " + ", ".join(
                f"{p} {100 * mine['seconds_by_part'][p] / mine['seconds']:.0f}% / {100 * mine['flops_by_part'][p] / mine['flops']:.0f}%"
                for p in PARTS), flush=True)
        del live, meta
    report["bf16_peak_flops_after"] = bf16_peak(peak_size)
    print(f"\nbf16 peak after: {report['bf16_peak_flops_after'] / 1e9:.0f} GFLOP/s", flush=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
