"""An independent, deliberately naive restatement of the DFlash drafter equations (primer sections 1-2).

Written from the primer with plain tensor ops, one anchor and one query slot at a time, sharing no
code with `dflash_eval` (no masks module, no SDPA, no RMSNorm class, its own RoPE from rope_theta), so
that agreement with the package's batched, masked implementation means something.
"""

from __future__ import annotations

import math

import torch


def rms(x, w, eps):
    return w * (x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps))


def rope(x, pos, theta):
    """x: [heads, hd] at one absolute position (rotate-half convention, HF default rope)."""
    hd = x.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    ang = pos * inv
    cos = torch.cat([ang.cos(), ang.cos()]).to(x.dtype)
    sin = torch.cat([ang.sin(), ang.sin()]).to(x.dtype)
    x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


def reference_block_logits(w, cfg, taps, anchor_pos, block_ids, embed, lm_head):
    """Logits [len(block_ids), V] for one block anchored at `anchor_pos`.

    w: dict of checkpoint tensors (z-lab names); cfg: dict with n_layers, heads, kv_heads, hd, eps, theta,
    layers = list of (window or None, causal_in_block, window_from): window_from "anchor" = context rows
    a - W <= p < a (speculators), "query" = keys with q - k < W (and k - q < W when not causal), in the
    block too (z-lab); taps: [T, n*H] with T >= anchor_pos rows;
    embed / lm_head: weight matrices of the table owners."""
    eps, hd = cfg["eps"], cfg["hd"]
    ctx = rms(taps @ w["fc.weight"].T, w["hidden_norm.weight"], eps)
    x = embed[block_ids].clone()
    L = len(block_ids)
    for i, (window, causal, window_from) in enumerate(cfg["layers"]):
        p = f"layers.{i}."
        h = rms(x, w[p + "input_layernorm.weight"], eps)
        out = torch.zeros(L, cfg["heads"] * hd, dtype=x.dtype)
        group = cfg["heads"] // cfg["kv_heads"]
        for j in range(L):
            keys, values = [], []
            if window is None:
                visible_ctx = list(range(anchor_pos))
            elif window_from == "anchor":
                visible_ctx = [q for q in range(anchor_pos) if q >= anchor_pos - window]
            else:
                visible_ctx = [q for q in range(anchor_pos) if anchor_pos + j - q < window]
            for q in visible_ctx:
                k = (ctx[q] @ w[p + "self_attn.k_proj.weight"].T).view(cfg["kv_heads"], hd)
                keys.append(rope(rms(k, w[p + "self_attn.k_norm.weight"], eps), q, cfg["theta"]))
                values.append((ctx[q] @ w[p + "self_attn.v_proj.weight"].T).view(cfg["kv_heads"], hd))
            for jj in range(L if not causal else j + 1):
                if window is not None and window_from == "query" and abs(j - jj) >= window:
                    continue
                k = (h[jj] @ w[p + "self_attn.k_proj.weight"].T).view(cfg["kv_heads"], hd)
                keys.append(rope(rms(k, w[p + "self_attn.k_norm.weight"], eps), anchor_pos + jj, cfg["theta"]))
                values.append((h[jj] @ w[p + "self_attn.v_proj.weight"].T).view(cfg["kv_heads"], hd))
            q = (h[j] @ w[p + "self_attn.q_proj.weight"].T).view(cfg["heads"], hd)
            q = rope(rms(q, w[p + "self_attn.q_norm.weight"], eps), anchor_pos + j, cfg["theta"])
            K, V = torch.stack(keys), torch.stack(values)  # [n_keys, kv_heads, hd]
            for head in range(cfg["heads"]):
                kv = head // group
                scores = (K[:, kv] @ q[head]) / math.sqrt(hd)
                out[j, head * hd:(head + 1) * hd] = torch.softmax(scores, 0) @ V[:, kv]
        x = x + out @ w[p + "self_attn.o_proj.weight"].T
        h = rms(x, w[p + "post_attention_layernorm.weight"], eps)
        gate = h @ w[p + "mlp.gate_proj.weight"].T
        x = x + (torch.nn.functional.silu(gate) * (h @ w[p + "mlp.up_proj.weight"].T)) @ w[p + "mlp.down_proj.weight"].T
    return rms(x, w["norm.weight"], eps) @ lm_head.T
