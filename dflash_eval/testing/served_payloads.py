"""Server payloads written as the engines' own serializers write them, filled from an offline run's walks.

For `served --per-request` tests: the bodies are laid out field for field, in field order, as the engines'
models dump them (nothing imported from the engines, which are never installed):

- vLLM 0.33: `RequestSpecDecodeMetrics` (v1/metrics/stats.py) accumulates one `observe(num_draft_tokens,
  num_accepted, detailed)` per verify step and `to_dict()` gives `SpeculativeDecodingMetrics`
  (entrypoints/generate/base/protocol.py); a chat response is `ChatCompletionResponse.model_dump()` through
  Starlette's `JSONResponse` (compact separators, ensure_ascii off); `ChatMessage` drops an empty
  `tool_calls`. vLLM drafts num_speculative_tokens per step, the last step too.
- llama.cpp (#26389): `/metrics` as `server_task_result_metrics::to_metrics()` prints it (`llamacpp_metrics`).
- AIPerf (ai-dynamo/aiperf): the records export, the run summary's spec-decode section and the speed-bench CSV
  (`aiperf_record`, `aiperf_summary`, `aiperf_speed_bench_csv`; each cites the AIPerf code it follows).
- SGLang 0.5.23: `/generate` returns `{"text", "output_ids", "meta_info"}` (tokenizer_manager.py,
  ORJSONResponse), meta_info built as `_calculate_spec_decoding_metrics` builds it; the histogram grows to
  the largest count seen (`Req.update_spec_correct_drafts_histogram`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any


def starlette_json(obj: Any) -> str:
    """What `JSONResponse.render` writes (and, for these payloads, orjson too)."""
    return json.dumps(obj, ensure_ascii=False, allow_nan=False, indent=None, separators=(",", ":"))


def vllm_spec_metrics(accepted: Sequence[int], k: int, detailed: bool = False,
                      drafted: Sequence[int] | None = None) -> dict[str, Any]:
    """RequestSpecDecodeMetrics.new(k), one observe per step, then to_dict()."""
    histogram, total_drafted, per_acc, per_dr = [0] * (k + 1), 0, [], []
    for i, n in enumerate(accepted):
        d = k if drafted is None else drafted[i]
        histogram[n] += 1
        total_drafted += d
        if detailed:
            per_acc.append(n)
            per_dr.append(d)
    steps = sum(histogram)
    num_accepted = sum(j * c for j, c in enumerate(histogram))
    out = {"mean_acceptance_length": 1.0 + num_accepted / steps if steps else 1.0,
           "draft_acceptance_rate": num_accepted / total_drafted if total_drafted else 0.0,
           "acceptance_histogram": histogram, "num_spec_steps": steps, "num_accepted_draft_tokens": num_accepted,
           "num_draft_tokens": total_drafted, "num_spec_tokens": k}
    if per_acc:
        out["per_step_accepted"] = per_acc
        out["per_step_drafted"] = per_dr
    return out


def vllm_chat_response(model: str, text: str, token_ids: Sequence[int] | None, prompt_len: int,
                       spec: dict[str, Any] | None, finish_reason: str = "length", created: int = 1796143071,
                       request_id: str = "chatcmpl-0") -> dict[str, Any]:
    """ChatCompletionResponse.model_dump() with metrics.speculative_decoding (model_dump keeps None fields)."""
    spec_model = None if spec is None else {**spec, "per_step_accepted": spec.get("per_step_accepted"),
                                            "per_step_drafted": spec.get("per_step_drafted")}
    completion = len(token_ids) if token_ids is not None else 0
    return {
        "id": request_id, "object": "chat.completion", "created": created, "model": model,
        "choices": [{"index": 0,
                     "message": {"role": "assistant", "content": text, "refusal": None, "annotations": None,
                                 "audio": None, "function_call": None, "reasoning": None},
                     "logprobs": None, "finish_reason": finish_reason, "stop_reason": None,
                     "token_ids": None if token_ids is None else list(token_ids), "routed_experts": None,
                     "weight_versions": None}],
        "service_tier": None, "system_fingerprint": None,
        "usage": {"prompt_tokens": prompt_len, "total_tokens": prompt_len + completion,
                  "completion_tokens": completion, "prompt_tokens_details": None, "completion_tokens_details": None},
        "prompt_logprobs": None, "prompt_token_ids": None, "prompt_text": None, "kv_transfer_params": None,
        "ec_transfer_params": None,
        "metrics": {"time_to_first_token_ms": None, "generation_time_ms": None, "queue_time_ms": None,
                    "mean_itl_ms": None, "tokens_per_second": None, "speculative_decoding": spec_model},
    }


def vllm_completion_output(text: str, token_ids: Sequence[int], accepted: Sequence[int], k: int,
                           detailed: bool = True, finish_reason: str = "length") -> dict[str, Any]:
    """`dataclasses.asdict(CompletionOutput)` (vllm/outputs.py) with its RequestSpecDecodeMetrics as a dict."""
    histogram = [0] * (k + 1)
    for n in accepted:
        histogram[n] += 1
    return {"index": 0, "text": text, "token_ids": list(token_ids), "cumulative_logprob": None, "logprobs": None,
            "routed_experts": None, "finish_reason": finish_reason, "stop_reason": None, "lora_request": None,
            "sampling_mask": None,
            "spec_decode_metrics": {"num_spec_tokens": k, "histogram": histogram, "num_draft_tokens": k * len(accepted),
                                    "per_step_accepted": list(accepted) if detailed else [],
                                    "per_step_drafted": [k] * len(accepted) if detailed else []},
            "weight_versions": None}


def sglang_detailed_stats(accepted: Sequence[int], widths: Sequence[int]) -> dict[str, Any]:
    """sglang #34814's `speculative_decoding_stats` at `detailed`, the two ordered arrays its description names
    (`verify_lengths`: each step's verification width, the stride counting the root token as SGLang's
    speculative_num_draft_tokens does, or cap_lens when ragged; `accept_lengths`: the drafts it accepted). The
    PR is open: its summary counters are not written here, their names not being settled."""
    return {"verify_lengths": list(widths), "accept_lengths": list(accepted)}


def sglang_generate_response(text: str, output_ids: Sequence[int], accepted: Sequence[int], k: int, prompt_len: int,
                             request_id: str = "0", finish: dict | None = None,
                             detailed: dict[str, Any] | None = None) -> dict[str, Any]:
    """SGLang's /generate body for a finished request (meta_info as tokenizer_manager.py builds it); `detailed`:
    #34814's stats, placed in meta_info.speculative_decoding_stats."""
    steps, correct = len(accepted), sum(accepted)
    histogram: list[int] = []
    for n in accepted:  # Req.update_spec_correct_drafts_histogram
        if len(histogram) <= n:
            histogram.extend([0] * (n - len(histogram) + 1))
        histogram[n] += 1
    meta = {"id": request_id, "finish_reason": finish or {"type": "length", "length": len(output_ids)},
            "prompt_tokens": prompt_len, "weight_version": "default", "num_retractions": 0, "reasoning_tokens": 0,
            "completion_tokens": len(output_ids), "cached_tokens": 0, "e2e_latency": 0.25}
    if steps:
        proposed = steps * k
        meta.update({"spec_accept_rate": correct / proposed, "spec_accept_length": len(output_ids) / steps,
                     "spec_num_correct_drafts": correct, "spec_num_proposed_drafts": proposed,
                     "spec_verify_ct": steps})
        if histogram:
            meta["spec_correct_drafts_histogram"] = histogram
    if detailed is not None:
        meta["speculative_decoding_stats"] = detailed
    return {"text": text, "output_ids": list(output_ids), "meta_info": meta}


