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
        target           {"name", "path", "fingerprint", "model_type", "num_layers", "hidden_size", "vocab_size"}
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
        mode             "trajectory" (offline replay) or "live" (step-by-step loop)
        final_block      "shorter" (z-lab: min(B, remaining+1) slots near the cap) or "full" (vLLM)
        continuations    "generated", "responses:<file>" or "sampled (K per prompt)"
        self_consistency {"agree", "total"}: continuation tokens equal to the full-forward argmax
        responses_agreement  {"agree", "total"} with --responses: tokens equal to the target's greedy choice
        prompts          {"source", "count", "sets": {set: count}}
        warnings         e.g. a drafter's recorded verifier differs from --target
        work             what this invocation did: tap_passes, continuations_generated, prompts_evaluated
    drafters            one object per drafter, in command-line order:
        name, path      display name and checkpoint folder
        format          "zlab" or "speculators"
        fingerprint     sha256 of config.json + weight files
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
        draft_policy    (temperature > 0) "sample" or "argmax"; with --draft-policy both every drafter appears
                        twice, as NAME@sample and NAME@argmax
        At temperature > 0 a prompt's K samples are pooled into one unit (metrics.pool_samples): per-prompt
        steps and committed tokens add, and the bootstrap resamples prompts. Offline estimates (estimate
        true) replace metrics with estimates.summary: estimate, definition, tau_macro, tau_micro,
        tau_macro_ci, expected_steps, anchors, alpha (per slot), expected_reach, tau_per_anchor; counts and
        repetition are null and `estimate` holds the additive EstimateSums.

DIR/samples.jsonl   one row per (prompt, drafter), and per sample k ("sample") at temperature > 0;
    an offline estimate's rows carry anchor_alphas (per anchor, per slot), anchor_expected_accepted and
    estimate (EstimateSums) instead of the walk fields and counts:
    prompt_id, prompt_set, drafter, prompt_len, continuation_len
    walk_anchors        anchor position of each step
    walk_accept_lengths n + 1 per step, in order (tokens committed by the step)
    walk_drafted        slots that could count at each step (B-1, fewer at the end)
    walk_drafts         drafted target token ids at each step (slots 1..)
    anchor_accepted     n(a) for every anchor a = prompt_len .. T-2 (trajectory mode)
    continuation_ids    the target's continuation (token ids) the drafts were scored against
    continuation_pieces each continuation token decoded alone (token boundaries stay visible)
    walk_draft_pieces   each walk step's drafted tokens, decoded alone
    walk_flags          per walk step, the repetition detectors that fired (empty list when clean)
    repetition          this row's RepetitionCounts
    counts              this row's AcceptanceCounts (walk + all-anchor marginal counts)

DIR/per_position.csv  one row per drafter: drafter, tau_macro, tau_micro, then speculators-compatible
    acceptance_at_pos_{i} (reach, all-steps denominator as vLLM/speculators), conditional_at_pos_{i},
    marginal_at_pos_{i} for i = 1..B-1.

A track folder (`dflash-eval track --out DIR`, trackdir.py):

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
    evaluated_at        UTC time the row was written
DIR/track_log.jsonl one event per line: {"time", "event", ...}; "incomplete" / "waiting" / "invalid"
    (path, name, step, detail) for checkpoints not evaluated at a poll, "batch" (number, drafters,
    prompts, target_passes, continuations_generated) for each batch evaluated together
DIR/track.csv       per_position.csv's columns, one row per track.jsonl row, after role, step,
    tau_macro_ci_low, tau_macro_ci_high, repetition_share, fingerprint, path
DIR/track_state.json  the track's settings (all but the checkpoints) and their digest
"""

from __future__ import annotations

import csv
import io
import contextlib
import json
import os
from pathlib import Path
from typing import Any

from . import metrics as M

SCHEMA_VERSION = 1
RUN_JSON = "run.json"
SAMPLES = "samples.jsonl"
PER_POSITION = "per_position.csv"
PARTIAL_JSON = "run.partial.json"  # run.json over the prompts done so far, while a run is unfinished
STATE = "run_state.json"  # resume bookkeeping: settings hash, completion flag


def atomic_write(path: Path, text: str) -> None:
    """Write beside, then rename: a crash never leaves a half-written result file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    tmp.replace(path)


