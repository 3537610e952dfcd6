"""`doctor --trained-taps DATA`: the training run's own hidden states beside doctor's variants.

The variants ask "does the drafter behave as if trained with bug X?"; the training data answers it directly:
the taps it was trained on, read back and compared with the target's (commands/trained_taps.py, on doctor's
own target as the reference pass). When a skew is named there and the drafter does significantly better on
its stored taps than on ours (the paired gap's interval above 0, p < 0.05), the skew explains the gap, and the
verdict names it ("your training taps are the target's layers shifted by one", "the teacher was taken after the
final norm", "the training data's hybrid-layer taps are all zero"); otherwise it stays in its section.
"""

from __future__ import annotations

from typing import Any

from ...core.compare import paired_figure

DOCTOR_SAMPLES = 64  # the first 64 samples of the split (the validation rows where the trainer has them)
SKEWS = ("nonfinite", "hybrid-zero", "zero", "shifted", "post-norm", "pre-norm", "unmatched", "no-last-layer",
         "unsorted", "layers-differ", "teacher-layer", "token-mismatch")


def explains(result: dict[str, Any]) -> tuple[str, str] | None:
    """(the verdict sentence, the skew's kind) when a named skew explains a significant gap, else None."""
    skews = [f for f in result["findings"] if f["kind"] in SKEWS]
    evaluation = result.get("evaluation") or {}
    gap = evaluation.get("gap")
    if not skews or not gap or gap.get("low") is None or not (gap["low"] > 0 and gap["p_value"] < 0.05):
        return None
    first = skews[0]
    line = first["lines"][0]
    detail = line if line.startswith(first["headline"]) else f"{first['headline']} ({line})"
    return (f"{detail}: on its own training taps it reaches tau {evaluation['trained']['tau_macro']:.2f}, on the taps "
            f"dflash-eval computes {evaluation['ours']['tau_macro']:.2f} ({paired_figure(gap)})", first["kind"])


def trained_taps_section(summary: dict[str, Any], entry, target, settings, reporter) -> None:
    """Adds summary["trained_taps"] (the trained-taps document) and, when it explains the gap, the verdict."""
    from ...commands.trained_taps import TrainedTapsSettings, trained_taps

    dtype = str(target.dtype).removeprefix("torch.")
    taps = TrainedTapsSettings(data=settings.doctor.trained_taps, target=str(target.path), drafter=str(entry.path),
                               limit=DOCTOR_SAMPLES, dtype=dtype if dtype == "bfloat16" else "float32", seed=settings.seed)
    done = trained_taps(taps, settings, reporter, target=target)
    summary["trained_taps"] = done.result
    explained = explains(done.result)
    if explained is None:
        return
    text, kind = explained
    if summary.get("finding") is None:
        summary["verdict"], summary["finding"] = text, f"trained taps: {kind}"
    else:
        summary["verdict"] = f"{summary['verdict']}; also {text}"