def capped_walk(row: dict[str, Any], cap: int) -> list[int]:
    """The walk a worse drafter makes over the same text: at each anchor the offline run's accepted count
    n(a) (`anchor_accepted`), at most `cap`; lossless, so the text is unchanged and the steps grow."""
    p, n_of = row["prompt_len"], row["anchor_accepted"]
    last = p + row["continuation_len"] - 1  # the last committed position
    a, out = p, []
    while a < last:
        n = min(n_of[a - p], cap, last - a - 1)
        out.append(n)
        a += n + 1
    return out


# ------------------------------------------------------------------ llama.cpp: the /metrics text of llama-server

LLAMACPP_COUNTERS = (  # server-task.cpp server_task_result_metrics::to_metrics(), in its order
    ("prompt_tokens_total", "Number of prompt tokens processed, excluding cached tokens"),
    ("prompt_tokens_cached_total", "Number of prompt tokens reused from the cache"),
    ("prompt_seconds_total", "Total time spent processing prompts"),
    ("tokens_predicted_total", "Number of generation tokens processed"),
    ("tokens_predicted_seconds_total", "Total time spent generating tokens"),
    ("n_decode_total", "Total number of llama_decode() calls, excluding speculative decoding and multimodal decoding"),
    ("n_tokens_max", "Largest observed sequence length (prompt + generation)"),
    ("spec_decode_num_draft_tokens_total", "Speculative: Total draft tokens generated"),
    ("spec_decode_num_accepted_tokens_total", "Speculative: Total draft tokens accepted by the target model"),
    ("spec_decode_num_drafts_total", "Speculative: Total speculative decoding verification steps"),
)
LLAMACPP_GAUGES = (
    ("prompt_tokens_seconds", "Average prompt throughput in tokens/s"),
    ("predicted_tokens_seconds", "Average generation throughput in tokens/s"),
    ("requests_processing", "Number of requests processing"),
    ("requests_deferred", "Number of requests deferred"),
    ("n_busy_slots_per_decode", "Average number of busy slots per llama_decode() call"),
)


