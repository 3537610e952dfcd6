"""`plan`: will this run fit, how long will it take, and which option makes it fit, before any GPU is leased.

Library side of `dflash-eval plan`: from the target's and the drafters' `config.json` alone (weight headers
only when present, never a tensor; the target's tokenizer when present for the prompt lengths, otherwise a
stated assumption), the memory of every phase of `run` (and `doctor`) on a named accelerator, the batch
sizes the run would choose, FLOPs and roofline seconds per phase (core/roofline.py). Memory follows the code
as it runs: what each stage keeps on the accelerator and the largest transient it creates. The times are
the roofline's lower bound (every kernel at the roof, no launch or Python overhead); continuations are
assumed to run to --max-new-tokens.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..core import roofline as R
from ..core.batching import anchor_batch as rule
from ..core.batching import lm_head_pieces
from ..core.plan_document import RESERVE_BYTES, TIME_IS, Model, Phase, Plan, PlanSettings
from ..core.spec import DrafterSpec
from ..model.estimation import ROWS_PER_PASS  # target/drafter distributions processed 256 rows at a time
from ..pipeline.trajectories import doctor_host_bytes, doctor_host_fix, host_memory
from .plan_inputs import check_settings, drafter_spec, plan_target, prompt_lengths
from .variants import LENS_LAYERS

LOGITS_CHUNK = 1024  # model.target.capture_taps computes the greedy logits 1024 positions at a time

# ---------------------------------------------------------------------------------------------------
# memory per phase


def activation_bytes_per_token(s: R.ModelShape, e: int = 2) -> int:
    """The largest live activations of one layer's forward per token: the residual and its normed copy, and
    the widest intermediate (MLP gate, up and their product; routed experts' and the shared expert's;
    q/k/v with the gate; the Gated-DeltaNet projections)."""
    mlp = 3 * max(s.intermediate_size, s.experts_per_token * s.moe_intermediate_size + s.shared_expert_intermediate_size)
    attention = (2 * s.num_attention_heads + 2 * s.num_key_value_heads) * s.head_dim * 2
    linear = 2 * (s.linear_conv_dim + 2 * s.linear_value_heads * s.linear_value_head_dim)
    return e * (4 * s.hidden_size + max(mlp, attention, linear))


def generation_budget(config: dict, device: R.Accelerator, target_weight_bytes: int, lengths: list[int],
                      max_new_tokens: int, batch: int | None = None):
    """The run's own rule and memory (pipeline.continuations.generation_budget, which `run` calls with the
    loaded target's parameters) on the transformers config of the target (no weights), the accelerator's
    memory (the datasheet figure; CUDA reports slightly less, so a run may choose one sequence fewer) and
    the bf16 weights: the same batch and the same predicted bytes as `run` for the same figures."""
    import torch
    from transformers import AutoConfig

    from ..pipeline.continuations import generation_budget as rule_of_run

    hf = AutoConfig.for_model(**config)
    return rule_of_run(hf, torch.bfloat16, lengths, max_new_tokens, device.memory_bytes, target_weight_bytes, batch)


def anchor_batch(spec: DrafterSpec, seq_len: int) -> int:
    return rule(seq_len, spec.block_size, spec.num_attention_heads, "cuda")  # as engine.drafter_anchor_batch


def drafter_transient(spec: DrafterSpec, d: R.DrafterShape, T: int, A: int, sampled: bool, e: int = 2) -> dict[str, int]:
    """One drafter pass over a T-token trajectory at A anchors per forward (the last chunk sees all T rows)."""
    b, B = d.body, spec.block_size
    parts = {
        "taps for the drafter (concatenated)": T * d.n_taps * d.target_hidden_size * e,
        "context and its keys/values": T * b.hidden_size * e + T * b.num_layers * 2 * b.num_attention_heads * b.head_dim * e,
        "logits over the vocabulary": math.prod(lm_head_pieces(A * B, d.draft_vocab_size, e, "cuda")) * e,  # a piece
        # scores against context and block, masked and concatenated (model dtype), softmax in fp32, probs
        "attention scores (one layer)": A * b.num_attention_heads * B * (T + B) * (3 * e + 4 + e),
        "block activations": A * B * (4 * b.hidden_size + 3 * b.intermediate_size) * e,
    }
    if sampled:  # model.estimation: the target's and the drafter's processed distributions, fp32
        parts["distributions at temperature > 0"] = ROWS_PER_PASS * max(d.draft_vocab_size, b.vocab_size) * 4 * 4
    return parts


def tap_transient(s: R.ModelShape, T: int, layers: int, chunk: int, keep_hidden: bool, e: int = 2) -> dict[str, int]:
    """One target pass over T tokens (model.target.capture_taps): the hooked layers' outputs, kept and then
    concatenated (twice), the final hidden states, one chunk's activations, the cache of a chunked prefill,
    greedy logits 1024 positions at a time."""
    c = min(T, chunk)
    parts = {"taps (captured and concatenated)": 2 * T * layers * s.hidden_size * e,
             "final hidden states": T * s.hidden_size * e * (2 if keep_hidden else 1),
             "forward activations": c * activation_bytes_per_token(s, e),
             "logits chunk": min(T, LOGITS_CHUNK) * s.vocab_size * e}
    if T > chunk:
        parts["cache of the chunked prefill"] = R.cache_bytes(s, T, 1, e)
    return parts


def doctor_layers(spec: DrafterSpec, num_layers: int, target_config: dict) -> tuple[int, int]:
    """(layers a doctor trajectory holds, variants scored): the variants' taps and the logit lens layers."""
    from .variants import build_variants, rope_variants, table_variant

    text = target_config.get("text_config") if isinstance(target_config.get("text_config"), dict) else target_config
    variants = build_variants(spec, num_layers) + rope_variants(spec, text.get("rope_parameters")) + table_variant(spec)
    layers = {t for v in variants for t in (v.taps or spec.taps)} | set(range(max(0, num_layers - LENS_LAYERS), num_layers))
    return len(layers), len(variants)


