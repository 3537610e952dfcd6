"""A client's file of server responses, one request a line, read into `ServedRequest`s (serving/counters/requests.py).

A line is one JSON object, either `{"id", "request", "response"}` (what a client saves: its own id, the
request it sent, the body as the server sent it) or a bare body. Bodies, by the fields their serializers
write:

- vLLM 0.33 chat / completions / generate responses (`ChatCompletionResponse`, `CompletionResponse`,
  `GenerateResponse`: `JSONResponse(content=model.model_dump())`), with `metrics.speculative_decoding`
  (`--per-request-spec-decode-metrics summary|detailed`; n == 1 only; a stream's last chunk carries it with
  `stream_options.include_usage`). The output text is `choices[0].message.content` or `.text`, its ids
  `choices[0].token_ids` (`return_token_ids`), the prompt's `prompt_token_ids`.
- vLLM offline: a `RequestOutput` or `CompletionOutput` dumped as a dict (`dataclasses.asdict` or by hand),
  `spec_decode_metrics` either `RequestSpecDecodeMetrics` as a dict (`num_spec_tokens`, `histogram`,
  `num_draft_tokens`, `per_step_accepted`, `per_step_drafted`) or its `to_dict()`.
- SGLang 0.5.23 `/generate` (`{"text", "output_ids", "meta_info": {...}}`, ORJSONResponse) and its OpenAI
  endpoints (`sglext.spec_tokens_details`, `return_spec_tokens_details`); with sglang #34814's detailed stats
  (`speculative_decoding_stats.verify_lengths` / `accept_lengths`), the walk step by step
  (serving/exports/sglang_details.py).

`--non-speculative` reads the same kinds of lines from the server without speculation
(`read_plain_outputs`: output text or ids and the prompt; a body that counts verify steps is refused).

Every request passes requests.check_request; a line that is none of these, or holds impossible
numbers, is refused: one line naming the file, the line and the field, exit 2.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...core.errors import InputError, loads, read_text_file
from ...core.jsonl import jsonl_rows
from ..counters import checks
from ..counters.requests import ServedOutput, ServedRequest, check_request
from .sglang_details import FIELD as DETAILS_FIELD
from .sglang_details import detailed_fields, stats_of


def _ints(value, what: str) -> tuple[int, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        raise ValueError(f"{what} is not a list of token ids")
    return tuple(checks.count(v, f"{what}[{i}]") for i, v in enumerate(value))


def _request_prompt(request: dict | None, sent: bool = True) -> dict[str, Any]:
    """What the request says about its prompt: messages, a prompt string, token ids; and its temperature.
    `sent` False: a bare response body carrying the request's prompt (its "text" is the output, not read)."""
    out: dict[str, Any] = {}
    if not isinstance(request, dict):
        return out
    messages = request.get("messages")
    if isinstance(messages, list) and messages:
        out["messages"] = tuple(dict(m) for m in messages if isinstance(m, dict))
        users = [m.get("content") for m in messages if isinstance(m, dict) and m.get("role") == "user"]
        if users and isinstance(users[-1], str):
            out["prompt_text"] = users[-1]
    for key in ("prompt", "text") if sent else ("prompt",):
        value = request.get(key)
        if isinstance(value, str):
            out["prompt_text"] = value
        elif isinstance(value, list) and value and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            out["prompt_ids"] = tuple(value)
    for key in ("prompt_token_ids", "input_ids"):
        if isinstance(request.get(key), list):
            out["prompt_ids"] = _ints(request[key], f"request.{key}")
    sampling = request.get("sampling_params") if isinstance(request.get("sampling_params"), dict) else request
    temperature = sampling.get("temperature")
    if isinstance(temperature, (int, float)) and not isinstance(temperature, bool):
        out["temperature"] = float(temperature)
    return out


