"""The option bundle `run` and `doctor` (and later `track`) share: one name, one default, one help text per
setting, mapped onto `options.RunOptions` by `shared_settings`. The settings are declared in their sections
(core/options_inputs.py, core/options_work.py, core/options_run.py); `Setting(flag)` turns a section's
`Flag` into the Typer option, and a command's signature reads its default from the same place:
`tap_chunk: opt.tap_chunk.type = opt.tap_chunk.default`.

The inputs flags default to `None` where "the run default" depends on context (doctor --out RUN takes that
run's settings); `shared_settings` then applies the run defaults (`InputSettings.given`), so every command means
the same thing by them.
"""

from __future__ import annotations

import math
from typing import Annotated, Any

import typer

from ..core.options_inputs import InputSettings, ServingTarget
from ..core.options_output import OUTPUT as OUTPUT  # the panel run.py and track.py also put --html in
from ..core.options_output import Output
from ..core.options_run import DRAFTERS as DRAFTERS  # the panel run.py and doctor.py put --drafter in
from ..core.options_run import Explanation, Numerics, Placement, Replay
from ..core.options_work import Batching, Breakdown, LongContext, Sampling, Serving, Trees
from ..core.sections import Flag


def finite_number(low: float | None = None, high: float | None = None, *, low_open: bool = False):
    """The parser of every float option: a finite number within [low, high] (low excluded when `low_open`).
    Why one rule: NaN passes click's ranges (every comparison with it is false) and inf reached time.sleep
    after the expensive work; both are refused here, at the command line, as a usage error naming the option."""
    def parse(value) -> float:
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise typer.BadParameter(f"{value!r} is not a number") from None
        if not math.isfinite(number):
            raise typer.BadParameter(f"{value!r} is not a finite number")
        if low is not None and (number <= low if low_open else number < low):
            raise typer.BadParameter(f"{value} is not {'>' if low_open else '>='} {low:g}")
        if high is not None and number > high:
            raise typer.BadParameter(f"{value} is not <= {high:g}")
        return number

    parse.__name__ = "float"  # help shows NUMBER for it, as for any float (root._WORDS)
    return parse

# the labelled groups of `--help` are the sections' own panels (core/options_work.py); --drafter and --reference
# share theirs, DRAFTERS, with --explain (core/options_run.py)


class Setting:
    """A section's flag as a command declares it: `type` (the Annotated Typer option) and `default`."""

    def __init__(self, flag: Flag, help: str | None = None) -> None:
        self.flag, self.default = flag, flag.default
        extra: dict[str, Any] = {}
        if flag.minimum is not None:
            extra["min"] = flag.minimum
        if flag.maximum is not None:
            extra["max"] = flag.maximum
        if flag.metavar is not None:
            extra["metavar"] = flag.metavar
        if flag.number is not None:
            low, high, low_open = flag.number
            extra["parser"] = finite_number(low, high, low_open=low_open)
        self.help = help or flag.help
        self.type = Annotated[flag.type, typer.Option(*flag.names, help=self.help, rich_help_panel=flag.panel,
                                                      **extra)]


target = Setting(InputSettings.flag("target"))
prompts = Setting(InputSettings.flag("prompts"))
prompt_field = Setting(InputSettings.flag("prompt_field"))
limit = Setting(InputSettings.flag("limit"))
seed = Setting(InputSettings.flag("seed"))
max_new_tokens = Setting(InputSettings.flag("max_new_tokens"))
thinking = Setting(InputSettings.flag("thinking"))
responses = Setting(InputSettings.flag("responses"))
semantics = Setting(InputSettings.flag("semantics"))
serving_target = Setting(ServingTarget.flag("serving_target"))
out = Setting(Output.flag("out"))
out_track = Setting(Output.flag("out"), Output.TRACK_HELP["out"])
overwrite = Setting(Output.flag("overwrite"))
overwrite_track = Setting(Output.flag("overwrite"), Output.TRACK_HELP["overwrite"])
cache_dir = Setting(Output.flag("cache_dir"))
numerics_check = Setting(Numerics.flag("numerics_check"))
explain = Setting(Explanation.flag("explain"))
mode = Setting(Replay.flag("mode"))
final_block = Setting(Replay.flag("final_block"))
kernels = Setting(Replay.flag("kernels"))
device = Setting(Placement.flag("device"))
dtype = Setting(Placement.flag("dtype"))
device_map = Setting(Placement.flag("device_map"))
max_memory = Setting(Placement.flag("max_memory"))
shard = Setting(Placement.flag("shard"))
dist_timeout = Setting(Placement.flag("dist_timeout"))
anchor_batch = Setting(Batching.flag("anchor_batch"))
tap_chunk = Setting(Batching.flag("tap_chunk"))
generation_batch = Setting(Batching.flag("generation_batch"))
temperature = Setting(Sampling.flag("temperature"))
temperature_offline = Setting(Sampling.flag("temperature"), Sampling.OFFLINE_HELP["temperature"])  # track, doctor
top_p = Setting(Sampling.flag("top_p"))
top_k = Setting(Sampling.flag("top_k"))
draft_policy = Setting(Sampling.flag("draft_policy"))
draft_policy_offline = Setting(Sampling.flag("draft_policy"), Sampling.OFFLINE_HELP["draft_policy"])
samples = Setting(Sampling.flag("samples"))
draft_lengths = Setting(Serving.flag("draft_lengths"))
accelerator = Setting(Serving.flag("accelerator"))
step_times = Setting(Serving.flag("step_times"))
depth_buckets = Setting(Breakdown.flag("depth_buckets"))
draft_window = Setting(Breakdown.flag("draft_window"))
draft_window_doctor = Setting(Breakdown.flag("draft_window"), Breakdown.DOCTOR_HELP["draft_window"])
context_tokens = Setting(LongContext.flag("context_tokens"))
max_context = Setting(LongContext.flag("max_context"))
tree_budgets = Setting(Trees.flag("tree_budgets"))


def shared_settings(*, target, prompts, limit, seed, max_new_tokens, thinking, device, dtype, cache_dir,
                    semantics, prompt_field=None, responses=None) -> dict[str, Any]:
    """The bundle's values as RunOptions fields, with the run defaults applied (core/options_inputs.InputSettings)."""
    from ..core.options import default_cache_dir

    inputs = InputSettings.given(target=target, prompts=prompts, prompt_field=prompt_field, limit=limit, seed=seed,
                          max_new_tokens=max_new_tokens, thinking=thinking, responses=responses, semantics=semantics)
    return dict(inputs.run_fields(), device=device, dtype=dtype, cache_dir=cache_dir or default_cache_dir())
