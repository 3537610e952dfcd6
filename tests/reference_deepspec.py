"""DeepSpec's DFlash drafter, restated as a test-only oracle (deepseek-ai/DeepSpec at afdfa7c, MIT; DeepSpec is
not on the package index, so its forward is re-expressed here from its code, sharing nothing with dflash_eval).

What it restates, file and function:
- `deepspec/modeling/dspark/qwen3/modeling.py`: `Qwen3DSparkModel._forward_backbone` (ctx = hidden_norm(fc(taps)),
  rotary angles for [context positions | block positions], the layers, the final norm), `Qwen3DSparkAttention.
  forward` (queries from the block only; keys and values = [k_proj / v_proj of the context | of the block],
  k_norm on both, RoPE with the queries taking the angles of the last q_len positions: its own
  `apply_rotary_pos_emb`), `Qwen3DSparkDecoderLayer.forward` (pre-norm residual attention + MLP),
  `compute_logits` (its own lm_head);
- `deepspec/modeling/dspark/common.py`: `create_noise_embed` ([anchor, MASK, ...] per block),
  `create_position_ids` (anchor + 0..B-1), `create_dspark_attention_mask` (a block's queries see context rows
  kv < anchor and their own block, both directions), `extract_context_feature` (HF hidden_states[id + 1]);
- `deepspec/eval/dspark/draft_ops.py`: `forward_dspark_draft_block` (the evaluator: the context rows before the
  anchor, positions 0 .. start + B - 1, no mask, is_causal False) and `build_dspark_proposal` (the B drafts are
  the argmax of the logits at block slots 0..B-1: slot j predicts anchor + j + 1).

Built from transformers' Qwen3 pieces, as DeepSpec builds it (Qwen3RMSNorm, Qwen3MLP, Qwen3RotaryEmbedding), with
an explicit fp32 attention (softmax over masked scores) instead of its SDPA / flex dispatch.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn


class DeepSpecDrafter(nn.Module):
    """Qwen3DSparkModel with markov_rank 0 and no confidence head (DeepSpec's DFlash configs), loaded from a
    checkpoint folder as `from_pretrained` would: config.json and model.safetensors under its own names."""

    def __init__(self, folder: Path):
        super().__init__()
        from safetensors.torch import load_file
        from transformers import Qwen3Config
        from transformers.models.qwen3.modeling_qwen3 import Qwen3MLP, Qwen3RMSNorm, Qwen3RotaryEmbedding

        raw = json.loads((Path(folder) / "config.json").read_text())
        config = Qwen3Config.from_dict({k: v for k, v in raw.items() if k != "model_type"})
        self.config, self.block_size, self.mask_token_id = config, int(raw["block_size"]), int(raw["mask_token_id"])
        self.target_layer_ids = list(raw["target_layer_ids"])
        h, heads, kv = config.hidden_size, config.num_attention_heads, config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or h // heads
        self.heads, self.kv_heads = heads, kv
        self.embed_tokens = nn.Embedding(config.vocab_size, h)
        self.fc = nn.Linear(len(self.target_layer_ids) * h, h, bias=False)
        self.hidden_norm = Qwen3RMSNorm(h, eps=config.rms_norm_eps)
        self.norm = Qwen3RMSNorm(h, eps=config.rms_norm_eps)
        self.lm_head = nn.Linear(h, config.vocab_size, bias=False)
        self.rotary_emb = Qwen3RotaryEmbedding(config)
        self.layers = nn.ModuleList()
        for _ in range(config.num_hidden_layers):
            layer = nn.Module()
            layer.input_layernorm = Qwen3RMSNorm(h, eps=config.rms_norm_eps)
            layer.post_attention_layernorm = Qwen3RMSNorm(h, eps=config.rms_norm_eps)
            layer.mlp = Qwen3MLP(config)
            attn = nn.Module()
            bias = config.attention_bias
            attn.q_proj = nn.Linear(h, heads * self.head_dim, bias=bias)
            attn.k_proj = nn.Linear(h, kv * self.head_dim, bias=bias)
            attn.v_proj = nn.Linear(h, kv * self.head_dim, bias=bias)
            attn.o_proj = nn.Linear(heads * self.head_dim, h, bias=bias)
            attn.q_norm = Qwen3RMSNorm(self.head_dim, eps=config.rms_norm_eps)
            attn.k_norm = Qwen3RMSNorm(self.head_dim, eps=config.rms_norm_eps)
            layer.self_attn = attn
            self.layers.append(layer)
        state = load_file(str(Path(folder) / "model.safetensors"))
        self.load_state_dict(state, strict=False)  # rotary_emb.inv_freq is built, not stored
        missing = set(self.state_dict()) - set(state) - {"rotary_emb.inv_freq", "rotary_emb.original_inv_freq"}
        assert not missing, f"checkpoint lacks {sorted(missing)[:3]}"
        self.eval()

    @staticmethod
    def _rotate_half(x):
        half = x.shape[-1] // 2
        return torch.cat((-x[..., half:], x[..., :half]), dim=-1)

    def _attention(self, layer, x, target, cos, sin, allowed):
        """Qwen3DSparkAttention.forward: x [1, Q, H] the block, target [1, C, H] the projected context."""
        attn = layer.self_attn
        q_len, ctx_len, hd = x.shape[1], target.shape[1], self.head_dim
        q = attn.q_norm(attn.q_proj(x).view(1, q_len, self.heads, hd)).transpose(1, 2)
        k = torch.cat([attn.k_proj(target), attn.k_proj(x)], dim=1).view(1, ctx_len + q_len, self.kv_heads, hd)
        v = torch.cat([attn.v_proj(target), attn.v_proj(x)], dim=1).view(1, ctx_len + q_len, self.kv_heads, hd)
        k, v = attn.k_norm(k).transpose(1, 2), v.transpose(1, 2)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)  # queries take the angles of the last q_len positions
        q = q * cos[..., -q_len:, :] + self._rotate_half(q) * sin[..., -q_len:, :]
        k = k * cos + self._rotate_half(k) * sin
        group = self.heads // self.kv_heads
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        scores = (q.float() @ k.float().transpose(-1, -2)) * hd ** -0.5
        if allowed is not None:
            scores = scores.masked_fill(~allowed, float("-inf"))
        out = torch.softmax(scores, dim=-1).to(v.dtype) @ v
        return attn.o_proj(out.transpose(1, 2).reshape(1, q_len, self.heads * hd))

    def backbone(self, context: torch.Tensor, noise: torch.Tensor, positions: torch.Tensor, allowed=None):
        """_forward_backbone: context [1, C, n*H] taps, noise [1, Q, H] block embeddings, positions [1, C + Q];
        allowed: [1, 1, Q, C + Q] bool (training) or None (the evaluator: everything given is visible)."""
        target = self.hidden_norm(self.fc(context))
        cos, sin = self.rotary_emb(noise, positions)
        x = noise
        for layer in self.layers:
            x = x + self._attention(layer, layer.input_layernorm(x), target, cos, sin, allowed)
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        return self.norm(x)

    def noise(self, tokens: torch.Tensor, anchors: list[int]) -> torch.Tensor:
        """create_noise_embed: [anchor token, MASK x B - 1] per block, embedded with the checkpoint's table."""
        ids = torch.full((len(anchors) * self.block_size,), self.mask_token_id, dtype=torch.long)
        ids[:: self.block_size] = tokens[torch.tensor(anchors)]
        return self.embed_tokens(ids)[None]

    @torch.no_grad()
    def training_logits(self, tokens: torch.Tensor, taps: torch.Tensor, anchors: list[int]) -> torch.Tensor:
        """Qwen3DSparkModel.forward with these anchors (instead of sampled ones): [A, B, V], slot j of anchor a
        scored against token a + j + 1. The mask is create_dspark_attention_mask's."""
        T, B, A = tokens.shape[0], self.block_size, len(anchors)
        positions = torch.cat([torch.arange(T), (torch.tensor(anchors)[:, None] + torch.arange(B)).reshape(-1)])[None]
        q_block = torch.arange(A * B) // B
        kv = torch.arange(T + A * B)
        anchor_of_query = torch.tensor(anchors)[q_block]
        context = (kv[None, :] < T) & (kv[None, :] < anchor_of_query[:, None])
        own_block = (kv[None, :] >= T) & ((kv[None, :] - T) // B == q_block[:, None])
        allowed = (context | own_block)[None, None]
        hidden = self.backbone(taps[None], self.noise(tokens, anchors), positions, allowed)
        return self.lm_head(hidden)[0].view(A, B, -1)

    @torch.no_grad()
    def evaluator_logits(self, tokens: torch.Tensor, taps: torch.Tensor, start: int) -> torch.Tensor:
        """forward_dspark_draft_block with an empty draft cache: context rows 0..start-1, the block at start; no
        mask (is_causal False). build_dspark_proposal's drafts are the argmax of these [B, V] logits."""
        positions = torch.arange(start + self.block_size)[None]
        hidden = self.backbone(taps[None, :start], self.noise(tokens, [start]), positions, None)
        return self.lm_head(hidden)[0]


def extract_context_feature(hidden_states: tuple, layer_ids: list[int]) -> torch.Tensor:
    """common.extract_context_feature: HF output_hidden_states[id + 1] per tap (-1: the embeddings), concatenated."""
    return torch.cat([hidden_states[0 if i == -1 else i + 1] for i in layer_ids], dim=-1)
