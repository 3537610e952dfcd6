"""A roofline model of the targets and drafters dflash-eval runs: sizes, cache bytes, FLOPs, step times.

Why: a 27B target on one GPU is a plan before it is a run (`dflash-eval plan`), and the expected speedup
of a drafter needs the cost of a target step and a drafter step (issue 26). Everything here is read from
`config.json` dicts, pure arithmetic, no torch.

API (all sizes in bytes, times in seconds; `dtype_bytes` is the weights' and activations' element size,
2 for bf16):
- `ACCELERATORS`, `accelerator(name)` -> `Accelerator(name, peak_flops, bandwidth, memory_bytes)`;
- `model_shape(config)` -> `ModelShape` (dense Qwen3, hybrid Qwen3.5/3.6 and Qwen3-Next with Gated-DeltaNet
  layers, MoE; a text config or a VLM wrapper with `text_config`); `drafter_shape(config)` -> `DrafterShape`
  (z-lab flat config or speculators `transformer_layer_config`);
- `parameters`, `weight_bytes`: as transformers instantiates the model (tied tables counted once);
- `kv_bytes_per_token`, `state_bytes_per_sequence`, `cache_bytes`: what transformers' cache holds;
- `forward_flops`, `forward_bytes`, `step_time`: one target forward of `batch` sequences with `query_tokens`
  new tokens each after `context_tokens` cached ones, time = max(FLOPs / peak, bytes / bandwidth);
- `drafter_flops`, `drafter_bytes`, `drafter_step_time`: one drafter forward over `blocks` blocks.
FLOPs count multiply-adds as 2; element-wise work (norms, RoPE, activations, softmax) is left out.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from .errors import InputError

GIB = 1024 ** 3


@dataclass(frozen=True)
class Accelerator:
    name: str
    peak_flops: float  # dense (not 2:4 sparse) bf16 tensor-core FLOP/s
    bandwidth: float  # memory bandwidth, bytes/s
    memory_bytes: int  # HBM capacity (datasheet GB are binary: an 80 GB H100 holds 5 stacks of 16 GiB)


# NVIDIA datasheets, SXM parts; the datasheets print the bf16 figure "with sparsity", the dense one is half.
ACCELERATORS = {
    # A100 80GB SXM (A100 datasheet): bf16 312 TFLOPS dense, 2,039 GB/s HBM2e, 80 GB
    "a100": Accelerator("a100", 312e12, 2.039e12, 80 * GIB),
    # H100 SXM (H100 datasheet): bf16 1,979 TFLOPS with sparsity -> 989.5 dense, 3.35 TB/s HBM3, 80 GB
    "h100": Accelerator("h100", 989.5e12, 3.35e12, 80 * GIB),
    # H200 SXM (H200 datasheet): bf16 1,979 TFLOPS with sparsity -> 989.5 dense, 4.8 TB/s HBM3e, 141 GB
    "h200": Accelerator("h200", 989.5e12, 4.8e12, 141 * GIB),
    # B200 (HGX B200 datasheet, per GPU): bf16 4.5 PFLOPS with sparsity -> 2.25 dense, 8 TB/s HBM3e, 180 GB
    "b200": Accelerator("b200", 2.25e15, 8e12, 180 * GIB),
}


def accelerator(name: str) -> Accelerator:
    if name not in ACCELERATORS:
        raise InputError(None, f"--accelerator {name!r}: unknown (choose {', '.join(ACCELERATORS)})")
    return ACCELERATORS[name]


@dataclass(frozen=True)
class ModelShape:
    """The sizes of a decoder stack as transformers builds it."""

    model_type: str  # of the text config: qwen3, qwen3_5_text, qwen3_5_moe_text, qwen3_next
    vocab_size: int
    hidden_size: int
    layer_types: tuple[str, ...]  # "full_attention" / "linear_attention" per layer
    mlp_types: tuple[str, ...]  # "dense" / "moe" per layer
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    gated_attention: bool  # q_proj also emits the output gate (2 * heads * head_dim outputs)
    attention_bias: bool
    intermediate_size: int  # dense MLP (0 when every layer is MoE)
    tie_word_embeddings: bool
    num_experts: int = 0
    experts_per_token: int = 0
    moe_intermediate_size: int = 0
    shared_expert_intermediate_size: int = 0
    linear_key_heads: int = 0
    linear_value_heads: int = 0
    linear_key_head_dim: int = 0
    linear_value_head_dim: int = 0
    linear_conv_kernel: int = 0

    @property
    def num_layers(self) -> int:
        return len(self.layer_types)

    @property
    def attention_layers(self) -> int:
        return sum(t != "linear_attention" for t in self.layer_types)

    @property
    def linear_layers(self) -> int:
        return self.num_layers - self.attention_layers

    @property
    def linear_conv_dim(self) -> int:
        """Channels of the Gated-DeltaNet causal conv: q and k (key heads) and v (value heads)."""
        return 2 * self.linear_key_heads * self.linear_key_head_dim + self.linear_value_heads * self.linear_value_head_dim


HYBRID, TARGET_TYPES = ("qwen3_5_text", "qwen3_5_moe_text", "qwen3_next"), ("qwen3", "qwen3_5_text", "qwen3_5_moe_text", "qwen3_next")


def _int(config: dict, key: str, where: str, default: int | None = None) -> int:
    value = config.get(key, default)
    if value is None:
        raise InputError(None, f"config key '{where}{key}' is missing")
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InputError(None, f"config key '{where}{key}'={value!r} is not a non-negative integer")
    return value


def model_shape(config: dict) -> ModelShape:
    """A target's shape from its config.json: the text config itself, or a VLM wrapper's `text_config`
    (what `AutoModelForCausalLM` instantiates from a `qwen3_5` / `qwen3_5_moe` release)."""
    where = ""
    if isinstance(config.get("text_config"), dict):
        config, where = config["text_config"], "text_config."
    model_type = config.get("model_type")
    if model_type not in TARGET_TYPES:
        raise InputError(None, f"config key '{where}model_type'={model_type!r}: no size model for it "
                               f"(known: {', '.join(TARGET_TYPES)})")
    layers, heads, hidden = (_int(config, k, where) for k in ("num_hidden_layers", "num_attention_heads", "hidden_size"))
    types = config.get("layer_types")
    if types is None:
        interval = _int(config, "full_attention_interval", where, 4) if model_type in HYBRID else 1
        types = ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(layers)]
    if len(types) != layers:
        raise InputError(None, f"config key '{where}layer_types' has {len(types)} entries for {layers} layers")
    experts = _int(config, "num_experts", where, 0) if model_type != "qwen3" else 0
    if model_type == "qwen3_5_moe_text":
        mlp = ["moe"] * layers
    elif model_type == "qwen3_next":  # transformers' rule: MoE unless listed dense or off the sparse step
        dense, step = set(config.get("mlp_only_layers") or []), _int(config, "decoder_sparse_step", where, 1)
        mlp = ["moe" if i not in dense and experts > 0 and (i + 1) % step == 0 else "dense" for i in range(layers)]
    else:
        mlp = ["dense"] * layers
    moe, linear = "moe" in mlp, "linear_attention" in types
    return ModelShape(
        model_type=model_type, vocab_size=_int(config, "vocab_size", where), hidden_size=hidden,
        layer_types=tuple(types), mlp_types=tuple(mlp), num_attention_heads=heads,
        num_key_value_heads=_int(config, "num_key_value_heads", where, heads),
        head_dim=_int(config, "head_dim", where, hidden // max(heads, 1)),
        gated_attention=model_type in HYBRID,  # transformers doubles q_proj there whatever attn_output_gate says
        attention_bias=bool(config.get("attention_bias", False)),
        intermediate_size=_int(config, "intermediate_size", where) if "dense" in mlp else 0,
        tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
        num_experts=experts if moe else 0,
        experts_per_token=_int(config, "num_experts_per_tok", where) if moe else 0,
        moe_intermediate_size=_int(config, "moe_intermediate_size", where) if moe else 0,
        shared_expert_intermediate_size=_int(config, "shared_expert_intermediate_size", where, 0) if moe else 0,
        **({k: _int(config, f"linear_{n}", where) for k, n in (
            ("linear_key_heads", "num_key_heads"), ("linear_value_heads", "num_value_heads"),
            ("linear_key_head_dim", "key_head_dim"), ("linear_value_head_dim", "value_head_dim"),
            ("linear_conv_kernel", "conv_kernel_dim"))} if linear else {}))


@dataclass(frozen=True)
class DrafterShape:
    """A DFlash drafter: `fc` over n_taps target states, a Qwen3 stack `body`, its own or the target's tables."""

    format: str  # "zlab" or "speculators"
    body: ModelShape  # the drafter layers (vocab_size: the embedding table's rows)
    n_taps: int
    target_hidden_size: int
    block_size: int
    draft_vocab_size: int  # lm_head rows (a reduced draft vocabulary with d2t)
    own_embedding: bool  # embed_tokens stored in the checkpoint (speculators' frozen copy) or the target's
    own_lm_head: bool  # likewise lm_head (draft_vocab_size rows)
    # slot 0 drafts (speculators' sample_from_anchor, DeepSpec): a block of B slots as counted (core/spec.py)
    # runs B - 1 network slots
    anchor_drafts: bool = False

    def network_slots(self, block_size: int | None = None) -> int:
        """Slots the network runs for a block of `block_size` (default B) as counted."""
        return (block_size or self.block_size) - int(self.anchor_drafts)

    @property
    def table_parameters(self) -> int:
        """The embedding and lm_head copies the checkpoint itself holds."""
        return self.body.hidden_size * (self.body.vocab_size * self.own_embedding + self.draft_vocab_size * self.own_lm_head)


