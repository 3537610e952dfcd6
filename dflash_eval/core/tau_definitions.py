"""Every tau we print or import, with the definition it was computed under and the conversion to ours.

Users put our numbers next to published tables, their server and a benchmark harness; each pools, counts
and rounds its own way, and the same drafter reads 6.55 in one place and 6.2 in another without anything
being wrong. So every tau carries one of the definitions below (`DEFINITIONS[key]`: what it counts, how it
pools, the producer's file that computes it), and an imported tau is converted to ours where its counters
allow, the formula shown with the numbers put in; where they do not, `not_convertible` says why instead of
printing a number.

Ours (core/metrics.py): a step commits its accepted drafts plus the target's bonus token, so a step's length
is accepted + 1; `tau_macro` is the mean over prompts of each prompt's committed / steps (z-lab's and
DDTree's published numbers), `tau_micro` the pooled 1 + accepted / steps (vLLM's, llama.cpp's).

| key | tau | pooled over | source |
|---|---|---|---|
| zlab | mean over prompts of (accepted + 1 per step) | prompts (macro) | z-lab/dflash `benchmark.py` (acceptance_lengths), liranringel/ddtree `ddtree.py` |
| ours_micro | 1 + accepted / steps | steps | core/metrics.py tau_micro |
| vllm | 1 + num_accepted_tokens / num_drafts | steps, all requests | vLLM `v1/spec_decode/metrics.py` SpecDecodingStats / SpecDecodingProm |
| llamacpp | 1 + n_draft_accepted / n_draft_verif_steps | steps, finished requests | llama.cpp `tools/server/server-context.cpp` (print_timings), `server-task.cpp` to_metrics |
| sglang | completion_tokens / spec_verify_ct | steps of one request | SGLang `srt/managers/tokenizer_manager.py` (spec_accept_length) |
| sglang_gauge | mean accept length of the last logging window | a time window | SGLang `srt/observability/metrics_collector.py` (sglang:spec_accept_length) |
| aiperf_request_mean | mean over requests of (1 + accepted / steps) | requests (macro) | AIPerf `metrics/types/spec_decode_metrics.py` SpecDecodeAcceptanceLengthMetric |
| aiperf_token_weighted | 1 + sum accepted / sum steps | steps | AIPerf SpecDecodeTokenWeightedAcceptanceLengthMetric |
| aiperf_speed_bench | per category: token-weighted (records, summary, counters) or a gauge's time average, 2 decimals; Overall = mean over categories | steps per category | AIPerf `analysis/speed_bench_report.py` |
| deepspec | expected tau of the batch's anchors | steps (anchors) | deepseek-ai/DeepSpec `deepspec/utils/metrics.py` (train/tau_probabilistic) |

Conversions (ours = what the counters give under our definition):
- vLLM, llama.cpp, AIPerf token-weighted: already 1 + accepted / steps pooled = our tau_micro; their
  macro counterpart needs per-request counts (vLLM per-request metrics, AIPerf records).
- SGLang per request: ours = 1 + spec_num_correct_drafts / spec_verify_ct; its spec_accept_length =
  completion_tokens / spec_verify_ct counts the prefill's token as if a step had made it (and, read from
  completion tokens, only the drafts the client saw). Under ragged verification (adaptive widths, sglang
  #34814) spec_num_proposed_drafts = verify_ct x width is not what was drafted, so SGLang's acceptance
  rate has no conversion without the ordered verify_lengths.
- AIPerf request mean: the macro over requests = ours macro when each prompt is one request.
- SGLang gauge, AIPerf speed-bench cells, DeepSpec: no counts behind them: not converted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Definition:
    """What one tau counts, how it pools, and where its producer computes it."""

    key: str
    label: str
    formula: str
    pooled: str
    source: str
    ours: bool = False  # our own definition (tau macro or micro)

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "label": self.label, "formula": self.formula, "pooled": self.pooled,
                "source": self.source}

    def said(self) -> str:
        """One line: the label, the formula and the pooling."""
        return f"{self.label}: {self.formula}, pooled over {self.pooled}"


DEFINITIONS: dict[str, Definition] = {d.key: d for d in (
    Definition("zlab", "z-lab/DDTree tau", "accepted + 1 per step, mean over each prompt's steps, then over prompts",
               "prompts (macro)", "z-lab/dflash benchmark.py (acceptance_lengths); liranringel/ddtree ddtree.py",
               ours=True),
    Definition("ours_micro", "tau micro", "1 + accepted / steps", "every step of every prompt",
               "dflash_eval core/metrics.py (tau_micro)", ours=True),
    Definition("vllm", "vLLM mean acceptance length", "1 + num_accepted_tokens / num_drafts",
               "every step of every request (engines summed)",
               "vLLM v1/spec_decode/metrics.py (SpecDecodingStats, SpecDecodingProm)"),
    Definition("llamacpp", "llama.cpp mean acceptance length", "1 + n_draft_accepted / n_draft_verif_steps",
               "every step of the requests finished between the scrapes",
               "llama.cpp tools/server/server-context.cpp (slot stats, print_timings); server-task.cpp "
               "server_task_result_metrics::to_metrics"),
    Definition("sglang", "SGLang spec_accept_length", "completion_tokens / spec_verify_ct (the prefill's token "
               "counted as if a step had made it)", "the steps of one request",
               "SGLang srt/managers/tokenizer_manager.py (_calculate_spec_decoding_metrics)"),
    Definition("sglang_gauge", "SGLang sglang:spec_accept_length gauge",
               "mean acceptance length of the most recent logging window", "a time window, no counts",
               "SGLang srt/observability/metrics_collector.py"),
    Definition("aiperf_request_mean", "AIPerf Acceptance Length (spec_decode_acceptance_length avg)",
               "mean over requests of 1 + accepted / steps", "requests (macro)",
               "AIPerf src/aiperf/metrics/types/spec_decode_metrics.py (SpecDecodeAcceptanceLengthMetric)"),
    Definition("aiperf_token_weighted", "AIPerf Token-Weighted Acceptance Length",
               "1 + sum of accepted / sum of steps", "every step of every request",
               "AIPerf src/aiperf/metrics/types/spec_decode_metrics.py "
               "(SpecDecodeTokenWeightedAcceptanceLengthMetric)"),
    Definition("aiperf_speed_bench", "AIPerf speed_bench_report.csv cell",
               "per category 1 + accepted / steps (records, summary or counters) or a gauge's time average "
               "(SGLang, TRT-LLM), printed with 2 decimals; Overall = mean of the categories",
               "steps of one category (which source the CSV does not say)",
               "AIPerf src/aiperf/analysis/speed_bench_report.py (build_report, write_csv)"),
    Definition("deepspec", "DeepSpec tau_probabilistic", "expected accepted length + 1 over the batch's anchors",
               "steps (anchors) of the logged batches", "deepseek-ai/DeepSpec deepspec/utils/metrics.py "
               "(train/tau_probabilistic)"),
)}


def definition(key: str) -> Definition:
    return DEFINITIONS[key]


def conversion(key: str, *, steps: int | None = None, accepted: int | None = None,
               reported: float | None = None) -> dict[str, Any]:
    """An imported tau beside ours: {"definition", "reported", "ours", "formula"} where the counts convert it
    (the formula with the numbers put in), else {"ours": None, "why": ...}. `steps` and `accepted` are the
    source's verify steps and accepted draft tokens, bonus excluded."""
    d = DEFINITIONS[key]
    out: dict[str, Any] = {"definition": d.to_dict(), "reported": reported, "ours": None}
    if key in ("sglang_gauge", "aiperf_speed_bench", "deepspec") or steps is None or accepted is None:
        out["why"] = not_convertible(key)
        return out
    if not steps:
        out["why"] = "no verify step: no tau"
        return out
    ours = 1 + accepted / steps
    out["ours"] = ours
    if key == "sglang":
        out["formula"] = (f"ours = 1 + spec_num_correct_drafts / spec_verify_ct = 1 + {accepted} / {steps} = "
                          f"{ours:.4f}" + (f" (SGLang's {reported:.4f} counts the prefill's token)"
                                           if reported is not None else ""))
    else:
        out["formula"] = f"ours (micro) = 1 + {accepted} / {steps} = {ours:.4f} (the same definition)"
    return out


def not_convertible(key: str) -> str:
    """Why a source's tau has no conversion to ours."""
    return {
        "sglang_gauge": "a gauge: the mean of SGLang's last logging window, no counts behind it",
        "aiperf_speed_bench": "a rounded cell with no counts, its source (per-request counts or a server gauge's "
                              "time average) not in the file",
        "deepspec": "an expectation over the logged training batches' anchors, not a count of decoding steps",
        "sglang_ragged": "SGLang's ragged (adaptive-width) verification: spec_num_proposed_drafts = verify_ct x "
                         "width is not what was drafted, and spec_accept_length = completion_tokens / verify_ct "
                         "is not 1 + accepted / steps; without the ordered verify_lengths / accept_lengths "
                         "(sglang #34814) no number is given",
    }.get(key, "the source gives no steps and accepted counts")


def labelled(tau: float | None, key: str, digits: int = 2) -> str:
    """A tau with its definition named: '6.55 (z-lab/DDTree tau: accepted + 1 per step, ... )'."""
    if tau is None:
        return f"- ({DEFINITIONS[key].label})"
    return f"{tau:.{digits}f} ({DEFINITIONS[key].said()})"
