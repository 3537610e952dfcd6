"""Where acceptance is lost: every metric split by context depth, by segment and by token class.

A run's tau says how much a drafter accepts, never where it loses: a drafter whose sliding layers were
trained with another window rule only falls away past the window, one trained without thinking text only
on thinking. Each split here is a partition, so its parts' counts add up exactly to the run's totals
(`check_partition`), and is computed from what a samples.jsonl row already holds:

- `walk_anchors`, `walk_accept_lengths`, `walk_drafted`: each walk step goes to one part, and gives the
  walk metrics (tau per step, reach, conditional, histogram) of that part (metrics.AcceptanceCounts);
- `anchor_slot_correct` (rows.py): per anchor a = prompt_len .. T-2 of the all-anchor replay, an integer
  whose bit k-1 says slot k was right; slots 1 .. min(B-1, T-1-a) are scored (the others are past the
  sequence: engine.NOT_SCORED). It gives the marginal (teacher-forced) counts of each part. Live rows
  score only the walk, so their parts have no marginal (as the run's totals have none);
- `continuation_pieces`: the segment and token class of each token (text_kinds.py).

Which part a step (or an anchor) falls in:
- **depth**: the anchor's absolute position a (prompt tokens included: the context the drafter sees),
  in buckets [0, e1), [e1, e2), ..., [e_last, inf) of the edges (`parse_depth_buckets`; default 1K, 2K,
  4K, 8K, 16K, 32K, with K = 1024);
- **segment** and **token class**: those of the token slot 1 must predict, at position a + 1.

A part's per-prompt pairs are that prompt's steps in the part, so tau_macro of a part is the mean over the
prompts that have steps there, and its bootstrap interval resamples those prompts. Samples of one prompt
(temperature > 0, live) pool into one unit, as for the run's totals (metrics.pool_samples).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from . import metrics as M
from .text_kinds import SEGMENTS, TOKEN_CLASSES, labels

DEFAULT_DEPTH_EDGES = (1024, 2048, 4096, 8192, 16384, 32768)
DIMENSIONS = ("depth", "segment", "token_class")
WALK_FIELDS = ("steps", "accepted_draft_tokens", "drafted_tokens", "accept_length_histogram", "reach_counts",
               "reach_denominators")
MARGINAL_FIELDS = ("marginal_correct", "marginal_total")


def parse_depth_buckets(text: str | None) -> tuple[int, ...]:
    """"0,512,2048" -> the inner edges (512, 2048): buckets [0, 512), [512, 2048), [2048, inf). A leading 0
    may be given or left out; "K" multiplies by 1024 ("1K,2K"). None: DEFAULT_DEPTH_EDGES. ValueError
    (the problem, for the caller to name the option) on anything else."""
    if text is None:
        return DEFAULT_DEPTH_EDGES
    edges = []
    for part in str(text).split(","):
        part = part.strip()
        scale = 1024 if part[-1:] in ("k", "K") else 1
        digits = part[:-1] if scale > 1 else part
        if not digits.isdigit():
            raise ValueError(f"{part!r} is not a whole number of tokens (e.g. 0,512,2048 or 1K,4K)")
        edges.append(int(digits) * scale)
    if any(b <= a for a, b in zip(edges, edges[1:])):
        raise ValueError(f"edges must increase strictly, got {edges}")
    inner = tuple(e for e in edges if e > 0)
    if not inner:
        raise ValueError("give at least one edge above 0")
    return inner


def depth_bounds(edges: Sequence[int]) -> list[tuple[int, int | None]]:
    """[(0, e1), (e1, e2), ..., (e_last, None)]: None = no upper bound."""
    lows = [0, *edges]
    return [(lo, hi) for lo, hi in zip(lows, [*edges, None])]


def depth_label(low: int, high: int | None) -> str:
    def short(n: int) -> str:
        return f"{n // 1024}K" if n and n % 1024 == 0 else str(n)

    return f"{short(low)}+" if high is None else f"{short(low)}-{short(high)}"


def depth_bucket(position: int, edges: Sequence[int]) -> int:
    return bisect.bisect_right(edges, position)


def row_keys(row: dict[str, Any], edges: Sequence[int]) -> dict[str, tuple[list, list]]:
    """dimension -> (the part of each walk step, the part of each all-anchor anchor)."""
    p = int(row["prompt_len"])
    T = p + int(row["continuation_len"])
    pieces = row.get("continuation_pieces")
    if pieces is None or len(pieces) != T - p:
        raise ValueError(f"prompt {row.get('prompt_id')!r}: continuation_pieces missing or not one per token")
    segments, classes = labels(pieces)
    steps = [int(a) for a in row["walk_anchors"]]
    anchors = list(range(p, T - 1)) if "anchor_slot_correct" in row else []
    return {
        "depth": ([depth_bucket(a, edges) for a in steps], [depth_bucket(a, edges) for a in anchors]),
        "segment": ([segments[a + 1 - p] for a in steps], [segments[a + 1 - p] for a in anchors]),
        "token_class": ([classes[a + 1 - p] for a in steps], [classes[a + 1 - p] for a in anchors]),
    }


def slot_table(bits: Sequence[int], anchors: Sequence[int], seq_len: int, block_size: int) -> tuple[np.ndarray, np.ndarray]:
    """(right [A, B-1], scored [A, B-1]) from the per-anchor bit masks of a row."""
    slots = np.arange(block_size - 1)
    right = (np.asarray(bits, dtype=np.int64)[:, None] >> slots[None, :]) & 1
    scored_slots = np.minimum(block_size - 1, seq_len - 1 - np.asarray(anchors, dtype=np.int64))
    return right.astype(bool), slots[None, :] < scored_slots[:, None]


def split_row(row: dict[str, Any], block_size: int, step_keys: list, anchor_keys: list) -> dict[Any, M.AcceptanceCounts]:
    """One row's counts, one AcceptanceCounts per part (only the parts it has steps or anchors in)."""
    pid = str(row["prompt_id"])
    grouped: dict[Any, list[int]] = {}
    for index, key in enumerate(step_keys):
        grouped.setdefault(key, []).append(index)
    n = row["walk_accept_lengths"]
    drafted = row["walk_drafted"]
    out: dict[Any, M.AcceptanceCounts] = {}
    for key, indices in grouped.items():
        out[key] = M.AcceptanceCounts.from_walk(pid, [int(n[i]) - 1 for i in indices], block_size,
                                                [int(drafted[i]) for i in indices])
    if anchor_keys:
        p = int(row["prompt_len"])
        T = p + int(row["continuation_len"])
        right, scored = slot_table(row["anchor_slot_correct"], range(p, T - 1), T, block_size)
        index_of = {key: i for i, key in enumerate(dict.fromkeys(anchor_keys))}
        codes = np.asarray([index_of[k] for k in anchor_keys])
        for key, code in index_of.items():
            mask = codes == code
            part = M.AcceptanceCounts.from_marginal(right[mask], block_size, valid=scored[mask])
            out[key] = out[key] + part if key in out else part
    return out


