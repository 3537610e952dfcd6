"""What a server measured: the spec-decode counters of vLLM's `/metrics`, a `vllm bench serve` result and
SGLang's acceptance-length gauge, read into counts, and the gap to an offline run with an interval.

The number a team finally sees comes from the server, so it is read exactly as the server writes it:
- vLLM 0.33 (`v1/spec_decode/metrics.py` `SpecDecodingProm`, labels from `v1/metrics/loggers.py`:
  `model_name`, `engine`) exposes four counters through prometheus_client; the text format writes each as
  `NAME_total` plus a `NAME_created` gauge (the time the series was created), OpenMetrics as the same with
  `_` for `:` in sample names. `..._num_accepted_tokens_per_pos{position="i"}` is 0-based (draft slot i+1).
  Served tau = 1 + accepted / drafts; per-position acceptance = accepted at position i / drafts (vLLM's own
  PromQL in `SpecDecodingProm`'s docstring).
- `vllm bench serve` (`benchmarks/serve.py`) subtracts two scrapes itself and saves `spec_decode_num_drafts`,
  `..._draft_tokens`, `..._accepted_tokens` and `spec_decode_per_position_acceptance_rates` (fractions of
  drafts), summing every `vllm:spec_decode` line of the server: every model and engine pooled.
- SGLang 0.5.23 (`srt/observability/metrics_collector.py`) exposes `sglang:spec_accept_length`, a gauge (most
  recent logging window's mean acceptance length, bonus included): a tau with no counts behind it, so no
  interval, no per-position acceptance and no subtraction; its counters are read by sglang.py.
- vLLM's diffusion (dLLM) servers reuse the spec-decode path under `vllm:diffusion_*` names (denoising steps,
  canvas positions, committed tokens: `SpecDecodingProm(is_diffusion=True)`); they have no speculative-decoding
  meaning and are refused by name.

Two dumps are subtracted series by series; a series whose `_created` time changed or whose value fell was
reset (the server restarted) between them, and is refused by name. Every number read passes the invariants
of serving/counters/checks.py (one rule each: accepted <= drafted, per-position <= drafts, one value per series).
The model's engines are pooled as vLLM's PromQL pools them and also kept one by one (`per_engine`); a dump
of several models also says what `vllm bench serve` would report, which sums every label set. When the
drafted tokens are not drafts x k (dynamic speculation, which `config/vllm.py` allows for dflash through
`num_speculative_tokens_per_batch_size`, or grammar-invalidated drafts), the per-position shares are biased
(vLLM counts drafts per position, `num_draft_tokens_per_pos`, but does not export them) and a note says so.
Counts are stored, divided when shown.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from . import checks

VLLM = {"drafts": "vllm:spec_decode_num_drafts", "draft_tokens": "vllm:spec_decode_num_draft_tokens",
        "accepted": "vllm:spec_decode_num_accepted_tokens",
        "per_pos": "vllm:spec_decode_num_accepted_tokens_per_pos"}
SGLANG_TAU = "sglang:spec_accept_length"
SOURCES = {"vllm": "vLLM 0.33.0 v1/spec_decode/metrics.py (SpecDecodingProm), v1/metrics/loggers.py (labels)",
           "bench": "vLLM 0.33.0 benchmarks/serve.py (fetch_spec_decode_metrics, spec_decode_* result fields)",
           "sglang": "SGLang 0.5.23 srt/observability/metrics_collector.py (sglang:spec_accept_length gauge)",
           "sglang_counters": "SGLang 0.5.23 srt/observability/metrics_collector.py (sglang:spec_verify_calls_total, "
                              "sglang:generation_tokens_total, sglang:num_requests_total; counted at request finish)",
           "llamacpp": "llama.cpp tools/server/server-task.cpp (server_task_result_metrics::to_metrics, #26389), "
                       "server-context.cpp (slot stats summed at request finish)",
           "aiperf": "AIPerf profile_export_aiperf.json (metrics/types/spec_decode_metrics.py totals, "
                     "pooled_spec_decode_acceptance_histogram)"}
# which definition (core/tau_definitions.py) each source's tau is
TAU_DEFINITION = {"vllm": "vllm", "bench": "vllm", "llamacpp": "llamacpp", "aiperf": "aiperf_token_weighted",
                  "sglang_counters": "ours_micro", "sglang": "sglang_gauge"}
DIFFUSION = "vllm:diffusion_"
Z95 = 1.959963984540054

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(,|\})')
_ESCAPES = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


@dataclass(frozen=True)
class Sample:
    """One sample line of the exposition format."""

    name: str
    labels: tuple[tuple[str, str], ...]  # sorted (name, value)
    value: float

    def label(self, key: str) -> str | None:
        return dict(self.labels).get(key)


def parse_exposition(text: str) -> list[Sample]:
    """Every sample of a Prometheus text (0.0.4) or OpenMetrics dump; ValueError naming the bad line."""
    samples = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _NAME.match(line)
        if not match:
            raise ValueError(f"line {number}: not a metric sample: {line[:80]!r}")
        name, rest, labels = match.group(0), line[match.end():], {}
        if rest.startswith("{"):
            rest = rest[1:]
            while True:
                rest = rest.lstrip()
                if rest.startswith("}"):
                    rest = rest[1:]
                    break
                found = _LABEL.match(rest)
                if not found:
                    raise ValueError(f"line {number}: malformed labels: {line[:80]!r}")
                labels[found.group(1)] = re.sub(r'\\[\\"n]', lambda m: _ESCAPES[m.group(0)], found.group(2))
                rest = rest[found.end():]
                if found.group(3) == "}":
                    break
        fields = rest.split()
        if not fields or not rest[:1].isspace():
            raise ValueError(f"line {number}: no value: {line[:80]!r}")
        try:
            value = float(fields[0])
        except ValueError:
            raise ValueError(f"line {number}: value {fields[0]!r} is not a number") from None
        samples.append(Sample(name, tuple(sorted(labels.items())), value))
    return samples


def _base(name: str) -> tuple[str, str] | None:
    """(vLLM counter, "total" | "created") for a spec-decode sample name in either format's spelling."""
    for counter in sorted(VLLM.values(), key=len, reverse=True):
        for spelling in (counter, counter.replace(":", "_")):
            for suffix in ("total", "created"):
                if name == f"{spelling}_{suffix}":
                    return counter, suffix
    return None


