"""Served minus offline: the intervals `served` puts on the gap between a server's counts and an offline run
(Wilson and Newcombe for per-position shares, a normal interval for the mean accepted length), and the
per-position / tau comparison itself. Apart from served.py (which reads what a server wrote) because the
per-request reconciliation uses the same intervals."""

from __future__ import annotations

import math
from typing import Any, Sequence

from .counts import Z95, Served, served_histogram, summary


def wilson(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of k successes in n trials."""
    p, z2 = k / n, z * z
    centre, half = (p + z2 / (2 * n)) / (1 + z2 / n), z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def proportion_gap(k1: int, n1: int, k2: int, n2: int, z: float = Z95) -> tuple[float, float, float]:
    """p1 - p2 with Newcombe's hybrid score interval (method 10, from two Wilson intervals)."""
    p1, p2 = k1 / n1, k2 / n2
    (l1, u1), (l2, u2) = wilson(k1, n1, z), wilson(k2, n2, z)
    d = p1 - p2
    return d, d - math.sqrt((p1 - l1) ** 2 + (u2 - p2) ** 2), d + math.sqrt((u1 - p1) ** 2 + (p2 - l2) ** 2)


def mean_gap(h1: Sequence[int], h2: Sequence[int], z: float = Z95) -> tuple[float, float, float]:
    """Difference of mean accepted lengths of two histograms (index = n), normal approximation."""
    def moments(h):
        total = sum(h)
        mean = sum(i * c for i, c in enumerate(h)) / total
        return mean, sum(c * (i - mean) ** 2 for i, c in enumerate(h)) / total / total
    (m1, v1), (m2, v2) = moments(h1), moments(h2)
    half = z * math.sqrt(v1 + v2)
    return m1 - m2, m1 - m2 - half, m1 - m2 + half


def gap_to_offline(s: Served, steps: int, reach_counts: Sequence[int], histogram: Sequence[int]) -> dict[str, Any]:
    """Served minus offline, per position (vLLM's form: accepted at slot i / all steps) with Newcombe intervals
    where both sides have counts, and tau with a normal interval where both histograms are known. Steps are
    treated as independent (steps of one request are not: the intervals are too narrow by that much)."""
    offline_slots = len(reach_counts)
    k = None if s.accepted_per_pos is None else len(s.accepted_per_pos)
    rows = []
    for i in range(offline_slots if k is None else min(k, offline_slots)):
        offline = reach_counts[i] / steps
        row = {"position": i + 1, "offline": offline, "offline_counts": [reach_counts[i], steps],
               "served": None, "gap": None, "low": None, "high": None}
        if k is not None and s.drafts:
            row["served"] = s.accepted_per_pos[i] / s.drafts
            row["served_counts"] = [s.accepted_per_pos[i], s.drafts]
            row["gap"], row["low"], row["high"] = proportion_gap(s.accepted_per_pos[i], s.drafts, reach_counts[i], steps)
        rows.append(row)
    offline_tau = 1 + sum(i * c for i, c in enumerate(histogram)) / steps
    served_tau = summary(s)["tau"]
    tau = {"served": served_tau, "offline": offline_tau, "gap": None, "low": None, "high": None,
           "comparable": k is None or k == offline_slots}
    if served_tau is not None:
        tau["gap"] = served_tau - offline_tau
    hist = served_histogram(s)
    if hist is not None and s.histogram is not None and len(hist) < len(histogram):
        hist = hist + [0] * (len(histogram) - len(hist))  # a pooled histogram stops at the longest accept seen
    if hist is not None and len(hist) == len(histogram):
        tau["gap"], tau["low"], tau["high"] = mean_gap(hist, histogram)
    why = []
    if k is not None and k != offline_slots:
        why.append(f"the server drafts {k} tokens per step, the offline run {offline_slots} (block size "
                   f"{offline_slots + 1}); a DFlash block of {k + 1} is not a prefix of the longer block, so tau "
                   "is not comparable and per-position gaps are indicative only")
    if s.draft_tokens is not None and k and s.drafts and s.draft_tokens != s.drafts * k:
        why.append(f"the server's drafts were not all {k} tokens long ({s.draft_tokens} drafted tokens in {s.drafts} "
                   "drafts): per-position shares over all drafts are biased low for later positions (vLLM counts "
                   "drafts per position but does not export them)")
    if tau["low"] is None:
        why.append("no tau interval: " + ("the source has no counts" if s.drafts is None else
                                          "the per-position counts do not determine the served histogram"))
    return {"per_position": rows, "tau": tau, "caveats": why,
            "interval": "95% Newcombe (per position) / normal (tau); steps treated as independent"}