def breakdown_counts(rows: Iterable[dict[str, Any]], block_size: int,
                     edges: Sequence[int] = DEFAULT_DEPTH_EDGES) -> dict[str, dict[Any, M.AcceptanceCounts]]:
    """dimension -> part -> counts summed over the rows (samples of a prompt pooled)."""
    out: dict[str, dict[Any, M.AcceptanceCounts]] = {d: {} for d in DIMENSIONS}
    for row in rows:
        if "walk_anchors" not in row:
            continue  # an estimate row (temperature > 0 offline) has no walk to split
        for dimension, (steps, anchors) in row_keys(row, edges).items():
            parts = out[dimension]
            for key, counts in split_row(row, block_size, steps, anchors).items():
                parts[key] = M.pool_samples(parts[key], counts) if key in parts else counts
    return out


def check_partition(total: M.AcceptanceCounts, parts: Iterable[M.AcceptanceCounts], *, marginal: bool,
                    what: str) -> None:
    """The parts of one split add up exactly to the run's totals (per prompt too); RuntimeError otherwise."""
    summed = M.AcceptanceCounts(block_size=total.block_size)
    for part in parts:
        summed = M.pool_samples(summed, part)
    fields = WALK_FIELDS + (MARGINAL_FIELDS if marginal else ())
    a, b = summed.to_dict(), total.to_dict()
    wrong = [f for f in (*fields, "per_prompt") if a[f] != b[f]]
    if wrong:
        raise RuntimeError(f"internal error: the {what} split does not add up to the totals ({', '.join(wrong)})")


