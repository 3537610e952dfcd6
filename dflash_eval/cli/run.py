"""`dflash-eval run`: evaluate drafters on one target, also under torchrun (`merge`, joining shard runs, is in
cli/merge.py)."""

from __future__ import annotations

import os
import sys
from typing import Optional

import typer
from rich.console import Console

from . import options as opt
from .common import claims_out, fail, program, reports_input_errors, safe_line, stdout_console
from .progress import reporter_for
from .root import app


@app.command()
@reports_input_errors
@claims_out()
def run(
    drafter: list[str] = typer.Option([], "--drafter", "-d", help="Drafter checkpoint, PATH or PATH:NAME; repeat for several.", rich_help_panel=opt.DRAFTERS),
    target: opt.target.type = opt.target.default,
    reference: Optional[str] = typer.Option(None, "--reference", help="Add a reference drafter: 'z-lab' (published drafter for the target, from the HF cache) or a checkpoint, PATH or PATH:NAME as --drafter takes it; the gap to it is explained (--no-explain skips that).", rich_help_panel=opt.DRAFTERS),
    explain: opt.explain.type = opt.explain.default,
    prompts: opt.prompts.type = opt.prompts.default,
    prompt_field: opt.prompt_field.type = opt.prompt_field.default,
    out: opt.out.type = opt.out.default,
    max_new_tokens: opt.max_new_tokens.type = opt.max_new_tokens.default,
    limit: opt.limit.type = opt.limit.default,
    thinking: opt.thinking.type = opt.thinking.default,
    mode: opt.mode.type = opt.mode.default,
    final_block: opt.final_block.type = opt.final_block.default,
    anchor_batch: opt.anchor_batch.type = opt.anchor_batch.default,
    tap_chunk: opt.tap_chunk.type = opt.tap_chunk.default,
    generation_batch: opt.generation_batch.type = opt.generation_batch.default,
    numerics_check: opt.numerics_check.type = opt.numerics_check.default,
    responses: opt.responses.type = opt.responses.default,
    device: opt.device.type = opt.device.default,
    dtype: opt.dtype.type = opt.dtype.default,
    cache_dir: opt.cache_dir.type = opt.cache_dir.default,
    html: bool = typer.Option(True, "--html/--no-html", help="Write DIR/report.html at the end.", rich_help_panel=opt.OUTPUT),
    kernels: opt.kernels.type = opt.kernels.default,
    seed: opt.seed.type = opt.seed.default,
    semantics: opt.semantics.type = opt.semantics.default,
    overwrite: opt.overwrite.type = opt.overwrite.default,
    temperature: opt.temperature.type = opt.temperature.default,
    top_p: opt.top_p.type = opt.top_p.default,
    top_k: opt.top_k.type = opt.top_k.default,
    draft_policy: opt.draft_policy.type = opt.draft_policy.default,
    samples: opt.samples.type = opt.samples.default,
    shard: opt.shard.type = opt.shard.default,
    device_map: opt.device_map.type = opt.device_map.default,
    max_memory: opt.max_memory.type = opt.max_memory.default,
    draft_lengths: opt.draft_lengths.type = opt.draft_lengths.default,
    accelerator: opt.accelerator.type = opt.accelerator.default,
    step_times: opt.step_times.type = opt.step_times.default,
    depth_buckets: opt.depth_buckets.type = opt.depth_buckets.default,
    draft_window: opt.draft_window.type = opt.draft_window.default,
    context_tokens: opt.context_tokens.type = opt.context_tokens.default,
    max_context: opt.max_context.type = opt.max_context.default,
    dist_timeout: opt.dist_timeout.type = opt.dist_timeout.default,
    tree_budgets: opt.tree_budgets.type = opt.tree_budgets.default,
    serving_target: opt.serving_target.type = opt.serving_target.default,
) -> None:
    """Evaluate drafters on one target: acceptance per prompt, per slot, with intervals."""
    from ..core.options import RunOptions

    if not drafter and not reference:
        raise fail("give at least one --drafter (or --reference)")
    shared = opt.shared_settings(target=target, prompts=prompts, limit=limit, seed=seed, max_new_tokens=max_new_tokens,
                                 thinking=thinking, device=device, dtype=dtype, cache_dir=cache_dir, semantics=semantics,
                                 prompt_field=prompt_field, responses=responses)
    options = RunOptions(drafters=list(drafter), out=out, reference=reference, mode=mode, final_block=final_block,
                         anchor_batch=anchor_batch, tap_chunk=tap_chunk, kernels=kernels,
                         generation_batch=generation_batch, temperature=temperature, top_p=top_p, top_k=top_k,
                         draft_policy=draft_policy, samples=samples, shard=shard, device_map=device_map,
                         max_memory=max_memory, draft_lengths=draft_lengths, accelerator=accelerator,
                         step_times=step_times, depth_buckets=depth_buckets, draft_window=draft_window,
                         context_tokens=context_tokens, max_context=max_context,
                         dist_timeout=dist_timeout, numerics_check=numerics_check, tree_budgets=tree_budgets,
                         overwrite=overwrite, explain=explain, serving_target=serving_target,
                         argv=["dflash-eval", *sys.argv[1:]], **shared)
    from ..pipeline.preflight import preflight

    preflight(options)  # paths, target, a resume with other settings: refused before torch is imported
    from ..commands.distributed import launched_ranks
    from ..render.terminal import render_report

    console = stdout_console()
    reporter = reporter_for(console)
    rank, world = launched_ranks()
    if world > 1 and rank > 0:  # torchrun: only rank 0 talks; the other ranks work quietly
        console = Console(file=open(os.devnull, "w"), highlight=False)
        reporter = reporter_for(console)
    from ..render.html import render_run_html

    try:
        from ..commands.distributed import evaluate_launched

        # report.html is written with the results, under the folder's lock (never after another run took it)
        result = evaluate_launched(options, reporter, render_run_html if html else None)
    except KeyboardInterrupt as exc:  # evaluate's Interrupted says what was kept at that moment
        reporter.close()
        raise fail(getattr(exc, "message", None) or f"interrupted; run the same command again (--out {out})", 130) from None
    finally:
        reporter.close()
    if world > 1 and rank > 0:
        return  # rank 0 merged the shards into --out and writes the report
    from ..core.results import read_samples

    rows = read_samples(out / "samples.jsonl")
    render_report(console, result, rows, run_dir=str(out), program=program())
    written = f"results: {out}/run.json, samples.jsonl, per_position.csv" + (", report.html" if html else "")
    console.print(safe_line(written))
