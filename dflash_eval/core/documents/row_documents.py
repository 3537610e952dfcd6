"""samples.jsonl and track.jsonl rows as types: what `run_rows` and the track folder's reader check each row
against (core/documents/json_types.py), before core/documents/invariants.py checks the numbers inside.

Why: report, show, diff, merge, frames and track read rows back; a row edited by hand or damaged is one
InputError naming the file, the line and the field, never a KeyError in a renderer. A field's meaning is
the comment above it; docs/result-documents.md is generated from both. (No `from __future__ import annotations`:
TypedDict reads NotRequired from the real annotations.)
"""

from typing import Any, Literal, NotRequired, TypedDict

from .run_document import (
    AcceptanceCountsDocument,
    DraftLengthEntry,
    Metrics,
    Part,
    RepetitionCountsDocument,
    TreeDocument,
)


class ExplainedVariantCounts(TypedDict):
    """One variant of a row's `explain`: its walk on this prompt's trajectory (commands/explain.py)."""

    # the variant's name
    variant: str
    # the training bug it stands for
    bug: str
    # what to check in the trainer
    check: str
    # [steps, committed tokens] of its walk
    counts: list[int]
    # [flagged blocks, blocks]
    flagged: list[int]


class RowExplanation(TypedDict):
    # the reference's name
    reference: str
    # each of doctor's variants replayed on this prompt's trajectory (commands/explain.py)
    variants: list[ExplainedVariantCounts]


class SampleRow(TypedDict):
    """DIR/samples.jsonl: one row per (prompt, drafter), and per sample k (`sample`) at temperature > 0. An
    offline estimate's row has anchor_alphas (per anchor, per slot), anchor_expected_accepted and estimate
    (EstimateSums) instead of the walk fields and counts."""

    # the prompt's id (trained-taps rows: SAMPLE, or SAMPLE:K for its K-th supervised stretch)
    prompt_id: str
    # the drafter's name
    drafter: str
    # prompt tokens
    prompt_len: int
    # continuation tokens
    continuation_len: int
    # the set the prompt came from
    prompt_set: NotRequired[str]
    # k, the sample's index at temperature > 0
    sample: NotRequired[int]
    # anchor position of each step
    walk_anchors: NotRequired[list[int]]
    # n + 1 per step, in order (tokens committed by the step)
    walk_accept_lengths: NotRequired[list[int]]
    # slots that could count at each step (B-1, fewer at the end)
    walk_drafted: NotRequired[list[int]]
    # drafted target token ids at each step (slots 1..)
    walk_drafts: NotRequired[list[list[int]]]
    # n(a) for every anchor a = prompt_len .. T-2 (trajectory mode)
    anchor_accepted: NotRequired[list[int]]
    # per anchor a = prompt_len .. T-2 (trajectory mode), an integer whose bit k-1 is set when slot k was right (slots
    # 1 .. min(B-1, T-1-a) are scored): breakdown.py's marginal
    anchor_slot_correct: NotRequired[list[int]]
    # the target's continuation (token ids) the drafts were scored against
    continuation_ids: NotRequired[list[int]]
    # each continuation token decoded alone (token boundaries stay visible)
    continuation_pieces: NotRequired[list[str]]
    # each walk step's drafted tokens, decoded alone
    walk_draft_pieces: NotRequired[list[list[str]]]
    # per walk step, the repetition detectors that fired (empty list when clean)
    walk_flags: NotRequired[list[list[str]]]
    # [agree, total] of this row: continuation tokens equal to the argmax of one full-sequence forward
    self_consistency: NotRequired[list[int | bool]]
    # this row's RepetitionCounts
    repetition: NotRequired[RepetitionCountsDocument]
    # this row's AcceptanceCounts (walk + all-anchor marginal counts)
    counts: NotRequired[AcceptanceCountsDocument]
    # (with --draft-lengths) {"k": {walk_anchors, walk_accept_lengths, walk_drafted, anchor_accepted (trajectory) or
    # step_seconds / draft_seconds / verify_seconds (live), counts}} per shorter draft length k < B - 1
    by_draft_length: NotRequired[dict[str, dict[str, Any]]]
    # (with --tree-budgets) {budgets, vocab (the draft vocabulary), first_anchor, anchor_path_nodes (per anchor: the
    # pop index of each node of the target's path that the heap popped within the largest budget; the tree of budget b
    # holds the nodes <= b), rank_counts (per depth, anchors per rank bucket), deep_rows, walks {"b": {walk_anchors,
    # walk_accept_lengths, walk_drafted, walk_failures (0 candidate, 1 budget, 2 complete per step), failures,
    # counts}}}
    tree: NotRequired[dict[str, Any]]
    # (live) per step: wall seconds of the whole step
    step_seconds: NotRequired[list[float]]
    # (live) per step: the drafter's pass
    draft_seconds: NotRequired[list[float]]
    # (live) per step: the target's verify forward
    verify_seconds: NotRequired[list[float]]
    # (live with --draft-lengths, no other step times) {"seconds", "steps"} of plain one-token decoding steps timed on
    # this prompt (t_target(1) of speedup.py)
    one_token_step: NotRequired[dict[str, float]]
    # (offline estimate) per anchor, per slot: the probability the slot is accepted
    anchor_alphas: NotRequired[list[list[float]]]
    # (offline estimate) per anchor: expected accepted tokens
    anchor_expected_accepted: NotRequired[list[float]]
    # (offline estimate) this row's EstimateSums
    estimate: NotRequired[dict[str, Any]]
    # (trained-taps rows) the ids each slot was scored against: the stored teacher's or the target's greedy next
    # tokens, or the data tokens
    label_ids: NotRequired[list[int]]
    # (trained-taps rows) the training sample the row belongs to
    training_sample: NotRequired[Any]
    # (trained-taps rows) K: the supervised stretch of that sample
    segment: NotRequired[Any]
    # (`run --reference`, the drafters compared with it) each of doctor's variants replayed on this prompt's
    # trajectory (commands/explain.py)
    explain: NotRequired[RowExplanation]


