"""`RunOptions`: every setting of a run (and of doctor), plus the progress callbacks the stages report to.

The settings that shape the work are declared in sections (core/options_work.py: batching, sampling,
serving, breakdown, long contexts; core/sections.py says what a section owns): their defaults here are the
sections' defaults, and a stage reads the section it uses (`options.serving.for_block(B, name)`,
`options.breakdown.edges`), parsed and checked once, never the raw string. Library callers keep the flat
keyword arguments (`RunOptions(drafters=[...], out=..., draft_lengths="3,7")`)."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from .options_inputs import MAX_NEW_TOKENS, PROMPTS, InputSettings, ServingTarget
from .options_output import Output
from .options_run import Explanation, Numerics, Placement, Replay
from .options_work import Batching, Breakdown, LongContext, Sampling, Serving, Trees

_B, _S, _V, _D, _L, _T = Batching(), Sampling(), Serving(), Breakdown(), LongContext(), Trees()
_R, _P = Replay(), Placement()


def default_cache_dir() -> Path:
    base = os.environ.get("DFLASH_EVAL_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "dflash-eval")
    return Path(base)


@dataclass(frozen=True)
class RunOptions:
    drafters: list[str]  # "PATH" or "PATH:NAME"
    out: Path
    target: str | None = None
    reference: str | None = None  # "z-lab" or a checkpoint path
    prompts: str = PROMPTS
    limit: int | None = None
    prompt_seed: int | None = None  # with limit: a seeded random subset instead of the first N
    prompt_field: str | None = None  # --prompts hf:REPO: the column holding the prompt (pipeline/hf_prompts.py)
    max_new_tokens: int = MAX_NEW_TOKENS
    thinking: bool | None = None  # None: the family default (on for Qwen3.5/3.6 and Qwen3-Next)
    mode: str = _R.mode  # or "live"
    final_block: str = _R.final_block  # z-lab; "full" = vLLM
    anchor_batch: int | None = _B.anchor_batch
    tap_chunk: int = _B.tap_chunk  # target positions per forward of the tap pass (longer sequences: chunked prefill)
    generation_batch: int | None = _B.generation_batch
    device: str = _P.device
    dtype: str = _P.dtype
    cache_dir: Path | None = field(default_factory=default_cache_dir)
    responses: Path | None = None
    kernels: str = _R.kernels  # "torch": route Gated-DeltaNet ops to the torch fallback even when fla is bound
    seed: int = 0
    argv: list[str] = field(default_factory=lambda: list(sys.argv))
    # attention/scale rules: [] = each checkpoint's format decides; "RULES" for every drafter, or
    # "NAME=RULES" for one (RULES: zlab, speculators, vllm, sglang, llamacpp, deepspec; see semantics.py)
    semantics: list[str] = field(default_factory=list)
    overwrite: bool = False  # replace a run folder dflash-eval wrote (never a foreign folder)
    # temperature > 0 (sampling.py): z-lab's processing of the distributions, the draft policy, and K
    # samples per prompt (each with its own generator, seeded from --seed, the prompt id and k)
    temperature: float = _S.temperature
    top_p: float = _S.top_p
    top_k: int = _S.top_k
    draft_policy: str = _S.draft_policy
    samples: int = _S.samples
    device_map: str | None = _P.device_map  # "auto", "balanced", "sequential": one target split over devices (accelerate)
    max_memory: str | None = _P.max_memory  # with device_map: "0=70GiB,1=70GiB,cpu=200GiB"
    shard: str | None = _P.shard  # "I/N": this process evaluates shard I of N of the prompts (merge joins them)
    context_variants: bool = True  # doctor: also thinking flipped and the raw prompt (one more pass each)
    dist_timeout: float = _P.dist_timeout  # torchrun: seconds a rank waits for the others (the slowest shard)
    # serving decision (speedup.py): "3,7,15" or "all": each drafter also replayed with a block of k + 1 for
    # each k; step times for the expected speedup from a roofline accelerator or a JSON file (live: measured)
    draft_lengths: str | None = _V.draft_lengths
    accelerator: str | None = _V.accelerator
    step_times: Path | None = _V.step_times
    # where acceptance is lost (breakdown.py): depth bucket edges "0,512,2048" (default 1K..32K); the drafter
    # sees only the last W context rows, as SGLang's --speculative-draft-window-size serves it
    depth_buckets: str | None = _D.depth_buckets
    draft_window: int | None = _D.draft_window
    # long contexts (pipeline/long_prompts.py): repo:PATH / stdlib prompts of N tokens; "refuse" or "truncate"
    # prompts that would pass the target's positions
    context_tokens: int | None = _L.context_tokens
    max_context: str = _L.max_context
    # DDTree's tree at each budget, scored offline from the chain's drafter pass (core/tree.py): "16,32" or "ddtree"
    tree_budgets: str | None = _T.tree_budgets
    # `run --numerics-check N` (pipeline/numerics.py): on the first N prompts, how far generation batches, anchors
    # per drafter forward and replay vs live move the results (bf16); recorded, never changes the run's numbers
    numerics_check: int = Numerics.numerics_check
    # `run --reference`: the gap explained by doctor's variants on the same trajectories (commands/explain.py)
    explain: bool = Explanation.explain
    # `doctor --trained-taps DATA` (commands/doctor_trained_taps.py): the training run's hidden-state data folder
    trained_taps: Path | None = None
    # `--serving-target PATH` (commands/serving_target.py): the copy the drafters are served with
    serving_target: str | None = ServingTarget.serving_target

    # the sections the stages read (core/options_*.py), built once from the fields above
    @cached_property
    def inputs(self) -> InputSettings:
        """--seed as given (prompt_seed: the subset's; `seed` is the bootstrap's, 0 without)."""
        return InputSettings.pick({**self.__dict__, "seed": self.prompt_seed, "semantics": tuple(self.semantics)})

    @cached_property
    def second_target(self) -> ServingTarget:
        return ServingTarget.pick(self.__dict__)

    @cached_property
    def output(self) -> Output:
        return Output.pick(self.__dict__)

    @cached_property
    def numerics(self) -> Numerics:
        return Numerics.pick(self.__dict__)

    @cached_property
    def explanation(self) -> Explanation:
        return Explanation.pick(self.__dict__)

    @cached_property
    def replay(self) -> Replay:
        return Replay.pick(self.__dict__)

    @cached_property
    def placement(self) -> Placement:
        return Placement.pick(self.__dict__)

    @cached_property
    def batching(self) -> Batching:
        return Batching.pick(self.__dict__)

    @cached_property
    def sampling(self) -> Sampling:
        return Sampling.pick(self.__dict__)

    @cached_property
    def serving(self) -> Serving:
        return Serving.pick(self.__dict__)

    @cached_property
    def breakdown(self) -> Breakdown:
        return Breakdown.pick(self.__dict__)

    @cached_property
    def long_context(self) -> LongContext:
        return LongContext.pick(self.__dict__)

    @cached_property
    def trees(self) -> Trees:
        return Trees.pick(self.__dict__)

    def explains_gap(self) -> bool:
        """`run --reference` explains its gap (commands/explain.py): a reference, a drafter to compare with it,
        --explain (the default), and a greedy replay to replay the variants in (not --mode live, not
        temperature > 0)."""
        return (bool(self.reference) and bool(self.drafters) and self.explain and self.mode == "trajectory" and self.temperature <= 0
                and self.draft_policy != "both")

    @classmethod
    def from_provenance(cls, provenance: dict[str, Any], *, out: Path, seed: int,
                        depth_edges: list[int] | None = None) -> "RunOptions":
        """The settings a finished run recorded, read back (merge: what the shards ran with), as options a
        document builder takes: mode, seed, sampling, depth buckets, draft lengths, max_new_tokens."""
        sampling = Sampling.from_provenance(provenance)
        return cls(drafters=[], out=out, seed=seed, mode=provenance["mode"],
                   max_new_tokens=provenance.get("max_new_tokens", cls.max_new_tokens),
                   temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k,
                   draft_policy=sampling.draft_policy, samples=sampling.samples,
                   depth_buckets=Breakdown.from_edges(depth_edges).depth_buckets,
                   draft_lengths=Serving.from_provenance(provenance).draft_lengths,
                   tree_budgets=Trees.from_provenance(provenance).tree_budgets, argv=[])


def pause_after_prompt() -> None:
    """Test hook: `DFLASH_EVAL_SLOW_PROMPTS=S` sleeps S seconds after each prompt of run and track, leaving
    the resume tests time to kill the process between prompts. Unset, it does nothing."""
    seconds = float(os.environ.get("DFLASH_EVAL_SLOW_PROMPTS", "0") or 0)
    if seconds:
        import time

        time.sleep(seconds)


class Reporter:
    """Progress callbacks (no-ops here; the CLI draws Rich progress bars)."""

    def phase(self, name: str, total: int) -> None: ...

    def advance(self, name: str, detail: str = "") -> None: ...

    def note(self, message: str) -> None: ...
