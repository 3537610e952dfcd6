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

import dataclasses
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..core import roofline as R
from ..core.batching import anchor_batch as rule, lm_head_pieces
from ..core.errors import InputError, read_json_object
from ..core.spec import DrafterSpec
from ..model.estimation import ROWS_PER_PASS  # target/drafter distributions processed 256 rows at a time
from .doctor import LENS_LAYERS

RESERVE_BYTES = 2 * R.GIB  # CUDA context, cuBLAS workspace and allocator slack, never available to tensors
TEMPLATE_TOKENS = 16  # assumed chat-template tokens around a prompt when the target has no tokenizer
CHARS_PER_TOKEN = 3  # assumed without a tokenizer (code and English run at 3-4 characters per token)
LOGITS_CHUNK = 1024  # model.target.capture_taps computes the greedy logits 1024 positions at a time
TIME_IS = "a roofline LOWER BOUND: every kernel at the bf16 peak or bandwidth, no overhead; not yet timed on a GPU"


@dataclass(frozen=True)
class PlanSettings:
    prompts: str = "demo"
    limit: int | None = None
    max_new_tokens: int = 256
    accelerator: str = "h200"
    generation_batch: int | None = None  # None: the run's rule
    anchor_batch: int | None = None  # None: the run's rule
    tap_chunk: int = 4096
    temperature: float = 0.0
    samples: int = 1
    doctor: bool = False  # also plan `doctor` on the first drafter
    context_variants: bool = True
    thinking: bool | None = None


@dataclass
class Phase:
    name: str
    memory_bytes: int  # peak accelerator memory during the phase (resident weights included)
    flops: float
    seconds: float
    parts: dict[str, int] = field(default_factory=dict)  # what memory_bytes is made of
    host_bytes: int = 0  # kept in host memory meanwhile (doctor's offloaded trajectories)

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "parts": dict(self.parts)}


@dataclass
class Model:
    path: str
    kind: str  # target: model_type; drafter: format
    parameters: int
    weight_bytes: int
    shape: Any
    config: dict | None = None  # the target's config.json


@dataclass
class Plan:
    target: Model
    drafters: list[Model]
    accelerator: R.Accelerator
    settings: PlanSettings
    lengths: list[int]  # prompt tokens of every sequence (a prompt once per sample)
    length_source: str
    batches: dict[str, Any]
    phases: list[Phase]
    fix: str | None
    notes: list[str]

    @property
    def usable_bytes(self) -> int:
        return self.accelerator.memory_bytes - RESERVE_BYTES

    @property
    def peak_bytes(self) -> int:
        return max(p.memory_bytes for p in self.phases)

    @property
    def fits(self) -> bool:
        return self.peak_bytes <= self.usable_bytes

    def to_dict(self) -> dict[str, Any]:
        t = self.target
        return {
            "target": {"path": t.path, "model_type": t.kind, "parameters": t.parameters, "weight_bytes": t.weight_bytes,
                       "kv_bytes_per_token": R.kv_bytes_per_token(t.shape),
                       "state_bytes_per_sequence": R.state_bytes_per_sequence(t.shape)},
            "drafters": [{"path": d.path, "format": d.kind, "parameters": d.parameters, "weight_bytes": d.weight_bytes,
                          "block_size": d.shape.block_size} for d in self.drafters],
            "accelerator": dataclasses.asdict(self.accelerator),
            "settings": dataclasses.asdict(self.settings),
            "prompts": {"sequences": len(self.lengths), "length_source": self.length_source,
                        "min_tokens": min(self.lengths), "max_tokens": max(self.lengths),
                        "mean_tokens": sum(self.lengths) / len(self.lengths)},
            "batches": self.batches, "phases": [p.to_dict() for p in self.phases],
            "peak_bytes": self.peak_bytes, "usable_bytes": self.usable_bytes, "reserve_bytes": RESERVE_BYTES,
            "seconds": sum(p.seconds for p in self.phases), "seconds_are": TIME_IS, "fits": self.fits, "fix": self.fix,
            "notes": self.notes,
        }


# ---------------------------------------------------------------------------------------------------
# inputs: configs, drafter specs, prompt lengths

def _target(name: str) -> tuple[Model, dict, Path]:
    from ..formats.files import resolve_local_or_cached

    path = resolve_local_or_cached(name)
    config = read_json_object(path / "config.json", missing="not a model folder: no config.json")
    try:
        shape = R.model_shape(config)
    except InputError as exc:
        raise InputError(path / "config.json", exc.problem) from None
    return Model(str(path), shape.model_type, R.parameters(shape), R.weight_bytes(shape), shape, config), config, path


