"""The DFlash drafter as one plain `torch.nn.Module`, built from a `DrafterSpec`.

Why a native module instead of z-lab's or speculators' classes: both formats must run through exactly
the same arithmetic (so a format difference can never masquerade as a quality difference), and the
attention must take an explicit boolean mask so that one module serves single-block inference (the live
loop) and thousands of anchors per forward (the trajectory engine, the doctor's variants).

Computation (primer section 1):
    ctx      = hidden_norm(fc(concat(taps)))                       # [C, H], no norm before fc
    x        = embed([anchor, MASK, ..., MASK])                    # the target's table (or a copy)
    per layer: q from norm(x) only; k/v = [k_norm(k_proj(ctx)) | k_norm(k_proj(norm(x)))], RoPE at the
               absolute positions (context row p at p, block slot j at anchor + j); masked attention;
               residual; post-attention norm + SwiGLU MLP; residual
    logits   = lm_head(norm(x))                                    # the drafter's own final norm
Parameter names equal the checkpoints' tensor names, so loading is a strict `load_state_dict`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from ..core.spec import DrafterSpec
from .dflash2 import CandidateSelector, GroupedDynamicConv, layer_forward_blocks


class RMSNorm(nn.Module):
    """Qwen3 RMSNorm: computed in fp32, `weight * x / rms(x)` (not the zero-centred Qwen3.5 variant)."""

    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: [heads, T, head_dim]; cos/sin: [T, rotary_dim]. A rotary_dim below head_dim rotates the leading dims
    only and passes the rest (vLLM's partial_rotary_factor: core.semantics.rotary_dim)."""
    rotary = cos.shape[-1]
    if rotary < x.shape[-1]:
        part = x[..., :rotary]
        return torch.cat((part * cos + rotate_half(part) * sin, x[..., rotary:]), dim=-1)
    return x * cos + rotate_half(x) * sin


LOW_PRECISION = (torch.bfloat16, torch.float16)
BMM_HAS_OUT_DTYPE = "dtype" in torch.ops.aten.bmm.overloads()  # torch.bmm(..., out_dtype=): one GEMM, fp32 out


def fp32_products(a: torch.Tensor, b: torch.Tensor, *, device_gemm: bool | None = None) -> torch.Tensor:
    """[n, M, d] @ [n, d, N] with the result in fp32 for bf16 or fp16 operands (in their own dtype otherwise).

    Why: attention scores must not be rounded to bf16 before the softmax. FlashAttention and SDPA's fused
    kernels, vLLM, SGLang and z-lab's SDPA path keep raw scores in fp32; a bf16 GEMM output rounds each score
    to 8 significant bits (an error of ~0.05 on a score of 20, a 5% move of its probability): 3.6-17.5x the
    attention error of fp32 scores (issue 47; 7.6x in tests/test_block_attention.py's case). On CUDA, low-precision operands run one tensor-core GEMM with
    an fp32 output (`torch.bmm(..., out_dtype=torch.float32)`, `device_gemm` forces it, e.g. on the meta
    device); elsewhere the operands are upcast first, exact since a bf16 or fp16 value is an fp32 value.
    Either way each product of two bf16 values is exact in fp32 and the sum is accumulated in fp32."""
    if a.dtype not in LOW_PRECISION:
        return torch.bmm(a, b)  # fp32 (or an fp64 reference) already
    if device_gemm is None:
        device_gemm = a.device.type == "cuda" and BMM_HAS_OUT_DTYPE
    if device_gemm:
        return torch.bmm(a, b, out_dtype=torch.float32)
    return torch.bmm(a.float(), b.float())


