"""The sections of how and where a run executes (core/settings/sections.py): replay (the rules drafts are scored
under), placement (devices, one target over several, shards, torchrun) and the bf16 numerics check. Beside core/settings/work.py,
whose sections shape the work itself; `RunOptions` takes its defaults from both. Also the explanation of a
gap by `run --reference` (commands/explain.py), skipped with --no-explain."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Optional

from ..errors import InputError
from .sections import SECONDS_MAX, Section, setting

REPLAY = "Replay (how drafts are scored)"
PLACEMENT = "Placement (devices, shards)"

MODES = ("trajectory", "live")
FINAL_BLOCKS = ("shorter", "full")
KERNELS = ("auto", "torch")
DEVICE_MAPS = ("auto", "balanced", "balanced_low_0", "sequential")


@dataclass(frozen=True)
class Replay(Section):
    """trajectory (exact offline replay) or live; z-lab's shorter final block or vLLM's full one; the
    Gated-DeltaNet kernels. (--semantics, a repeatable list, stays with the drafters: cli/options.py.)"""

    mode: str = "trajectory"
    final_block: str = "shorter"
    kernels: str = "auto"

    FLAGS = (
        setting("mode", "--mode", str, "trajectory",
                "trajectory (exact offline replay) or live (step-by-step loop).", REPLAY),
        setting("final_block", "--final-block", str, "shorter",
                "shorter (z-lab: min(B, remaining+1) slots near the cap) or full (vLLM). A drafter under "
                "--semantics vllm always drafts full blocks (vLLM's rule; recorded per drafter).", REPLAY),
        setting("kernels", "--kernels", str, "auto",
                "auto (whatever transformers bound, fla on GPU) or torch (force the Gated-DeltaNet torch "
                "fallback).", REPLAY),
    )

    def check(self) -> None:
        if self.mode not in MODES:
            raise InputError(None, f"unknown --mode {self.mode!r} (trajectory or live)")
        if self.final_block not in FINAL_BLOCKS:
            raise InputError(None, f"unknown --final-block {self.final_block!r} (shorter or full)")
        if self.kernels not in KERNELS:
            raise InputError(None, f"unknown --kernels {self.kernels!r} (auto or torch)")


@dataclass(frozen=True)
class Placement(Section):
    """Where the models run: one device (auto: cuda when present), a dtype, or one target split over several
    devices (accelerate's device_map, with a per-device budget); a shard I/N of the prompts; and how long a
    torchrun rank waits for the others."""

    device: str = "auto"
    dtype: str = "auto"
    device_map: Optional[str] = None
    max_memory: Optional[str] = None
    shard: Optional[str] = None
    dist_timeout: float = 6 * 3600.0

    FLAGS = (
        setting("device", "--device", str, "auto", "auto, cpu, cuda or cuda:N.", PLACEMENT),
        setting("dtype", "--dtype", str, "auto", "auto (bf16 on GPU, fp32 on CPU), bfloat16 or float32.", PLACEMENT),
        setting("device_map", "--device-map", Optional[str], None,
                "auto, balanced or sequential: split a target too large for one device over several (accelerate); "
                "drafters run where the input embedding is.", PLACEMENT),
        setting("max_memory", "--max-memory", Optional[str], None,
                "With --device-map: per-device budget, e.g. 0=70GiB,1=70GiB,cpu=200GiB.", PLACEMENT),
        setting("shard", "--shard", Optional[str], None,
                "I/N: evaluate shard I of N of the prompts (balanced by length) into --out; `dflash-eval merge` "
                "joins the N shard folders.", PLACEMENT),
        setting("dist_timeout", "--dist-timeout", float, 6 * 3600.0,
                "Under torchrun: seconds a rank waits at the barrier for the others; above the slowest shard's "
                "time (a failing rank ends the job at once).", PLACEMENT,
                number=(1, SECONDS_MAX, False)),
    )

    @cached_property
    def memory(self) -> dict | None:
        """--max-memory parsed once, as accelerate's max_memory ({0: "70GiB", "cpu": "200GiB"}); None without."""
        if not self.max_memory:
            return None
        out: dict = {}
        for part in self.max_memory.split(","):
            key, sep, amount = part.strip().partition("=")
            if not sep or not amount:
                raise InputError(None, f"--max-memory {self.max_memory!r}: expected DEVICE=AMOUNT,... (e.g. "
                                       "0=70GiB,cpu=200GiB)")
            out[int(key) if key.isdigit() else key] = amount
        return out

    @cached_property
    def shard_parts(self) -> tuple[int, int] | None:
        """--shard "I/N" parsed once: (I, N) with 0 <= I < N; None without; anything else refused by name."""
        if self.shard is None:
            return None
        head, sep, tail = str(self.shard).partition("/")
        try:
            index, count = int(head), int(tail)
        except ValueError:
            index = count = -1
        if not sep or count < 1 or not 0 <= index < count:
            raise InputError(None, f"--shard {self.shard!r}: expected I/N with 0 <= I < N (e.g. 0/4)")
        return index, count

    def check(self) -> None:
        """--shard, --device-map and --max-memory (whether the device exists is the machine's to say:
        pipeline/inputs.prepare_inputs asks torch, model/target.resolve_device)."""
        _ = self.shard_parts
        if self.device_map is not None and self.device_map not in DEVICE_MAPS:
            raise InputError(None, f"unknown --device-map {self.device_map!r} (auto, balanced, balanced_low_0 or "
                                   "sequential)")
        if self.max_memory and not self.device_map:
            raise InputError(None, "--max-memory bounds each device of a --device-map; give --device-map too")
        _ = self.memory

    def resolve(self) -> "Placed":
        """The placement parsed, for the stages that load a target or split the prompts: checked first."""
        self.check()
        return Placed(self.shard_parts, self.device_map, self.memory)


@dataclass(frozen=True)
class Placed:
    """A `Placement` resolved (`Placement.resolve`): the shard as (index, count), and the target's split over
    devices as load_target takes it."""

    shard: tuple[int, int] | None
    device_map: str | None
    max_memory: dict | None

    def load_keywords(self) -> dict:
        """load_target's device_map / max_memory keywords (empty: one device)."""
        return {"device_map": self.device_map, "max_memory": self.max_memory} if self.device_map else {}


@dataclass(frozen=True)
class Numerics(Section):
    """`run --numerics-check N` (pipeline/numerics.py): on the first N prompts, how far the bf16 results move with
    the GEMM shapes; recorded beside the run's numbers, never changing them."""

    numerics_check: int = 0

    FLAGS = (
        setting("numerics_check", "--numerics-check", int, 0,
                "On the first N prompts also measure how far bf16 results move with the GEMM shapes: each "
                "continuation regenerated alone, drafts at another --anchor-batch, tau in the live loop vs the "
                "replay with a paired interval; in run.json provenance.numerics.measured (the run's own numbers "
                "unchanged). Costly: ~2-3 min per prompt per drafter on a 27B (plan --numerics-check N prices it).",
                REPLAY, minimum=0,
                metavar="N"),
    )


DRAFTERS = "Drafters"  # the panel --drafter, --reference and --explain are in
DOCTOR = "Doctor"


@dataclass(frozen=True)
class Explanation(Section):
    """`run --reference`: the gap to the reference explained in the same run, doctor's variants replayed on the
    run's own trajectories (commands/explain.py); the cost is said before the work starts."""

    explain: bool = True

    FLAGS = (
        setting("explain", "--explain/--no-explain", bool, True,
                "With --reference: also replay each drafter under doctor's variants on the same trajectories (drafter "
                "passes only, no second target pass) and say which train/eval mismatch explains the gap, with its "
                "share; --no-explain skips it.", DRAFTERS),
    )


@dataclass(frozen=True)
class Doctor(Section):
    """What doctor adds to the variants (doctor/commands/doctor.py): the context variants (thinking flipped, the raw
    prompt: one more target pass per prompt each) and the training run's own taps (--trained-taps DATA)."""

    context_variants: bool = True
    trained_taps: Optional[Path] = None

    FLAGS = (
        setting("context_variants", "--context-variants/--no-context-variants", bool, True,
                "Also evaluate on continuations made with thinking flipped and from the raw prompt (one more target "
                "pass per prompt each).", DOCTOR),
        setting("trained_taps", "--trained-taps", Optional[Path], None,
                "The training run's hidden-state data folder (as `dflash-eval trained-taps` reads it): its taps "
                "against the target's, and the drafter on both; the verdict names a skew that explains the gap.",
                DOCTOR),
    )


RUN_SECTIONS = (Replay, Placement, Numerics, Explanation, Doctor)
