"""Repetition detectors for DFlash drafts: flag degenerate blocks, store counts, divide only when reporting.

A broken drafter (e.g. trained with the anchor in its attention context, primer section 2) still emits
plausible tokens, but loops: "FizzFizzFizzBuzz", "elif elif elif", one token over and over, the same block at
consecutive anchors. Code repeats legitimately too (an if/elif chain, indentation tokens, `)))`), so every
detector compares the draft with the *target's own tokens at the same positions* (the reference) and blames
the drafter only for repetition clearly stronger than the target's.

A *block* is the drafted tokens of one step (slots 1..L-1, L <= B); only the slots its reference covers are
judged (the reference may be shorter at the end of a sequence). Defaults (`Thresholds`), for B = 4..16:

| detector   | catches                                    | fires when (defaults)                                  |
|------------|--------------------------------------------|--------------------------------------------------------|
| run        | one token over and over ("elif elif elif") | draft run >= 3 and >= target's longest run + 2         |
| period     | a 2..4-token unit back to back ("Fizz" as  | unit x3 or more, spanning >= 2 tokens more than the    |
|            | 2 tokens, x3)                              | target's longest span with that period                 |
| ngram      | bigrams recurring, adjacent or not         | repeated bigrams >= target's + 3                       |
| unique     | a block of few distinct tokens             | >= 6 slots, distinct <= 0.5 * slots and <= target's    |
|            |                                            | distinct - 0.25 * slots                                |
| same_draft | the previous block again, as if the anchor | identical to / a rotation of the previous draft (>= 2  |
|            | had not moved                              | slots), by a rotation the target's two texts lack      |

Always: a pattern counts only if it holds a slot where the draft differs from the target, so a drafter that
predicts the target's text (block == reference) is never flagged. The +2-token margins let an off-by-one run
(one indent or paren too many) pass as an ordinary miss; a loop gains 2+ tokens per cycle. With 3 slots
(B = 4) only run and same_draft can fire; with 15 slots a wrong but sane draft rarely repeats 3 bigrams more
than the target's text does. A block's *pattern slots* are the slots inside a fired detector's pattern.

Counts (`RepetitionCounts`) are integers merged exactly with `+`, like metrics.AcceptanceCounts. A prompt is
*flagged* when >= 25% of its blocks are: a loop that persists, not one slip; tau without flagged prompts is the
caller's (drop their ids from the AcceptanceCounts).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

DETECTORS = ("run", "period", "ngram", "unique", "same_draft")


def _primitive(unit: list[int]) -> bool:
    """True unless unit is a shorter unit repeated (A B A B is not primitive; its period is 2, not 4)."""
    p = len(unit)
    return all(unit != unit[:q] * (p // q) for q in range(1, p) if p % q == 0)


def _stretches(tokens: list[int], period: int) -> list[tuple[int, int]]:
    """Maximal spans (start, length) with tokens[i] == tokens[i + period] throughout (length >= period + 1),
    keeping only those whose unit is primitive (period 2 over A A A A is a run, reported at period 1)."""
    spans, start, last = [], None, len(tokens) - period
    for i in range(max(last, 0) + 1):
        if i < last and tokens[i] == tokens[i + period]:
            start = i if start is None else start
        elif start is not None:
            if _primitive(tokens[start:start + period]):
                spans.append((start, i - start + period))
            start = None
    return spans


def _coverage(tokens: list[int], period: int) -> int:
    """Longest span with the given period; a lone unit spans `period` tokens (a lone token is a run of 1)."""
    return max((length for _, length in _stretches(tokens, period)), default=min(period, len(tokens)))


def longest_run(tokens: Sequence[int]) -> int:
    """Longest run of one identical token (0 for no tokens).

    Catches the commonest collapse, one token emitted slot after slot ("elif elif elif", "\\n\\n\\n"). Code
    has legitimate runs (indentation tokens, `)))`), hence flag_block compares with the target's own run.
    """
    return _coverage(list(tokens), 1)


def repeated_ngrams(tokens: Sequence[int], n: int) -> int:
    """Number of n-gram occurrences beyond the first of each distinct n-gram (n = 1..4).

    Catches phrases that recur without being back-to-back ("x = x = x", "if a: if a:"). Common bigrams recur in
    sane code ("in range", "self ."), hence flag_block wants 3 more repeats than the target's text has.
    """
    if not 1 <= n <= 4:
        raise ValueError(f"n must be in 1..4, got {n}")
    grams = _grams(list(tokens), n)
    return len(grams) - len(set(grams))


def _grams(tokens: list[int], n: int) -> list[tuple[int, ...]]:
    return [tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)]


def periodic_repeat(tokens: Sequence[int], max_period: int = 4,
                    min_repeats: int = 3) -> tuple[int, int] | None:
    """(period, full repeats) of the strongest back-to-back repetition of a 2..max_period-token unit, or None.

    Catches sub-word loops: "Fizz" as the 2 tokens [F, izz] x3 is (2, 3). Strongest = most tokens in full
    repeats, ties to the shorter period. Units must be primitive, so a plain run is longest_run's job (period
    1). min_repeats = 3 by default: two copies (x = 1; x = 2 -> "x =" twice) are everyday code.
    """
    tokens, best = list(tokens), None
    for period in range(2, max_period + 1):
        for _, length in _stretches(tokens, period):
            repeats = length // period
            if repeats >= min_repeats and (best is None or repeats * period > best[0] * best[1]):
                best = (period, repeats)
    return best


def unique_ratio(tokens: Sequence[int]) -> float:
    """distinct tokens / tokens (ValueError when empty).

    Catches a block built from a handful of tokens in any order (A B B A B A), which neither runs nor periods
    see. Short blocks have coarse ratios, hence flag_block needs >= 6 slots and a 0.25 gap to the target.
    """
    tokens = list(tokens)
    if not tokens:
        raise ValueError("unique_ratio of no tokens is undefined")
    return len(set(tokens)) / len(tokens)


def _rotations(prev: list[int], block: list[int]) -> set[int]:
    """Shifts k with block == prev[k:] + prev[:k] (k = 0: identical); lists of equal length >= 2."""
    if len(prev) != len(block) or len(block) < 2:
        return set()
    return {k for k in range(len(prev)) if block == prev[k:] + prev[:k]}


def same_draft_again(prev_block: Sequence[int], block: Sequence[int]) -> bool:
    """True when a step's draft repeats the previous step's draft: compared on their common length m >= 2,
    block[:m] equals prev_block[:m] (k = 0) or a rotation of it, prev[k:m] + prev[:k] for some k in 1..m-1.

    Catches a drafter that ignores that the anchor moved (by n + 1 >= 1) and emits the same block again, or
    keeps cycling through the same tokens. A prefix-only shift (block starting with prev_block[k:], then new
    tokens) is not counted: that is what a consistent drafter does when it re-predicts the same positions. Text
    with period n + 1 makes the target's own consecutive references rotations too, so flag_block fires only on
    a rotation the references do not show.
    """
    m = min(len(prev_block), len(block))
    return bool(_rotations(list(prev_block[:m]), list(block[:m])))


@dataclass(frozen=True)
class Thresholds:
    """flag_block's thresholds; see the module docstring for the rationale."""

    min_run: int = 3  # run detector: draft run length
    min_excess: int = 2  # run and period: draft span - target's span at the same period, in tokens
    max_period: int = 4
    min_repeats: int = 3  # period detector: full repeats of the unit in the draft
    ngram: int = 2
    min_ngram_excess: int = 3  # repeated n-grams in the draft - in the target's text
    min_unique_length: int = 6  # unique detector needs this many judged slots
    max_unique_ratio: float = 0.5
    unique_margin: float = 0.25  # target's ratio - draft's ratio
    min_same_draft: int = 2  # same_draft: slots compared
    prompt_share: float = 0.25  # flagged_prompts: share of a prompt's blocks


