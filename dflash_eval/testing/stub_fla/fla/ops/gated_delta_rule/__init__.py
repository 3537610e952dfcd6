"""The stub's gated delta rule: fla 0.6.0's call signatures, one token at a time in float32 torch.

The recurrence (per head, state S of shape [K, V]): S <- exp(g_t) S; S <- S + beta_t k_t (v_t - S^T k_t)^T;
o_t = scale * S^T q_t; with `use_qk_l2norm_in_kernel` q and k are L2-normalised first (eps 1e-6, as
transformers' fallback does), and q/k heads are repeated to the value heads when there are fewer
(grouped value attention). Inputs [B, T, H, K|V]; g, beta [B, T, HV]; states [B, HV, K, V] in float32.
`CALLS` counts the calls per function (tests and the rehearsal read it)."""

from __future__ import annotations

import os

import torch

CALLS = {"chunk_gated_delta_rule": 0, "fused_recurrent_gated_delta_rule": 0}


def _refuse_cpu(name: str, tensor: torch.Tensor) -> None:
    if tensor.device.type == "cpu" and os.environ.get("DFLASH_EVAL_STUB_FLA_ON_CPU") != "1":
        raise RuntimeError(f"fla {name}: Triton kernel launched on CPU tensors (the real fla kernels need CUDA; "
                           "this process should run with fla unbound or the torch fallback)")


def _l2norm(x: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt((x * x).sum(dim=-1, keepdim=True) + 1e-6)


def _gated_delta(name, q, k, v, g, beta, scale, initial_state, output_final_state, use_qk_l2norm_in_kernel,
                 cu_seqlens):
    _refuse_cpu(name, q)
    if cu_seqlens is not None:  # dflash-eval's batches are padded, never packed, so its calls pass no cu_seqlens;
        # refused rather than computed wrongly, so a rehearsal that reached it would fail loudly
        raise NotImplementedError(f"fla stub {name}: packed sequences (cu_seqlens) are not implemented")
    CALLS[name] += 1
    dtype = v.dtype
    q, k, v, g, beta = (x.float() for x in (q, k, v, g, beta))
    if use_qk_l2norm_in_kernel:
        q, k = _l2norm(q), _l2norm(k)
    if v.shape[2] != q.shape[2]:
        q = q.repeat_interleave(v.shape[2] // q.shape[2], dim=2)
        k = k.repeat_interleave(v.shape[2] // k.shape[2], dim=2)
    batch, steps, heads, key_dim = q.shape
    scale = key_dim ** -0.5 if scale is None else scale
    state = (torch.zeros(batch, heads, key_dim, v.shape[-1], device=q.device) if initial_state is None
             else initial_state.float().clone())
    out = torch.empty(batch, steps, heads, v.shape[-1], device=q.device)
    for t in range(steps):
        state = state * g[:, t].exp()[..., None, None]
        delta = (v[:, t] - torch.einsum("bhk,bhkv->bhv", k[:, t], state)) * beta[:, t][..., None]
        state = state + k[:, t][..., None] * delta[..., None, :]
        out[:, t] = torch.einsum("bhk,bhkv->bhv", q[:, t] * scale, state)
    return out.to(dtype), (state if output_final_state else None)


def chunk_gated_delta_rule(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
                           use_qk_l2norm_in_kernel=False, use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False,
                           state_v_first=False, cu_seqlens=None, cu_seqlens_cpu=None, chunk_indices=None,
                           cp_context=None, **kwargs):
    return _gated_delta("chunk_gated_delta_rule", q, k, v, g, beta, scale, initial_state, output_final_state,
                        use_qk_l2norm_in_kernel, cu_seqlens)


def fused_recurrent_gated_delta_rule(q, k, v, g=None, gk=None, gv=None, beta=None, scale=None, initial_state=None,
                                     output_final_state=False, use_qk_l2norm_in_kernel=False, use_gate_in_kernel=False,
                                     A_log=None, dt_bias=None, use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False,
                                     state_v_first=False, cu_seqlens=None, **kwargs):
    return _gated_delta("fused_recurrent_gated_delta_rule", q, k, v, g, beta, scale, initial_state,
                        output_final_state, use_qk_l2norm_in_kernel, cu_seqlens)
