"""doctor.json (and run.json's `doctor` section) as types: what `dflash-eval doctor` writes, checked when a
run document that holds it is read (core/documents/json_types.py). A field's meaning is the comment above it.

Only what a reader renders is typed (the verdict, the variants table, the MASK row, the gap): the other
sections (windows, logit lens, norm convention, trained taps, engines) pass through as JSON objects, and
their template reads them forgivingly. (No `from __future__ import annotations`: TypedDict reads
NotRequired from the real annotations.)
"""

from typing import Any, NotRequired, TypedDict


class Delta(TypedDict):
    """compare.py's paired delta: estimate with its bootstrap interval and permutation p."""

    # the paired difference (variant minus base, or B minus A)
    estimate: float
    # the bootstrap 95% interval's low end
    low: float
    # its high end
    high: float
    # the paired permutation test's p
    p_value: NotRequired[float]


class VariantRow(TypedDict):
    """One row of the variants table: the drafter replayed as one classic bug would have trained it."""

    # the variant's name; the first row is the drafter as configured
    variant: str
    # tau macro of the drafter replayed under the variant
    tau_macro: float | None
    # the training bug the variant stands for
    bug: NotRequired[str]
    # what the variant changes, in one line
    how: NotRequired[str]
    # tau macro minus as configured's, paired over prompts
    delta: NotRequired[Delta | None]
    # share of drafts identical to as configured's (1.0 for a zeroed tap: the tap is unused)
    identical_drafts: NotRequired[float | None]
    # (context variants) target passes this variant took
    target_passes: NotRequired[int]
    # prompt id -> [steps, committed tokens] under the variant
    per_prompt: NotRequired[dict[str, Any]]


class MaskRow(TypedDict):
    # true when the MASK embedding row exists, is non-zero and does not look untrained
    ok: bool
    # what was found, in one line
    detail: str


class GapRow(TypedDict):
    # the variant
    variant: str
    # the part of the gap the variant closes, paired over prompts
    closed: Delta
    # closed / gap
    share: NotRequired[float | None]
    # [low, high]: the share's bootstrap interval
    share_ci: NotRequired[list[float] | None]


class GapDocument(TypedDict):
    """With --reference: the gap to it, decomposed by variant (gap.py)."""

    # the reference's name
    reference: NotRequired[str]
    # reference tau macro minus the drafter's, paired over prompts
    gap: NotRequired[Delta | None]
    # the decomposition in words
    paragraph: NotRequired[str]
    # the reference's tau macro
    reference_tau_macro: NotRequired[float | None]
    # prompts both were scored on
    paired_prompts: NotRequired[int]
    # one row per variant: how much of the gap it closes
    variants: NotRequired[list[GapRow]]


class ServingPart(TypedDict):
    """One part of the drop to the serving target (core/serving_split.py): its estimate and percentile interval."""

    # the part of the drop
    estimate: float
    # its percentile interval's low end
    low: float
    # its high end
    high: float


class ServingDrafterSplit(TypedDict):
    """One drafter's drop from the target to the serving target and its two parts (core/serving_split.py)."""

    # the drafter
    drafter: str
    # the split in one line
    verdict: str
    # prompts replayed
    prompts: int
    # prompts with steps in every cell
    paired_prompts: int
    # cell (AA, AB, BA, BB: whose taps, whose text) -> tau macro; null without paired prompts
    tau: dict[str, float] | None
    # tau AA - BB, paired over prompts
    drop: Delta | None
    # the part of the drop from the serving target verifying differently
    target_disagreement: ServingPart | None
    # the part from the drafter reading the serving target's taps
    drafter_inputs: ServingPart | None
    # the two parts computed in each order of the split
    orders: NotRequired[dict[str, dict[str, float]]]
    # the paired prompts
    prompt_ids: NotRequired[list[str]]


class ServingTargetDocument(TypedDict):
    """`--serving-target PATH` (commands/serving_target.py), in run.json and doctor.json: the serving target's
    identity, its argmax disagreement with the target on the target's text, and each drafter's split."""

    # the copy served: path, kind, fingerprint, its quantisation or GGUF tensor types
    serving_target: dict[str, Any]
    # the target's path
    target: str
    # how often the serving target's argmax differs from the target's on the target's text
    argmax_disagreement: dict[str, Any]
    # per drafter: the four replays' tau, the drop and its two parts
    drafters: list[ServingDrafterSplit]
    # target passes per model (A the target, B the serving target)
    tap_passes: NotRequired[dict[str, int]]
    # continuations the serving target generated
    generated: NotRequired[int]
    # cell name -> what it means (AA: A's taps, A's text, the run; BB: B's taps, B's text; AB, BA the mixes)
    cells: NotRequired[dict[str, str]]


class DoctorDocument(TypedDict):
    """DIR/doctor.json: the drafter's variants, static checks and the verdict that names the mismatch."""

    # the drafter examined
    drafter: str
    # the mismatch named, in one line (ESTIMATE: first at temperature > 0)
    verdict: str
    # the variants table: the drafter replayed as each classic bug would have trained it
    variants: list[VariantRow]
    # the MASK embedding row's check
    mask_row: NotRequired[MaskRow | None]
    # the drafter's checkpoint folder
    path: NotRequired[str]
    # the target's path
    target: NotRequired[str]
    # prompts replayed
    prompts: NotRequired[int]
    # target passes that captured taps
    tap_passes: NotRequired[int]
    # target passes per purpose: variants, each context variant, trained taps
    passes: NotRequired[dict[str, int]]
    # what the reader should know, one line each
    warnings: NotRequired[list[str]]
    # the variant named as the cause, or null
    finding: NotRequired[str | None]
    # (with --reference) the gap to it, decomposed by variant (gap.py)
    gap: NotRequired[GapDocument | None]
    # the sliding-window checks (doctor_windows.py)
    windows: NotRequired[dict[str, Any] | None]
    # the drafts against the logit lens of the last target layers
    logit_lens: NotRequired[dict[str, Any] | None]
    # (speculators checkpoints) the teacher's final-norm convention (doctor_norm.py)
    norm_convention: NotRequired[dict[str, Any] | None]
    # (with trained data) the trained-taps document
    trained_taps: NotRequired[dict[str, Any] | None]
    # (with tree budgets) the tree checks
    trees: NotRequired[dict[str, Any] | None]
    # (with --serving-target) the drop to the serving target and its parts
    serving_target: NotRequired[ServingTargetDocument]
    # fc(taps) over every trajectory at the run's dtype and at float16: values, overflows, largest |fc|
    # (doctor_defects.py)
    fc_range: NotRequired[dict[str, Any]]