DEFAULT_THRESHOLDS = Thresholds()


@dataclass(frozen=True)
class BlockFlags:
    """Verdict for one block. `slots` are the 1-based slots inside a fired pattern; `degenerate` = any fired."""

    run: bool = False
    period: bool = False
    ngram: bool = False
    unique: bool = False
    same_draft: bool = False
    reasons: tuple[str, ...] = ()
    slots: tuple[int, ...] = ()
    degenerate: bool = field(init=False, default=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "degenerate", any(getattr(self, name) for name in DETECTORS))


def _quoted(ids: Sequence[int], pieces: Sequence[str] | None) -> str:
    """Tokens as a reader recognises them: their decoded text, quoted with escapes ('"\\n    "'), when the
    pieces are known; else the ids."""
    if pieces is not None and len(pieces) >= len(ids):
        return json.dumps("".join(pieces[:len(ids)]), ensure_ascii=False)
    return f"token {ids[0]}" if len(ids) == 1 else f"tokens {list(ids)}"


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
    # Each walk step of every prompt and drafter passes here (hundreds per prompt on a long continuation), so
    # work that cannot change the verdict is skipped: the reference is measured only where the draft shows a
    # pattern, and a reason's text is written only for a detector that fires.
    hits: dict[str, tuple[set[int], list]] = {}

    def hit(name: str, slots, reason) -> None:  # reason: a function giving the text, called if it fires
        entry = hits.setdefault(name, (set(), []))
        entry[0].update(slots)
        entry[1].append(reason)

    if len(set(draft)) < m:  # run, period, n-gram and unique all need some token twice in the draft
        for period in range(1, t.max_period + 1):
            stretches = [(start, length) for start, length in _stretches(draft, period)
                         if (length >= t.min_run if period == 1 else length // period >= t.min_repeats)]
            if not stretches:
                continue
            target_span = _coverage(ref, period)
            for start, length in stretches:
                if length - target_span < t.min_excess:
                    continue
                unit = draft[start:start + period]
                shown = pieces[start:start + period] if pieces is not None else None
                if period == 1:
                    hit("run", range(start, start + length),
                        lambda u=unit, s=shown, a=start, n=length, ts=target_span:
                        f"{_quoted(u, s)} x{n} at slots {a + 1}..{a + n} (target's longest run: {ts})")
                else:
                    hit("period", range(start, start + length),
                        lambda u=unit, s=shown, a=start, n=length, p=period, ts=target_span:
                        f"{_quoted(u, s)} x{n // p} at slots {a + 1}..{a + n} (target's longest span with period "
                        f"{p}: {ts})")
        n = t.ngram
        grams = _grams(draft, n)
        extra = len(grams) - len(set(grams))
        if extra >= t.min_ngram_excess:  # the reference's own repeats only lower the excess
            target_extra = repeated_ngrams(ref, n)
            if extra - target_extra >= t.min_ngram_excess:
                target_counts, counts = Counter(_grams(ref, n)), Counter(grams)
                hit("ngram", (i + j for i, g in enumerate(grams) if counts[g] > max(target_counts[g], 1)
                              for j in range(n)),
                    lambda e=extra, te=target_extra: f"{e} repeated {n}-grams (target's text: {te})")
        if m >= t.min_unique_length:
            distinct, target_distinct = len(set(draft)), len(set(ref))
            if distinct <= t.max_unique_ratio * m and target_distinct - distinct >= t.unique_margin * m:
                token_counts, target_token_counts = Counter(draft), Counter(ref)
                hit("unique", (i for i, x in enumerate(draft) if token_counts[x] > max(target_token_counts[x], 1)),
                    lambda d=distinct, td=target_distinct: f"{d} distinct tokens in {m} slots (target's text: {td})")
    if prev_block is not None:
        assert prev_reference is not None  # both or neither (checked on entry)
        k = min(len(prev_block), len(prev_reference), m)
        if k >= t.min_same_draft:
            prev_draft = [int(x) for x in prev_block[:k]]
            shifts = _rotations(prev_draft, draft[:k])
            if shifts:
                shifts -= _rotations([int(x) for x in prev_reference[:k]], ref[:k])
            if shifts:
                shown = prev_pieces[:k] if prev_pieces is not None else None
                hit("same_draft", range(k),
                    lambda: f"previous draft again (rotation {min(shifts)} of {_quoted(prev_draft, shown)})")
    if not hits:
        return BlockFlags()
    wrong = {i for i in range(m) if draft[i] != ref[i]}
    fired = {name: entry for name, entry in hits.items() if entry[0] & wrong}
    return BlockFlags(**{name: True for name in fired},
                      reasons=tuple(f"{name}: {r()}" for name in DETECTORS if name in fired for r in fired[name][1]),
                      slots=tuple(sorted({i + 1 for slots, _ in fired.values() for i in slots})))


@dataclass(frozen=True)
class RepetitionCounts:
    """Integer repetition counts for one or more prompts; ratios are taken at render time."""

    blocks: int = 0
    flagged_blocks: int = 0
    flagged_by_detector: dict[str, int] = field(default_factory=lambda: dict.fromkeys(DETECTORS, 0))
    # index i-1: flagged blocks whose slot i lies in a fired pattern; as long as the longest block seen
    flagged_by_slot: list[int] = field(default_factory=list)
    accepted_flagged: int = 0  # sum of accepted lengths n over flagged blocks
    accepted_clean: int = 0  # ... over the other blocks (blocks - flagged_blocks of them)
    per_prompt: dict[str, tuple[int, int]] = field(default_factory=dict)  # id -> (flagged blocks, blocks)

    def __post_init__(self) -> None:
        unknown = set(self.flagged_by_detector) - set(DETECTORS)
        if unknown:
            raise ValueError(f"unknown detectors {sorted(unknown)}; expected {DETECTORS}")
        object.__setattr__(self, "flagged_by_detector",
                           {name: int(self.flagged_by_detector.get(name, 0)) for name in DETECTORS})

    def __add__(self, other: RepetitionCounts) -> RepetitionCounts:
        """Exact sum (shards or runs). Prompt ids must not overlap: a repeat would count twice."""
        overlap = self.per_prompt.keys() & other.per_prompt.keys()
        if overlap:
            raise ValueError(f"prompt ids present in both counts: {sorted(overlap)[:5]}")
        width = max(len(self.flagged_by_slot), len(other.flagged_by_slot))
        a, b = (c.flagged_by_slot + [0] * (width - len(c.flagged_by_slot)) for c in (self, other))
        return RepetitionCounts(
            blocks=self.blocks + other.blocks, flagged_blocks=self.flagged_blocks + other.flagged_blocks,
            flagged_by_detector={k: self.flagged_by_detector[k] + other.flagged_by_detector[k] for k in DETECTORS},
            flagged_by_slot=[x + y for x, y in zip(a, b)],
            accepted_flagged=self.accepted_flagged + other.accepted_flagged,
            accepted_clean=self.accepted_clean + other.accepted_clean,
            per_prompt={**self.per_prompt, **other.per_prompt})

    def pooled(self, other: RepetitionCounts) -> RepetitionCounts:
        """Two samples of the same prompt(s) as one (temperature > 0, as metrics.pool_samples): counts add,
        and a prompt in both gets its (flagged blocks, blocks) added."""
        from .metrics import add_pairs

        per_prompt = add_pairs(self.per_prompt, other.per_prompt)
        total = replace(self, per_prompt={}) + replace(other, per_prompt={})
        return replace(total, per_prompt=per_prompt)

    def to_dict(self) -> dict:
        """JSON-ready dict of ints (prompt ids sorted, so equal counts serialise identically)."""
        return {"blocks": self.blocks, "flagged_blocks": self.flagged_blocks,
                "flagged_by_detector": dict(self.flagged_by_detector),
                "flagged_by_slot": list(self.flagged_by_slot),
                "accepted_flagged": self.accepted_flagged, "accepted_clean": self.accepted_clean,
                "per_prompt": {pid: list(self.per_prompt[pid]) for pid in sorted(self.per_prompt)}}

    @classmethod
    def from_dict(cls, data: Mapping) -> RepetitionCounts:
        values = dict(data)
        values["per_prompt"] = {pid: (int(f), int(b)) for pid, (f, b) in values.get("per_prompt", {}).items()}
        values["flagged_by_slot"] = [int(x) for x in values.get("flagged_by_slot", [])]
        return cls(**values)


def count_walk(prompt_id: str, blocks: Sequence[Sequence[int]], references: Sequence[Sequence[int]],
               accepted: Sequence[int], *, thresholds: Thresholds = DEFAULT_THRESHOLDS,
               flags: Sequence[BlockFlags] | None = None) -> RepetitionCounts:
    """Counts for one prompt's walk: per step its block, its reference and its accepted length n.
    `flags`: each step's `flag_block` result when the caller has it already (not recomputed)."""
    if not blocks:
        raise ValueError(f"walk for prompt {prompt_id!r} has no steps")
    if not len(blocks) == len(references) == len(accepted):
        raise ValueError(f"prompt {prompt_id!r}: {len(blocks)} blocks, {len(references)} references, "
                         f"{len(accepted)} accepted lengths")
    by_detector, by_slot = dict.fromkeys(DETECTORS, 0), [0] * max(len(b) for b in blocks)
    flagged = accepted_flagged = accepted_clean = 0
    prev = prev_ref = None
    for step, (block, ref, n) in enumerate(zip(blocks, references, accepted)):
        if not 0 <= int(n) <= len(block) or len(block) == 0:
            raise ValueError(f"prompt {prompt_id!r} step {step}: accepted {n} for a block of {len(block)} slots")
        step_flags = flags[step] if flags is not None else flag_block(block, ref, prev, prev_ref, thresholds=thresholds)
        if step_flags.degenerate:
            flagged, accepted_flagged = flagged + 1, accepted_flagged + int(n)
            for name in DETECTORS:
                by_detector[name] += getattr(step_flags, name)
            for slot in step_flags.slots:
                by_slot[slot - 1] += 1
        else:
            accepted_clean += int(n)
        prev, prev_ref = block, ref
    return RepetitionCounts(blocks=len(blocks), flagged_blocks=flagged, flagged_by_detector=by_detector,
                            flagged_by_slot=by_slot, accepted_flagged=accepted_flagged,
                            accepted_clean=accepted_clean, per_prompt={prompt_id: (flagged, len(blocks))})


def flagged_prompts(counts: RepetitionCounts, share: float = DEFAULT_THRESHOLDS.prompt_share) -> set[str]:
    """Prompts with flagged blocks >= share * blocks (default 25%: a loop that persists, not one slip)."""
    return {pid for pid, (flagged, total) in counts.per_prompt.items() if total and flagged >= share * total}


def accepted_inside_outside(counts: RepetitionCounts) -> tuple[float | None, float | None]:
    """Mean accepted length n per block inside flagged blocks and outside them (None where no such block)."""
    clean = counts.blocks - counts.flagged_blocks
    return (counts.accepted_flagged / counts.flagged_blocks if counts.flagged_blocks else None,
            counts.accepted_clean / clean if clean else None)
