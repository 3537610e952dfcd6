"""The doctor's check for the teacher that was mis-scaled: speculators' wrong final-norm convention.

Why it exists: speculators builds a DFlash drafter's teacher distribution from the verifier's last hidden
state through a frozen copy of the verifier's final norm and lm_head (speculators 0.9.0
`models/dflash/core.py`: `verifier_lm_head(verifier_norm(verifier_last_hidden_states))`). Qwen3.5 and
Qwen3-Next store that norm's weight zero-centred and apply `x * (1 + w)` (transformers'
`Qwen3_5RMSNorm` / `Qwen3_5MoeRMSNorm` / `Qwen3NextRMSNorm`); a plain RMSNorm applies `x * w`. Facts, read
in speculators' code and threads:

- up to 0.8.1 `verifier_norm` was always a plain `Qwen3RMSNorm`: every Qwen3.5-style target got the
  teacher `lm_head(x * w)` (issue #1098; PR #1090 "resolve verifier_norm class by verifier family");
- 0.9.0 (`models/utils.py` `GEMMA_STYLE_FINAL_NORM_MODEL_TYPES`, matched exactly against the verifier's
  text config `model_type`) lists `qwen3_5` and `qwen3_5_text` only: `qwen3_5_moe_text` (Qwen3.5/3.6 MoE)
  and `qwen3_next` still get `x * w` (PR #1145, open, would add the MoE family).

Training converges regardless (the argmax often survives the rescaling), so nothing flags it. Whether a
checkpoint is such a case is decided from its `speculators_version` and the target's text `model_type`
(`norm_case`); what it did to the drafter is measured like the logit-lens check, on the same
trajectories (no extra target pass): the drafts' agreement with the target's argmax under the right
convention and under the wrong one, per prompt, paired over prompts (compare.delta_tau_per_prompt).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..core import compare as C
from ..core.errors import InputError, read_json_object
from ..formats.trainer_logs import parse_version
from .variants import lens_agreement

OFFSET_NORM_MODEL_TYPES = frozenset({"qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text", "qwen3_next"})
FIXED_IN = (0, 9, 0)
FIXED_MODEL_TYPES = frozenset({"qwen3_5", "qwen3_5_text"})  # speculators 0.9.0 GEMMA_STYLE_FINAL_NORM_MODEL_TYPES
SOURCE = ("speculators 0.9.0 models/utils.py (GEMMA_STYLE_FINAL_NORM_MODEL_TYPES, resolve_verifier_norm_class), "
          "models/dflash/core.py (verifier_norm); PR #1090, issue #1098")


def norm_case(version: Any, model_type: str | None) -> dict[str, Any]:
    """Whether a speculators trainer of `version` built this target's teacher with the wrong final norm.
    `applies`: True (named), False (right convention), None (no version recorded: cannot tell)."""
    mt = (model_type or "").lower()
    if mt not in OFFSET_NORM_MODEL_TYPES:
        return {"applies": False, "rule": f"the target ({mt or 'unknown model_type'}) applies its final norm as x * w: "
                                          "both conventions are the same"}
    parsed = parse_version(version) if version is not None else None
    if parsed is None:
        return {"applies": None, "rule": f"the target ({mt}) applies x * (1 + w); the checkpoint records no "
                                         "speculators_version, so whether its trainer used x * w cannot be told"}
    if parsed < FIXED_IN:
        return {"applies": True, "rule": f"speculators {version} (before 0.9.0) built every verifier's teacher with a "
                                         f"plain RMSNorm (x * w); this {mt} target applies x * (1 + w) (PR #1090)"}
    if mt in FIXED_MODEL_TYPES:
        return {"applies": False, "rule": f"speculators {version} builds a {mt} target's teacher with x * (1 + w) "
                                          "(fixed in 0.9.0, PR #1090)"}
    return {"applies": True, "rule": f"speculators {version}: the 0.9.0 fix matches only qwen3_5 / qwen3_5_text "
                                     f"exactly; a {mt} target still gets x * w (PR #1145 open)"}


def checkpoint_facts(path: Path) -> dict[str, Any]:
    """The recorded `speculators_version` and verifier of a speculators checkpoint's config.json."""
    try:
        config = read_json_object(Path(path) / "config.json", missing="no config.json")
    except InputError:
        return {"speculators_version": None, "verifier": None}
    verifier = ((config.get("speculators_config") or {}).get("verifier") or {}) if isinstance(
        config.get("speculators_config"), dict) else {}
    return {"speculators_version": config.get("speculators_version"),
            "verifier": verifier.get("name_or_path") if isinstance(verifier, dict) else None}


