"""Stage 2, trajectories: one target pass per prompt over prompt + continuation, capturing the tap
features of a set of layers (the union of what every drafter, or every doctor variant, reads) and the
target's own greedy tokens. Every drafter and variant is then scored on this one trajectory; nothing
later runs the target again (`target.tap_passes` counts the passes, and tests hold it to one per prompt).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .prompts import Prompt


@dataclass
class Trajectory:
    prompt: Prompt
    prompt_len: int
    tokens: torch.Tensor  # [T] prompt + continuation ids (CPU)
    layers: dict[int, torch.Tensor]  # target layer t -> [T, H] output of layer t (z-lab numbering)
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
                       sample: int | None = None) -> Trajectory:
    """The one target pass for `prompt` (and its sampled continuation k at temperature > 0)."""
    from ..model.target import capture_taps

    layers = sorted(set(layers))
    tokens = torch.tensor(prompt_ids + continuation)
    capture = capture_taps(target, tokens, layers, sequence_chunk=sequence_chunk, keep_hidden=keep_hidden)
    per_layer = capture.taps.split(target.info.hidden_size, dim=-1)
    return Trajectory(prompt, len(prompt_ids), tokens, dict(zip(layers, per_layer)), capture.greedy,
                      capture.hidden, sample)
