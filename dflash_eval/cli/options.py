"""The option bundle `run` and `doctor` (and later `track`) share: one name, one default, one help text per
setting, defined once here and mapped onto `options.RunOptions` by `shared_settings`.

Defaults are `None` where "the run default" depends on context (doctor --out RUN takes that run's
settings); `shared_settings` then applies the run defaults, so both commands mean the same thing by them.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any, Optional

import typer


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

SEMANTICS_HELP = ("Attention and scale rules a drafter is evaluated under: zlab (dflash/model.py), speculators "
                  "(its training mask), vllm, sglang or llamacpp (docs/engines.md); RULES for every drafter or "
                  "NAME=RULES for one; repeatable. "
                  "Default: each checkpoint's format decides (`dflash-eval inspect` shows the rule per layer).")

Target = Annotated[Optional[str], typer.Option(
    "--target", "-t", help="Target folder or HF cache name (default: the verifier the drafters record).")]
Prompts = Annotated[Optional[str], typer.Option(
    "--prompts", "-p", help="humaneval, mbpp, demo, FILE.jsonl, dir:PATH; from the Hugging Face cache the paper's "
                            "sets (gsm8k, math500, aime24, aime25, livecodebench, swe-bench, mt-bench, alpaca; "
                            "paper:NAME for only the paper's rows) or hf:REPO[:CONFIG][:SPLIT]; or long contexts: "
                            "repo:PATH (a repository's "
                            "files packed into prompts of --context-tokens) or stdlib (the Python standard library's "
                            "sources) (`dflash-eval prompts list`; default demo).")]
PromptField = Annotated[Optional[str], typer.Option(
    "--prompt-field", help="With --prompts hf:REPO[:CONFIG][:SPLIT]: the column holding the prompt (a string, a list "
                           "of user turns or a list of {role, content} messages; default: prompt, messages, question, "
                           "problem, instruction or text, whichever the dataset has).")]
Limit = Annotated[Optional[int], typer.Option("--limit", min=1, help="Only the first N prompts (with --seed: a seeded random N).")]
Seed = Annotated[Optional[int], typer.Option(
    "--seed", help="With --limit: a seeded random subset instead of the first N; also seeds the bootstrap (default 0).")]
MaxNewTokens = Annotated[Optional[int], typer.Option("--max-new-tokens", min=1, help="Generation cap (default 256).")]
Thinking = Annotated[Optional[bool], typer.Option(
    "--thinking/--no-thinking", help="Chat template thinking flag (default: off for Qwen3, on for Qwen3.5/3.6/Next).")]
Device = Annotated[str, typer.Option("--device", help="auto, cpu, cuda or cuda:N.")]
Dtype = Annotated[str, typer.Option("--dtype", help="auto (bf16 on GPU, fp32 on CPU), bfloat16 or float32.")]
CacheDir = Annotated[Optional[Path], typer.Option(
    "--cache-dir", help="Continuation cache (default ~/.cache/dflash-eval or $DFLASH_EVAL_CACHE).")]
Semantics = Annotated[list[str], typer.Option("--semantics", help=SEMANTICS_HELP)]
FinalBlock = Annotated[str, typer.Option(
    "--final-block", help="shorter (z-lab: min(B, remaining+1) slots near the cap) or full (vLLM). A drafter under --semantics vllm always drafts full blocks (vLLM's rule; recorded per drafter).")]
AnchorBatch = Annotated[Optional[int], typer.Option(
    "--anchor-batch", min=1, help="Anchors per drafter forward (default: from the shapes and the device kind, never the free memory: core/batching.py, docs/performance.md).")]
TapChunk = Annotated[int, typer.Option(
    "--tap-chunk", min=1, help="Target positions per forward of the tap pass; longer sequences run as a chunked prefill.")]
NumericsCheck = Annotated[int, typer.Option(
    "--numerics-check", min=0, metavar="N", help="On the first N prompts also measure how far bf16 results move with the GEMM shapes: each continuation regenerated alone, drafts at another --anchor-batch, the live loop's walk; counts in run.json provenance.numerics.measured (the run's own numbers unchanged).")]
GenerationBatch = Annotated[Optional[int], typer.Option(
    "--generation-batch", min=1, help="Prompts generated together (default: 8 on CPU; on GPU from the total memory and the exact cache bytes, at most 64; batches planned over the run's prompts, after --limit).")]
Kernels = Annotated[str, typer.Option(
    "--kernels", help="auto (whatever transformers bound, fla on GPU) or torch (force the Gated-DeltaNet torch fallback).")]
# temperature > 0 (sampling.py): the same five options on run, doctor and track
Temperature = Annotated[float, typer.Option(
    "--temperature", parser=finite_number(), help="Sampling temperature; > 0: the offline estimate (acceptance teacher-forced on sampled "
                          "continuations).")]
TemperatureRun = Annotated[float, typer.Option(
    "--temperature", parser=finite_number(), help="Sampling temperature; > 0: the offline estimate (default mode) or, with --mode live, "
                          "z-lab's loop with rejection sampling.")]
TopP = Annotated[float, typer.Option("--top-p", parser=finite_number(), help="Nucleus sampling at temperature > 0 (z-lab's rule), target and drafter.")]
TopK = Annotated[int, typer.Option("--top-k", help="Top-k at temperature > 0 (0: off), target and drafter.")]
DraftPolicy = Annotated[str, typer.Option(
    "--draft-policy", help="At temperature > 0: sample (drafts drawn from the drafter, z-lab 0.1.0) or argmax (its "
                           "greedy tokens, accepted with probability p).")]
DraftPolicyRun = Annotated[str, typer.Option(
    "--draft-policy", help="At temperature > 0: sample (drafts drawn from the drafter, z-lab 0.1.0), argmax (its "
                           "greedy tokens, accepted with probability p) or both (each drafter under each).")]
Samples = Annotated[int, typer.Option(
    "--samples", min=1, help="At temperature > 0: samples per prompt (each seeded from --seed, the prompt and k).")]

# the serving decision (core/speedup.py): run takes these three
DraftLengths = Annotated[Optional[str], typer.Option(
    "--draft-lengths", help="3,7,15 or all: also replay each drafter with a block of k + 1 (what a server with "
                            "num_speculative_tokens = k runs), one tap pass for all; tau and every metric per k.")]
Accelerator = Annotated[Optional[str], typer.Option(
    "--accelerator", help="Expected speedup from the roofline model of the target's and drafter's configs on this "
                          "accelerator (`dflash-eval plan` lists them).")]
StepTimesFile = Annotated[Optional[Path], typer.Option(
    "--step-times", help="Expected speedup from your step times (JSON: {\"label\", \"target\": [{\"batch\", "
                         "\"tokens\", \"seconds\"}], \"drafter\": [...]}, e.g. from `vllm bench forward`).")]

# where acceptance is lost (core/breakdown.py) and the serving window (model/masks.py)
DepthBuckets = Annotated[Optional[str], typer.Option(
    "--depth-buckets", help="Edges of the context-depth buckets every metric is also split by, in tokens of the "
                            "anchor's position: 0,512,2048,... (K = 1024; default 1K,2K,4K,8K,16K,32K).")]
DraftWindow = Annotated[Optional[int], typer.Option(
    "--draft-window", min=1, help="The drafter sees only the last W context rows before each anchor, on every layer, "
                                  "as SGLang's --speculative-draft-window-size serves it.")]

ContextTokens = Annotated[Optional[int], typer.Option(
    "--context-tokens", min=64, help="With --prompts repo:PATH or stdlib: tokens of each packed prompt (default 8192).")]
MaxContext = Annotated[str, typer.Option(
    "--max-context", help="A prompt + --max-new-tokens past the target's positions: refuse (by name) or truncate "
                          "(repo:/stdlib prompts packed shorter, with a warning).")]


def shared_settings(*, target, prompts, limit, seed, max_new_tokens, thinking, device, dtype, cache_dir,
                    semantics) -> dict[str, Any]:
    """The bundle's values as RunOptions fields, with the run defaults applied."""
    from ..core.options import RunOptions, default_cache_dir

    return dict(target=target, prompts=prompts or "demo", limit=limit, prompt_seed=seed, seed=seed or 0,
                max_new_tokens=max_new_tokens or RunOptions.max_new_tokens, thinking=thinking, device=device,
                dtype=dtype, cache_dir=cache_dir or default_cache_dir(), semantics=list(semantics))
