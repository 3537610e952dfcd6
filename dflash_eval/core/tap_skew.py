"""Stored training taps against the target's own: the numbers (plain sums, additive over samples) and what a
difference means, in one line per slot.

Per stored slot and per tensor of ours it is compared with (same positions, elements finite in the stored
slot), `TapStats` keeps sums; the figures are divided when shown:

    cosine        sum(s * o) / sqrt(sum(s^2) sum(o^2))
    relative L2   sqrt(sum((s - o)^2) / sum(o^2))          (o: ours, the reference)
    max |s - o|   over the compared elements
    bf16-equal    share of elements whose bf16 roundings are equal

The noise floor is the same statistic between our own bf16 and our fp32 taps on the same ids (for fp8 data:
our bf16 taps through hs_connectors' fp8 round trip against fp32): what a correct bf16 extraction moves by.
A slot is "within the noise floor" when its relative L2 is at most NOISE_FACTOR times the floor's at that
layer. A slot is named by the neighbouring layer it matches when that one is within its floor and the slot's own
layer is not (or is, but at least twice as far: bf16 hybrids have floors near 10% at deep layers); otherwise it
is judged ok, all zero (vLLM before PR #46301 on hybrid targets, speculators #613), non-finite (vLLM #45734) or
unmatched.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any, cast

NOISE_FACTOR = 4.0  # a real trainer's bf16 pass (other kernels, fused add-norm, batch shapes) vs our CPU bf16 pass
NOISE_EPS = 1e-6  # relative L2 below which two tensors are the same whatever the floor says


@dataclass
class TapStats:
    """Sums over one stored slot against one tensor of ours, over the samples compared."""

    elements: int = 0  # stored elements
    compared: int = 0  # of them finite (the sums below run over these)
    nonfinite: int = 0
    zero: int = 0  # stored elements exactly 0
    samples: int = 0
    zero_samples: int = 0  # samples whose whole slot is 0
    nonfinite_samples: int = 0
    dot: float = 0.0
    ss_stored: float = 0.0
    ss_ours: float = 0.0
    ss_diff: float = 0.0
    max_abs: float = 0.0
    bf16_equal: int = 0

    def __add__(self, other: TapStats) -> TapStats:
        values = {f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)}
        values["max_abs"] = max(self.max_abs, other.max_abs)
        return TapStats(**values)

    @property
    def cosine(self) -> float | None:
        denominator = math.sqrt(self.ss_stored * self.ss_ours)
        return self.dot / denominator if denominator > 0 else None

    @property
    def rel_l2(self) -> float | None:
        return math.sqrt(self.ss_diff / self.ss_ours) if self.ss_ours > 0 else None

    @property
    def bf16_equal_share(self) -> float | None:
        return self.bf16_equal / self.compared if self.compared else None

    @property
    def all_zero(self) -> bool:
        return self.samples > 0 and self.zero_samples == self.samples

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "cosine": self.cosine, "rel_l2": self.rel_l2, "bf16_equal_share": self.bf16_equal_share}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TapStats:
        return cls(**{f.name: data[f.name] for f in fields(cls)})


def within_noise(stats: TapStats, floor: TapStats | None) -> bool:
    """relative L2 <= NOISE_FACTOR x the floor's (+ NOISE_EPS, for exact copies of exact states)."""
    if stats.rel_l2 is None:
        return False
    bound = NOISE_FACTOR * (floor.rel_l2 or 0.0) if floor is not None and floor.rel_l2 is not None else 0.0
    return stats.rel_l2 <= bound + NOISE_EPS


def _e(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2e}"


def _broken(slot: str, stats: TapStats, hybrid_layer: bool) -> tuple[str, str] | None:
    """(status, line) for a slot that is all zero or holds NaN/inf, else None."""
    if stats.nonfinite:
        return "nonfinite", (f"{slot} holds {stats.nonfinite} NaN/inf values in {stats.nonfinite_samples} of "
                             f"{stats.samples} samples: non-finite hidden states from the extraction (vLLM #45734)")
    if stats.all_zero:
        why = ("a Gated-DeltaNet layer of a hybrid target: vLLM wrote all-zero hidden states for hybrid Qwen3.5-class "
               "targets until vLLM PR #46301 (speculators issue #613)" if hybrid_layer else
               "vLLM's all-zero extraction (PR #46301, speculators issue #613), or a slot never written")
        return "zero", f"{slot} is all zero in every sample: {why}"
    return None


def judge_tap(slot: int, layer: int, against: dict[int, TapStats], floors: dict[int, TapStats],
              hybrid_layer: bool = False) -> dict[str, Any]:
    """One stored fc-input slot labelled `layer` (z-lab numbering): `against[t]` its stats against our tap t
    for t in layer - 1 .. layer + 1 (those that exist; -1 = the embeddings), `floors[t]` the noise floor there."""
    name = f"slot {slot} (layer {layer})"
    base: dict[str, Any] = {"slot": slot, "layer": layer, "role": "tap", "rel_l2": against[layer].rel_l2,
            "floor_rel_l2": floors[layer].rel_l2 if layer in floors else None}
    broken = _broken(name, against[layer], hybrid_layer)
    if broken:
        return {**base, "status": broken[0], "match": None, "line": broken[1]}
    own = against[layer].rel_l2
    # within_noise(s) holds only where s.rel_l2 is a number: every tap in `inside` has one (the casts)
    inside = [t for t in sorted(against) if t != layer and within_noise(against[t], floors.get(t))
              and (own is None or not within_noise(against[layer], floors.get(layer))
                   or 2 * cast(float, against[t].rel_l2) < own)]
    if not inside and within_noise(against[layer], floors.get(layer)):
        return {**base, "status": "ok", "match": layer,
                "line": f"{name} matches our tap {layer} (relative L2 {_e(own)}, noise floor {_e(base['floor_rel_l2'])})"}
    if inside:  # a neighbour within the floor and (where the slot's own layer is too) at least twice as close
        t = min(inside, key=lambda k: cast(float, against[k].rel_l2))
        why = ("the data was numbered from the embeddings (its id k is the stream after k layers, our tap k - 1)"
               if t < layer else "the data was numbered from the first decoder layer where the drafter's ids count "
               "from the embeddings (vLLM ids extracted as z-lab ids)")
        return {**base, "status": "shifted", "match": t,
                "line": f"slot {slot} matches our tap {t}, not {layer}: {why}"}
    closest = min((t for t in against if against[t].rel_l2 is not None), key=lambda k: cast(float, against[k].rel_l2),
                  default=layer)
    return {**base, "status": "unmatched", "match": None,
            "line": f"{name} matches none of our taps {min(against)}..{max(against)}: relative L2 "
                    f"{_e(against[layer].rel_l2)} against a noise floor of {_e(base['floor_rel_l2'])} (closest: tap "
                    f"{closest}, {_e(against[closest].rel_l2)}); other kernels, another target, or damaged data?"}


