"""AIPerf's exports, read as AIPerf (ai-dynamo/aiperf) writes them: its per-request records, its run summary's
spec-decode section and its `speed_bench_report.csv`.

- `profile_export.jsonl` (`--export-level records`; `MetricRecordInfo` in `common/models/record_models.py`):
  one JSON object a request, `{"metadata": {...}, "metrics": {tag: {"value", "unit"}}, "spec_decode_acceptance":
  {...}, "error": ...}`. `metadata` is `MetricRecordMetadata` (`session_num`, `x_request_id`, `conversation_id`:
  a multi_turn dataset's `session_id`, `turn_index`, `benchmark_phase`: "warmup" or "profiling", ...);
  `spec_decode_acceptance` is `SpecDecodeAcceptanceRecord` (`common/models/spec_decode_models.py`): `engine`,
  `mean_acceptance_length` (1 + accepted / steps), `draft_acceptance_rate` (a 0..1 fraction),
  `acceptance_histogram` (a sparse object, keys the accepted-draft counts as strings), `num_accepted_draft_tokens`,
  `num_draft_tokens`, `num_spec_steps`, `num_spec_tokens` (k, or null), `completion_tokens`, `per_step_accepted`,
  `per_step_drafted` (null unless the engine reports steps). Warmup and error records are left out, as AIPerf's
  own accumulator and `speed_bench_report.acceptance_from_records` leave them out. A request is matched to the
  offline run's prompt by `conversation_id` (write the AIPerf input as multi_turn lines whose `session_id` is
  the run's prompt id), else it is named unmatched.
- `profile_export_aiperf.json` (the run summary; `metrics/types/spec_decode_metrics.py`): per metric tag a
  `JsonMetricResult` (`unit`, `avg`, ...): `total_spec_decode_steps`, `total_accepted_draft_tokens`,
  `total_draft_tokens` (sums over requests: their `avg`), `spec_decode_token_weighted_acceptance_length`
  (1 + sum accepted / sum steps), `spec_decode_acceptance_length` (the mean over requests of each request's
  1 + accepted / steps), `spec_decode_overall_draft_acceptance_rate` (a percent), and the top-level
  `pooled_spec_decode_acceptance_histogram` ({j: steps}). No per-position counts, no k.
- `speed_bench_report.csv` (`analysis/speed_bench_report.py` `write_csv`): `Model,<categories...>,Overall`, one
  row per model, every cell `f"{v:.2f}"` or empty. A cell is a category's token-weighted acceptance length
  when AIPerf read per-request records, the summary or vLLM/llama.cpp counters, but a gauge's time average when
  it read SGLang's or TRT-LLM's gauge, and the file does not say which; `--metric accept_rate` and `throughput`
  write the same file name. So a cell is shown with that definition, never converted, and one that cannot be
  an acceptance length is flagged (core/implausible.py).

Every count passes counters/checks.py; AIPerf's own identities (the histogram sums to the steps, weighted to the
accepted drafts; the lengths and rates are what the counts give) are checked and refused by field name.
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path
from typing import Any

from ...core.errors import InputError, read_text_file
from ...core.jsonl import jsonl_rows
from ..counters import checks
from ..counters.counts import Served
from ..counters.requests import ServedRequest, check_request

RECORDS = "profile_export.jsonl"
SUMMARY = "profile_export_aiperf.json"
SPEED_BENCH = "speed_bench_report.csv"
SUMMARY_TAGS = ("total_spec_decode_steps", "total_accepted_draft_tokens", "total_draft_tokens")
# AIPerf's spec_al_* public datasets (AIPerf docs, "Literature Acceptance-Length Datasets"): the raw text field,
# chat-wrapped by the served model's template at request time
AIPERF_SETS = {
    "gsm8k": ("spec_al_gsm8k", "openai/gsm8k (main, test)", 1319, "the raw question"),
    "math500": ("spec_al_math500", "HuggingFaceH4/MATH-500 (test)", 500, "the raw problem"),
    "humaneval": ("spec_al_humaneval", "openai/openai_humaneval (test)", 164, "the raw prompt, not z-lab's "
                  "'Write a solution to the following problem...' wrapping"),
    "mbpp": ("spec_al_mbpp", "google-research-datasets/mbpp (full, test)", 500, "the raw text of MBPP full, not "
             "the sanitized split's 257 (of which z-lab's benchmark draws 128)"),
    "mtbench": ("spec_al_mtbench", "HuggingFaceH4/mt_bench_prompts (train)", 80, "two turns each"),
}


def is_record_line(row: Any) -> bool:
    """A line of AIPerf's records export (MetricRecordInfo), not a server response body."""
    return isinstance(row, dict) and isinstance(row.get("metadata"), dict) and isinstance(row.get("metrics"), dict)


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{what} is {value!r}, not a number")
    return float(value)