def drafter_shape(config: dict, *, own_tables: bool | None = None) -> DrafterShape:
    """From a drafter's config.json. `own_tables` None: the format's convention (speculators checkpoints
    carry frozen copies of the target's embedding and lm_head, z-lab ones use the target's)."""
    anchor_drafts = False
    if config.get("speculators_model_type") == "dflash":
        body_config, fmt = config.get("transformer_layer_config"), "speculators"
        if not isinstance(body_config, dict):
            raise InputError(None, "config key 'transformer_layer_config' is missing or not an object")
        taps = config.get("aux_hidden_state_layer_ids")
        block = config.get("block_size")
        anchor_drafts = config.get("sample_from_anchor") is True
    elif "Qwen3DSparkModel" in (config.get("architectures") or []):  # DeepSpec (formats/deepspec.py)
        body_config, fmt, anchor_drafts = config, "deepspec", True
        taps, block = config.get("target_layer_ids"), config.get("block_size")
    else:
        body_config, fmt = config, "zlab"
        dflash = config.get("dflash_config") or {}
        taps = dflash.get("target_layer_ids", config.get("target_layer_ids"))
        block = dflash.get("block_size", config.get("block_size"))  # required: z-lab's model has no default
    if not isinstance(taps, list) or not taps:
        raise InputError(None, "drafter config has no tap list (aux_hidden_state_layer_ids / dflash_config.target_layer_ids)")
    body = model_shape({**body_config, "model_type": "qwen3", "layer_types": None})
    tables = (fmt in ("speculators", "deepspec")) if own_tables is None else own_tables
    own = config if fmt == "speculators" else {}  # z-lab: the target's width and vocabulary
    block = _int({"block_size": block}, "block_size", "dflash_config." if fmt == "zlab" else "")
    return DrafterShape(
        format=fmt, body=body, n_taps=len(taps), block_size=block + int(anchor_drafts),
        target_hidden_size=_int({"v": own.get("target_hidden_size") or body.hidden_size}, "v", "target_hidden_size"),
        draft_vocab_size=_int({"v": own.get("draft_vocab_size") or body.vocab_size}, "v", "draft_vocab_size"),
        own_embedding=tables, own_lm_head=tables, anchor_drafts=anchor_drafts)