# ---------------------------------------------------------------------------------------------------
# the plan

def _memory(target: Model, drafters: list[Model], specs: list[DrafterSpec], lengths: list[int], st: PlanSettings,
            device: R.Accelerator, doctor: tuple[int, int] | None, e: int = 2) -> tuple[dict[str, dict[str, int]], dict]:
    s = target.shape
    N, sampled = st.max_new_tokens, st.temperature > 0
    T = max(lengths) + N
    resident = {"target weights": target.weight_bytes, **{f"drafter {i + 1} ({Path(d.path).name})": d.weight_bytes
                                                   for i, d in enumerate(drafters)}}
    budget = generation_budget(target.config, device, target.weight_bytes, lengths, N, st.generation_batch)
    G, logits = budget.batch, budget.batch * s.vocab_size * 4 * 2
    phases = {"weights": dict(resident)}
    # the drafters join the accelerator after generation (pipeline/scoring.py): the target alone is resident
    phases["generate"] = {"target weights": budget.resident_bytes,
                          f"cache of {G} sequences x {T} tokens": G * budget.sequence_bytes - logits + budget.fixed_bytes,
                          "step logits (fp32, twice)": logits,
                          "prefill activations": G * max(lengths) * activation_bytes_per_token(s, e)}
    layers = len({t for spec in specs for t in spec.taps})
    phases["taps"] = {**resident, **tap_transient(s, T, layers, st.tap_chunk, sampled, e)}
    anchors = {d.path: st.anchor_batch or anchor_batch(spec, T) for d, spec in zip(drafters, specs)}
    worst = max((drafter_transient(spec, d.shape, T, anchors[d.path], sampled, e)
                 for d, spec in zip(drafters, specs)), key=lambda p: sum(p.values()))
    phases["drafter pass"] = {**resident, "taps of the prompt (all drafters' layers)": T * layers * s.hidden_size * e, **worst}
    if st.numerics_check:  # the live loop: one sequence's cache and its snapshot, beside every resident model
        phases["numerics check"] = {**resident, "cache and its snapshot (live loop)": 2 * R.cache_bytes(s, T, 1, e),
                                    "verify logits (one block)": max(d.shape.block_size for d in drafters) * s.vocab_size * e}
    host = {}
    if doctor is not None:  # trajectories wait in host memory (pipeline.trajectories.OffloadedLayers)
        held, _ = doctor
        first, tokens = drafters[0], sum(n + N for n in lengths)
        contexts = st.context_variants and not sampled
        phases["doctor"] = {
            "target weights": target.weight_bytes, f"drafter 1 ({Path(first.path).name})": first.weight_bytes,
            "one trajectory's taps, read back and concatenated": 2 * T * len(specs[0].taps) * s.hidden_size * e,
            **({"final hidden states of every sequence": tokens * s.hidden_size * e} if sampled else {}),
            **drafter_transient(specs[0], first.shape, T, anchors[first.path], sampled, e)}
        # every sequence's trajectory of `held` layers, plus one context variant's (the drafter's taps) at a time
        host["doctor"] = doctor_host_bytes(tokens, held, tokens if contexts else 0, len(specs[0].taps), s.hidden_size, e)
    return phases, {"generation": G, "generation_budget": budget.to_dict(), "anchor": anchors, "longest_sequence": T,
                    "host_bytes": host}


