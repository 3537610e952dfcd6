"""`dflash-eval plan`: the memory, batch sizes and time of a run on a named accelerator, from configs alone."""

from __future__ import annotations

import json
from typing import Optional

import typer

from . import options as opt
from .common import reports_input_errors, stdout_console
from .options import finite_number
from .root import app


@app.command()
@reports_input_errors
def plan(
    target: str = typer.Option(..., "--target", "-t", help="Target folder or HF cache name (its config.json; its tokenizer when present)."),
    drafter: list[str] = typer.Option([], "--drafter", "-d", help="Drafter folder or HF cache name (config.json is enough); repeatable."),
    reference: Optional[str] = typer.Option(None, "--reference", help="Also plan a reference drafter: 'z-lab' (the published drafter for the target, from the HF cache, as `run --reference z-lab`) or a path."),
    prompts: str = typer.Option("demo", "--prompts", "-p", help="humaneval, mbpp, demo, FILE.jsonl or dir:PATH."),
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="Only the first N prompts."),
    max_new_tokens: int = typer.Option(256, "--max-new-tokens", min=1, help="Generation cap (the run's default 256)."),
    accelerator: str = typer.Option("h200", "--accelerator", help="h100, h200, a100 or b200 (published bf16 peak, bandwidth, memory)."),
    generation_batch: opt.generation_batch.type = opt.generation_batch.default,  # the run's own flags (core/settings/work.py)
    anchor_batch: opt.anchor_batch.type = opt.anchor_batch.default,
    tap_chunk: opt.tap_chunk.type = opt.tap_chunk.default,
    temperature: float = typer.Option(0.0, "--temperature", parser=finite_number(0), help="> 0: K sampled continuations per prompt."),
    samples: int = typer.Option(1, "--samples", min=1, help="At temperature > 0: samples per prompt."),
    numerics_check: opt.numerics_check.type = opt.numerics_check.default,
    doctor: bool = typer.Option(False, "--doctor/--no-doctor", help="Also plan `doctor` on the first drafter."),
    context_variants: bool = typer.Option(True, "--context-variants/--no-context-variants", help="doctor's thinking-flipped and raw-prompt variants."),
    thinking: Optional[bool] = typer.Option(None, "--thinking/--no-thinking", help="Chat template thinking flag (default: the family's)."),
    as_json: bool = typer.Option(False, "--json", help="Print the plan as one JSON document."),
) -> None:
    """Will a run fit, which batch sizes will it choose, how long will it take: from config.json files alone,
    before any weight is read or GPU leased. Exits 1 when it does not fit (naming the option that would)."""
    from ..commands.plan import PlanSettings
    from ..commands.plan import plan as make_plan
    from ..render.plan import render_plan

    settings = PlanSettings(prompts=prompts, limit=limit, max_new_tokens=max_new_tokens, accelerator=accelerator,
                            generation_batch=generation_batch, anchor_batch=anchor_batch, tap_chunk=tap_chunk,
                            temperature=temperature, samples=samples, doctor=doctor, numerics_check=numerics_check,
                            context_variants=context_variants, thinking=thinking)
    result = make_plan(target, list(drafter), settings, reference=reference)
    if as_json:
        typer.echo(json.dumps(result.to_dict(), indent=2))
    else:
        render_plan(stdout_console(), result)
    if not result.fits:
        raise typer.Exit(1)
