"""The DFlash2 drafter and its draft rule: the serving walk over the candidate selector's edge scores.

Why a module of its own: DFlash2 keeps DFlash's body (`drafter.py`) and adds two things that change the
drafts, both read from the packages (speculators 0.9.0 `models/dflash2/model_definitions.py`, vLLM 0.33.0
`model_executor/models/qwen3_dflash2.py` and `v1/worker/gpu/spec_decode/dflash2/speculator.py`):

- around each layer's attention and MLP, a grouped dynamic causal convolution over the slots of a block:
  with x [slots, H] split into H/g groups of g channels and kernel size K, a projection of x gives per slot
  2 x K x (H/g) dynamic coefficients (input side, output side), and
      conv(x, delta, base)[j] = sum_{t < K, t <= j} (base[t] + delta[j, t, group]) * x[j - t]
  (slot j reads itself and the K - 1 slots before it in its own block, never the previous block). The layer:
      h = input_layernorm(x); h, d = prepare(h); h = attention(h); x = x + finish(h, d)   (same for the MLP)
  where prepare convolves with base_kernel[0] and the input-side coefficients, and finish with
  base_kernel[1] and the output-side ones. The context rows (taps) never pass through it.
- the candidate selector: per drafted slot j (1..L-1), the unary candidates are the top-K tokens of the
  drafter's logits (ranked on the raw logits, values after output_multiplier then the softcap); the edge
  score of candidate c after predecessor p is
      score_j(p, c) = unary_j(c) + sum_r P[p, r] * (W h_j)[r] * S[c, r]
  with P/S the predecessor/successor codebooks, W the hidden projection, h_j the slot's final (normed)
  hidden state; the predecessor of slot 1 is the anchor token, of slot j > 1 a candidate of slot j - 1.
  The draft is the serving walk: slot by slot the best-scoring candidate given the one chosen before
  (greedy); at temperature T > 0 a draw from softmax(score / T) over the K candidates (vLLM's Gumbel-noised
  argmax), and that distribution, zero outside the candidates, is the draft distribution the rejection
  step reads (vLLM caches the realized row's scores, -inf elsewhere, and applies T there).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..core.spec import DrafterSpec


def grouped_causal_conv(x: torch.Tensor, delta: torch.Tensor, base: torch.Tensor, group_size: int) -> torch.Tensor:
    """x [A, L, H] (L slots of A blocks); delta [A, L, K, H/g]; base [K, H] -> [A, L, H]."""
    A, L, H = x.shape
    kernel = base.shape[0]
    groups = x.view(A, L, H // group_size, group_size)
    out = torch.zeros_like(groups)
    for tap in range(min(kernel, L)):
        coefficient = base[tap].to(x.dtype).view(H // group_size, group_size) + delta[:, :, tap, :, None]
        shifted = F.pad(groups[:, : L - tap], (0, 0, 0, 0, tap, 0))  # slot j reads slot j - tap (zero before 0)
        out = out + coefficient * shifted
    return out.view(A, L, H)


class GroupedDynamicConv(nn.Module):
    """One layer side's pair of convolutions (input and output of attention, or of the MLP)."""

    def __init__(self, hidden_size: int, kernel_size: int, group_size: int):
        super().__init__()
        self.kernel_size, self.group_size, self.groups = kernel_size, group_size, hidden_size // group_size
        self.base_kernel = nn.Parameter(torch.zeros(2, kernel_size, hidden_size))
        self.kernel_projection = nn.Linear(hidden_size, 2 * kernel_size * self.groups, bias=False)

    def prepare(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x [A, L, H] -> (the convolved input, the output side's coefficients)."""
        A, L, _ = x.shape
        coefficients = self.kernel_projection(x).view(A, L, 2, self.kernel_size, self.groups)
        return (grouped_causal_conv(x, coefficients[:, :, 0], self.base_kernel[0], self.group_size),
                coefficients[:, :, 1])

    def finish(self, x: torch.Tensor, coefficients: torch.Tensor) -> torch.Tensor:
        return grouped_causal_conv(x, coefficients, self.base_kernel[1], self.group_size)


def layer_forward_blocks(layer, x: torch.Tensor, context, rope_block, masks) -> torch.Tensor:
    """One DFlash2 decoder layer over A blocks (`drafter.DrafterLayer.forward_blocks` for a DFlash2 spec)."""
    h, after = layer.attention_conv.prepare(layer.input_layernorm(x))
    x = x + layer.attention_conv.finish(layer.self_attn.forward_blocks(h, context, rope_block, masks), after)
    h, after = layer.mlp_conv.prepare(layer.post_attention_layernorm(x))
    return x + layer.mlp_conv.finish(layer.mlp(h), after)


class CandidateSelector(nn.Module):
    def __init__(self, spec: DrafterSpec):
        super().__init__()
        self.top_k = spec.selector_top_k
        self.predecessor_codebook = nn.Parameter(torch.zeros(spec.vocab_size, spec.selector_rank))
        self.successor_codebook = nn.Parameter(torch.zeros(spec.vocab_size, spec.selector_rank))
        self.hidden_projection = nn.Linear(spec.hidden_size, spec.selector_rank, bias=False)

    def transition(self, hidden: torch.Tensor, predecessors: torch.Tensor, candidates: torch.Tensor) -> torch.Tensor:
        """The low-rank term: hidden [..., H], predecessors [..., P], candidates [..., C] -> [..., P, C]."""
        context = self.predecessor_codebook[predecessors] * self.hidden_projection(hidden)[..., None, :]
        return context @ self.successor_codebook[candidates].transpose(-1, -2)


def candidates(drafter, hidden: torch.Tensor, observe=None) -> tuple[torch.Tensor, torch.Tensor]:
    """hidden [..., H] -> (candidate ids [..., K], unary logits [..., K]): the top-K of the raw logits,
    their values after output_multiplier and then the softcap (vLLM's `get_top_k_tokens`). The raw logits
    are computed a row piece at a time (model/lm_head.py `row_pieces`), never for a whole chunk at once;
    `observe(rows, 0, logits)` sees each piece's whole-vocabulary logits after the multiplier and softcap
    (model/tree_scoring.py: the unary tree from the same product)."""
    from .lm_head import row_pieces

    spec = drafter.spec
    head = drafter.lm_head_table()
    flat = hidden.reshape(-1, hidden.shape[-1])
    ids = torch.empty(flat.shape[0], spec.selector_top_k, dtype=torch.long, device=flat.device)
    values = torch.empty(flat.shape[0], spec.selector_top_k, dtype=torch.float32, device=flat.device)
    for part in row_pieces(flat.shape[0], head, flat):
        raw = head(flat[part])
        if observe is not None:
            observe(part, 0, drafter.logit_transform(raw))
        top = raw.topk(spec.selector_top_k, dim=-1).indices
        ids[part], values[part] = top.to(ids.device), raw.gather(-1, top).float().to(values.device)
    shape = (*hidden.shape[:-1], spec.selector_top_k)
    ids, values = ids.view(shape), values.view(shape)
    if spec.output_multiplier != 1.0:
        values = values * spec.output_multiplier
    if spec.logit_softcap is not None:
        values = torch.tanh(values / spec.logit_softcap) * spec.logit_softcap
    return ids, values


def edge_scores(drafter, hidden: torch.Tensor, anchor_ids: torch.Tensor, observe=None) -> tuple[torch.Tensor, torch.Tensor]:
    """hidden [A, S, H] of the drafted slots 1..S, anchor_ids [A] -> (candidates [A, S, K],
    scores [A, S, K previous, K current]); slot 1's rows all hold the anchor as predecessor."""
    ids, unary = candidates(drafter, hidden, observe)
    K = ids.shape[-1]
    previous = torch.cat([anchor_ids[:, None, None].expand(-1, 1, K), ids[:, :-1]], dim=1)
    edge = drafter.candidate_selector.transition(hidden, previous, ids)
    return ids, unary[:, :, None, :] + edge.float()


def serving_walk(ids: torch.Tensor, scores: torch.Tensor, temperature: float = 0.0,
                 generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The draft: (token ids [A, S], realized scores [A, S, K]: the row each choice was made from).

    ids [A, S, K] candidates; scores [A, S, K, K] from `edge_scores`. Slot 1 reads row 0 (every row holds
    the anchor as predecessor), slot j > 1 the row of the candidate chosen at j - 1; greedy takes the row's
    best (the first on ties, as an argmax over the candidates in rank order), T > 0 draws from
    softmax(row / T)."""
    A, S, K = ids.shape
    rows = torch.arange(A, device=ids.device)
    previous = torch.zeros(A, dtype=torch.long, device=ids.device)
    tokens, realized = [], []
    for j in range(S):
        row = scores[rows, j, previous]  # [A, K]
        if temperature > 0:
            index = torch.multinomial(torch.softmax(row.float() / temperature, -1), 1, generator=generator)[:, 0]
        else:
            index = row.argmax(-1)
        tokens.append(ids[rows, j, index])
        realized.append(row)
        previous = index
    if not tokens:
        return ids.new_zeros(A, 0), scores.new_zeros(A, 0, K)
    return torch.stack(tokens, 1), torch.stack(realized, 1)


def walk_drafts(drafter, hidden: torch.Tensor, anchor_ids: torch.Tensor, temperature: float = 0.0,
                generator: torch.Generator | None = None, observe=None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """hidden [A, L, H] of whole blocks (slot 0 = the anchor's), anchor_ids [A] -> (drafts [A, L - 1],
    candidates [A, L - 1, K], realized scores [A, L - 1, K]) for slots 1..L-1."""
    ids, scores = edge_scores(drafter, hidden[:, 1:], anchor_ids, observe)
    tokens, realized = serving_walk(ids, scores, temperature, generator)
    return tokens, ids, realized


def candidate_probs(candidates: torch.Tensor, realized: torch.Tensor, temperature: float, vocab: int) -> torch.Tensor:
    """The draft distribution at T > 0: softmax(realized / T) on the candidates, 0 elsewhere ([..., vocab])."""
    probs = torch.softmax(realized.float() / temperature, -1)
    return torch.zeros(*probs.shape[:-1], vocab, dtype=probs.dtype, device=probs.device).scatter_add(-1, candidates, probs)


def flat_greedy_drafts(drafter, hidden: torch.Tensor, valid: torch.Tensor, anchor_ids: torch.Tensor,
                       observe=None) -> torch.Tensor:
    """The greedy walk over blocks from `drafting.draft_hidden`, laid out as `drafter.logits(...).argmax`
    would be: [N] in block order, slot 0 = the anchor token (not a prediction), then the drafts; `observe`
    sees the logits of slots 1..L-1 of every block, [A x (L - 1)] rows in block order (`candidates`)."""
    tokens, _, _ = walk_drafts(drafter, hidden, anchor_ids, observe=observe)
    return torch.cat([anchor_ids[:, None].to(tokens.dtype), tokens], 1)[valid]


def teacher_forced_scores(drafter, hidden: torch.Tensor, predecessors: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Candidates [n, K] and their scores [n, K] for slots whose predecessor is given (the offline estimate:
    the text's token before the slot, the anchor for slot 1), as speculators' `score_candidates` scores them."""
    ids, unary = candidates(drafter, hidden)
    edge = drafter.candidate_selector.transition(hidden, predecessors[:, None], ids)[:, 0]
    return ids, unary + edge.float()

