"""Anchor-block attention masks: which keys each drafted slot may see.

Two layouts, one rule. Evaluation drafts A blocks of up to L slots, each slot against the context and
its own block (`block_masks`: [A, L, C] and [A, L, L], linear in A). Training and the dense oracle lay the
slots end to end (N = sum of block lengths) against `[context (C rows) | all blocks (N rows)]`
(`anchor_block_mask`: [N, C + N], built from `block_masks`). For query slot j of the block anchored at
position a (primer section 2):

- context row p is visible iff p < a (strict: the anchor's own hidden state is never context);
- keys of the same block are visible (all of them, or only slots <= j when the layer is causal in block);
- other blocks are never visible;
- a window W, measured from where the layer's rule says (semantics.py): from the anchor (speculators'
  training mask: context rows p >= a - W, no window inside the block), or from the query at q = a + j
  (z-lab's `_attention_mask`, vLLM, SGLang: key k visible iff q - k < W, and k - q < W when not causal, for
  context rows and block slots alike; llama.cpp: q - k < W only, engine_rules.py).

`anchor_in_context=True` builds the classic train/eval skew (p <= a) on purpose, for the doctor.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..core.attention import LayerAttention


def block_layout(anchors: Sequence[int], block_lengths: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per flattened query: its anchor, its slot index j, and its block index."""
    anchor_of = torch.repeat_interleave(torch.as_tensor(list(anchors), dtype=torch.long),
                                        torch.as_tensor(list(block_lengths), dtype=torch.long))
    block_of = torch.repeat_interleave(torch.arange(len(anchors)), torch.as_tensor(list(block_lengths), dtype=torch.long))
    starts = torch.cumsum(torch.as_tensor([0, *block_lengths[:-1]], dtype=torch.long), 0)
    slot_of = torch.arange(int(sum(block_lengths))) - starts[block_of]
    return anchor_of, slot_of, block_of


def block_positions(anchors: Sequence[int], block_lengths: Sequence[int]) -> torch.Tensor:
    """Absolute position of every flattened slot: anchor + j."""
    anchor_of, slot_of, _ = block_layout(anchors, block_lengths)
    return anchor_of + slot_of


def anchor_block_mask(
    anchors: Sequence[int],
    block_lengths: Sequence[int],
    context_len: int,
    attention: LayerAttention,
    *,
    anchor_in_context: bool = False,
    device: torch.device | str = "cpu",
) -> torch.Tensor:
    """Boolean [N, C + N] mask for one layer kind; True = may attend.

    The rule itself lives in `block_masks`; this lays its per-block masks out flat (the training layout),
    so the dense oracle and the block path can never disagree about which keys a slot sees."""
    ctx_part, own_part = block_masks(anchors, block_lengths, context_len, attention,
                                     anchor_in_context=anchor_in_context, device=device)
    _, slot_of, block_of = (t.to(device) for t in block_layout(anchors, block_lengths))
    visible_ctx = ctx_part[block_of, slot_of]  # [N, C]
    same_block = (block_of[:, None] == block_of[None, :]) & own_part[block_of[:, None], slot_of[:, None], slot_of[None, :]]
    return torch.cat([visible_ctx, same_block], dim=1)


def layer_masks(
    layers: Sequence[LayerAttention],
    anchors: Sequence[int],
    block_lengths: Sequence[int],
    context_len: int,
    *,
    anchor_in_context: bool = False,
    device: torch.device | str = "cpu",
) -> list[torch.Tensor]:
    """One mask per drafter layer; layers that attend alike share the same tensor."""
    built: dict[LayerAttention, torch.Tensor] = {}
    for layer in layers:
        if layer not in built:
            built[layer] = anchor_block_mask(anchors, block_lengths, context_len, layer,
                                             anchor_in_context=anchor_in_context, device=device)
    return [built[layer] for layer in layers]


def block_masks(
    anchors: Sequence[int],
    block_lengths: Sequence[int],
    context_len: int,
    attention: LayerAttention,
    *,
    anchor_in_context: bool = False,
    device: torch.device | str = "cpu",
    draft_window: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The same rule as `anchor_block_mask`, laid out per block for the linear-cost attention
    (drafter.DFlashDrafter.forward_blocks): context [A, L, C] and own block [A, L, L], L = max length.
    Slots past a block's length are padding: invisible as keys (their query rows are never read).

    `draft_window` W (--draft-window): on every layer, on top of its own rule, only the last W context rows
    before the anchor (a - W <= p < a), as SGLang serves `--speculative-draft-window-size` (its
    draft KV cache keeps the min(a, W) newest committed rows, positions stay absolute; page size 1)."""
    A, L = len(anchors), max(block_lengths)
    a = torch.as_tensor(list(anchors), dtype=torch.long, device=device)[:, None, None]  # [A, 1, 1]
    j = torch.arange(L, device=device)
    ctx = torch.arange(context_len, device=device)[None, None, :]
    visible_ctx = (ctx <= a) if anchor_in_context else (ctx < a)
    visible_ctx = visible_ctx.expand(A, L, context_len)
    lengths = torch.as_tensor(list(block_lengths), dtype=torch.long, device=device)
    real_key = j[None, None, :] < lengths[:, None, None]  # [A, 1, L]
    same_block = real_key.expand(A, L, L)
    if attention.causal_in_block:
        same_block = same_block & (j[None, :] <= j[:, None])[None]
    if attention.window is not None:
        W = attention.window
        if attention.window_from in ("query", "query_left"):
            q = a + j[None, :, None]  # [A, L, 1]
            visible_ctx = visible_ctx & (q - ctx < W)
            offset = j[:, None] - j[None, :]  # q - k inside the block
            same_block = same_block & (offset < W)[None]
            if not attention.causal_in_block and attention.window_from == "query":  # llama.cpp: no right limit
                same_block = same_block & (-offset < W)[None]
        else:
            visible_ctx = visible_ctx & (ctx >= a - W)
    if draft_window is not None:
        visible_ctx = visible_ctx & (ctx >= a - draft_window)
    # a padding slot sees itself, so no row is fully masked (a NaN there would reach real slots through
    # 0 * NaN in the next layer); real slots still never see padding
    padding = ~real_key.transpose(1, 2)  # [A, L, 1]: this query row is padding
    same_block = same_block | (padding & torch.eye(L, dtype=torch.bool, device=device)[None])
    return visible_ctx, same_block


def layer_block_masks(layers: Sequence[LayerAttention], anchors: Sequence[int], block_lengths: Sequence[int],
                      context_len: int, *, anchor_in_context: bool = False,
                      device: torch.device | str = "cpu",
                      draft_window: int | None = None) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """`block_masks` per drafter layer; layers that attend alike share the same tensors."""
    built: dict[LayerAttention, tuple[torch.Tensor, torch.Tensor]] = {}
    for layer in layers:
        if layer not in built:
            built[layer] = block_masks(anchors, block_lengths, context_len, layer,
                                       anchor_in_context=anchor_in_context, device=device, draft_window=draft_window)
    return [built[layer] for layer in layers]
