"""doctor.json (and run.json's `doctor` section) as types: what `dflash-eval doctor` writes, checked when a
run document that holds it is read (core/documents/json_types.py). commands/doctor.py says what each field means.

Only what a reader renders is typed (the verdict, the variants table, the MASK row, the gap): the other
sections (windows, logit lens, norm convention, trained taps, engines) pass through as JSON objects, and
their template reads them forgivingly. (No `from __future__ import annotations`: TypedDict reads
NotRequired from the real annotations.)
"""

from typing import Any, NotRequired, TypedDict


class Delta(TypedDict):
    """compare.py's paired delta: estimate with its bootstrap interval and permutation p."""

    estimate: float
    low: float
    high: float
    p_value: NotRequired[float]


class VariantRow(TypedDict):
    """One row of the variants table: the drafter replayed as one classic bug would have trained it."""

    variant: str
    tau_macro: float | None
    bug: NotRequired[str]
    how: NotRequired[str]
    delta: NotRequired[Delta | None]
    identical_drafts: NotRequired[float | None]
    target_passes: NotRequired[int]
    per_prompt: NotRequired[dict[str, Any]]


class MaskRow(TypedDict):
    ok: bool
    detail: str


class GapRow(TypedDict):
    variant: str
    closed: Delta
    share: NotRequired[float | None]
    share_ci: NotRequired[list[float] | None]


class GapDocument(TypedDict):
    """With --reference: the gap to it, decomposed by variant (gap.py)."""

    reference: NotRequired[str]
    gap: NotRequired[Delta | None]
    paragraph: NotRequired[str]
    reference_tau_macro: NotRequired[float | None]
    paired_prompts: NotRequired[int]
    variants: NotRequired[list[GapRow]]


class ServingPart(TypedDict):
    """One part of the drop to the serving target (core/serving_split.py): its estimate and percentile interval."""

    estimate: float
    low: float
    high: float


class ServingDrafterSplit(TypedDict):
    """One drafter's drop from the target to the serving target and its two parts (core/serving_split.py)."""

    drafter: str
    verdict: str
    prompts: int
    paired_prompts: int
    tau: dict[str, float] | None
    drop: Delta | None
    target_disagreement: ServingPart | None
    drafter_inputs: ServingPart | None
    orders: NotRequired[dict[str, dict[str, float]]]
    prompt_ids: NotRequired[list[str]]


class ServingTargetDocument(TypedDict):
    """`--serving-target PATH` (commands/serving_target.py), in run.json and doctor.json: the serving target's
    identity, its argmax disagreement with the target on the target's text, and each drafter's split."""

    serving_target: dict[str, Any]
    target: str
    argmax_disagreement: dict[str, Any]
    drafters: list[ServingDrafterSplit]
    tap_passes: NotRequired[dict[str, int]]
    generated: NotRequired[int]
    cells: NotRequired[dict[str, str]]


class DoctorDocument(TypedDict):
    """DIR/doctor.json: the drafter's variants, static checks and the verdict that names the mismatch."""

    drafter: str
    verdict: str
    variants: list[VariantRow]
    mask_row: NotRequired[MaskRow | None]
    path: NotRequired[str]
    target: NotRequired[str]
    prompts: NotRequired[int]
    tap_passes: NotRequired[int]
    passes: NotRequired[dict[str, int]]
    warnings: NotRequired[list[str]]
    finding: NotRequired[str | None]
    gap: NotRequired[GapDocument | None]
    windows: NotRequired[dict[str, Any] | None]
    logit_lens: NotRequired[dict[str, Any] | None]
    norm_convention: NotRequired[dict[str, Any] | None]
    trained_taps: NotRequired[dict[str, Any] | None]
    trees: NotRequired[dict[str, Any] | None]
    serving_target: NotRequired[ServingTargetDocument]
    fc_range: NotRequired[dict[str, Any]]