def _times(target: Model, drafters: list[Model], specs: list[DrafterSpec], lengths: list[int], st: PlanSettings,
           device: R.Accelerator, batches: dict, doctor: tuple[int, int] | None) -> dict[str, tuple[float, float]]:
    """(FLOPs, seconds) per phase; each continuation assumed to run to max_new_tokens."""
    from ..core import roofline_sums as S  # closed forms: bounded time whatever the token counts

    s, N = target.shape, st.max_new_tokens
    G = batches["generation"]
    gen = [0.0, 0.0]
    ordered = sorted(lengths)
    for i in range(0, len(ordered), G):
        size, P = len(ordered[i:i + G]), max(ordered[i:i + G])
        decode = S.decode_steps(s, device, size, P, N - 1)
        gen[0] += R.forward_flops(s, size, P, 0, 1) + decode[0]
        gen[1] += R.step_time(s, device, size, P, 0, logit_positions=1) + decode[1]
    taps = [0.0, 0.0]
    for P in lengths:
        flops, seconds = S.tap_pass(s, device, P + N, st.tap_chunk)
        taps[0] += flops
        taps[1] += seconds
    per_drafter = []
    for d, _spec in zip(drafters, specs):
        passes = [S.drafter_pass(d.shape, device, P, P + N, batches["anchor"][d.path]) for P in lengths]
        per_drafter.append((sum(f for f, _ in passes), sum(t for _, t in passes)))
    out = {"weights": (0.0, 0.0), "generate": tuple(gen), "taps": tuple(taps),
           "drafter pass": (sum(f for f, _ in per_drafter), sum(t for _, t in per_drafter))}
    if st.numerics_check:
        out["numerics check"] = numerics_check_cost(s, drafters, lengths[:st.numerics_check], N, device, batches["anchor"])
    if doctor is not None:
        _, variants = doctor
        contexts = 2 if st.context_variants and st.temperature <= 0 else 0
        f0, t0 = per_drafter[0]
        lens = sum(P + N for P in lengths) * LENS_LAYERS * 2 * s.hidden_size * s.vocab_size
        out["doctor"] = (taps[0] * (1 + contexts) + gen[0] * contexts + f0 * (variants + contexts) + lens,
                         taps[1] * (1 + contexts) + gen[1] * contexts + t0 * (variants + contexts)
                         + lens / device.peak_flops)
    return out


