"""Stage `scoring` (trajectories -> scoring -> rows): one drafter on one prompt. In trajectory mode the drafter replays
every anchor of the captured trajectory (engine.replay: exact at temperature 0); in live mode it runs the real
step-by-step loop against the target (live.live_generate). Both return the walk the rows are built from. The
drafters are loaded here, and join the target's device only once its continuations are generated
(`load_drafters(..., device="cpu")` then `to_target_device`; `off_accelerator` around a later generation): the
generation batch counts the target alone (continuations.run_generation_budget), so it is the same whichever drafters
a command scores."""

from __future__ import annotations

import contextlib

from ..core.settings.run_settings import RunSettings
from ..formats.files import weight_files
from ..model.engine import DrafterOnPrompt, replay
from ..model.live import LiveResult, live_generate
from .trajectories import Trajectory


def load_drafters(entries: list, target, *, device=None) -> dict:
    """Each checkpoint as a native drafter in the target's dtype on `device` (default the target's), every
    weight checked as it loads (model.drafter.load_drafter), with the target's tables attached."""
    from ..model.drafter import load_drafter

    where = target.device if device is None else device
    return {e.name: load_drafter(e.spec, weight_files(e.path), device=where, dtype=target.dtype)
            .attach_target(target.embed_tokens, target.lm_head) for e in entries}


def to_target_device(drafters: dict, target) -> dict:
    """The drafters moved onto the target's device (their weights copied exactly), after generation."""
    for drafter in drafters.values():
        drafter.to(target.device)
    return drafters


@contextlib.contextmanager
def off_accelerator(target, *drafters):
    """The drafters in host memory during the block (a generation: continuations.run_generation_budget
    counts the target alone), back on the target's device after it."""
    for drafter in drafters:
        drafter.to("cpu")
    try:
        yield
    finally:
        for drafter in drafters:
            drafter.to(target.device)


def kernels_context(target, settings: RunSettings):
    from ..model.kernels import torch_fallback_kernels

    return torch_fallback_kernels(target.model) if settings.replay.kernels == "torch" else contextlib.nullcontext()


def check_kernels(target, settings: RunSettings) -> None:
    """`--kernels torch` on a transformers that hides an operation's torch implementation: refused by name right
    after the target loads, before a run folder is opened (and, with --overwrite, emptied)."""
    if settings.replay.kernels == "torch":
        from ..model.kernels import fallback_routes

        fallback_routes(target.model)


def at_draft_length(drafter, k: int):
    """The same drafter (same weights, shared) drafting a block of k + 1 slots, as a server with
    num_speculative_tokens = k runs it: the engine and the live loop read the block size from the spec.
    k = B - 1 is the drafter itself."""
    import copy
    import dataclasses

    if k + 1 == drafter.spec.block_size:
        return drafter
    view = copy.copy(drafter)  # shallow: parameters, buffers and the target's tables are shared, not copied
    object.__setattr__(view, "spec", dataclasses.replace(drafter.spec, block_size=k + 1))
    return view


def windowed(drafter, window: int | None):
    """The drafter as served with --draft-window W (masks.block_masks: only the last W context rows before
    each anchor, on every layer); itself without one. A shallow view, as `at_draft_length`."""
    import copy

    if window is None:
        return drafter
    view = copy.copy(drafter)
    object.__setattr__(view, "draft_window", int(window))
    return view


def score_on_trajectory(drafter, trajectory: Trajectory, settings: RunSettings) -> DrafterOnPrompt:
    drafter = windowed(drafter, settings.breakdown.draft_window)
    return replay(drafter, trajectory.taps(drafter.spec.taps), trajectory.tokens, trajectory.prompt_len,
                  settings.scoring, tree_budgets=settings.trees.budgets)


def draft_lengths_of(drafter, settings: RunSettings) -> tuple[int, ...]:
    """The shorter draft lengths k < B - 1 this drafter is also replayed at (B - 1 is its own run)."""
    return settings.serving.shorter(drafter.spec.block_size)


def score_at_draft_lengths(drafter, trajectory: Trajectory, settings: RunSettings) -> dict[int, DrafterOnPrompt]:
    """The replay once per draft length k, on the same taps (no further target pass), each with a block of
    k + 1 slots: drafts of a shorter block are not a prefix of the full block's (bidirectional attention)."""
    ks = draft_lengths_of(drafter, settings)
    if not ks:
        return {}
    drafter = windowed(drafter, settings.breakdown.draft_window)
    taps = trajectory.taps(drafter.spec.taps)
    ctx = drafter.context(taps)
    return {k: replay(at_draft_length(drafter, k), taps, trajectory.tokens, trajectory.prompt_len, settings.scoring,
                      ctx=ctx) for k in ks}


def estimate_on_trajectory(drafter, trajectory: Trajectory, target, settings: RunSettings) -> list[list[float]]:
    """Temperature > 0, offline: every anchor's per-slot acceptance probabilities on a sampled trajectory."""
    from ..model.estimation import anchor_alphas

    drafter = windowed(drafter, settings.breakdown.draft_window)
    assert trajectory.hidden is not None, "a sampled trajectory keeps its final hidden states (keep_hidden)"
    return anchor_alphas(drafter, trajectory.taps(drafter.spec.taps), trajectory.tokens, trajectory.hidden,
                         target.lm_head, trajectory.prompt_len, settings.scoring, settings.sampling)


def score_live(target, drafter, prompt_ids: list[int], settings: RunSettings, prompt_id: str = "",
               sample: int = 0) -> LiveResult:
    """The live loop; at temperature > 0 with the generator of (seed, prompt, sample): every drafter sees
    the same random stream for a given prompt and sample (common random numbers for paired comparisons)."""
    sampling = settings.sampling
    generator = None
    if not sampling.greedy:
        from ..model.sampling import generator_for

        generator = generator_for(settings.seed, prompt_id, sample, target.device)
    return live_generate(target, windowed(drafter, settings.breakdown.draft_window), prompt_ids, settings.scoring,
                         sampling=sampling, generator=generator)


def plain_decoding_seconds(target, drafter, prompt_ids: list[int], settings: RunSettings) -> dict[str, float]:
    """t_target(1) measured (speedup.py): the live loop with a block of one slot is plain greedy decoding,
    one target forward per token; its verify forwards are timed ({seconds summed, steps})."""
    live = live_generate(target, at_draft_length(drafter, 0), prompt_ids, settings.scoring)
    return {"seconds": sum(live.verify_seconds), "steps": len(live.verify_seconds)}
