"""trained-taps' noise floor: how far a correct extraction moves, measured, so that a skew stands out against it.

On the first K compared samples the target runs again in the other dtype (bfloat16 when the reference pass was
float32, and the reverse), over the same ids, capturing the same layers: the floor at layer t is our bf16 tap t
against our fp32 tap t (core/tap_skew.TapStats, the stored-slot statistics with "stored" = our bf16). For fp8
data the bf16 taps go through hs_connectors' fp8 writer and reader first (one scale per token over the file's
layers, as FP8HiddenStatesConnector writes them), so the floor includes the quantization the data carries.
The teacher's floor is the same at the last layer (before the final norm) and on the final hidden states (after).
"""

from __future__ import annotations

from ..core.tap_skew import TapStats


def kept_states(target, sample, traj, layers: list[int], no_last: bool) -> dict:
    """What the floor pass needs of one sample from the reference pass, kept in host memory."""
    kept = {"ids": sample.input_ids, "layers": {t: traj.layers[t].cpu() for t in layers}, "hidden": traj.hidden.cpu(),
            "teacher": sample.teacher is not None and not no_last}
    kept["embeddings"] = target.embed_tokens(sample.input_ids.to(target.device)).cpu()
    return kept


def _add(floors: dict, key, stats: TapStats) -> None:
    floors[key] = floors[key] + stats if key in floors else stats


def floor_pass(target, target_path, device: str, kept: list[dict], layout, layers: list[int], has_teacher: bool,
               dtypes: set[str], reporter) -> tuple[dict, str]:
    """{layer: TapStats, -1: embeddings, "pre": last layer, "post": final hidden states} and the floor in words."""
    import torch

    from ..model.tap_compare import fp8_round_trip, tap_stats
    from ..model.target import load_target
    from ..pipeline.prompts import Prompt
    from ..pipeline.trajectories import capture_trajectory

    reference_bf16 = target.dtype == torch.bfloat16
    other = load_target(str(target_path), device=device, dtype="float32" if reference_bf16 else "bfloat16")
    fp8 = "F8_E4M3" in dtypes
    n = target.info.num_layers
    floors: dict = {}
    reporter.phase("noise floor", len(kept))
    for number, states in enumerate(kept):
        traj = capture_trajectory(other, Prompt(f"floor-{number}", "", "floor"), states["ids"].tolist(), [], layers,
                                  keep_hidden=True)
        embeddings = other.embed_tokens(states["ids"].to(other.device)).cpu()
        pairs = {t: (traj.layers[t].cpu(), states["layers"][t]) for t in layers}
        pairs[-1] = (embeddings, states["embeddings"])
        pairs["post"] = (traj.hidden.cpu(), states["hidden"])
        if reference_bf16:  # (bf16, fp32) in every pair
            pairs = {k: (kept_one, new) for k, (new, kept_one) in pairs.items()}
        bf16 = {k: v[0] for k, v in pairs.items()}
        if fp8:  # the stored layout through the fp8 round trip; the neighbours one layer at a time
            stored = [t for t in layout.taps] + ([n - 1] if has_teacher else [])
            trip = fp8_round_trip(torch.stack([bf16[t] for t in stored], dim=1))
            quantized = {t: trip[:, k] for k, t in enumerate(stored[:len(layout.taps)])}
            if has_teacher:
                quantized["pre"] = trip[:, -1]
            for key in bf16:
                if key not in quantized and key != "post":
                    quantized[key] = fp8_round_trip(bf16[key][:, None])[:, 0]
            bf16.update(quantized)
        for key, (_, fp32) in pairs.items():
            _add(floors, key, tap_stats(bf16[key], fp32))
        if "pre" not in bf16:
            _add(floors, "pre", tap_stats(bf16[n - 1], pairs[n - 1][1]))
        else:
            _add(floors, "pre", tap_stats(bf16["pre"], pairs[n - 1][1]))
        reporter.advance("noise floor", str(number))
    del other
    what = (f"our bfloat16 taps against our float32 taps on the same ids ({len(kept)} samples)"
            + (", the bf16 taps through hs_connectors' fp8 round trip (the data is fp8)" if fp8 else ""))
    return floors, what
