"""What the numbers of each result file must satisfy, one check per file type, applied wherever that file is
read: a samples.jsonl row (`check_samples_row`), a run document (run.json, run.partial.json:
`check_run_document`, its doctor section included) and a track.jsonl row (`check_track_row`).

Why: `diff` and `merge` recompute from the rows and refused an edited one (accepted 8 of 7 drafted) with a
schema message or an internal error, while `report` and `show` rendered it (`accepted 8/7`, exit 0). A number
that cannot be (more accepted than drafted, a rate outside [0, 1], a tau below 1, counts that do not add up,
a metric that is not what its counts give) is refused by the reader, by name, whichever command reads it.

The rules (the TypedDicts in run_document.py and row_documents.py document the fields):
- counts (`check_counts`, metrics.AcceptanceCounts): non-negative integers; the histogram of n sums to the
  steps and sum n h(n) is the accepted tokens; reach_i = steps with n >= i = sum of h(n > i - 1) and never
  above its denominator (steps that drafted slot i), the denominators never above the steps and summing to
  the drafted tokens; marginal right <= valid; per prompt 1 <= steps <= committed <= B x steps, the prompts'
  steps and committed tokens summing to the totals (committed = steps + accepted).
- metrics (`check_metrics`): exactly what results.metrics_summary gives from the counts beside them (tau macro
  and micro, steps, reach, conditional, marginal, histogram, acceptance rate, slot counts); the tau interval
  within [1, B]. Estimates (temperature > 0): taus in [1, B], alpha and expected reach in [0, 1].
- a counted row: the walk chains (a_0 = prompt length, a_{s+1} = a_s + committed_s), commits every
  continuation token but the first, each step 1 <= drafted <= B - 1 and accepted n = committed - 1 <= drafted;
  per anchor n(a) = the leading right slots of its bits, and a walk step commits min(n(a) + 1, tokens left)
  (model/engine.py walk); its counts are what the walk and the bits give; per-step lists one entry per step.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .. import metrics as M
from ..errors import InputError

TOLERANCE = 1e-9  # relative: a stored ratio equals its recomputation up to float rounding


class Impossible(ValueError):
    """A number that breaks an invariant (the message says which)."""


def _int(value: Any, what: str, low: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise Impossible(f"{what} is {value!r}, not an integer >= {low}")
    return value


def _ints(values: Any, what: str, low: int = 0) -> list[int]:
    if not isinstance(values, list):
        raise Impossible(f"{what} is not a list")
    return [_int(v, f"{what}[{i}]", low) for i, v in enumerate(values)]


def _close(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, list) or isinstance(b, list):
        return isinstance(a, list) and isinstance(b, list) and len(a) == len(b) and all(map(_close, a, b))
    if isinstance(a, bool) or not isinstance(a, (int, float)):
        return False
    return math.isfinite(a) and math.isclose(a, b, rel_tol=TOLERANCE, abs_tol=TOLERANCE)


def counts_of(data: Any) -> M.AcceptanceCounts:
    """An AcceptanceCounts dict, every invariant checked (module docstring); Impossible names the first broken."""
    if not isinstance(data, dict):
        raise Impossible("counts is not an object")
    B = _int(data.get("block_size"), "counts.block_size", 2)
    for key in ("steps", "accepted_draft_tokens", "drafted_tokens"):
        _int(data.get(key), f"counts.{key}")
    for key in ("accept_length_histogram", "reach_counts", "reach_denominators", "marginal_correct", "marginal_total"):
        _ints(data.get(key), f"counts.{key}")
    per_prompt = data.get("per_prompt")
    if not isinstance(per_prompt, dict) or not all(isinstance(v, list) and len(v) == 2 for v in per_prompt.values()):
        raise Impossible("counts.per_prompt is not an object of [steps, committed] pairs")
    try:
        c = M.AcceptanceCounts.from_dict(data)
    except (TypeError, ValueError) as exc:
        raise Impossible(f"counts: {exc}") from None
    h = c.accept_length_histogram
    if sum(h) != c.steps:
        raise Impossible(f"counts: the histogram of accepted lengths sums to {sum(h)}, not the {c.steps} steps")
    if sum(n * k for n, k in enumerate(h)) != c.accepted_draft_tokens:
        raise Impossible(f"counts: the histogram gives {sum(n * k for n, k in enumerate(h))} accepted tokens, "
                         f"not {c.accepted_draft_tokens}")
    if c.accepted_draft_tokens > c.drafted_tokens:
        raise Impossible(f"counts: {c.accepted_draft_tokens} accepted tokens exceed the {c.drafted_tokens} drafted")
    if sum(c.reach_denominators) != c.drafted_tokens:
        raise Impossible("counts: the per-slot drafted steps do not sum to the drafted tokens")
    previous = c.steps
    for i in range(B - 1):
        slot, right, tried = i + 1, c.reach_counts[i], c.reach_denominators[i]
        if right != sum(h[slot:]):
            raise Impossible(f"counts: {right} steps reach slot {slot}, the histogram says {sum(h[slot:])}")
        if not right <= tried <= previous:
            raise Impossible(f"counts: slot {slot} is reached by {right} of {tried} steps that drafted it "
                             f"({previous} drafted the slot before)")
        previous = tried
        if c.marginal_correct[i] > c.marginal_total[i]:
            raise Impossible(f"counts: slot {slot} is right at {c.marginal_correct[i]} of {c.marginal_total[i]} anchors")
    for pid, (steps, committed) in c.per_prompt.items():
        if not 1 <= steps <= committed <= B * steps:
            raise Impossible(f"counts: prompt {pid!r} commits {committed} tokens in {steps} steps (each step "
                             f"commits 1 to {B})")
    if c.per_prompt and sum(s for s, _ in c.per_prompt.values()) != c.steps:
        raise Impossible("counts: the prompts' steps do not sum to the steps")
    if sum(t for _, t in c.per_prompt.values()) != c.steps + c.accepted_draft_tokens:
        raise Impossible("counts: the prompts' committed tokens are not steps + accepted tokens")
    return c


def metrics_problem(metrics: Any, c: M.AcceptanceCounts) -> str | None:
    """How `metrics` differs from what its counts give (results.metrics_summary), or None."""
    if not isinstance(metrics, dict):
        return "metrics is not an object"
    expected: dict[str, Any] = {"steps": c.steps, "histogram": list(c.accept_length_histogram)}
    if c.steps:
        expected.update(tau_macro=M.tau_macro(c), tau_micro=M.tau_micro(c), reach=M.reach(c, denominator="all"),
                        conditional=M.conditional(c, denominator="all"), token_acceptance_rate=M.token_acceptance_rate(c),
                        marginal=M.marginal(c) if any(c.marginal_total) else [], slot_counts=M.slot_fractions(c))
    else:
        expected.update(tau_macro=None, tau_micro=None)
    for key, value in expected.items():
        if key in metrics and not (metrics[key] == value or _close(metrics[key], value)):
            return f"metrics.{key} is {metrics[key]!r}, its counts give {value!r}"
    ci = metrics.get("tau_macro_ci")
    if ci is not None and not (isinstance(ci, list) and len(ci) == 2 and all(_number(x) for x in ci)
                               and 1 <= ci[0] <= ci[1] <= c.block_size):
        return f"metrics.tau_macro_ci is {ci!r}, not an interval within [1, {c.block_size}]"
    return None


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def estimate_problem(metrics: Any, block_size: int) -> str | None:
    """An estimate's summary (estimates.summary): taus within [1, B], alpha and expected reach within [0, 1]."""
    if not isinstance(metrics, dict):
        return "metrics is not an object"
    for key in ("tau_macro", "tau_micro"):
        value = metrics.get(key)
        if value is not None and not (_number(value) and 1 <= value <= block_size):
            return f"metrics.{key} is {value!r}, outside [1, {block_size}]"
    for key in ("alpha", "expected_reach"):
        for value in metrics.get(key) or []:
            if value is not None and not (_number(value) and 0 <= value <= 1):
                return f"metrics.{key} holds {value!r}, outside [0, 1]"
    return None