def numerics_check_cost(s: R.ModelShape, drafters: list[Model], lengths: list[int], N: int, device: R.Accelerator,
                        anchors: dict[str, int]) -> tuple[float, float]:
    """(FLOPs, seconds) of `run --numerics-check` on prompts of `lengths` tokens (pipeline/numerics.py): per
    prompt its continuation generated alone (a prefill and N - 1 decode steps at batch 1), and per drafter
    two replays (at the run's anchors per forward and at the other value) and one live loop. The live loop
    is priced at tau = 1, its most steps (N, each committing one token): per step a drafter forward, the
    cache's snapshot, a verify forward of B tokens and the re-run of the accepted token after the restore.
    At the roof: on a 27B the forwards at batch 1 are memory-bound, ~11 ms each on an H200, while HF's
    eager forwards take several times that, hence the ~2-3 min per prompt per drafter seen on a 27B."""
    from ..core import roofline_sums as S

    flops = seconds = 0.0
    for P in lengths:
        prefill = (R.forward_flops(s, 1, P, 0, 1), R.step_time(s, device, 1, P, 0, logit_positions=1))
        for f, t in (prefill, S.decode_steps(s, device, 1, P, N - 1)):
            flops, seconds = flops + f, seconds + t
        for d in drafters:
            A = anchors[d.path]
            parts = [S.drafter_pass(d.shape, device, P, P + N, A), S.drafter_pass(d.shape, device, P, P + N, 1 if A > 1 else 2),
                     prefill, S.drafter_steps(d.shape, device, P, N), S.cache_copies(s, device, P, N),
                     S.forward_steps(s, device, 1, d.shape.block_size, P, N), S.forward_steps(s, device, 1, 1, P, N)]
            flops, seconds = flops + sum(f for f, _ in parts), seconds + sum(t for _, t in parts)
    return flops, seconds


def plan(target: str, drafters: list[str], settings: PlanSettings, reference: str | None = None) -> Plan:
    """The plan of `run` (and `doctor` on the first drafter when settings.doctor) on settings.accelerator:
    every input checked as `run` checks it first (`check_settings`, the target's config, each drafter against
    the target), then memory and times in closed form (bounded time for any token count)."""
    from ..model.target import target_info

    device = R.accelerator(settings.accelerator)
    paths = check_settings(target, drafters, settings, reference)
    tgt, config, path = plan_target(target)
    info = target_info(path)
    specs = [drafter_spec(d, info) for d in paths]
    models = []
    for spec in specs:
        shape = R.drafter_shape_from_spec(spec)
        models.append(Model(spec.path, spec.format, R.parameters(shape), R.weight_bytes(shape), shape))
    lengths, source = prompt_lengths(path, config, settings)
    doctor = doctor_layers(specs[0], tgt.shape.num_layers, config) if settings.doctor else None
    memory, batches = _memory(tgt, models, specs, lengths, settings, device, doctor)
    times = _times(tgt, models, specs, lengths, settings, device, batches, doctor)
    phases = [Phase(name, sum(parts.values()), times[name][0], times[name][1], parts, batches["host_bytes"].get(name, 0))
              for name, parts in memory.items()]
    del batches["host_bytes"]
    notes = [f"prompt lengths: {source}", f"times on {device.name}: {TIME_IS}; each continuation assumed to run to "
             f"{settings.max_new_tokens} new tokens",
             f"usable memory: {device.memory_bytes / R.GIB:.0f} GiB - {RESERVE_BYTES / R.GIB:.0f} GiB reserved (CUDA context, allocator)"]
    host = None
    if settings.numerics_check:
        checked = min(settings.numerics_check, len(lengths))
        notes.append(f"numerics check: {checked} prompt(s) x {len(models)} drafter(s), "
                     f"{times['numerics check'][1] / 60:,.1f} min at the roof with the live loop at tau = 1; eager forwards "
                     "at batch 1 take several times the roof (~2-3 min per prompt per drafter on a 27B)")
    if settings.doctor:
        host = _host(phases[-1].host_bytes, lengths, settings, doctor[0], len(specs[0].taps), tgt.shape.hidden_size)
        notes.append(host["note"])
    result = Plan(tgt, models, device, settings, lengths, source, batches, phases, None, notes, host)
    if not result.fits:
        result.fix = _fix(tgt, models, specs, lengths, settings, device, doctor)
    return result


