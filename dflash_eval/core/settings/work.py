"""The sections of the settings that shape the work of a run (core/settings/sections.py): batching, sampling,
serving (draft lengths and step times), breakdown (depth buckets, draft window), long contexts and trees.

Each section is declared once here; `RunOptions` (core/settings/run_settings.py) holds the values and hands each stage the
section it reads (`options.serving.for_block(B, name)`, `options.breakdown.edges`), and every command's Typer
signature is built from the same `Flag`s (cli/options.py), so a flag's name, default and help cannot differ
between `run`, `track`, `doctor` and `plan`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Optional

from ..errors import InputError
from .sections import Section, setting

BATCHING = "Batching (memory and speed, never the numbers)"
SAMPLING = "Sampling (temperature > 0)"
SERVING = "Serving decision (draft lengths, expected speedup)"
BREAKDOWN = "Where acceptance is lost"
LONG_CONTEXT = "Long contexts"

TAP_CHUNK = 4096  # target positions per forward of the tap pass: the one default (run, track, plan, RunOptions)


@dataclass(frozen=True)
class Batching(Section):
    """How the work is cut into forwards; None: the rule (core/batching.py for anchors, the exact cache bytes
    for generation). Changes memory and time only (bf16 shapes aside: `run --numerics-check`)."""

    anchor_batch: Optional[int] = None
    tap_chunk: int = TAP_CHUNK
    generation_batch: Optional[int] = None

    FLAGS = (
        setting("anchor_batch", "--anchor-batch", Optional[int], None,
                "Anchors per drafter forward (default: from the shapes and the device kind, never the free memory: "
                "core/batching.py, docs/performance.md).", BATCHING, minimum=1),
        setting("tap_chunk", "--tap-chunk", int, TAP_CHUNK,
                "Target positions per forward of the tap pass; longer sequences run as a chunked prefill.",
                BATCHING, minimum=1),
        setting("generation_batch", "--generation-batch", Optional[int], None,
                "Prompts generated together (default: 8 on CPU; on GPU from the total memory and the exact cache "
                "bytes, at most 64; batches planned over the run's prompts, after --limit).", BATCHING, minimum=1),
    )


DRAFT_POLICIES = ("sample", "argmax")  # --draft-policy both: each drafter under each (pipeline/inputs.py)
MAX_SAMPLES = 1024  # sampled continuations per prompt: far past where a prompt-level interval stops narrowing
MIN_TEMPERATURE = 1e-30  # float32 logits / temperature stay finite for |logit| < 3e8 (1e-45: inf, then NaN)


@dataclass(frozen=True)
class Sampling(Section):
    """temperature > 0 (model/sampling.py draws with it): z-lab's processing of the distributions, the draft
    policy and K samples per prompt (each with its own generator, seeded from --seed, the prompt id and k).
    The one sampling value: the live loop, the offline estimate and the documents read this."""

    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    draft_policy: str = "sample"
    samples: int = 1

    FLAGS = (
        setting("temperature", "--temperature", float, 0.0,
                "Sampling temperature; > 0: the offline estimate (default mode) or, with --mode live, z-lab's loop "
                "with rejection sampling.", SAMPLING, number=(0, None, False)),
        setting("top_p", "--top-p", float, 1.0,
                "Nucleus sampling at temperature > 0 (z-lab's rule), target and drafter.", SAMPLING,
                number=(0, 1, True)),
        setting("top_k", "--top-k", int, 0, "Top-k at temperature > 0 (0: off), target and drafter.", SAMPLING,
                minimum=0),
        setting("draft_policy", "--draft-policy", str, "sample",
                "At temperature > 0: sample (drafts drawn from the drafter, z-lab 0.1.0), argmax (its greedy tokens, "
                "accepted with probability p) or both (each drafter under each).", SAMPLING),
        setting("samples", "--samples", int, 1,
                "At temperature > 0: samples per prompt (each seeded from --seed, the prompt and k).", SAMPLING,
                minimum=1),
    )
    # track and doctor evaluate offline only: the same flags, help without the live loop and "both"
    OFFLINE_HELP = {
        "temperature": "Sampling temperature; > 0: the offline estimate (acceptance teacher-forced on sampled "
                       "continuations).",
        "draft_policy": "At temperature > 0: sample (drafts drawn from the drafter, z-lab 0.1.0) or argmax (its "
                        "greedy tokens, accepted with probability p).",
    }

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0

    def check(self) -> None:
        """Every rule of the sampling flags, in one place: z-lab's `_validate_sampling`, the policy name, and the
        numbers that are finite but unusable (NaN compares false everywhere: it ran greedy and wrote NaN into
        run.json; inf flattens every distribution; a denormal temperature overflows the logits)."""
        t = self.temperature
        if not math.isfinite(t):
            raise InputError(None, f"--temperature must be a finite number (got {t})")
        if 0 < t < MIN_TEMPERATURE:
            raise InputError(None, f"--temperature {t:g} is below {MIN_TEMPERATURE:g}, where logits / temperature "
                                   "overflow; use --temperature 0 for greedy decoding")
        if not math.isfinite(self.top_p):
            raise InputError(None, f"--top-p must be a finite number in (0, 1] (got {self.top_p})")
        if t < 0:
            raise InputError(None, f"--temperature must be >= 0 (got {t:g})")
        if not 0 < self.top_p <= 1:
            raise InputError(None, f"--top-p must be in (0, 1] (got {self.top_p:g})")
        if self.top_k < 0:
            raise InputError(None, f"--top-k must be >= 0 (got {self.top_k})")
        if self.draft_policy not in (*DRAFT_POLICIES, "both"):
            raise InputError(None, f"unknown --draft-policy {self.draft_policy!r} (sample, argmax or both)")
        if not 1 <= self.samples <= MAX_SAMPLES:
            raise InputError(None, f"--samples must be 1 to {MAX_SAMPLES} (got {self.samples})")
        if t <= 0 and self.samples > 1:
            raise InputError(None, "--samples > 1 needs --temperature > 0 (greedy decoding is deterministic)")
        if self.draft_policy == "both" and t <= 0:
            raise InputError(None, "--draft-policy both compares the policies at temperature > 0; give --temperature")

    def to_dict(self) -> dict[str, Any]:
        """The distribution's processing and the policy (run.json's `sampling` adds the samples and the seed)."""
        return {"temperature": self.temperature, "top_p": self.top_p, "top_k": self.top_k,
                "draft_policy": self.draft_policy}

    def provenance(self) -> dict[str, Any]:
        """run.json's `sampling` (with the samples count; seed added by the document)."""
        return {**self.to_dict(), "samples": self.samples}

    @classmethod
    def from_provenance(cls, recorded: dict[str, Any]) -> "Sampling":
        """From run.json's provenance (`temperature` at its top level, the rest under `sampling`, None when
        greedy) or from `provenance()` itself (all at one level)."""
        sampling = (recorded.get("sampling") if "sampling" in recorded else recorded) or {}
        return cls(temperature=recorded.get("temperature") or 0.0, top_p=sampling.get("top_p", 1.0),
                   top_k=sampling.get("top_k", 0), draft_policy=sampling.get("draft_policy", "sample"),
                   samples=sampling.get("samples", 1))


