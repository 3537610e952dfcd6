"""Ready for a GPU it has never run on, proven on CPU (issue 25): the device read from the input embedding,
torchrun ranks on their own GPU with nccl bound to it and a timeout, doctor's trajectories kept in host
memory between variants, anchor chunks from the shapes, no deprecation warnings from our own calls to
transformers, the stub fla package bound where the real one is, and `gpu_check.sh --rehearse` end to end."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

# transformers' internals: also run on the oldest supported transformers (scripts/compat.sh)
pytestmark = pytest.mark.compat

ROOT = Path(__file__).resolve().parents[1]
STUB = ROOT / "dflash_eval" / "testing" / "stub_fla"


def test_a_device_map_that_fits_one_device_puts_inputs_where_the_embedding_is(test_bed):
    """accelerate sets no hf_device_map when the whole target lands on one device; the inputs, taps and
    drafters must still go there (not to the CPU). The meta device plays the one accelerator."""
    from dflash_eval.model.target import load_target

    target = load_target(str(test_bed["qwen3"]), device="cpu", dtype="float32", device_map={"": "meta"})
    assert not getattr(target.model, "hf_device_map", None)
    assert target.device == target.embed_tokens.weight.device == torch.device("meta")


def test_the_device_comes_from_the_embedding_or_accelerates_record_of_it(test_bed):
    from transformers import AutoModelForCausalLM

    from dflash_eval.model.target import input_device

    model = AutoModelForCausalLM.from_pretrained(test_bed["qwen3"])
    assert input_device(model) == torch.device("cpu")
    model.to("meta")  # offloaded weights sit on meta; the hook's execution device is in hf_device_map
    model.hf_device_map = {"model.embed_tokens": 1, "model.layers": 0, "lm_head": "disk"}
    assert input_device(model) == torch.device("cuda:1")
    model.hf_device_map = {"model": "disk", "lm_head": 0}
    assert input_device(model) == torch.device("cpu")


def test_weights_load_straight_onto_their_device(test_bed, monkeypatch):
    """No whole-model copy staged in host RAM first (55 GB per torchrun rank on a 27B target): transformers
    is asked to place every weight on the run's device while it reads the file."""
    from transformers import AutoModelForCausalLM

    from dflash_eval.model.target import load_target

    asked = []
    real = AutoModelForCausalLM.from_pretrained.__func__

    def recording(cls, *args, **kwargs):
        asked.append(kwargs.get("device_map"))
        return real(cls, *args, **kwargs)

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", classmethod(recording))
    load_target(str(test_bed["qwen3"]), device="cpu", dtype="float32")
    assert asked == [{"": torch.device("cpu")}]


def test_torchrun_ranks_run_on_their_own_gpu_with_nccl_bound_and_the_timeout(monkeypatch, tmp_path):
    """Patched torch.cuda (two GPUs) and init_process_group: rank 1 of 2 runs on cuda:1 with nccl bound to
    it (device_id) and --dist-timeout; a fixed cuda:N under torchrun is refused by name."""
    import torch.distributed as dist

    from dflash_eval.commands import distributed
    from dflash_eval.core.errors import InputError
    from dflash_eval.core.settings.run_settings import RunOptions

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: None)
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "1")
    seen = {}

    class Stop(Exception):
        pass

    def init(backend, **kwargs):
        seen.update(backend=backend, **kwargs)
        raise Stop

    monkeypatch.setattr(dist, "init_process_group", init)
    for device in ("auto", "cuda"):
        with pytest.raises(Stop):
            distributed.evaluate_launched(RunOptions(drafters=[], out=tmp_path / "o", device=device, dist_timeout=90))
        assert seen["backend"] == "nccl" and seen["device_id"] == torch.device("cuda:1")
        assert seen["timeout"].total_seconds() == 90
    with pytest.raises(InputError, match="would put every rank on one GPU"):
        distributed.evaluate_launched(RunOptions(drafters=[], out=tmp_path / "o", device="cuda:0"))


