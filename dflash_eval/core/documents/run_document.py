"""run.json as types: the TypedDicts `read_run_document` checks a run document against (core/documents/json_types.py).

Why: every reader of a run folder (`report`, `show`, `diff`, `merge`, `export-serving`, `frames`, the
library's `read_run`) gets a RunDocument whose every declared field has its declared type, checked once
when the file is read; a file that does not match is one InputError naming the file and the field.
A field's meaning is the comment above it (docs/result-documents.md is generated from both). Keys are
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

    # B, the drafter's block: slot 0 is the anchor, slots 1..B-1 are drafted
    block_size: int
    # prompt id -> [walk steps, committed tokens] of that prompt (tau macro and the paired bootstrap read these)
    per_prompt: dict[str, list[int]]
    # walk steps over every prompt
    steps: int
    # drafted tokens accepted over every step (n summed; vLLM num_accepted_tokens)
    accepted_draft_tokens: int
    # slots drafted over every step (B-1 each, fewer near the end; vLLM num_draft_tokens)
    drafted_tokens: int
    # steps that accepted n drafted tokens, for n = 0..B-1
    accept_length_histogram: list[int]
    # per slot k = 1..B-1: steps whose accepted run reached slot k
    reach_counts: list[int]
    # per slot k: steps that drafted at least k slots (the denominator of reach)
    reach_denominators: list[int]
    # per slot k (trajectory mode): anchors whose slot k was right, whatever came before
    marginal_correct: list[int]
    # per slot k: anchors where slot k was scored (all zero in live runs: no marginal)
    marginal_total: list[int]


class WalkMetrics(TypedDict):
    """results.metrics_summary: the numbers shown for a drafter whose walks were replayed or run (temperature 0,
    or the live loop). Every key the renderers read is required: a file without one is refused when read."""

    # mean over prompts of committed tokens per step (z-lab's tau)
    tau_macro: Ratio
    # committed tokens over steps, pooled over prompts (vLLM's mean acceptance length)
    tau_micro: Ratio
    # [low, high]: bootstrap 95% interval of tau_macro over prompts; null below 5 prompts
    tau_macro_ci: NotRequired[list[Number] | None]
    # why tau_macro_ci is null (too few prompts, or no steps), else null
    tau_macro_ci_note: NotRequired[str | None]
    # walk steps over every prompt
    steps: int
    # per slot 1..B-1: share of steps whose accepted run reached the slot (speculators' acceptance_at_pos, all-steps
    # denominator)
    reach: list[Ratio]
    # per slot: share accepted among steps that reached the slot before it
    conditional: list[Ratio]
    # per slot: share of anchors whose slot was right, whatever came before (trajectory mode; empty in live runs)
    marginal: list[Ratio]
    # counts of steps that accepted n = 0..B-1 drafted tokens
    histogram: list[int]
    # accepted drafted tokens over drafted slots
    token_acceptance_rate: Ratio
    # prompts whose continuation ended at once (no walk step)
    prompts_without_steps: NotRequired[int]
    # {reach, conditional, marginal: [[numerator, denominator] per slot]}: the ratios above before division
    slot_counts: NotRequired[dict[str, list[list[int]]]]


class EstimateMetrics(TypedDict):
    """estimates.summary (`estimate` true): an offline estimate's numbers (temperature > 0, trajectory mode)."""

    # true: these numbers are the offline estimate (temperature > 0, trajectory mode: estimates.py), not a walk
    estimate: bool
    # expected tau per prompt, averaged over prompts (K samples of a prompt pooled into one unit)
    tau_macro: Ratio
    # expected committed tokens over expected steps, pooled over prompts
    tau_micro: Ratio
    # [low, high]: bootstrap 95% interval of tau_macro over prompts; null below 5 prompts
    tau_macro_ci: NotRequired[list[Number] | None]
    # why tau_macro_ci is null, else null
    tau_macro_ci_note: NotRequired[str | None]
    # the estimate's definition in one paragraph (estimates.DEFINITION)
    definition: NotRequired[str]
    # expected walk steps over every prompt
    expected_steps: NotRequired[Number]
    # anchors the estimate averaged over
    anchors: NotRequired[int]
    # per slot: the acceptance probability summed over anchors, over the anchors that score the slot
    alpha: NotRequired[list[Ratio]]
    # per slot: the expected share of anchors whose accepted run reaches the slot
    expected_reach: NotRequired[list[Ratio]]
    # 1 + the expected reach summed over slots: expected committed tokens of a step from an average anchor
    tau_per_anchor: NotRequired[Ratio]