def agreement_tables(drafts: list, trajectories: list, right: list, wrong: list) -> dict[str, Any]:
    """Per prompt (slots, agreeing) with the right and with the wrong convention's argmax, and on the
    positions where the two argmaxes differ, how many drafts follow each. Slot i of anchor a (= prompt_len +
    j) is compared with the token after position a + i - 1 (variants.lens_agreement, as the logit-lens
    check counts)."""
    tables = {"right": lens_agreement(drafts, trajectories, right), "wrong": lens_agreement(drafts, trajectories, wrong)}
    differ = [[int(x) != int(y) for x, y in zip(r, w)] for r, w in zip(right, wrong)]
    on_right = lens_agreement(drafts, trajectories, right, keep=differ).values()
    on_wrong = lens_agreement(drafts, trajectories, wrong, keep=differ).values()
    differing = {"slots": sum(n for n, _ in on_right), "right": sum(a for _, a in on_right),
                 "wrong": sum(a for _, a in on_wrong)}
    positions = {"all": 0, "differ": 0}
    for traj, r, flags in zip(trajectories, right, differ):
        span = range(traj.prompt_len, min(len(r), len(traj.tokens) - 1))
        positions["all"] += len(span)
        positions["differ"] += sum(flags[p] for p in span)
    return {"tables": tables, "differing": differing, "positions": positions}


def norm_convention_check(facts: dict[str, Any], model_type: str | None, drafts: list, trajectories: list,
                          right: list, wrong: list | None, *, seed: int = 0, min_margin: float = 0.05) -> dict[str, Any]:
    """The case (norm_case) and, where the target applies x * (1 + w), the measurement: agreement of the
    drafts with the target's argmax under each convention, wrong - right paired over prompts. A finding when
    the drafts follow the wrong convention significantly more (named when the version rule applies, 'behaves
    as if' otherwise)."""
    case = norm_case(facts.get("speculators_version"), model_type)
    out: dict[str, Any] = {**facts, "model_type": model_type, **case, "source": SOURCE, "measured": False,
                           "finding": None}
    if wrong is None:
        return out
    counted = agreement_tables(drafts, trajectories, right, wrong)
    rate = {side: sum(a for _, a in t.values()) / max(1, sum(n for n, _ in t.values()))
            for side, t in counted["tables"].items()}
    d = counted["differing"]
    out.update(measured=True, agreement=rate, differing_slots=d,
               differing_share=counted["positions"]["differ"] / max(1, counted["positions"]["all"]))
    try:
        delta = C.delta_tau_per_prompt(counted["tables"]["right"], counted["tables"]["wrong"], seed=seed)
    except ValueError:
        return out
    out["wrong_vs_right"] = delta.to_dict()
    if delta.low > 0 and delta.p_value < 0.05 and delta.estimate >= min_margin:
        measured = (f"its drafts agree with the target's argmax under x * w {100 * rate['wrong']:.1f}% of the time, "
                    f"under the target's x * (1 + w) {100 * rate['right']:.1f}% ({C.paired_figure(delta, 3)}; where "
                    f"the two differ, {d['wrong']} of {d['slots']} drafts follow x * w, {d['right']} the real one)")
        if case["applies"]:
            out["finding"] = (f"the teacher was mis-scaled: {case['rule']}; {measured}; retrain with speculators "
                              ">= 0.9.0" + ("" if (model_type or "") in FIXED_MODEL_TYPES else
                                            " patched to apply x * (1 + w) for this model_type"))
        else:
            out["finding"] = f"behaves as if trained against a teacher with the final norm applied as x * w: {measured}"
    return out


def run_norm_check(entry, target, drafts: list, trajectories: list, right: list, num_layers: int,
                   seed: int) -> dict[str, Any] | None:
    """doctor's hook: speculators checkpoints only; the wrong convention's argmax from the last layer's
    states each trajectory already holds (right: the final layer's logit lens doctor computed); None for a
    target whose final norm is a plain x * w."""
    if entry.spec.format != "speculators":
        return None
    from ..model.target import lens_tokens

    model_type = getattr(target.model.config.get_text_config(), "model_type", None)
    if (model_type or "").lower() not in OFFSET_NORM_MODEL_TYPES:
        return None  # a plain x * w final norm: both conventions are one, nothing to name or measure
    wrong = [lens_tokens(target, traj.layers[num_layers - 1], plain_norm=True) for traj in trajectories]
    return norm_convention_check(checkpoint_facts(entry.path), model_type, drafts, trajectories, right, wrong,
                                 seed=seed)
