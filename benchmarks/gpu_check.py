"""GPU checks that CI cannot run (no GPU there), one part per process: `benchmarks/gpu_check.sh` runs each
under its own time budget and prints the summary table even when a part failed or timed out.

    python -u benchmarks/gpu_check.py PART [--out DIR] [--rehearse]

Parts (every figure is written to DIR/PART.json the moment it is measured, so a part killed by its
budget or a lease ending keeps what it had measured):
  bed         the tiny hybrid test bed and a trained drafter, built on the CPU with fla unbound (`import fla`
              fails in this process, so transformers binds the torch fallback: no fla kernel ever sees a
              CPU tensor);
  kernels     on the accelerator: the function each Gated-DeltaNet operation called and how often (a probe
              forward, model/kernels.py; the rehearsal fails when the stub fla was never called), taps fla vs
              torch fallback,
              `evaluate()` in bf16 with fla vs fp32 with the torch fallback on the same prompts (taus,
              continuation agreement), and the replay's walks vs the live loop's in bf16 with fla;
  throughput  the tap pass on random-weight hybrid targets of real shapes (9B-like, then 27B-like);
  phases      a 27B-like hybrid target and a 5-layer B = 16 drafter: generation, tap pass, drafter pass
              (every FLOP counted, the lm_head over all slots included), a live-loop step, modelled speedup;
  summary     the table, from the JSON files and the exit statuses (`--status part=rc ...`).

`--rehearse` runs every part on the CPU at tiny shapes, in bf16 where the GPU runs bf16, with the stub fla
package (dflash_eval/testing/stub_fla, on PYTHONPATH) bound by transformers where the real one is; in the
parts that stand for the accelerator the stub may compute on CPU tensors (DFLASH_EVAL_STUB_FLA_ON_CPU=1),
in `bed` it refuses them as the real kernels would crash on them. `--smoke` = `phases --rehearse` with its
table printed (tests/test_benchmarks.py).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

PARTS = ("bed", "kernels", "throughput", "phases")
BF16_PEAK = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "B200": 2250e12}  # dense bf16, SXM


class Record:
    """One part's figures, rewritten to OUT/PART.json after every figure (atomically) and echoed."""

    def __init__(self, out: Path, part: str, rehearse: bool):
        self.path = out / f"{part}.json"
        self.data = {"part": part, "rehearsal": rehearse, "finished": False, "started": time.time(), "figures": {}}
        out.mkdir(parents=True, exist_ok=True)
        self._write()

    def __call__(self, key: str, value) -> None:
        self.data["figures"][key] = value
        self._write()
        print(f"[{self.data['part']}] {key}: {json.dumps(value, default=str)}", flush=True)

    def finish(self) -> None:
        self.data["finished"] = True
        self.data["seconds"] = round(time.time() - self.data["started"], 1)
        self._write()

    def _write(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=1, default=str))
        tmp.replace(self.path)


def peak_flops(device) -> float | None:
    import torch

    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((v for k, v in BF16_PEAK.items() if k in name), None)


def accelerator(rehearse: bool):
    """(device, dtype) of the parts that stand for the GPU; in the rehearsal the CPU in bf16, with the stub
    kernels allowed on its tensors and load_target's CPU+fla refusal lifted (it is right on a real CPU run)."""
    import torch

    if not rehearse:
        if not torch.cuda.is_available():
            sys.exit("gpu_check: no CUDA device (use --rehearse for the CPU rehearsal)")
        return torch.device("cuda"), torch.bfloat16
    from dflash_eval.model import target as target_module

    target_module.refuse_accelerated_on_cpu = lambda *args, **kwargs: None
    return torch.device("cpu"), torch.bfloat16


def part_bed(out: Path, rehearse: bool, record: Record) -> None:
    sys.modules["fla"] = None  # fla unbound in this process: transformers binds the torch fallback
    from dflash_eval.demo.train import TrainConfig, greedy_sequences, train_drafter
    from dflash_eval.model.kernels import kernel_report
    from dflash_eval.model.target import load_target
    from dflash_eval.pipeline.prompts import DEMO_PROMPTS
    from dflash_eval.testing.tiny import build_test_bed

    work = out / "work"
    bed = build_test_bed(work / "bed")
    record("target", str(bed["qwen3_5_text"]))
    target = load_target(str(bed["qwen3_5_text"]), device="cpu", dtype="float32")
    record("cpu kernels", sorted({k.function for k in kernel_report(target.model)}))
    sequences = greedy_sequences(target, list(DEMO_PROMPTS), 24 if rehearse else 48)
    steps = 30 if rehearse else 150
    started = time.perf_counter()
    drafter = train_drafter(target, sequences, TrainConfig(block_size=4, steps=steps), work / "drafter")
    record("drafter", str(drafter))
    record("training", f"{steps} steps in {time.perf_counter() - started:.1f} s")


def _bed(out: Path) -> dict:
    bed = json.loads((out / "bed.json").read_text())
    if not bed.get("finished"):
        raise SystemExit("gpu_check: the bed part did not finish; nothing to run on")
    return bed["figures"]


def _walks(run_dir: Path) -> dict[str, tuple]:
    rows = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    return {r["prompt_id"]: (r["walk_anchors"], r["walk_accept_lengths"], r["continuation_ids"]) for r in rows}