def _host(needed: int, lengths: list[int], st: PlanSettings, held: int, taps: int, hidden: int) -> dict[str, Any]:
    """doctor's host figure against this machine's memory (the run's machine may differ: the figure is in
    the note), and the option that would fit (pipeline.trajectories.doctor_host_fix, doctor's own check)."""
    machine = host_memory()
    out: dict[str, Any] = {"doctor_bytes": needed, "machine_total_bytes": None, "machine_available_bytes": None,
                           "fits": None, "fix": None}
    what = f"doctor keeps its trajectories in host memory (pageable): {needed / R.GIB:,.1f} GiB"
    if machine is None:
        out["note"] = f"{what}; this machine's memory is unknown (no /proc/meminfo, no sysconf)"
        return out
    total, available = machine
    sequences = [n + st.max_new_tokens for n in lengths]
    contexts = st.context_variants and st.temperature <= 0
    samples = st.samples if st.temperature > 0 else 1
    fix = doctor_host_fix(sequences, sequences if contexts else [], held, taps, hidden, available, samples=samples)
    fits = needed <= available
    out.update(machine_total_bytes=total, machine_available_bytes=available, fits=fits, fix=None if fits else fix)
    mine = f"this machine has {total / R.GIB:,.1f} GiB ({available / R.GIB:,.1f} available)"
    out["note"] = (f"{what}; {mine}: fits" if fits else f"{what} DOES NOT FIT: {mine}; doctor refuses such a run "
                   f"before its target pass; option that fits: {fix or 'none (a machine with more memory)'}")
    return out


def _fits(tgt, models, specs, lengths, st, device, doctor) -> bool:
    memory, _ = _memory(tgt, models, specs, lengths, st, device, doctor)
    return max(sum(p.values()) for p in memory.values()) <= device.memory_bytes - RESERVE_BYTES


def _fix(tgt, models, specs, lengths, st: PlanSettings, device, doctor) -> str:
    """The first single option that makes every phase fit: a smaller --generation-batch, --anchor-batch,
    --tap-chunk or --max-new-tokens; else more memory."""
    memory, batches = _memory(tgt, models, specs, lengths, st, device, doctor)
    usable = device.memory_bytes - RESERVE_BYTES
    over = [name for name, parts in memory.items() if sum(parts.values()) > usable]
    if sum(memory["weights"].values()) > usable:
        return (f"none on one {device.name}: the weights alone need {sum(memory['weights'].values()) / R.GIB:.1f} GiB; "
                "split the target with --device-map auto over more GPUs")
    if "generate" in over:  # memory grows with the batch: the largest that fits, by bisection
        low, high = 0, batches["generation"]  # high does not fit; low = 0 stands for "none fits"
        while high - low > 1:
            middle = (low + high) // 2
            if _fits(tgt, models, specs, lengths, replace(st, generation_batch=middle), device, doctor):
                low = middle
            else:
                high = middle
        if low >= 1:
            return f"--generation-batch {low}"
    if "drafter pass" in over or "doctor" in over:
        A = max(batches["anchor"].values())
        while A > 1:
            A //= 2
            if _fits(tgt, models, specs, lengths, replace(st, anchor_batch=A), device, doctor):
                return f"--anchor-batch {A}"
    if "taps" in over:
        c = st.tap_chunk
        while c > 64:
            c //= 2
            if _fits(tgt, models, specs, lengths, replace(st, tap_chunk=c), device, doctor):
                return f"--tap-chunk {c}"
    n = st.max_new_tokens
    while n > 16:
        n //= 2
        if _fits(tgt, models, specs, lengths, replace(st, max_new_tokens=n), device, doctor):
            return f"--max-new-tokens {n}"
    return "none found on one accelerator: split the target with --device-map auto over more GPUs"