def _check_measured(entry: Mapping[str, Any], where: str) -> None:
    """counts + metrics of one drafter object (or one of its parts: a depth bucket, a draft length)."""
    if entry.get("counts") is None:
        B = entry.get("block_size") or (entry.get("spec") or {}).get("block_size")
        problem = estimate_problem(entry.get("metrics"), B if isinstance(B, int) else 1 << 30)
    else:
        problem = metrics_problem(entry.get("metrics"), counts_of(entry["counts"]))
    if problem:
        raise Impossible(f"{where}: {problem}")


PARTS = ("by_depth", "by_segment", "by_token_class")


def check_run_document(run: dict[str, Any], path: Path | str) -> None:
    """run.json (or run.partial.json): every drafter's counts and the metrics beside them, and those of its
    depth buckets, segments, token classes and draft lengths; its doctor section. One InputError naming the
    file, the drafter and the number."""
    drafters = run.get("drafters")
    if not isinstance(drafters, list):
        return  # the shape is the schema reader's to refuse (results.read_run_document, core/documents/run_document.py)
    try:
        for d in drafters:
            if not isinstance(d, dict):
                continue
            name = f"drafter {d.get('name')!r}"
            _check_measured(d, name)
            for key in PARTS:
                for part in d.get(key) or []:
                    if isinstance(part, dict) and part.get("counts") is not None:
                        _check_measured(part, f"{name} {key} {part.get('bucket') or part.get('segment') or part.get('token_class')}")
            for entry in d.get("by_draft_length") or []:
                if isinstance(entry, dict) and entry.get("counts") is not None:
                    _check_measured(entry, f"{name} at draft length {entry.get('k')}")
        if isinstance(run.get("doctor"), dict):
            check_doctor_document(run["doctor"], path)
    except Impossible as exc:
        raise InputError(path, f"{exc}; the file was edited or damaged") from None


