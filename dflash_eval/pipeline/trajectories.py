"""Stage `trajectories` (continuations -> trajectories -> scoring): one target pass per prompt over prompt +
continuation, capturing the tap features of a set of layers (the union of what every drafter, or every doctor
variant, reads) and the target's own greedy tokens. Every drafter and variant is then scored on this one trajectory;
nothing later runs the target again (`target.tap_passes` counts the passes, and tests hold it to one per prompt).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from .prompts import Prompt


class OffloadedLayers(Mapping):
    """Layer outputs kept in host memory (pageable), handed out on `device` one at a time.

    doctor holds every prompt's taps of ~18 layers through all its variants: on a 27B target HumanEval at
    2048 new tokens is ~64 GiB, which no accelerator holds next to the weights. Stored here, each variant
    moves only the layers of the trajectory it is scoring.

    Why pageable, not pinned: the pinned allocator (CUDA's caching host allocator) rounds every block up
    to a power of two, so one layer of one prompt (21.9-26.1 MB at 2048 new tokens) took 32 MiB: the 27B
    case's 126.5 GiB became ~160-190 GiB, past the 128 GB of a usual one-GPU machine; and `pin_memory()`
    made a second host copy first. The copy speed it bought does not matter here: a variant reads 5 layers
    of a prompt (~115 MB at T = 2,250 on a 27B), ~10 ms at the ~10 GB/s of a pageable host-to-device copy
    (~4 ms pinned), against a drafter pass over that prompt of >= 0.2 s (plan's roofline bound on an
    H200); the device-to-host copy at capture is pageable either way. Held bytes are then exactly
    T x H x element size per layer (`doctor_host_bytes`), and doctor checks them against the machine's
    memory before its target pass (doctor/commands/doctor.py)."""

    def __init__(self, layers: dict[int, torch.Tensor], device: torch.device):
        self.stored = {t: x.cpu() for t, x in layers.items()}
        self.device = torch.device(device)

    def __getitem__(self, layer: int) -> torch.Tensor:
        return self.stored[layer].to(self.device)

    def __iter__(self):
        return iter(self.stored)

    def __len__(self) -> int:
        return len(self.stored)


def doctor_host_bytes(base_tokens: int, base_layers: int, context_tokens: int, context_layers: int, hidden: int,
                      element: int = 2) -> int:
    """Host memory doctor's trajectories hold at their peak: every base trajectory's `base_layers` layers
    (`base_tokens` = prompt + continuation tokens summed over the sequences) and one context variant's
    trajectories of `context_layers` layers (the drafter's taps; 0 without context variants), T x H x
    element bytes per layer, pageable (`OffloadedLayers`: no rounding). `plan --doctor` shows this figure
    and doctor checks it against the machine's memory; both call this function."""
    return (base_tokens * base_layers + context_tokens * context_layers) * hidden * element


def doctor_host_fix(base: list[int], context: list[int], base_layers: int, context_layers: int, hidden: int,
                    available: int, *, samples: int = 1, element: int = 2) -> str | None:
    """The one option that makes doctor's trajectories (`doctor_host_bytes`) fit in `available` bytes:
    `--no-context-variants`, or the largest `--limit N`; None when they fit as they are or when no single
    option does (one prompt alone is too large; the caller knows which). `base` and `context`:
    tokens of each sequence (prompt + continuation), in prompt order, `samples` sequences per prompt."""
    def need(n: int, contexts: bool) -> int:
        b = sum(base[:n * samples])
        c = sum(context[:n * samples]) if contexts else 0
        return doctor_host_bytes(b, base_layers, c, context_layers, hidden, element)

    prompts = len(base) // max(1, samples)
    if need(prompts, bool(context)) <= available:
        return None
    if context and need(prompts, False) <= available:
        return "--no-context-variants"
    fitting = [n for n in range(prompts - 1, 0, -1) if need(n, bool(context)) <= available]
    return f"--limit {fitting[0]}" if fitting else None


def host_memory() -> tuple[int, int] | None:
    """(total, available) bytes of this machine's memory: /proc/meminfo's MemTotal and MemAvailable (what
    the kernel can hand out without swapping, page cache included); elsewhere the physical and free pages
    (os.sysconf); None where neither answers."""
    import os

    try:
        with open("/proc/meminfo") as handle:
            fields = dict(line.split(":", 1) for line in handle.read().splitlines() if ":" in line)
        return int(fields["MemTotal"].split()[0]) * 1024, int(fields["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError, IndexError):
        pass
    try:
        page = os.sysconf("SC_PAGE_SIZE")
        return os.sysconf("SC_PHYS_PAGES") * page, os.sysconf("SC_AVPHYS_PAGES") * page
    except (AttributeError, ValueError, OSError):
        return None


@dataclass
class Trajectory:
    prompt: Prompt
    prompt_len: int
    tokens: torch.Tensor  # [T] prompt + continuation ids (CPU)
    layers: Mapping[int, torch.Tensor]  # target layer t -> [T, H] output of layer t (z-lab numbering)
    greedy: torch.Tensor  # [T] argmax of the same forward: greedy[p] predicts tokens[p + 1]
    hidden: torch.Tensor | None = None  # [T, H] final hidden states, kept for the estimate at temperature > 0
    sample: int | None = None  # k of K sampled continuations (temperature > 0)

    @property
    def id(self) -> str:
        return self.prompt.id

    @property
    def continuation(self) -> list[int]:
        return self.tokens[self.prompt_len:].tolist()

    def taps(self, layers: Sequence[int]) -> torch.Tensor:
        """[T, len(layers) * H]: the features a drafter's fc reads, in its order."""
        return torch.cat([self.layers[t] for t in layers], dim=-1)

    def self_consistency(self) -> tuple[int, int]:
        """(agreeing, total) continuation tokens equal to the one-forward argmax (engine.self_consistency)."""
        from ..model.engine import self_consistency

        return self_consistency(self.greedy, self.tokens, self.prompt_len)


def capture_trajectory(target, prompt: Prompt, prompt_ids: list[int], continuation: list[int],
                       layers: Sequence[int], *, sequence_chunk: int | None = None, keep_hidden: bool = False,
                       sample: int | None = None, offload: bool = False) -> Trajectory:
    """The one target pass for `prompt` (and its sampled continuation k at temperature > 0); with `offload`
    its layer outputs wait in host memory (`OffloadedLayers`) until they are read."""
    from ..model.target import capture_taps

    layers = sorted(set(layers))
    tokens = torch.tensor(prompt_ids + continuation)
    capture = capture_taps(target, tokens, layers, sequence_chunk=sequence_chunk, keep_hidden=keep_hidden)
    per_layer: Mapping[int, torch.Tensor] = dict(zip(layers, capture.taps.split(target.info.hidden_size, dim=-1)))
    if offload:  # the final hidden states ([T, H], one layer's worth) stay where lm_head reads them
        per_layer = OffloadedLayers(dict(per_layer), target.device)
    return Trajectory(prompt, len(prompt_ids), tokens, per_layer, capture.greedy, capture.hidden, sample)