@dataclass(frozen=True)
class Served:
    """What one server measured for one model (engines pooled). Counts None: the source gives none."""

    engine: str  # "vllm" or "sglang"
    source: str  # what was read (a dump, two dumps, a bench result)
    model: str | None
    series: tuple[str, ...] = ()  # the engines (label sets) pooled
    drafts: int | None = None
    draft_tokens: int | None = None
    accepted: int | None = None
    accepted_per_pos: tuple[int, ...] | None = None  # index i = vLLM position i = draft slot i + 1
    reported_tau: float | None = None  # a tau the source states itself (SGLang's gauge, bench's length)
    notes: tuple[str, ...] = field(default=())
    # each engine (label set) alone: (labels, drafts, draft_tokens, accepted, accepted_per_pos or None)
    per_engine: tuple[tuple[str, int, int, int, tuple[int, ...] | None], ...] = field(default=())
    histogram: tuple[int, ...] | None = None  # steps by accepted drafts, when the source gives it (AIPerf's pool)


def _counter_int(value: float, what: str) -> int:
    return checks.count(value, what)


def refuse_diffusion(samples: Sequence[Sample]) -> None:
    """A dLLM server's `vllm:diffusion_*` series count denoising steps, not drafts: refused by name."""
    names = sorted({s.name for s in samples if s.name.startswith((DIFFUSION, DIFFUSION.replace(":", "_")))})
    if names:
        raise ValueError(f"holds {names[0]}{' and more' if len(names) > 1 else ''}: a diffusion (dLLM) server's "
                         "denoising counters (vLLM SpecDecodingProm, is_diffusion) have no speculative-decoding "
                         "meaning")


def vllm_series(samples: Sequence[Sample]) -> dict[str, dict[tuple, dict[str, Any]]]:
    """model_name -> engine label set -> {"counts": {counter or (per_pos, i): n}, "created": {...}}."""
    refuse_diffusion(samples)
    checks.unique_series(samples, "vllm:spec_decode")
    models: dict[str, dict[tuple, dict[str, Any]]] = {}
    for s in samples:
        found = _base(s.name)
        if found is None:
            continue
        counter, suffix = found
        labels = dict(s.labels)
        model = labels.pop("model_name", "")
        position = labels.pop("position", None)
        key = counter if counter != VLLM["per_pos"] else (counter, position)
        if counter == VLLM["per_pos"] and (position is None or not position.isdigit()):
            raise ValueError(f"{s.name} has no numeric position label")
        engine = models.setdefault(model, {}).setdefault(tuple(sorted(labels.items())), {"counts": {}, "created": {}})
        if suffix == "total":
            engine["counts"][key] = _counter_int(s.value, f"{s.name}{_show(s.labels)}")
        else:
            engine["created"][key] = s.value
    return models