def breakdown_documents(rows: list[dict[str, Any]], block_size: int, total: M.AcceptanceCounts,
                        summarize: Callable[[M.AcceptanceCounts], dict[str, Any]],
                        edges: Sequence[int] = DEFAULT_DEPTH_EDGES) -> dict[str, Any]:
    """run.json's `by_depth` (every bucket, empty ones too, so that two runs pair by bucket), `by_segment`
    and `by_token_class` (the parts that occur, in SEGMENTS / TOKEN_CLASSES order), each entry with its
    counts and `summarize(counts)` (results.metrics_summary); checked to add up to `total`."""

    def _entry(counts: M.AcceptanceCounts, **label) -> dict[str, Any]:
        return {**label, "metrics": summarize(counts), "counts": counts.to_dict()}

    split = breakdown_counts(rows, block_size, edges)
    walk_rows = [r for r in rows if "walk_anchors" in r]
    marginal = bool(walk_rows) and all("anchor_slot_correct" in r for r in walk_rows)
    for dimension, parts in split.items():
        check_partition(total, parts.values(), marginal=marginal, what=dimension)
    empty = M.AcceptanceCounts(block_size=block_size)
    by_depth = [_entry(split["depth"].get(i, empty), bucket=depth_label(lo, hi), **{"from": lo, "to": hi})
                for i, (lo, hi) in enumerate(depth_bounds(edges))]
    return {
        "depth_edges": list(edges),
        "by_depth": by_depth,
        "by_segment": [_entry(split["segment"][s], segment=s) for s in SEGMENTS if s in split["segment"]],
        "by_token_class": [_entry(split["token_class"][c], token_class=c) for c in TOKEN_CLASSES
                           if c in split["token_class"]],
        **({} if marginal or not walk_rows else
           {"breakdown_note": "no marginal per part: the rows hold no anchor_slot_correct (live mode or an older run)"}),
    }


def slot_bits(slot_correct: Sequence[Sequence[int]]) -> list[int]:
    """engine's slot_correct ([anchor][slot 1..B-1]: 1, 0 or NOT_SCORED) as one integer per anchor, bit k-1
    set when slot k was right: the row's `anchor_slot_correct`."""
    return [sum(1 << k for k, c in enumerate(slots) if c == 1) for slots in slot_correct]


def split_parts(drafter: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """per_position_splits.csv's parts of one drafter object: (split, part, that part's metrics) for every
    depth bucket ("depth", "1K-2K"), segment and token class, empty ones included (nothing for a drafter
    without a breakdown)."""
    out = []
    for key, label in (("by_depth", "bucket"), ("by_segment", "segment"), ("by_token_class", "token_class")):
        out += [("depth" if key == "by_depth" else label, str(e[label]), e["metrics"]) for e in drafter.get(key) or []]
    return out


def depth_pairs(rows_a: list[dict[str, Any]], rows_b: list[dict[str, Any]], block_a: int, block_b: int,
                edges: Sequence[int], seed: int = 0) -> list[dict[str, Any]]:
    """`diff` by depth bucket: each bucket where both sides have steps, each side's steps and tau macro and
    the paired difference B - A, all over the prompts with steps in that bucket on both sides
    (compare.paired_row: one population per row), from the rows of the prompts both runs have."""
    from .compare import paired_row

    split_a = breakdown_counts(rows_a, block_a, edges)["depth"]
    split_b = breakdown_counts(rows_b, block_b, edges)["depth"]
    out = []
    for index, (low, high) in enumerate(depth_bounds(edges)):
        a, b = split_a.get(index), split_b.get(index)
        if a is None or b is None or not a.steps or not b.steps:
            continue
        row = paired_row(a.per_prompt, b.per_prompt, seed=seed)
        if row is not None:  # else no prompt has steps in this bucket on both sides
            out.append({"bucket": depth_label(low, high), "from": low, "to": high, **row})
    return out
