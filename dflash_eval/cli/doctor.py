"""`dflash-eval doctor`: replay one drafter under each classic bug's variant and name the mismatch."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from . import options as opt
from .common import claims_out, fail, reports_input_errors, safe_line, stdout_console
from .progress import reporter_for
from .root import app


@app.command()
@reports_input_errors
@claims_out()
def doctor(
    drafter: str = typer.Option(..., "--drafter", "-d", help="The drafter checkpoint to examine."),
    reference: Optional[str] = typer.Option(None, "--reference", help="Explain the gap to this drafter ('z-lab', PATH or PATH:NAME, as run's --reference): how much of it each variant closes."),
    target: opt.target.type = opt.target.default,
    prompts: opt.prompts.type = opt.prompts.default,
    prompt_field: opt.prompt_field.type = opt.prompt_field.default,
    limit: opt.limit.type = opt.limit.default,
    max_new_tokens: opt.max_new_tokens.type = opt.max_new_tokens.default,
    thinking: opt.thinking.type = opt.thinking.default,
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Write doctor.json here; when it is a run folder, doctor uses that run's settings (prompts, tokens, thinking, target) and adds a 'doctor' section to its run.json."),
    device: opt.device.type = opt.device.default,
    dtype: opt.dtype.type = opt.dtype.default,
    cache_dir: opt.cache_dir.type = opt.cache_dir.default,
    seed: opt.seed.type = opt.seed.default,
    semantics: opt.semantics.type = opt.semantics.default,
    temperature: opt.temperature_offline.type = opt.temperature_offline.default,
    top_p: opt.top_p.type = opt.top_p.default,
    top_k: opt.top_k.type = opt.top_k.default,
    draft_policy: opt.draft_policy_offline.type = opt.draft_policy_offline.default,
    samples: opt.samples.type = opt.samples.default,
    context_variants: bool = typer.Option(True, "--context-variants/--no-context-variants", help="Also evaluate on continuations made with thinking flipped and from the raw prompt (one more target pass per prompt each)."),
    depth_buckets: opt.depth_buckets.type = opt.depth_buckets.default,
    engines: bool = typer.Option(False, "--engines", help="Instead of the variants: the drafter under every engine's reading of its checkpoint (z-lab, speculators, vLLM, SGLang, llama.cpp) on the same trajectories, tau per engine and the rule responsible for each difference; writes engines.json with --out."),
    draft_window: opt.draft_window_doctor.type = opt.draft_window_doctor.default,
    tree_budgets: opt.tree_budgets.type = opt.tree_budgets.default,
    trained_taps: Optional[Path] = typer.Option(None, "--trained-taps", help="The training run's hidden-state data folder (as `dflash-eval trained-taps` reads it): its taps against the target's, and the drafter on both; the verdict names a skew that explains the gap."),
    serving_target: opt.serving_target.type = opt.serving_target.default,
) -> None:
    """Name the train/eval mismatch behind a gap: replay the drafter under each classic bug's variant."""
    given = dict(locals())  # every option, passed on whole (a new option needs no second list)
    from ..core.paths import output_path
    from ..pipeline.preflight import check_paths

    check_paths([drafter, *([reference] if reference else [])])  # before any heavy import (pipeline/preflight.py)
    if out is not None:  # (a run folder in --out is held locked from the first line: cli/common.claims_out)
        output_path(out, "--out", folder=True)
    _doctor(**given)


def _doctor(drafter, reference, target, prompts, prompt_field, limit, max_new_tokens, thinking, out, device, dtype,
            cache_dir, seed, semantics, temperature, top_p, top_k, draft_policy, samples, context_variants,
            depth_buckets, draft_window, trained_taps, engines, tree_budgets=None, serving_target=None) -> None:
    """doctor's work once its --out is checked (and, a run folder, locked)."""
    from ..commands.doctor import run_doctor
    from ..commands.evaluate import RunOptions
    from ..core.results import RUN_JSON
    from ..render.terminal_doctor import render_doctor

    run_count = None
    if out is not None and (out / RUN_JSON).is_file():
        from ..commands.doctor import settings_of_run

        prompts, max_new_tokens, thinking, target, run_count = settings_of_run(out, prompts, max_new_tokens, thinking,
                                                                               target, limit)
        from ..commands.doctor_windows import run_window_settings

        depth_buckets, draft_window = run_window_settings(out, depth_buckets, draft_window)
    console = stdout_console()
    reporter = reporter_for(console)
    shared = opt.shared_settings(target=target, prompts=prompts, limit=limit if run_count is None else (limit or run_count),
                                 seed=seed, max_new_tokens=max_new_tokens, thinking=thinking, device=device,
                                 dtype=dtype, cache_dir=cache_dir, semantics=semantics, prompt_field=prompt_field)
    if draft_policy == "both":
        raise fail("doctor examines one draft policy at a time (--draft-policy sample or argmax)")
    options = RunOptions(drafters=[drafter], reference=reference, out=out or Path("."), temperature=temperature, top_p=top_p, top_k=top_k,
                         draft_policy=draft_policy, samples=samples, context_variants=context_variants,
                         depth_buckets=depth_buckets, draft_window=draft_window, trained_taps=trained_taps,
                         tree_budgets=tree_budgets, serving_target=serving_target, **shared)
    if engines:
        if trained_taps is not None or serving_target is not None:
            reporter.close()
            raise fail("--engines and --trained-taps (or --serving-target) are two doctors: run them one at a time")
        _engines(options, reporter, console, out)
        return
    from ..render.html import render_run_html

    try:
        result = run_doctor(options, reporter, write=out is not None, report=render_run_html)
    finally:
        reporter.close()
    render_doctor(console, result)
    if out is not None:
        console.print(safe_line(f"written: {out / 'doctor.json'}"))


def _engines(options, reporter, console, out: Optional[Path]) -> None:
    """doctor --engines: commands/doctor_engines.py composes, render/doctor_engines.py shows, engines.json."""
    from ..commands.doctor_engines import run_engines
    from ..render.doctor_engines import render_engines

    try:
        result = run_engines(options, reporter, write=out is not None)
    finally:
        reporter.close()
    render_engines(console, result)
    if out is not None:
        console.print(safe_line(f"written: {out / 'engines.json'}"))
