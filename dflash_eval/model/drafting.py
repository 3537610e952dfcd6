"""Draft many blocks at once: the one place that lays out blocks, masks and positions for the drafter.

Both the trajectory engine (every continuation position an anchor) and the live loop (one block per
step) call `draft_rows` (or `draft_hidden`, for DFlash2's walk), so the two can only differ in *which*
anchors and context they pass, never in how a block is built.

A drafter whose slot 0 drafts (`DrafterSpec.sample_from_anchor`: speculators' key, DeepSpec's DFlash) is laid
out here and only here: callers ask for blocks of L slots as for any drafter (slot 0 the anchor, slots 1..L-1
drafted), the network runs L - 1 slots ([anchor, MASK, ...] at anchor + 0..L-2, DeepSpec's
`forward_dspark_draft_block`), and its slot j - 1 is returned as slot j (it predicts anchor + j); the row
returned for slot 0 is the network's slot 0 again, which every caller drops as the anchor's.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .dflash2 import candidate_probs, walk_drafts
from .drafter import DFlashDrafter
from .masks import block_positions, layer_block_masks, layer_masks


def network_lengths(drafter: DFlashDrafter, block_lengths: Sequence[int]) -> list[int]:
    """The slots the network runs for blocks of these lengths: the same, or one fewer (at least one) for a
    drafter whose slot 0 drafts (module docstring)."""
    if not drafter.spec.sample_from_anchor:
        return list(block_lengths)
    return [max(1, length - 1) for length in block_lengths]


def as_block_slots(hidden: torch.Tensor, block_lengths: Sequence[int], drafter: DFlashDrafter) -> tuple[torch.Tensor,
                                                                                                        torch.Tensor]:
    """The network's [A, Ln, H] rows laid out as the callers' blocks of `block_lengths` slots: unchanged, or, for
    a drafter whose slot 0 drafts, network slot j - 1 as slot j and network slot 0 again as slot 0 (dropped)."""
    if drafter.spec.sample_from_anchor:
        hidden = torch.cat([hidden[:, :1], hidden], dim=1)
    L = hidden.shape[1]
    valid = (torch.arange(L, device=hidden.device)[None, :]
             < torch.as_tensor(list(block_lengths), device=hidden.device)[:, None])
    return hidden, valid


def block_token_ids(tokens: torch.Tensor, anchors: Sequence[int], block_lengths: Sequence[int], mask_token_id: int) -> torch.Tensor:
    """[anchor token, MASK, ..., MASK] for every block, flattened."""
    parts = []
    for anchor, length in zip(anchors, block_lengths, strict=True):
        block = torch.full((length,), mask_token_id, dtype=torch.long, device=tokens.device)
        block[0] = tokens[anchor]
        parts.append(block)
    return torch.cat(parts)


@torch.inference_mode()
def dense_draft_logits(
    drafter: DFlashDrafter,
    ctx: torch.Tensor,
    tokens: torch.Tensor,
    anchors: Sequence[int],
    block_lengths: Sequence[int],
    *,
    anchor_in_context: bool = False,
    position_offset: int = 0,
    block_offset: int = 0,
) -> torch.Tensor:
    """`draft_logits` in the flattened training layout (queries x [context | all blocks], one dense mask):
    the cost grows with the square of the anchors; kept as the oracle the block path is tested against."""
    device = ctx.device
    lengths = network_lengths(drafter, block_lengths)
    ids = block_token_ids(tokens, anchors, lengths, drafter.spec.mask_token_id).to(device)
    masks = layer_masks(drafter.spec.layers, anchors, lengths, ctx.shape[0],
                        anchor_in_context=anchor_in_context, device=device)
    # block_offset moves the block's positions relative to the context's (doctor's position variant);
    # position_offset moves both, which RoPE cannot see (kept for completeness of the layout)
    positions = block_positions(anchors, lengths).to(device) + position_offset + block_offset
    ctx_positions = torch.arange(ctx.shape[0], device=device) + position_offset
    hidden = drafter(ctx, ctx_positions, drafter.embed(ids).to(ctx.dtype), positions, masks)
    if drafter.spec.sample_from_anchor:  # back to the callers' slots, block by block (module docstring)
        rows, start = [], 0
        for length, net in zip(block_lengths, lengths):
            rows += [hidden[start:start + 1], hidden[start:start + length - 1]]
            start += net
        hidden = torch.cat(rows)
    return drafter.logits(hidden)


@torch.inference_mode()
def draft_rows(drafter: DFlashDrafter, ctx: torch.Tensor, tokens: torch.Tensor, anchors: Sequence[int],
               block_lengths: Sequence[int], **options) -> torch.Tensor:
    """Final hidden states [N, H] of all slots of the given blocks (slot 0 included; callers drop it),
    flattened in block order (N = sum of block lengths): what the lm_head reads, in `drafter.greedy_ids`'s
    pieces or whole in `draft_logits`; see `draft_hidden` for the layout and options."""
    hidden, valid = draft_hidden(drafter, ctx, tokens, anchors, block_lengths, **options)
    return hidden[valid]


@torch.inference_mode()
def draft_logits(drafter: DFlashDrafter, ctx: torch.Tensor, tokens: torch.Tensor, anchors: Sequence[int],
                 block_lengths: Sequence[int], **options) -> torch.Tensor:
    """Logits [N, draft_vocab] of `draft_rows` (one block's worth: the live loop's sampled drafts)."""
    return drafter.logits(draft_rows(drafter, ctx, tokens, anchors, block_lengths, **options))


@torch.inference_mode()
def draft_hidden(
    drafter: DFlashDrafter,
    ctx: torch.Tensor,
    tokens: torch.Tensor,
    anchors: Sequence[int],
    block_lengths: Sequence[int],
    *,
    anchor_in_context: bool = False,
    position_offset: int = 0,
    block_offset: int = 0,
    context_kv=None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(final hidden states [A, L, H] of the blocks padded to the longest, valid [A, L]: the real slots).

    ctx: [C, H] = drafter.context(taps) for sequence positions 0..C-1 (C may exceed an anchor: the mask
    hides rows at and after it); tokens: [>= max anchor + 1] committed ids; context_kv: the drafter's
    `context_kv(ctx, positions)`, when the caller drafts several chunks over one context (computed here
    otherwise). Each slot attends to the context and its own block only (linear in the number of blocks);
    blocks shorter than the longest are padded with MASK slots that no real slot can see."""
    device = ctx.device
    slots = block_lengths
    block_lengths = network_lengths(drafter, slots)  # the network's own blocks (module docstring)
    A, L = len(anchors), max(block_lengths)
    ids = torch.full((A, L), drafter.spec.mask_token_id, dtype=torch.long, device=device)
    ids[:, 0] = tokens[torch.as_tensor(list(anchors), device=tokens.device)].to(device)
    if context_kv is None:
        context_kv = drafter.context_kv(ctx, torch.arange(ctx.shape[0], device=device) + position_offset)
    # no rule shows a block a context row past its anchor (p < a; p <= a for the doctor's leak variant):
    # the chunk's context ends at its last anchor, which halves the work of a pass over all anchors
    visible = min(ctx.shape[0], max(anchors) + 1)
    context_kv = [(k[:, :visible], v[:, :visible]) for k, v in context_kv]
    masks = layer_block_masks(drafter.spec.layers, anchors, block_lengths, visible,
                              anchor_in_context=anchor_in_context, device=device,
                              draft_window=getattr(drafter, "draft_window", None))  # scoring.windowed
    # block_offset moves the block's positions relative to the context's (doctor's position variant);
    # position_offset moves both, which RoPE cannot see (kept for completeness of the layout)
    positions = (torch.as_tensor(list(anchors), device=device)[:, None] + torch.arange(L, device=device)[None, :]
                 + position_offset + block_offset)
    hidden = drafter.forward_blocks(context_kv, drafter.embed(ids).to(ctx.dtype), positions, masks)
    return as_block_slots(hidden, slots, drafter)


@torch.inference_mode()
def walk_block(drafter: DFlashDrafter, ctx: torch.Tensor, tokens: torch.Tensor, anchor: int, length: int,
               temperature: float = 0.0, generator: torch.Generator | None = None,
               vocab: int | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A DFlash2 drafter's draft for one block (the live loop): (drafts [length - 1], and at T > 0 the
    draft distribution [length - 1, vocab]: the candidates' softmax(score / T), 0 elsewhere)."""
    hidden, _ = draft_hidden(drafter, ctx, tokens, [anchor], [length])
    anchor_ids = tokens[anchor:anchor + 1].to(ctx.device)
    drafts, ids, realized = walk_drafts(drafter, hidden, anchor_ids, temperature, generator)
    q = candidate_probs(ids[0], realized[0], temperature, vocab or drafter.spec.vocab_size) if temperature > 0 else None
    return drafts[0], q