def block_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, context: tuple[torch.Tensor, torch.Tensor],
                    masks: tuple[torch.Tensor, torch.Tensor], scale: float) -> torch.Tensor:
    """Each block slot's attention over the context and its own block, in one softmax: q, k, v [A, h, L, d]
    (GQA-expanded), context (k_ctx, v_ctx) [h, C, d], masks ([A, L, C], [A, L, L]) -> [A, h, L, d].

    Scores in fp32 (`fp32_products`), scaled and masked in fp32, one fp32 softmax, the probabilities cast
    to the values' dtype for the value products, as FlashAttention and SDPA compute it (their P is cast to
    V's dtype before P @ V)."""
    A, h, L, d = q.shape
    k_ctx, v_ctx = context
    C = k_ctx.shape[1]
    ctx_mask, block_mask = masks
    score_dtype = torch.promote_types(q.dtype, torch.float32)  # fp32, or fp64 for an fp64 reference
    scores = torch.empty(A, h, L, C + L, dtype=score_dtype, device=q.device)  # one softmax over both parts
    # context products: one GEMM per head over all of the chunk's slots, [h, A*L, d] x [h, d, C]; each part
    # scaled and masked in place, then copied into the one tensor (in-place steps autograd supports: the
    # fixture trainers train through this path)
    products = fp32_products(q.transpose(0, 1).reshape(h, A * L, d), k_ctx.transpose(1, 2))
    products = products.view(h, A, L, C).transpose(0, 1).mul_(scale)
    scores[..., :C].copy_(products.masked_fill_(~ctx_mask[:, None], float("-inf")))
    products = fp32_products(q.reshape(A * h, L, d), k.reshape(A * h, L, d).transpose(1, 2)).view(A, h, L, L)
    scores[..., C:].copy_(products.mul_(scale).masked_fill_(~block_mask[:, None], float("-inf")))
    del products
    probs = torch.softmax(scores, dim=-1).to(v.dtype)
    del scores
    return torch.einsum("ahqc,hcd->ahqd", probs[..., :C], v_ctx) + probs[..., C:] @ v