def cpp_double(value: float) -> str:
    """A double through `std::ostream <<` at the default precision (6 significant digits, %g's shape)."""
    return format(float(value), ".6g")


def llamacpp_metrics(drafts: int, draft_tokens: int, accepted: int, accepted_per_pos: Sequence[int] | None,
                     predicted: int = 0, prompt: int = 0) -> str:
    """What llama-server's /metrics returns: each counter then each gauge as `# HELP`, `# TYPE`, `llamacpp:NAME
    VALUE` (values are doubles, 6 significant digits), then the per-position counter (uint64, exact) only when
    a speculative request has finished (`accepted_per_pos` not None)."""
    values = {"prompt_tokens_total": prompt, "prompt_tokens_cached_total": 0, "prompt_seconds_total": 0.125,
              "tokens_predicted_total": predicted, "tokens_predicted_seconds_total": 1.5, "n_decode_total": 17,
              "n_tokens_max": prompt + predicted, "spec_decode_num_draft_tokens_total": draft_tokens,
              "spec_decode_num_accepted_tokens_total": accepted, "spec_decode_num_drafts_total": drafts,
              "prompt_tokens_seconds": 0.0, "predicted_tokens_seconds": 0.0, "requests_processing": 0,
              "requests_deferred": 0, "n_busy_slots_per_decode": 1.0}
    lines = []
    for kind, items in (("counter", LLAMACPP_COUNTERS), ("gauge", LLAMACPP_GAUGES)):
        for name, doc in items:
            lines += [f"# HELP llamacpp:{name} {doc}", f"# TYPE llamacpp:{name} {kind}",
                      f"llamacpp:{name} {cpp_double(values[name])}"]
    if accepted_per_pos:
        lines += ["# HELP llamacpp:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens per draft position",
                  "# TYPE llamacpp:spec_decode_num_accepted_tokens_per_pos_total counter"]
        lines += [f'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{{position="{i}"}} {int(n)}'
                  for i, n in enumerate(accepted_per_pos)]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------ AIPerf: records, run summary, speed-bench CSV


def aiperf_acceptance(accepted: Sequence[int], k: int | None, engine: str = "vllm", completion_tokens: int | None = None,
                      detailed: bool = False, drafted: Sequence[int] | None = None) -> dict[str, Any]:
    """`SpecDecodeAcceptanceRecord` (src/aiperf/common/models/spec_decode_models.py) as JSON, field order kept:
    the sparse histogram's int keys become strings on the wire, zero-count buckets omitted."""
    steps, num_accepted = len(accepted), sum(accepted)
    per_drafted = list(drafted) if drafted is not None else [k or 0] * steps
    sparse: dict[str, int] = {}
    for n in sorted(accepted):
        sparse[str(n)] = sparse.get(str(n), 0) + 1
    total_drafted = sum(per_drafted)
    return {"engine": engine, "mean_acceptance_length": 1.0 + num_accepted / steps if steps else 1.0,
            "draft_acceptance_rate": num_accepted / total_drafted if total_drafted else 0.0,
            "acceptance_histogram": sparse, "num_accepted_draft_tokens": num_accepted,
            "num_draft_tokens": total_drafted, "num_spec_steps": steps, "num_spec_tokens": k,
            "completion_tokens": completion_tokens,
            "per_step_accepted": list(accepted) if detailed else None,
            "per_step_drafted": per_drafted if detailed else None}