def part_kernels(out: Path, rehearse: bool, record: Record) -> None:
    import torch

    device, _ = accelerator(rehearse)
    from dflash_eval.commands.evaluate import RunOptions, evaluate
    from dflash_eval.model.kernels import kernel_calls, kernel_report, torch_fallback_kernels
    from dflash_eval.model.target import capture_taps, load_target

    bed = _bed(out)
    target_dir, drafter = bed["target"], bed["drafter"]
    gpu = load_target(target_dir, device=device.type, dtype="bfloat16")
    report = kernel_report(gpu.model)  # what the probe forward saw called, per op (model/kernels.py)
    record("bound kernels", sorted({k.function for k in report}))
    record("kernels called (probe: calls per op over all layers)", kernel_calls(report))
    record("accelerated ops", f"{sum(k.accelerated for k in report)} of {len(report)}")
    if rehearse and not any(k.accelerated for k in report):
        raise SystemExit("gpu_check: the stub fla was never called, so this rehearsal would prove nothing about fla "
                         f"(transformers routes CPU inputs elsewhere?): {kernel_calls(report)}")
    ids = torch.tensor(gpu.tokenizer("def fizzbuzz(n):\n    for i in range(1, n + 1):\n" * 3)["input_ids"])
    taps = list(range(gpu.info.num_layers))
    fla = capture_taps(gpu, ids, taps)
    with torch_fallback_kernels(gpu.model):
        record("kernels called under --kernels torch", kernel_calls(kernel_report(gpu.model)))
        fallback = capture_taps(gpu, ids, taps)
    a, b = fla.taps.float(), fallback.taps.float()
    record("taps fla vs fallback (bf16): max rel diff",
           float((a - b).abs().max() / b.abs().max().clamp_min(1e-12)))
    record("greedy tokens fla vs fallback (bf16)", f"{int((fla.greedy == fallback.greedy).sum())}/{len(fla.greedy)}")
    del gpu

    limit, new = (3, 16) if rehearse else (12, 48)
    runs = {}
    for label, dtype, kernels, mode, cache in (("bf16-fla", "bfloat16", "auto", "trajectory", "bf16"),
                                               ("fp32-torch", "float32", "torch", "trajectory", "fp32"),
                                               ("bf16-fla-live", "bfloat16", "auto", "live", "bf16")):
        run = evaluate(RunOptions(drafters=[drafter], out=out / "work" / f"run-{label}", target=target_dir,
                                  limit=limit, max_new_tokens=new, device=device.type, dtype=dtype, kernels=kernels,
                                  mode=mode, cache_dir=out / "work" / f"cache-{cache}", overwrite=True)).document
        runs[label] = _walks(out / "work" / f"run-{label}")
        metrics = run["drafters"][0]["metrics"]
        sc = run["provenance"]["self_consistency"]
        record(f"tau {label}", {"macro": metrics["tau_macro"], "micro": metrics["tau_micro"],
                                "self_consistency": f"{sc['agree']}/{sc['total']}"})
    bf16, fp32, live = runs["bf16-fla"], runs["fp32-torch"], runs["bf16-fla-live"]
    same = sum(x == y for p in bf16 for x, y in zip(bf16[p][2], fp32[p][2]))
    record("continuations bf16+fla vs fp32+torch", {
        "tokens_agreeing": f"{same}/{sum(max(len(bf16[p][2]), len(fp32[p][2])) for p in bf16)}",
        "prompts_identical": f"{sum(bf16[p][2] == fp32[p][2] for p in bf16)}/{len(bf16)}"})
    record("walks replay vs live (bf16+fla)", {
        "prompts_equal": f"{sum(bf16[p][:2] == live[p][:2] for p in bf16)}/{len(bf16)}",
        "live_continuation_equals_generation": f"{sum(bf16[p][2] == live[p][2] for p in bf16)}/{len(bf16)}"})


def summary(out: Path, statuses: dict[str, int]) -> int:
    """The table, from what each part wrote; a part that failed shows its status and what it had measured."""
    print(f"\n=== gpu_check summary ({out}) ===", flush=True)
    failed = 0
    for part in PARTS:
        file = out / f"{part}.json"
        rc = statuses.get(part)
        data = json.loads(file.read_text()) if file.exists() else None
        if data is None:
            state = "not run" if rc is None else f"failed before writing (exit {rc})"
        elif data.get("finished") and rc in (0, None):
            state = f"ok, {data.get('seconds', '?')} s"
        else:
            state = "timed out" if rc in (124, 137) else f"failed (exit {rc})"
        failed += not state.startswith("ok")
        print(f"{part:<11} {state}" + (" [rehearsal: CPU, tiny shapes, stub fla; the numbers mean nothing]"
                                        if data and data.get("rehearsal") else ""))
        for key, value in (data or {}).get("figures", {}).items():
            print(f"    {key:<44} {value if isinstance(value, str) else json.dumps(value)}")
    return failed


def main(argv: list[str]) -> int:
    args = list(argv)
    if "--out" in args:
        out = Path(args[args.index("--out") + 1])
    else:
        import tempfile

        out = Path(tempfile.mkdtemp(prefix="gpu-check-")) if "--smoke" in args else ROOT / "benchmarks" / "out"
    rehearse = "--rehearse" in args or "--smoke" in args
    if rehearse:
        os.environ.setdefault("OMP_NUM_THREADS", "2")
    part = "phases" if "--smoke" in args else (args[0] if args and not args[0].startswith("-") else "")
    if part == "summary":
        statuses = dict(s.split("=") for s in args[args.index("--status") + 1:] if "=" in s) if "--status" in args else {}
        return 1 if summary(out, {k: int(v) for k, v in statuses.items()}) else 0
    if part not in PARTS:
        print(__doc__)
        return 2
    if rehearse and part != "bed":
        os.environ["DFLASH_EVAL_STUB_FLA_ON_CPU"] = "1"  # here the CPU stands for the accelerator
    record = Record(out, part, rehearse)
    if part in ("bed", "kernels"):
        {"bed": part_bed, "kernels": part_kernels}[part](out, rehearse, record)
    else:
        import gpu_check_shapes

        getattr(gpu_check_shapes, f"part_{part}")(rehearse, record, accelerator, peak_flops)
    record.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