def _marginal_or_empty(counts: M.AcceptanceCounts) -> list[float | None]:
    """Live runs score only the walk, not every anchor: no marginal there (an empty list, not an error)."""
    return M.marginal(counts) if any(counts.marginal_total) else []


def metrics_summary(counts: M.AcceptanceCounts, *, seed: int = 0) -> dict[str, Any]:
    """Every number shown for a drafter, from its counts (divide last)."""
    if not counts.steps:
        return {"steps": 0, "tau_macro": None, "tau_micro": None, "tau_macro_ci": None, "reach": [],
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


def per_position_csv(drafters: list[dict[str, Any]]) -> str:
    if any(d["metrics"].get("estimate") for d in drafters):
        # temperature > 0 offline: the estimate's columns (estimates.py), never the counted ones' names
        return _slot_csv(drafters, ["tau_macro_estimate", "tau_micro_estimate"],
                         [("expected_reach", "expected_reach_at_pos"), ("alpha", "alpha_at_pos")])
    return _slot_csv(drafters, ["tau_macro", "tau_micro"], [("reach", "acceptance_at_pos"),
                                                            ("conditional", "conditional_at_pos"),
                                                            ("marginal", "marginal_at_pos")])


def _slot_csv(drafters: list[dict[str, Any]], tau_columns: list[str], slots: list[tuple[str, str]]) -> str:
    """drafter, tau macro, tau micro, then one column per slot for each (metrics key, column prefix)."""
    width = max((len(d["metrics"][slots[0][0]]) for d in drafters), default=0)
    header = ["drafter", *tau_columns]
    for _, prefix in slots:
        header += [f"{prefix}_{i}" for i in range(1, width + 1)]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    for d in drafters:
        m = d["metrics"]
        row = [d["name"], m["tau_macro"], m["tau_micro"]]
        for key, _ in slots:
            values = list(m[key]) + [None] * (width - len(m[key]))
            row += ["" if v is None else f"{v:.6f}" for v in values]
        writer.writerow(row)
    return out.getvalue()


def read_samples(path: Path) -> list[dict[str, Any]]:
    """Rows of a samples file; a torn last line (killed mid-write) is dropped, not fatal."""
    rows = []
    if not path.exists():
        return rows
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            break
    return rows


@contextlib.contextmanager
def interpreting(directory: Path | str):
    """Around code that reads a run folder's files: a field of the wrong type or missing (a file edited by
    hand, or written by another version) becomes one line naming the folder, never a traceback."""
    from .errors import InputError

    try:
        yield
    except InputError:
        raise
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, ZeroDivisionError) as exc:
        detail = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:160]
        raise InputError(directory, f"run.json / samples.jsonl do not match the documented schema ({detail}); "
                                    "edited by hand or written by another version?") from None


def incomplete_message(directory: Path) -> str:
    """'incomplete: k of n prompts; ...' for a run folder that was interrupted before run.json was written."""
    try:
        state = json.loads((directory / STATE).read_text())
    except (OSError, json.JSONDecodeError):
        state = {}
    total = len((state.get("settings") or {}).get("prompts") or []) or "?"
    done = len({str(row.get("prompt_id")) for row in read_samples(directory / SAMPLES) if isinstance(row, dict)})
    return (f"incomplete run: {done} of {total} prompts done; rerun the same `dflash-eval run` command to "
            "finish it")


def read_run(directory: Path, *, partial: bool = False) -> dict[str, Any]:
    """run.json; with `partial`, an unfinished run's run.partial.json (its `incomplete` field says how far
    it got, and renderers show a banner) when there is no run.json yet."""
    from .errors import InputError

    path = directory / RUN_JSON
    if not path.exists() and (directory / STATE).is_file():
        if not partial or not (directory / PARTIAL_JSON).is_file():
            raise InputError(directory, incomplete_message(directory)
                             + ("" if partial or not (directory / PARTIAL_JSON).is_file()
                                else " (or add --partial to see the prompts done so far)"))
        path = directory / PARTIAL_JSON
    try:
        data = json.loads(path.read_text())
    except OSError:
        raise InputError(directory, "not a dflash-eval run directory (no run.json)") from None
    except json.JSONDecodeError as exc:
        raise InputError(path, f"invalid JSON at line {exc.lineno}") from None
    if data.get("schema_version") != SCHEMA_VERSION:
        raise InputError(path, f"schema_version {data.get('schema_version')!r} is not {SCHEMA_VERSION}")
    return data
