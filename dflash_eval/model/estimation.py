"""Per-anchor acceptance probabilities at temperature > 0 on one sampled trajectory (the offline estimate).

For every anchor a of the sampled continuation and every drafted slot i, teacher-forced on the sampled
text exactly as `engine.replay` drafts at temperature 0 (same blocks, same masks, same chunks):
q_i = sampling_probs(drafter's logits for slot i), p_i = sampling_probs(lm_head(final hidden state at
a + i - 1)), the target's processed distribution for the token at a + i, and
alpha_i(a) = sum_x min(p_i, q_i) for the `sample` policy, p_i(argmax q_i) for `argmax`. estimates.py
turns them into the estimate. The drafter's and the target's logits are computed for a few hundred rows at
a time from the chunk's hidden states (the chunk's logits are never held whole; the argmax policy takes
its argmax in the lm_head's cache-sized pieces, model/lm_head.py), so a 248K vocabulary never needs more
than ~0.5 GB at once.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from ..core.semantics import draft_top_filters
from ..core.settings.run_settings import Scoring
from ..core.settings.work import Sampling
from .dflash2 import candidate_probs, teacher_forced_scores
from .drafter import DFlashDrafter
from .engine import anchor_chunks
from .sampling import sampling_probs, to_target_vocab

ROWS_PER_PASS = 256


@torch.inference_mode()
def anchor_alphas(drafter: DFlashDrafter, taps: torch.Tensor, tokens: torch.Tensor, hidden: torch.Tensor,
                  lm_head, prompt_len: int, scoring: Scoring, sampling: Sampling, *,
                  anchor_in_context: bool = False, block_offset: int = 0) -> list[list[float]]:
    """alphas[a - prompt_len] = [alpha_1(a), ...] over the slots of anchor a that lie inside the text
    (`scoring`: the cap, the final block rule and the anchors per forward, as the greedy replay's)."""
    T = int(tokens.shape[0])
    max_new_tokens, shorter_final_block, anchor_batch = (scoring.max_new_tokens, scoring.shorter_final_block,
                                                         scoring.anchor_batch)
    out: list[list[float]] = []
    # vLLM's probabilistic drafts: softmax(logits / T) without top-p / top-k (core/semantics.py)
    draft_sampling = sampling if draft_top_filters(drafter.spec.semantics) else replace(sampling, top_p=1.0, top_k=0)
    dflash2 = drafter.spec.is_dflash2  # q: the candidates' softmax(score / T) given the text's previous token
    for chunk, lengths, states in anchor_chunks(drafter, drafter.context(taps), tokens, prompt_len, max_new_tokens,
                                                shorter_final_block=shorter_final_block, anchor_batch=anchor_batch,
                                                anchor_in_context=anchor_in_context, block_offset=block_offset,
                                                hidden=dflash2):
        if dflash2:
            states = states[0][states[1]]  # the slots' hidden states, flattened in block order
        rows, positions, owners = [], [], []
        offset = 0
        for index, (a, length) in enumerate(zip(chunk, lengths)):
            for i in range(1, length):
                if a + i < T:  # slot i predicts the token at a + i, from the target's state at a + i - 1
                    rows.append(offset + i)
                    positions.append(a + i - 1)
                    owners.append(index)
            offset += length
        values = torch.empty(len(rows), dtype=torch.float32)
        for part in range(0, len(rows), ROWS_PER_PASS):
            pick = torch.tensor(rows[part:part + ROWS_PER_PASS], device=states.device)
            where = torch.tensor(positions[part:part + ROWS_PER_PASS], device=hidden.device)
            p = sampling_probs(lm_head(hidden[where]), sampling)
            slot_states = states[pick]
            if dflash2:
                ids, scores = teacher_forced_scores(drafter, slot_states, tokens[where.cpu()].to(slot_states.device))
                if sampling.draft_policy == "argmax":
                    alpha = p.gather(-1, ids.gather(-1, scores.argmax(-1, keepdim=True)).to(p.device))[:, 0]
                else:
                    alpha = torch.minimum(p, candidate_probs(ids, scores, sampling.temperature, p.shape[-1]).to(p.device)).sum(-1)
            elif sampling.draft_policy == "argmax":
                drafted = drafter.greedy_ids(slot_states).to(p.device)
                alpha = p.gather(-1, drafted[:, None])[:, 0]
            else:
                q = to_target_vocab(drafter, sampling_probs(drafter.logits(slot_states), draft_sampling),
                                    p.shape[-1]).to(p.device)
                alpha = torch.minimum(p, q).sum(-1)
            values[part:part + len(pick)] = alpha.float().cpu()
        per_anchor: list[list[float]] = [[] for _ in chunk]
        for owner, value in zip(owners, values.tolist()):
            per_anchor[owner].append(min(1.0, value))
        out.extend(per_anchor)
    return out