def _vllm_metrics(m: dict, where: str) -> dict[str, Any]:
    """`SpeculativeDecodingMetrics` (to_dict) or `RequestSpecDecodeMetrics` as a dict, into our fields."""
    if "acceptance_histogram" in m or "num_spec_steps" in m:
        hist = checks.check_histogram(m.get("acceptance_histogram"), None, None, f"{where}.acceptance_histogram")
        steps = checks.count(m.get("num_spec_steps"), f"{where}.num_spec_steps")
        accepted = checks.count(m.get("num_accepted_draft_tokens"), f"{where}.num_accepted_draft_tokens")
        checks.check_histogram(hist, steps, accepted, f"{where}.acceptance_histogram")
        length = checks.check_length(m.get("mean_acceptance_length"), f"{where}.mean_acceptance_length")
        rate = checks.check_rate(m.get("draft_acceptance_rate"), f"{where}.draft_acceptance_rate")
        expected = 1 + accepted / steps if steps else 1.0
        if abs(length - expected) > 1e-6 * expected:
            raise ValueError(f"{where}.mean_acceptance_length is {length!r}, not 1 + {accepted} / {steps} steps")
        draft_tokens = checks.count(m.get("num_draft_tokens"), f"{where}.num_draft_tokens")
        if draft_tokens and abs(rate - accepted / draft_tokens) > 1e-6:
            raise ValueError(f"{where}.draft_acceptance_rate is {rate!r}, not {accepted} / {draft_tokens} drafted")
        reported = length
    else:
        hist = checks.check_histogram(m.get("histogram"), None, None, f"{where}.histogram")
        steps, accepted = sum(hist), sum(j * c for j, c in enumerate(hist))
        draft_tokens = checks.count(m.get("num_draft_tokens"), f"{where}.num_draft_tokens")
        reported = None
    k = checks.count(m.get("num_spec_tokens"), f"{where}.num_spec_tokens")
    return {"steps": steps, "accepted": accepted, "draft_tokens": draft_tokens, "num_spec_tokens": k,
            "histogram": tuple(hist), "reported_length": reported,
            "per_step_accepted": _ints(m.get("per_step_accepted") or None, f"{where}.per_step_accepted"),
            "per_step_drafted": _ints(m.get("per_step_drafted") or None, f"{where}.per_step_drafted")}


def _sglang_metrics(m: dict, where: str, stats: tuple[dict | None, str] = (None, "")) -> dict[str, Any]:
    """SGLang's meta_info (or SpecTokensDetails) into our fields; its acceptance length converted; `stats`: the
    request's #34814 ordered lengths and where they were found (serving/exports/sglang_details.py)."""
    if "spec_verify_ct" not in m and stats[0] is not None:  # the #34814 stats alone
        detail = detailed_fields(stats[0], stats[1], None)
        if not detail:
            raise ValueError(f"{stats[1]} has no verify_lengths / accept_lengths")
        ragged = detail.pop("ragged")
        return {**detail, "num_spec_tokens": None if ragged or detail["per_step_drafted"] is None else
                max(detail["per_step_drafted"], default=None), "histogram": None, "reported_length": None}
    steps = checks.count(m.get("spec_verify_ct"), f"{where}.spec_verify_ct")
    accepted = checks.count(m.get("spec_num_correct_drafts"), f"{where}.spec_num_correct_drafts")
    proposed = m.get("spec_num_proposed_drafts")
    proposed = None if proposed is None else checks.count(proposed, f"{where}.spec_num_proposed_drafts")
    detail = detailed_fields(stats[0], stats[1], {"steps": steps, "accepted": accepted, "draft_tokens": proposed}) \
        if stats[0] is not None else {}
    ragged = detail.pop("ragged", False)
    if proposed is not None:
        checks.check_counts(f"{where}.spec_num_correct_drafts / spec_num_proposed_drafts", steps, proposed, accepted)
    k = proposed // steps if proposed is not None and steps and proposed % steps == 0 and not ragged else None
    if proposed is not None and steps and proposed % steps and not ragged:
        raise ValueError(f"{where}.spec_num_proposed_drafts = {proposed} is not spec_verify_ct ({steps}) x the "
                         "drafted tokens per step")
    length = m.get("spec_accept_length")
    if length is not None and steps:
        length = checks.check_length(length, f"{where}.spec_accept_length")
        completion = m.get("completion_tokens")
        if completion is not None and abs(length - checks.count(completion, f"{where}.completion_tokens") / steps) \
                > 1e-6 * length:
            raise ValueError(f"{where}.spec_accept_length is {length!r}, not completion_tokens / spec_verify_ct")
    rate = m.get("spec_accept_rate")
    if rate is not None and steps:
        checks.check_rate(rate, f"{where}.spec_accept_rate")
        if proposed and abs(rate - accepted / proposed) > 1e-6:
            raise ValueError(f"{where}.spec_accept_rate is {rate!r}, not {accepted} / {proposed} proposed drafts")
    hist = m.get("spec_correct_drafts_histogram") or None
    if hist is not None:
        hist = tuple(checks.check_histogram(hist, steps, accepted, f"{where}.spec_correct_drafts_histogram"))
    completion = m.get("completion_tokens")
    fields = {"steps": steps, "accepted": accepted, "draft_tokens": proposed, "num_spec_tokens": k,
              "histogram": hist, "reported_length": length if steps else None,
              "output_tokens": None if completion is None else checks.count(completion, f"{where}.completion_tokens"),
              "notes": ("SGLang's spec_accept_length counts the prefill token (completion_tokens / spec_verify_ct); "
                        "tau here is 1 + spec_num_correct_drafts / spec_verify_ct",)}
    if detail:  # the ordered lengths: the walk step by step; under ragged verification no drafted count
        fields.update(per_step_accepted=detail["per_step_accepted"], per_step_drafted=detail["per_step_drafted"],
                      notes=fields["notes"] + detail["notes"])
        if ragged:
            fields.update(draft_tokens=None, num_spec_tokens=None)
    return fields