@dataclass(frozen=True)
class Serving(Section):
    """The serving decision (core/speedup.py): draft lengths k each drafter is also replayed at, and the step
    times of the expected speedup (a roofline accelerator or a JSON file; live mode: measured)."""

    draft_lengths: Optional[str] = None
    accelerator: Optional[str] = None
    step_times: Optional[Path] = None

    FLAGS = (
        setting("draft_lengths", "--draft-lengths", Optional[str], None,
                "3,7,15 or all: also replay each drafter with a block of k + 1 (what a server with "
                "num_speculative_tokens = k runs), one tap pass for all; tau and every metric per k.", SERVING),
        setting("accelerator", "--accelerator", Optional[str], None,
                "Expected speedup from the roofline model of the target's and drafter's configs on this "
                "accelerator (`dflash-eval plan` lists them).", SERVING),
        setting("step_times", "--step-times", Optional[Path], None,
                "Expected speedup from your step times (JSON: {\"label\", \"target\": [{\"batch\", \"tokens\", "
                "\"seconds\"}], \"drafter\": [...]}, e.g. from `vllm bench forward`).", SERVING),
    )

    @cached_property
    def requested(self) -> tuple[int, ...] | str | None:
        """--draft-lengths parsed once: None (not given), "all", or the sorted distinct k (range unchecked:
        that depends on each drafter's block, `for_block`)."""
        if self.draft_lengths is None:
            return None
        spec = self.draft_lengths.strip().lower()
        if spec == "all":
            return "all"
        values = []
        for part in spec.split(","):
            part = part.strip()
            if not part.isdigit():
                raise InputError(None, f"--draft-lengths {self.draft_lengths!r}: expected 'all' or k,k,... (positive "
                                       f"integers), got {part!r}")
            values.append(int(part))
        return tuple(values)

    def for_block(self, block_size: int, name: str = "") -> tuple[int, ...]:
        """The draft lengths k (1 <= k <= B - 1) of a drafter with blocks of B; () without --draft-lengths.
        k past B - 1 is refused by name: the drafter was trained to fill B - 1 slots, and nothing says what a
        longer block means for it."""
        asked = self.requested
        if asked is None:
            return ()
        if isinstance(asked, str):  # "all", the one word `requested` returns
            return tuple(range(1, block_size))
        who = f" (drafter {name}, block size {block_size})" if name else f" (block size {block_size})"
        bad = [k for k in asked if not 1 <= k <= block_size - 1]
        if bad:
            past = ("; past the trained block every position collapses (vllm-project/vllm #41834)"
                    if bad[0] > block_size - 1 else "")
            raise InputError(None, f"--draft-lengths {self.draft_lengths!r}: k = {bad[0]} outside "
                                   f"1..{block_size - 1}{who}{past}")
        return tuple(sorted(set(asked)))

    def shorter(self, block_size: int, name: str = "") -> tuple[int, ...]:
        """The draft lengths k < B - 1 a drafter is replayed at besides its own block (B - 1 is its run)."""
        return tuple(k for k in self.for_block(block_size, name) if k < block_size - 1)

    def check(self) -> None:
        _ = self.requested  # the syntax; each drafter's range when its block is known (for_block)
        if self.accelerator is not None and self.step_times is not None:
            raise InputError(None, "give --accelerator (roofline step times) or --step-times FILE, not both")

    def provenance(self) -> dict[str, Any]:
        """What run.json's settings record: the draft lengths, only when given (a run without keeps its digest)."""
        return {"draft_lengths": self.draft_lengths} if self.draft_lengths is not None else {}

    @classmethod
    def from_provenance(cls, recorded: dict[str, Any]) -> "Serving":
        return cls(draft_lengths=recorded.get("draft_lengths"))