@pytest.mark.slow
def test_a_failing_torchrun_rank_ends_the_job_at_once_with_its_error(test_bed, drafter_dirs, tmp_path):
    """Two gloo ranks; rank 1's shard folder is a foreign folder, so rank 1 refuses it. Rank 0 finishes its
    shard and waits at the barrier: the job must end right away with rank 1's one-line error, not after
    the barrier's timeout."""
    out = tmp_path / "dp"
    (Path(f"{out}.shards") / "rank-1").mkdir(parents=True)
    (Path(f"{out}.shards") / "rank-1" / "mine.txt").write_text("not a run")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", "29533",
               "-m", "dflash_eval", "run", "-d", str(drafter_dirs["zlab"]), "--target", str(test_bed["qwen3"]),
               "--max-new-tokens", "8", "--limit", "4", "--cache-dir", str(tmp_path / "cache"), "--no-html",
               "--device", "cpu", "--dist-timeout", "900", "--out", str(out)]
    started = time.monotonic()
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode != 0
    assert "is not a dflash-eval run folder" in done.stdout + done.stderr
    assert time.monotonic() - started < 300  # far below the 900 s the barrier would wait
    assert not out.exists()


def test_doctor_keeps_every_trajectory_in_host_memory_between_variants(trained, tmp_path, monkeypatch):
    """doctor holds the taps of every prompt through all variants: they wait in host memory
    (OffloadedLayers) and reach the drafter's device one layer at a time, for the base trajectories and the
    context variants' alike."""
    from dflash_eval.core.settings.run_settings import RunOptions
    from dflash_eval.doctor.commands import doctor
    from dflash_eval.pipeline.trajectories import OffloadedLayers

    held = []
    real = doctor.evaluate_variants

    def recording(drafter, variants, trajectories, *args, **kwargs):
        held.extend(trajectories)
        return real(drafter, variants, trajectories, *args, **kwargs)

    monkeypatch.setattr(doctor, "evaluate_variants", recording)
    options = RunOptions(drafters=[str(trained["qwen3"]["good"])], out=tmp_path / "doc", limit=2, max_new_tokens=12,
                         target=str(trained["qwen3"]["target"]), cache_dir=tmp_path / "cache", device="cpu")
    doctor.run_doctor(options)
    assert held and all(isinstance(t.layers, OffloadedLayers) for t in held)
    assert all(x.device.type == "cpu" for t in held for x in t.layers.stored.values())
    # every variant's continuations follow the run's whole-set generation plan (doctor's --limit 2 prompts
    # with their companions of the full demo set): `run` (thinking flipped too) finds them all in the cache
    from dflash_eval.core.progress import Reporter
    from dflash_eval.model.target import load_target
    from dflash_eval.pipeline.continuations import continuations_for, template_ids
    from dflash_eval.pipeline.prompts import load_prompts

    target = load_target(str(trained["qwen3"]["target"]), device="cpu", dtype="float32")
    planned = load_prompts(options.inputs.prompts, options.inputs.limit)  # the run's plan: its prompts
    prompts = planned[:2]
    for thinking, template in ((False, "chat"), (True, "chat"), (False, "raw")):
        ids = {p.id: template_ids(target.tokenizer, p, thinking, template) for p in prompts}
        _, generated = continuations_for(target, prompts, ids, options, thinking, None, Reporter(), template=template,
                                         universe=planned)
        assert generated == 0, (thinking, template)


def test_offloaded_layers_are_handed_out_on_the_accelerator_and_stored_in_host_memory():
    from dflash_eval.pipeline.trajectories import OffloadedLayers

    layers = OffloadedLayers({3: torch.ones(5, 4), 7: torch.zeros(5, 4)}, torch.device("meta"))
    assert layers[3].device.type == "meta" and layers.stored[3].device.type == "cpu"
    assert sorted(layers) == [3, 7] and len(layers) == 2


def test_offloaded_layers_stay_pageable_when_cuda_is_there(monkeypatch):
    """Pinned host blocks are rounded up to a power of two (a 22-26 MB layer of a 27B trajectory takes 32
    MiB: ~184 GiB instead of 126.5 for doctor on HumanEval x 2048): the layers stay in pageable memory,
    exactly their bytes, with CUDA present (patched: nothing may be pinned on this machine)."""
    from dflash_eval.pipeline.trajectories import OffloadedLayers

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    layers = OffloadedLayers({3: torch.ones(5, 4), 7: torch.zeros(5, 4)}, torch.device("meta"))
    assert not any(x.is_pinned() for x in layers.stored.values())
    assert sum(x.nbytes for x in layers.stored.values()) == 2 * 5 * 4 * 4