def _show(labels) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in labels) + "}"


def _key_name(key, engine: tuple) -> str:
    counter, extra = (key, ()) if isinstance(key, str) else (key[0], (("position", key[1]),))
    return f"{counter}_total{_show(tuple(engine) + extra)}"


def choose_model(models: Mapping[str, Any], model: str | None, what: str) -> str:
    """The one model the user means: `--model`, or the only one; several without it is refused by name."""
    names = sorted(models)
    if not names:
        raise ValueError(f"holds no {what} samples (speculative decoding off, or not that server's /metrics)")
    if model is None:
        if len(names) > 1:
            raise ValueError(f"serves {len(names)} models ({', '.join(map(repr, names))}): choose one with --model")
        return names[0]
    if model not in models:
        raise ValueError(f"serves no model {model!r} (models: {', '.join(map(repr, names))})")
    return model


def _pool(engines: Mapping[tuple, Mapping], source: str, model: str, notes: list[str]) -> Served:
    drafts = draft_tokens = accepted = 0
    per_pos: dict[int, int] = {}
    views = []
    for engine, data in sorted(engines.items()):
        counts = data["counts"]
        missing = [VLLM[k] for k in ("drafts", "draft_tokens", "accepted") if VLLM[k] not in counts]
        if missing:
            raise ValueError(f"engine {_show(engine)} of model {model!r} has no {', '.join(missing)}_total")
        mine = {int(key[1]): n for key, n in counts.items() if not isinstance(key, str)}
        positions = tuple(mine[i] for i in range(len(mine))) if sorted(mine) == list(range(len(mine))) else None
        checks.check_counts(f"engine {_show(engine)} of model {model!r}", counts[VLLM["drafts"]],
                            counts[VLLM["draft_tokens"]], counts[VLLM["accepted"]], positions)
        views.append((_show(engine), counts[VLLM["drafts"]], counts[VLLM["draft_tokens"]], counts[VLLM["accepted"]],
                      positions))
        drafts += counts[VLLM["drafts"]]
        draft_tokens += counts[VLLM["draft_tokens"]]
        accepted += counts[VLLM["accepted"]]
        for i, n in mine.items():
            per_pos[i] = per_pos.get(i, 0) + n
    positions = None
    if per_pos:
        if sorted(per_pos) != list(range(len(per_pos))):
            raise ValueError(f"per-position series of model {model!r} have positions {sorted(per_pos)}, "
                             "not 0..k-1")
        positions = tuple(per_pos[i] for i in range(len(per_pos)))
        if sum(positions) != accepted:
            notes.append(f"per-position counts sum to {sum(positions)}, not to the {accepted} accepted tokens "
                         "(a scrape taken mid-update?)")
        notes.extend(varied_length_notes(drafts, draft_tokens, len(positions)))
    else:
        notes.append("no vllm:spec_decode_num_accepted_tokens_per_pos series: per-position acceptance unknown")
    checks.check_counts(f"model {model!r} (engines pooled)", drafts, draft_tokens, accepted, positions)
    return Served("vllm", source, model, tuple(_show(e) for e in sorted(engines)), drafts, draft_tokens,
                  accepted, positions, None, tuple(notes), tuple(views))


def varied_length_notes(drafts: int, draft_tokens: int, k: int) -> list[str]:
    """The warning when the drafts were not all k tokens long: dynamic speculation (vLLM allows it with
    dflash: `num_speculative_tokens_per_batch_size`, exempted in config/vllm.py) or grammar-invalidated
    drafts. vLLM counts drafts per position (`num_draft_tokens_per_pos`) but exports no such series, so a
    per-position share over all drafts is biased low for the later positions."""
    if not drafts or draft_tokens == drafts * k:
        return []
    return [f"the draft length varied: {draft_tokens} drafted tokens in {drafts} drafts is not {drafts} x k = "
            f"{drafts * k} (dynamic speculation, num_speculative_tokens_per_batch_size, or grammar-invalidated "
            "drafts): per-position acceptance over all drafts is biased low for later positions (vLLM does not "
            "export drafts per position) and the served histogram is unknown"]


def bench_view_note(models: Mapping[str, Mapping[tuple, Mapping]], chosen: str) -> list[str]:
    """What `vllm bench serve` (fetch_spec_decode_metrics: every vllm:spec_decode line summed) would report
    for this dump, when it pools more than the chosen model."""
    if len(models) < 2:
        return []
    drafts = accepted = 0
    for engines in models.values():
        for data in engines.values():
            drafts += data["counts"].get(VLLM["drafts"], 0)
            accepted += data["counts"].get(VLLM["accepted"], 0)
    if not drafts:
        return []
    return [f"summed over all {len(models)} models, as `vllm bench serve` sums every label set: tau "
            f"{1 + accepted / drafts:.3f} ({accepted} accepted in {drafts} drafts); the figures here are model "
            f"{chosen!r} alone"]