# a drafter's metrics are one or the other; the checker takes the member whose required keys are all present
# (an estimate's `estimate` key picks EstimateMetrics), else names the key WalkMetrics misses
Metrics = EstimateMetrics | WalkMetrics


class RepetitionCountsDocument(TypedDict):
    # walk blocks examined
    blocks: int
    # blocks at least one repetition detector fired on
    flagged_blocks: int
    # detector name -> blocks it fired on
    flagged_by_detector: dict[str, int]
    # index i-1: flagged blocks whose slot i lies in a fired pattern (as long as the longest block seen)
    flagged_by_slot: list[int]
    # sum of accepted lengths n over flagged blocks
    accepted_flagged: int
    # the same over the other blocks (blocks - flagged_blocks of them)
    accepted_clean: int
    # prompt id -> [flagged blocks, blocks] of that prompt
    per_prompt: dict[str, list[int]]


class RepetitionSummary(TypedDict):
    """repetition.py's summary of the walk's blocks (a drafter's `repetition`)."""

    # walk blocks examined by the degenerate-draft detectors (repetition.py)
    blocks: int
    # blocks a detector fired on, each judged against the target's own tokens at those slots
    flagged_blocks: int
    # flagged_blocks / blocks
    flagged_share: Ratio
    # detector name -> blocks it fired on
    flagged_by_detector: dict[str, int]
    # per slot: share of blocks flagged there
    flagged_share_by_slot: list[Ratio]
    # mean n (accepted drafted tokens) per flagged block
    accepted_inside_flagged: Ratio
    # mean n per block that was not flagged
    accepted_outside_flagged: Ratio
    # prompts with >= 25% of their blocks flagged
    flagged_prompts: list[str]
    # tau macro over the prompts that are not flagged
    tau_macro_without_flagged_prompts: Ratio
    # the additive counts these are divided from (RepetitionCounts.to_dict)
    counts: RepetitionCountsDocument


class LayerRule(TypedDict):
    # the layer's attention kind: "full_attention" or "sliding_attention"
    kind: str
    # its sliding window in tokens, null for full attention
    window: int | None
    # true: causal inside the draft block; false: bidirectional
    causal_in_block: bool


class SpecDocument(TypedDict):
    """The normalized DrafterSpec (formats/checkpoints.py): what the renderers read of it is typed."""

    # "zlab" or "speculators"
    format: str
    # B: slots per draft block (anchor + B-1 drafted)
    block_size: int
    # the target layers the drafter reads, in z-lab numbering (output of layer t)
    taps: list[int]
    # the drafter's own layers
    num_layers: NotRequired[int]
    # the MASK token filling the drafted slots, null where none
    mask_token_id: NotRequired[int | None]
    # per drafter layer: its attention kind, window and in-block causality
    layers: NotRequired[list[LayerRule]]
    # the same taps in speculators' numbering (t+1)
    speculators_taps: NotRequired[list[int]]
    # the target the checkpoint says it was trained for, else null
    verifier: NotRequired[str | None]


class Part(TypedDict):
    """One bucket, segment or token class of a breakdown (breakdown.py); one of the three names is set."""

    # the metrics (as a drafter's) of the walk steps anchored in this part
    metrics: Metrics
    # that part's AcceptanceCounts: its walk steps and, trajectory mode, its anchors for the marginal
    counts: NotRequired[AcceptanceCountsDocument | None]
    # by_depth: the bucket of the anchor's absolute position ("1K-2K", "32K+"); `from`, `to` (null: no bound) are its
    # edges (`from`, a keyword here, passes unchecked)
    bucket: NotRequired[str]
    # by_segment: the segment of the token slot 1 predicts (thinking, answer_prose, answer_code, tool_call;
    # text_kinds.py)
    segment: NotRequired[str]
    # by_token_class: the class of that token (whitespace, newline, identifier, keyword, number, string, operator,
    # comment, word, special, other)
    token_class: NotRequired[str]
    # by_depth: the bucket's upper edge, null for the last (open) bucket
    to: NotRequired[int | None]


