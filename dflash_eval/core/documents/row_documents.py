"""samples.jsonl and track.jsonl rows as types: what `run_rows` and the track folder's reader check each row
against (core/documents/json_types.py), before core/documents/invariants.py checks the numbers inside.

Why: report, show, diff, merge, frames and track read rows back; a row edited by hand or damaged is one
InputError naming the file, the line and the field, never a KeyError in a renderer. results.py's docstring
says what each field means; docs/result-documents.md lists them. (No `from __future__ import annotations`:
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

    variant: str
    bug: str
    check: str
    counts: list[int]  # [steps, committed tokens]
    flagged: list[int]  # [flagged blocks, blocks]


class RowExplanation(TypedDict):
    reference: str
    variants: list[ExplainedVariantCounts]


class SampleRow(TypedDict):
    """DIR/samples.jsonl: one row per (prompt, drafter), and per sample at temperature > 0. An offline
    estimate's row has anchor_alphas and estimate instead of the walk fields and counts."""

    prompt_id: str
    drafter: str
    prompt_len: int
    continuation_len: int
    prompt_set: NotRequired[str]
    sample: NotRequired[int]
    walk_anchors: NotRequired[list[int]]
    walk_accept_lengths: NotRequired[list[int]]
    walk_drafted: NotRequired[list[int]]
    walk_drafts: NotRequired[list[list[int]]]
    anchor_accepted: NotRequired[list[int]]
    anchor_slot_correct: NotRequired[list[int]]
    continuation_ids: NotRequired[list[int]]
    continuation_pieces: NotRequired[list[str]]
    walk_draft_pieces: NotRequired[list[list[str]]]
    walk_flags: NotRequired[list[list[str]]]
    self_consistency: NotRequired[list[int | bool]]
    repetition: NotRequired[RepetitionCountsDocument]
    counts: NotRequired[AcceptanceCountsDocument]
    by_draft_length: NotRequired[dict[str, dict[str, Any]]]
    tree: NotRequired[dict[str, Any]]
    step_seconds: NotRequired[list[float]]
    draft_seconds: NotRequired[list[float]]
    verify_seconds: NotRequired[list[float]]
    one_token_step: NotRequired[dict[str, float]]
    anchor_alphas: NotRequired[list[list[float]]]
    anchor_expected_accepted: NotRequired[list[float]]
    estimate: NotRequired[dict[str, Any]]
    label_ids: NotRequired[list[int]]
    training_sample: NotRequired[Any]
    segment: NotRequired[Any]
    explain: NotRequired[RowExplanation]


class TrackRow(TypedDict):
    """DIR/track.jsonl: one row per evaluated checkpoint and one for the reference (pipeline/track_folder.py)."""

    role: Literal["checkpoint", "reference"]
    name: str
    path: str
    fingerprint: str
    metrics: Metrics
    step: NotRequired[int | None]
    step_source: NotRequired[str | None]
    identity: NotRequired[list[list[Any]]]
    run: str
    snapshot: NotRequired[dict[str, Any] | None]
    architecture: NotRequired[Any]
    format: NotRequired[str]
    block_size: NotRequired[int]
    repetition_share: NotRequired[float | None]
    tau_macro_without_flagged_prompts: NotRequired[float | None]
    counts: NotRequired[AcceptanceCountsDocument | None]
    estimate: NotRequired[dict[str, Any]]
    by_draft_length: NotRequired[list[DraftLengthEntry]]
    tree: NotRequired[TreeDocument]
    depth_edges: NotRequired[list[int]]
    by_depth: NotRequired[list[Part]]
    evaluated_at: NotRequired[str]