class TrackRow(TypedDict):
    """DIR/track.jsonl: one row per evaluated checkpoint and one for the reference, append-only
    (pipeline/track_folder.py)."""

    # "checkpoint" or "reference"
    role: Literal["checkpoint", "reference"]
    # the checkpoint folder's name (its drafter name in its run folder)
    name: str
    # the checkpoint folder's absolute path
    path: str
    # sha256 of config.json + weight files: a checkpoint's identity
    fingerprint: str
    # exactly run.json's drafters[0].metrics for that run folder (tau_macro with tau_macro_ci, tau_micro, reach,
    # conditional, marginal, histogram, slot_counts, ...)
    metrics: Metrics
    # training step, null if unknown
    step: NotRequired[int | None]
    # where the step came from ("trainer_state.json global_step", "training_state.json global_step", "folder name
    # checkpoint-N", ...); null if unknown
    step_source: NotRequired[str | None]
    # [[file, size, mtime_ns]] of config and weights when evaluated (a later scan that sees the same files needs no
    # hashing; other files mean other weights)
    identity: NotRequired[list[list[Any]]]
    # "runs/<label>": its run folder, what `dflash-eval run` writes for it alone
    run: str
    # {"repo", "revision"}: the HF cache snapshot it was read from, else null
    snapshot: NotRequired[dict[str, Any] | None]
    # the shape its numbers depend on, from its spec: layers, taps, sliding window, block size, hidden size
    architecture: NotRequired[Any]
    # the checkpoint's format
    format: NotRequired[str]
    # the checkpoint's B
    block_size: NotRequired[int]
    # share of walk blocks flagged repetitive (run.json repetition.flagged_share)
    repetition_share: NotRequired[float | None]
    # as in run.json's repetition summary
    tau_macro_without_flagged_prompts: NotRequired[float | None]
    # the merged AcceptanceCounts (per-prompt, so checkpoints compare paired)
    counts: NotRequired[AcceptanceCountsDocument | None]
    # (offline estimate) the run folder's EstimateSums
    estimate: NotRequired[dict[str, Any]]
    # (track --draft-lengths) run.json's by_draft_length of that run folder: tau at each k
    by_draft_length: NotRequired[list[DraftLengthEntry]]
    # (track --tree-budgets) run.json's tree of that run folder (tau per budget, recall)
    tree: NotRequired[TreeDocument]
    # run.json's depth edges of that run folder (track --depth-buckets)
    depth_edges: NotRequired[list[int]]
    # run.json's depth split of that run folder
    by_depth: NotRequired[list[Part]]
    # UTC time the row was written
    evaluated_at: NotRequired[str]
