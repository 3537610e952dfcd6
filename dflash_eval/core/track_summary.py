"""What a training run's curve says, from track.jsonl rows alone: plain functions, no torch.

- the checkpoints in step order (unknown steps last, in evaluation order), the reference apart;
- best so far: the running maximum of tau macro along the steps (z-lab's tau, as everywhere here);
- the gap: tau macro of a checkpoint minus the reference's (positive: the checkpoint accepts more);
- the latest checkpoint (highest step) against the best one, paired over prompts with `compare.delta_tau`
  (paired bootstrap interval, permutation p): a regression is flagged only when it is significant by
  `compare.verdict`'s rule (the whole interval below 0 and p < 0.05), never on a point estimate;
- a sparkline of tau per step, for terminals and logs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import cast

from .compare import Delta, delta_tau_per_prompt, verdict
from .documents.row_documents import TrackRow
from .snapshots import conflicts

SPARKS = "▁▂▃▄▅▆▇█"


@dataclass
class CurvePoint:
    row: TrackRow
    tau: float | None
    best_so_far: float | None
    is_best: bool  # the best checkpoint of the whole curve
    gap: float | None  # tau - reference tau
    present: bool = True  # False once the folder is gone or holds other weights (a rotating save limit)


@dataclass
class Curve:
    points: list[CurvePoint]
    reference: TrackRow | None
    reference_tau: float | None
    best: CurvePoint | None
    latest: CurvePoint | None
    latest_vs_best: Delta | None = None
    latest_vs_best_verdict: str | None = None
    regression: bool = False  # latest significantly worse than best
    latest_vs_reference: Delta | None = None
    latest_vs_reference_verdict: str | None = None
    notes: list[str] = field(default_factory=list)


def tau_of(row: TrackRow) -> float | None:
    return (row.get("metrics") or {}).get("tau_macro")


def per_prompt_of(row: TrackRow) -> dict[str, tuple[float, float]]:
    """prompt id -> (steps, committed): counted, or expected for an offline estimate (temperature > 0)."""
    source = row["counts"] if row.get("counts") is not None else row["estimate"]
    assert source is not None, "a track row holds counts or an estimate"
    return {pid: (s, t) for pid, (s, t) in source["per_prompt"].items()}


def ordered(rows: list[TrackRow]) -> list[TrackRow]:
    """Checkpoint rows by step (unknown steps last, in the order they were evaluated)."""
    checkpoints = [r for r in rows if r.get("role") == "checkpoint"]
    return sorted(checkpoints, key=lambda r: (r.get("step") is None, r.get("step") or 0))


def sparkline(values: list[float | None], low: float | None = None, high: float | None = None) -> str:
    """One character per value, scaled between low and high (default: the values' range); ' ' for None."""
    known = [v for v in values if v is not None]
    if not known:
        return " " * len(values)
    low = min(known) if low is None else low
    high = max(known) if high is None else high
    span = high - low
    out = []
    for v in values:
        if v is None:
            out.append(" ")
        else:
            level = 0 if span <= 0 else round((min(max(v, low), high) - low) / span * (len(SPARKS) - 1))
            out.append(SPARKS[level])
    return "".join(out)


def curve(rows: list[TrackRow], *, present: dict[str, bool] | None = None, seed: int = 0) -> Curve:
    """The curve of a track: best so far, gap, and the paired latest-vs-best and latest-vs-reference checks.
    `present` maps fingerprint -> whether the checkpoint's folder still holds it (None: not checked)."""
    references = [r for r in rows if r.get("role") == "reference"]
    reference = references[-1] if references else None
    reference_tau = tau_of(reference) if reference else None
    points: list[CurvePoint] = []
    running: float | None = None
    for row in ordered(rows):
        tau = tau_of(row)
        if tau is not None:
            running = tau if running is None else max(running, tau)
        gap = tau - reference_tau if tau is not None and reference_tau is not None else None
        points.append(CurvePoint(row, tau, running, False, gap,
                                 True if present is None else present.get(row["fingerprint"], True)))
    scored = [p for p in points if p.tau is not None]
    best = max(scored, key=lambda p: cast(float, p.tau)) if scored else None  # first of equals: the earliest step
    if best is not None:
        best.is_best = True
    latest = points[-1] if points else None
    result = Curve(points, reference, reference_tau, best, latest)
    # one repository name measured at two snapshots: said, never mixed silently (snapshots.py)
    result.notes.extend(dict.fromkeys(conflicts((label(r), r.get("snapshot"), r.get("architecture") or {})
                                                for r in rows if r.get("role") in ("reference", "checkpoint"))))
    if latest is not None and best is not None and latest is not best and latest.tau is not None:
        try:
            result.latest_vs_best = delta_tau_per_prompt(per_prompt_of(best.row), per_prompt_of(latest.row), seed=seed)
            result.latest_vs_best_verdict = verdict(result.latest_vs_best, label(best.row), label(latest.row))
            result.regression = "is worse than" in result.latest_vs_best_verdict
        except ValueError as exc:  # different prompt sets cannot come from one track; said, not hidden
            result.notes.append(f"latest vs best not compared: {exc}")
    if latest is not None and reference is not None and latest.tau is not None and reference_tau is not None:
        try:
            result.latest_vs_reference = delta_tau_per_prompt(per_prompt_of(reference), per_prompt_of(latest.row),
                                                             seed=seed)
            result.latest_vs_reference_verdict = verdict(result.latest_vs_reference, label(reference),
                                                         label(latest.row))
        except ValueError as exc:
            result.notes.append(f"latest vs reference not compared: {exc}")
    return result


def label(row: TrackRow) -> str:
    if row.get("role") == "reference":
        return f"reference {row['name']}"
    return f"step {row['step']}" if row.get("step") is not None else str(row["name"])