def check_doctor_document(doctor: dict[str, Any], path: Path | str) -> None:
    """doctor.json (or run.json's doctor section): each variant's tau at least 1, each share finite, every
    interval ordered."""
    try:
        for variant in doctor.get("variants") or []:
            tau = variant.get("tau_macro") if isinstance(variant, dict) else None
            if tau is not None and not (_number(tau) and tau >= 1):
                raise Impossible(f"doctor variant {variant.get('variant')!r} has tau {tau!r}, below 1")
        gap = doctor.get("gap")
        for row in (gap or {}).get("variants") or [] if isinstance(gap, dict) else []:
            for key in ("closed",):
                d = row.get(key)
                if isinstance(d, dict) and not (all(_number(d.get(k)) for k in ("estimate", "low", "high"))
                                                and d["low"] <= d["high"] and 0 <= d.get("p_value", 0) <= 1):
                    raise Impossible(f"doctor gap row {row.get('variant')!r} has the interval {d!r}")
            ci = row.get("share_ci")
            if ci is not None and not (isinstance(ci, list) and len(ci) == 2 and ci[0] <= ci[1]):
                raise Impossible(f"doctor gap row {row.get('variant')!r} has the share interval {ci!r}")
    except (Impossible, TypeError, AttributeError) as exc:
        raise InputError(path, f"{exc}; the file was edited or damaged") from None


