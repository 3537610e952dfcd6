"""SGLang's spec-decode counters, read into counts: a windowed tau with steps behind it.

SGLang 0.5.23's `srt/observability/metrics_collector.py` (`TokenizerMetricsCollector`, `observe_one_finished_
request`) adds, when a request finishes, its completion tokens to `sglang:generation_tokens_total{is_streaming}`,
its verify steps (`spec_verify_ct`) to `sglang:spec_verify_calls_total` and one to `sglang:num_requests_total
{is_streaming}`. A request's completion holds the token its prefill sampled plus, per verify step, the
accepted drafts and the bonus token; so over a window (two dumps subtracted, or a server's lifetime in one)

    accepted drafts = generation tokens - requests - verify steps,
    tau (ours: 1 + accepted / steps) = (generation tokens - requests) / verify steps,

while SGLang's own per-request `spec_accept_length` (completion tokens / verify steps) counts the prefill
token as if a step had made it. The per-position acceptance and the drafted tokens are not in the
counters. Numbers no run can produce are refused (serving/counters/checks.py): fewer generation tokens than requests
plus steps means a step committed nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

from . import checks
from .counts import Sample, Served, choose_model

VERIFY = "sglang:spec_verify_calls_total"
GENERATED = "sglang:generation_tokens_total"
REQUESTS = "sglang:num_requests_total"
COUNTERS = (VERIFY, GENERATED, REQUESTS)
CONVERSION = ("SGLang counts the prefill token in its acceptance length (completion tokens / verify steps); "
              "converted: tau = (generation tokens - requests) / verify steps")


def _spelled(name: str) -> tuple[str, ...]:
    return name, name.replace(":", "_", 1)


def has_counters(samples: Sequence[Sample]) -> bool:
    names = {s.name for s in samples}
    return any(spelling in names for spelling in _spelled(VERIFY))


def sglang_counts(samples: Sequence[Sample]) -> dict[str, dict[str, int]]:
    """model_name -> {counter: value summed over the other labels (is_streaming, ranks)}."""
    out: dict[str, dict[str, int]] = {}
    for counter in COUNTERS:
        for spelling in _spelled(counter):
            checks.unique_series([s for s in samples if s.name == spelling])
    for s in samples:
        for counter in COUNTERS:
            if s.name in _spelled(counter):
                labels = dict(s.labels)
                model = labels.pop("model_name", "")
                text = f"{s.name}{{{','.join(f'{k}={v!r}' for k, v in sorted(labels.items()))}}}"
                value = checks.count(s.value, text)
                mine = out.setdefault(model, {})
                mine[counter] = mine.get(counter, 0) + value
    return out


def _served(counts: dict[str, int], model: str, source: str, notes: list[str]) -> Served:
    missing = [c for c in COUNTERS if c not in counts]
    if missing:
        raise ValueError(f"model {model!r} has {VERIFY} but no {', '.join(missing)}")
    steps, generated, requests = counts[VERIFY], counts[GENERATED], counts[REQUESTS]
    accepted = generated - requests - steps
    if steps and accepted < 0:
        raise ValueError(f"model {model!r}: {generated} generation tokens for {requests} requests and {steps} verify "
                         "steps: every step commits at least one token and every request one from its prefill")
    if not steps:
        raise ValueError(f"model {model!r}: {VERIFY} is 0 in this window: no speculative step to measure")
    notes = [*notes, CONVERSION, "SGLang's counters hold no drafted tokens and no per-position counts: per-position "
             "acceptance unknown; counted when a request finishes, so requests still running are not in the window"]
    return Served("sglang", source, model, ("model_name pooled over is_streaming and ranks",), steps, None,
                  max(accepted, 0), None, None, tuple(notes))


def with_gauge(samples: Sequence[Sample], served: Served) -> Served:
    """The counters' figures with SGLang's acceptance-length gauge of the same dump said beside them, never
    dropped in silence: a gauge is the mean of the last logging window (its own definition), the counters
    count the whole window between dumps, so the two may differ, and the line names both. A gauge no run
    can produce (below 1 but not 0, ranks that disagree) contradicts the counters and is refused by name."""
    from dataclasses import replace

    from .counts import SGLANG_TAU

    checks.unique_series(samples, SGLANG_TAU)
    values = {s.labels: s.value for s in samples if s.name == SGLANG_TAU
              and dict(s.labels).get("model_name", "") == (served.model or "")}
    if not values:
        return served
    distinct = sorted(set(values.values()))
    if len(distinct) > 1:
        raise ValueError(f"{SGLANG_TAU} differs between the ranks of {served.model!r} ({', '.join(map(str, distinct))}) "
                         "beside one set of counters")
    gauge = distinct[0]
    if gauge != 0:
        checks.check_length(gauge, f"{SGLANG_TAU} (beside the counters)")
    tau = 1 + served.accepted / served.drafts
    said = (f"{SGLANG_TAU} = 0 beside the counters' tau {tau:.3f}: the gauge's last logging window had no step"
            if gauge == 0 else
            f"{SGLANG_TAU} = {gauge:g} (the gauge: SGLang's mean acceptance length of its last logging window only) "
            f"beside the counters' tau {tau:.3f} (every step in this window): "
            + ("they agree" if abs(gauge - tau) < 5e-4 else "they differ; the figures here are the counters'"))
    return replace(served, reported_tau=gauge if gauge else None, notes=(*served.notes, said))


def served_from_counters(samples: Sequence[Sample], model: str | None, source: str) -> Served:
    """One dump: the server's lifetime (its gauge, if any, said beside)."""
    models = sglang_counts(samples)
    name = choose_model(models, model, VERIFY)
    return with_gauge(samples, _served(models[name], name, source, ["one dump: the counts since the server started"]))


def served_between_counters(before: Sequence[Sample], after: Sequence[Sample], model: str | None,
                            source: str) -> Served:
    """AFTER - BEFORE; a counter that fell was reset (the server restarted) and is refused by name."""
    old, new = sglang_counts(before), sglang_counts(after)
    name = choose_model(new, model, VERIFY)
    if name not in old:
        raise ValueError(f"the BEFORE dump has no SGLang counters for model {name!r}: not the same server")
    delta = {}
    for counter, value in new[name].items():
        if counter not in old[name]:
            raise ValueError(f"the BEFORE dump has no {counter} for model {name!r}")
        if value < old[name][counter]:
            raise ValueError(f"counter reset between the dumps: {counter} of model {name!r} fell from "
                             f"{old[name][counter]} to {value} (the server restarted): take both dumps from one "
                             "server lifetime")
        delta[counter] = value - old[name][counter]
    return with_gauge(after, _served(delta, name, source, ["two dumps: the window between them"]))