def test_doctor_host_figure_and_the_option_that_fits():
    """Hand-computed: 3 prompts of 10, 20 and 30 tokens, 4 layers of H = 2 in bf16, a context variant of 2
    layers at 12, 22 and 32 tokens."""
    from dflash_eval.pipeline.trajectories import doctor_host_bytes, doctor_host_fix

    base, context = [10, 20, 30], [12, 22, 32]
    assert doctor_host_bytes(60, 4, 66, 2, 2) == (60 * 4 + 66 * 2) * 2 * 2 == 1488
    assert doctor_host_fix(base, context, 4, 2, 2, 1488) is None
    assert doctor_host_fix(base, context, 4, 2, 2, 1487) == "--no-context-variants"  # 960 bytes without them
    assert doctor_host_fix(base, context, 4, 2, 2, 900) == "--limit 2"  # (30 x 4 + 34 x 2) x 4 = 752
    assert doctor_host_fix(base, context, 4, 2, 2, 100) is None  # no single option: not even one prompt fits
    assert doctor_host_fix([10, 10, 20, 20], [], 4, 2, 2, 400, samples=2) == "--limit 1"  # 2 samples per prompt


def test_doctor_refuses_trajectories_past_the_machines_memory_by_name(trained, tmp_path, monkeypatch):
    """Before its target pass, doctor compares its trajectories' host bytes (the figure `plan --doctor`
    shows) with the memory available, and refuses by name, naming the option that fits."""
    from dflash_eval.core.errors import InputError
    from dflash_eval.core.settings.run_settings import RunOptions
    from dflash_eval.doctor.commands import doctor
    from dflash_eval.pipeline import trajectories

    options = RunOptions(drafters=[str(trained["qwen3"]["good"])], out=tmp_path / "doc", limit=2, max_new_tokens=12,
                         target=str(trained["qwen3"]["target"]), cache_dir=tmp_path / "cache", device="cpu")
    captured = []
    monkeypatch.setattr(trajectories, "capture_trajectory", lambda *a, **k: captured.append(1))
    monkeypatch.setattr(trajectories, "host_memory", lambda: (2 ** 40, 1000))
    with pytest.raises(InputError, match=r"doctor's trajectories need .* GiB of host memory .* no single option fits"):
        doctor.run_doctor(options)
    assert not captured and not (tmp_path / "doc").exists()


@pytest.mark.slow
def test_no_deprecation_warning_from_our_calls_to_transformers(test_bed, drafter_dirs, tmp_path):
    """Warnings as errors, transformers' logger at warning level, in a fresh process (transformers warns
    once per process): the live loop, a chunked tap pass, greedy and sampled generation, dense and hybrid."""
    script = f"""
import logging, warnings
warnings.simplefilter("error")
import torch
from transformers.utils import logging as hf_logging
hf_logging.set_verbosity_warning()
messages = []
class Keep(logging.Handler):
    def emit(self, record):
        messages.append(record.getMessage())
hf_logging.get_logger("transformers").addHandler(Keep())
from dflash_eval.core.settings.run_settings import Scoring
from dflash_eval.model.live import live_generate
from dflash_eval.model.sampling import Sampling, generator_for
from dflash_eval.model.target import capture_taps, load_target
from dflash_eval.pipeline.continuations import generate_greedy, generate_sampled, generate_sampled_batch
for kind in ("qwen3", "qwen3_5_text"):
    target = load_target({str(test_bed['qwen3'].parent)!r} + "/" + kind, device="cpu", dtype="float32")
    ids = target.tokenizer("def add(a, b):\\n    return a + b\\n")["input_ids"]
    capture_taps(target, torch.tensor(ids), [1, 2], sequence_chunk=5)
    generate_greedy(target, [ids, ids[:5]], 6, batch_size=2)
    s = Sampling(temperature=1.0)
    generate_sampled(target, ids, 6, s, generator_for(0, "a", 0))
    generate_sampled_batch(target, [ids, ids[:5]], 6, s, [generator_for(0, "a", 0), generator_for(0, "b", 0)])
    if kind == "qwen3":
        from dflash_eval.formats.checkpoints import checked_spec
        from dflash_eval.formats.files import weight_files
        from dflash_eval.model.drafter import load_drafter
        spec, _ = checked_spec({str(drafter_dirs['zlab'])!r}, target.info)
        drafter = load_drafter(spec, weight_files({str(drafter_dirs['zlab'])!r})).attach_target(target.embed_tokens, target.lm_head)
        live_generate(target, drafter, ids, Scoring(12))
        live_generate(target, drafter, ids, Scoring(12), sampling=s, generator=generator_for(0, "a", 0))
bad = [m for m in messages if "deprecat" in m.lower()]
assert not bad, bad
print("clean")
"""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "warning"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0 and "clean" in done.stdout, done.stderr[-3000:]


