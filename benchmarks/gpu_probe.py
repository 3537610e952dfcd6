"""The first GPU check: what decides a real run on a 27B-like hybrid target, measured cold in one process
within 8 minutes on one H100 or H200, so that a 15-minute lease holds a rerun (`benchmarks/gpu_probe.sh` runs
it; docs/gpu.md).

    python -u benchmarks/gpu_probe.py --out DIR [--work DIR] [--rehearse] [--deadline SECONDS]

Parts, in order, each with a time budget that includes its cold costs (Triton/fla autotuning per shape
key, 20-60 s each on a cold cache; `import fla`, ~16 s), checked before the part starts:

  start       versions, the device, threads; `import transformers` and `import fla` timed (cold costs)
  peak        the measured bf16 peak: a 8192^3 bf16 GEMM, best of 10 (never a datasheet figure: H100s
              measure 769-798 TFLOP/s of the 989 their sheet says)
  build       a 27B-like hybrid target (Qwen3.6-27B's shapes, vocabulary 248,320) and a 5-layer B = 16
              drafter with random weights, built on the meta device and materialised on the GPU (never in
              host memory: on the CPU the drafter alone took ~30 s and ~21 GB)
  generation  the run's own generation batch (`pipeline/continuations.generation_batch_size`, the function
              `run` calls) for HumanEval x 2048 new tokens (prompt lengths as `plan` assumes them without a
              tokenizer); its prefill (batch x longest prompt, as generate runs it), the cache filled to
              batch x (longest prompt + 2048 - 8) tokens, then 8 decode steps: ms per step, and
              max_memory_allocated against the card (an out-of-memory is a finding, recorded)
  taps        one tap pass at T = 2550 tokens (warm-up call first: its seconds are the cold cost), FLOPs
              counted by torch's FlopCounterMode (Triton kernels unseen: the Gated-DeltaNet recurrence is
              left out) and their share of the measured peak
  drafter     one drafter pass over every anchor of the same 2550 tokens (the engine's replay), FLOPs and
              share likewise; the fp32 attention scores' GPU path against upcast operands
  kernels     which function each Gated-DeltaNet operation called and how often (`model/kernels.kernel_report`:
              a probe forward counting the calls; the rehearsal fails when the stub fla was never called),
              and the taps with fla against the torch fallback on the same tokens

Everything lands in DIR/probe.json (rewritten after every figure, so a run cut short keeps what it measured;
a watchdog writes it and exits 124 at --deadline); the wrapper adds the log and the Triton cache as one
tarball, so DIR holds three files. The work folder (--work, outside DIR) holds the Triton cache.
`--rehearse`: every part on the CPU at tiny shapes, in bf16, with the stub fla (dflash_eval/testing/stub_fla,
on PYTHONPATH) standing for the real kernels; tests/test_gpu_probe.py runs it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import threading
import time
import traceback
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dflash_eval.core.settings.run_settings import Scoring  # noqa: E402  (this checkout's, after ROOT is on the path)

os.environ.setdefault("HF_HUB_OFFLINE", "1")

# part -> budget in seconds on a cold H100 / H200, cold costs included (the reasoning: docs/gpu.md)
BUDGETS = {"start": 45, "peak": 20, "build": 50, "generation": 170, "taps": 60, "drafter": 40, "kernels": 45}
DEADLINE = 450  # the whole probe; the wrapper's timeout is 480 s (8 minutes)

HYBRID_27B = dict(hidden_size=5120, intermediate_size=17408, num_hidden_layers=64, num_attention_heads=24,
                  num_key_value_heads=4, head_dim=256, linear_num_value_heads=48, linear_num_key_heads=16,
                  linear_key_head_dim=128, linear_value_head_dim=128, vocab_size=248320)
DRAFTER_27B = dict(num_attention_heads=32, num_key_value_heads=8, head_dim=128, intermediate_size=17408)
TINY = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=8, num_attention_heads=4, num_key_value_heads=2,
            head_dim=32, linear_num_value_heads=4, linear_num_key_heads=2, linear_key_head_dim=16,
            linear_value_head_dim=16, vocab_size=1024)
TINY_DRAFTER = dict(num_attention_heads=4, num_key_value_heads=2, head_dim=32, intermediate_size=256)


class Summary:
    """probe.json: every part's status, seconds, budget and figures, rewritten atomically after each change."""

    def __init__(self, out: Path, rehearse: bool, deadline: float):
        self.path, self.started, self.deadline = out / "probe.json", time.monotonic(), deadline
        self.lock = threading.Lock()
        self.current: str | None = None
        self.data = {"probe": "dflash-eval benchmarks/gpu_probe.py", "rehearsal": rehearse,
                     "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                     "deadline_s": deadline, "finished": False, "parts": {}}
        out.mkdir(parents=True, exist_ok=True)
        self.write()

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def write(self) -> None:
        with self.lock:
            self.data["seconds"] = round(self.elapsed(), 1)
            tmp = self.path.with_name(".probe.json.tmp")
            tmp.write_text(json.dumps(self.data, indent=1, default=str))
            tmp.replace(self.path)

    def record(self, key: str, value) -> None:
        self.data["parts"][self.current]["figures"][key] = value
        self.write()
        print(f"[{self.current}] {key}: {json.dumps(value, default=str)}", flush=True)

    @contextmanager
    def part(self, name: str):
        """Run a part unless too little time is left for its budget; a failure is recorded in one line and the
        next part runs (an out-of-memory in one part must not cost the others)."""
        budget = BUDGETS[name]
        entry = {"status": "running", "budget_s": budget, "figures": {}}
        self.data["parts"][name], self.current = entry, name
        left = self.deadline - self.elapsed()
        if left < budget:
            entry["status"] = f"skipped: {left:.0f} s left of the deadline, the part's budget is {budget} s"
            self.write()
            yield None
            return
        print(f"=== {name} (budget {budget} s, {left:.0f} s left) ===", flush=True)
        started = time.monotonic()
        self.write()
        try:
            yield entry
            entry["status"] = "ok"
        except Exception as exc:  # one line in the summary, the traceback in the log
            traceback.print_exc()
            entry["status"] = f"failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:400]
        finally:
            entry["seconds"] = round(time.monotonic() - started, 1)
            if entry["seconds"] > budget:
                entry["over_budget"] = True
            self.write()

    def watchdog(self) -> None:
        """At the deadline: the part running is marked timed out, the summary written, the process ended (124)."""
        def fire():
            if self.current is not None and self.data["parts"][self.current]["status"] == "running":
                self.data["parts"][self.current]["status"] = "timed out (the probe's deadline)"
            self.data["timed_out"] = True
            self.write()
            print(f"gpu_probe: deadline of {self.deadline:.0f} s reached; summary in {self.path}", flush=True)
            os._exit(124)
        timer = threading.Timer(max(0.0, self.deadline - self.elapsed()), fire)
        timer.daemon = True
        timer.start()


class Probe:
    """The parts, sharing the device, the models and the measured peak."""

    def __init__(self, summary: Summary, rehearse: bool):
        self.s, self.rehearse = summary, rehearse
        self.device = self.dtype = self.target = self.drafter = None
        self.peak = None
        self.tokens = self.capture = self.fallback = None

    # -- helpers ----------------------------------------------------------------------------------------

    def sync(self) -> None:
        import torch

        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def timed(self, fn) -> float:
        self.sync()
        started = time.perf_counter()
        fn()
        self.sync()
        return time.perf_counter() - started

    def counted(self, fn) -> int:
        from torch.utils.flop_counter import FlopCounterMode

        with FlopCounterMode(display=False) as counter:
            fn()
        return int(counter.get_total_flops())

    def share(self, flops: int, seconds: float) -> float | None:
        return round(flops / seconds / self.peak, 4) if self.peak else None

    def gib(self, value: int) -> float:
        return round(value / 2 ** 30, 2)

    # -- parts ------------------------------------------------------------------------------------------

    def start(self) -> None:
        import importlib.util

        import torch

        record = self.s.record
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        torch.set_num_threads(max(1, min(cpus, int(os.environ.get("OMP_NUM_THREADS", "8") or 8), 8)))
        record("threads", {"torch": torch.get_num_threads(), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
                           "cpus": cpus})
        started = time.perf_counter()
        import transformers
        record("import transformers, s", round(time.perf_counter() - started, 1))
        fla = importlib.util.find_spec("fla")
        if fla is not None:
            started = time.perf_counter()
            import fla as fla_module
            record("import fla, s", round(time.perf_counter() - started, 1))
        record("versions", {"torch": torch.__version__, "transformers": transformers.__version__,
                            "fla": getattr(fla_module, "__version__", "?") if fla is not None else "absent",
                            "fla_path": str(Path(fla.origin).parent) if fla is not None else None,
                            "cuda": torch.version.cuda, "python": sys.version.split()[0]})
        if self.rehearse:
            from dflash_eval.model import target as target_module

            target_module.refuse_accelerated_on_cpu = lambda *args, **kwargs: None  # the CPU stands for the GPU
            self.device = torch.device("cpu")
        else:
            if not torch.cuda.is_available():
                raise RuntimeError("no CUDA device (--rehearse runs the probe on the CPU)")
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.dtype = torch.bfloat16
        if self.device.type == "cuda":
            props = torch.cuda.get_device_properties(self.device)
            record("device", {"name": props.name, "total_gib": self.gib(props.total_memory),
                              "capability": f"{props.major}.{props.minor}", "multiprocessors": props.multi_processor_count,
                              "visible": torch.cuda.device_count()})
        else:
            record("device", {"name": "cpu (rehearsal: tiny shapes, stub fla; the numbers mean nothing)"})

    def measure_peak(self) -> None:
        import torch

        size = 256 if self.rehearse else 8192
        a = torch.randn(size, size, device=self.device, dtype=self.dtype)
        b = torch.randn(size, size, device=self.device, dtype=self.dtype)
        first = self.timed(lambda: a @ b)  # cuBLAS initialised, the kernel chosen
        best = min(self.timed(lambda: a @ b) for _ in range(10))
        self.peak = 2 * size ** 3 / best
        self.s.record("bf16 GEMM", {"size": size, "tflops": round(self.peak / 1e12, 1), "first_call_s": round(first, 3)})

    def build(self) -> None:
        import torch
        from transformers import AutoModelForCausalLM, Qwen3_5TextConfig

        from dflash_eval.demo.checkpoint_writer import design_spec
        from dflash_eval.formats.validation import TargetInfo
        from dflash_eval.model.drafter import DFlashDrafter
        from dflash_eval.model.kernels import decoder_layers
        from dflash_eval.model.target import Target, input_device

        shape = dict(TINY if self.rehearse else HYBRID_27B)
        vocab, layers = shape.pop("vocab_size"), shape["num_hidden_layers"]
        config = Qwen3_5TextConfig(vocab_size=vocab, max_position_embeddings=32768, tie_word_embeddings=False,
                                   layer_types=["linear_attention" if (i + 1) % 4 else "full_attention"
                                                for i in range(layers)], **shape)
        started = time.perf_counter()
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config, dtype=self.dtype)
        model = model.to_empty(device=self.device)
        with torch.no_grad():
            model.init_weights()  # transformers' own initialisation, on the device (inv_freq recomputed in fp32)
        model.eval().requires_grad_(False)
        self.sync()
        info = TargetInfo("27B-like", layers, shape["hidden_size"], vocab)
        self.target = Target(model=model, tokenizer=None, name=info.name, path=Path("."), device=input_device(model),
                             dtype=self.dtype, info=info, layers=decoder_layers(model))
        params = sum(p.numel() for p in model.parameters())
        self.s.record("target", {"parameters_billion": round(params / 1e9, 2), "layers": layers, "vocab": vocab,
                                 "seconds": round(time.perf_counter() - started, 1), "device": str(self.target.device)})
        spec = design_spec(info, mask_token_id=vocab - 1, block_size=16, num_layers=5, sliding_window=2048,
                           sliding_layers=4, fmt="zlab", **(TINY_DRAFTER if self.rehearse else DRAFTER_27B))
        started = time.perf_counter()
        with torch.device("meta"):
            drafter = DFlashDrafter(spec)
        drafter = drafter.to_empty(device=self.device)
        generator = torch.Generator(device=self.device).manual_seed(0)
        with torch.no_grad():
            for name, p in drafter.named_parameters():
                p.normal_(0.0, 0.08, generator=generator)
                if name.endswith("norm.weight"):
                    p.add_(1.0)
        drafter.to(self.dtype)
        drafter.rotary = type(drafter.rotary)(drafter.rope_config).to(self.device)  # fp32 inv_freq, as load_drafter
        self.drafter = drafter.eval().requires_grad_(False).attach_target(self.target.embed_tokens, self.target.lm_head)
        self.sync()
        self.s.record("drafter", {"parameters_million": round(sum(p.numel() for p in drafter.parameters()) / 1e6),
                                  "block_size": 16, "layers": "4 sliding (2048) + 1 full", "taps": list(spec.taps),
                                  "seconds": round(time.perf_counter() - started, 1)})
        if self.device.type == "cuda":
            self.s.record("allocated after build, GiB", self.gib(torch.cuda.memory_allocated(self.device)))

    def generation(self) -> None:
        import torch

        from dflash_eval.commands.plan_inputs import CHARS_PER_TOKEN, TEMPLATE_TOKENS
        from dflash_eval.model.target import cache_keyword, output_cache
        from dflash_eval.pipeline.continuations import generation_batch_size
        from dflash_eval.pipeline.prompts import load_prompts

        if self.rehearse:
            lengths, new, source = [20, 32], 24, "rehearsal: two short prompts"
        else:
            prompts = load_prompts("humaneval")
            lengths = [-(-sum(len(str(m.get("content", ""))) for m in p.chat()) // CHARS_PER_TOKEN) + TEMPLATE_TOKENS
                       for p in prompts]
            new, source = 2048, (f"HumanEval ({len(lengths)} prompts) as plan assumes them without a tokenizer: 1 token "
                                 f"per {CHARS_PER_TOKEN} characters + {TEMPLATE_TOKENS}")
        batch = generation_batch_size(self.target, lengths, new)
        longest = max(lengths)
        record = self.s.record
        record("plan", {"batch": batch, "longest_prompt": longest, "max_new_tokens": new, "prompt_lengths": source,
                        "cache_tokens": batch * (longest + new - 8)})
        model, vocab = self.target.model, self.target.info.vocab_size
        keyword = cache_keyword(model)
        cuda = self.device.type == "cuda"
        if cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(self.device)
        state = {"cache": None, "peak_phase": None}

        def forward(ids):
            kwargs = {"use_cache": True, "logits_to_keep": 1}
            if state["cache"] is not None:
                kwargs[keyword] = state["cache"]
            out = model(input_ids=ids, **kwargs)
            state["cache"] = output_cache(out)
            return out.logits

        generator = torch.Generator(device=self.device).manual_seed(0)

        def tokens(n):
            return torch.randint(0, vocab - 2, (batch, n), device=self.device, generator=generator)

        try:
            with torch.inference_mode():
                seconds = self.timed(lambda: forward(tokens(longest)))  # generate's prefill (cold: autotune)
                record("prefill", {"tokens": batch * longest, "seconds_cold": round(seconds, 2)})
                filled, chunk, fill_s = longest, longest, 0.0  # the prefill's shape again: no new autotune key
                target_len = longest + new - 8
                while filled < target_len:
                    n = min(chunk, target_len - filled)
                    fill_s += self.timed(lambda n=n: forward(tokens(n)))
                    filled += n
                record("cache filled", {"tokens_per_sequence": filled, "seconds": round(fill_s, 2),
                                        "tokens_per_s": round(batch * (filled - longest) / fill_s) if fill_s else None})
                steps = [self.timed(lambda: forward(tokens(1))) for _ in range(8)]
                record("decode steps", {"first_ms_cold": round(steps[0] * 1e3, 1),
                                        "ms_per_step": round(sum(steps[1:]) / 7 * 1e3, 2),
                                        "tokens_per_s": round(batch * 7 / sum(steps[1:])),
                                        "cache_tokens": batch * (filled + 8)})
        except torch.OutOfMemoryError as exc:
            record("out of memory", {"batch": batch, "error": str(exc).splitlines()[0][:300]})
        finally:
            state["cache"] = None
            if cuda:
                total = torch.cuda.get_device_properties(self.device).total_memory
                peak = torch.cuda.max_memory_allocated(self.device)
                record("memory", {"max_allocated_gib": self.gib(peak), "card_gib": self.gib(total),
                                  "share_of_card": round(peak / total, 3)})
                torch.cuda.empty_cache()

    def taps(self) -> None:
        import torch

        from dflash_eval.model.target import capture_taps

        T = 96 if self.rehearse else 2550
        self.tokens = torch.randint(0, self.target.info.vocab_size - 2, (T,),
                                    generator=torch.Generator().manual_seed(1))
        taps = list(self.drafter.spec.taps)
        cold = self.timed(lambda: capture_taps(self.target, self.tokens, taps))  # autotune for this shape
        flops = self.counted(lambda: capture_taps(self.target, self.tokens, taps))
        self.capture = None
        seconds = self.timed(lambda: setattr(self, "capture", capture_taps(self.target, self.tokens, taps)))
        self.s.record("tap pass", {"tokens": T, "seconds_cold": round(cold, 3), "seconds": round(seconds, 4),
                                   "counted_flops": flops, "share_of_measured_peak": self.share(flops, seconds),
                                   "tokens_per_s": round(T / seconds)})

    def drafter_pass(self) -> None:
        import torch

        from dflash_eval.model import drafter as drafter_module
        from dflash_eval.model.engine import block_length, drafter_anchor_batch, replay

        T = self.tokens.shape[0]
        prompt = T - (64 if self.rehearse else 2048)
        taps = self.capture.taps.to(self.dtype)
        spec = self.drafter.spec

        def once():
            return replay(self.drafter, taps, self.tokens, prompt, Scoring(T - prompt))

        with torch.inference_mode():
            cold = self.timed(once)
            flops = self.counted(once)
            seconds = self.timed(once)
        slots = sum(block_length(a, T, spec.block_size, True) for a in range(prompt, T - 1))
        lm_head = 2 * spec.hidden_size * spec.draft_vocab_size * slots
        self.s.record("drafter pass", {"anchors": T - prompt - 1, "tokens": T, "block_size": spec.block_size,
                                       "anchor_batch": drafter_anchor_batch(self.drafter, T),
                                       "seconds_cold": round(cold, 3), "seconds": round(seconds, 4),
                                       "counted_flops": flops, "lm_head_flops": lm_head,
                                       "share_of_measured_peak": self.share(flops, seconds)})
        # the fp32 attention scores (model/drafter.fp32_products): the device's low-precision GEMM with an fp32
        # output against the upcast operands, on a context-sized product
        g = torch.Generator(device=self.device).manual_seed(2)
        a = torch.randn(spec.num_attention_heads, 256, spec.head_dim, device=self.device, dtype=self.dtype, generator=g)
        b = torch.randn(spec.num_attention_heads, spec.head_dim, T, device=self.device, dtype=self.dtype, generator=g)
        fast = drafter_module.fp32_products(a, b)
        exact = torch.bmm(a.double(), b.double())
        upcast = torch.bmm(a.float(), b.float())
        self.s.record("fp32 scores", {"path": "bmm out_dtype=float32" if self.device.type == "cuda"
                                      and drafter_module.BMM_HAS_OUT_DTYPE else "upcast operands",
                                      "dtype": str(fast.dtype), "max_abs_vs_fp64": float((fast.double() - exact).abs().max()),
                                      "upcast_max_abs_vs_fp64": float((upcast.double() - exact).abs().max())})

    def kernels(self) -> None:

        from dflash_eval.model.kernels import kernel_calls, kernel_report, kernel_summary, torch_fallback_kernels
        from dflash_eval.model.target import capture_taps

        report = kernel_report(self.target.model)  # a probe forward counting the calls (model/kernels.py)
        self.s.record("kernels called per operation (calls over all layers)", kernel_calls(report))
        self.s.record("accelerated", {"operations": kernel_summary(report),
                                      "layer_operations": f"{sum(k.accelerated for k in report)} of {len(report)}"})
        if self.rehearse and not any(k.accelerated for k in report):
            raise RuntimeError(f"the stub fla was never called, so this rehearsal proves nothing about fla: "
                               f"{kernel_calls(report)}")
        taps = list(self.drafter.spec.taps)
        with torch_fallback_kernels(self.target.model):
            self.s.record("kernels called under the torch fallback", kernel_calls(kernel_report(self.target.model)))
            seconds = self.timed(lambda: setattr(self, "fallback", capture_taps(self.target, self.tokens, taps)))
        a, b = self.capture.taps.float(), self.fallback.taps.float()
        self.s.record("taps fla vs torch fallback", {
            "tokens": self.tokens.shape[0], "fallback_seconds": round(seconds, 2),
            "max_rel_diff": float((a - b).abs().max() / b.abs().max().clamp_min(1e-12)),
            "mean_rel_diff": float((a - b).abs().mean() / b.abs().mean().clamp_min(1e-12)),
            "greedy_tokens_equal": f"{int((self.capture.greedy == self.fallback.greedy).sum())}/{len(self.capture.greedy)}"})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rehearse", action="store_true")
    parser.add_argument("--deadline", type=float, default=float(os.environ.get("PROBE_DEADLINE", DEADLINE)))
    args = parser.parse_args(argv)
    if args.rehearse:
        os.environ["DFLASH_EVAL_STUB_FLA_ON_CPU"] = "1"  # the CPU stands for the accelerator
    summary = Summary(args.out, args.rehearse, args.deadline)
    summary.watchdog()
    probe = Probe(summary, args.rehearse)
    needs = {"start": (), "peak": ("start",), "build": ("start",), "generation": ("build",), "taps": ("build",),
             "drafter": ("taps",), "kernels": ("taps",)}
    for name, method in (("start", probe.start), ("peak", probe.measure_peak), ("build", probe.build),
                         ("generation", probe.generation), ("taps", probe.taps), ("drafter", probe.drafter_pass),
                         ("kernels", probe.kernels)):
        missing = [n for n in needs[name] if summary.data["parts"].get(n, {}).get("status") != "ok"]
        if missing:
            summary.data["parts"][name] = {"status": f"not run: needs {', '.join(missing)}", "budget_s": BUDGETS[name],
                                           "figures": {}}
            summary.write()
            continue
        with summary.part(name) as entry:
            if entry is not None:
                method()
    summary.data["finished"] = True
    summary.write()
    failed = [n for n, p in summary.data["parts"].items() if p["status"] != "ok"]
    print(f"gpu_probe: {summary.elapsed():.0f} s; " + (f"not ok: {', '.join(failed)}" if failed else "every part ok")
          + f"; summary in {summary.path}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
