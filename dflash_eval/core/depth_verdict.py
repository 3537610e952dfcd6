"""Does a drafter's acceptance fall away from a reference curve past some context depth, and from which?

A drafter whose sliding layers are served with full attention, or that is served a window smaller than
the one it was trained with, is untouched while the whole context fits the window and loses past it: the
damage has a depth. The doctor (doctor/commands/windows.py) evaluates window variants by depth bucket
(breakdown.py) and asks this module where one curve falls away from another. Pure and exact, so the rule
is tested on hand-computed curves.

The rule (`falls_away(subject, reference)`), on the buckets of one set of edges, in depth order:

1. a bucket is *comparable* when both curves have a tau there and at least `min_steps` walk steps each;
   the others are skipped (they neither break nor support a fall);
2. in a comparable bucket the subject is *below* when reference tau - subject tau > `margin`;
3. the subject *falls away past depth D* when D is the lower edge of the first comparable bucket k such
   that the subject is below in k and in every later comparable bucket, and is not below in at least one
   comparable bucket before k (it held up there: the loss starts at a depth). Result kind "falls_away";
4. below in every comparable bucket: kind "throughout" (a loss at every depth measured, not one that
   starts at a depth; the doctor's paired table already shows it);
5. otherwise (never below, or below somewhere but recovering later): None.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from . import metrics as M
from .breakdown import depth_bounds, depth_label

MARGIN = 0.25  # tau (tokens per step) a bucket must lose against the reference to count as below
MIN_STEPS = 20  # walk steps each side needs in a bucket for it to be compared


@dataclass(frozen=True)
class DepthPoint:
    """One depth bucket of one curve: [low, high) anchor positions (high None: unbounded), its tau (None
    when the bucket has no steps) and the walk steps behind it."""

    low: int
    high: int | None
    tau: float | None
    steps: int

    @property
    def label(self) -> str:
        return depth_label(self.low, self.high)


@dataclass(frozen=True)
class FallAway:
    kind: Literal["falls_away", "throughout"]
    depth: int  # D: the lower edge of the first bucket of the fall (of the first comparable bucket: throughout)
    bucket: str  # that bucket's label
    held_until: str | None  # the last comparable bucket where the subject was not below (falls_away only)
    subject_tau: float  # in the first bucket of the fall
    reference_tau: float
    worst_drop: float  # the largest reference - subject over the fallen buckets
    buckets_below: int  # comparable buckets from D on (all below)
    margin: float
    min_steps: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def depth_curve(parts: Mapping[int, M.AcceptanceCounts], edges: Sequence[int]) -> list[DepthPoint]:
    """Every bucket of `edges` (empty ones too) from counts per bucket index (breakdown.depth_bucket);
    tau is tau_macro, as everywhere in the doctor."""
    out = []
    for index, (low, high) in enumerate(depth_bounds(edges)):
        counts = parts.get(index)
        steps = counts.steps if counts is not None else 0
        out.append(DepthPoint(low, high, M.tau_macro(counts) if counts is not None and steps else None, steps))
    return out


def falls_away(subject: Sequence[DepthPoint], reference: Sequence[DepthPoint], *, margin: float = MARGIN,
               min_steps: int = MIN_STEPS) -> FallAway | None:
    """The module docstring's rule. Both curves must have the same buckets (ValueError otherwise)."""
    if [(p.low, p.high) for p in subject] != [(p.low, p.high) for p in reference]:
        raise ValueError("the two depth curves have different buckets")
    # (subject point, reference point, their two taus): the buckets both measured, each with enough steps
    comparable = [(s, r, s.tau, r.tau) for s, r in zip(subject, reference)
                  if s.tau is not None and r.tau is not None and s.steps >= min_steps and r.steps >= min_steps]
    if not comparable:
        return None
    below = [r_tau - s_tau > margin for _, _, s_tau, r_tau in comparable]
    start = len(below)
    while start > 0 and below[start - 1]:
        start -= 1  # the fallen tail: below in every bucket from `start` on
    if start == len(below):
        return None
    fallen = comparable[start:]
    s, _, s_tau, r_tau = fallen[0]
    return FallAway(kind="falls_away" if start > 0 else "throughout", depth=s.low, bucket=s.label,
                    held_until=comparable[start - 1][0].label if start > 0 else None,
                    subject_tau=s_tau, reference_tau=r_tau,
                    worst_drop=max(rt - st for _, _, st, rt in fallen), buckets_below=len(fallen),
                    margin=margin, min_steps=min_steps)


def describe(fall: FallAway, subject: str, reference: str) -> str:
    """One sentence: '<subject> falls away from <reference> past depth D (bucket ...): tau x vs y there, up
    to z lower; it held up to bucket ...'."""
    if fall.kind == "throughout":
        return (f"{subject} is below {reference} at every depth measured, from bucket {fall.bucket} on "
                f"(tau {fall.subject_tau:.2f} vs {fall.reference_tau:.2f} there, up to {fall.worst_drop:.2f} lower)")
    return (f"{subject} falls away from {reference} past depth {fall.depth} (bucket {fall.bucket}: tau "
            f"{fall.subject_tau:.2f} vs {fall.reference_tau:.2f}, up to {fall.worst_drop:.2f} lower in the "
            f"{fall.buckets_below} bucket{'s' if fall.buckets_below != 1 else ''} from there; it held up to "
            f"bucket {fall.held_until})")