@dataclass(frozen=True)
class Breakdown(Section):
    """Where acceptance is lost (core/breakdown.py): depth buckets every metric is also split by, and the
    serving window (the drafter sees only the last W context rows, model/masks.py)."""

    depth_buckets: Optional[str] = None
    draft_window: Optional[int] = None

    FLAGS = (
        setting("depth_buckets", "--depth-buckets", Optional[str], None,
                "Edges of the context-depth buckets every metric is also split by, in tokens of the anchor's "
                "position: 0,512,2048,... (K = 1024; default 1K,2K,4K,8K,16K,32K).", BREAKDOWN),
        setting("draft_window", "--draft-window", Optional[int], None,
                "The drafter sees only the last W context rows before each anchor, on every layer, as SGLang's "
                "--speculative-draft-window-size serves it.", BREAKDOWN, minimum=1),
    )
    # doctor: the window is a variant beside the drafter's own configuration, not how it is run
    DOCTOR_HELP = {
        "draft_window": "Also evaluate the drafter served with only the last W context rows on every layer "
                        "(SGLang's --speculative-draft-window-size), by depth beside its configuration; the "
                        "configuration itself is not windowed.",
    }

    @cached_property
    def edges(self) -> tuple[int, ...]:
        """--depth-buckets parsed once: the inner edges (default DEFAULT_DEPTH_EDGES); InputError naming it."""
        from ..breakdown import parse_depth_buckets

        try:
            return parse_depth_buckets(self.depth_buckets)
        except ValueError as exc:
            raise InputError(None, f"--depth-buckets {self.depth_buckets!r}: {exc}") from None

    def check(self) -> None:
        _ = self.edges
        window = self.draft_window
        if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window < 1):
            raise InputError(None, f"--draft-window must be a whole number of context rows >= 1 (got {window!r})")

    @classmethod
    def from_edges(cls, edges: list[int] | tuple[int, ...] | None) -> "Breakdown":
        """From the edges a run recorded (merge: the shards' `depth_edges`)."""
        return cls(depth_buckets=",".join(map(str, edges)) if edges else None)