def drafter_spec(name: str) -> DrafterSpec:
    """The run's own reader (formats.checkpoints) on the config; the weight headers decide which tables the
    checkpoint holds, and without weights the format's convention does (speculators: copies of both)."""
    from ..formats import checkpoints as C
    from ..formats.files import read_config, read_weight_metadata, resolve_local_or_cached, weight_files

    path = resolve_local_or_cached(name)
    config = read_config(path)
    fmt = C.detect_format(config, path / "config.json")
    try:
        has_weights = bool(weight_files(path))
    except InputError:  # a folder with config.json only: plan from the config
        has_weights = False
    if has_weights:
        weights: dict = read_weight_metadata(path)[0]
    elif fmt == "speculators":
        body = config.get("transformer_layer_config") or {}
        reduced = (config.get("draft_vocab_size") or body.get("vocab_size")) != body.get("vocab_size")
        weights = dict.fromkeys(["embed_tokens.weight", "lm_head.weight"] + (["d2t"] if reduced else []))
    else:
        weights = {}
    return (C.spec_from_speculators if fmt == "speculators" else C.spec_from_zlab)(config, path, weights)


def prompt_lengths(target_path: Path, config: dict, settings: PlanSettings) -> tuple[list[int], str]:
    """Tokens of every prompt through the target's chat template, or the stated assumption without a tokenizer."""
    from ..model.target import TOKENIZER_FILES, load_tokenizer
    from ..pipeline.inputs import thinking_default
    from ..pipeline.prompts import load_prompts, prompt_ids

    prompts = load_prompts(settings.prompts, settings.limit)
    if not prompts:
        raise InputError(settings.prompts, "no prompts to plan for")
    thinking = thinking_default(config.get("model_type", "")) if settings.thinking is None else settings.thinking
    if any((target_path / f).is_file() for f in TOKENIZER_FILES):
        tokenizer = load_tokenizer(target_path)
        lengths = [len(prompt_ids(tokenizer, p, thinking)) for p in prompts]
        source = f"the target's tokenizer and chat template (thinking {'on' if thinking else 'off'})"
    else:
        lengths = [math.ceil(sum(len(str(m.get("content", ""))) for m in p.chat()) / CHARS_PER_TOKEN) + TEMPLATE_TOKENS
                   for p in prompts]
        source = (f"ASSUMED (no tokenizer in {target_path}): 1 token per {CHARS_PER_TOKEN} characters "
                  f"+ {TEMPLATE_TOKENS} chat-template tokens")
    samples = settings.samples if settings.temperature > 0 else 1
    return [n for n in lengths for _ in range(samples)], source


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


def generation_batch(config: dict, device: R.Accelerator, target_weight_bytes: int, lengths: list[int],
                     max_new_tokens: int) -> int:
    """The run's own rule (pipeline.continuations.generation_batch_for) on the transformers config of the
    target (no weights), the accelerator's memory (the datasheet figure; CUDA reports slightly less) and
    the bf16 weights."""
    import torch
    from transformers import AutoConfig

    from ..pipeline.continuations import generation_batch_for

    hf = AutoConfig.for_model(**config)
    return generation_batch_for(hf, torch.bfloat16, lengths, max_new_tokens, device.memory_bytes, target_weight_bytes)


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
    from .doctor_variants import build_variants, rope_variants, table_variant

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
    G = st.generation_batch or generation_batch(target.config, device, target.weight_bytes, lengths, N)
    phases = {"weights": dict(resident)}
    phases["generate"] = {**resident, f"cache of {G} sequences x {T} tokens": R.cache_bytes(s, T, G, e),
                          "step logits (fp32, twice)": G * s.vocab_size * 4 * 2,
                          "prefill activations": G * max(lengths) * activation_bytes_per_token(s, e)}
    layers = len({t for spec in specs for t in spec.taps})
    phases["taps"] = {**resident, **tap_transient(s, T, layers, st.tap_chunk, sampled, e)}
    anchors = {d.path: st.anchor_batch or anchor_batch(spec, T) for d, spec in zip(drafters, specs)}
    worst = max((drafter_transient(spec, d.shape, T, anchors[d.path], sampled, e)
                 for d, spec in zip(drafters, specs)), key=lambda p: sum(p.values()))
    phases["drafter pass"] = {**resident, "taps of the prompt (all drafters' layers)": T * layers * s.hidden_size * e, **worst}
    host = {}
    if doctor is not None:  # trajectories wait in host memory (pipeline.trajectories.OffloadedLayers)
        held, _ = doctor
        first, tokens = drafters[0], sum(n + N for n in lengths)
        contexts = 2 if st.context_variants and not sampled else 0
        phases["doctor"] = {
            "target weights": target.weight_bytes, f"drafter 1 ({Path(first.path).name})": first.weight_bytes,
            "one trajectory's taps, read back and concatenated": 2 * T * len(specs[0].taps) * s.hidden_size * e,
            **({"final hidden states of every sequence": tokens * s.hidden_size * e} if sampled else {}),
            **drafter_transient(specs[0], first.shape, T, anchors[first.path], sampled, e)}
        # every sequence's trajectory of `held` layers, plus one context variant's at a time
        host["doctor"] = tokens * held * s.hidden_size * e * (2 if contexts else 1)
    return phases, {"generation": G, "anchor": anchors, "longest_sequence": T, "host_bytes": host}