def _speculation_in(body: dict) -> str | None:
    """The field that says a response was decoded speculatively (verify steps counted), or None."""
    meta = body.get("meta_info")
    if isinstance(meta, dict) and meta.get("spec_verify_ct"):
        return f"meta_info.spec_verify_ct = {meta['spec_verify_ct']}"
    ext = body.get("sglext")
    if isinstance(ext, dict) and ext.get("spec_tokens_details"):
        return "sglext.spec_tokens_details"
    for holder, name in ((meta, "meta_info"), (ext, "sglext")):  # sglang #34814's ordered lengths
        stats = holder.get(DETAILS_FIELD) if isinstance(holder, dict) else None
        if isinstance(stats, dict) and stats.get("verify_lengths"):
            return f"{name}.{DETAILS_FIELD}.verify_lengths"
    metrics = body.get("metrics")
    if isinstance(metrics, dict) and isinstance(metrics.get("speculative_decoding"), dict) \
            and metrics["speculative_decoding"].get("num_spec_steps"):
        return f"metrics.speculative_decoding.num_spec_steps = {metrics['speculative_decoding']['num_spec_steps']}"
    for holder in [body, *(body.get(k)[0] for k in ("choices", "outputs")
                           if isinstance(body.get(k), list) and body.get(k) and isinstance(body.get(k)[0], dict))]:
        spec = holder.get("spec_decode_metrics")
        if isinstance(spec, dict) and (spec.get("num_spec_steps") or any(spec.get("histogram") or [])):
            return "spec_decode_metrics"
    return None


