"""Request by request, a server's acceptance beside the offline run of the same prompts: the numbers.

Each engine reports a request in its own terms; they are converted to ours (tau = 1 + accepted drafts /
steps, the bonus token counted once per step, the prefill token not at all) before anything is compared:

| engine | fields (file, function) | to ours |
|---|---|---|
| vLLM 0.33 | `metrics.speculative_decoding` (entrypoints/generate/base/protocol.py `SpeculativeDecodingMetrics`, from v1/metrics/stats.py `RequestSpecDecodeMetrics.to_dict`): `acceptance_histogram` (index = accepted drafts, k + 1 entries), `num_spec_steps`, `num_accepted_draft_tokens`, `num_draft_tokens`, `num_spec_tokens`, `mean_acceptance_length`, `draft_acceptance_rate`; `detailed`: `per_step_accepted` / `per_step_drafted` | steps = num_spec_steps, accepted = num_accepted_draft_tokens: the same tau. `num_draft_tokens` has grammar-invalidated drafts removed (v1/core/sched/scheduler.py `update_from_output`), the histogram not: only the acceptance rate's denominator moves. The last step counts drafts accepted past max_tokens or the stop token (counted before `check_stop`): no target token exists there offline |
| SGLang 0.5.23 | `meta_info` (srt/managers/tokenizer_manager.py `_calculate_spec_decoding_metrics`): `spec_verify_ct`, `spec_num_correct_drafts`, `spec_num_proposed_drafts` (= verify_ct x (draft tokens - 1)), `spec_accept_rate`, `spec_accept_length` = completion_tokens / verify_ct, `spec_correct_drafts_histogram` (grown to the largest count seen) | steps = spec_verify_ct, accepted = spec_num_correct_drafts; `spec_accept_length` counts the prefill token as if a step made it: (1 + steps + accepted) / steps, not ours |

Per prompt: served and offline tau, their difference; over prompts, the paired delta (compare.py); the
histogram shift per accepted length (Newcombe intervals, steps as independent trials); with per-step
arrays and greedy serving, the served walk against the offline one step by step and the first step where
they part. Counts are kept; ratios made when shown.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from . import checks

DEFINITIONS = {
    "vllm": "vLLM: steps = num_spec_steps, accepted = num_accepted_draft_tokens, tau = mean_acceptance_length "
            "(bonus included: ours); num_draft_tokens excludes grammar-invalidated drafts (the acceptance rate's "
            "denominator only); the last step counts drafts accepted past max_tokens or the stop token",
    "sglang": "SGLang: steps = spec_verify_ct, accepted = spec_num_correct_drafts, tau = 1 + accepted / steps; its "
              "spec_accept_length = completion_tokens / spec_verify_ct counts the prefill token and is not ours",
    "aiperf": "AIPerf records (SpecDecodeAcceptanceRecord): steps = num_spec_steps, accepted = "
              "num_accepted_draft_tokens, tau = mean_acceptance_length = 1 + accepted / steps (ours); AIPerf's run "
              "Acceptance Length averages it over requests (ours macro when a prompt is one request)",
}


@dataclass(frozen=True)
class ServedRequest:
    """One request's speculative decoding as the server reported it, in its own fields' terms converted."""

    engine: str  # "vllm", "sglang" or "aiperf" (AIPerf's record of some server)
    line: int  # 1-based line of the file
    steps: int  # verify steps
    accepted: int  # accepted draft tokens (bonus excluded)
    key: str | None = None  # the client's id for the request (its "id" field)
    prompt_text: str | None = None  # a completion prompt, or the last user message of a chat request
    messages: tuple | None = None  # a chat request's messages
    prompt_ids: tuple[int, ...] | None = None
    output_ids: tuple[int, ...] | None = None
    output_text: str | None = None
    draft_tokens: int | None = None  # drafted (vLLM: grammar-invalidated removed; SGLang: verify_ct x k)
    num_spec_tokens: int | None = None  # k
    histogram: tuple[int, ...] | None = None  # steps by accepted drafts
    per_step_accepted: tuple[int, ...] | None = None
    per_step_drafted: tuple[int, ...] | None = None
    reported_length: float | None = None  # the engine's own acceptance length, in its definition
    temperature: float | None = None  # the request's, when the file holds the request
    output_tokens: int | None = None  # tokens the server returned (its ids, else its completion_tokens)
    request_id: str | None = None  # the server's id
    notes: tuple[str, ...] = field(default=())

    @property
    def tau(self) -> float | None:
        return 1 + self.accepted / self.steps if self.steps else None

    def label(self) -> str:
        return f"line {self.line}" + (f" (id {self.key!r})" if self.key else "")


@dataclass(frozen=True)
class ServedOutput:
    """One response of the same server with speculative decoding off: the text greedy decoding gave there
    (`served --per-request ... --non-speculative FILE`), paired with the speculative request of its prompt."""

    line: int  # 1-based line of the file
    engine: str  # "vllm" or "sglang"
    key: str | None = None
    prompt_text: str | None = None
    messages: tuple | None = None
    prompt_ids: tuple[int, ...] | None = None
    output_ids: tuple[int, ...] | None = None
    output_text: str | None = None
    temperature: float | None = None

    def label(self) -> str:
        return f"line {self.line}" + (f" (id {self.key!r})" if self.key else "")


def check_request(r: ServedRequest) -> None:
    """The invariants of one request (serving/counters/checks.py), raised with the field named."""
    what = r.label()
    checks.check_counts(what, r.steps, r.draft_tokens, r.accepted, k=r.num_spec_tokens)
    checks.check_steps_within_output(r.steps, len(r.output_ids) if r.output_ids is not None else r.output_tokens,
                                     what)
    if r.histogram is not None:
        checks.check_histogram(list(r.histogram), r.steps, r.accepted, f"{what}: the acceptance histogram")
        if r.num_spec_tokens is not None and r.engine == "vllm" and len(r.histogram) != r.num_spec_tokens + 1:
            raise ValueError(f"{what}: the acceptance histogram has {len(r.histogram)} entries, not num_spec_tokens "
                             f"+ 1 = {r.num_spec_tokens + 1}")
        if r.num_spec_tokens is not None and len(r.histogram) > r.num_spec_tokens + 1:
            raise ValueError(f"{what}: the acceptance histogram counts steps that accepted more than the "
                             f"{r.num_spec_tokens} drafted tokens")
    if r.per_step_accepted is not None:
        drafted = r.per_step_drafted
        if len(r.per_step_accepted) != r.steps or (drafted is not None and len(drafted) != r.steps):
            raise ValueError(f"{what}: per_step_accepted / per_step_drafted hold {len(r.per_step_accepted)} / "
                             f"{len(drafted or ())} steps, not the {r.steps} of num_spec_steps")
        if sum(r.per_step_accepted) != r.accepted:
            raise ValueError(f"{what}: per_step_accepted sums to {sum(r.per_step_accepted)}, not the {r.accepted} "
                             "accepted drafts")
        cap = r.num_spec_tokens
        for i, n in enumerate(r.per_step_accepted):
            if cap is not None and (n > cap or (drafted is not None and drafted[i] > cap)):
                raise ValueError(f"{what}: step {i} accepted {n} of {drafted[i] if drafted else cap} drafted "
                                 f"tokens, the server drafts at most {cap}")
        if drafted is not None and r.draft_tokens is not None and sum(drafted) != r.draft_tokens:
            raise ValueError(f"{what}: per_step_drafted sums to {sum(drafted)}, not the {r.draft_tokens} drafted "
                             "tokens")


def tau(steps: int, accepted: int) -> float | None:
    return 1 + accepted / steps if steps else None


def histogram_of(accepted_per_step: Sequence[int], size: int) -> list[int]:
    """Steps by accepted drafts 0..size-1."""
    out = [0] * size
    for n in accepted_per_step:
        out[n] += 1
    return out


def served_histogram(r: ServedRequest, size: int) -> list[int] | None:
    """The request's histogram padded to `size` entries (SGLang's grows only to the largest count seen)."""
    if r.histogram is not None:
        if len(r.histogram) > size:
            return None
        return list(r.histogram) + [0] * (size - len(r.histogram))
    if r.per_step_accepted is not None and max(r.per_step_accepted, default=0) < size:
        return histogram_of(r.per_step_accepted, size)
    return None


def first_parting(served: Sequence[int], offline: Sequence[int]) -> int | None:
    """The first step at which two walks' accepted drafts differ (a step present in one only counts as a
    difference); None when they agree step for step."""
    for i, (a, b) in enumerate(zip(served, offline)):
        if a != b:
            return i
    return None if len(served) == len(offline) else min(len(served), len(offline))


def first_token_difference(served: Sequence[int], offline: Sequence[int]) -> int | None:
    """The first position at which the served text leaves the offline greedy text (over the common length);
    None when one is a prefix of the other."""
    for i, (a, b) in enumerate(zip(served, offline)):
        if a != b:
            return i
    return None


def walk_within(accepted_per_step: Sequence[int], tokens: int) -> list[int]:
    """The leading steps of a walk (accepted drafts per step) whose tokens all lie within the first `tokens`
    tokens of the output: the first token comes from the prefill, each step commits its accepted drafts and
    the bonus token; a step that crosses the cut is dropped, on either side alike."""
    out, done = [], 1
    for n in accepted_per_step:
        if done + n + 1 > tokens:
            break
        out.append(n)
        done += n + 1
    return out


def within_tokens(r: ServedRequest, tokens: int) -> ServedRequest:
    """The request's walk cut to its first `tokens` output tokens (its per-step arrays required)."""
    from dataclasses import replace

    kept = walk_within(r.per_step_accepted or (), tokens)
    drafted = r.per_step_drafted[:len(kept)] if r.per_step_drafted is not None else None
    return replace(r, steps=len(kept), accepted=sum(kept), per_step_accepted=tuple(kept), per_step_drafted=drafted,
                   draft_tokens=sum(drafted) if drafted is not None else None, histogram=None,
                   output_ids=r.output_ids[:tokens] if r.output_ids is not None else None, output_tokens=tokens)


