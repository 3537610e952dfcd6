"""`evaluate()`: the library entry point behind `dflash-eval run`, a composition of the stages.

    inputs (refused before anything is written) -> run folder (created or resumed)
    -> continuations -> per prompt: one trajectory -> every drafter scored on it -> rows,
       appended per prompt so an interrupted run resumes where it stopped
    -> the run document: counts merged, metrics divided, provenance -> run.json, per_position.csv,
       and report.html (--html), all written under the folder's lock

It returns the document and the rows (`Evaluation`), so a caller renders them without reading the folder
back. ARCHITECTURE.md says where each stage lives. doctor composes the same stages (doctor.run_doctor).
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

from ..core.progress import Reporter, pause_after_prompt
from ..core.settings.run_settings import RunOptions, RunSettings
from ..pipeline.continuations import continuations_for, sampled_continuations_for
from ..pipeline.document import PartialSchedule, assemble
from ..pipeline.inputs import Inputs, prepare_inputs
from ..pipeline.rows import add_live_draft_lengths, estimate_rows, finish_rows, live_row, piece_decoder, trajectory_rows
from ..pipeline.run_folder import RunFolder, claimed
from ..pipeline.scoring import (
    check_kernels,
    kernels_context,
    load_drafters,
    plain_decoding_seconds,
    score_live,
    to_target_device,
)
from ..pipeline.trajectories import capture_trajectory
from ..pipeline.turns import answer_earlier_turns

__all__ = ["Evaluation", "RunOptions", "RunSettings", "Reporter", "evaluate", "load_drafters"]


class Evaluation(NamedTuple):
    """What `evaluate` and `merge` return: run.json's document and the rows of samples.jsonl, as written."""

    document: dict[str, Any]
    rows: list[dict[str, Any]]


def report_page(settings: RunSettings, document: dict[str, Any], rows: list[dict[str, Any]], title: str | None = None):
    """report.html's text when --html (render/html.py), else None: a run folder's page, written with its files."""
    if not settings.output.html:
        return None
    from ..render.html import render_run_html

    return render_run_html(document, rows, **({"title": title} if title else {}))


class Interrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGINT) during `evaluate`, carrying what is true at that moment, for the one line the CLI
    prints: nothing written yet, continuations generated and cached but no prompt evaluated, or k of n
    prompts evaluated and kept in the run folder."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class Progress(Reporter):
    """The caller's reporter, and how far each phase got (what an interrupt's message says)."""

    def __init__(self, inner: Reporter):
        self.inner, self.done, self.folder_open, self.evaluated = inner, {}, False, 0

    def phase(self, name: str, total: int) -> None:
        self.done[name] = [0, total]
        self.inner.phase(name, total)

    def advance(self, name: str, detail: str = "") -> None:
        self.done.setdefault(name, [0, 0])[0] += 1
        self.inner.advance(name, detail)

    def note(self, message: str) -> None:
        self.inner.note(message)

    def interrupted(self, settings: RunSettings, total: int) -> str:
        out = settings.out
        if not self.folder_open:
            return f"interrupted before this run wrote anything ({out} is as it was); run the command again"
        evaluated = self.evaluated  # prompts whose rows are in the folder, resumed ones included
        if evaluated:
            return (f"interrupted: {evaluated} of {total} prompts evaluated and kept in {out} (`dflash-eval report "
                    f"{out} --partial` shows them); run the same command again to resume")
        made = [f"{n} of {t} {'continuations' if phase == 'generate' else 'samples'} generated, cached in "
                f"{settings.output.cache}" for phase, (n, t) in self.done.items() if phase in ("generate", "sample")]
        return (f"interrupted{': ' + made[0] if made else ''}; no prompt evaluated yet, so {out} holds no results "
                "(report has nothing to show); run the same command again to continue"
                + (" (the cached continuations are reused)" if made else ""))