class DraftLengthEntry(TypedDict):
    """by_draft_length: one object per draft length k, from its own replay."""

    # draft length: the drafted tokens per step, as a server's num_speculative_tokens = k
    k: int
    # k + 1: the block of this replay (bidirectional attention in the block: never the full block's walk cut at k)
    block_size: int
    # the metrics over slots 1..k of this length's own replay (live: loop)
    metrics: Metrics
    # the merged AcceptanceCounts of those walks
    counts: NotRequired[AcceptanceCountsDocument | None]
    # true on the last object: the checkpoint's own block (k = B - 1, the same as the drafter's metrics and counts)
    checkpoint_block: NotRequired[bool]


class SpeedupRow(TypedDict):
    # draft length
    k: int
    # the block verified per step (k + 1)
    block: int
    # tau micro at k: tokens committed per target step
    tokens_per_step: Ratio
    # per batch of `batches`: the expected speedup, null where a step time is unknown
    speedup: list[Number | None]


class SpeedupDocument(TypedDict):
    """speedup.py's model of the expected speedup (with --accelerator, --step-times, live --draft-lengths)."""

    # the formula of the expected speedup (speedup.py); a MODEL, not a measurement
    model: str
    # where the step times come from: "roofline", "file" (--step-times) or "measured" (live)
    source: str
    # one line: the model and its inputs
    label: str
    # the batch sizes ([1, 4, 16, 64] unless the source has others); beside them target_seconds_one_token (per batch,
    # undeclared here)
    batches: list[int]
    # one per draft length: tokens per step and the speedup per batch (with target_seconds, drafter_seconds per batch)
    rows: list[SpeedupRow]
    # [{batch, k, speedup}]: the best draft length at each batch
    best: list[dict[str, Any]]
    # the step times, or what the roofline was fed
    inputs: NotRequired[dict[str, Any]]


class TreeBudgetEntry(TypedDict):
    """tree.by_budget: DDTree's tree at one budget (core/tree.py), its walks merged over prompts."""

    # the tree's node budget
    budget: int
    # tokens the target verifies per step (1 + budget)
    verify_tokens: int
    # the metrics of the tree walks (marginal empty)
    metrics: Metrics
    # the merged AcceptanceCounts of the tree walks
    counts: AcceptanceCountsDocument
    # why steps ended: candidate (the target's token outside the top min(budget, vocab) of its depth), budget (inside,
    # but its prefix missed the best-first cut), complete (the step accepted all it could)
    failures: dict[str, int]
    # share of failures that were candidate failures
    candidate_share: Ratio
    # tau macro minus the chain's
    gain_over_chain: Ratio


class TreeRecall(TypedDict):
    # depth in the tree (slot)
    depth: int
    # anchors that reached this depth
    anchors: int
    # {"1", "4", "16", "64"}: share of those anchors whose target token ranked within that many candidates
    recall: dict[str, Ratio]
    # anchors per rank bucket 1, 2-4, 5-16, 17-64, >64, none
    counts: list[int]


class TreeDocument(TypedDict):
    """A drafter's `tree` (with --tree-budgets): DDTree's tree at each budget beside the chain (core/tree.py)."""

    # the tree's rule in one line
    policy: str
    # the budgets evaluated, ascending (--tree-budgets)
    budgets: list[int]
    # one entry per budget: DDTree's tree walked offline from the chain's own drafter pass
    by_budget: list[TreeBudgetEntry]
    # {budget, rule}: the budget past which a bigger tree gains nothing
    saturation: dict[str, Any]
    # per depth: how often the target's token was among the drafter's top candidates
    recall_by_depth: list[TreeRecall]
    # rows computed whole for ranks past the kept 64
    deep_rows: NotRequired[int]
    # caveats of these numbers, one line each
    notes: NotRequired[list[str]]
    # (with step times) {model, rows [{verification chain|tree, size (k or budget), verify_tokens, drafter_slots,
    # tokens_per_step, speedup per batch}], best [{batch, verification, size, speedup}]}
    speedup: NotRequired[dict[str, Any]]


class LiveTimes(TypedDict):
    # live loop steps timed
    steps: int
    # wall seconds of those steps
    seconds: Number
    # wall seconds of the prompts' prefill
    prefill_seconds: NotRequired[Number]