def _histogram(value: Any, what: str) -> list[int]:
    """AIPerf's sparse {"j": steps} (JSON object keys are strings) as a dense list."""
    if not isinstance(value, dict):
        raise ValueError(f"{what} is {value!r}, not an object of accepted-draft count -> steps")
    dense: dict[int, int] = {}
    for key, steps in value.items():
        if not str(key).isdigit():
            raise ValueError(f"{what} has the key {key!r}, not an accepted-draft count")
        dense[int(key)] = checks.count(steps, f"{what}[{key!r}]")
    return [dense.get(j, 0) for j in range(max(dense) + 1)] if dense else []


def request_fields(spec: dict, where: str) -> dict[str, Any]:
    """A SpecDecodeAcceptanceRecord into ServedRequest's fields, AIPerf's identities checked by field name."""
    steps = checks.count(spec.get("num_spec_steps"), f"{where}.num_spec_steps")
    accepted = checks.count(spec.get("num_accepted_draft_tokens"), f"{where}.num_accepted_draft_tokens")
    drafted = checks.count(spec.get("num_draft_tokens"), f"{where}.num_draft_tokens")
    hist = checks.check_histogram(_histogram(spec.get("acceptance_histogram"), f"{where}.acceptance_histogram"),
                                  steps, accepted, f"{where}.acceptance_histogram")
    k = spec.get("num_spec_tokens")
    k = None if k is None else checks.count(k, f"{where}.num_spec_tokens")
    length = checks.check_length(spec.get("mean_acceptance_length"), f"{where}.mean_acceptance_length")
    if steps and abs(length - (1 + accepted / steps)) > 1e-6 * length:
        raise ValueError(f"{where}.mean_acceptance_length is {length!r}, not 1 + {accepted} / {steps} steps")
    rate = checks.check_rate(spec.get("draft_acceptance_rate"), f"{where}.draft_acceptance_rate")
    if drafted and abs(rate - accepted / drafted) > 1e-6:
        raise ValueError(f"{where}.draft_acceptance_rate is {rate!r}, not {accepted} / {drafted} drafted")
    per_acc, per_dr = spec.get("per_step_accepted"), spec.get("per_step_drafted")
    completion = spec.get("completion_tokens")
    engine = spec.get("engine") if isinstance(spec.get("engine"), str) else "?"
    return {"steps": steps, "accepted": accepted, "draft_tokens": drafted, "num_spec_tokens": k,
            "histogram": tuple(hist) + ((0,) * (k + 1 - len(hist)) if k is not None and len(hist) < k + 1 else ()),
            "reported_length": length,
            "per_step_accepted": None if per_acc is None else tuple(checks.count(n, f"{where}.per_step_accepted[{i}]")
                                                                     for i, n in enumerate(per_acc)),
            "per_step_drafted": None if per_dr is None else tuple(checks.count(n, f"{where}.per_step_drafted[{i}]")
                                                                   for i, n in enumerate(per_dr)),
            "output_tokens": None if completion is None else checks.count(completion, f"{where}.completion_tokens"),
            "notes": (f"AIPerf record of a {engine} server (its adapter's counts); tau here 1 + accepted / steps, "
                      "AIPerf's per-request Acceptance Length",)}


