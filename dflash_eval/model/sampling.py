"""Sampling at temperature > 0, as z-lab's `dflash==0.1.0` loop does it (`dflash/model.py`), and the draft
policies serving engines offer.

- `sampling_probs`: z-lab's `_sampling_probs`, step for step: logits / T in fp32; top-k keeps the k largest
  scores (when 0 < k < V); softmax; top-p keeps the sorted tokens whose preceding cumulative mass is
  < top_p (so the token that crosses top_p stays), renormalises; scattered back to the full vocabulary.
- draft policies: `sample` (z-lab 0.1.0: every slot drawn independently from the drafter's processed
  distribution q; vLLM `draft_sample_method: probabilistic`) and `argmax` (the drafter's greedy token,
  q one-hot: vLLM `greedy`, the open z-lab change).
- `rejection_step`: the standard speculative-sampling rule z-lab's `_rejection_sample` applies: slot i
  is accepted when u_i * q_i(x_i) < p_i(x_i) with u_i ~ U[0, 1) (accept with probability
  min(1, p/q)), the accepted prefix is the leading run of acceptances; at the first rejection the next
  token comes from the residual max(p - q, 0) renormalised (p itself when the residual has no mass);
  when all slots are accepted, the bonus token is drawn from the target's distribution after the last.
  With q one-hot (argmax drafts) the same rule accepts with probability p(x) and the residual is p with
  x removed. The committed text is then an exact sample from the target's processed distribution.

Randomness comes from one `torch.Generator` per (seed, prompt, sample), so a result is reproducible and
independent of evaluation order; draws are made in z-lab's order and shapes (one multinomial over the
block's slots, one uniform vector per verify, one draw for the residual or bonus).
"""

from __future__ import annotations

import hashlib

import torch

from ..core.settings.work import DRAFT_POLICIES, Sampling  # noqa: F401  (the one sampling value, drawn with here)


def sampling_probs(logits: torch.Tensor, sampling: Sampling) -> torch.Tensor:
    """[..., V] logits -> the processed distribution the loop samples from (fp32), z-lab's order of steps."""
    scores = logits.float() / sampling.temperature
    vocab = scores.shape[-1]
    indices = None
    if 0 < sampling.top_k < vocab:
        scores, indices = torch.topk(scores, sampling.top_k, dim=-1)
    probs = torch.softmax(scores, dim=-1)
    if sampling.top_p < 1.0:
        ordered, order = probs.sort(dim=-1, descending=True)
        keep = ordered.cumsum(dim=-1) - ordered < sampling.top_p
        probs = torch.zeros_like(probs).scatter(-1, order, ordered * keep)
        probs = probs / probs.sum(dim=-1, keepdim=True)
    if indices is not None:
        probs = torch.zeros(*probs.shape[:-1], vocab, dtype=probs.dtype, device=probs.device).scatter(-1, indices, probs)
    return probs


def to_target_vocab(drafter, q: torch.Tensor, vocab: int) -> torch.Tensor:
    """q over the target vocabulary ([g, V]): a reduced draft vocabulary's mass moved to its target ids (d2t)."""
    if q.shape[-1] == vocab:
        return q
    ids = drafter.to_target_ids(torch.arange(q.shape[-1], device=q.device))
    return torch.zeros(q.shape[0], vocab, dtype=q.dtype, device=q.device).index_copy_(1, ids, q)


def draw(probs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """One token per row of [..., V] probabilities (one multinomial call, as z-lab's `_sample_probs`)."""
    shape = probs.shape[:-1]
    return torch.multinomial(probs.reshape(-1, probs.shape[-1]), 1, generator=generator).view(shape)


def generator_for(seed: int, prompt_id: str, sample: int, device: torch.device | str = "cpu") -> torch.Generator:
    """A generator seeded from (seed, prompt id, sample index): reproducible, order-independent."""
    digest = hashlib.sha256(f"{seed}\x1f{prompt_id}\x1f{sample}".encode()).digest()
    return torch.Generator(device=device).manual_seed(int.from_bytes(digest[:8], "little") & ((1 << 63) - 1))


def rejection_step(drafts: torch.Tensor, draft_probs: torch.Tensor | None, target_probs: torch.Tensor,
                   generator: torch.Generator) -> tuple[int, int]:
    """(accepted drafts n, the next token) for one verified block.

    drafts: [g] drafted target ids; draft_probs: [g, V] the distributions they were drawn from (None:
    argmax drafts, q one-hot); target_probs: [g + 1, V], row i the target's processed distribution for
    slot i + 1 (the last row gives the bonus token)."""
    g = drafts.shape[0]
    p = target_probs[:g].gather(-1, drafts[:, None])[:, 0]
    q = torch.ones_like(p) if draft_probs is None else draft_probs.gather(-1, drafts[:, None])[:, 0]
    u = torch.rand(q.shape, generator=generator, device=q.device, dtype=q.dtype)
    accepted = int((u * q < p).to(torch.int32).cumprod(-1).sum())
    if accepted == g:
        return accepted, int(draw(target_probs[g], generator))
    residual = target_probs[accepted].clone()
    if draft_probs is None:
        residual[drafts[accepted]] = 0.0
    else:
        residual.sub_(draft_probs[accepted])
    residual.clamp_min_(0)
    total = residual.sum()
    residual = residual / total if total > 0 else target_probs[accepted]
    return accepted, int(draw(residual, generator))
