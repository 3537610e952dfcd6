"""run.json as types: the TypedDicts `read_run_document` checks a run document against (core/documents/json_types.py).

Why: every reader of a run folder (`report`, `show`, `diff`, `merge`, `export-serving`, `frames`, the
library's `read_run`) gets a RunDocument whose every declared field has its declared type, checked once
when the file is read; a file that does not match is one InputError naming the file and the field.
results.py's docstring says what each field means; docs/result-documents.md lists them. Keys are
declared NotRequired where some writer leaves them out (an option not given, an estimate, a live run);
keys a class does not declare are passed through unchecked (nothing reads them as a type).

(No `from __future__ import annotations` here: TypedDict reads NotRequired from the real annotations.)
"""

from typing import Any, Literal, NotRequired, TypedDict

from .doctor_document import Delta, DoctorDocument, GapDocument, ServingTargetDocument

Number = float  # an int is a number too (json_types)
Ratio = float | None  # divided when written; null where the denominator is 0


class AcceptanceCountsDocument(TypedDict):
    """metrics.AcceptanceCounts.to_dict: integers only; every ratio beside it is recomputed from these."""

    block_size: int
    per_prompt: dict[str, list[int]]
    steps: int
    accepted_draft_tokens: int
    drafted_tokens: int
    accept_length_histogram: list[int]
    reach_counts: list[int]
    reach_denominators: list[int]
    marginal_correct: list[int]
    marginal_total: list[int]


class WalkMetrics(TypedDict):
    """results.metrics_summary: the numbers shown for a drafter whose walks were replayed or run (temperature 0,
    or the live loop). Every key the renderers read is required: a file without one is refused when read."""

    tau_macro: Ratio
    tau_micro: Ratio
    tau_macro_ci: NotRequired[list[Number] | None]
    tau_macro_ci_note: NotRequired[str | None]
    steps: int
    reach: list[Ratio]
    conditional: list[Ratio]
    marginal: list[Ratio]
    histogram: list[int]
    token_acceptance_rate: Ratio
    prompts_without_steps: NotRequired[int]
    slot_counts: NotRequired[dict[str, list[list[int]]]]


class EstimateMetrics(TypedDict):
    """estimates.summary (`estimate` true): an offline estimate's numbers (temperature > 0, trajectory mode)."""

    estimate: bool
    tau_macro: Ratio
    tau_micro: Ratio
    tau_macro_ci: NotRequired[list[Number] | None]
    tau_macro_ci_note: NotRequired[str | None]
    definition: NotRequired[str]
    expected_steps: NotRequired[Number]
    anchors: NotRequired[int]
    alpha: NotRequired[list[Ratio]]
    expected_reach: NotRequired[list[Ratio]]
    tau_per_anchor: NotRequired[Ratio]


# a drafter's metrics are one or the other; the checker takes the member whose required keys are all present
# (an estimate's `estimate` key picks EstimateMetrics), else names the key WalkMetrics misses
Metrics = EstimateMetrics | WalkMetrics


class RepetitionCountsDocument(TypedDict):
    blocks: int
    flagged_blocks: int
    flagged_by_detector: dict[str, int]
    flagged_by_slot: list[int]
    accepted_flagged: int
    accepted_clean: int
    per_prompt: dict[str, list[int]]


class RepetitionSummary(TypedDict):
    """repetition.py's summary of the walk's blocks (a drafter's `repetition`)."""

    blocks: int
    flagged_blocks: int
    flagged_share: Ratio
    flagged_by_detector: dict[str, int]
    flagged_share_by_slot: list[Ratio]
    accepted_inside_flagged: Ratio
    accepted_outside_flagged: Ratio
    flagged_prompts: list[str]
    tau_macro_without_flagged_prompts: Ratio
    counts: RepetitionCountsDocument


class LayerRule(TypedDict):
    kind: str
    window: int | None
    causal_in_block: bool


