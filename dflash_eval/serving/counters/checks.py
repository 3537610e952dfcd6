"""The invariants a server's numbers must satisfy, one rule each, applied by every reader of served data.

A counter dump, a `vllm bench serve` result, an SGLang gauge or counter and a per-request response all
describe the same thing: steps that each drafted up to k tokens and accepted a prefix of them. Numbers
that no such run can produce are refused, never divided: `served` once printed tau 55557.6 for accepted
tokens above drafted ones, acceptance 55.8 for a per-position count above the drafts, and tau 0.300 for an
SGLang acceptance length below one. Each rule raises ValueError with the series (or field) it read, so the
reader adds the file and the CLI prints one line, exit 2:

| rule | why it cannot fail on real data |
|---|---|
| counts are whole numbers >= 0 | Prometheus counters and vLLM's / SGLang's count fields only ever add integers |
| accepted <= drafted tokens | a step accepts a prefix of what it drafted |
| per-position count <= drafts | position i is accepted at most once per draft |
| per-position counts never rise | vLLM counts position i of a draft only when it accepted i + 1 tokens, every position before it too (`v1/spec_decode/metrics.py`, `SpecDecodingStats.observe_draft`) |
| drafted tokens >= drafts | vLLM counts a draft only when tokens were scheduled for it (`v1/core/sched/scheduler.py`, `make_spec_decoding_stats` returns early on none); only grammar-invalidated tokens (structured output) are taken off afterwards |
| verify steps <= output tokens | each step commits its bonus token at least (SGLang `srt/speculative/eagle_info.py` `EagleVerifyInput.verify` appends to `req.output_ids` before `spec_verify_ct += 1`; vLLM `update_from_output` counts a step only with generated tokens) |
| drafted tokens <= drafts x k | a draft holds at most num_speculative_tokens tokens |
| one value per series | a series (name + labels) is one counter; the same series twice with two values is two scrapes pasted together |
| rates in [0, 1] | acceptance rates are shares of drafted tokens |
| acceptance lengths >= 1 | every step commits at least the bonus token |
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence


def count(value, what: str) -> int:
    """A whole number >= 0 (a JSON int, or a float counter value with no fraction)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or value < 0 or value != int(value):
        raise ValueError(f"{what} is {value!r}, not a count (a whole number >= 0)")
    return int(value)


def check_counts(what: str, drafts: int, draft_tokens: int | None, accepted: int,
                 per_pos: Sequence[int] | None = None, k: int | None = None) -> None:
    """Steps (`drafts`), drafted and accepted tokens, and accepted per draft position, of one source."""
    if draft_tokens is not None and accepted > draft_tokens:
        raise ValueError(f"{what}: {accepted} accepted tokens exceed the {draft_tokens} drafted tokens (a step "
                         "accepts a prefix of its draft)")
    if draft_tokens is None and k is not None and accepted > drafts * k:
        raise ValueError(f"{what}: {accepted} accepted tokens exceed {drafts} steps x {k} drafted tokens")
    if draft_tokens is not None and draft_tokens < drafts:
        raise ValueError(f"{what}: {draft_tokens} drafted tokens in {drafts} drafts: every draft holds at least one "
                         "token (vLLM v1/core/sched/scheduler.py make_spec_decoding_stats counts a draft only when "
                         "tokens were scheduled for it)")
    if per_pos:
        for i, n in enumerate(per_pos):
            if n > drafts:
                raise ValueError(f"{what}: position {i} has {n} accepted tokens, more than the {drafts} drafts")
            if i and n > per_pos[i - 1]:
                raise ValueError(f"{what}: position {i} has {n} accepted tokens, more than the {per_pos[i - 1]} of "
                                 f"position {i - 1}: a position is accepted only after every position before it "
                                 "(vLLM v1/spec_decode/metrics.py SpecDecodingStats.observe_draft)")
    k = len(per_pos) if per_pos else k
    if k and draft_tokens is not None and draft_tokens > drafts * k:
        raise ValueError(f"{what}: {draft_tokens} drafted tokens in {drafts} drafts of at most {k} tokens")


def check_steps_within_output(steps: int, output_tokens: int | None, what: str) -> None:
    """A request's verify steps against its output tokens: each step commits one token at least (its bonus or
    correction token; SGLang srt/speculative/eagle_info.py EagleVerifyInput.verify appends before it counts
    `spec_verify_ct`, vLLM v1/core/sched/scheduler.py update_from_output counts a step only with generated
    tokens)."""
    if output_tokens is not None and steps > output_tokens:
        raise ValueError(f"{what}: {steps} verify steps for {output_tokens} output tokens: every step commits at "
                         "least one token")


def check_rate(value, what: str) -> float:
    """An acceptance rate: a finite number in [0, 1]."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not 0 <= value <= 1:
        raise ValueError(f"{what} is {value!r}, not a rate in [0, 1]")
    return float(value)


def check_length(value, what: str) -> float:
    """A mean acceptance length (bonus token included): a finite number >= 1."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 1:
        raise ValueError(f"{what} is {value!r}, not an acceptance length (every step commits at least one token: "
                         ">= 1)")
    return float(value)


def check_histogram(histogram: Sequence, steps: int | None, accepted: int | None, what: str) -> list[int]:
    """Steps by accepted length (index = accepted drafts): counts, summing to the steps and, weighted by the
    index, to the accepted drafts (where those are given)."""
    if not isinstance(histogram, (list, tuple)):
        raise ValueError(f"{what} is {histogram!r}, not a list of counts")
    counts = [count(c, f"{what}[{j}]") for j, c in enumerate(histogram)]
    if steps is not None and sum(counts) != steps:
        raise ValueError(f"{what} counts {sum(counts)} steps, not the {steps} the response states")
    if accepted is not None and sum(j * c for j, c in enumerate(counts)) != accepted:
        raise ValueError(f"{what} accounts for {sum(j * c for j, c in enumerate(counts))} accepted drafts, not the "
                         f"{accepted} the response states")
    return counts


def unique_series(samples: Iterable, family: str = "") -> None:
    """A series (name and labels) given twice must carry one value: two values are two scrapes pasted
    together, and keeping either would be a silent choice. `family` restricts the check to names that
    start with it."""
    seen: dict[tuple, float] = {}
    for s in samples:
        if family and not s.name.startswith(family) and not s.name.replace("_", ":", 1).startswith(family):
            continue
        key = (s.name, s.labels)
        if key in seen and not (seen[key] == s.value or (math.isnan(seen[key]) and math.isnan(s.value))):
            labels = "{" + ",".join(f'{k}="{v}"' for k, v in s.labels) + "}"
            raise ValueError(f"series {s.name}{labels} is given twice with different values ({seen[key]!r} and "
                             f"{s.value!r}): two scrapes in one file?")
        seen[key] = s.value
