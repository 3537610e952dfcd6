"""`run --reference` explains the gap it measures: doctor's variants replayed on the run's own trajectories.

The run already holds, per prompt, the one target pass every drafter is scored on. Each drafter compared
with the reference is replayed there once more under each classic bug's variant (commands/variants.py:
anchor in context, taps shifted, in-block causality, windows, other rules, block positions, final norm,
RoPE, the target's tables), costing drafter passes only: no second target pass, and the explanation covers
exactly the prompts the run measured. Each row of such a drafter gains `explain` (the reference's name; per
variant the walk's steps and committed tokens and its flagged blocks), from which core/explanation.py
builds run.json's `explanation` section, a finished run and a merge alike.

Not replayed here: the tap-zeroed variants (they find a tap the projection ignores, not the cause of a gap),
the logit lens, the teacher's norm convention and the context variants (new continuations, another target
pass each): `dflash-eval doctor` is the deeper look. Greedy trajectory mode only: the live loop keeps no
trajectory to replay, and at temperature > 0 doctor --temperature estimates the variants.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from .variants import Variant, build_variants, check_for, evaluate_variants, rope_variants, table_variant


@dataclass
class ExplainPlan:
    """Which drafters are explained against which reference, the variants of each, the layers they read."""

    reference: str
    variants: dict[str, list[Variant]] = field(default_factory=dict)  # drafter name -> its variants
    layers: set[int] = field(default_factory=set)

    def cost_line(self, prompts: int) -> str:
        """What the explanation costs, said before the work starts."""
        per = ", ".join(f"{len(v)} variants of {name}" for name, v in self.variants.items())
        passes = sum(len(v) for v in self.variants.values())
        return (f"explaining the gap to {self.reference}: {per} replayed on each prompt's trajectory ({passes} more "
                f"drafter replays per prompt, {passes * prompts} in all, no more target passes); --no-explain skips it")


def explain_skipped(settings) -> str | None:
    """Why a run with a reference does not explain its gap (said up front), or None when it does or has none."""
    if not settings.drafters.reference or not settings.explanation.explain:
        return None
    if settings.replay.mode != "trajectory":
        return "the gap is not explained in --mode live (no trajectory to replay): doctor --reference explains it"
    if settings.sampled:
        return ("the gap is not explained at temperature > 0: doctor --reference --temperature T estimates every "
                "variant on sampled texts")
    return None


def plan_explanation(settings, entries: list, reference: str | None, target) -> ExplainPlan | None:
    """The plan of `run --reference` (module docstring), or None when nothing is explained: no reference,
    --no-explain, live mode or temperature > 0 (RunSettings.explains_gap; explain_skipped says why)."""
    if reference is None or not settings.explains_gap():
        return None
    info = target.info
    target_rope = getattr(target.model.config.get_text_config(), "rope_parameters", None)
    plan = ExplainPlan(reference)
    for entry in entries:
        if entry.name == reference:
            continue
        spec = entry.spec
        variants = [v for v in build_variants(spec, info.num_layers)[1:] if v.zero_tap is None]
        variants += rope_variants(spec, target_rope) + table_variant(spec)
        for variant in variants:
            variant.check = variant.check or check_for(variant.name)
        plan.variants[entry.name] = variants
        plan.layers |= {t for v in variants for t in (v.taps or spec.taps)}
    return plan


@contextmanager
def quiet_rope_configs():
    """transformers' config warnings off while the RoPE variants build their rotary embeddings: a RoPE variant
    copies the target's parameters (mrope keys and all) into a drafter config, and transformers says so once
    per prompt on stderr, about a config of ours, not the user's (variants.rope_variants)."""
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)


def add_explanation(rows: list[dict[str, Any]], plan: ExplainPlan, drafters: dict, trajectory, settings,
                    target) -> None:
    """Each explained drafter's row of this prompt gains `explain`: every variant replayed on `trajectory`
    (the prompt's one target pass), its walk's (steps, committed) and its flagged blocks."""
    from ..pipeline.scoring import windowed

    final_norm = target.model.model.norm
    for row in rows:
        variants = plan.variants.get(row["drafter"])
        if variants is None:
            continue
        drafter = windowed(drafters[row["drafter"]], settings.breakdown.draft_window)
        with quiet_rope_configs():  # scored as the run's replay (settings.scoring)
            results = evaluate_variants(drafter, variants, [trajectory], final_norm, target.info.hidden_size,
                                        settings.scoring)
        entries = []
        for result in results:
            steps, committed = result.counts.per_prompt.get(row["prompt_id"], (0, 0))
            entries.append({"variant": result.variant.name, "bug": result.variant.bug, "check": result.variant.check,
                            "counts": [int(steps), int(committed)], "flagged": list(result.flagged)})
        row["explain"] = {"reference": plan.reference, "variants": entries}
