"""`dflash-eval plan`: the memory, batch sizes and time of a run on a named accelerator, from configs alone.
Its run flags are the sections' (cli/options.takes); --target, the accelerator and --doctor are its own section's
(commands/plan_choices.PlanChoices)."""

from __future__ import annotations

import json

import typer

from ..commands.plan_choices import PlanChoices
from ..core.settings.execution import Doctor, Numerics
from ..core.settings.inputs import Drafters, InputSettings
from ..core.settings.run_settings import RunSettings
from ..core.settings.sections import Use
from ..core.settings.work import Batching, Sampling
from .common import reports_input_errors, stdout_console
from .options import takes

PLAN_HELP = {
    "drafters": "Drafter folder or HF cache name (config.json is enough); repeatable.",
    "reference": "Also plan a reference drafter: 'z-lab' (the published drafter for the target, from the HF cache, "
                 "as `run --reference z-lab`) or a path.",
    "prompts": "humaneval, mbpp, demo, FILE.jsonl, dir:PATH or a set of the Hugging Face cache (`dflash-eval prompts "
               "list`; default demo).",
    "limit": "Only the first N prompts.",
    "temperature": "> 0: K sampled continuations per prompt.",
    "samples": "At temperature > 0: samples per prompt.",
    "context_variants": "doctor's thinking-flipped and raw-prompt variants.",
}


@reports_input_errors
@takes(Use(Drafters, help=PLAN_HELP), Use(InputSettings, only=("prompts", "limit", "max_new_tokens", "thinking"),
                                          help=PLAN_HELP),
       Batching, Use(Sampling, only=("temperature", "samples"), help=PLAN_HELP), Numerics,
       Use(Doctor, only=("context_variants",), help=PLAN_HELP), choices=PlanChoices)
def plan(
    settings: RunSettings,
    choices: PlanChoices,
    as_json: bool = typer.Option(False, "--json", help="Print the plan as one JSON document."),
) -> None:
    """Will a run fit, which batch sizes will it choose, how long will it take: from config.json files alone,
    before any weight is read or GPU leased. Exits 1 when it does not fit (naming the option that would)."""
    from ..commands.plan import PlanSettings
    from ..commands.plan import plan as make_plan
    from ..render.plan import render_plan

    result = make_plan(choices.target, list(settings.drafters.drafters),
                       PlanSettings.of(settings, choices.accelerator, choices.doctor),
                       reference=settings.drafters.reference)
    if as_json:
        typer.echo(json.dumps(result.to_dict(), indent=2))
    else:
        render_plan(stdout_console(), result)
    if not result.fits:
        raise typer.Exit(1)