def _walk_problem(row: Mapping[str, Any], B: int, prefix: str = "") -> str | None:
    p = _int(row.get("prompt_len"), "prompt_len", 0)
    n_cont = _int(row.get("continuation_len"), "continuation_len", 0)
    anchors = _ints(row.get("walk_anchors"), f"{prefix}walk_anchors")
    lengths = _ints(row.get("walk_accept_lengths"), f"{prefix}walk_accept_lengths", 1)
    drafted = _ints(row.get("walk_drafted"), f"{prefix}walk_drafted", 1)
    if not len(anchors) == len(lengths) == len(drafted):
        return f"{prefix}walk_anchors, walk_accept_lengths and walk_drafted have {len(anchors)}, {len(lengths)}, {len(drafted)} steps"
    end = p + max(n_cont - 1, 0)  # the last position a step can commit (the continuation's last token)
    if sum(lengths) != max(n_cont - 1, 0) and not (anchors and anchors[-1] < end <= anchors[-1] + lengths[-1]):
        # (runs written before the committed-tokens rule let the last step commit its bonus past the end)
        return f"{prefix}the walk commits {sum(lengths)} tokens, the continuation has {max(n_cont - 1, 0)} after the first"
    a = p
    for s, (anchor, committed, d) in enumerate(zip(anchors, lengths, drafted)):
        if anchor != a:
            return f"{prefix}step {s} is anchored at {anchor}, the walk is at {a}"
        if d > B - 1:
            return f"{prefix}step {s} drafts {d} tokens, more than the block's {B - 1}"
        if committed - 1 > d:
            return f"{prefix}step {s} accepts {committed - 1} of {d} drafted tokens (accepted <= drafted)"
        a += committed
    return None


def _drafts_problem(row: Mapping[str, Any]) -> str | None:
    """The walk's drafts against the continuation they were scored on: each step's accepted drafts ARE the
    continuation's tokens at their slots (a step accepts the leading drafts the target agrees with, greedy or
    by rejection sampling, and commits them), and the first draft it refused is not (greedy: the target's
    token differs; sampled: a refused draft has no mass left in the residual it is resampled from), except
    at the walk's last step, which the continuation's end may cut. With per-anchor bits, a walk anchor's bit j
    is exactly whether its draft at slot j + 1 equals the continuation there. An edited continuation token
    (the draft at that slot still counted as accepted) is refused here."""
    drafts, cont = row.get("walk_drafts"), row.get("label_ids", row.get("continuation_ids"))
    if drafts is None or cont is None:
        return None
    p = row["prompt_len"]
    # what the drafts were scored against: the continuation, or a training sample's labels (trained-taps)
    what = "labels" if "label_ids" in row else "continuation"
    cont = _ints(cont, "label_ids" if "label_ids" in row else "continuation_ids")
    bits = row.get("anchor_slot_correct")
    last = len(row["walk_anchors"]) - 1
    for s, (a, committed, drafted, block) in enumerate(zip(row["walk_anchors"], row["walk_accept_lengths"],
                                                           row["walk_drafted"], drafts)):
        block = _ints(block, f"walk_drafts[{s}]")
        if len(block) < drafted:  # (the block may hold drafts past the continuation's end: not scored)
            return f"walk_drafts[{s}] holds {len(block)} drafts, walk_drafted says {drafted}"
        at = a - p + 1  # the continuation index of slot 1
        for j in range(committed - 1):
            if block[j] != cont[at + j]:
                return (f"step {s} accepted its draft {block[j]} at slot {j + 1}, but the {what} holds "
                        f"{cont[at + j]} there")
        n = committed - 1
        if s < last and n < drafted and at + n < len(cont) and block[n] == cont[at + n]:
            return f"step {s} refused its draft {block[n]} at slot {n + 1}, which is the {what}'s token there"
        if isinstance(bits, list) and 0 <= a - p < len(bits) and isinstance(bits[a - p], int):
            for j in range(min(drafted, len(cont) - at)):
                if bool(bits[a - p] >> j & 1) != (block[j] == cont[at + j]):
                    return (f"anchor {a}'s slot {j + 1} is marked {'right' if bits[a - p] >> j & 1 else 'wrong'}, "
                            f"its draft and the {what} say otherwise")
    return None