def drafter_shape_from_spec(spec) -> DrafterShape:
    """From a read `core.spec.DrafterSpec` (which knows from the weights which tables the checkpoint holds)."""
    body = ModelShape(
        model_type="qwen3", vocab_size=spec.vocab_size, hidden_size=spec.hidden_size,
        layer_types=("full_attention",) * spec.num_layers, mlp_types=("dense",) * spec.num_layers,
        num_attention_heads=spec.num_attention_heads, num_key_value_heads=spec.num_key_value_heads,
        head_dim=spec.head_dim, gated_attention=False, attention_bias=spec.attention_bias,
        intermediate_size=spec.intermediate_size, tie_word_embeddings=False)
    return DrafterShape(format=spec.format, body=body, n_taps=len(spec.taps), target_hidden_size=spec.target_hidden_size,
                        block_size=spec.block_size, draft_vocab_size=spec.draft_vocab_size,
                        own_embedding=spec.embedding_source == "checkpoint", own_lm_head=spec.lm_head_source == "checkpoint",
                        anchor_drafts=spec.sample_from_anchor)


# ---------------------------------------------------------------------------------------------------
# parameters


def attention_matmul(s: ModelShape) -> int:
    """q (x2 when gated), k, v and o projection weights."""
    q = s.num_attention_heads * s.head_dim
    return s.hidden_size * (q * (2 if s.gated_attention else 1) + 2 * s.num_key_value_heads * s.head_dim) + q * s.hidden_size


