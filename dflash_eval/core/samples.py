"""Decoded draft blocks along the walk, and how to pick which ones to show.

A number does not say *why* a drafter is worse; reading its drafts next to the target's tokens does.
Every samples.jsonl row carries the decoded pieces (one string per token, decoded alone, so token
boundaries stay visible): `continuation_pieces` for the target's continuation and `walk_draft_pieces` per
walk step. From those, `walk_blocks` rebuilds each step: the anchor, the drafted tokens, how many were
accepted, the first rejected one, and the target's tokens at the same slots.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class BlockView:
    prompt_id: str
    drafter: str
    step: int  # index of the walk step
    anchor_pos: int  # absolute position of the anchor
    anchor: str  # decoded anchor token
    draft: tuple[str, ...]  # decoded drafted tokens, slots 1..
    target: tuple[str, ...]  # decoded target tokens at the same slots (shorter at the end of the output)
    accepted: int  # n: leading drafted tokens accepted
    flags: tuple[str, ...] = ()  # repetition detectors that fired on this block

    @property
    def first_rejected(self) -> int | None:
        """Index into `draft` of the first rejected token (None when every scored slot was accepted)."""
        return self.accepted if self.accepted < min(len(self.draft), len(self.target)) else None


def token_pieces(tokenizer, ids: Sequence[int]) -> list[str]:
    """Each token decoded on its own (a byte-level piece may be a partial character: shown as is)."""
    return [tokenizer.decode([int(i)], skip_special_tokens=False, clean_up_tokenization_spaces=False) for i in ids]


def walk_blocks(row: dict) -> list[BlockView]:
    pieces = row.get("continuation_pieces") or []
    drafts = row.get("walk_draft_pieces") or []
    flags = row.get("walk_flags") or []
    p = row["prompt_len"]
    blocks = []
    for step, (anchor, n_plus_1) in enumerate(zip(row["walk_anchors"], row["walk_accept_lengths"])):
        draft = tuple(drafts[step]) if step < len(drafts) else ()
        start = anchor - p + 1
        target = tuple(pieces[start:start + len(draft)])
        blocks.append(BlockView(row["prompt_id"], row["drafter"], step, anchor,
                                pieces[anchor - p] if 0 <= anchor - p < len(pieces) else "", draft, target, n_plus_1 - 1,
                                tuple(flags[step]) if step < len(flags) else ()))
    return blocks


def select_blocks(
    rows: Iterable[dict],
    *,
    prompt: str | None = None,
    drafter: str | None = None,
    first: int | None = None,
    worst: int | None = None,
    sample: int | None = None,
    seed: int = 0,
    flagged: bool = False,
) -> list[BlockView]:
    """Filter by prompt id and drafter (and with `flagged`, to the blocks a repetition detector flagged), then
    take the first N blocks, the K worst, or K at random with a seed. Worst = a draft was rejected, shortest
    accepted prefix first; ties: more scored slots first (more wasted), then across prompts (each prompt's
    worst before any prompt's second: twenty `0/7` blocks from three prompts say less than one from each of
    twenty), then walk order. Blocks accepted in full come last whatever their length. `flagged` alone
    orders worst first: every flagged block."""
    blocks = [b for row in rows if (prompt is None or row["prompt_id"] == prompt)
              and (drafter is None or row["drafter"] == drafter) for b in walk_blocks(row)
              if not flagged or b.flags]
    if flagged and worst is None and sample is None and first is None:
        worst = len(blocks)
    if worst is not None:
        def badness(i: int):
            block = blocks[i]
            return (block.first_rejected is None, block.accepted, -min(len(block.draft), len(block.target)))

        rank: dict[int, int] = {}
        seen: dict[tuple, int] = {}
        for i in sorted(range(len(blocks)), key=lambda i: (badness(i), i)):  # rank within its prompt
            group = (blocks[i].prompt_id, blocks[i].drafter, badness(i))
            rank[i] = seen[group] = seen.get(group, -1) + 1
        order = sorted(range(len(blocks)), key=lambda i: (badness(i), rank[i], i))
        return [blocks[i] for i in order[:worst]]
    if sample is not None:
        rng = random.Random(seed)
        chosen = sorted(rng.sample(range(len(blocks)), min(sample, len(blocks))))
        return [blocks[i] for i in chosen]
    return blocks[:first] if first is not None else blocks


VISIBLE = {" ": "·", "\n": "↵", "\t": "→", "\r": "␍"}


def visible(piece: str) -> str:
    """Whitespace made visible (it is code: indentation and newlines matter); other control characters
    shown as escapes, so a decoded token can never drive the terminal."""
    from .safe_text import printable

    return printable("".join(VISIBLE.get(ch, ch) for ch in piece)) or "∅"
