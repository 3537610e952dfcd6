"""`evaluate()`: the library entry point behind `dflash-eval run`, a composition of the stages.

    inputs (stage 0, refused before anything is written) -> run folder (created or resumed)
    -> continuations (1) -> per prompt: one trajectory (2) -> every drafter scored on it (3) -> rows (4),
       appended per prompt so an interrupted run resumes where it stopped
    -> the run document (6): counts merged, metrics divided, provenance -> run.json, per_position.csv

ARCHITECTURE.md says where each stage lives. doctor composes the same stages (doctor.run_doctor).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..pipeline.continuations import continuations_for, sampled_continuations_for
from ..pipeline.document import assemble
from ..pipeline.inputs import Inputs, prepare_inputs
from ..core.options import Reporter, RunOptions, pause_after_prompt
from ..pipeline.rows import estimate_rows, finish_rows, live_row, piece_decoder, trajectory_rows
from ..pipeline.run_folder import RunFolder
from ..pipeline.scoring import kernels_context, load_drafters, score_live
from ..pipeline.trajectories import capture_trajectory

__all__ = ["RunOptions", "Reporter", "evaluate", "load_drafters"]



def evaluate(options: RunOptions, reporter: Reporter | None = None) -> dict[str, Any]:
    """Run (or resume) an evaluation; returns the run.json content."""
    from ..model.target import load_target

    reporter = reporter or Reporter()
    inputs = prepare_inputs(options)
    folder = RunFolder(options.out, inputs.settings(options))
    done_rows = folder.open(options.overwrite)
    target = load_target(str(inputs.target_path), device=options.device, dtype=options.dtype,
                         allow_accelerated_on_cpu=options.kernels == "torch", **inputs.resolved.placement())
    with kernels_context(target, options):
        return _evaluate_loaded(options, reporter, inputs, folder, target, done_rows)


def _evaluate_loaded(options: RunOptions, reporter: Reporter, inputs: Inputs, folder: RunFolder, target,
                     done_rows: list[dict[str, Any]]) -> dict[str, Any]:
    from ..model.kernels import kernel_report, kernel_summary

    drafters = load_drafters(inputs.entries, target)
    samples = range(options.samples)
    # held in memory: the file is only appended to
    all_rows = folder.keep_complete(done_rows, {(name, k) for name in drafters for k in samples})
    complete = {r["prompt_id"] for r in all_rows}
    pending = [p for p in inputs.prompts if p.id not in complete]
    if complete:
        reporter.note(f"resuming: {len(complete)} of {len(inputs.prompts)} prompts already done")
    ids = {k: v for k, v in inputs.prompt_ids().items() if k not in complete}
    sampled = options.temperature > 0  # the loop's own samples are the continuations: no greedy ones needed
    estimate = sampled and options.mode == "trajectory"  # temperature > 0 offline: K sampled texts per prompt
    if estimate:
        continuations, generated = sampled_continuations_for(target, pending, ids, options, inputs.thinking, reporter)
    else:
        continuations, generated = ({}, 0) if sampled else continuations_for(
            target, pending, ids, options, inputs.thinking, inputs.responses, reporter)
    layers = sorted({t for d in drafters.values() for t in d.spec.taps})
    policy_options = {e.name: dataclasses.replace(options, draft_policy=e.draft_policy) if e.draft_policy else options
                      for e in inputs.entries}
    decode = piece_decoder(target.tokenizer)
    kernels = kernel_summary(kernel_report(target.model))

    def document() -> dict[str, Any]:
        return assemble(options, target, inputs.entries, drafters, all_rows, inputs.prompts, inputs.thinking,
                        inputs.warnings, inputs.fingerprints, kernels,
                        {name: d.spec.block_size for name, d in drafters.items()},
                        generated_count=generated, evaluated_count=len(pending))

    reporter.phase("prompts", len(pending))
    for prompt in pending:
        cont = continuations.get(prompt.id)
        if estimate:
            rows = []
            for k in samples:
                trajectory = capture_trajectory(target, prompt, ids[prompt.id], continuations[(prompt.id, k)], layers,
                                                sequence_chunk=options.tap_chunk, keep_hidden=True, sample=k)
                rows += estimate_rows(prompt, drafters, trajectory, target, policy_options.__getitem__)
        elif options.mode == "trajectory":
            trajectory = capture_trajectory(target, prompt, ids[prompt.id], cont, layers,
                                            sequence_chunk=options.tap_chunk)
            rows = trajectory_rows(prompt, drafters, trajectory, options)
        else:
            rows = []
            for k in samples:
                for name, d in drafters.items():
                    live = score_live(target, d, ids[prompt.id], policy_options[name], prompt.id, k)
                    agree = None if sampled else (sum(int(a == b) for a, b in zip(live.continuation, cont)), len(cont))
                    rows.append(live_row(prompt, name, d.spec.block_size, live, len(ids[prompt.id]), agree,
                                         sample=k if sampled else None))
        folder.append(finish_rows(rows, decode))
        all_rows.extend(rows)
        complete.add(prompt.id)
        if prompt is not pending[-1]:  # what report/show/diff render, with a banner, if the run stops here
            folder.write_partial(document(), len(complete), len(inputs.prompts))
        pause_after_prompt()
        reporter.advance("prompts", prompt.id)
    run = document()
    folder.finish(run)
    return run