def attention_layer_parameters(s: ModelShape) -> int:
    """attention_matmul, the projections' biases when attention_bias, q_norm and k_norm (head_dim each)."""
    q, kv = s.num_attention_heads * s.head_dim, s.num_key_value_heads * s.head_dim
    bias = (q * (2 if s.gated_attention else 1) + 2 * kv + s.hidden_size) if s.attention_bias else 0
    return attention_matmul(s) + bias + 2 * s.head_dim


def linear_matmul(s: ModelShape) -> int:
    """Gated-DeltaNet projections: in_proj_qkv (conv_dim), in_proj_z (value dim), in_proj_b and in_proj_a
    (one per value head), out_proj."""
    value = s.linear_value_heads * s.linear_value_head_dim
    return s.hidden_size * (s.linear_conv_dim + value + 2 * s.linear_value_heads) + value * s.hidden_size


def linear_layer_parameters(s: ModelShape) -> int:
    """linear_matmul, the depthwise conv (conv_dim x kernel), dt_bias and A_log per value head, the gated
    norm over one value head."""
    return linear_matmul(s) + s.linear_conv_dim * s.linear_conv_kernel + 2 * s.linear_value_heads + s.linear_value_head_dim


def mlp_parameters(s: ModelShape, kind: str) -> int:
    """dense: gate, up, down (3 H I); moe: router (E x H), E experts of 3 H I_moe, a shared expert of
    3 H I_shared and its 1-output gate."""
    if kind == "dense":
        return 3 * s.hidden_size * s.intermediate_size
    shared = 3 * s.hidden_size * s.shared_expert_intermediate_size + (s.hidden_size if s.shared_expert_intermediate_size else 0)
    return s.num_experts * s.hidden_size * (1 + 3 * s.moe_intermediate_size) + shared


def layer_parameters(s: ModelShape, index: int) -> int:
    mixer = linear_layer_parameters(s) if s.layer_types[index] == "linear_attention" else attention_layer_parameters(s)
    return mixer + mlp_parameters(s, s.mlp_types[index]) + 2 * s.hidden_size  # + input / post-attention norms


@lru_cache(maxsize=64)  # shapes are frozen; step times call this per forward
def parameters(s: ModelShape | DrafterShape) -> int:
    """Target: embedding V H, the layers, final norm H, lm_head V H unless tied. Drafter: fc (n_taps H_t x H),
    hidden_norm, the layers, norm, and the embedding / lm_head copies when the checkpoint holds them."""
    if isinstance(s, DrafterShape):
        b = s.body
        return s.n_taps * s.target_hidden_size * b.hidden_size + 2 * b.hidden_size + s.table_parameters + \
            sum(layer_parameters(b, i) for i in range(b.num_layers))
    head = 0 if s.tie_word_embeddings else s.vocab_size * s.hidden_size
    return s.vocab_size * s.hidden_size + sum(layer_parameters(s, i) for i in range(s.num_layers)) + s.hidden_size + head


def weight_bytes(s: ModelShape | DrafterShape, dtype_bytes: int = 2) -> int:
    return parameters(s) * dtype_bytes

# ---------------------------------------------------------------------------------------------------
# caches, exactly as transformers' DynamicCache holds them


