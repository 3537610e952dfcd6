"""flag_block as it was before issue 47 made it skip work (every detector on every block, the reference
measured at every period, each reason's text written as soon as a pattern is seen): the plain statement of the
rules that tests/test_host_work.py holds the faster one to, block for block."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from dflash_eval.core.repetition import (
    DEFAULT_THRESHOLDS,
    DETECTORS,
    BlockFlags,
    Thresholds,
    _coverage,
    _grams,
    _quoted,
    _rotations,
    _stretches,
    repeated_ngrams,
)


def flag_block(block: Sequence[int], reference: Sequence[int], prev_block: Sequence[int] | None = None,
               prev_reference: Sequence[int] | None = None, *,
               thresholds: Thresholds = DEFAULT_THRESHOLDS, pieces: Sequence[str] | None = None,
               prev_pieces: Sequence[str] | None = None) -> BlockFlags:
    """Which detectors fire on `block` (drafted slots 1..L-1) against `reference` (the target's tokens there).

    prev_block / prev_reference: the previous walk step's block and reference (both or neither). Only the
    slots both lists cover are judged; a detector fires only when the draft shows its pattern clearly more
    strongly than the reference and the pattern holds a slot where the draft differs from the target.
    pieces / prev_pieces: the blocks' decoded tokens, one string per id: the reasons then quote text, not ids.
    """
    if (prev_block is None) != (prev_reference is None):
        raise ValueError("give prev_block and prev_reference together")
    t, m = thresholds, min(len(block), len(reference))
    draft, ref = [int(x) for x in block[:m]], [int(x) for x in reference[:m]]
    if draft == ref:  # a detector fires only on a slot where the draft differs from the target: none here
        return BlockFlags()
    hits: dict[str, tuple[set[int], list[str]]] = {}

    def hit(name: str, slots, reason: str) -> None:
        entry = hits.setdefault(name, (set(), []))
        entry[0].update(slots)
        entry[1].append(reason)

    for period in range(1, t.max_period + 1):
        target_span = _coverage(ref, period)
        for start, length in _stretches(draft, period):
            long_enough = length >= t.min_run if period == 1 else length // period >= t.min_repeats
            if long_enough and length - target_span >= t.min_excess:
                unit, where = draft[start:start + period], f"slots {start + 1}..{start + length}"
                if period == 1:
                    shown = _quoted(unit, pieces[start:start + 1] if pieces is not None else None)
                    hit("run", range(start, start + length),
                        f"{shown} x{length} at {where} (target's longest run: {target_span})")
                else:
                    shown = _quoted(unit, pieces[start:start + period] if pieces is not None else None)
                    hit("period", range(start, start + length), f"{shown} x{length // period} at {where} "
                        f"(target's longest span with period {period}: {target_span})")
    n = t.ngram
    extra, target_extra = repeated_ngrams(draft, n), repeated_ngrams(ref, n)
    if extra - target_extra >= t.min_ngram_excess:
        grams, target_counts = _grams(draft, n), Counter(_grams(ref, n))
        counts = Counter(grams)
        hit("ngram", (i + j for i, g in enumerate(grams) if counts[g] > max(target_counts[g], 1)
                      for j in range(n)), f"{extra} repeated {n}-grams (target's text: {target_extra})")
    if m >= t.min_unique_length:
        distinct, target_distinct = len(set(draft)), len(set(ref))
        if distinct <= t.max_unique_ratio * m and target_distinct - distinct >= t.unique_margin * m:
            counts, target_counts = Counter(draft), Counter(ref)
            hit("unique", (i for i, x in enumerate(draft) if counts[x] > max(target_counts[x], 1)),
                f"{distinct} distinct tokens in {m} slots (target's text: {target_distinct})")
    if prev_block is not None:
        k = min(len(prev_block), len(prev_reference), m)
        if k >= t.min_same_draft:
            prev_draft = [int(x) for x in prev_block[:k]]
            shifts = _rotations(prev_draft, draft[:k]) - _rotations([int(x) for x in prev_reference[:k]], ref[:k])
            if shifts:
                shown = _quoted(prev_draft, prev_pieces[:k] if prev_pieces is not None else None)
                hit("same_draft", range(k), f"previous draft again (rotation {min(shifts)} of {shown})")
    wrong = {i for i in range(m) if draft[i] != ref[i]}
    fired = {name: entry for name, entry in hits.items() if entry[0] & wrong}
    return BlockFlags(**{name: True for name in fired},
                      reasons=tuple(f"{name}: {r}" for name in DETECTORS if name in fired for r in fired[name][1]),
                      slots=tuple(sorted({i + 1 for slots, _ in fired.values() for i in slots})))