def parse_plain_body(body: dict, where: str) -> dict[str, Any]:
    """A response body of the server without speculative decoding: its engine, output and prompt ids
    (ValueError naming the field when broken, or when the body counts speculative verify steps)."""
    speculative = _speculation_in(body)
    if speculative is not None:
        raise ValueError(f"{speculative}: this response was decoded speculatively; --non-speculative takes the same "
                         "server's responses with speculative decoding off")
    if isinstance(body.get("meta_info"), dict):  # SGLang /generate
        return {"engine": "sglang", "output_ids": _ints(body.get("output_ids"), "output_ids"),
                "output_text": body.get("text") if isinstance(body.get("text"), str) else None,
                "prompt_ids": _ints(body.get("prompt_token_ids"), "prompt_token_ids")}
    choice = body
    for key in ("choices", "outputs"):
        if isinstance(body.get(key), list):
            if len(body[key]) != 1:
                raise ValueError(f"has {len(body[key])} {key}: compare one sequence per request")
            choice = body[key][0] if isinstance(body[key][0], dict) else {}
    message = choice.get("message") if isinstance(choice.get("message"), dict) else {}
    text = message.get("content", choice.get("text"))
    fields = {"engine": "vllm", "output_text": text if isinstance(text, str) else None,
              "output_ids": _ints(choice.get("token_ids"), "choices[0].token_ids"),
              "prompt_ids": _ints(body.get("prompt_token_ids", choice.get("prompt_token_ids")), "prompt_token_ids")}
    if isinstance(body.get("prompt"), str):
        fields["prompt_text"] = body["prompt"]
    return fields


def parse_body(body: dict, where: str) -> dict[str, Any]:
    """A response body's engine, metrics, output and prompt ids (ValueError naming the field when broken)."""
    if isinstance(body.get("meta_info"), dict):  # SGLang /generate
        meta = body["meta_info"]
        if "spec_verify_ct" not in meta and meta.get(DETAILS_FIELD) is None:
            raise ValueError("meta_info has no spec_verify_ct (speculative decoding off, or the request did not "
                             "finish)")
        return {"engine": "sglang", **_sglang_metrics(meta, "meta_info", stats_of(body)),
                "output_ids": _ints(body.get("output_ids"), "output_ids"),
                "output_text": body.get("text") if isinstance(body.get("text"), str) else None,
                "prompt_ids": _ints(body.get("prompt_token_ids"), "prompt_token_ids"),
                "request_id": meta.get("id") if isinstance(meta.get("id"), str) else None}
    choice = None
    if isinstance(body.get("choices"), list):
        if len(body["choices"]) != 1:
            raise ValueError(f"has {len(body['choices'])} choices: per-request metrics exist for n == 1 only")
        choice = body["choices"][0] if isinstance(body["choices"][0], dict) else None
    outputs = body.get("outputs")
    if isinstance(outputs, list):  # a RequestOutput dump
        if len(outputs) != 1:
            raise ValueError(f"has {len(outputs)} outputs: compare one sequence per request")
        choice = outputs[0]
    if choice is None and "spec_decode_metrics" in body:  # a CompletionOutput dump on its own
        choice = body
    source = choice if choice is not None and "spec_decode_metrics" in choice else body
    ext = body.get("sglext") if isinstance(body.get("sglext"), dict) else None
    if ext is not None and (ext.get("spec_tokens_details") is not None or ext.get(DETAILS_FIELD) is not None):
        details = ext.get("spec_tokens_details") or {}  # SGLang's OpenAI endpoints (and #34814's stats)
        details = details[0] if isinstance(details, list) and len(details) == 1 else details
        if not isinstance(details, dict):
            raise ValueError("sglext.spec_tokens_details is not one object")
        fields = {"engine": "sglang", **_sglang_metrics(details, "sglext.spec_tokens_details", stats_of(body))}
    elif isinstance(source.get("spec_decode_metrics"), dict):
        fields = {"engine": "vllm", **_vllm_metrics(source["spec_decode_metrics"], "spec_decode_metrics")}
    elif isinstance(body.get("metrics"), dict) and isinstance(body["metrics"].get("speculative_decoding"), dict):
        fields = {"engine": "vllm", **_vllm_metrics(body["metrics"]["speculative_decoding"],
                                                    "metrics.speculative_decoding")}
    else:
        raise ValueError("holds no per-request speculative-decoding metrics (vLLM: metrics.speculative_decoding with "
                         "--per-request-spec-decode-metrics; CompletionOutput.spec_decode_metrics; SGLang: meta_info)")
    choice = choice or {}
    message = choice.get("message") if isinstance(choice.get("message"), dict) else {}
    text = message.get("content", choice.get("text"))
    fields["output_text"] = text if isinstance(text, str) else None
    fields["output_ids"] = _ints(choice.get("token_ids"), "choices[0].token_ids")
    usage = body.get("usage") if isinstance(body.get("usage"), dict) else {}
    if usage.get("completion_tokens") is not None:
        fields["output_tokens"] = checks.count(usage["completion_tokens"], "usage.completion_tokens")
    prompt_ids = body.get("prompt_token_ids", choice.get("prompt_token_ids"))
    fields["prompt_ids"] = _ints(prompt_ids, "prompt_token_ids")
    if isinstance(body.get("prompt"), str):
        fields["prompt_text"] = body["prompt"]
    rid = body.get("id", body.get("request_id"))
    fields["request_id"] = rid if isinstance(rid, str) else None
    return fields


