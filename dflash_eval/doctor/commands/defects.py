"""The doctor's variants for the checks engines added after their own bugs (core/checkpoint_defects.py), where a
replay shows the effect on the doctor's own trajectories:

| variant | the serving it stands for |
|---|---|
| final-layer tap after the final norm | an engine that reads HF output_hidden_states[-1] for a tap on the last layer (DeepSpec's assert_no_final_target_layer) |
| block_size from the other level | an engine reading the block size from the level the checkpoint's own rules do not (Rapid-MLX #2195, lmdeploy #4991) |
| fc computed in float16 | an fp16 server whose fc fusion overflows (lmdeploy #4991); offered only where it overflows on these taps |

Beside them, `fc_range`: fc's output on the trajectories' taps at the run's dtype and at float16, overflows
counted (model/probe_checks.fc_range), for doctor.json. The serving window (Luce-Org/lucebox #740) is
`doctor --draft-window W` (windows.py); the MASK row is the doctor's static check (check_mask_row).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ...commands.variants import Variant
from ...core.spec import DrafterSpec
from ...formats.defect_checks import block_size_levels, config_of


def defect_variants(spec: DrafterSpec, num_layers: int) -> list[Variant]:
    """The final-layer tap and the other block_size level (module docstring), where the checkpoint has them."""
    out = []
    last = num_layers - 1
    if last in spec.taps:
        out.append(Variant(f"final-layer tap {last} after the final norm (HF hidden_states[-1])",
                           "served by an engine that reads HF output_hidden_states[-1] for the final-layer tap (the "
                           "state after the final norm), trained on the raw layer output", normed_layers=(last,)))
    values, read = block_size_levels(config_of(spec.path), spec.format)
    for where, value in values.items():
        if value != values[read] and value >= 2:
            blocks = value + 1 if spec.sample_from_anchor else value  # core/spec.py: slot 0 drafting
            out.append(Variant(f"block_size {value} from {where}",
                               f"served by an engine that reads {where} (a block of {value}, not {values[read]})",
                               spec=replace(spec, block_size=blocks)))
    return out


def fc_range(drafter, trajectories: list, run_dtype: str) -> dict[str, Any]:
    """fc(taps) over every trajectory at the run's dtype and at float16: values, overflows, largest |fc|."""
    import torch

    from ...model.probe_checks import fc_range as measure

    out: dict[str, Any] = {}
    weight = drafter.fc.weight.detach()
    for dtype in dict.fromkeys((run_dtype, "float16")):
        total = {"values": 0, "overflowed": 0, "max_abs": 0.0, "dtype": dtype}
        for traj in trajectories:
            facts = measure(weight, traj.taps(drafter.spec.taps), getattr(torch, dtype))
            total["values"] += facts["values"]
            total["overflowed"] += facts["overflowed"]
            total["max_abs"] = max(total["max_abs"], facts["max_abs"])
        out[dtype] = total
    return out


def fc_variant(facts: dict[str, Any]) -> list[Variant]:
    """The fc-in-float16 variant, when float16 overflows on these taps (else it would replay the configuration)."""
    if not facts.get("float16", {}).get("overflowed"):
        return []
    return [Variant("fc computed in float16", "served in fp16, where this fc overflows (InternLM/lmdeploy #4991)",
                    fc_dtype="float16")]
