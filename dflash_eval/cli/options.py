"""The option bundle `run` and `doctor` (and later `track`) share: one name, one default, one help text per
setting, defined once here and mapped onto `options.RunOptions` by `shared_settings`.

Defaults are `None` where "the run default" depends on context (doctor --out RUN takes that run's
settings); `shared_settings` then applies the run defaults, so both commands mean the same thing by them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

SEMANTICS_HELP = ("Attention and scale rules a drafter is evaluated under: zlab (dflash/model.py), speculators "
                  "(its training mask) or vllm; RULES for every drafter or NAME=RULES for one; repeatable. "
                  "Default: each checkpoint's format decides (`dflash-eval inspect` shows the rule per layer).")

Target = Annotated[Optional[str], typer.Option(
    "--target", "-t", help="Target folder or HF cache name (default: the verifier the drafters record).")]
Prompts = Annotated[Optional[str], typer.Option(
    "--prompts", "-p", help="humaneval, mbpp, demo, FILE.jsonl or dir:PATH (`dflash-eval prompts list`; default demo).")]
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
    "--final-block", help="shorter (z-lab: min(B, remaining+1) slots near the cap) or full (vLLM).")]
AnchorBatch = Annotated[Optional[int], typer.Option(
    "--anchor-batch", min=1, help="Anchors per drafter forward (default: 64 on CPU; on GPU sized to ~2 GB).")]
TapChunk = Annotated[int, typer.Option(
    "--tap-chunk", min=1, help="Target positions per forward of the tap pass; longer sequences run as a chunked prefill.")]
GenerationBatch = Annotated[Optional[int], typer.Option(
    "--generation-batch", min=1, help="Prompts generated together (default: 8 on CPU, from free memory on GPU, at most 64).")]
Kernels = Annotated[str, typer.Option(
    "--kernels", help="auto (whatever transformers bound, fla on GPU) or torch (force the Gated-DeltaNet torch fallback).")]
# temperature > 0 (sampling.py): the same five options on run, doctor and track
Temperature = Annotated[float, typer.Option(
    "--temperature", help="Sampling temperature; > 0: the offline estimate (default mode) or, with --mode live (run), "
                          "z-lab's loop with rejection sampling.")]
TopP = Annotated[float, typer.Option("--top-p", help="Nucleus sampling at temperature > 0 (z-lab's rule), target and drafter.")]
TopK = Annotated[int, typer.Option("--top-k", help="Top-k at temperature > 0 (0: off), target and drafter.")]
DraftPolicy = Annotated[str, typer.Option(
    "--draft-policy", help="At temperature > 0: sample (drafts drawn from the drafter, z-lab 0.1.0) or argmax (its "
                           "greedy tokens, accepted with probability p); run also takes both.")]
Samples = Annotated[int, typer.Option(
    "--samples", min=1, help="At temperature > 0: samples per prompt (each seeded from --seed, the prompt and k).")]


def shared_settings(*, target, prompts, limit, seed, max_new_tokens, thinking, device, dtype, cache_dir,
                    semantics) -> dict[str, Any]:
    """The bundle's values as RunOptions fields, with the run defaults applied."""
    from ..core.options import RunOptions, default_cache_dir

    return dict(target=target, prompts=prompts or "demo", limit=limit, prompt_seed=seed, seed=seed or 0,
                max_new_tokens=max_new_tokens or RunOptions.max_new_tokens, thinking=thinking, device=device,
                dtype=dtype, cache_dir=cache_dir or default_cache_dir(), semantics=list(semantics))