def kv_bytes_per_token(s: ModelShape, dtype_bytes: int = 2) -> int:
    """Keys and values of every attention layer: 2 x kv_heads x head_dim elements per layer per token."""
    return s.attention_layers * 2 * s.num_key_value_heads * s.head_dim * dtype_bytes


def state_bytes_per_sequence(s: ModelShape, dtype_bytes: int = 2, state_bytes: int = 4) -> int:
    """Every Gated-DeltaNet layer, independent of length: the conv state [conv_dim, kernel] in the model dtype
    and the recurrent state [value_heads, key_head_dim, value_head_dim] in fp32 (the torch fallback and
    fla's kernels both return the final state in fp32)."""
    conv = s.linear_conv_dim * s.linear_conv_kernel * dtype_bytes
    recurrent = s.linear_value_heads * s.linear_key_head_dim * s.linear_value_head_dim * state_bytes
    return s.linear_layers * (conv + recurrent)


def cache_bytes(s: ModelShape, tokens: int, batch: int = 1, dtype_bytes: int = 2, state_bytes: int = 4) -> int:
    """batch x (tokens x kv_bytes_per_token + state_bytes_per_sequence)."""
    return batch * (tokens * kv_bytes_per_token(s, dtype_bytes) + state_bytes_per_sequence(s, dtype_bytes, state_bytes))


# ---------------------------------------------------------------------------------------------------
# FLOPs, bytes moved and time of one forward
DELTA_RULE_FLOPS = 7  # per value head per token, x d_k x d_v: decay, S^T k, the rank-1 update, q^T S


@lru_cache(maxsize=64)
def matmul_parameters_per_token(s: ModelShape) -> int:
    """Weights one token multiplies with (no embedding, no lm_head, no norms); of the routed experts only
    the experts_per_token it goes to."""
    expert = 3 * s.hidden_size * s.moe_intermediate_size
    total = 0
    for kind, mlp in zip(s.layer_types, s.mlp_types):
        total += linear_matmul(s) if kind == "linear_attention" else attention_matmul(s)
        total += mlp_parameters(s, mlp) - (s.num_experts - s.experts_per_token) * expert * (mlp == "moe")
    return total


def forward_flops(s: ModelShape, batch: int, query_tokens: int, context_tokens: int = 0,
                  logit_positions: int | None = None) -> float:
    """batch x [2 P_tok Q + attention + linear recurrence + conv + 2 H V L], with Q = query_tokens,
    P_tok = matmul_parameters_per_token, L = logit_positions (default Q; generate computes 1), and causal
    attention over C = context_tokens cached keys: 4 heads head_dim (Q C + Q (Q + 1) / 2) per attention layer;
    per linear layer 7 value_heads d_k d_v Q (the delta rule) + 2 conv_dim kernel Q."""
    q, c = query_tokens, context_tokens
    logits = q if logit_positions is None else logit_positions
    keys = q * c + q * (q + 1) / 2
    attention = s.attention_layers * 4 * s.num_attention_heads * s.head_dim * keys
    recurrence = s.linear_layers * q * (DELTA_RULE_FLOPS * s.linear_value_heads * s.linear_key_head_dim * s.linear_value_head_dim
                                        + 2 * s.linear_conv_dim * s.linear_conv_kernel)
    return batch * (2 * matmul_parameters_per_token(s) * q + attention + recurrence + 2 * s.hidden_size * s.vocab_size * logits)


def experts_touched(s: ModelShape, tokens: int) -> float:
    """Expected distinct experts a layer reads for `tokens` tokens under uniform routing:
    E (1 - (1 - k / E)^tokens)."""
    if not s.num_experts:
        return 0.0
    return s.num_experts * (1 - (1 - s.experts_per_token / s.num_experts) ** tokens)


