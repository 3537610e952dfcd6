"""The option bundle `run` and `doctor` (and later `track`) share: one name, one default, one help text per
setting, defined once here and mapped onto `options.RunOptions` by `shared_settings`. The settings that
shape the work (batching, sampling, serving, breakdown, long contexts) are declared in their sections
(core/options_work.py); `option(flag)` turns a section's `Flag` into the Typer option, and a command's
signature reads its default from the same place: `tap_chunk: opt.tap_chunk.type = opt.tap_chunk.default`.

Defaults are `None` where "the run default" depends on context (doctor --out RUN takes that run's
settings); `shared_settings` then applies the run defaults, so both commands mean the same thing by them.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from ..core.options_run import REPLAY, Placement, Replay
from ..core.options_work import Batching, Breakdown, LongContext, Sampling, Serving
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

# the labelled groups of `--help` (the sections' own panels: core/options_work.py)
DRAFTERS = "Drafters"
INPUTS = "Inputs (target, prompts, generation)"
OUTPUT = "Output"

SEMANTICS_HELP = ("Attention and scale rules a drafter is evaluated under: zlab (dflash/model.py), speculators "
                  "(its training mask), vllm, sglang or llamacpp (docs/engines.md); RULES for every drafter or "
                  "NAME=RULES for one; repeatable. "
                  "Default: each checkpoint's format decides (`dflash-eval inspect` shows the rule per layer).")

Target = Annotated[Optional[str], typer.Option(
    "--target", "-t", help="Target folder or HF cache name (default: the verifier the drafters record).", rich_help_panel=INPUTS)]
Prompts = Annotated[Optional[str], typer.Option(
    "--prompts", "-p", help="humaneval, mbpp, demo, FILE.jsonl, dir:PATH; from the Hugging Face cache the paper's "
                            "sets (gsm8k, math500, aime24, aime25, livecodebench, swe-bench, mt-bench, alpaca; "
                            "paper:NAME for only the paper's rows) or hf:REPO[:CONFIG][:SPLIT]; or long contexts: "
                            "repo:PATH (a repository's "
                            "files packed into prompts of --context-tokens) or stdlib (the Python standard library's "
                            "sources) (`dflash-eval prompts list`; default demo).", rich_help_panel=INPUTS)]
PromptField = Annotated[Optional[str], typer.Option(
    "--prompt-field", help="With --prompts hf:REPO[:CONFIG][:SPLIT]: the column holding the prompt (a string, a list "
                           "of user turns or a list of {role, content} messages; default: prompt, messages, question, "
                           "problem, instruction or text, whichever the dataset has).", rich_help_panel=INPUTS)]
Limit = Annotated[Optional[int], typer.Option("--limit", min=1, help="Only the first N prompts (with --seed: a seeded random N).", rich_help_panel=INPUTS)]
Seed = Annotated[Optional[int], typer.Option(
    "--seed", help="With --limit: a seeded random subset instead of the first N; also seeds the bootstrap (default 0).", rich_help_panel=INPUTS)]
MaxNewTokens = Annotated[Optional[int], typer.Option("--max-new-tokens", min=1, help="Generation cap (default 256).", rich_help_panel=INPUTS)]
Thinking = Annotated[Optional[bool], typer.Option(
    "--thinking/--no-thinking", help="Chat template thinking flag (default: off for Qwen3, on for Qwen3.5/3.6/Next).", rich_help_panel=INPUTS)]
CacheDir = Annotated[Optional[Path], typer.Option(
    "--cache-dir", help="Continuation cache (default ~/.cache/dflash-eval or $DFLASH_EVAL_CACHE).", rich_help_panel=OUTPUT)]
Semantics = Annotated[list[str], typer.Option("--semantics", help=SEMANTICS_HELP, rich_help_panel=REPLAY)]
NumericsCheck = Annotated[int, typer.Option(
    "--numerics-check", min=0, metavar="N", help="On the first N prompts also measure how far bf16 results move with the GEMM shapes: each continuation regenerated alone, drafts at another --anchor-batch, the live loop's walk; counts in run.json provenance.numerics.measured (the run's own numbers unchanged).", rich_help_panel=REPLAY)]


class Setting:
    """A section's flag as a command declares it: `type` (the Annotated Typer option) and `default`."""

    def __init__(self, flag: Flag, help: str | None = None) -> None:
        self.flag, self.default = flag, flag.default
        extra: dict[str, Any] = {}
        if flag.minimum is not None:
            extra["min"] = flag.minimum
        if flag.metavar is not None:
            extra["metavar"] = flag.metavar
        if flag.number is not None:
            low, high, low_open = flag.number
            extra["parser"] = finite_number(low, high, low_open=low_open)
        self.help = help or flag.help
        self.type = Annotated[flag.type, typer.Option(*flag.names, help=self.help, rich_help_panel=flag.panel,
                                                      **extra)]


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


def shared_settings(*, target, prompts, limit, seed, max_new_tokens, thinking, device, dtype, cache_dir,
                    semantics) -> dict[str, Any]:
    """The bundle's values as RunOptions fields, with the run defaults applied."""
    from ..core.options import RunOptions, default_cache_dir

    return dict(target=target, prompts=prompts or "demo", limit=limit, prompt_seed=seed, seed=seed or 0,
                max_new_tokens=max_new_tokens or RunOptions.max_new_tokens, thinking=thinking, device=device,
                dtype=dtype, cache_dir=cache_dir or default_cache_dir(), semantics=list(semantics))