def read_records(path: Path) -> tuple[list[ServedRequest], list[str]]:
    """The profiling records with a spec-decode record, as ServedRequests keyed by conversation_id; and one
    line per record left out (warmup, error, no verify step). InputError naming the file and line otherwise."""
    text = read_text_file(path, "AIPerf's profile_export.jsonl (one MetricRecordInfo a line)")
    out, left = [], []
    for number, row in jsonl_rows(text, path, objects=False):  # core/jsonl.py
        if not is_record_line(row):
            raise InputError(path, f"line {number}: not an AIPerf record (no metadata and metrics objects)")
        meta = row["metadata"]
        if row.get("error") is not None:
            left.append(f"line {number}: an error record")
            continue
        if "warmup" in (meta.get("benchmark_phase"), meta.get("phase_kind")):
            left.append(f"line {number}: a warmup record")
            continue
        spec = row.get("spec_decode_acceptance")
        if not isinstance(spec, dict):
            left.append(f"line {number}: no spec_decode_acceptance (speculation off or no verify step)")
            continue
        key = meta.get("conversation_id")
        turn = meta.get("turn_index")
        try:
            fields = request_fields(spec, "spec_decode_acceptance")
            notes = fields.pop("notes")
            request = ServedRequest(engine="aiperf", line=number, notes=notes,
                                    key=str(key) if isinstance(key, (str, int)) and not turn else None,
                                    request_id=meta.get("x_request_id") if isinstance(meta.get("x_request_id"), str)
                                    else None, **fields)
            check_request(request)
        except ValueError as exc:
            raise InputError(path, f"line {number}: {exc}") from None
        out.append(request)
    if not out:
        raise InputError(path, "holds no profiling record with a spec_decode_acceptance object (run AIPerf at "
                               "--export-level records against a server that reports per-request spec-decode "
                               "metrics)" + (f"; left out: {'; '.join(left[:3])}" if left else ""))
    return out, left


def is_summary(result: dict) -> bool:
    return "pooled_spec_decode_acceptance_histogram" in result or "total_spec_decode_steps" in result


def _avg(result: dict, tag: str) -> float | None:
    entry = result.get(tag)
    if entry is None:
        return None
    if not isinstance(entry, dict) or "avg" not in entry:
        raise ValueError(f"{tag} is not a metric result with an avg")
    return _number(entry["avg"], f"{tag}.avg")


def served_from_summary(result: dict, source: str) -> Served:
    """The run summary's spec-decode section: the totals, the pooled histogram, both lengths said."""
    missing = [t for t in SUMMARY_TAGS if t not in result]
    if missing:
        raise ValueError(f"has no {', '.join(missing)} (AIPerf ran without per-request spec-decode metrics, or at "
                         "--export-level summary before AIPerf #1191)")
    steps, accepted, drafted = (checks.count(_avg(result, t), f"{t}.avg") for t in SUMMARY_TAGS)
    hist = result.get("pooled_spec_decode_acceptance_histogram")
    hist = None if hist is None else checks.check_histogram(
        _histogram(hist, "pooled_spec_decode_acceptance_histogram"), steps, accepted,
        "pooled_spec_decode_acceptance_histogram")
    checks.check_counts("AIPerf's totals", steps, drafted, accepted)
    weighted = _avg(result, "spec_decode_token_weighted_acceptance_length")
    if weighted is not None:
        checks.check_length(weighted, "spec_decode_token_weighted_acceptance_length.avg")
        if steps and abs(weighted - (1 + accepted / steps)) > 1e-6 * weighted:
            raise ValueError(f"spec_decode_token_weighted_acceptance_length.avg is {weighted!r}, not 1 + {accepted} / "
                             f"{steps} steps")
    rate = _avg(result, "spec_decode_overall_draft_acceptance_rate")
    if rate is not None and drafted and abs(rate / 100 - accepted / drafted) > 1e-6:
        raise ValueError(f"spec_decode_overall_draft_acceptance_rate.avg is {rate!r} (a percent), not 100 x "
                         f"{accepted} / {drafted}")
    request_mean = _avg(result, "spec_decode_acceptance_length")
    notes = ["AIPerf's run summary: totals over the profiling requests (warmup and errors left out by AIPerf); no "
             "per-position counts and no draft length k in it: the comparison assumes the server drafted the "
             "offline run's k"]
    if request_mean is not None:
        checks.check_length(request_mean, "spec_decode_acceptance_length.avg")
        notes.append(f"AIPerf's Acceptance Length {request_mean:.4f} is the mean over requests of each request's "
                     "1 + accepted / steps (macro over requests: ours macro when each prompt is one request); the "
                     "Token-Weighted one is 1 + accepted / steps over every step (ours micro)")
    config = result.get("input_config") or {}
    models = (config.get("models") or {}).get("items") or []
    model = next((m.get("name") for m in models if isinstance(m, dict) and isinstance(m.get("name"), str)), None)
    datasets = [d.get("format") or d.get("dataset") for d in config.get("datasets") or [] if isinstance(d, dict)]
    category = next((n.removeprefix(p) for n in datasets if isinstance(n, str)
                     for p in ("spec_al_", "speed_bench_") if n.startswith(p)), None)
    if category:  # speed_bench_report.extract_category reads the same selector
        notes.append(f"AIPerf dataset category: {category}")
    return Served("aiperf", source, model, ("every profiling request",), steps, drafted, accepted, None,
                  weighted, tuple(notes), histogram=None if hist is None else tuple(hist))