STUB_SCRIPT = """
import sys, torch
from dflash_eval.model.kernels import kernel_report, kernel_summary, torch_fallback_kernels
from dflash_eval.model.target import capture_taps, load_target
import fla.ops.gated_delta_rule as stub
for kind in ("qwen3_5_text", "qwen3_next"):
    target = load_target(sys.argv[1] + "/" + kind, device="cpu", dtype="float32", allow_accelerated_on_cpu=True)
    bound = kernel_summary(kernel_report(target.model))
    assert bound["chunk_gated_delta_rule"] == "fla.ops.gated_delta_rule.chunk_gated_delta_rule", bound
    ids = torch.tensor(target.tokenizer("def add(a, b):\\n    return a + b\\n" * 3)["input_ids"])
    try:
        fla = capture_taps(target, ids, [1, 3, 5])
        step = capture_taps(target, ids, [1, 3, 5], sequence_chunk=1)  # the recurrent (decode) kernel
    except RuntimeError as exc:
        print("refused:", exc); sys.exit(3)
    # the probe's decode step reached the recurrent kernel (a CPU-refusing stub stops it at the prefill)
    assert bound["recurrent_gated_delta_rule"] == "fla.ops.gated_delta_rule.fused_recurrent_gated_delta_rule", bound
    with torch_fallback_kernels(target.model):
        ref = capture_taps(target, ids, [1, 3, 5])
    torch.testing.assert_close(fla.taps, ref.taps, rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(step.taps, ref.taps, rtol=1e-3, atol=1e-3)
    assert torch.equal(fla.greedy, ref.greedy)
assert stub.CALLS["chunk_gated_delta_rule"] > 0 and stub.CALLS["fused_recurrent_gated_delta_rule"] > 0, stub.CALLS
print("stub ok")
"""


def _stub_env(**extra) -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
            "PYTHONPATH": f"{STUB}:{os.environ.get('PYTHONPATH', '')}", **extra}


@pytest.mark.slow
def test_the_stub_fla_is_bound_where_the_real_one_is_and_computes_the_fallbacks_numbers(test_bed):
    """transformers binds the stub's functions at import exactly as it binds fla's (hub_kernels' import of
    fla.ops.gated_delta_rule); they give the torch fallback's taps on both hybrid families, prefill and
    decode; and, like Triton, they refuse CPU tensors unless the process stands for the accelerator."""
    bed = str(test_bed["qwen3"].parent)
    done = subprocess.run([sys.executable, "-c", STUB_SCRIPT, bed], capture_output=True, text=True, timeout=300,
                          env=_stub_env(DFLASH_EVAL_STUB_FLA_ON_CPU="1"))
    assert done.returncode == 0 and "stub ok" in done.stdout, done.stdout[-2000:] + done.stderr[-3000:]
    refused = subprocess.run([sys.executable, "-c", STUB_SCRIPT, bed], capture_output=True, text=True, timeout=300,
                             env=_stub_env())
    assert refused.returncode == 3 and "Triton kernel launched on CPU tensors" in refused.stdout, refused.stderr[-2000:]