class DrafterDocument(TypedDict):
    """One drafter of run.json's `drafters`, in command-line order. At temperature > 0 a prompt's K samples are
    pooled into one unit (metrics.pool_samples): per-prompt steps and committed tokens add, and the bootstrap
    resamples prompts. Offline estimates (provenance.estimate true) replace metrics with estimates.summary
    (EstimateMetrics); counts and repetition are null and `estimate` holds the additive EstimateSums."""

    # display name (command-line order)
    name: str
    # the checkpoint folder
    path: str
    # "zlab" or "speculators"
    format: str
    # sha256 of config.json + weight files
    fingerprint: str
    # the normalized DrafterSpec (taps in z-lab numbering, plus speculators_taps, block_size, mask_token_id, per-layer
    # attention kind/window/causality, ...)
    spec: SpecDocument
    # the drafter's numbers over every prompt: walk metrics, or an offline estimate's (estimate true)
    metrics: Metrics
    # {"repo", "revision"}: the HF cache snapshot it was read from (core/snapshots.py), else null
    snapshot: NotRequired[dict[str, Any] | None]
    # prompt set -> metrics with the same fields
    by_prompt_set: NotRequired[dict[str, Metrics]]
    # the merged AcceptanceCounts (metrics.AcceptanceCounts.to_dict); null for an offline estimate
    counts: NotRequired[AcceptanceCountsDocument | None]
    # degenerate-draft detectors (repetition.py) over the walk's blocks; null for an offline estimate
    repetition: NotRequired[RepetitionSummary | None]
    # (live mode) the loop's steps and seconds
    live: NotRequired[LiveTimes]
    # (with --draft-lengths) one object per draft length k, ascending, each from its OWN replay (live: loop); the last
    # is the checkpoint's own block
    by_draft_length: NotRequired[list[DraftLengthEntry]]
    # (with --accelerator, --step-times, or live mode with --draft-lengths) the expected speedup, a MODEL (speedup.py)
    speedup: NotRequired[SpeedupDocument]
    # (with --tree-budgets) DDTree's tree verification at each budget, walked offline from the chain's own drafter
    # pass (core/tree.py, docs/trees.md)
    tree: NotRequired[TreeDocument]
    # the inner edges of the depth buckets (--depth-buckets; default 1K..32K, K = 1024)
    depth_edges: NotRequired[list[int]]
    # where acceptance is lost (breakdown.py): one part per bucket of the anchor's absolute position, every bucket
    # even when empty (runs pair by bucket); live rows have no marginal per part (breakdown_note says so)
    by_depth: NotRequired[list[Part]]
    # the same per segment of the token slot 1 predicts (text_kinds.py); only segments that occur. Each split's counts
    # add up exactly to `counts` (checked when written); run.partial.json has no split
    by_segment: NotRequired[list[Part]]
    # the same per class of that token; only classes that occur
    by_token_class: NotRequired[list[Part]]
    # why a split has no marginal per part (live rows hold no anchor_slot_correct)
    breakdown_note: NotRequired[str]
    # (temperature > 0) "sample" or "argmax"; with --draft-policy both every drafter appears twice, as NAME@sample and
    # NAME@argmax
    draft_policy: NotRequired[str]
    # (offline estimate) the additive EstimateSums; null otherwise
    estimate: NotRequired[dict[str, Any] | None]


class TargetDocument(TypedDict):
    # the target as --target named it
    name: str
    # its folder
    path: str
    # sha256 of config.json + weight files
    fingerprint: NotRequired[str | None]
    # {"repo", "revision"}: the HF cache snapshot it was read from, else null
    snapshot: NotRequired[dict[str, Any] | None]
    # config.json's model_type
    model_type: NotRequired[str | None]
    # its decoder layers
    num_layers: NotRequired[int]
    # its hidden size
    hidden_size: NotRequired[int]
    # its vocabulary size
    vocab_size: NotRequired[int]


class AgreeTotal(TypedDict):
    # continuation tokens that agree
    agree: int
    # continuation tokens compared
    total: int


class PromptsDocument(TypedDict):
    # the prompt source as given (--prompts)
    source: str
    # prompts evaluated
    count: int
    # prompt set -> prompts from it
    sets: dict[str, int]
    # (repo:PATH / stdlib) the packing budget in tokens
    context_tokens: NotRequired[int | None]
    # (repo:PATH / stdlib) what a prompt over --max-context does: refuse or truncate (long_prompts.py)
    max_context: NotRequired[str | None]


class SamplingDocument(TypedDict):
    # the sampling temperature
    temperature: Number
    # nucleus sampling's p
    top_p: NotRequired[Number]
    # top-k sampling's k
    top_k: NotRequired[int]
    # how the drafter's tokens are chosen: sample, argmax or both
    draft_policy: NotRequired[Literal["sample", "argmax", "both"]]
    # K, continuations sampled per prompt
    samples: NotRequired[int]
    # the seed of the sampling draws
    seed: NotRequired[int]
    # the random generator used (sampling.py)
    generator: NotRequired[str]