def read_speed_bench(path: Path, text: str, model: str | None) -> dict[str, Any]:
    """The CSV's row of one model: {"model", "cells": {category: value or None}, "overall", "definition"}."""
    rows = list(csv.reader(io.StringIO(text)))
    if not rows or rows[0][:1] != ["Model"] or rows[0][-1:] != ["Overall"] or len(rows[0]) < 3:
        raise InputError(path, "is not AIPerf's speed_bench_report.csv (header Model,<categories...>,Overall)")
    header = rows[0]
    table: dict[str, dict[str, float | None]] = {}
    for number, row in enumerate(rows[1:], 2):
        if not row:
            continue
        if len(row) != len(header):
            raise InputError(path, f"line {number}: {len(row)} cells under a header of {len(header)}")
        cells = {}
        for name, cell in zip(header[1:], row[1:]):
            if cell == "":
                cells[name] = None
                continue
            try:
                cells[name] = _number(float(cell), f"line {number} {name}")
            except ValueError:
                raise InputError(path, f"line {number}: {name} is {cell!r}, not a number") from None
        if row[0] in table:
            raise InputError(path, f"line {number}: model {row[0]!r} is given twice")
        table[row[0]] = cells
    if not table:
        raise InputError(path, "holds no model row")
    if model is None and len(table) > 1:
        raise InputError(path, f"holds {len(table)} models ({', '.join(map(repr, sorted(table)))}): choose one with "
                               "--model")
    name = model if model is not None else next(iter(table))
    if name not in table:
        raise InputError(path, f"holds no row for model {name!r} (models: {', '.join(map(repr, sorted(table)))})")
    cells = dict(table[name])
    overall = cells.pop("Overall")
    return {"model": name, "cells": cells, "overall": overall}


def harness_parity(category: str, provenance: dict[str, Any]) -> str | None:
    """How AIPerf's spec_al_* prompts of `category` differ from the offline run's prompts of that set."""
    key = category.lower().replace("-", "").replace("_", "")
    if key not in AIPERF_SETS:
        return None
    dataset, source, count, field = AIPERF_SETS[key]
    prompts = provenance.get("prompts") or {}
    sets = prompts.get("sets") or {}
    mine = next((n for n in sets if n.lower().replace("-", "").replace("_", "") == key), None)
    thinking = "the server template's default (AIPerf sends no enable_thinking)"
    if mine is None:
        return f"{category}: AIPerf's {dataset} ({source}, {count} prompts, {field}) has no prompt set in this run"
    return (f"{category}: AIPerf's {dataset} is {source}, {count} prompts, {field}, wrapped by the server's chat "
            f"template, thinking {thinking}; this run's {mine} is {sets[mine]} prompts of {prompts.get('source')} "
            f"with thinking {'on' if provenance.get('enable_thinking') else 'off'}: not the same prompts, so the "
            "two taus are not paired")