EMULATED_DISPATCH_SCRIPT = """
import json, sys, torch
from pathlib import Path
from dflash_eval.core.settings.run_settings import RunOptions
from dflash_eval.model.kernels import kernel_report, kernel_summary, torch_fallback_kernels
from dflash_eval.model.target import load_target
from dflash_eval.pipeline.continuations import generation_settings
import fla.ops.gated_delta_rule as stub
bed, drafter, out = sys.argv[1], sys.argv[2], Path(sys.argv[3])
target = load_target(bed + "/qwen3_5_text", device="cpu", dtype="float32", allow_accelerated_on_cpu=True)
options = RunOptions(drafters=[drafter], target=bed + "/qwen3_5_text", out=out, cache_dir=out.parent / "cache")
fla = kernel_summary(kernel_report(target.model))
fla_key = generation_settings(target, options, False, "chat")
before = dict(stub.CALLS)
with torch_fallback_kernels(target.model):
    torch_names = kernel_summary(kernel_report(target.model))
    torch_key = generation_settings(target, options, False, "chat")
    target.model(input_ids=torch.tensor([[1, 2, 3, 4, 5]]))
after = dict(stub.CALLS)
# the whole run with --kernels torch: generation, taps and the drafter's walk, with fla never called
from dflash_eval import evaluate
evaluate(RunOptions(drafters=[drafter], target=bed + "/qwen3_5_text", out=out, limit=2, max_new_tokens=8,
                    cache_dir=out.parent / "cache", device="cpu", kernels="torch"))
run = json.loads((out / "run.json").read_text())
print(json.dumps({"fla": fla, "torch": torch_names, "keys_differ": fla_key != torch_key, "before": before,
                  "after": after, "end": dict(stub.CALLS), "provenance": run["provenance"]["kernels"]}))
"""


@pytest.mark.slow
def test_emulated_gpu_dispatch_names_fla_and_kernels_torch_stops_calling_it(test_bed, trained, tmp_path):
    """transformers >= 5.25 dispatches a Gated-DeltaNet operation to fla by the device of its inputs (and from
    5.25 wraps it in a `kernels` Func module); the stub fla routes CPU inputs to itself as a GPU's are routed.
    The report names fla because fla is what the probe saw called; under `--kernels torch` fla's call count
    stays where it was through a forward and a whole run, the report and the run's provenance name the torch
    implementation, and the continuation cache keys of the two differ."""
    import json

    script = subprocess.run([sys.executable, "-c", EMULATED_DISPATCH_SCRIPT, str(test_bed["qwen3"].parent),
                             str(trained["qwen3_5_text"]["good"]), str(tmp_path / "run")], capture_output=True,
                            text=True, timeout=600, env=_stub_env(DFLASH_EVAL_STUB_FLA_ON_CPU="1"))
    assert script.returncode == 0, script.stderr[-3000:]
    seen = json.loads(script.stdout.strip().splitlines()[-1])
    assert seen["fla"]["chunk_gated_delta_rule"] == "fla.ops.gated_delta_rule.chunk_gated_delta_rule"
    assert seen["fla"]["recurrent_gated_delta_rule"] == "fla.ops.gated_delta_rule.fused_recurrent_gated_delta_rule"
    assert seen["before"]["chunk_gated_delta_rule"] > 0  # the probe reached the stub: it is really routed
    assert all(name.startswith("transformers.models.qwen3_5.") for name in seen["torch"].values())
    assert seen["keys_differ"]
    assert seen["after"] == seen["before"] == seen["end"]  # --kernels torch: not one more call into fla
    assert seen["provenance"] == seen["torch"]


@pytest.mark.slow
def test_gpu_check_rehearsal_runs_every_part_end_to_end(tmp_path):
    """`bash benchmarks/gpu_check.sh --rehearse`: every part in its own process on the CPU with the stub fla,
    each figure in OUT/PART.json, the summary table at the end, exit 0."""
    out = tmp_path / "out"
    env = {**os.environ, "OUT": str(out), "PYTHON": sys.executable, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    started = time.monotonic()
    done = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_check.sh"), "--rehearse"], env=env,
                          capture_output=True, text=True, timeout=1500)
    seconds = time.monotonic() - started
    print(f"gpu_check.sh --rehearse: {seconds:.0f} s")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "=== gpu_check summary" in done.stdout
    import json

    parts = {p: json.loads((out / f"{p}.json").read_text()) for p in ("bed", "kernels", "throughput", "phases")}
    assert all(p["finished"] and p["rehearsal"] for p in parts.values())
    # the CPU test bed ran with fla unbound: only the torch fallback there
    assert all(f.startswith("transformers.") for f in parts["bed"]["figures"]["cpu kernels"])
    kernels = parts["kernels"]["figures"]
    assert "fla.ops.gated_delta_rule.chunk_gated_delta_rule" in kernels["bound kernels"]
    called = kernels["kernels called (probe: calls per op over all layers)"]
    assert called["chunk_gated_delta_rule"]["fla.ops.gated_delta_rule.chunk_gated_delta_rule"] > 0
    assert called["recurrent_gated_delta_rule"]["fla.ops.gated_delta_rule.fused_recurrent_gated_delta_rule"] > 0
    assert not any(name.startswith("fla.") for per in kernels["kernels called under --kernels torch"].values()
                   for name in per)
    # the fla-vs-fallback difference is measured, not 0 by construction (the stub computes in float32, the
    # fallback in the model's bf16 around it)
    assert kernels["taps fla vs fallback (bf16): max rel diff"] > 0
    for key in ("tau bf16-fla", "tau fp32-torch", "tau bf16-fla-live", "continuations bf16+fla vs fp32+torch",
                "walks replay vs live (bf16+fla)"):
        assert key in kernels and key in done.stdout
    drafter = parts["phases"]["figures"]["drafter pass"]
    assert drafter["counted_flops"] > drafter["lm_head_flops"] > 0  # every FLOP, the lm_head over all slots too
    assert any(k.startswith("tap pass tiny") for k in parts["throughput"]["figures"])


