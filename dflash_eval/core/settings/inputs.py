"""The section of what a run evaluates on (core/settings/sections.py): the target, the prompts (and the column of an
hf: dataset), how many of them and which (--limit, --seed), the generation cap, the thinking flag, the
continuations given (--responses) and the attention rules per drafter (--semantics).

Also the drafters and the reference (`Drafters`). The flags default to None ("not given") where the run
default depends on context: doctor --out RUN takes that run's settings, and only then
`InputSettings.given_values` applies the run defaults (demo prompts, 256 tokens), so
run, doctor and track mean the same thing by them. The section's own field defaults are those run defaults."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from ..errors import InputError
from .execution import DRAFTERS, REPLAY  # --semantics is listed with the scoring rules
from .sections import Section, setting
from .seeds import run_seed

INPUTS = "Inputs (target, prompts, generation)"

PROMPTS = "demo"
MAX_NEW_TOKENS = 256

SEMANTICS_HELP = ("Attention and scale rules a drafter is evaluated under: zlab (dflash/model.py), speculators "
                  "(its training mask), vllm, sglang, llamacpp or deepspec (docs/engines.md); RULES for every drafter or "
                  "NAME=RULES for one; repeatable. "
                  "Default: each checkpoint's format decides (`dflash-eval inspect` shows the rule per layer).")


@dataclass(frozen=True)
class Drafters(Section):
    """The drafters a run evaluates (PATH or PATH:NAME each) and the reference it compares them with ('z-lab',
    PATH or PATH:NAME), whose gap `--explain` explains (core/settings/execution.Explanation)."""

    drafters: tuple[str, ...] = ()
    reference: Optional[str] = None

    FLAGS = (
        setting("drafters", ("--drafter", "-d"), list[str], [],
                "Drafter checkpoint, PATH or PATH:NAME; repeat for several.", DRAFTERS),
        setting("reference", "--reference", Optional[str], None,
                "Add a reference drafter: 'z-lab' (published drafter for the target, from the HF cache) or a checkpoint, "
                "PATH or PATH:NAME as --drafter takes it; the gap to it is explained (--no-explain skips that).",
                DRAFTERS),
    )

    @classmethod
    def from_flags(cls, values: dict[str, Any]) -> "Drafters":
        return cls.pick({**values, "drafters": tuple(values.get("drafters") or ())})


@dataclass(frozen=True)
class InputSettings(Section):
    """The run's inputs, with the run defaults applied (`given`): `seed` is the --seed given (None: the first
    N prompts; the bootstrap and the sampling generators then seed with 0, `bootstrap_seed`). `given`: the
    fields a command received a value for (doctor --out RUN takes the run's setting for the others)."""

    target: Optional[str] = None
    prompts: str = PROMPTS
    prompt_field: Optional[str] = None
    limit: Optional[int] = None
    seed: Optional[int] = None
    max_new_tokens: int = MAX_NEW_TOKENS
    thinking: Optional[bool] = None
    responses: Optional[Path] = None
    semantics: tuple[str, ...] = ()
    given: frozenset[str] = field(default=frozenset(), compare=False, repr=False)

    FLAGS = (
        setting("target", ("--target", "-t"), Optional[str], None,
                "Target folder or HF cache name (default: the verifier the drafters record).", INPUTS),
        setting("prompts", ("--prompts", "-p"), Optional[str], None,
                "humaneval, mbpp, demo, FILE.jsonl, dir:PATH; from the Hugging Face cache the paper's "
                "sets (gsm8k, math500, aime24, aime25, livecodebench, swe-bench, mt-bench, alpaca; "
                "paper:NAME for only the paper's rows) or hf:REPO[:CONFIG][:SPLIT]; or long contexts: "
                "repo:PATH (a repository's "
                "files packed into prompts of --context-tokens) or stdlib (the Python standard library's "
                "sources) (`dflash-eval prompts list`; default demo).", INPUTS),
        setting("prompt_field", "--prompt-field", Optional[str], None,
                "With --prompts hf:REPO[:CONFIG][:SPLIT]: the column holding the prompt (a string, a list "
                "of user turns or a list of {role, content} messages; default: prompt, messages, question, "
                "problem, instruction or text, whichever the dataset has).", INPUTS),
        setting("limit", "--limit", Optional[int], None,
                "Only the first N prompts (with --seed: a seeded random N).", INPUTS, minimum=1),
        run_seed(INPUTS),  # core/settings/seeds.py: --seed's run family
        setting("max_new_tokens", "--max-new-tokens", Optional[int], None, "Generation cap (default 256).", INPUTS,
                minimum=1),
        setting("thinking", "--thinking/--no-thinking", Optional[bool], None,
                "Chat template thinking flag (default: off for Qwen3, on for Qwen3.5/3.6/Next).", INPUTS),
        setting("responses", "--responses", Optional[Path], None,
                "JSONL {\"id\", \"response\"}: continuations produced elsewhere (e.g. vLLM).", INPUTS),
        setting("semantics", "--semantics", list[str], [], SEMANTICS_HELP, REPLAY),
    )

    @classmethod
    def given_values(cls, **values: Any) -> "InputSettings":
        """The section from the flags as a command received them (None: not given), the run defaults applied."""
        values = {k: v for k, v in values.items() if v is not None}
        for unset_when_empty in ("prompts", "max_new_tokens"):  # as `prompts or "demo"` always read them
            if not values.get(unset_when_empty, True):
                del values[unset_when_empty]
        values["semantics"] = tuple(values.get("semantics", ()))
        given = frozenset(k for k, v in values.items() if k != "semantics" or v)
        return cls.pick({**values, "given": given})

    @classmethod
    def from_flags(cls, values: dict[str, Any]) -> "InputSettings":
        return cls.given_values(**values)

    @property
    def bootstrap_seed(self) -> int:
        """--seed also seeds the bootstrap and the sampling generators; without it 0."""
        return self.seed or 0

    def provenance(self) -> dict[str, Any]:
        return {name: value for name, value in super().provenance().items() if name != "given"}

    def check(self) -> None:
        """--prompt-field names a column of an hf: dataset; any other source builds its own prompts."""
        if self.prompt_field is not None and not self.prompts.startswith("hf:"):
            raise InputError(None, f"--prompt-field picks the column of an hf:REPO dataset; {self.prompts} builds "
                                   "its own prompts")


SERVING_TARGET_HELP = ("A second copy of the target the drafters are served with (a quantised model folder, or a "
                       ".gguf file read by transformers' GGUF loader): the drop from the target to it, split into the "
                       "target's own disagreement and the drafter's inputs (greedy; docs/run.md).")


@dataclass(frozen=True)
class ServingTarget(Section):
    """`--serving-target PATH` (commands/serving_target.py): the copy the drafters are served with. Checked here:
    a model folder (config.json) or a regular .gguf file, and the `gguf` package for the latter; what it cannot
    be combined with is refused by `refusal`."""

    serving_target: Optional[str] = None

    FLAGS = (setting("serving_target", "--serving-target", Optional[str], None, SERVING_TARGET_HELP, INPUTS),)

    def check(self) -> None:
        if self.serving_target is None:
            return
        path = Path(self.serving_target)
        if str(path).lower().endswith(".gguf"):
            if not path.is_file():
                raise InputError(path, "--serving-target: no such GGUF file")
            import importlib.util

            if importlib.util.find_spec("gguf") is None:
                raise InputError(path, "--serving-target: reading a GGUF needs the gguf package (pip install gguf), "
                                       "which transformers' GGUF loader uses")
        elif not (path / "config.json").is_file():
            raise InputError(path, "--serving-target: not a model folder (no config.json) nor a .gguf file")

    def refusal(self, *, temperature: float, mode: str, shard: str | None, responses: Any) -> str | None:
        """Why --serving-target cannot be combined with the rest of the command (None: it can)."""
        if self.serving_target is None:
            return None
        if temperature > 0:
            return "--serving-target splits a greedy drop (temperature 0): a target verifies its greedy text"
        if mode != "trajectory":
            return "--serving-target replays trajectories: drop --mode live"
        if shard is not None:
            return ("--serving-target splits the drop over all the run's prompts in one process: drop --shard (or "
                    "run without torchrun)")
        if responses is not None:
            return "--serving-target compares the two targets' own continuations: drop --responses"
        return None

    def provenance(self) -> dict[str, Any]:
        """Recorded only when given (a run without it keeps its settings digest)."""
        return {"serving_target": self.serving_target} if self.serving_target else {}


INPUT_SECTIONS = (Drafters, InputSettings, ServingTarget)