def judge_teacher(slot: int, expected: str, pre: TapStats, post: TapStats, floor_pre: TapStats | None,
                  floor_post: TapStats | None, fmt: str) -> dict[str, Any]:
    """The stored teacher (the last hidden state the trainer computes its labels from) against our last layer's
    output before the final norm (`pre`) and our final hidden state after it (`post`); `expected`: "pre-norm"
    (speculators: vLLM id n, and the trainer applies the verifier norm) or "post-norm" (DeepSpec)."""
    name = f"slot {slot} (the teacher)"
    base: dict[str, Any] = {"slot": slot, "layer": "teacher", "role": "teacher", "expected": expected,
            "rel_l2_pre_norm": pre.rel_l2, "rel_l2_post_norm": post.rel_l2,
            "floor_pre_norm": floor_pre.rel_l2 if floor_pre else None,
            "floor_post_norm": floor_post.rel_l2 if floor_post else None}
    broken = _broken(name, pre, False)
    if broken:
        return {**base, "status": broken[0], "match": None, "line": broken[1]}
    pre_ok, post_ok = within_noise(pre, floor_pre), within_noise(post, floor_post)
    want_pre = expected == "pre-norm"
    if (pre_ok and want_pre) or (post_ok and not want_pre):
        return {**base, "status": "ok", "match": expected,
                "line": f"{name} matches our last layer's output {'before' if want_pre else 'after'} the final norm, as "
                        f"{fmt} expects (relative L2 {_e(pre.rel_l2 if want_pre else post.rel_l2)})"}
    if post_ok and want_pre:
        return {**base, "status": "post-norm", "match": "post-norm",
                "line": f"the teacher was taken after the final norm: {name} matches our final hidden state after the "
                        f"norm (relative L2 {_e(post.rel_l2)}), and {fmt} applies the verifier's norm to it again (a "
                        "double norm on every label)"}
    if pre_ok and not want_pre:
        return {**base, "status": "pre-norm", "match": "pre-norm",
                "line": f"the teacher was taken before the final norm: {name} matches our last layer's output before "
                        f"the norm (relative L2 {_e(pre.rel_l2)}), and {fmt} applies lm_head to it directly (no norm)"}
    return {**base, "status": "unmatched", "match": None,
            "line": f"{name} matches neither our last layer's output before the final norm (relative L2 "
                    f"{_e(pre.rel_l2)}, floor {_e(base['floor_pre_norm'])}) nor after it ({_e(post.rel_l2)}, floor "
                    f"{_e(base['floor_post_norm'])})"}


HEADLINES = {
    "shifted": "your training taps are the target's layers shifted by one",
    "post-norm": "the teacher was taken after the final norm",
    "pre-norm": "the teacher was taken before the final norm",
    "zero": "the training data's taps are all zero",
    "hybrid-zero": "the training data's hybrid-layer taps are all zero",
    "nonfinite": "the training data's hidden states hold NaN or infinite values",
    "unmatched": "the training taps are not the target's layers (none within the noise floor)",
}


def findings(slots: list[dict[str, Any]], hybrid_layers: set[int]) -> list[dict[str, Any]]:
    """One finding per kind of skew, most telling first: {kind, headline, slots, lines}."""
    kinds: dict[str, list[dict[str, Any]]] = {}
    for judged in slots:
        status = judged["status"]
        if status == "ok":
            continue
        if status == "zero" and judged["role"] == "tap" and judged["layer"] in hybrid_layers:
            status = "hybrid-zero"
        kinds.setdefault(status, []).append(judged)
    order = ["nonfinite", "hybrid-zero", "zero", "shifted", "post-norm", "pre-norm", "unmatched"]
    return [{"kind": kind, "headline": HEADLINES[kind], "slots": [j["slot"] for j in kinds[kind]],
             "lines": [j["line"] for j in kinds[kind]]} for kind in order if kind in kinds]


def verdict(found: list[dict[str, Any]], notes: list[str]) -> str:
    """The one line: the most telling skew with its first slot's detail, or that the taps are the target's."""
    if found:
        first = found[0]
        more = f" (and {len(found) - 1} more finding{'s' if len(found) > 2 else ''})" if len(found) > 1 else ""
        line = first["lines"][0]
        return (line if line.startswith(first["headline"]) else f"{first['headline']}: {line}") + more
    base = "the training taps are the target's own: every stored slot is within the measured bf16 noise floor"
    return base + (f"; note: {notes[0]}" if notes else "")