class ReferenceDocument(TypedDict):
    """--reference: the reference's name among the drafters and the value given ('z-lab', PATH or PATH:NAME)."""

    # the reference's name among the drafters
    name: str
    # the value as given: 'z-lab', PATH or PATH:NAME
    given: str


class Provenance(TypedDict):
    """How the numbers were produced."""

    # generation cap
    max_new_tokens: int
    # 0 (greedy: the replay is exact) or the sampling temperature
    temperature: Number
    # "trajectory" (offline replay) or "live" (step-by-step loop)
    mode: Literal["trajectory", "live"]
    # the prompts evaluated: source, count, per set
    prompts: PromptsDocument
    # package version of dflash-eval
    dflash_eval: NotRequired[str]
    # package version of torch
    torch: NotRequired[str]
    # package version of transformers
    transformers: NotRequired[str]
    # Python's version
    python: NotRequired[str]
    # commit of the dflash-eval checkout, or null when not installed from git
    git_sha: NotRequired[str | None]
    # the command line
    argv: NotRequired[list[str]]
    # UTC timestamp of the final write
    created: NotRequired[str]
    # the target: name, path, fingerprint, snapshot, model_type, num_layers, hidden_size, vocab_size
    target: NotRequired[TargetDocument]
    # sha256 by content of what the numbers depend on besides the drafters and prompts: target_config, target_weights,
    # tokenizer_files, chat_template, responses_file
    inputs: NotRequired[dict[str, str | None] | None]
    # --draft-lengths as given ("3,7,15" or "all"), null without it
    draft_lengths: NotRequired[Any]
    # (with --tree-budgets) the budgets as given ("16,32" or "ddtree")
    tree_budgets: NotRequired[str]
    # (with --tree-budgets) why a hybrid target's tree numbers hold offline though live tree verifiers refuse such
    # targets; null for an attention-only target
    tree_note: NotRequired[str | None]
    # sha256 of the tokenizer's serialized vocabulary and merges
    tokenizer_hash: NotRequired[str | None]
    # sha256 of the chat template string
    chat_template_hash: NotRequired[str | None]
    # the flag passed to the chat template
    enable_thinking: NotRequired[bool | None]
    # "given (--thinking/--no-thinking)" or "family default for MODEL_TYPE"
    thinking_source: NotRequired[str]
    # null at temperature 0; else the sampling settings (sampling.py)
    sampling: NotRequired[SamplingDocument | None]
    # true when the numbers are the offline estimate (temperature > 0, --mode trajectory: estimates.py); every
    # drafter's metrics then say so and carry the definition
    estimate: NotRequired[bool]
    # the target's and drafters' compute dtype
    dtype: NotRequired[str]
    # the target's and drafters' device
    device: NotRequired[str]
    # operation -> bound function for Gated-DeltaNet layers ({} for dense targets)
    kernels: NotRequired[dict[str, Any]]
    # what fixes the GEMM shapes (in bf16 near-tie argmaxes move with them): generation_batch, generation_plan,
    # anchor_batch {drafter: {anchors per forward: sequences}}, anchor_batch_rule; with `run --numerics-check N` also
    # "measured", counts over the first N prompts evaluated (pipeline/numerics.py; the run's own numbers are not
    # changed by it): prompts_asked (N as given; after merge summed over the shards, whose counts are summed too);
    # generation {prompts (checked), prompts_identical (generated alone = the run's continuation, made in its planned
    # batch), tokens (of the run's continuations), tokens_before_first_difference (summed common prefixes)};
    # anchor_batch {drafter: run (anchors per forward the engine ran, last prompt), other (the value compared: 1, or 2
    # when the run's is 1), prompts, anchors, anchors_changed (any slot differs), drafts (drafted slots),
    # drafts_changed}; live {drafter: prompts, texts_equal (the live loop's text = the run's continuation), per_prompt
    # {prompt id: [replay steps, replay committed tokens, live steps, live committed tokens]}, steps_replay,
    # steps_live, tau_replay, tau_live (tau macro of each side over the prompts with steps on both),
    # delta_tau_live_minus_replay (estimate, low, high: paired bootstrap interval over those prompts, seed 0; p_value,
    # n, total)}
    numerics: NotRequired[dict[str, Any]]
    # --draft-window W: every drafter saw only the last W context rows before each anchor, as SGLang serves
    # --speculative-draft-window-size (masks.block_masks); null: all
    draft_window: NotRequired[int | None]
    # "shorter" (z-lab: min(B, remaining+1) slots near the cap) or "full" (vLLM)
    final_block: NotRequired[str]
    # drafter -> "shorter" | "full": the rule each walk used (a drafter under --semantics vllm: always "full", vLLM's
    # rule, whatever --final-block says)
    final_block_by_drafter: NotRequired[dict[str, str]]
    # "generated", "responses:<file>" or "sampled (K per prompt)"
    continuations: NotRequired[str]
    # continuation tokens equal to the full-forward argmax
    self_consistency: NotRequired[AgreeTotal | None]
    # with --responses: continuation tokens equal to the target's greedy choice
    responses_agreement: NotRequired[AgreeTotal | None]
    # (`trained-taps --out` folders only) {"data", "format", "split", "labels" ("stored teacher" or "data tokens"),
    # "anchors", "final_block", "verdict"}: the rows are training samples scored teacher-forced
    # (docs/trained-taps.md); drafters NAME@trained-taps and NAME@our-taps
    trained_taps: NotRequired[dict[str, Any]]
    # e.g. a drafter's recorded verifier differs from --target
    warnings: NotRequired[list[str]]
    # what this invocation did: tap_passes, continuations_generated, prompts_evaluated
    work: NotRequired[dict[str, int]]
    # (merge only) the shard folders joined, in shard order
    merged_from: NotRequired[list[str]]
    # (with --reference) the reference drafter; null without one
    reference: NotRequired[ReferenceDocument | None]
    # --explain / --no-explain (with a reference, greedy trajectory mode: the gap explained)
    explain: NotRequired[bool]
    # the run folder as --out named it (merge: its own --out): the verdict block's commands
    out: NotRequired[str]