class SpecDocument(TypedDict):
    """The normalized DrafterSpec (formats/checkpoints.py): what the renderers read of it is typed."""

    format: str
    block_size: int
    taps: list[int]
    num_layers: NotRequired[int]
    mask_token_id: NotRequired[int | None]
    layers: NotRequired[list[LayerRule]]
    speculators_taps: NotRequired[list[int]]
    verifier: NotRequired[str | None]


class Part(TypedDict):
    """One bucket, segment or token class of a breakdown (breakdown.py); one of the three names is set."""

    metrics: Metrics
    counts: NotRequired[AcceptanceCountsDocument | None]
    bucket: NotRequired[str]
    segment: NotRequired[str]
    token_class: NotRequired[str]
    to: NotRequired[int | None]  # and `from` (a keyword here: passed through unchecked)


class DraftLengthEntry(TypedDict):
    """by_draft_length: one object per draft length k, from its own replay."""

    k: int
    block_size: int
    metrics: Metrics
    counts: NotRequired[AcceptanceCountsDocument | None]
    checkpoint_block: NotRequired[bool]


class SpeedupRow(TypedDict):
    k: int
    block: int
    tokens_per_step: Ratio
    speedup: list[Number | None]  # per batch of SpeedupDocument.batches


class SpeedupDocument(TypedDict):
    """speedup.py's model of the expected speedup (with --accelerator, --step-times, live --draft-lengths)."""

    model: str
    source: str
    label: str
    batches: list[int]
    rows: list[SpeedupRow]
    best: list[dict[str, Any]]
    inputs: NotRequired[dict[str, Any]]


class TreeBudgetEntry(TypedDict):
    """tree.by_budget: DDTree's tree at one budget (core/tree.py), its walks merged over prompts."""

    budget: int
    verify_tokens: int
    metrics: Metrics
    counts: AcceptanceCountsDocument
    failures: dict[str, int]
    candidate_share: Ratio
    gain_over_chain: Ratio


class TreeRecall(TypedDict):
    depth: int
    anchors: int
    recall: dict[str, Ratio]
    counts: list[int]


class TreeDocument(TypedDict):
    """A drafter's `tree` (with --tree-budgets): DDTree's tree at each budget beside the chain (core/tree.py)."""

    policy: str
    budgets: list[int]
    by_budget: list[TreeBudgetEntry]
    saturation: dict[str, Any]
    recall_by_depth: list[TreeRecall]
    deep_rows: NotRequired[int]
    notes: NotRequired[list[str]]
    speedup: NotRequired[dict[str, Any]]


class LiveTimes(TypedDict):
    steps: int
    seconds: Number
    prefill_seconds: NotRequired[Number]


class DrafterDocument(TypedDict):
    """One drafter of run.json's `drafters`, in command-line order."""

    name: str
    path: str
    format: str
    fingerprint: str
    spec: SpecDocument
    metrics: Metrics
    snapshot: NotRequired[dict[str, Any] | None]
    by_prompt_set: NotRequired[dict[str, Metrics]]
    counts: NotRequired[AcceptanceCountsDocument | None]
    repetition: NotRequired[RepetitionSummary | None]
    live: NotRequired[LiveTimes]
    by_draft_length: NotRequired[list[DraftLengthEntry]]
    speedup: NotRequired[SpeedupDocument]
    tree: NotRequired[TreeDocument]
    depth_edges: NotRequired[list[int]]
    by_depth: NotRequired[list[Part]]
    by_segment: NotRequired[list[Part]]
    by_token_class: NotRequired[list[Part]]
    breakdown_note: NotRequired[str]
    draft_policy: NotRequired[str]
    estimate: NotRequired[dict[str, Any] | None]


class TargetDocument(TypedDict):
    name: str
    path: str
    fingerprint: NotRequired[str | None]
    snapshot: NotRequired[dict[str, Any] | None]
    model_type: NotRequired[str | None]
    num_layers: NotRequired[int]
    hidden_size: NotRequired[int]
    vocab_size: NotRequired[int]


