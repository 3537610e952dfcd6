"""Stage 2, trajectories: one target pass per prompt over prompt + continuation, capturing the tap
features of a set of layers (the union of what every drafter, or every doctor variant, reads) and the
target's own greedy tokens. Every drafter and variant is then scored on this one trajectory; nothing
later runs the target again (`target.tap_passes` counts the passes, and tests hold it to one per prompt).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from .prompts import Prompt


class OffloadedLayers(Mapping):
    """Layer outputs kept in host memory (pinned when CUDA is there), handed out on `device` one at a time.

    doctor holds every prompt's taps of ~18 layers through all its variants: on a 27B target HumanEval at
    2048 tokens is ~67 GB, twice that with the context variants, which no accelerator holds next to the
    weights. Stored here, each variant moves only the layers of the trajectory it is scoring."""

    def __init__(self, layers: dict[int, torch.Tensor], device: torch.device):
        pin = torch.cuda.is_available()
        self.stored = {t: (x.cpu().pin_memory() if pin else x.cpu()) for t, x in layers.items()}
        self.device = torch.device(device)

    def __getitem__(self, layer: int) -> torch.Tensor:
        return self.stored[layer].to(self.device, non_blocking=True)

    def __iter__(self):
        return iter(self.stored)

    def __len__(self) -> int:
        return len(self.stored)


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