def evaluate(settings: RunSettings, reporter: Reporter | None = None, *, title: str | None = None) -> Evaluation:
    """Run (or resume) an evaluation; returns run.json's document and the rows. Ctrl-C raises `Interrupted`,
    whose message says what was kept. With --html (`settings.output.html`) report.html (its title `title`)
    is written with the results, before the folder's lock is released."""
    from ..core.errors import InputError

    if not settings.drafters.drafters and not settings.drafters.reference:
        raise InputError(None, "give at least one --drafter (or --reference)")
    progress = Progress(reporter or Reporter())
    total = "?"
    try:
        with claimed(settings.out):  # a folder another run still writes: refused now, before any slow work
            inputs = answer_earlier_turns(prepare_inputs(settings), settings, progress)  # multi-turn sets: turns.py
            total = len(inputs.prompts)
            return _evaluate(settings, progress, inputs, title)
    except Interrupted:
        raise
    except KeyboardInterrupt:
        raise Interrupted(progress.interrupted(settings, total)) from None


def _evaluate(settings: RunSettings, reporter: "Progress", inputs: Inputs, title: str | None) -> Evaluation:
    from ..model.target import load_target

    out, overwrite = settings.out, settings.output.overwrite
    serving = serving_inputs(settings, inputs)  # draft lengths per drafter, step times: refused before any write
    folder = RunFolder(out, {**inputs.settings(settings), **serving.settings, **settings.trees.provenance(),
                             **settings.second_target.provenance()})
    folder.check(overwrite)  # a foreign folder, other settings, a writer in it: refused before loading
    finished = None if overwrite else folder.finished_document()
    if finished is not None:  # the same command again on its finished run: the record stays as it is
        try:
            reporter.note(f"{out} already holds this run, finished; nothing to do (--overwrite runs it again)")
            from ..core.documents.results import SAMPLES, read_samples
            from ..pipeline.run_folder import REPORT_HTML, write_run_html

            rows = read_samples(out / SAMPLES)
            page = report_page(settings, finished, rows, title) if not (out / REPORT_HTML).exists() else None
            if page is not None:
                write_run_html(out, page)
            return Evaluation(finished, rows)
        finally:
            folder.close()
    try:
        target = load_target(str(inputs.target_path), device=settings.placement.device, dtype=settings.placement.dtype,
                             allow_accelerated_on_cpu=settings.replay.kernels == "torch", **inputs.placed.load_keywords())
        # every weight is validated (NaN/inf per tensor) before the folder is touched: created, resumed, replaced
        from ..model.drafter import refuse_nonfinite

        refuse_nonfinite(target.model.state_dict().items(), inputs.target_path)
        check_kernels(target, settings)  # --kernels torch that cannot be honoured: refused before the folder opens
        # checked as they load, in host memory: they join the accelerator after generation (scoring.py)
        drafters = load_drafters(inputs.entries, target, device="cpu")
        done_rows = folder.open(overwrite)  # the folder's lock (taken by `check` when it existed)
        reporter.folder_open = True
        with kernels_context(target, settings):
            return _evaluate_loaded(settings, reporter, inputs, folder, target, done_rows, serving, drafters, title)
    finally:
        folder.close()


@dataclasses.dataclass
class ServingPlan:
    """What the serving decision needs, resolved up front from the Serving section's flags
    (core/settings/work.Serving): the draft lengths per drafter and the source of step times (a file, a
    roofline accelerator, or none: live mode then measures them)."""

    draft_lengths: dict[str, tuple[int, ...]]
    step_times: dict[str, Any] | None = None  # drafter name -> core.speedup.StepTimes (file or roofline)
    settings: dict[str, Any] = dataclasses.field(default_factory=dict)

    def measure_live(self, settings: RunSettings) -> bool:
        """Live mode with draft lengths and no other step times: time a plain decoding step per prompt."""
        return settings.replay.mode == "live" and any(self.draft_lengths.values()) and self.step_times is None


