"""Stage 3, scoring: one drafter on one prompt. In trajectory mode the drafter replays every anchor of
the captured trajectory (engine.replay: exact at temperature 0); in live mode it runs the real
step-by-step loop against the target (live.live_generate). Both return the walk the rows are built from.
"""

from __future__ import annotations

from .engine import DrafterOnPrompt, replay
from .live import LiveResult, live_generate
from .options import RunOptions
from .trajectories import Trajectory


def score_on_trajectory(drafter, trajectory: Trajectory, options: RunOptions) -> DrafterOnPrompt:
    return replay(drafter, trajectory.taps(drafter.spec.taps), trajectory.tokens, trajectory.prompt_len,
                  options.max_new_tokens, shorter_final_block=options.final_block == "shorter",
                  anchor_batch=options.anchor_batch)


def score_live(target, drafter, prompt_ids: list[int], options: RunOptions) -> LiveResult:
    return live_generate(target, drafter, prompt_ids, options.max_new_tokens,
                         shorter_final_block=options.final_block == "shorter")