def _row_problem(row: Mapping[str, Any], block_size: int | None) -> str | None:  # noqa: C901 (past the ceiling before it was set; split by idea when next touched)
    if "walk_anchors" not in row:  # an offline estimate's row (temperature > 0)
        alphas = row.get("anchor_alphas")
        if not isinstance(alphas, list) or not all(isinstance(s, list) and all(_number(x) and 0 <= x <= 1 for x in s)
                                                   for s in alphas):
            return "anchor_alphas are not acceptance probabilities in [0, 1]"
        return None
    c = counts_of(row.get("counts"))
    B = c.block_size
    if block_size is not None and B != block_size:
        return f"counts have block size {B}, the drafter {block_size}"
    problem = _walk_problem(row, B)
    if problem:
        return problem
    pid, p, n_cont = str(row.get("prompt_id")), row["prompt_len"], row["continuation_len"]
    for key, length in (("continuation_ids", n_cont), ("continuation_pieces", n_cont), ("walk_drafts", len(row["walk_anchors"])),
                        ("walk_draft_pieces", len(row["walk_anchors"])), ("walk_flags", len(row["walk_anchors"]))):
        if key in row and (not isinstance(row[key], list) or len(row[key]) != length):
            return f"{key} does not hold {length} entries"
    problem = _drafts_problem(row)
    if problem:
        return problem
    steps = list(zip(row["walk_anchors"], row["walk_accept_lengths"], row["walk_drafted"]))
    expected = M.AcceptanceCounts(block_size=B)
    if steps:
        expected = expected + M.AcceptanceCounts.from_walk(pid, [n - 1 for _, n, _ in steps], B, [d for *_, d in steps])
    bits = row.get("anchor_slot_correct")
    accepted = row.get("anchor_accepted")
    T = p + n_cont
    if accepted is not None:
        accepted = _ints(accepted, "anchor_accepted")
        if len(accepted) != max(n_cont - 1, 0) or any(n > B - 1 for n in accepted):
            return f"anchor_accepted does not hold one n in 0..{B - 1} per anchor"
        for s, (a, committed, _) in enumerate(steps):
            if committed not in (min(accepted[a - p] + 1, T - 1 - a), accepted[a - p] + 1):  # (the older rule)
                return f"step {s} commits {committed} tokens, its anchor accepted {accepted[a - p]}"
    if bits is not None:
        from ..breakdown import slot_table

        bits = _ints(bits, "anchor_slot_correct")
        if len(bits) != max(n_cont - 1, 0) or any(b >= 1 << (B - 1) for b in bits):
            return f"anchor_slot_correct does not hold one {B - 1}-bit mask per anchor"
        if accepted is not None:
            for i, b in enumerate(bits):
                lead = 0
                while b >> lead & 1:
                    lead += 1
                if lead != accepted[i]:
                    return f"anchor {p + i} has {lead} leading right slots, anchor_accepted says {accepted[i]}"
        if bits:
            right, scored = slot_table(bits, range(p, T - 1), T, B)
            expected = expected + M.AcceptanceCounts.from_marginal(right, B, valid=scored)
    stored = c.to_dict()
    fields = ["per_prompt", "steps", "accepted_draft_tokens", "drafted_tokens", "accept_length_histogram",
              "reach_counts", "reach_denominators"] + (["marginal_correct", "marginal_total"] if bits is not None else [])
    wrong = [f for f in fields if stored[f] != expected.to_dict()[f]]
    if wrong:
        return f"counts.{wrong[0]} is not what the walk gives ({stored[wrong[0]]} vs {expected.to_dict()[wrong[0]]})"
    for k, entry in (row.get("by_draft_length") or {}).items():
        if not isinstance(entry, dict) or not str(k).isdigit() or not 1 <= int(k) < B - 1:
            return f"by_draft_length[{k!r}] is not a shorter draft length's walk"
        part = counts_of(entry.get("counts"))
        problem = _walk_problem({**row, **entry}, int(k) + 1, f"by_draft_length[{k}]: ")
        if problem:
            return problem
        walk = M.AcceptanceCounts.from_walk(pid, [n - 1 for n in entry["walk_accept_lengths"]], int(k) + 1,
                                            entry["walk_drafted"]) if entry["walk_anchors"] else M.AcceptanceCounts(int(k) + 1)
        if part.block_size != int(k) + 1 or any(part.to_dict()[f] != walk.to_dict()[f] for f in fields[:7]):
            return f"by_draft_length[{k}].counts are not what its walk gives"
    problem = _tree_problem(row, pid, B, fields[:7])  # --tree-budgets: each budget's walk (core/tree.py)
    if problem:
        return problem
    agree = row.get("self_consistency")
    if agree is not None and not (isinstance(agree, list) and len(agree) == 2
                                  and 0 <= _int(agree[0], "self_consistency") <= _int(agree[1], "self_consistency")):
        return f"self_consistency {agree!r} is not [agreeing, total] with agreeing <= total"
    return None