def forward_bytes(s: ModelShape, batch: int, query_tokens: int, context_tokens: int = 0, dtype_bytes: int = 2,
                  logit_positions: int | None = None, state_bytes: int = 4) -> float:
    """Weights read once (MoE: the experts touched), lm_head when logits are computed, the cached keys/values
    read (batch C kv) and the new ones written (batch Q kv), the recurrent states read and written, logits
    written. Activations are left out (they stay small against these at the sizes dflash-eval runs)."""
    logits = query_tokens if logit_positions is None else logit_positions
    weights: float = parameters(s) - s.vocab_size * s.hidden_size * (1 if s.tie_word_embeddings else 2)
    untouched = s.num_experts - experts_touched(s, batch * query_tokens)  # per MoE layer, 3 H I_moe weights each
    weights -= sum(t == "moe" for t in s.mlp_types) * untouched * 3 * s.hidden_size * s.moe_intermediate_size
    weights += s.vocab_size * s.hidden_size if logits else 0
    kv = kv_bytes_per_token(s, dtype_bytes) * batch * (context_tokens + query_tokens)
    states = 2 * state_bytes_per_sequence(s, dtype_bytes, state_bytes) * batch
    return weights * dtype_bytes + kv + states + batch * logits * s.vocab_size * dtype_bytes


def roofline_time(flops: float, moved: float, device: Accelerator) -> float:
    """max(FLOPs / peak, bytes / bandwidth): the time at the roof, a lower bound for the real kernel."""
    return max(flops / device.peak_flops, moved / device.bandwidth)


def step_time(s: ModelShape, device: Accelerator, batch: int, query_tokens: int, context_tokens: int = 0,
              *, dtype_bytes: int = 2, logit_positions: int | None = None) -> float:
    """One target forward: roofline_time(forward_flops, forward_bytes). Decode step: (batch, 1, context);
    verifying a block of B: (batch, B, context); a prefill: (batch, prompt, 0, logit_positions=1)."""
    return roofline_time(forward_flops(s, batch, query_tokens, context_tokens, logit_positions),
                         forward_bytes(s, batch, query_tokens, context_tokens, dtype_bytes, logit_positions), device)


def drafter_context_flops(d: DrafterShape, tokens: int) -> float:
    """Per new context token: fc (2 n_taps H_t H) and every layer's k and v projections of it."""
    b = d.body
    return tokens * 2 * b.hidden_size * (d.n_taps * d.target_hidden_size + b.num_layers * 2 * b.num_key_value_heads * b.head_dim)


def drafter_flops(d: DrafterShape, blocks: int, visible_context: int, new_context_tokens: int = 0,
                  block_size: int | None = None) -> float:
    """blocks x B slots x [2 P_layers + 4 heads head_dim (visible + B) per layer + 2 H V_draft] plus
    `drafter_context_flops(new_context_tokens)`; P_layers = the layers' matmul weights per slot, the scores
    against every visible context row (the block path computes them all, then masks), lm_head over every
    slot (slot 0 included, as the engine computes it)."""
    b, slots = d.body, blocks * d.network_slots(block_size)
    per_slot = 2 * matmul_parameters_per_token(b) + b.num_layers * 4 * b.num_attention_heads * b.head_dim * \
        (visible_context + d.network_slots(block_size)) + 2 * b.hidden_size * d.draft_vocab_size
    return slots * per_slot + drafter_context_flops(d, new_context_tokens)


def drafter_bytes(d: DrafterShape, blocks: int, visible_context: int, dtype_bytes: int = 2,
                  block_size: int | None = None) -> float:
    """The body's weights, fc and lm_head (the target's when not its own) read once; the context's keys and
    values (GQA-expanded to every head, as the engine keeps them) read once per forward; logits written."""
    b, slots = d.body, blocks * d.network_slots(block_size)
    body = parameters(d) - d.table_parameters
    context = visible_context * b.num_layers * 2 * b.num_attention_heads * b.head_dim
    return (body + d.draft_vocab_size * b.hidden_size + context + slots * d.draft_vocab_size) * dtype_bytes


def drafter_step_time(d: DrafterShape, device: Accelerator, blocks: int, visible_context: int,
                      new_context_tokens: int = 0, *, dtype_bytes: int = 2, block_size: int | None = None) -> float:
    """One drafter forward over `blocks` blocks (live decoding: blocks = batch, new_context_tokens = the
    tokens committed since the last step): roofline_time(drafter_flops, drafter_bytes)."""
    return roofline_time(drafter_flops(d, blocks, visible_context, new_context_tokens, block_size),
                         drafter_bytes(d, blocks, visible_context, dtype_bytes, block_size), device)