class AgreeTotal(TypedDict):
    agree: int
    total: int


class PromptsDocument(TypedDict):
    source: str
    count: int
    sets: dict[str, int]
    context_tokens: NotRequired[int | None]
    max_context: NotRequired[str | None]


class SamplingDocument(TypedDict):
    temperature: Number
    top_p: NotRequired[Number]
    top_k: NotRequired[int]
    draft_policy: NotRequired[Literal["sample", "argmax", "both"]]
    samples: NotRequired[int]
    seed: NotRequired[int]
    generator: NotRequired[str]


class ReferenceDocument(TypedDict):
    """--reference: the reference's name among the drafters and the value given ('z-lab', PATH or PATH:NAME)."""

    name: str
    given: str


class Provenance(TypedDict):
    """How the numbers were produced (results.py says what each field means)."""

    max_new_tokens: int
    temperature: Number
    mode: Literal["trajectory", "live"]
    prompts: PromptsDocument
    dflash_eval: NotRequired[str]
    torch: NotRequired[str]
    transformers: NotRequired[str]
    python: NotRequired[str]
    git_sha: NotRequired[str | None]
    argv: NotRequired[list[str]]
    created: NotRequired[str]
    target: NotRequired[TargetDocument]
    inputs: NotRequired[dict[str, str | None] | None]
    draft_lengths: NotRequired[Any]
    tree_budgets: NotRequired[str]
    tree_note: NotRequired[str | None]
    tokenizer_hash: NotRequired[str | None]
    chat_template_hash: NotRequired[str | None]
    enable_thinking: NotRequired[bool | None]
    thinking_source: NotRequired[str]
    sampling: NotRequired[SamplingDocument | None]
    estimate: NotRequired[bool]
    dtype: NotRequired[str]
    device: NotRequired[str]
    kernels: NotRequired[dict[str, Any]]
    numerics: NotRequired[dict[str, Any]]
    draft_window: NotRequired[int | None]
    final_block: NotRequired[str]
    final_block_by_drafter: NotRequired[dict[str, str]]
    continuations: NotRequired[str]
    self_consistency: NotRequired[AgreeTotal | None]
    responses_agreement: NotRequired[AgreeTotal | None]
    trained_taps: NotRequired[dict[str, Any]]
    warnings: NotRequired[list[str]]
    work: NotRequired[dict[str, int]]
    merged_from: NotRequired[list[str]]
    reference: NotRequired[ReferenceDocument | None]
    explain: NotRequired[bool]
    out: NotRequired[str]


class Incomplete(TypedDict):
    """run.partial.json only: how far an unfinished run got."""

    done: int
    total: int


class ExplainedVariant(TypedDict):
    """One row of an explanation's variants table (core/explanation.py); the first is the drafter as configured."""

    variant: str
    tau_macro: Ratio
    flagged_share: Ratio
    flagged_blocks: int
    blocks: int
    bug: NotRequired[str]
    delta: NotRequired[Delta]


class ExplanationDocument(TypedDict):
    """`run --reference`: one drafter's gap to the reference, explained by doctor's variants replayed on the
    run's own trajectories (core/explanation.py)."""

    drafter: str
    reference: str
    prompts: int
    behind: bool
    verdict: str
    finding: str | None
    variants: list[ExplainedVariant]
    gap: GapDocument


class RunDocument(TypedDict):
    """DIR/run.json (and DIR/run.partial.json, which adds `incomplete`)."""

    schema_version: int
    provenance: Provenance
    drafters: list[DrafterDocument]
    explanation: NotRequired[list[ExplanationDocument]]
    doctor: NotRequired[DoctorDocument]
    serving_target: NotRequired[ServingTargetDocument]
    incomplete: NotRequired[Incomplete]