def serving_inputs(settings: RunSettings, inputs: Inputs) -> ServingPlan:
    """The draft lengths of each drafter (its block known now) and the step times (the flags' own rules:
    RunSettings.check)."""
    from ..core.speedup import read_step_times

    serving = settings.serving
    lengths = {e.name: serving.for_block(e.spec.block_size, e.name) for e in inputs.entries}
    times = None
    if serving.accelerator is not None:
        times = {e.name: roofline_step_times(settings, inputs, e) for e in inputs.entries}
    if serving.step_times is not None:
        file_times = read_step_times(serving.step_times)
        times = {e.name: file_times for e in inputs.entries}
    return ServingPlan(lengths, times, serving.provenance())


def roofline_step_times(settings: RunSettings, inputs: Inputs, entry):
    """The roofline model `plan` uses (core/roofline.py), on the target's and this drafter's configs, at the
    mean context of a step: the prompts' mean length plus half the generation cap."""
    import json

    from ..core.speedup import mean_context
    from ..core.speedup import roofline_step_times as build

    context = mean_context((len(ids) for ids in inputs.prompt_ids().values()), settings.inputs.max_new_tokens)
    from ..core.errors import InputError

    config = json.loads((inputs.target_path / "config.json").read_text())
    try:
        return build(settings.serving.accelerator, config, entry.spec, context)
    except InputError as exc:  # the roofline names the key; the file is the target's config
        raise InputError(None if exc.problem.startswith("--accelerator") else inputs.target_path / "config.json",
                         exc.problem) from None


