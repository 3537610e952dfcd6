"""`run --numerics-check N`: how much the run's numbers depend on incidental GEMM shapes, measured on the
run's own first N prompts and recorded as counts in run.json (`provenance.numerics.measured`).

Why: in fp32 a prompt's continuation, its drafts and its walk do not depend on which prompts share a
generation batch, on anchors per drafter forward, or on replay vs the live loop (tested). In bf16 (fla
kernels, a GPU) each of these changes GEMM shapes and so can move near-tie argmaxes. The run fixes the
shapes (the run's generation plan, anchor chunks from the shapes), so its numbers are reproducible;
this check says how much they would move if the shapes were different, on the user's own hardware:

- generation: the continuation the run used (made in its planned batch) against the same prompt
  generated alone (batch of one);
- anchor batch: each drafter's drafts replayed at the run's anchors per forward and at another value
  (one anchor per forward; two when the run's is one);
- live: each drafter's tau in the replay against its tau in the live loop on the same prompts, with the
  paired difference (live - replay) and its paired bootstrap interval over the checked prompts
  (core/compare.paired_row: prompts resampled together, seed 0), and how many live texts equal the
  continuation. Counting equal walks said nothing at benchmark lengths: over 2048 bf16 tokens a walk
  almost never matches step for step, whatever the effect on tau, which is what a result reports.

Cost (`plan --numerics-check N` prices it): per checked prompt one generation alone (batch 1, every new
token), and per drafter two replays and one live loop (a verify and a re-run forward per step): ~2-3 min
per prompt per drafter on a 27B target, ~25-35 min for `--numerics-check 12` with one drafter.

Nothing here touches the run's own numbers or files: it reads the run's trajectory and continuation,
generates alone without the cache, replays and loops without a random draw (greedy), and makes no tap
pass (`work.tap_passes` stays the run's).
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypedDict

from ..core.compare import paired_row


def common_prefix(a: list[int], b: list[int]) -> int:
    """Tokens equal before the first difference (past it, positions no longer correspond)."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def drafts_changed(a: list[list[int]], b: list[list[int]]) -> tuple[int, int, int]:
    """(drafted slots, slots whose draft differs, anchors with any difference) between two replays of the
    same anchors."""
    slots = changed = anchors = 0
    for x, y in zip(a, b, strict=True):
        slots += len(x)
        differ = sum(1 for s, t in zip(x, y, strict=True) if s != t)
        changed += differ
        anchors += int(differ > 0)
    return slots, changed, anchors


class LiveCheck(TypedDict):
    """One drafter's replay-vs-live counts."""

    prompts: int
    texts_equal: int  # prompts whose live text equals the replay's continuation
    # prompt id -> [replay steps, replay committed tokens, live steps, live committed tokens]
    per_prompt: dict[str, list[int]]