@pytest.mark.slow
def test_the_summary_is_printed_when_parts_time_out(tmp_path):
    """A part killed by its budget keeps what it wrote; the table still comes, naming what happened."""
    out = tmp_path / "out"
    env = {**os.environ, "OUT": str(out), "PYTHON": sys.executable, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1",
           "GPU_CHECK_BUDGETS": "bed:2 phases:2"}
    done = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_check.sh"), "--rehearse"], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 1
    table = done.stdout[done.stdout.index("=== gpu_check summary"):]
    assert "kernels     not run" in table and "throughput  not run" in table
    for part in ("bed", "phases"):
        line = next(line for line in table.splitlines() if line.startswith(part))
        assert "timed out" in line or "failed before writing (exit 124)" in line


class Elsewhere(torch.Tensor):
    """A CPU tensor standing for one on another GPU (the lm_head's, on a target split over GPUs): ops
    among such tensors stay elsewhere, `.to(a device)` brings one home as a plain tensor, and an op mixing
    it with the home device's tensors or generator fails, as a cross-device op fails on CUDA."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.Tensor.to and (any(isinstance(a, (torch.device, str)) for a in args[1:]) or "device" in kwargs):
            with torch._C.DisableTorchFunctionSubclass():
                return func(*args, **kwargs).as_subclass(torch.Tensor)
        values = [*args, *kwargs.values()]
        values += [v for a in values if isinstance(a, (list, tuple)) for v in a]
        if any(isinstance(v, torch.Generator) for v in values) or any(
                type(v) is torch.Tensor and v.dim() > 0 for v in values):
            raise RuntimeError(f"{getattr(func, '__name__', func)}: expected all tensors and generators on the same device")
        return super().__torch_function__(func, types, args, kwargs)


def test_the_live_loop_draws_on_the_embeddings_device_when_the_logits_come_back_elsewhere(test_bed, drafter_dirs,
                                                                                          monkeypatch):
    """Temperature > 0 on a target split over GPUs: the generator lives on the input embedding's device, the
    target's and the drafter's logits come back on the lm_head's. The loop moves them home before it draws
    or compares, and so gives the tokens it gives on one device."""
    from dflash_eval.core.settings.run_settings import Scoring
    from dflash_eval.formats.checkpoints import checked_spec
    from dflash_eval.formats.files import weight_files
    from dflash_eval.model import live
    from dflash_eval.model.drafter import load_drafter
    from dflash_eval.model.sampling import Sampling, generator_for
    from dflash_eval.model.target import load_target

    target = load_target(str(test_bed["qwen3"]), device="cpu", dtype="float32")
    spec, _ = checked_spec(str(drafter_dirs["zlab"]), target.info)
    drafter = load_drafter(spec, weight_files(str(drafter_dirs["zlab"]))).attach_target(target.embed_tokens,
                                                                                      target.lm_head)
    ids = target.tokenizer("def add(a, b):\n    return a + b\n")["input_ids"]
    sampling = Sampling(temperature=1.0)

    def loop():
        result = live.live_generate(target, drafter, ids, Scoring(16), sampling=sampling, generator=generator_for(0, "p", 0))
        return result.tokens, result.walk_accept_lengths

    one_device = loop()
    real_step, real_logits = live.cached_step, drafter.logits

    def step_elsewhere(*args, **kwargs):
        taps, logits, cache = real_step(*args, **kwargs)
        return taps, logits.as_subclass(Elsewhere), cache

    monkeypatch.setattr(live, "cached_step", step_elsewhere)
    monkeypatch.setattr(drafter, "logits", lambda *a, **k: real_logits(*a, **k).as_subclass(Elsewhere))
    with pytest.raises(RuntimeError, match="same device"):  # the stand-in really refuses a cross-device draw
        live.draw(torch.ones(1, 4).as_subclass(Elsewhere), generator_for(0, "p", 0))
    assert loop() == one_device
    assert len(one_device[1]) > 2  # several verify steps, with rejections and draws from the residual


def test_a_failing_nccl_rank_aborts_its_group_at_once_and_raises_its_error(monkeypatch, tmp_path):
    """Under torchrun on GPUs (patched torch.cuda and torch.distributed, nccl): a rank whose evaluation fails
    (a real one-line error: no such drafter) never reaches the barrier, aborts its nccl group instead of
    waiting in destroy_process_group for ranks that will not come, and raises its own error, after an
    init bound to its GPU (device_id) with --dist-timeout."""
    import torch.distributed as dist

    from dflash_eval.commands import distributed
    from dflash_eval.core.settings.run_settings import RunOptions

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: None)
    for name, value in (("RANK", "1"), ("WORLD_SIZE", "2"), ("LOCAL_RANK", "1")):
        monkeypatch.setenv(name, value)
    calls = []
    monkeypatch.setattr(dist, "init_process_group", lambda backend, **kw: calls.append(("init", backend, kw)))
    monkeypatch.setattr(dist, "get_backend", lambda *a: "nccl")
    monkeypatch.setattr(dist, "barrier", lambda *a, **k: calls.append(("barrier",)))
    monkeypatch.setattr(dist, "destroy_process_group", lambda *a: calls.append(("destroy",)))
    monkeypatch.setattr(dist.distributed_c10d, "_abort_process_group", lambda *a: calls.append(("abort",)))
    started = time.monotonic()
    from dflash_eval.core.errors import InputError

    with pytest.raises(InputError, match="no-such-drafter: no such file or directory"):
        distributed.evaluate_launched(RunOptions(drafters=[str(tmp_path / "no-such-drafter")], out=tmp_path / "o",
                                                 device="cuda", dist_timeout=77))
    assert time.monotonic() - started < 30
    (init, backend, kwargs), *rest = calls
    assert backend == "nccl" and kwargs["device_id"] == torch.device("cuda:1")
    assert kwargs["timeout"].total_seconds() == 77
    assert rest == [("abort",)]  # no barrier, no destroy_process_group (which waits for the other ranks)
    calls.clear()
    distributed._leave(dist, failed=False)  # a rank that finished leaves the ordinary way
    assert calls == [("destroy",)]


def test_bare_cuda_resolves_to_an_indexed_device(monkeypatch):
    """Tensors placed on `cuda` report `cuda:0`, and `torch.device("cuda") != torch.device("cuda:0")`:
    every device resolved is indexed (patched torch.cuda, 8 GPUs, the current one 0 or 5)."""
    from dflash_eval.model.target import indexed_device, input_device, resolve_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)
    for current in (0, 5):
        monkeypatch.setattr(torch.cuda, "current_device", lambda current=current: current)
        assert resolve_device("cuda") == resolve_device("auto") == torch.device("cuda", current)
        assert indexed_device("cuda") == torch.device(f"cuda:{current}")
    assert resolve_device("cuda:3") == torch.device("cuda:3") and resolve_device("cpu") == torch.device("cpu")
    assert indexed_device(torch.device("cpu")) == torch.device("cpu")

    class Placed(torch.nn.Module):  # accelerate's record of an offloaded embedding, on a bare "cuda"
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(4, 2, device="meta")
            self.hf_device_map = {"embed": "cuda"}

        def get_input_embeddings(self):
            return self.embed

    assert input_device(Placed()) == torch.device("cuda:5")


def test_the_live_loop_waits_for_the_devices_its_models_use_only(monkeypatch):
    """A clock read in the live loop synchronises the GPUs the target's and drafter's weights (and the
    inputs) live on, never every visible one: under torchrun each rank created a context on all 8 GPUs."""
    from types import SimpleNamespace

    from dflash_eval.model import live

    touched = []
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda index=None: touched.append(index))

    class Placed:  # a module whose tensors live on the given devices
        def __init__(self, *devices):
            self.tensors = [SimpleNamespace(device=torch.device(d)) for d in devices]

        def parameters(self):
            return iter(self.tensors)

        def buffers(self):
            return iter(())

    split_target, drafter = Placed("cuda:2", "cuda:3", "cpu"), Placed("cuda:2")
    indices = live.cuda_indices(split_target, drafter, device=torch.device("cuda:2"))
    live._sync(indices)
    assert touched == [2, 3]
    touched.clear()
    live._sync(live.cuda_indices(Placed("cpu"), Placed("cpu"), device=torch.device("cpu")))
    assert touched == []


def test_no_drafter_is_on_the_targets_device_while_the_target_generates(trained, tmp_path, monkeypatch):
    """The generation batch counts the target alone (continuations.run_generation_budget), so no drafter
    may sit on the target's device while it generates: run, track and doctor (whose context variants
    generate after its drafter is loaded) load the drafters in host memory and move them over after the
    last generation. On the CPU every device is `cpu`, so the moves themselves are followed: each way a
    drafter reaches the target's device (loaded there, `to_target_device`, back after `off_accelerator`)."""
    from contextlib import contextmanager

    from typer.testing import CliRunner

    from dflash_eval.cli import app
    from dflash_eval.commands import evaluate
    from dflash_eval.core.settings.run_settings import RunOptions
    from dflash_eval.doctor.commands import doctor
    from dflash_eval.pipeline import continuations, scoring
    from dflash_eval.training.commands import track

    there: set[int] = set()  # ids of the drafters on the target's device now
    generated: list[int] = []  # drafters there at each generation call

    def loading(real):
        def load(entries, target, *, device=None):
            drafters = real(entries, target, device=device)
            if device is None:  # straight onto the target's device
                there.update(id(d) for d in drafters.values())
            return drafters
        return load

    def joining(real):
        def join(drafters, target):
            there.update(id(d) for d in drafters.values())
            return real(drafters, target)
        return join

    real_off = scoring.off_accelerator

    @contextmanager
    def off(target, *drafters):
        with real_off(target, *drafters):
            there.difference_update(id(d) for d in drafters)
            yield
        there.update(id(d) for d in drafters)

    real_generate = continuations.generate_greedy

    def generate(*args, **kwargs):
        generated.append(len(there))
        return real_generate(*args, **kwargs)

    for module in (evaluate, track):
        monkeypatch.setattr(module, "load_drafters", loading(scoring.load_drafters))
        monkeypatch.setattr(module, "to_target_device", joining(scoring.to_target_device))
    monkeypatch.setattr(scoring, "load_drafters", loading(scoring.load_drafters))
    monkeypatch.setattr(scoring, "off_accelerator", off)
    monkeypatch.setattr(continuations, "generate_greedy", generate)
    good, target = str(trained["qwen3"]["good"]), str(trained["qwen3"]["target"])
    common = dict(target=target, limit=2, max_new_tokens=8, device="cpu")
    evaluate.evaluate(RunOptions(drafters=[good], out=tmp_path / "run", cache_dir=tmp_path / "c1", **common))
    assert generated and not any(generated) and there  # generated with none there; they joined afterwards
    generated.clear()
    there.clear()  # that run's drafters are gone
    doctor.run_doctor(RunOptions(drafters=[good], out=tmp_path / "doc", cache_dir=tmp_path / "c2", **common))
    assert len(generated) >= 3 and not any(generated)  # the base continuations and both context variants'
    generated.clear()
    there.clear()
    done = CliRunner().invoke(app, ["track", good, "--target", target, "--out", str(tmp_path / "track"), "--limit", "2",
                                    "--max-new-tokens", "8", "--device", "cpu", "--cache-dir", str(tmp_path / "c3"),
                                    "--settle", "0.2"])
    assert done.exit_code == 0, done.output
    assert generated and not any(generated)