def served_from_dump(samples: Sequence[Sample], model: str | None, source: str) -> Served:
    """One dump: the model's engines pooled (vLLM sums engines the same way in its PromQL)."""
    models = vllm_series(samples)
    name = choose_model(models, model, "vllm:spec_decode_*_total")
    return _pool(models[name], source, name, bench_view_note(models, name))


def served_between(before: Sequence[Sample], after: Sequence[Sample], model: str | None, source: str) -> Served:
    """AFTER - BEFORE, series by series; a reset between them (a `_created` change or a value that fell)
    and a series present in one dump only are refused by name."""
    old, new = vllm_series(before), vllm_series(after)
    name = choose_model(new, model, "vllm:spec_decode_*_total")
    if name not in old:
        raise ValueError(f"the BEFORE dump has no series for model {name!r}: not the same server")
    a, b = old[name], new[name]
    if set(a) != set(b):
        raise ValueError(f"the engines differ between the dumps ({sorted(map(_show, a))} before, "
                         f"{sorted(map(_show, b))} after): not the same server")
    delta: dict[tuple, dict[str, Any]] = {}
    for engine in b:
        counts = {}
        if set(a[engine]["counts"]) != set(b[engine]["counts"]):
            raise ValueError(f"engine {_show(engine)}: the dumps hold different counters")
        for key, after_n in b[engine]["counts"].items():
            before_n = a[engine]["counts"][key]
            c0, c1 = a[engine]["created"].get(key), b[engine]["created"].get(key)
            if c0 is not None and c1 is not None and c0 != c1:
                raise ValueError(f"counter reset between the dumps: {_key_name(key, engine)} was created anew "
                                 f"(_created {c0!r} -> {c1!r}; the server restarted): take both dumps from one "
                                 "server lifetime")
            if after_n < before_n:
                raise ValueError(f"counter reset between the dumps: {_key_name(key, engine)} fell from "
                                 f"{before_n} to {after_n} (the server restarted): take both dumps from one "
                                 "server lifetime")
            counts[key] = after_n - before_n
        delta[engine] = {"counts": counts, "created": {}}
    return _pool(delta, source, name, [])


def served_from_bench(result: Mapping[str, Any], source: str) -> Served:
    """A `vllm bench serve` result: its own before/after delta, every model and engine of the server pooled."""
    need = ("spec_decode_num_drafts", "spec_decode_draft_tokens", "spec_decode_accepted_tokens")
    missing = [k for k in need if k not in result]
    if missing:
        raise ValueError(f"has no {', '.join(missing)} (the server ran without speculative decoding, or this is "
                         "not a `vllm bench serve` result)")
    drafts, draft_tokens, accepted = (_counter_int(float(result[k]), k) if isinstance(result[k], (int, float))
                                      and not isinstance(result[k], bool) else _not_count(k) for k in need)
    rates = result.get("spec_decode_per_position_acceptance_rates") or []
    if not isinstance(rates, list) or not all(isinstance(r, (int, float)) and not isinstance(r, bool) for r in rates):
        raise ValueError("spec_decode_per_position_acceptance_rates is not a list of numbers")
    positions = []
    for i, rate in enumerate(rates):
        checks.check_rate(rate, f"spec_decode_per_position_acceptance_rates[{i}]")
        n = rate * drafts
        if not math.isfinite(n) or abs(n - round(n)) > 1e-6 * max(1, drafts) or round(n) < 0:
            raise ValueError(f"spec_decode_per_position_acceptance_rates[{i}] = {rate!r} is not a count of the "
                             f"{drafts} drafts")
        positions.append(int(round(n)))
    checks.check_counts("the bench result", drafts, draft_tokens, accepted, positions or None)
    notes = ["vllm bench serve sums every vllm:spec_decode series of the server: all models and engines pooled"]
    if not rates:
        notes.append("no per-position rates in the result: per-position acceptance unknown")
    else:
        notes.extend(varied_length_notes(drafts, draft_tokens, len(positions)))
    model = result.get("model_id") if isinstance(result.get("model_id"), str) else None
    reported = result.get("spec_decode_acceptance_length")
    if isinstance(reported, (int, float)) and not isinstance(reported, bool):
        checks.check_length(reported, "spec_decode_acceptance_length")
    return Served("vllm", source, model, ("all engines",), drafts, draft_tokens, accepted,
                  tuple(positions) if rates else None,
                  float(reported) if isinstance(reported, (int, float)) and not isinstance(reported, bool) else None,
                  tuple(notes))


