"""Stage `rows` (scoring -> rows -> document): one `samples.jsonl` row per (prompt, drafter) from a scored walk, with
the invariant of z-lab's accounting checked on every row, the counts the metrics come from, repetition flags per
block and the decoded token pieces (so reports need no tokenizer). core/documents/row_documents.SampleRow documents
every field.
"""

from __future__ import annotations

from typing import Any

from ..core import metrics as M
from ..core.breakdown import slot_bits
from ..core.tree import tree_row_entry
from .prompts import Prompt


def row_counts(prompt_id: str, block_size: int, walk_n: list[int], drafted: list[int], slot_rows) -> M.AcceptanceCounts:
    counts = M.AcceptanceCounts(block_size=block_size)
    if walk_n:
        counts = counts + M.AcceptanceCounts.from_walk(prompt_id, walk_n, block_size, drafted)
    if slot_rows:
        import numpy as np

        table = np.array(slot_rows)
        counts = counts + M.AcceptanceCounts.from_marginal(np.where(table < 0, 0, table), block_size, valid=table >= 0)
    return counts


def check_committed(prompt_id: str, name: str, accept_lengths: list[int], continuation_len: int) -> None:
    """The invariant of z-lab's accounting, checked on every row: the steps commit every continuation token
    but the first (which the prefill produced)."""
    expected = max(continuation_len - 1, 0)
    if sum(accept_lengths) != expected:
        raise RuntimeError(f"internal error: prompt {prompt_id}, drafter {name}: the walk commits "
                           f"{sum(accept_lengths)} tokens, the continuation has {expected} after the first")


def trajectory_row(prompt: Prompt, name: str, B: int, result, p_len: int, cont: list[int], agree) -> dict[str, Any]:
    check_committed(prompt.id, name, result.walk_accept_lengths, len(cont))
    walk_n = [n - 1 for n in result.walk_accept_lengths]
    index = {a: i for i, a in enumerate(result.anchors)}
    return {
        "prompt_id": prompt.id, "prompt_set": prompt.set, "drafter": name, "prompt_len": p_len,
        "continuation_len": len(cont), "continuation_ids": cont, "walk_anchors": result.walk_anchors,
        "walk_accept_lengths": result.walk_accept_lengths, "walk_drafted": result.walk_drafted,
        "walk_drafts": [result.drafts[index[a]] for a in result.walk_anchors],
        "anchor_accepted": result.accepted, "anchor_slot_correct": slot_bits(result.slot_correct),
        "self_consistency": list(agree),
        "counts": row_counts(prompt.id, B, walk_n, result.walk_drafted, result.slot_correct).to_dict(),
        **({"tree": tree_row_entry(prompt.id, result.tree, B, result.anchors[0] if result.anchors else p_len,
                                   len(cont))} if result.tree is not None else {}),  # --tree-budgets: core/tree.py
    }


def draft_length_entry(prompt_id: str, name: str, k: int, result, continuation_len: int,
                       live: bool = False) -> dict[str, Any]:
    """A row's walk at draft length k (a block of k + 1 slots), with its counts: `by_draft_length[k]`."""
    check_committed(prompt_id, f"{name} at k = {k}", result.walk_accept_lengths, continuation_len)
    walk_n = [n - 1 for n in result.walk_accept_lengths]
    entry = {"walk_anchors": result.walk_anchors, "walk_accept_lengths": result.walk_accept_lengths,
             "walk_drafted": result.walk_drafted}
    if live:
        entry.update(step_seconds=result.step_seconds, draft_seconds=result.draft_seconds,
                     verify_seconds=result.verify_seconds)
    else:
        entry["anchor_accepted"] = result.accepted
    entry["counts"] = row_counts(prompt_id, k + 1, walk_n, result.walk_drafted,
                                 None if live else result.slot_correct).to_dict()
    return entry


def trajectory_rows(prompt: Prompt, drafters: dict, trajectory, settings) -> list[dict[str, Any]]:
    """Every drafter scored on one trajectory (the replay), one row each: run's and track's inner loop;
    with --draft-lengths each row also holds the replays at the shorter draft lengths (same taps)."""
    from .scoring import score_at_draft_lengths, score_on_trajectory

    agree = trajectory.self_consistency()
    cont = trajectory.continuation
    rows = []
    for name, d in drafters.items():
        row = trajectory_row(prompt, name, d.spec.block_size, score_on_trajectory(d, trajectory, settings),
                             trajectory.prompt_len, cont, agree)
        by_k = score_at_draft_lengths(d, trajectory, settings)
        if by_k:
            row["by_draft_length"] = {str(k): draft_length_entry(prompt.id, name, k, result, len(cont))
                                      for k, result in by_k.items()}
        rows.append(row)
    return rows


def estimate_rows(prompt: Prompt, drafters: dict, trajectory, target, settings_of) -> list[dict[str, Any]]:
    """Temperature > 0, offline: every drafter's estimate on one sampled trajectory, one row each (run's and
    track's inner loop, as `trajectory_rows` at temperature 0). settings_of(name): that drafter's settings."""
    from .scoring import estimate_on_trajectory

    return [estimate_row(prompt, name, d.spec.block_size, estimate_on_trajectory(d, trajectory, target, settings_of(name)),
                         trajectory) for name, d in drafters.items()]