def _times(target: Model, drafters: list[Model], specs: list[DrafterSpec], lengths: list[int], st: PlanSettings,
           device: R.Accelerator, batches: dict, doctor: tuple[int, int] | None) -> dict[str, tuple[float, float]]:
    """(FLOPs, seconds) per phase; each continuation assumed to run to max_new_tokens."""
    s, N = target.shape, st.max_new_tokens
    G = batches["generation"]
    gen = [0.0, 0.0]
    ordered = sorted(lengths)
    for i in range(0, len(ordered), G):
        size, P = len(ordered[i:i + G]), max(ordered[i:i + G])
        gen[0] += R.forward_flops(s, size, P, 0, 1) + sum(R.forward_flops(s, size, 1, P + t) for t in range(N - 1))
        gen[1] += R.step_time(s, device, size, P, 0, logit_positions=1) + sum(
            R.step_time(s, device, size, 1, P + t) for t in range(N - 1))
    taps = [0.0, 0.0]
    for P in lengths:
        T = P + N
        for start in range(0, T, st.tap_chunk):
            q = min(st.tap_chunk, T - start)
            taps[0] += R.forward_flops(s, 1, q, start)
            taps[1] += R.step_time(s, device, 1, q, start)
    per_drafter = []
    for d, spec in zip(drafters, specs):
        A = batches["anchor"][d.path]
        f = t = 0.0
        for P in lengths:
            T = P + N
            anchors = list(range(P, T - 1))
            f += R.drafter_context_flops(d.shape, T)
            for k in range(0, len(anchors), A):
                chunk = anchors[k:k + A]
                f += R.drafter_flops(d.shape, len(chunk), chunk[-1] + 1)
                t += R.drafter_step_time(d.shape, device, len(chunk), chunk[-1] + 1)
            t += R.roofline_time(R.drafter_context_flops(d.shape, T), 0, device)
        per_drafter.append((f, t))
    out = {"weights": (0.0, 0.0), "generate": tuple(gen), "taps": tuple(taps),
           "drafter pass": (sum(f for f, _ in per_drafter), sum(t for _, t in per_drafter))}
    if doctor is not None:
        _, variants = doctor
        contexts = 2 if st.context_variants and st.temperature <= 0 else 0
        f0, t0 = per_drafter[0]
        lens = sum(P + N for P in lengths) * LENS_LAYERS * 2 * s.hidden_size * s.vocab_size
        out["doctor"] = (taps[0] * (1 + contexts) + gen[0] * contexts + f0 * (variants + contexts) + lens,
                         taps[1] * (1 + contexts) + gen[1] * contexts + t0 * (variants + contexts)
                         + lens / device.peak_flops)
    return out


def plan(target: str, drafters: list[str], settings: PlanSettings) -> Plan:
    """The plan of `run` (and `doctor` on the first drafter when settings.doctor) on settings.accelerator."""
    device = R.accelerator(settings.accelerator)
    tgt, config, path = _target(target)
    specs = [drafter_spec(d) for d in drafters]
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
    if settings.doctor:
        notes.append(f"doctor keeps its trajectories in host memory: {phases[-1].host_bytes / R.GIB:,.1f} GiB (pinned)")
    result = Plan(tgt, models, device, settings, lengths, source, batches, phases, None, notes)
    if not result.fits:
        result.fix = _fix(tgt, models, specs, lengths, settings, device, doctor)
    return result


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
    if "generate" in over:
        G = batches["generation"]
        while G > 1:
            G -= 1
            if _fits(tgt, models, specs, lengths, replace(st, generation_batch=G), device, doctor):
                return f"--generation-batch {G}"
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