def _not_count(key: str):
    raise ValueError(f"{key} is not a number")


def served_from_sglang(samples: Sequence[Sample], model: str | None, source: str) -> Served:
    """SGLang's acceptance-length gauge; several ranks must agree (a window mean cannot be pooled)."""
    checks.unique_series(samples, SGLANG_TAU)
    models: dict[str, dict[tuple, float]] = {}
    for s in samples:
        if s.name == SGLANG_TAU:
            labels = dict(s.labels)
            models.setdefault(labels.pop("model_name", ""), {})[tuple(sorted(labels.items()))] = s.value
    name = choose_model(models, model, SGLANG_TAU)
    values = models[name]
    distinct = sorted(set(values.values()))
    if len(distinct) > 1:
        raise ValueError(f"{SGLANG_TAU} differs between the ranks of {name!r} "
                         f"({', '.join(f'{_show(k)}={v}' for k, v in sorted(values.items()))}): a window mean has "
                         "no counts to pool them by")
    if distinct[0] == 0:
        raise ValueError(f"{SGLANG_TAU} is 0: no speculative step in the server's last logging window (an idle "
                         "server?): take the dump under load, or two dumps of SGLang's counters")
    checks.check_length(distinct[0], SGLANG_TAU)
    notes = ["SGLang exposes only the most recent logging window's mean acceptance length (a gauge): no counts, "
             "no per-position acceptance, no interval"]
    return Served("sglang", source, name, tuple(_show(k) for k in sorted(values)), reported_tau=distinct[0],
                  notes=tuple(notes))


def served_histogram(s: Served) -> list[int] | None:
    """Steps by accepted length 0..k, when the counts determine it: per-position counts present and every
    draft of full length k (then n >= i+1 for exactly accepted_per_pos[i] drafts)."""
    if s.histogram is not None:
        return list(s.histogram)
    a = s.accepted_per_pos
    if not a or s.drafts is None or s.draft_tokens != s.drafts * len(a) or sum(a) != s.accepted:
        return None
    counts = [s.drafts - a[0], *[a[i - 1] - a[i] for i in range(1, len(a))], a[-1]]
    return counts if min(counts) >= 0 else None


def summary(s: Served) -> dict[str, Any]:
    """The JSON document's numbers: tau (pooled), per-position acceptance, acceptance rate, counts."""
    tau = s.reported_tau if s.drafts is None else (1 + s.accepted / s.drafts if s.drafts else None)
    per_pos = None if s.accepted_per_pos is None or not s.drafts else [n / s.drafts for n in s.accepted_per_pos]
    hist = served_histogram(s)
    return {"engine": s.engine, "source": s.source, "model": s.model, "series_pooled": list(s.series),
            "tau": tau, "per_position": per_pos,
            "num_speculative_tokens": None if s.accepted_per_pos is None else len(s.accepted_per_pos),
            "acceptance_rate": s.accepted / s.draft_tokens if s.draft_tokens else None,
            "counts": {"drafts": s.drafts, "draft_tokens": s.draft_tokens, "accepted": s.accepted,
                       "accepted_per_pos": None if s.accepted_per_pos is None else list(s.accepted_per_pos)},
            "accept_length_histogram": hist, "reported_tau": s.reported_tau, "notes": list(s.notes),
            "per_engine": [{"series": name, "tau": 1 + a / d if d else None, "drafts": d, "draft_tokens": t,
                            "accepted": a, "per_position": None if pos is None or not d else [n / d for n in pos]}
                           for name, d, t, a, pos in s.per_engine],
            "reference": SOURCES[_source_key(s)],
            **_definition(s)}


def _source_key(s: Served) -> str:
    if s.engine == "sglang":
        return "sglang_counters" if s.drafts is not None else "sglang"
    if s.engine == "vllm":
        return "bench" if s.series == ("all engines",) else "vllm"
    return s.engine


def _definition(s: Served) -> dict[str, Any]:
    """The served tau's definition and its conversion to ours (core/tau_definitions.py)."""
    from ...core.tau_definitions import DEFINITIONS, conversion

    key = TAU_DEFINITION[_source_key(s)]
    return {"tau_definition": DEFINITIONS[key].to_dict(),
            "conversion": conversion(key, steps=s.drafts, accepted=s.accepted, reported=s.reported_tau)}