MAX_CONTEXT = ("refuse", "truncate")


@dataclass(frozen=True)
class LongContext(Section):
    """Long contexts (pipeline/long_prompts.py): repo:PATH / stdlib prompts packed to N tokens, and what to do
    with a prompt that would pass the target's positions."""

    context_tokens: Optional[int] = None
    max_context: str = "refuse"

    DEFAULT_TOKENS: Any = 8192  # what a repo:/stdlib prompt is packed to without --context-tokens

    FLAGS = (
        setting("context_tokens", "--context-tokens", Optional[int], None,
                "With --prompts repo:PATH or stdlib: tokens of each packed prompt (default 8192).", LONG_CONTEXT,
                minimum=64),
        setting("max_context", "--max-context", str, "refuse",
                "A prompt + --max-new-tokens past the target's positions: refuse (by name) or truncate "
                "(repo:/stdlib prompts packed shorter, with a warning).", LONG_CONTEXT),
    )

    @property
    def tokens(self) -> int:
        return self.context_tokens or self.DEFAULT_TOKENS

    def check(self) -> None:
        """--max-context names one of its two rules; --context-tokens leaves room for whole lines (which
        sources it packs: RunSettings.check)."""
        if self.max_context not in MAX_CONTEXT:
            raise InputError(None, f"unknown --max-context {self.max_context!r} (refuse or truncate)")
        if self.context_tokens is not None and int(self.context_tokens) < 64:
            raise InputError(None, f"--context-tokens {self.context_tokens}: too few for a prompt of whole lines "
                                   "(at least 64)")

    def provenance(self) -> dict[str, Any]:
        """run.json's prompts entry for packed prompts."""
        return {"context_tokens": self.tokens, "max_context": self.max_context}

    @classmethod
    def from_provenance(cls, recorded: dict[str, Any]) -> "LongContext":
        return cls(context_tokens=recorded.get("context_tokens"), max_context=recorded.get("max_context", "refuse"))


TREES = "Tree verification (DDTree, temperature 0)"


@dataclass(frozen=True)
class Trees(Section):
    """Tree verification (core/tree.py): DDTree's best-first tree at each budget, walked offline from the chain's
    own drafter pass, beside the chain. Offline at temperature 0 only (refused by name otherwise)."""

    tree_budgets: Optional[str] = None

    FLAGS = (
        setting("tree_budgets", "--tree-budgets", Optional[str], None,
                "16,32,64,... or ddtree (16..1024): also score each drafter under DDTree's tree verification with "
                "this many drafted nodes per tree (the root not counted), every budget from the chain's own drafter "
                "pass; tau per budget beside the chain, recall by depth, why steps stop (docs/trees.md).", TREES),
    )

    @cached_property
    def budgets(self) -> tuple[int, ...]:
        """--tree-budgets parsed once: sorted distinct budgets, () without it (core/tree.parse_budgets)."""
        from ..tree import parse_budgets

        return parse_budgets(self.tree_budgets)

    def check(self) -> None:
        _ = self.budgets

    def check_with(self, temperature: float, mode: str) -> None:
        """What the trees need of the other settings: temperature 0 (DDTree's sampled tree acceptance is not
        implemented here) and the offline replay (there is no live tree loop in run)."""
        if not self.budgets:
            return
        if temperature > 0:
            raise InputError(None, "--tree-budgets at temperature > 0 is not implemented (DDTree's sampled "
                                   "verification rule is not reproduced exactly yet); use --temperature 0")
        if mode != "trajectory":
            raise InputError(None, "--tree-budgets scores trees offline from the replay; --mode live runs chains "
                                   "only (use --mode trajectory)")

    def provenance(self) -> dict[str, Any]:
        """What run.json's settings record: the budgets, only when given (a run without keeps its digest)."""
        return {"tree_budgets": self.tree_budgets} if self.tree_budgets is not None else {}

    @classmethod
    def from_provenance(cls, recorded: dict[str, Any]) -> "Trees":
        return cls(tree_budgets=recorded.get("tree_budgets"))


WORK_SECTIONS = (Batching, Sampling, Serving, Breakdown, LongContext, Trees)