@dataclasses.dataclass
class NumericsCheck:
    """Counts over the first `limit` prompts the run evaluates (in this invocation)."""

    limit: int
    generation: dict[str, int] = dataclasses.field(default_factory=lambda: dict.fromkeys(
        ("prompts", "prompts_identical", "tokens", "tokens_before_first_difference"), 0))
    anchor_batch: dict[str, dict[str, int]] = dataclasses.field(default_factory=dict)
    live: dict[str, LiveCheck] = dataclasses.field(default_factory=dict)

    def wants_more(self) -> bool:
        return self.generation["prompts"] < self.limit

    def add(self, target, drafters: dict, prompt_ids: list[int], continuation: list[int], trajectory,
            settings_by_name: dict) -> None:
        """One prompt: `continuation` is what the run used, `trajectory` its one target pass,
        `settings_by_name` each drafter's settings (the run's)."""
        from .continuations import generate_greedy
        from .scoring import score_live, score_on_trajectory

        max_new_tokens = next(iter(settings_by_name.values())).inputs.max_new_tokens
        alone = generate_greedy(target, [prompt_ids], max_new_tokens, 1)[0]
        g = self.generation
        g["prompts"] += 1
        g["prompts_identical"] += int(alone == continuation)
        g["tokens"] += len(continuation)
        g["tokens_before_first_difference"] += common_prefix(continuation, alone)
        for name, drafter in drafters.items():
            settings = settings_by_name[name]
            base = score_on_trajectory(drafter, trajectory, settings)
            ran = base.anchor_batch  # what the engine ran (core/batching.py's rule, or --anchor-batch)
            other = 1 if ran > 1 else 2
            moved = score_on_trajectory(drafter, trajectory, settings.with_sections(
                dataclasses.replace(settings.batching, anchor_batch=other)))
            slots, changed, anchors = drafts_changed(base.drafts, moved.drafts)
            a = self.anchor_batch.setdefault(name, dict.fromkeys(
                ("run", "other", "prompts", "anchors", "anchors_changed", "drafts", "drafts_changed"), 0))
            a.update(run=ran, other=other)
            a["prompts"] += 1
            a["anchors"] += len(base.anchors)
            a["anchors_changed"] += anchors
            a["drafts"] += slots
            a["drafts_changed"] += changed
            live = score_live(target, drafter, prompt_ids, settings)
            w = self.live.setdefault(name, {"prompts": 0, "texts_equal": 0, "per_prompt": {}})
            w["prompts"] += 1
            w["texts_equal"] += int(live.continuation == continuation)
            # [replay steps, replay committed tokens, live steps, live committed tokens]: tau = committed / steps
            w["per_prompt"][trajectory.id] = [len(base.walk_accept_lengths), sum(base.walk_accept_lengths),
                                              len(live.walk_accept_lengths), sum(live.walk_accept_lengths)]

    def to_dict(self) -> dict[str, Any]:
        return {"prompts_asked": self.limit, "generation": dict(self.generation),
                "anchor_batch": {k: dict(v) for k, v in self.anchor_batch.items()},
                "live": {k: live_summary(v) for k, v in self.live.items()}}


PAIRED = ("steps_replay", "steps_live", "tau_replay", "tau_live", "delta_tau_live_minus_replay")


def live_summary(counts: LiveCheck) -> dict[str, Any]:
    """A drafter's live-loop counts with the replay-vs-live figures derived from its per-prompt counts: tau
    macro of each side over the prompts with steps on both (the same prompts), and the paired difference
    live - replay with its paired bootstrap interval and permutation p (core/compare.paired_row, seed 0);
    the figures are None when no prompt has steps on both sides."""
    per_prompt = counts.get("per_prompt") or {}
    row = paired_row({p: (v[0], v[1]) for p, v in per_prompt.items()}, {p: (v[2], v[3]) for p, v in per_prompt.items()})
    figures = dict.fromkeys(PAIRED) if row is None else dict(zip(PAIRED, (
        row["steps_a"], row["steps_b"], row["tau_macro_a"], row["tau_macro_b"], row["delta_tau_macro"])))
    return {**{k: v for k, v in counts.items() if k not in PAIRED}, **figures}


def merge_measured(parts: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The shards' `measured` counts as one document (merge): every count summed over the shards that
    measured (each checked its own first N prompts, so `prompts_asked` becomes N summed over them), the
    per-prompt live counts joined and the replay-vs-live figures computed again over all of them
    (`live_summary`); the anchors-per-forward values compared (`run`, `other`) are the same on every shard
    (from the shapes) and kept; None when no shard measured."""
    parts = [p for p in parts if p]
    if not parts:
        return None
    parts = [{**p, "live": {k: {f: x for f, x in v.items() if f not in PAIRED} for k, v in p.get("live", {}).items()}}
             for p in parts]

    def add(a: Any, b: Any, key: str) -> Any:
        if isinstance(a, dict):
            return {k: add(a[k], b[k], k) if k in b else a[k] for k in a} | {k: v for k, v in b.items() if k not in a}
        if key in ("run", "other"):
            return a
        return a + b

    out = parts[0]
    for part in parts[1:]:
        out = add(out, part, "")
    return {**out, "live": {k: live_summary(v) for k, v in out.get("live", {}).items()}}