def aiperf_record(session_num: int, conversation_id: str | None, spec: dict[str, Any] | None, phase: str = "profiling",
                  error: dict | None = None) -> dict[str, Any]:
    """One line of `profile_export.jsonl`: `MetricRecordInfo(metadata, metrics, trace_data, spec_decode_acceptance,
    error)` as AIPerf's record_export_results_processor writes it (src/aiperf/common/models/record_models.py),
    None fields left out; `metadata` a MetricRecordMetadata, `metrics` tag -> {"value", "unit"} in display units
    (the spec-decode tags of metrics/types/spec_decode_metrics.py; the rate as a percent)."""
    metadata = {"session_num": session_num, "x_request_id": f"req-{session_num}", "x_correlation_id": f"corr-{session_num}",
                "conversation_id": conversation_id, "turn_index": 0, "request_start_ns": 1_790_000_000_000_000_000 + session_num,
                "request_end_ns": 1_790_000_001_000_000_000 + session_num, "worker_id": "worker_0",
                "record_processor_id": "record_processor_0", "benchmark_phase": phase, "was_cancelled": False}
    metrics: dict[str, Any] = {"request_latency": {"value": 812.5, "unit": "ms"}}
    if spec is not None:
        metrics.update({
            "spec_decode_acceptance_length": {"value": spec["mean_acceptance_length"], "unit": "ratio"},
            "spec_decode_draft_acceptance_rate": {"value": spec["draft_acceptance_rate"] * 100.0, "unit": "%"},
            "spec_decode_steps": {"value": spec["num_spec_steps"], "unit": "count"},
            "spec_decode_accepted_draft_tokens": {"value": spec["num_accepted_draft_tokens"], "unit": "tokens"},
            "spec_decode_draft_tokens": {"value": spec["num_draft_tokens"], "unit": "tokens"}})
    row: dict[str, Any] = {"metadata": {k: v for k, v in metadata.items() if v is not None}, "metrics": metrics}
    if spec is not None:
        row["spec_decode_acceptance"] = spec
    if error is not None:
        row["error"] = error
    return row


def _result(value: float, unit: str) -> dict[str, Any]:
    """A scalar JsonMetricResult (aggregate and derived metrics carry no count)."""
    return {"unit": unit, "avg": value}


def aiperf_summary(specs: Sequence[dict[str, Any]], model: str, dataset: str) -> dict[str, Any]:
    """The spec-decode part of `profile_export_aiperf.json` for the given per-request records: the totals
    (TotalSpecDecodeStepsMetric, TotalAcceptedDraftTokensMetric, TotalDraftTokensMetric), the token-weighted and
    per-request-mean lengths, the overall rate (a percent) and `pooled_spec_decode_acceptance_histogram`
    (ProfileResults; JSON keys are strings), beside the `input_config` AIPerf dumps (models.items, datasets)."""
    steps = sum(s["num_spec_steps"] for s in specs)
    accepted = sum(s["num_accepted_draft_tokens"] for s in specs)
    drafted = sum(s["num_draft_tokens"] for s in specs)
    pooled: dict[int, int] = {}
    for s in specs:
        for j, c in s["acceptance_histogram"].items():
            pooled[int(j)] = pooled.get(int(j), 0) + c
    lengths = [s["mean_acceptance_length"] for s in specs]
    return {"input_config": {"models": {"items": [{"name": model}]}, "datasets": [{"dataset": dataset}]},
            "spec_decode_acceptance_length": {"unit": "ratio", "avg": sum(lengths) / len(lengths),
                                              "min": min(lengths), "max": max(lengths), "count": len(lengths)},
            "spec_decode_token_weighted_acceptance_length": _result(1.0 + accepted / steps, "ratio"),
            "spec_decode_overall_draft_acceptance_rate": _result(accepted / drafted * 100.0, "%"),
            "total_spec_decode_steps": _result(steps, "count"),
            "total_accepted_draft_tokens": _result(accepted, "tokens"),
            "total_draft_tokens": _result(drafted, "tokens"),
            "pooled_spec_decode_acceptance_histogram": {str(j): pooled[j] for j in sorted(pooled)}}


def aiperf_speed_bench_csv(results: dict[str, dict[str, float | None]], columns: Sequence[str]) -> str:
    """What `aiperf speed-bench-report` writes (src/aiperf/analysis/speed_bench_report.py `write_csv`): csv.writer
    (CRLF rows), header Model,<columns...>,Overall, each cell `f"{v:.2f}"` or empty, Overall the mean of the
    categories present (`_overall`), models sorted."""
    import csv
    import io
    from statistics import mean

    out = io.StringIO(newline="")
    writer = csv.writer(out)
    writer.writerow(["Model", *columns, "Overall"])
    for model, data in sorted(results.items()):
        present = [v for c in columns if (v := data.get(c)) is not None]
        cells = [data.get(c) for c in columns] + [mean(present) if present else None]
        writer.writerow([model, *(f"{v:.2f}" if v is not None else "" for v in cells)])
    return out.getvalue()
