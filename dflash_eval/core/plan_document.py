"""What `plan` returns, as values (commands/plan.py computes it, render/plan.py shows it, `plan --json` prints
`Plan.to_dict()`): the settings planned for, the models read from their configs, the phases of a run with
their memory and roofline time, whether it fits and which option would make it fit."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from . import roofline as R
from .settings.work import TAP_CHUNK


@dataclass
class Model:
    path: str
    kind: str  # target: model_type; drafter: format
    parameters: int
    weight_bytes: int
    shape: Any
    config: dict | None = None  # the target's config.json


RESERVE_BYTES = 2 * R.GIB  # CUDA context, cuBLAS workspace and allocator slack, never available to tensors
TIME_IS = "a roofline LOWER BOUND: every kernel at the bf16 peak or bandwidth, no overhead; not yet timed on a GPU"


@dataclass(frozen=True)
class PlanSettings:
    prompts: str = "demo"
    limit: int | None = None
    max_new_tokens: int = 256
    accelerator: str = "h200"
    generation_batch: int | None = None  # None: the run's rule
    anchor_batch: int | None = None  # None: the run's rule
    tap_chunk: int = TAP_CHUNK  # the one default (core/settings/work.py)
    temperature: float = 0.0
    samples: int = 1
    doctor: bool = False  # also plan `doctor` on the first drafter
    context_variants: bool = True
    thinking: bool | None = None
    numerics_check: int = 0  # run --numerics-check N: priced on the first N prompts

    @classmethod
    def of(cls, settings, accelerator: str, doctor: bool = False) -> "PlanSettings":
        """A plan's settings from the run's (core/settings/run_settings.RunSettings), as `plan` takes them."""
        given, batching, sampling = settings.inputs, settings.batching, settings.sampling
        return cls(prompts=given.prompts, limit=given.limit, max_new_tokens=given.max_new_tokens,
                   accelerator=accelerator, generation_batch=batching.generation_batch,
                   anchor_batch=batching.anchor_batch, tap_chunk=batching.tap_chunk,
                   temperature=sampling.temperature, samples=sampling.samples, doctor=doctor,
                   context_variants=settings.doctor.context_variants, thinking=given.thinking,
                   numerics_check=settings.numerics.numerics_check)


@dataclass
class Phase:
    name: str
    memory_bytes: int  # peak accelerator memory during the phase (resident weights included)
    flops: float
    seconds: float
    parts: dict[str, int] = field(default_factory=dict)  # what memory_bytes is made of
    host_bytes: int = 0  # kept in host memory meanwhile (doctor's offloaded trajectories)

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "parts": dict(self.parts)}


@dataclass
class Plan:
    target: Model
    drafters: list[Model]
    accelerator: R.Accelerator
    settings: PlanSettings
    lengths: list[int]  # prompt tokens of every sequence (a prompt once per sample)
    length_source: str
    batches: dict[str, Any]
    phases: list[Phase]
    fix: str | None
    notes: list[str]
    host: dict[str, Any] | None = None  # --doctor: its host memory against this machine's (`_host`)

    @property
    def usable_bytes(self) -> int:
        return self.accelerator.memory_bytes - RESERVE_BYTES

    @property
    def peak_bytes(self) -> int:
        return max(p.memory_bytes for p in self.phases)

    @property
    def fits(self) -> bool:
        return self.peak_bytes <= self.usable_bytes

    def to_dict(self) -> dict[str, Any]:
        t = self.target
        return {
            "target": {"path": t.path, "model_type": t.kind, "parameters": t.parameters, "weight_bytes": t.weight_bytes,
                       "kv_bytes_per_token": R.kv_bytes_per_token(t.shape),
                       "state_bytes_per_sequence": R.state_bytes_per_sequence(t.shape)},
            "drafters": [{"path": d.path, "format": d.kind, "parameters": d.parameters, "weight_bytes": d.weight_bytes,
                          "block_size": d.shape.block_size} for d in self.drafters],
            "accelerator": dataclasses.asdict(self.accelerator),
            "settings": dataclasses.asdict(self.settings),
            "prompts": {"sequences": len(self.lengths), "length_source": self.length_source,
                        "min_tokens": min(self.lengths), "max_tokens": max(self.lengths),
                        "mean_tokens": sum(self.lengths) / len(self.lengths)},
            "batches": self.batches, "phases": [p.to_dict() for p in self.phases],
            "peak_bytes": self.peak_bytes, "usable_bytes": self.usable_bytes, "reserve_bytes": RESERVE_BYTES,
            "seconds": sum(p.seconds for p in self.phases), "seconds_are": TIME_IS, "fits": self.fits, "fix": self.fix,
            "notes": self.notes, "host": self.host,
        }