def _evaluate_loaded(settings: RunSettings, reporter: Reporter, inputs: Inputs, folder: RunFolder, target,  # noqa: C901 (past the ceiling before it was set; split by idea when next touched)
                     done_rows: list[dict[str, Any]], serving: ServingPlan | None = None,
                     drafters: dict | None = None, title: str | None = None) -> Evaluation:
    serving = serving or ServingPlan({e.name: () for e in inputs.entries})
    from ..model.kernels import kernel_report, kernel_summary

    drafters = drafters or load_drafters(inputs.entries, target, device="cpu")
    samples = range(settings.sampling.samples)
    # held in memory: the file is only appended to
    all_rows = folder.keep_complete(done_rows, {(name, k) for name in drafters for k in samples})
    complete = {r["prompt_id"] for r in all_rows}
    pending = [p for p in inputs.prompts if p.id not in complete]
    if complete:
        reporter.note(f"resuming: {len(complete)} of {len(inputs.prompts)} prompts already done")
    if isinstance(reporter, Progress):
        reporter.evaluated = len(complete)
    ids = {k: v for k, v in inputs.prompt_ids().items() if k not in complete}
    sampled = settings.sampled  # the loop's own samples are the continuations: no greedy ones needed
    estimate = settings.estimate  # temperature > 0 offline: K sampled texts per prompt
    if estimate:
        continuations, generated = sampled_continuations_for(target, pending, ids, settings, inputs.thinking, reporter,
                                                             universe=inputs.planned)
    else:
        continuations, generated = ({}, 0) if sampled else continuations_for(
            target, pending, ids, settings, inputs.thinking, inputs.responses, reporter, universe=inputs.planned)
    drafters = to_target_device(drafters, target)  # generation is done: the target was all that was resident
    from ..pipeline.inputs import reference_name
    from .explain import add_explanation, explain_skipped, plan_explanation

    explain = plan_explanation(settings, inputs.entries, reference_name(settings, inputs.entries), target)
    if explain is not None and pending:  # the cost, said before the work starts
        reporter.note(explain.cost_line(len(pending)))
    elif explain_skipped(settings):
        reporter.note(explain_skipped(settings))
    layers = sorted({t for d in drafters.values() for t in d.spec.taps} | (explain.layers if explain else set()))
    policy_settings = {e.name: settings.with_sections(dataclasses.replace(settings.sampling, draft_policy=e.draft_policy))
                       if e.draft_policy else settings for e in inputs.entries}
    decode = piece_decoder(target.tokenizer)
    kernels = kernel_summary(kernel_report(target.model))
    from ..pipeline.numerics import NumericsCheck

    checked = settings.numerics.numerics_check
    numerics = NumericsCheck(checked) if checked else None  # --numerics-check N

    def document(final: bool = True) -> dict[str, Any]:  # partial ones skip the breakdown and the explanation
        run = assemble(settings, target, inputs.entries, drafters, all_rows, inputs.prompts, inputs.thinking,
                        inputs.warnings, inputs.fingerprints, kernels,
                        {name: d.spec.block_size for name, d in drafters.items()},
                        generated_count=generated, evaluated_count=len(pending), step_times=serving.step_times,
                        content=inputs.content, breakdown=final, explain=final, dataset=inputs.dataset)
        if numerics is not None:
            run["provenance"]["numerics"]["measured"] = numerics.to_dict()
        return run

    partials = PartialSchedule()
    reporter.phase("prompts", len(pending))
    for prompt in pending:
        cont = continuations.get(prompt.id)
        if estimate:
            rows = []
            for k in samples:
                trajectory = capture_trajectory(target, prompt, ids[prompt.id], continuations[(prompt.id, k)], layers,
                                                sequence_chunk=settings.batching.tap_chunk, keep_hidden=True, sample=k)
                rows += estimate_rows(prompt, drafters, trajectory, target, policy_settings.__getitem__)
        elif settings.replay.mode == "trajectory":  # (with --draft-lengths the rows hold every k: rows.trajectory_rows)
            trajectory = capture_trajectory(target, prompt, ids[prompt.id], cont, layers,
                                            sequence_chunk=settings.batching.tap_chunk)
            rows = trajectory_rows(prompt, drafters, trajectory, settings)
            if explain is not None:  # doctor's variants on this same trajectory (commands/explain.py)
                add_explanation(rows, explain, drafters, trajectory, settings, target)
            if numerics is not None and numerics.wants_more():  # reads the run's work, changes none of it
                numerics.add(target, drafters, ids[prompt.id], cont, trajectory, policy_settings)
        else:
            rows = []
            for k in samples:
                for name, d in drafters.items():
                    live = score_live(target, d, ids[prompt.id], policy_settings[name], prompt.id, k)
                    agree = None if sampled else (sum(int(a == b) for a, b in zip(live.continuation, cont)), len(cont))
                    rows.append(live_row(prompt, name, d.spec.block_size, live, len(ids[prompt.id]), agree,
                                         sample=k if sampled else None))
                    add_live_draft_lengths(rows[-1], target, d, ids[prompt.id], policy_settings[name], prompt.id, k)
            if serving.measure_live(settings):
                one = plain_decoding_seconds(target, next(iter(drafters.values())), ids[prompt.id], settings)
                for row in rows:
                    row["one_token_step"] = one
        folder.append(finish_rows(rows, decode))
        all_rows.extend(rows)
        complete.add(prompt.id)
        if isinstance(reporter, Progress):
            reporter.evaluated = len(complete)
        if prompt is not pending[-1] and partials.due():  # what report/show/diff render, with a banner, if the
            # run stops here: after the first prompt, then periodically (document.PartialSchedule)
            partials.write(lambda: folder.write_partial(document(final=False), len(complete), len(inputs.prompts)))
        pause_after_prompt()
        reporter.advance("prompts", prompt.id)
    run = document()
    if settings.second_target.serving_target is not None:  # the drop to the copy served, split (serving_target.py)
        from .serving_target import serving_target_section

        run["serving_target"] = serving_target_section(settings, inputs, target, drafters, reporter)
    page = report_page(settings, run, all_rows, title)
    folder.finish(run, {"report.html": page} if page is not None else None)
    return Evaluation(run, all_rows)
