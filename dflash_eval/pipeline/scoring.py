"""Stage 3, scoring: one drafter on one prompt. In trajectory mode the drafter replays every anchor of
the captured trajectory (engine.replay: exact at temperature 0); in live mode it runs the real
step-by-step loop against the target (live.live_generate). Both return the walk the rows are built from. The drafters are loaded here, onto the target's device.
"""

from __future__ import annotations

import contextlib

from ..formats.files import weight_files
from ..model.engine import DrafterOnPrompt, replay
from ..model.live import LiveResult, live_generate
from ..core.options import RunOptions
from .trajectories import Trajectory


def load_drafters(entries: list, target) -> dict:
    """Each checkpoint as a native drafter on the target's device, with the target's tables attached."""
    from ..model.drafter import load_drafter

    return {e.name: load_drafter(e.spec, weight_files(e.path), device=target.device, dtype=target.dtype)
            .attach_target(target.embed_tokens, target.lm_head) for e in entries}


def kernels_context(target, options: RunOptions):
    from ..model.kernels import torch_fallback_kernels

    return torch_fallback_kernels(target.model) if options.kernels == "torch" else contextlib.nullcontext()


def score_on_trajectory(drafter, trajectory: Trajectory, options: RunOptions) -> DrafterOnPrompt:
    return replay(drafter, trajectory.taps(drafter.spec.taps), trajectory.tokens, trajectory.prompt_len,
                  options.max_new_tokens, shorter_final_block=options.final_block == "shorter",
                  anchor_batch=options.anchor_batch)


def estimate_on_trajectory(drafter, trajectory: Trajectory, target, options: RunOptions) -> list[list[float]]:
    """Temperature > 0, offline: every anchor's per-slot acceptance probabilities on a sampled trajectory."""
    from ..model.estimation import anchor_alphas
    from ..model.sampling import sampling_of

    return anchor_alphas(drafter, trajectory.taps(drafter.spec.taps), trajectory.tokens, trajectory.hidden,
                         target.lm_head, trajectory.prompt_len, options.max_new_tokens, sampling_of(options),
                         shorter_final_block=options.final_block == "shorter", anchor_batch=options.anchor_batch)


def score_live(target, drafter, prompt_ids: list[int], options: RunOptions, prompt_id: str = "",
               sample: int = 0) -> LiveResult:
    """The live loop; at temperature > 0 with the generator of (seed, prompt, sample): every drafter sees
    the same random stream for a given prompt and sample (common random numbers for paired comparisons)."""
    from ..model.sampling import sampling_of

    sampling = sampling_of(options)
    generator = None
    if not sampling.greedy:
        from ..model.sampling import generator_for

        generator = generator_for(options.seed, prompt_id, sample, target.device)
    return live_generate(target, drafter, prompt_ids, options.max_new_tokens,
                         shorter_final_block=options.final_block == "shorter", sampling=sampling,
                         generator=generator)