def estimate_row(prompt: Prompt, name: str, B: int, alphas: list[list[float]], trajectory) -> dict[str, Any]:
    """A sampled continuation's row at temperature > 0 (offline estimate): the per-anchor acceptance
    probabilities, the expected accepted drafts per anchor and the additive sums (estimates.py)."""
    from ..core.estimates import EstimateSums
    from ..core.metrics import expected_accepted_length

    sums = EstimateSums.from_anchors(prompt.id, B, alphas, int(trajectory.tokens.shape[0]), trajectory.prompt_len)
    cont = trajectory.continuation
    return {
        "prompt_id": prompt.id, "prompt_set": prompt.set, "drafter": name, "prompt_len": trajectory.prompt_len,
        "sample": trajectory.sample, "continuation_len": len(cont), "continuation_ids": cont,
        "anchor_alphas": [[round(x, 6) for x in slots] for slots in alphas],
        "anchor_expected_accepted": [round(expected_accepted_length(slots), 6) for slots in alphas],
        "estimate": sums.to_dict(),
    }


def live_row(prompt: Prompt, name: str, B: int, live, p_len: int, agree, sample: int | None = None) -> dict[str, Any]:
    """A live walk's row; `agree` (tokens equal to the greedy continuation, total) at temperature 0, None
    when sampling; `sample` k of K at temperature > 0."""
    check_committed(prompt.id, name, live.walk_accept_lengths, len(live.continuation))
    walk_n = [n - 1 for n in live.walk_accept_lengths]
    return {
        "prompt_id": prompt.id, "prompt_set": prompt.set, "drafter": name, "prompt_len": p_len,
        **({"sample": sample} if sample is not None else {}),
        "continuation_len": len(live.continuation), "continuation_ids": live.continuation,
        "walk_anchors": live.walk_anchors,
        "walk_accept_lengths": live.walk_accept_lengths, "walk_drafted": live.walk_drafted,
        "walk_drafts": live.walk_drafts, "step_seconds": live.step_seconds, "prefill_seconds": live.prefill_seconds,
        "draft_seconds": live.draft_seconds, "verify_seconds": live.verify_seconds,
        **({"live_agrees_with_greedy": list(agree)} if agree is not None else {}),
        "counts": row_counts(prompt.id, B, walk_n, live.walk_drafted, None).to_dict(),
    }


def add_live_draft_lengths(row: dict[str, Any], target, drafter, prompt_ids: list[int], settings, prompt_id: str,
                           sample: int) -> None:
    """Live mode with --draft-lengths: the loop run again at each shorter k (a block of k + 1 slots), on the
    same random stream (prompt, sample) at temperature > 0; each walk and its timings into the row."""
    from .scoring import at_draft_length, draft_lengths_of, score_live

    entries = {}
    for k in draft_lengths_of(drafter, settings):
        live = score_live(target, at_draft_length(drafter, k), prompt_ids, settings, prompt_id, sample)
        entries[str(k)] = draft_length_entry(prompt_id, row["drafter"], k, live, len(live.continuation), live=True)
    if entries:
        row["by_draft_length"] = entries


def add_repetition(row: dict[str, Any], decode=None) -> None:
    """Repetition flags per walk step (reasons, empty when clean; quoting decoded text when `decode` is
    given) and the row's repetition counts."""
    from ..core import repetition

    p, cont = row["prompt_len"], row["continuation_ids"]
    blocks = row["walk_drafts"]
    references = [cont[a - p + 1: a - p + 1 + len(b)] for a, b in zip(row["walk_anchors"], blocks)]
    accepted = [min(n - 1, len(b)) for n, b in zip(row["walk_accept_lengths"], blocks)]
    flags, prev, prev_ref, prev_pieces = [], None, None, None
    for block, ref in zip(blocks, references):
        pieces = decode(block) if decode is not None else None
        flags.append(repetition.flag_block(block, ref, prev, prev_ref, pieces=pieces, prev_pieces=prev_pieces))
        prev, prev_ref, prev_pieces = block, ref, pieces
    row["walk_flags"] = [list(f.reasons) for f in flags]
    row["repetition"] = (repetition.count_walk(row["prompt_id"], blocks, references, accepted, flags=flags).to_dict()
                         if blocks and all(blocks) else None)


def piece_decoder(tokenizer):
    """ids -> one decoded string per token, memoised per id (walk drafts repeat ids a lot)."""
    from ..core.samples import token_pieces

    memo: dict[int, str] = {}

    def decode(ids: list[int]) -> list[str]:
        missing = [i for i in set(ids) if i not in memo]
        memo.update(zip(missing, token_pieces(tokenizer, missing)))
        return [memo[i] for i in ids]

    return decode


def finish_rows(rows: list[dict[str, Any]], decode) -> list[dict[str, Any]]:
    """Repetition flags and decoded pieces, added to a prompt's rows before they are written."""
    for row in rows:
        if "walk_drafts" not in row:  # an estimate row (temperature > 0, offline): no walk to judge
            row["continuation_pieces"] = decode(row["continuation_ids"])
            continue
        add_repetition(row, decode)
        row["continuation_pieces"] = decode(row["continuation_ids"])
        row["walk_draft_pieces"] = [decode(d) for d in row["walk_drafts"]]
    return rows
