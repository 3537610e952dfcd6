"""The output contract of `dflash-eval run`: run.json, samples.jsonl, per_position.csv.

Other tools and our own checks read these files, so this module is their one definition. Counts are
stored; every ratio in run.json is recomputable from the counts it sits beside.

DIR/run.json
    schema_version      int, bumped on any incompatible change (this is 1)
    provenance          how the numbers were produced:
        dflash_eval, torch, transformers, python   package versions
        git_sha          commit of the dflash-eval checkout, or null when not installed from git
        argv             the command line
        created          UTC timestamp of the final write
        target           {"name", "path", "fingerprint", "snapshot", "model_type", "num_layers", "hidden_size", "vocab_size"}
        inputs           sha256 by content of what the numbers depend on besides the drafters and prompts:
                         target_config, target_weights, tokenizer_files, chat_template, responses_file
        draft_lengths    --draft-lengths as given ("3,7,15" or "all"), null without it
        tree_budgets     (with --tree-budgets) the budgets as given ("16,32" or "ddtree")
        tree_note        (with --tree-budgets) why a hybrid target's tree numbers hold offline though live tree
                         verifiers refuse such targets; null for an attention-only target
        tokenizer_hash   sha256 of the tokenizer's serialized vocabulary and merges
        chat_template_hash  sha256 of the chat template string
        enable_thinking  the flag passed to the chat template
        thinking_source  "given (--thinking/--no-thinking)" or "family default for MODEL_TYPE"
        max_new_tokens   generation cap
        temperature      0 (greedy: the replay is exact) or the sampling temperature
        sampling         null at temperature 0; else {"temperature", "top_p", "top_k", "draft_policy" (sample,
                         argmax or both), "samples" (K per prompt), "seed", "generator"} (sampling.py)
        estimate         true when the numbers are the offline estimate (temperature > 0, --mode trajectory:
                         estimates.py); every drafter's metrics then say so and carry the definition
        dtype, device    the target's and drafters' compute dtype and device
        kernels          operation -> bound function for Gated-DeltaNet layers ({} for dense targets)
        numerics         what fixes the GEMM shapes (in bf16 near-tie argmaxes move with them): generation_batch,
                         generation_plan, anchor_batch {drafter: {anchors per forward: sequences}}, anchor_batch_rule; with
                         `run --numerics-check N` also "measured", counts over the first N prompts evaluated
                         (pipeline/numerics.py; the run's own numbers are not changed by it):
            prompts_asked   N as given (after merge: summed over the shards, whose counts are summed too)
            generation      prompts (checked), prompts_identical (generated alone = the run's continuation,
                            made in its planned batch), tokens (of the run's continuations),
                            tokens_before_first_difference (summed common prefixes)
            anchor_batch    {drafter: run (anchors per forward the engine ran, last prompt), other (the value
                            compared: 1, or 2 when the run's is 1), prompts, anchors, anchors_changed (any slot
                            differs), drafts (drafted slots), drafts_changed}
            live            {drafter: prompts, texts_equal (the live loop's text = the run's continuation),
                            per_prompt {prompt id: [replay steps, replay committed tokens, live steps, live
                            committed tokens]}, steps_replay, steps_live, tau_replay, tau_live (tau macro of each
                            side over the prompts with steps on both), delta_tau_live_minus_replay (estimate,
                            low, high: paired bootstrap interval over those prompts, seed 0; p_value, n, total)}
        mode             "trajectory" (offline replay) or "live" (step-by-step loop)
        draft_window     --draft-window W: every drafter saw only the last W context rows before each anchor,
                         as SGLang serves --speculative-draft-window-size (masks.block_masks); null: all
        final_block      "shorter" (z-lab: min(B, remaining+1) slots near the cap) or "full" (vLLM)
        final_block_by_drafter  {drafter: "shorter" | "full"}: the rule each walk used (a drafter under
                         --semantics vllm: always "full", vLLM's rule, whatever --final-block says)
        continuations    "generated", "responses:<file>" or "sampled (K per prompt)"
        self_consistency {"agree", "total"}: continuation tokens equal to the full-forward argmax
        responses_agreement  {"agree", "total"} with --responses: tokens equal to the target's greedy choice
        prompts          {"source", "count", "sets": {set: count}}; repo:PATH / stdlib add context_tokens
                         (the packing budget) and max_context (refuse / truncate: long_prompts.py)
        trained_taps     (`trained-taps --out` folders only) {"data", "format", "split", "labels" ("stored teacher" or
                         "data tokens"), "anchors", "final_block", "verdict"}: the rows are training samples scored
                         teacher-forced (docs/trained-taps.md); drafters NAME@trained-taps and NAME@our-taps
        merged_from      (merge only) the shard folders joined, in shard order
        warnings         e.g. a drafter's recorded verifier differs from --target
        work             what this invocation did: tap_passes, continuations_generated, prompts_evaluated
        reference        (with --reference) {"name": its name among the drafters, "given": the value as given:
                         'z-lab', PATH or PATH:NAME}; null without one
        explain          --explain / --no-explain (with a reference, greedy trajectory mode: the gap explained)
        out              the run folder as --out named it (merge: its own --out): the verdict block's commands
    drafters            one object per drafter, in command-line order:
        name, path      display name and checkpoint folder
        format          "zlab" or "speculators"
        fingerprint     sha256 of config.json + weight files
        snapshot        {"repo", "revision"}: the HF cache snapshot it was read from (core/snapshots.py), else null
        spec            the normalized DrafterSpec (taps in z-lab numbering, plus speculators_taps,
                        block_size, mask_token_id, per-layer attention kind/window/causality, ...)
        metrics         tau_macro (z-lab), tau_micro (vLLM), tau_macro_ci [lo, hi] (bootstrap 95% over
                        prompts; null below 5 prompts, with tau_macro_ci_note saying so), steps, reach / conditional / marginal (lists over slots 1..B-1),
                        histogram (counts of n = 0..B-1), token_acceptance_rate, prompts_without_steps,
                        slot_counts {reach, conditional, marginal: [[numerator, denominator] per slot]}
        by_prompt_set   {set: metrics} with the same fields
        counts          the merged AcceptanceCounts (metrics.AcceptanceCounts.to_dict)
        repetition      degenerate-draft detectors (repetition.py) over the walk's blocks, each judged
                        against the target's own tokens at those slots: blocks, flagged_blocks,
                        flagged_share, flagged_by_detector, flagged_share_by_slot, accepted_inside_flagged /
                        accepted_outside_flagged (mean n per block), flagged_prompts (>= 25% of blocks),
                        tau_macro_without_flagged_prompts, counts (RepetitionCounts.to_dict)
        live            (live mode) {"steps", "seconds", "prefill_seconds"}
        by_draft_length (with --draft-lengths) one object per draft length k, ascending, each from its OWN
                        replay (live: loop) with a block of k + 1 slots, as a server with
                        num_speculative_tokens = k drafts (bidirectional attention in the block: never the
                        full block's walk cut at k): k, block_size (k + 1), metrics (as above, over slots
                        1..k), counts (merged AcceptanceCounts of those walks); the last object is the
                        checkpoint's own block (k = B - 1, "checkpoint_block": true, = metrics/counts above)
        speedup         (with --accelerator, --step-times, or live mode with --draft-lengths) the expected
                        speedup, a MODEL (speedup.py): model (the formula), source ("roofline", "file",
                        "measured"), label (one line: the model and its inputs), inputs (the step times
                        or what the roofline was fed), batches ([1, 4, 16, 64] unless the source has
                        others), target_seconds_one_token (per batch), rows [{k, block, tokens_per_step
                        (tau_micro at k), speedup (per batch, null where a step time is unknown),
                        target_seconds, drafter_seconds}], best [{batch, k, speedup}]
        tree            (with --tree-budgets) DDTree's tree verification at each budget, walked offline from
                        the chain's own drafter pass (core/tree.py, docs/trees.md): policy (the rule, one line),
                        budgets, by_budget [{budget, verify_tokens (1 + budget), metrics (as above, of the tree
                        walks; marginal empty), counts, failures {candidate (the target's token outside the top
                        min(budget, vocab) of its depth), budget (inside, but its prefix missed the best-first
                        cut), complete (the step accepted all it could)}, candidate_share, gain_over_chain (tau
                        macro minus the chain's)}], saturation {budget, rule}, recall_by_depth [{depth, anchors,
                        recall {"1","4","16","64"}, counts per rank bucket 1, 2-4, 5-16, 17-64, >64, none}],
                        deep_rows (rows computed whole for ranks past the kept 64), notes, and with step times
                        speedup {model, rows [{verification chain|tree, size (k or budget), verify_tokens,
                        drafter_slots, tokens_per_step, speedup per batch}], best [{batch, verification, size,
                        speedup}]}
        depth_edges     the inner edges of the depth buckets (--depth-buckets; default 1K..32K, K = 1024)
        by_depth        where acceptance is lost (breakdown.py): one object per bucket of the anchor's absolute
                        position, every bucket even when empty (runs pair by bucket): bucket ("1K-2K", "32K+"),
                        from, to (null: no bound), metrics (as above), counts (that bucket's AcceptanceCounts:
                        the walk steps anchored there and, trajectory mode, the anchors there for marginal)
        by_segment      the same per segment of the token slot 1 predicts (text_kinds.py): segment (thinking,
                        answer_prose, answer_code, tool_call), metrics, counts; only segments that occur
        by_token_class  the same per class of that token: token_class (whitespace, newline, identifier,
                        keyword, number, string, operator, comment, word, special, other), metrics, counts.
                        Each split's counts add up exactly to `counts` (checked when written); live rows have
                        no marginal per part (breakdown_note says so); run.partial.json has no split
        breakdown_note  why a split has no marginal per part (live rows hold no anchor_slot_correct)
        estimate        (offline estimate) the additive EstimateSums; null otherwise
        draft_policy    (temperature > 0) "sample" or "argmax"; with --draft-policy both every drafter appears
                        twice, as NAME@sample and NAME@argmax
        At temperature > 0 a prompt's K samples are pooled into one unit (metrics.pool_samples): per-prompt
        steps and committed tokens add, and the bootstrap resamples prompts. Offline estimates (estimate
        true) replace metrics with estimates.summary: estimate, definition, tau_macro, tau_micro,
        tau_macro_ci, expected_steps, anchors, alpha (per slot), expected_reach, tau_per_anchor; counts and
        repetition are null and `estimate` holds the additive EstimateSums.
    explanation         (`run --reference`, core/explanation.py) per drafter compared with the reference: drafter,
                        reference, prompts, behind (the gap's interval above 0, p < 0.05), verdict, finding (the
                        variant named, or null), variants [{variant, bug, tau_macro, delta (vs as configured,
                        paired over every prompt), flagged_share, flagged_blocks, blocks}; the first is "as
                        configured"], gap (core/gap.explain_gap over the same prompts: gap, variants' shares);
                        not in run.partial.json (its rows hold the variants; the final document explains)
    doctor              (after `doctor --out RUN`) the doctor's findings, as doctor.json holds them
    serving_target      (`--serving-target PATH`, commands/serving_target.py) the copy served (path, kind,
                        fingerprint, its quantisation or GGUF tensor types), its argmax disagreement with the
                        target on the target's text, and per drafter the four replays' tau (AA, AB, BA, BB:
                        whose taps, whose text), the drop AA - BB and its two parts (core/serving_split.py)
    incomplete          (run.partial.json only) {"done", "total"}: prompts finished so far, of all

DIR/samples.jsonl   one row per (prompt, drafter), and per sample k ("sample") at temperature > 0;
    an offline estimate's rows carry anchor_alphas (per anchor, per slot), anchor_expected_accepted and
    estimate (EstimateSums) instead of the walk fields and counts:
    prompt_id, prompt_set, drafter, prompt_len, continuation_len
    walk_anchors        anchor position of each step
    walk_accept_lengths n + 1 per step, in order (tokens committed by the step)
    walk_drafted        slots that could count at each step (B-1, fewer at the end)
    walk_drafts         drafted target token ids at each step (slots 1..)
    anchor_accepted     n(a) for every anchor a = prompt_len .. T-2 (trajectory mode)
    anchor_slot_correct per anchor a = prompt_len .. T-2 (trajectory mode), an integer whose bit k-1 is set
                        when slot k was right (slots 1 .. min(B-1, T-1-a) are scored): breakdown.py's marginal
    continuation_ids    the target's continuation (token ids) the drafts were scored against
    continuation_pieces each continuation token decoded alone (token boundaries stay visible)
    walk_draft_pieces   each walk step's drafted tokens, decoded alone
    walk_flags          per walk step, the repetition detectors that fired (empty list when clean)
    explain             (`run --reference`, the drafters compared with it) {"reference", "variants": [{variant,
                        bug, check, counts: [steps, committed], flagged: [flagged blocks, blocks]}]}: each of
                        doctor's variants replayed on this prompt's trajectory (commands/explain.py)
    repetition          this row's RepetitionCounts
    counts              this row's AcceptanceCounts (walk + all-anchor marginal counts)
    by_draft_length     (with --draft-lengths) {"k": {walk_anchors, walk_accept_lengths, walk_drafted,
                        anchor_accepted (trajectory) or step_seconds / draft_seconds / verify_seconds (live),
                        counts}} per shorter draft length k < B - 1
    tree                (with --tree-budgets) {budgets, vocab (the draft vocabulary), first_anchor,
                        anchor_path_nodes (per anchor: the pop index of each node of the target's path that the
                        heap popped within the largest budget; the tree of budget b holds the nodes <= b),
                        rank_counts (per depth, anchors per rank bucket), deep_rows, walks {"b": {walk_anchors,
                        walk_accept_lengths, walk_drafted, walk_failures (0 candidate, 1 budget, 2 complete per
                        step), failures, counts}}}
    draft_seconds, verify_seconds  (live) per step: the drafter's pass, the target's verify forward
    label_ids, training_sample, segment  (trained-taps rows) the ids each slot was scored against (the stored
                        teacher's or the target's greedy next tokens, or the data tokens), the training sample the row
                        belongs to (prompt_id is SAMPLE, or SAMPLE:K for its K-th supervised stretch) and K
    one_token_step      (live with --draft-lengths, no other step times) {"seconds", "steps"} of plain
                        one-token decoding steps timed on this prompt (t_target(1) of speedup.py)

DIR/per_position.csv  one row per drafter only: drafter, tau_macro, tau_micro, speculators' acceptance_at_pos_{i}
    (reach, all-steps denominator), conditional_at_pos_{i}, marginal_at_pos_{i} for i = 1..B-1.
DIR/per_position_splits.csv  the same after drafter, split, part; a row per part with walk steps: "draft_length"
    (each shorter k), "depth" (bucket, 1K-2K), "segment", "token_class" (breakdown.split_parts); or no file.

DIR/written.json    every file dflash-eval wrote into the folder (run_folder.py): all `--overwrite` removes
DIR/run.lock        the lock (filelock) the writing process holds; a second writer is refused by name

A track folder (`dflash-eval track --out DIR`, pipeline/track_folder.py):

DIR/track.jsonl     one row per evaluated checkpoint and one for the reference, append-only:
    role                "checkpoint" or "reference"
    name, path          the checkpoint folder's name (its drafter name in its run folder) and absolute path
    step, step_source   training step and where it came from ("trainer_state.json global_step",
                        "training_state.json global_step", "folder name checkpoint-N", ...); null if unknown
    fingerprint         sha256 of config.json + weight files: a checkpoint's identity
    identity            [[file, size, mtime_ns]] of config and weights when evaluated (a later scan that
                        sees the same files needs no hashing; other files mean other weights)
    run                 "runs/<label>": its run folder, what `dflash-eval run` writes for it alone
    format, block_size  the checkpoint's format and B
    metrics             exactly run.json's drafters[0].metrics for that run folder (tau_macro with
                        tau_macro_ci, tau_micro, reach, conditional, marginal, histogram, slot_counts, ...)
    repetition_share    share of walk blocks flagged repetitive (run.json repetition.flagged_share)
    tau_macro_without_flagged_prompts   as in run.json's repetition summary
    counts              the merged AcceptanceCounts (per-prompt, so checkpoints compare paired)
    by_draft_length     (track --draft-lengths) run.json's by_draft_length of that run folder: tau at each k
    tree                (track --tree-budgets) run.json's tree of that run folder (tau per budget, recall)
    depth_edges, by_depth   run.json's depth split of that run folder (track --depth-buckets: its edges)
    evaluated_at        UTC time the row was written
DIR/track_log.jsonl one event per line: {"time", "event", ...}; "incomplete" / "waiting" / "invalid"
    (path, name, step, detail) for checkpoints not evaluated at a poll, "batch" (number, drafters,
    prompts, target_passes, continuations_generated) for each batch evaluated together
DIR/track.csv       per_position.csv's columns, one row per track.jsonl row, after role, step,
    tau_macro_ci_low, tau_macro_ci_high, repetition_share, fingerprint, path; with --draft-lengths one
    tau_macro_at_k_K column per draft length after them, with --tree-budgets one tau_macro_at_tree_B per budget
DIR/track_state.json  the track's settings (all but the checkpoints) and their digest
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import metrics as M
from ..errors import InputError
from .per_position import COUNTED_SLOTS, per_position_csv, per_position_splits_csv  # noqa: F401 - here too

if TYPE_CHECKING:
    from .run_document import DrafterDocument, RunDocument

SCHEMA_VERSION = 1
RUN_JSON = "run.json"
SAMPLES = "samples.jsonl"
PER_POSITION = "per_position.csv"
PER_POSITION_SPLITS = "per_position_splits.csv"
PARTIAL_JSON = "run.partial.json"  # run.json over the prompts done so far, while a run is unfinished
STATE = "run_state.json"  # resume bookkeeping: settings hash, completion flag


def atomic_write(path: Path, text: str) -> None:
    """Write beside, then rename: a crash never leaves a half-written result file. A write the system
    refuses (disk full, quota) removes its temporary file and is one line naming the file."""
    from ..errors import InputError

    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    except OSError as exc:
        raise InputError(path, f"cannot write: {exc.strerror or exc}") from None
    finally:
        tmp.unlink(missing_ok=True)


def append_text(path: Path, text: str) -> None:
    """Append to a file (rows of a run or a track, log lines); a write the system refuses is one line naming
    the file, like atomic_write."""
    from ..errors import InputError

    try:
        with Path(path).open("a", encoding="utf-8") as sink:
            sink.write(text)
            sink.flush()
    except OSError as exc:
        raise InputError(path, f"cannot write: {exc.strerror or exc}") from None


def _marginal_or_empty(counts: M.AcceptanceCounts) -> list[float | None]:
    """Live runs score only the walk, not every anchor: no marginal there (an empty list, not an error)."""
    return M.marginal(counts) if any(counts.marginal_total) else []


def metrics_summary(counts: M.AcceptanceCounts, *, seed: int = 0) -> dict[str, Any]:
    """Every number shown for a drafter, from its counts (divide last)."""
    if not counts.steps:
        return {"steps": 0, "tau_macro": None, "tau_micro": None, "tau_macro_ci": None,
                "tau_macro_ci_note": "n/a (no steps: every continuation ended at once)", "reach": [],
                "conditional": [], "marginal": _marginal_or_empty(counts),
                "histogram": counts.accept_length_histogram, "token_acceptance_rate": None}
    prompts = len(counts.per_prompt)
    ci = (M.bootstrap_tau_ci(counts, n_resamples=2000, seed=seed, kind="macro")
          if prompts >= M.MIN_PROMPTS_FOR_INTERVAL else None)
    return {
        "tau_macro": M.tau_macro(counts),
        "tau_micro": M.tau_micro(counts),
        "tau_macro_ci": [ci.low, ci.high] if ci else None,
        "tau_macro_ci_note": None if ci else f"n/a (n = {prompts} < {M.MIN_PROMPTS_FOR_INTERVAL} prompts)",
        "steps": M.steps(counts),
        "reach": M.reach(counts, denominator="all"),
        "conditional": M.conditional(counts, denominator="all"),
        "marginal": _marginal_or_empty(counts),
        "histogram": list(counts.accept_length_histogram),
        "token_acceptance_rate": M.token_acceptance_rate(counts),
        "slot_counts": M.slot_fractions(counts),
    }


def read_samples(path: Path, *, torn_tail: str = "refuse", row_type: Any = None) -> list[dict[str, Any]]:
    """The rows of a samples (or track) file, each a JSON object on its own line; a line that is not is one
    InputError naming the file and the line, and so is a row given twice (same prompt, drafter, sample).
    `row_type` (row_documents.SampleRow, TrackRow): each row is checked against it, a field of another type
    refused as "line N.FIELD: expected ..." (json_types.check_json).

    `torn_tail`: what a last line cut mid-write (no newline, not JSON: a run killed while appending) does:
    "refuse" (a finished run's file was damaged after the fact) or "drop" (resume and --partial readers:
    that prompt is redone or not shown yet). A missing file is no rows; readers that need rows say so."""
    from ..errors import InputError, read_bytes
    from ..jsonl import jsonl_rows

    path = Path(path)
    if not path.exists():
        return []
    try:
        text = read_bytes(path).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(path, f"is not UTF-8 text (byte {exc.start}); edited or damaged?") from None
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror}") from None
    rows: list[dict[str, Any]] = []
    first: dict[tuple, int] = {}
    for number, row in jsonl_rows(text, path, torn_tail=torn_tail):  # core/jsonl.py: its one wording
        if row_type is not None:
            from .json_types import check_json

            check_json(row, row_type, path, f"line {number}")
        if "prompt_id" in row:
            key = json.dumps([row.get("prompt_id"), row.get("drafter"), row.get("sample") or 0])
            if key in first:
                sample = f" sample {row['sample']!r}" if row.get("sample") else ""
                raise InputError(path, f"line {number} repeats prompt {row['prompt_id']!r} of drafter "
                                       f"{row.get('drafter')!r}{sample} (first on line {first[key]}); two runs wrote "
                                       "into one folder, or it was edited")
            first[key] = number
        rows.append(row)
    return rows


def incomplete_message(directory: Path) -> str:
    """'incomplete: k of n prompts; ...' for a run folder that was interrupted before run.json was written."""
    try:
        state = json.loads((directory / STATE).read_text())
    except (OSError, json.JSONDecodeError):
        state = {}
    total = len((state.get("settings") or {}).get("prompts") or []) or "?"
    try:
        done = len({str(row.get("prompt_id")) for row in read_samples(directory / SAMPLES, torn_tail="drop")})
    except Exception:  # a damaged file still gets the message; its reader names the damage
        done = "?"
    return (f"incomplete run: {done} of {total} prompts done; rerun the same `dflash-eval run` command to "
            "finish it")


def read_run_document(directory: Path, *, partial: bool = False) -> RunDocument:
    """run.json as a RunDocument (core/documents/run_document.py: every declared field of its declared type, or one
    InputError naming the file and the field); with `partial`, an unfinished run's run.partial.json (its
    `incomplete` field says how far it got, and renderers show a banner) when there is no run.json yet."""
    from ..errors import InputError

    path = directory / RUN_JSON
    if not path.exists() and (directory / STATE).is_file():
        if not partial or not (directory / PARTIAL_JSON).is_file():
            raise InputError(directory, incomplete_message(directory)
                             + ("" if partial or not (directory / PARTIAL_JSON).is_file()
                                else " (or add --partial to see the prompts done so far)"))
        path = directory / PARTIAL_JSON
    from ..errors import loads, read_text

    try:
        data = loads(read_text(path))
    except UnicodeDecodeError as exc:
        raise InputError(path, f"is not UTF-8 text (byte {exc.start})") from None
    except OSError:
        raise InputError(directory, "not a dflash-eval run directory (no run.json)") from None
    except ValueError as exc:
        raise InputError(path, f"invalid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise InputError(path, f"is not a run document (a JSON {type(data).__name__}, expected an object)")
    if data.get("schema_version") != SCHEMA_VERSION:
        raise InputError(path, f"schema_version {data.get('schema_version')!r} is not {SCHEMA_VERSION}")
    from .invariants import check_run_document
    from .json_types import check_json
    from .run_document import RunDocument

    check_json(data, RunDocument, path)  # the types, field by field
    check_run_document(data, path)  # the numbers a run document must satisfy
    return data


def drafter_named(run: RunDocument, run_dir: Path, name: str | None, ask: str) -> DrafterDocument:
    """The run document's entry for drafter `name`; without a name the run must hold exactly one drafter.
    Refused by name otherwise (`ask` says how to name one: "say which with --drafter-name NAME")."""
    names = [d["name"] for d in run["drafters"]]
    if name is None:
        if len(names) != 1:
            raise InputError(run_dir, f"holds {len(names)} drafters ({', '.join(names)}): {ask}")
        name = names[0]
    if name not in names:
        raise InputError(run_dir, f"no drafter {name!r} in this run (drafters: {', '.join(names)})")
    return next(d for d in run["drafters"] if d["name"] == name)
