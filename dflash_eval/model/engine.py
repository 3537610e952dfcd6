"""Exact offline replay of greedy speculative decoding (the trajectory engine).

At temperature 0 the text a speculative-decoding loop commits is the target's greedy continuation y,
whatever the drafter proposes. So instead of running the loop we (1) run the target once over
prompt + y to capture the taps, (2) run the drafter with *every* continuation position as an anchor,
many anchors per forward with the training mask, and get the accepted length n(a) for all anchors, then
(3) walk a0 = prompt_len, a_{i+1} = a_i + n(a_i) + 1. The walk reproduces the live loop step for step
(tested against `live.py`), and the all-anchor results give teacher-forced statistics for free.

End of generation, exactly as the live loop does it:
- near the length cap (prompt_len + max_new_tokens), z-lab's loop drafts a shorter block of
  min(B, remaining + 1) slots; with bidirectional in-block attention that changes the drafts themselves,
  so it is the default (`shorter_final_block=True`); vLLM keeps full-size blocks (False; a drafter under
  `--semantics vllm` always does, core/semantics.py VLLM_SERVING_RULES);
- each step records the tokens it actually *commits*, min(n + 1, tokens left after the anchor), as
  z-lab's `dflash_generate` does (`produced`): the step that reaches the cap or the stop token that ended
  y has no bonus token, and a walk's lengths always sum to len(y) - 1 (the prefill commits y[0]).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..core import batching
from ..core.semantics import shorter_final_block as final_block_rule
from ..core.settings.run_settings import Scoring
from .dflash2 import flat_greedy_drafts
from .drafter import DFlashDrafter
from .drafting import draft_hidden, draft_rows

NOT_SCORED = -1  # slot past the end of the sequence or not drafted (short final block)


@dataclass
class DrafterOnPrompt:
    """One drafter on one prompt: all anchors, then the greedy walk over them."""

    prompt_len: int
    anchors: list[int] = field(default_factory=list)  # every anchor evaluated, in order
    block_lengths: list[int] = field(default_factory=list)  # slots of the block at that anchor (incl. slot 0)
    accepted: list[int] = field(default_factory=list)  # n(a): leading right slots, clipped to what remains
    slot_correct: list[list[int]] = field(default_factory=list)  # [anchor][slot 1..B-1]: 1, 0 or NOT_SCORED
    drafts: list[list[int]] = field(default_factory=list)  # drafted target ids, slots 1..L-1
    walk_anchors: list[int] = field(default_factory=list)
    walk_accept_lengths: list[int] = field(default_factory=list)  # tokens committed per step: min(n + 1, left)
    walk_drafted: list[int] = field(default_factory=list)  # slots that could count at that step
    anchor_batch: int = 0  # anchors per drafter forward this prompt ran (the rule's, or the one given)
    tree: object = None  # core.tree.TreeOnPrompt with tree budgets (model/tree_scoring.py), else None


def block_length(anchor: int, cap_end: int, block_size: int, shorter_final_block: bool) -> int:
    """Slots in the block drafted at `anchor` (slot 0 included); cap_end = prompt_len + max_new_tokens."""
    room = cap_end - 1 - anchor  # tokens the loop may still commit after the anchor
    return max(1, min(block_size, room + 1)) if shorter_final_block else block_size


def drafter_anchor_batch(drafter: DFlashDrafter, seq_len: int) -> int:
    """Anchors per forward for this drafter on a sequence of `seq_len` tokens: the one rule,
    `core.batching.anchor_batch`, with the drafter's block size, heads and device kind."""
    spec = drafter.spec
    return batching.anchor_batch(seq_len, spec.block_size, spec.num_attention_heads, drafter.fc.weight.device.type)


def committed_tokens(n: int, anchor: int, seq_len: int) -> int:
    """Tokens a step commits: the n accepted drafts plus the bonus, clipped to what is left after the
    anchor (z-lab's `produced = min(acceptance_length + 1, max_length - start - 1)`, cut at a stop)."""
    return min(n + 1, seq_len - 1 - anchor)


def walk(result: DrafterOnPrompt, seq_len: int) -> None:
    """a0 = prompt_len, a_{i+1} = a_i + committed_i, until every token of the sequence is committed."""
    first = result.anchors[0] if result.anchors else result.prompt_len
    a = result.prompt_len
    while a < seq_len - 1:
        index = a - first
        committed = committed_tokens(result.accepted[index], a, seq_len)
        scorable = sum(1 for c in result.slot_correct[index] if c != NOT_SCORED)
        result.walk_anchors.append(a)
        result.walk_accept_lengths.append(committed)
        result.walk_drafted.append(max(scorable, 1))
        a += committed