def _lines(path: Path, what: str):
    """(line number, the line's object, its response body, whether the body was wrapped) for every line."""
    text = read_text_file(path, what)
    for number, row in jsonl_rows(text, path):  # core/jsonl.py
        wrapped = "response" in row and isinstance(row["response"], dict)
        yield number, row, row["response"] if wrapped else row, wrapped


def _with_request(fields: dict[str, Any], row: dict, body: dict, wrapped: bool) -> dict[str, Any]:
    """The request's prompt and temperature filled in where the body does not say them; the client's id."""
    for name, value in (_request_prompt(row.get("request")) if wrapped else _request_prompt(body, sent=False)).items():
        if fields.get(name) is None:
            fields[name] = value
    key = row.get("id") if wrapped and isinstance(row.get("id"), (str, int)) else None
    return {"key": None if key is None else str(key), **{k: v for k, v in fields.items() if v is not None}}


def read_requests_noted(path: Path) -> tuple[list[ServedRequest], list[str]]:
    """The file's requests and what was left out of them: AIPerf's records export (serving/exports/aiperf.py,
    recognised by its first line) or a file of server responses (read_requests)."""
    from .aiperf import is_record_line, read_records

    first = next((line for line in read_text_file(path, "a JSONL of server responses").splitlines() if line.strip()),
                 "")
    try:
        row = loads(first) if first else None
    except ValueError:
        row = None
    if is_record_line(row):
        requests, left = read_records(path)
        return requests, [f"AIPerf records left out: {len(left)} ({'; '.join(left[:3])}"
                          + ("; ..." if len(left) > 3 else "") + ")"] if left else []
    return read_requests(path), []


def read_requests(path: Path) -> list[ServedRequest]:
    """Every line of the file as a ServedRequest; InputError naming the file and line otherwise."""
    out = []
    for number, row, body, wrapped in _lines(path, "a JSONL of server responses, one request a line"):
        try:
            fields = parse_body(body, f"line {number}")
            notes = tuple(fields.pop("notes", ()))
            request = ServedRequest(line=number, notes=notes, **_with_request(fields, row, body, wrapped))
            check_request(request)
        except ValueError as exc:
            raise InputError(path, str(exc) if str(exc).startswith("line ") else f"line {number}: {exc}") from None
        out.append(request)
    if not out:
        raise InputError(path, "holds no responses")
    return out


def read_plain_outputs(path: Path) -> list[ServedOutput]:
    """The same server's responses without speculative decoding (`--non-speculative`), every line a greedy
    output with its text or token ids; InputError naming the file and line otherwise (a response that counts
    verify steps, a temperature above 0, no output)."""
    out = []
    for number, row, body, wrapped in _lines(path, "a JSONL of the server's responses without speculative decoding"):
        try:
            output = ServedOutput(line=number, **_with_request(parse_plain_body(body, f"line {number}"), row, body,
                                                               wrapped))
        except ValueError as exc:
            raise InputError(path, f"line {number}: {exc}") from None
        if output.output_ids is None and output.output_text is None:
            raise InputError(path, f"line {number}: holds no output text or token ids")
        if output.temperature:
            raise InputError(path, f"line {number}: temperature {output.temperature}: the non-speculative reference "
                                   "must be greedy (temperature 0)")
        out.append(output)
    if not out:
        raise InputError(path, "holds no responses")
    return out