class DrafterAttention(nn.Module):
    def __init__(self, spec: DrafterSpec):
        super().__init__()
        h, hd = spec.hidden_size, spec.head_dim
        self.heads, self.kv_heads, self.head_dim = spec.num_attention_heads, spec.num_key_value_heads, hd
        self.q_proj = nn.Linear(h, self.heads * hd, bias=spec.attention_bias)
        self.k_proj = nn.Linear(h, self.kv_heads * hd, bias=spec.attention_bias)
        self.v_proj = nn.Linear(h, self.kv_heads * hd, bias=spec.attention_bias)
        self.o_proj = nn.Linear(self.heads * hd, h, bias=spec.attention_bias)
        self.q_norm = RMSNorm(hd, spec.rms_norm_eps)
        self.k_norm = RMSNorm(hd, spec.rms_norm_eps)

    def _heads(self, x: torch.Tensor, n: int) -> torch.Tensor:
        return x.view(x.shape[0], n, self.head_dim).transpose(0, 1)  # [n, T, hd]

    def forward(self, x: torch.Tensor, ctx: torch.Tensor, rope_ctx, rope_block, mask: torch.Tensor) -> torch.Tensor:
        q = apply_rope(self.q_norm(self._heads(self.q_proj(x), self.heads)), *rope_block)
        k_ctx = apply_rope(self.k_norm(self._heads(self.k_proj(ctx), self.kv_heads)), *rope_ctx)
        k_blk = apply_rope(self.k_norm(self._heads(self.k_proj(x), self.kv_heads)), *rope_block)
        v = self._heads(torch.cat([self.v_proj(ctx), self.v_proj(x)], 0), self.kv_heads)
        k = torch.cat([k_ctx, k_blk], dim=1)
        group = self.heads // self.kv_heads
        if group > 1:
            k, v = k.repeat_interleave(group, 0), v.repeat_interleave(group, 0)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=self.head_dim ** -0.5)
        return self.o_proj(out.transpose(0, 1).reshape(x.shape[0], -1))

    def context_kv(self, ctx: torch.Tensor, rope_ctx) -> tuple[torch.Tensor, torch.Tensor]:
        """The context's keys (k_norm, RoPE) and values for this layer: [heads, C, hd] each, GQA-expanded."""
        k = apply_rope(self.k_norm(self._heads(self.k_proj(ctx), self.kv_heads)), *rope_ctx)
        v = self._heads(self.v_proj(ctx), self.kv_heads)
        group = self.heads // self.kv_heads
        if group > 1:
            k, v = k.repeat_interleave(group, 0), v.repeat_interleave(group, 0)
        return k, v

    def forward_blocks(self, x: torch.Tensor, context: tuple[torch.Tensor, torch.Tensor], rope_block,
                       masks: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        """x: [A, L, H] blocks; context: `context_kv`; masks: ([A, L, C], [A, L, L]) from masks.block_masks.

        The same attention as `forward`, at a cost linear in the number of blocks: each slot's scores
        against the context and against its own block only (never the other blocks, which the dense
        layout computes and masks away), concatenated into one softmax, so the result is the same
        (`block_attention`: fp32 scores and softmax, as SDPA computes `forward`'s)."""
        A, L, _ = x.shape
        cos, sin = rope_block  # [A, L, hd]

        def heads(t: torch.Tensor, n: int) -> torch.Tensor:
            return t.view(A, L, n, self.head_dim).transpose(1, 2)  # [A, n, L, hd]

        q = apply_rope(self.q_norm(heads(self.q_proj(x), self.heads)), cos[:, None], sin[:, None])
        k = apply_rope(self.k_norm(heads(self.k_proj(x), self.kv_heads)), cos[:, None], sin[:, None])
        v = heads(self.v_proj(x), self.kv_heads)
        group = self.heads // self.kv_heads
        if group > 1:
            k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
        out = block_attention(q, k, v, context, masks, self.head_dim ** -0.5)
        return self.o_proj(out.transpose(1, 2).reshape(A, L, -1))


class DrafterMLP(nn.Module):
    def __init__(self, spec: DrafterSpec):
        super().__init__()
        self.gate_proj = nn.Linear(spec.hidden_size, spec.intermediate_size, bias=False)
        self.up_proj = nn.Linear(spec.hidden_size, spec.intermediate_size, bias=False)
        self.down_proj = nn.Linear(spec.intermediate_size, spec.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DrafterLayer(nn.Module):
    def __init__(self, spec: DrafterSpec):
        super().__init__()
        self.input_layernorm = RMSNorm(spec.hidden_size, spec.rms_norm_eps)
        self.self_attn = DrafterAttention(spec)
        self.post_attention_layernorm = RMSNorm(spec.hidden_size, spec.rms_norm_eps)
        self.mlp = DrafterMLP(spec)
        self.dflash2 = spec.is_dflash2
        if self.dflash2:  # convolutions around attention and MLP (model/dflash2.py)
            self.attention_conv = GroupedDynamicConv(spec.hidden_size, spec.conv_kernel_size, spec.conv_group_size)
            self.mlp_conv = GroupedDynamicConv(spec.hidden_size, spec.conv_kernel_size, spec.conv_group_size)

    def forward(self, x, ctx, rope_ctx, rope_block, mask):
        if self.dflash2:  # the flattened layout has no block boundaries for the convolutions to reset at; every
            # product path (replay, live, estimate) calls forward_blocks, so only a wrong internal call lands here
            raise NotImplementedError("DFlash2 convolves over the slots of each block: use forward_blocks")
        # input_layernorm applies to the block stream only, never to ctx (primer section 1)
        x = x + self.self_attn(self.input_layernorm(x), ctx, rope_ctx, rope_block, mask)
        return x + self.mlp(self.post_attention_layernorm(x))

    def forward_blocks(self, x, context, rope_block, masks):
        if self.dflash2:
            return layer_forward_blocks(self, x, context, rope_block, masks)
        x = x + self.self_attn.forward_blocks(self.input_layernorm(x), context, rope_block, masks)
        return x + self.mlp(self.post_attention_layernorm(x))


class DFlashDrafter(nn.Module):
    def __init__(self, spec: DrafterSpec):
        super().__init__()
        from transformers import Qwen3Config

        self.spec = spec
        self.fc = nn.Linear(spec.fc_in_features, spec.hidden_size, bias=False)
        self.hidden_norm = RMSNorm(spec.hidden_size, spec.rms_norm_eps)
        self.layers = nn.ModuleList(DrafterLayer(spec) for _ in range(spec.num_layers))
        self.norm = RMSNorm(spec.hidden_size, spec.rms_norm_eps)
        if spec.embedding_source == "checkpoint":
            self.embed_tokens = nn.Embedding(spec.vocab_size, spec.hidden_size)
        if spec.lm_head_source == "checkpoint":
            self.lm_head = nn.Linear(spec.hidden_size, spec.draft_vocab_size, bias=False)
        if spec.has_d2t:
            self.register_buffer("d2t", torch.zeros(spec.draft_vocab_size, dtype=torch.long))
        if spec.is_dflash2:
            self.candidate_selector = CandidateSelector(spec)
        # RoPE frequencies (every rope_type HF knows) come from transformers itself; not a parameter.
        rope_config = Qwen3Config(hidden_size=spec.hidden_size, num_attention_heads=spec.num_attention_heads,
                                  head_dim=spec.head_dim, rope_parameters=dict(spec.rope),
                                  max_position_embeddings=spec.max_position_embeddings)
        self.rope_config = rope_config
        self.rotary = self.rotary_for(spec.rope, device=None)
        # The target's tables, when the checkpoint does not carry its own (kept out of state_dict).
        self._target_tables: dict[str, nn.Module] = {}

    # -- tables -------------------------------------------------------------------------------------

    def attach_target(self, embed_tokens: nn.Module, lm_head: nn.Module) -> "DFlashDrafter":
        self._target_tables = {"embed": embed_tokens, "lm_head": lm_head}
        return self

    def _table(self, own: str, key: str) -> nn.Module:
        if hasattr(self, own):
            return getattr(self, own)
        if key not in self._target_tables:
            raise RuntimeError("drafter uses the target's embedding/lm_head: call attach_target() first")
        return self._target_tables[key]

    def lm_head_table(self) -> nn.Module:
        return self._table("lm_head", "lm_head")

    def embed(self, token_ids: torch.Tensor) -> torch.Tensor:
        """Block embeddings, times z-lab's `input_embedding_scale` when the rules apply it."""
        embeds = self._table("embed_tokens", "embed")(token_ids)
        return embeds * self.spec.embedding_scale if self.spec.embedding_scale != 1.0 else embeds

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits over the draft vocabulary (the target's, unless a d2t map reduces it), with z-lab's
        `output_multiplier` and `final_logit_softcapping` when the rules apply them (`compute_logits`)."""
        return self.logit_transform(self._table("lm_head", "lm_head")(hidden))

    def logit_transform(self, logits: torch.Tensor) -> torch.Tensor:
        """The element-wise steps after the lm_head: `output_multiplier`, then the softcap."""
        if self.spec.output_multiplier != 1.0:
            logits = logits * self.spec.output_multiplier
        if self.spec.logit_softcap is not None:
            logits = torch.tanh(logits / self.spec.logit_softcap) * self.spec.logit_softcap
        return logits

    def greedy_ids(self, hidden: torch.Tensor, observe=None) -> torch.Tensor:
        """[N, H] final hidden states -> [N] drafted target ids: `to_target_ids(logits(hidden).argmax(-1))`,
        with the lm_head in cache-sized pieces (model/lm_head.py: the logits are never held whole); `observe`
        sees each piece of logits (model/tree_scoring.py)."""
        from .lm_head import greedy_ids

        transform = (self.logit_transform if self.spec.output_multiplier != 1.0 or self.spec.logit_softcap is not None
                     else None)
        return self.to_target_ids(greedy_ids(hidden, self._table("lm_head", "lm_head"), transform, observe=observe))

    def to_target_ids(self, draft_ids: torch.Tensor) -> torch.Tensor:
        """Map draft-vocabulary ids to target ids: target = draft + d2t[draft] (speculators' convention)."""
        return draft_ids + self.d2t[draft_ids] if self.spec.has_d2t else draft_ids

    # -- forward ------------------------------------------------------------------------------------

    def context(self, taps: torch.Tensor) -> torch.Tensor:
        """[C, n_taps * H_target] concatenated taps -> [C, H] context features."""
        return self.hidden_norm(self.fc(taps))

    def rotary_for(self, rope: dict, device: str | torch.device | None = "drafter") -> nn.Module:
        """A rotary embedding with these RoPE parameters (the doctor's RoPE variants too), on this drafter's device.
        Its frequencies span the dims the rules rotate (`rotary_dim`: all of the head, or under vLLM's rules
        int(head_dim * partial_rotary_factor), with the frequencies of a head that size, as vLLM's get_rope)."""
        from transformers import Qwen3Config
        from transformers.models.qwen3.modeling_qwen3 import Qwen3RotaryEmbedding

        from ..core.semantics import rotary_dim

        rules = self.spec.rotary_semantics or self.spec.semantics
        config = Qwen3Config(hidden_size=self.spec.hidden_size, num_attention_heads=self.spec.num_attention_heads,
                             head_dim=rotary_dim(rope, self.spec.head_dim, rules, self.spec.partial_rotary_top_level),
                             rope_parameters={k: v for k, v in rope.items() if k not in ("partial_rotary_factor",
                                                                                          "rope_dim")},
                             max_position_embeddings=self.spec.max_position_embeddings)
        rotary = Qwen3RotaryEmbedding(config)
        return rotary if device is None else rotary.to(self.fc.weight.device if device == "drafter" else device)

    def _rope(self, like: torch.Tensor, positions: torch.Tensor):
        cos, sin = self.rotary(like, positions.view(1, -1))
        return cos[0], sin[0]

    def context_kv(self, ctx: torch.Tensor, ctx_positions: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Every layer's context keys and values, computed once per prompt and reused by every chunk of
        anchors (`forward_blocks`)."""
        rope_ctx = self._rope(ctx, ctx_positions)
        return [layer.self_attn.context_kv(ctx, rope_ctx) for layer in self.layers]

    def forward_blocks(self, context: list[tuple[torch.Tensor, torch.Tensor]], block_embeds: torch.Tensor,
                       block_positions: torch.Tensor, masks) -> torch.Tensor:
        """Hidden states after the final norm for A blocks of L slots: block_embeds [A, L, H],
        block_positions [A, L]; masks: one (context [A, L, C], block [A, L, L]) pair per layer."""
        A, L, _ = block_embeds.shape
        cos, sin = self._rope(block_embeds.view(A * L, -1), block_positions.reshape(-1))
        rope_block = (cos.view(A, L, -1), sin.view(A, L, -1))
        x = block_embeds
        for layer, kv, mask in zip(self.layers, context, masks, strict=True):
            x = layer.forward_blocks(x, kv, rope_block, mask)
        return self.norm(x)

    def forward(
        self,
        ctx: torch.Tensor,
        ctx_positions: torch.Tensor,
        block_embeds: torch.Tensor,
        block_positions: torch.Tensor,
        masks: Sequence[torch.Tensor],
    ) -> torch.Tensor:
        """Hidden states after the final norm for N flattened block slots.

        ctx: [C, H] from `context()`; block_embeds: [N, H]; masks: one bool [N, C + N] per layer
        (see `masks.layer_masks`)."""
        rope_ctx = self._rope(ctx, ctx_positions)
        rope_block = self._rope(block_embeds, block_positions)
        x = block_embeds
        for layer, mask in zip(self.layers, masks, strict=True):
            x = layer(x, ctx, rope_ctx, rope_block, mask)
        return self.norm(x)


def nonfinite_tensors(named, chunk: int = 1 << 24) -> list[str]:
    """Names of the floating tensors (name, tensor) holding a NaN or an infinity; checked in chunks of
    elements, so a 600M-element embedding never needs a second copy of itself; meta tensors are skipped."""
    bad = []
    for name, tensor in named:
        if not tensor.is_floating_point() or tensor.device.type == "meta":
            continue
        flat = tensor.detach().reshape(-1)
        if any(not bool(torch.isfinite(part).all()) for part in flat.split(chunk)):
            bad.append(name)
    return bad


def refuse_nonfinite(named, where) -> None:
    """One InputError naming the first tensor with NaN or infinite values (a damaged or diverged checkpoint
    would otherwise score tau 1.00 without a word)."""
    from ..core.errors import nonfinite_error

    bad = nonfinite_tensors(named)
    if bad:
        raise nonfinite_error(where, bad)


def load_drafter(spec: DrafterSpec, weight_files: Sequence[Path], *, device="cpu", dtype=torch.float32) -> DFlashDrafter:
    """Build the module and load the checkpoint strictly (names were validated against the spec); a float
    weight with NaN or inf values is refused by name, and so is a weight that is not float (never cast)."""
    from safetensors.torch import load_file

    from ..core.errors import InputError

    state: dict[str, torch.Tensor] = {}
    for file in weight_files:
        loaded = load_file(str(file))
        for name, tensor in loaded.items():
            if name not in spec.ignored_weights and name != "d2t" and not tensor.is_floating_point():
                raise InputError(file, f"tensor {name!r} is {str(tensor.dtype).removeprefix('torch.')}: quantized "
                                       "or integer weights are not supported (they would have to be cast)")
        refuse_nonfinite(((n, t) for n, t in loaded.items() if n not in spec.ignored_weights), file)
        for old, native in spec.weight_renames:  # a layout's own names (muse_glimmer_assistant's encoder.fc, ...)
            loaded = {native + n[len(old):] if n.startswith(old) else n: t for n, t in loaded.items()}
        state.update(loaded)
    for name in spec.ignored_weights:
        state.pop(name, None)
    with torch.device("meta"):
        model = DFlashDrafter(spec)
    model = model.to_empty(device=device)
    model.load_state_dict(state, strict=True)
    model.to(dtype=dtype)  # floating tensors only; d2t stays int64
    # inv_freq is a non-persistent buffer: meta init left it empty and .to(dtype) would round it to
    # bf16 (RoPE angles off by ~1e-2), so rebuild it in fp32 after the cast
    model.rotary = type(model.rotary)(model.rope_config).to(device)
    return model.eval().requires_grad_(False)