def _tree_problem(row: Mapping[str, Any], pid: str, B: int, fields: list[str]) -> str | None:
    """A row's tree walks (--tree-budgets): each a walk as the chain's must be, its counts what it gives, one
    failure kind per step."""
    tree = row.get("tree")
    if tree is None:
        return None
    walks = tree.get("walks") if isinstance(tree, dict) else None
    if not isinstance(walks, dict) or sorted(walks, key=lambda k: int(k) if str(k).isdigit() else -1) != [
            str(b) for b in tree.get("budgets") or []]:
        return "tree.walks is not one walk per budget of tree.budgets"
    for budget, entry in walks.items():
        problem = _walk_problem({**row, **entry}, B, f"tree.walks[{budget}]: ")
        if problem:
            return problem
        walk = M.AcceptanceCounts.from_walk(pid, [n - 1 for n in entry["walk_accept_lengths"]], B,
                                            entry["walk_drafted"]) if entry["walk_anchors"] else M.AcceptanceCounts(B)
        if any(counts_of(entry.get("counts")).to_dict()[f] != walk.to_dict()[f] for f in fields):
            return f"tree.walks[{budget}].counts are not what its walk gives"
        if sum((entry.get("failures") or {}).values()) != len(entry["walk_anchors"]):
            return f"tree.walks[{budget}].failures do not count one kind per step"
    return None


def check_samples_row(row: Mapping[str, Any], path: Path | str, *, block_size: int | None = None) -> None:
    """One samples.jsonl row (module docstring); `block_size`: the drafter's B when the reader knows it."""
    try:
        problem = _row_problem(row, block_size)
    except Impossible as exc:
        problem = str(exc)
    if problem:
        sample = f" sample {row.get('sample')}" if row.get("sample") else ""
        raise InputError(path, f"the row of prompt {row.get('prompt_id')!r}, drafter {row.get('drafter')!r}{sample}: "
                               f"{problem}; the file was edited or damaged")


def check_track_row(row: Mapping[str, Any], path: Path | str, number: int) -> None:
    """One track.jsonl row: its role and step, its counts and the metrics copied beside them."""
    try:
        if row.get("role") not in ("checkpoint", "reference"):
            raise Impossible(f"role {row.get('role')!r} is not checkpoint or reference")
        if row.get("step") is not None:
            _int(row["step"], "step")
        _check_measured(row, f"checkpoint {row.get('name')!r}")
        if row.get("counts") is not None and row.get("block_size") != row["counts"]["block_size"]:
            raise Impossible(f"block_size {row.get('block_size')!r} is not its counts' {row['counts']['block_size']}")
    except Impossible as exc:
        raise InputError(path, f"line {number}: {exc}; the file was edited or damaged") from None