def output_length(r: ServedRequest) -> int | None:
    """The tokens the server returned for the request, when its response says (its ids, else its count)."""
    return len(r.output_ids) if r.output_ids is not None else r.output_tokens


def histogram_shift(served: Sequence[int], offline: Sequence[int]) -> list[dict[str, Any]]:
    """Per accepted length n: the share of steps, served and offline, and the difference with its Newcombe
    interval (gap.proportion_gap; steps treated as independent)."""
    from .gap import proportion_gap

    n_s, n_o = sum(served), sum(offline)
    rows = []
    for n in range(max(len(served), len(offline))):
        a = served[n] if n < len(served) else 0
        b = offline[n] if n < len(offline) else 0
        row = {"accepted": n, "served": [a, n_s], "offline": [b, n_o], "gap": None, "low": None, "high": None}
        if n_s and n_o:
            row["gap"], row["low"], row["high"] = proportion_gap(a, n_s, b, n_o)
        rows.append(row)
    return rows


def below_offline(served_hist: Sequence[int], offline_hist: Sequence[int]) -> dict[str, Any] | None:
    """Served minus offline mean accepted drafts of one prompt with its normal interval; None when either side
    has no steps."""
    from .gap import mean_gap

    if not sum(served_hist) or not sum(offline_hist):
        return None
    size = max(len(served_hist), len(offline_hist))
    def pad(h):
        return list(h) + [0] * (size - len(h))
    gap, low, high = mean_gap(pad(served_hist), pad(offline_hist))
    return {"gap": gap, "low": low, "high": high, "below": high < 0}