def anchor_chunks(drafter: DFlashDrafter, ctx: torch.Tensor, tokens: torch.Tensor, prompt_len: int,
                  max_new_tokens: int, *, shorter_final_block: bool = True, anchor_batch: int | None = None,
                  anchor_in_context: bool = False, block_offset: int = 0, hidden: bool = False):
    """Every anchor a = prompt_len .. T-2 drafted teacher-forced, a chunk at a time: yields (anchors,
    block lengths, final hidden states [sum of lengths, H] with slot 0 included: `draft_rows`, which the
    caller takes through the lm_head in pieces), or with `hidden` the (hidden [A, L, H], valid [A, L]) pair
    of `draft_hidden` (DFlash2's walk reads whole blocks). The replay (temperature 0) and the estimate
    (temperature > 0) read the same blocks from here; `anchor_batch` None: `drafter_anchor_batch`."""
    B = drafter.spec.block_size
    T = int(tokens.shape[0])
    cap_end = prompt_len + max_new_tokens
    shorter_final_block = final_block_rule(drafter.spec.semantics, shorter_final_block)  # vLLM: always full
    tokens_dev = tokens.to(ctx.device)
    # the context's keys and values, per layer, once per prompt: every chunk of anchors reuses them
    context_kv = drafter.context_kv(ctx, torch.arange(ctx.shape[0], device=ctx.device))
    anchors = list(range(prompt_len, T - 1))  # the last token has nothing left to draft
    if anchor_batch is None:
        anchor_batch = drafter_anchor_batch(drafter, T)
    for start in range(0, len(anchors), anchor_batch):
        chunk = anchors[start:start + anchor_batch]
        lengths = [block_length(a, cap_end, B, shorter_final_block) for a in chunk]
        draft = draft_hidden if hidden else draft_rows
        yield chunk, lengths, draft(drafter, ctx, tokens_dev, chunk, lengths, anchor_in_context=anchor_in_context,
                                    block_offset=block_offset, context_kv=context_kv)


@torch.inference_mode()
def replay(
    drafter: DFlashDrafter,
    taps: torch.Tensor | None,
    tokens: torch.Tensor,
    prompt_len: int,
    scoring: Scoring,
    *,
    anchor_in_context: bool = False,
    block_offset: int = 0,
    ctx: torch.Tensor | None = None,
    labels: torch.Tensor | None = None,
    tree_budgets: tuple[int, ...] = (),
) -> DrafterOnPrompt:
    """All-anchor drafting over one trajectory, then the walk.

    scoring: the generation cap, the final block rule and the anchors per forward (core/settings/run_settings.
    Scoring: the one value every replay takes, so none forgets --final-block);
    taps: [T, n_taps * H] from one target pass over `tokens` (prompt + continuation, length T), None with `ctx`;
    ctx: precomputed drafter.context(taps) (the doctor reuses it across variants); labels: [T] the ids slot j
    of anchor a is scored against at a + j (default `tokens`; trained-taps scores against a training sample's
    teacher while its blocks are anchored on the stored text); tree_budgets: DDTree's tree at each budget,
    from the same drafter pass (model/tree_scoring.py reads the lm_head's pieces), walked into `result.tree`."""
    B = drafter.spec.block_size
    T = int(tokens.shape[0])
    if ctx is None:
        assert taps is not None, "replay needs the taps or their context (ctx)"
        ctx = drafter.context(taps)
    result = DrafterOnPrompt(prompt_len=prompt_len)
    max_new_tokens, shorter_final_block, anchor_batch = (scoring.max_new_tokens, scoring.shorter_final_block,
                                                         scoring.anchor_batch)
    if anchor_batch is None:
        anchor_batch = drafter_anchor_batch(drafter, T)
    result.anchor_batch = anchor_batch
    token_list = (tokens if labels is None else labels).tolist()
    trees = None
    if tree_budgets:
        from .tree_scoring import TreeReplay

        trees = TreeReplay(drafter, tree_budgets, token_list, T)
    for chunk, lengths, rows in anchor_chunks(drafter, ctx, tokens, prompt_len, max_new_tokens,
                                                shorter_final_block=shorter_final_block, anchor_batch=anchor_batch,
                                                anchor_in_context=anchor_in_context, block_offset=block_offset,
                                                hidden=drafter.spec.is_dflash2):
        observe = trees.chunk(chunk, lengths, rows) if trees else None
        if drafter.spec.is_dflash2:  # the serving walk over the candidate selector's scores (model/dflash2.py)
            drafted = flat_greedy_drafts(drafter, *rows, tokens[chunk].to(ctx.device), observe=observe).tolist()
        else:
            drafted = (drafter.greedy_ids(rows, observe=observe) if observe else drafter.greedy_ids(rows)).tolist()
        if trees:
            trees.finish_chunk()
        offset = 0
        for a, length in zip(chunk, lengths):
            block = drafted[offset + 1: offset + length]  # slot 0 is the anchor, not a prediction
            offset += length
            correct = []
            for j in range(1, B):
                if j < length and a + j < T:
                    correct.append(int(block[j - 1] == token_list[a + j]))
                else:
                    correct.append(NOT_SCORED)
            n = 0
            while n < len(correct) and correct[n] == 1:
                n += 1
            result.anchors.append(a)
            result.block_lengths.append(length)
            result.drafts.append(block)
            result.slot_correct.append(correct)
            result.accepted.append(n)
    walk(result, T)
    if trees:
        result.tree = trees.walked(result.anchors, prompt_len)
    return result


def self_consistency(greedy_full: torch.Tensor, tokens: torch.Tensor, prompt_len: int) -> tuple[int, int]:
    """(agreeing, total): continuation tokens equal to the argmax of one full-sequence forward.

    Incremental generation and one long forward should agree exactly in fp32; in bf16 a few tokens may
    flip, and each flip means the replay's 'target token' differs from what the live loop would verify."""
    T = int(tokens.shape[0])
    if T <= prompt_len:
        return 0, 0
    predicted = greedy_full[prompt_len - 1: T - 1].cpu()
    return int((predicted == tokens[prompt_len:].cpu()).sum()), T - prompt_len
