"""`--serving-target PATH` (run and doctor): the drop from the target the drafters were evaluated against (A) to
the copy they are served with (B: an FP8, int4 or GGUF copy), split into the target's own disagreement and the
drafter's inputs (core/serving_split.py says how).

Per prompt, on the run's prompts and with the run's replay rules (`pipeline.scoring.score_on_trajectory`: the
final block, the draft window, the anchors per forward): A's greedy continuation (the run's, from the cache) and
B's (generated, cached like A's for a folder copy); four tap passes, A and B each over both texts; every drafter
replayed on the four (taps, text) pairs; and B's argmax against A's on A's text. Greedy only: at temperature 0
the text a target verifies is its greedy continuation, so "verified by B" is exactly "walked on B's text".

Cost, said up front: one generation pass of B and 4 tap passes per prompt (A over A's text again: the run
keeps no trajectory), and 4 replays per drafter per prompt.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..core.serving_split import disagreement, split_drop, verdict


def _counts(result) -> tuple[int, int]:
    return len(result.walk_accept_lengths), int(sum(result.walk_accept_lengths))


def serving_target_section(settings, inputs, target, drafters: dict, reporter) -> dict[str, Any]:
    """The `serving_target` section of run.json / doctor.json: the serving target's identity, B's argmax
    disagreement on A's text, and per drafter the four cells, the drop and its split, and the verdict line."""
    from ..model.serving_target import argmax_flips, is_gguf, load_serving_target, serving_target_identity
    from ..pipeline.continuations import continuations_for
    from ..pipeline.scoring import kernels_context, off_accelerator, score_on_trajectory
    from ..pipeline.trajectories import capture_trajectory

    prompts, ids, copy = inputs.prompts, inputs.prompt_ids(), settings.second_target.serving_target
    reporter.note(f"serving target {copy}: one generation and 4 tap passes per prompt "
                  f"({len(prompts)} prompts), 4 replays per drafter per prompt")
    with off_accelerator(target, *drafters.values()):  # the generation batches count a target alone (scoring.py)
        serving = load_serving_target(copy, target, device=settings.placement.device, dtype=settings.placement.dtype,
                                      allow_accelerated_on_cpu=settings.replay.kernels == "torch")
        universe = inputs.planned  # the run's generation plan (pipeline/inputs.Inputs.planned)
        with kernels_context(target, settings):
            texts_a, _ = continuations_for(target, prompts, ids, settings, inputs.thinking, None, reporter,
                                           universe=universe)
        # a GGUF has no folder to fingerprint for the continuation cache: its continuations are made, not cached
        settings_b = (settings.with_sections(dataclasses.replace(settings.output, cached=False)) if is_gguf(copy)
                      else settings)
        with kernels_context(serving, settings):
            texts_b, generated_b = continuations_for(serving, prompts, ids, settings_b, inputs.thinking, None, reporter,
                                                     universe=universe)
    layers = sorted({t for d in drafters.values() for t in d.spec.taps})
    cells: dict[str, dict[str, dict]] = {name: {c: {} for c in ("AA", "AB", "BA", "BB")} for name in drafters}
    flips: dict[str, tuple[int, int]] = {}
    passes = {"A": 0, "B": 0}
    reporter.phase("serving target", len(prompts))
    for prompt in prompts:
        trajectories = {}
        for taps_from, model in (("A", target), ("B", serving)):
            with kernels_context(model, settings):
                for text_of, text in (("A", texts_a[prompt.id]), ("B", texts_b[prompt.id])):
                    trajectories[taps_from + text_of] = capture_trajectory(
                        model, prompt, ids[prompt.id], text, layers, sequence_chunk=settings.batching.tap_chunk)
                    passes[taps_from] += 1
        aa, ba = trajectories["AA"], trajectories["BA"]
        flips[prompt.id] = argmax_flips(aa.greedy, ba.greedy, aa.prompt_len, int(aa.tokens.shape[0]))
        for name, drafter in drafters.items():
            for cell, trajectory in trajectories.items():  # cell = (whose taps, whose text)
                cells[name][cell][prompt.id] = _counts(score_on_trajectory(drafter, trajectory, settings))
        reporter.advance("serving target", prompt.id)
    identity = serving_target_identity(serving)
    argmax = disagreement(flips)
    rows = []
    for name in drafters:
        split = split_drop(cells[name], seed=settings.seed)
        rows.append({"drafter": name, **split, "verdict": verdict(name, identity["path"], split, argmax)})
    return {"serving_target": identity, "target": str(target.path), "argmax_disagreement": argmax,
            "generated": generated_b, "tap_passes": passes, "drafters": rows,
            "cells": {"AA": "A's taps, A's text (the run)", "BB": "B's taps, B's text (served with B)",
                      "AB": "A's taps, B's text (B verifies)", "BA": "B's taps, A's text (A verifies)"}}