class Incomplete(TypedDict):
    """run.partial.json only: how far an unfinished run got."""

    # prompts finished so far
    done: int
    # prompts of the whole run
    total: int


class ExplainedVariant(TypedDict):
    """One row of an explanation's variants table (core/explanation.py); the first is the drafter as configured."""

    # the variant's name; the first row is "as configured"
    variant: str
    # tau macro of the drafter replayed under the variant
    tau_macro: Ratio
    # share of its walk blocks flagged repetitive
    flagged_share: Ratio
    # its walk blocks flagged repetitive
    flagged_blocks: int
    # its walk blocks
    blocks: int
    # the training bug the variant stands for
    bug: NotRequired[str]
    # tau macro minus as configured's, paired over every prompt
    delta: NotRequired[Delta]


class ExplanationDocument(TypedDict):
    """`run --reference`: one drafter's gap to the reference, explained by doctor's variants replayed on the
    run's own trajectories (core/explanation.py)."""

    # the drafter compared with the reference
    drafter: str
    # the reference's name
    reference: str
    # prompts compared
    prompts: int
    # true when the gap's interval lies above 0 (p < 0.05)
    behind: bool
    # the explanation in one line
    verdict: str
    # the variant named as the cause, or null
    finding: str | None
    # doctor's variants replayed on the run's own trajectories; the first is "as configured"
    variants: list[ExplainedVariant]
    # core/gap.explain_gap over the same prompts: the gap and the variants' shares of it
    gap: GapDocument


class RunDocument(TypedDict):
    """DIR/run.json (and DIR/run.partial.json, which adds `incomplete`). Counts are stored; every ratio is
    recomputable from the counts it sits beside."""

    # bumped on any incompatible change (this is 1)
    schema_version: int
    # how the numbers were produced
    provenance: Provenance
    # one object per drafter, in command-line order
    drafters: list[DrafterDocument]
    # (`run --reference`, core/explanation.py) per drafter compared with the reference; not in run.partial.json (its
    # rows hold the variants; the final document explains)
    explanation: NotRequired[list[ExplanationDocument]]
    # (after `doctor --out RUN`) the doctor's findings, as doctor.json holds them
    doctor: NotRequired[DoctorDocument]
    # (`--serving-target PATH`, commands/serving_target.py) the copy served, its argmax disagreement with the target
    # on the target's text, and per drafter the four replays' tau (AA, AB, BA, BB: whose taps, whose text), the drop
    # AA - BB and its two parts (core/serving_split.py)
    serving_target: NotRequired[ServingTargetDocument]
    # (run.partial.json only) prompts finished so far, of all
    incomplete: NotRequired[Incomplete]
