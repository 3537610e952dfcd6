"""`RunSettings`: every setting of a run (and of doctor and track), made of the sections (core/settings/
sections.py says what a section owns), with no flat field: a stage reads the section it uses
(`settings.serving.for_block(B, name)`, `settings.breakdown.edges`), parsed and checked once.

`check()` runs every rule: each section's own and the ones between sections (a sampled run with --responses,
--numerics-check beside sampling...), before any folder is touched or model loaded (pipeline/preflight.py
calls it before torch is imported). `scoring` is the one value the engine, doctor's variants and trained-taps
replay with, so that none of them can forget --final-block.

Library callers keep the flat keywords (`RunOptions(drafters=[...], out=..., target=..., draft_lengths="3,7")`:
each keyword goes to the section that declares it).
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InputError
from .execution import Doctor, Explanation, Numerics, Placement, Replay
from .inputs import Drafters, InputSettings, ServingTarget
from .output import Output, default_cache_dir  # noqa: F401  (default_cache_dir: where continuations are cached)
from .sections import Section
from .work import Batching, Breakdown, LongContext, Sampling, Serving, Trees


def is_long_source(source: str) -> bool:
    """repo:PATH and stdlib: prompts packed from source files to --context-tokens (pipeline/long_prompts.py)."""
    return source == "stdlib" or source.startswith("repo:")


@dataclass(frozen=True)
class Scoring:
    """How every walk is replayed, the one value the engine (model/engine.replay), the live loop, the offline
    estimate, doctor's variants and trained-taps take: the generation cap, z-lab's shorter final block near
    the cap or vLLM's full one (--final-block; a drafter under vLLM's rules drafts full blocks whatever it
    says: core/semantics.shorter_final_block) and the anchors per drafter forward (None: core/batching.py's
    rule; memory and time only)."""

    max_new_tokens: int
    final_block: str = "shorter"
    anchor_batch: int | None = None

    @property
    def shorter_final_block(self) -> bool:
        return self.final_block == "shorter"


@dataclass(frozen=True)
class RunSettings:
    """The settings of a run, one section per idea; frozen (a stage that needs another value makes a new one:
    `dataclasses.replace(settings.sampling, draft_policy=...)`)."""

    drafters: Drafters = Drafters()
    inputs: InputSettings = InputSettings()
    second_target: ServingTarget = ServingTarget()
    output: Output = Output()
    replay: Replay = Replay()
    placement: Placement = Placement()
    batching: Batching = Batching()
    sampling: Sampling = Sampling()
    serving: Serving = Serving()
    breakdown: Breakdown = Breakdown()
    long_context: LongContext = LongContext()
    trees: Trees = Trees()
    numerics: Numerics = Numerics()
    explanation: Explanation = Explanation()
    doctor: Doctor = Doctor()

    @classmethod
    def sections(cls) -> dict[type[Section], str]:
        """Each section's class -> its name here (the `takes` decorator of cli/options.py files them)."""
        named: dict[type[Section], str] = {}
        for f in dataclasses.fields(cls):
            assert isinstance(f.default, Section), f"RunSettings.{f.name} has no section as its default"
            named[type(f.default)] = f.name
        return named

    @classmethod
    def flat(cls, **values: Any) -> "RunSettings":
        """The settings from flat keywords, each given to the section that declares it (`RunOptions`)."""
        owner = {f.name: name for section, name in cls.sections().items()
                 for f in dataclasses.fields(section)}  # type: ignore[arg-type]
        unknown = sorted(set(values) - set(owner))
        if unknown:
            raise TypeError(f"RunSettings has no setting {unknown[0]!r}")
        parts: dict[str, dict[str, Any]] = {}
        for key, value in values.items():
            parts.setdefault(owner[key], {})[key] = value
        built = {}
        for section, name in cls.sections().items():
            given = parts.get(name, {})
            if name == "drafters" and "drafters" in given:
                given = {**given, "drafters": tuple(given["drafters"])}
            if name == "inputs":  # what was given (doctor --out RUN takes the run's setting for the others)
                given = {**given, "semantics": tuple(given.get("semantics", ())),
                         "given": frozenset(k for k, v in given.items() if k != "semantics" or v)}
            if name == "output" and "argv" in given:
                given = {**given, "argv": tuple(given["argv"])}
            built[name] = section(**given)
        return cls(**built)  # type: ignore[arg-type]  # each name holds its own section (sections()); mypy sees one type

    def with_sections(self, *sections: Section) -> "RunSettings":
        """These settings with some sections replaced (each by its class)."""
        names = self.sections()
        # (the ignore: each name gets its own section's class (sections()); mypy sees the base Section)
        return dataclasses.replace(self, **{names[type(s)]: s for s in sections})  # type: ignore[arg-type]

    # ---------------------------------------------------------------------------------------- what stages read

    @property
    def scoring(self) -> Scoring:
        return Scoring(self.inputs.max_new_tokens, self.replay.final_block, self.batching.anchor_batch)

    @property
    def seed(self) -> int:
        """The seed of the bootstrap, the permutation tests and the sampling generators: --seed, else 0."""
        return self.inputs.bootstrap_seed

    @property
    def out(self) -> Path:
        return Path(self.output.out) if self.output.out is not None else Path(".")

    @property
    def sampled(self) -> bool:
        return self.sampling.temperature > 0

    @property
    def estimate(self) -> bool:
        """temperature > 0 offline: every number is the estimate of core/estimates.py."""
        return self.sampled and self.replay.mode == "trajectory"

    def explains_gap(self) -> bool:
        """`run --reference` explains its gap (commands/explain.py): a reference, a drafter to compare with it,
        --explain (the default), and a greedy replay to replay the variants in (not --mode live, not
        temperature > 0)."""
        return (bool(self.drafters.reference) and bool(self.drafters.drafters) and self.explanation.explain
                and self.replay.mode == "trajectory" and self.sampling.temperature <= 0
                and self.sampling.draft_policy != "both")

    # ------------------------------------------------------------------------------------------------ checks

    def check(self) -> None:
        """Every rule, each section's own then those between sections, refused by the flag's name before
        anything is read, written or loaded. Whether a device exists, a file is there or a prompt fits is the
        machine's and the data's to say (pipeline/inputs.prepare_inputs)."""
        self.replay.check()
        self.sampling.check()
        self.output.check()
        self.trees.check_with(self.sampling.temperature, self.replay.mode)  # --tree-budgets
        self.placement.check()
        self.breakdown.check()
        self.inputs.check()
        temperature, inputs = self.sampling.temperature, self.inputs
        if temperature > 0 and inputs.responses is not None:
            raise InputError(None, "--responses are fixed continuations; they cannot be combined with --temperature > 0")
        self.second_target.check()  # --serving-target: a model folder or a .gguf, and what it combines with
        refused = self.second_target.refusal(temperature=temperature, mode=self.replay.mode,
                                             shard=self.placement.shard, responses=inputs.responses)
        if refused:
            raise InputError(None, refused)
        engines = [v for v in inputs.semantics if v.rpartition("=")[2] in ("sglang", "llamacpp")]
        if engines and temperature > 0:  # core/engine_rules.py: greedy serving only
            raise InputError(None, f"--semantics {engines[0]}: that engine's verification at temperature > 0 is not "
                                   "modelled (greedy only)")
        self.serving.check()  # the syntax; each drafter's range when its block is known (Serving.for_block)
        if self.serving.draft_lengths is not None and temperature > 0 and self.replay.mode == "trajectory":
            raise InputError(None, "--draft-lengths at temperature > 0 needs --mode live (the offline estimate is "
                                   "not replayed per draft length)")
        self._check_numerics()
        self._check_long_context()

    def _check_numerics(self) -> None:
        """--numerics-check compares greedy replays, generated continuations and the live loop: refused by name
        where one of them does not exist."""
        count = self.numerics.numerics_check
        if count < 0:
            raise InputError(None, f"--numerics-check must be 0 or more (got {count})")
        if not count:
            return
        if self.sampling.temperature > 0:
            raise InputError(None, "--numerics-check measures greedy decoding: it runs at --temperature 0")
        if self.replay.mode != "trajectory":
            raise InputError(None, "--numerics-check compares the replay with the live loop: it runs with --mode trajectory")
        if self.inputs.responses is not None:
            raise InputError(None, "--numerics-check compares generated continuations: it does not run with --responses")

    def _check_long_context(self) -> None:
        """--context-tokens and --max-context truncate pack repo:/stdlib prompts only."""
        self.long_context.check()
        if is_long_source(self.inputs.prompts):
            return
        if self.long_context.context_tokens is not None:
            raise InputError(None, "--context-tokens packs repo:PATH or stdlib prompts; other prompt sets are used "
                                   "as they are")
        if self.long_context.max_context == "truncate":
            raise InputError(None, "--max-context truncate shortens repo:PATH and stdlib prompts only (a chat "
                                   "prompt cut anywhere would not be the prompt any more); use refuse")

    # ------------------------------------------------------------------------------------------ read back

    @classmethod
    def from_provenance(cls, provenance: dict[str, Any], *, out: Path, seed: int | None,
                        depth_edges: list[int] | None = None) -> "RunSettings":
        """The settings a finished run recorded, read back (merge: what the shards ran with), as settings a
        document builder takes: mode, seed, sampling, depth buckets, draft lengths, max_new_tokens."""
        return cls(inputs=InputSettings(seed=seed,
                                        max_new_tokens=provenance.get("max_new_tokens", InputSettings.max_new_tokens)),
                   output=Output(out=out), replay=Replay(mode=provenance["mode"]),
                   sampling=Sampling.from_provenance(provenance), breakdown=Breakdown.from_edges(depth_edges),
                   serving=Serving.from_provenance(provenance), trees=Trees.from_provenance(provenance))


def RunOptions(**values: Any) -> RunSettings:
    """`RunSettings` from flat keywords, for notebooks and scripts (docs/library.md):
    `RunOptions(drafters=["ckpt"], out=Path("runs/a"), target="Qwen/Qwen3-8B", prompts="humaneval")`. Each
    keyword goes to the section that declares it; the command line recorded is this process's (sys.argv)."""
    values.setdefault("argv", tuple(sys.argv))
    return RunSettings.flat(**values)
