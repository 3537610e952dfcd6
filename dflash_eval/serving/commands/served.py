"""`served DUMP...`: what a server measured (serving/counters/counts.py reads it), set beside an offline run of the same
drafter, with the gap per position and the likely causes a checkpoint and a run can show.

Reading: one file is a vLLM `/metrics` dump, an SGLang one (its counters, else its gauge), or a `vllm bench
serve` result (JSON); two files are vLLM or SGLang counter dumps taken before and after a load test,
subtracted (serving/counters/sglang.py for SGLang's). Request by request: requests.py. Every problem is one InputError naming the
file(s). The causes are facts of the run's drafter spec and settings (the rules it was scored under against
vLLM's, `partial_rotary_factor`, a sliding/full mix, the draft length, the temperature), each said once,
plus the shape of the per-position gap.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...core.attention import AttentionConfig
from ...core.errors import InputError, loads, read_text_file
from ...core.implausible import position_flags, tau_flags
from ...core.semantics import layers_under
from ..counters import counts as S
from ..counters import sglang as sglang_counters
from ..counters.gap import gap_to_offline
from ..exports import aiperf as served_aiperf
from ..exports import llamacpp as served_llamacpp


def _text(path: Path) -> str:
    return read_text_file(path, "a /metrics dump, a `vllm bench serve` result or an AIPerf export")  # a regular file (a FIFO refused)


def _bench(path: Path, text: str, model: str | None) -> S.Served:
    """A bench result; `--append-result` files hold one JSON object per line (`--model` picks by model_id)."""
    try:
        results = [loads(text)]
    except ValueError:  # --append-result: one result a line (core/jsonl.py)
        from ...core.jsonl import jsonl_rows

        results = [row for _, row in jsonl_rows(text, path, objects=False)]
    if not all(isinstance(r, dict) for r in results) or not results:
        raise InputError(path, "is not a `vllm bench serve` result (expected a JSON object)")
    if len(results) == 1 and served_aiperf.is_summary(results[0]):  # AIPerf's profile_export_aiperf.json
        try:
            return served_aiperf.served_from_summary(results[0], str(path))
        except ValueError as exc:
            raise InputError(path, str(exc)) from None
    if model is not None:
        results = [r for r in results if r.get("model_id") == model]
        if not results:
            raise InputError(path, f"holds no result for model_id {model!r}")
    if len(results) > 1:
        raise InputError(path, f"holds {len(results)} results (--append-result): keep one, or choose with --model")
    try:
        return S.served_from_bench(results[0], str(path))
    except ValueError as exc:
        raise InputError(path, str(exc)) from None


def read_served(paths: list[Path], model: str | None) -> S.Served:
    """One source or two vLLM dumps (BEFORE AFTER), as `Served`; anything else refused by name."""
    if not 1 <= len(paths) <= 2:
        raise InputError(None, f"give one metrics dump or result, or two dumps (BEFORE AFTER), not {len(paths)}")
    texts = [_text(p) for p in paths]
    if len(paths) == 1 and texts[0].lstrip().startswith("{"):
        return _bench(paths[0], texts[0], model)
    parsed = []
    for path, text in zip(paths, texts):
        if text.lstrip().startswith("{"):
            raise InputError(path, "is JSON: a `vllm bench serve` result is read alone (it is already a difference)")
        try:
            parsed.append(S.parse_exposition(text))
        except ValueError as exc:
            raise InputError(path, f"not a Prometheus text dump: {exc}") from None
    where = " -> ".join(map(str, paths))
    try:
        for p in parsed:
            S.refuse_diffusion(p)
        is_vllm = [bool(S.vllm_series(p)) for p in parsed]
        is_counters = [sglang_counters.has_counters(p) for p in parsed]
        is_sglang = [any(s.name == S.SGLANG_TAU for s in p) for p in parsed]
        is_llamacpp = [served_llamacpp.has_counters(p) for p in parsed]  # serving/exports/llamacpp.py
        if len(paths) == 2:
            if all(is_vllm):
                return S.served_between(parsed[0], parsed[1], model, f"{paths[1]} - {paths[0]}")
            if all(is_llamacpp):
                return served_llamacpp.served_between_scrapes(parsed[0], parsed[1], f"{paths[1]} - {paths[0]}")
            if all(is_counters):
                return sglang_counters.served_between_counters(parsed[0], parsed[1], model, f"{paths[1]} - {paths[0]}")
            raise InputError(where, "two dumps are subtracted only for vLLM's or SGLang's counters "
                                    + ("(SGLang's acceptance length is a gauge: read one dump)" if any(is_sglang)
                                       else "(a dump without vllm:spec_decode_*, llamacpp:spec_decode_* or "
                                            "sglang:spec_verify_calls_total counters, or the two dumps hold "
                                            "different ones)"))
        if is_vllm[0]:
            return S.served_from_dump(parsed[0], model, str(paths[0]))
        if is_llamacpp[0]:
            return served_llamacpp.served_from_scrape(parsed[0], str(paths[0]))
        if is_counters[0]:
            return sglang_counters.served_from_counters(parsed[0], model, str(paths[0]))
        if is_sglang[0]:
            return S.served_from_sglang(parsed[0], model, str(paths[0]))
        raise InputError(paths[0], "holds neither vllm:spec_decode_*_total nor llamacpp:spec_decode_* counters nor "
                                   "SGLang's "
                                   "sglang:spec_verify_calls_total / sglang:spec_accept_length (speculative decoding "
                                   "off, or not a server's /metrics)")
    except ValueError as exc:
        raise InputError(where, str(exc)) from None


def _differs_under_vllm(spec: dict[str, Any]) -> list[str]:
    """Layers whose attention vLLM's rules set differently from the rules the run scored under."""
    config = spec.get("attention_config")
    if not isinstance(config, dict) or spec.get("semantics") == "vllm":
        return []
    fields = dict(config)
    fields["layer_types"] = tuple(fields.get("layer_types") or ())
    layers, _ = layers_under(AttentionConfig(**fields), "vllm")
    out = []
    for i, (mine, theirs) in enumerate(zip(spec.get("layers") or [], layers)):
        if (mine.get("window"), mine.get("causal_in_block"), mine.get("window_from")) != \
                (theirs.window, theirs.causal_in_block, theirs.window_from):
            out.append(f"layer {i}")
    return out


def likely_causes(result: dict[str, Any], drafter: dict[str, Any], provenance: dict[str, Any]) -> list[str]:
    """Each cause a fact shows, most specific first (item (1)'s served-vs-trained differences)."""
    spec, causes = drafter.get("spec") or {}, []
    engine = result["served"]["engine"]
    if engine == "vllm":
        partial = (spec.get("rope") or {}).get("partial_rotary_factor")
        if partial is not None and float(partial) != 1.0:
            causes.append(f"partial_rotary_factor {partial}: vLLM rotates only that share of each head, the offline "
                          "run (transformers' rules, as z-lab and speculators train) the whole head; "
                          "`inspect`/`doctor --semantics vllm` score both readings")
        kinds = {layer.get("kind") for layer in spec.get("layers") or []}
        if kinds == {"sliding", "full"}:
            causes.append("the drafter mixes sliding and full layers: vLLM 0.33 serves it only on the V2 model "
                          "runner (qwen3_dflash.py refuses it on V1), where such drafters were seen at 0% "
                          "acceptance (vllm #49559)")
        changed = _differs_under_vllm(spec)
        if changed:
            causes.append(f"the run scored the drafter under {spec.get('semantics')} rules; vLLM's rules differ on "
                          f"{', '.join(changed)}: rerun with --semantics vllm")
    elif engine == "llamacpp":
        causes.append("llama.cpp defaults a DFlash2 drafter to sample_from_anchor=true (vLLM refuses it, speculators "
                      "trains with false), drafts on a GGUF conversion (its quantization and rope keys), and stops a "
                      "draft early under --spec-draft-p-min; `doctor --engines` scores the drafter under llama.cpp's "
                      "rules")
    else:
        causes.append("SGLang may truncate the drafter's context (--speculative-draft-window-size, whole pages of "
                      "--page-size) and may simulate acceptance (SGLANG_SIMULATE_ACC_LEN); neither is in its metrics; "
                      "`doctor --engines` scores the drafter under SGLang's rules")
    k, slots = result["served"].get("num_speculative_tokens"), spec.get("block_size", 0) - 1
    if k is not None and k != slots:
        causes.append(f"draft length: the server drafts {k} tokens per step, the offline run {slots}")
    temperature = provenance.get("temperature", 0)
    causes.append(f"the offline run is at temperature {temperature}, thinking "
                  f"{'on' if provenance.get('enable_thinking') else 'off'}, on its own prompts; the server's "
                  "requests (temperature, template, prompts) are not in its metrics")
    rows = [r for r in result["gap"]["per_position"] if r["gap"] is not None]
    if len(rows) >= 2:
        first, rest = rows[0], rows[1:]
        if first["high"] >= 0 > max(r["high"] for r in rest):
            causes.insert(0, "the first position matches the offline run and the later ones fall short: the "
                             "drafter is right on the next token and wrong further out, the signature of a "
                             "position-dependent difference (RoPE, window, block length) rather than of inputs")
        elif all(r["high"] < 0 for r in rows):
            causes.insert(0, "every position falls short from the first: the drafter sees different inputs when "
                             "served (target, tapped layers, chat template, thinking) more than a later-slot effect")
    return causes


def served(paths: list[Path], *, model: str | None = None, run: str | None = None) -> dict[str, Any]:
    """The one document `served` prints (`--json`) and renders: at least `tau` and `per_position`."""
    if len(paths) == 1 and _text(paths[0]).lstrip().startswith("Model,"):  # AIPerf's speed_bench_report.csv
        from .speed_bench import speed_bench

        return speed_bench(paths[0], _text(paths[0]), model, run)
    measured = read_served(paths, model)
    summary = S.summary(measured)
    result: dict[str, Any] = {"kind": "dflash-eval served", "tau": summary["tau"],
                              "per_position": summary["per_position"], "served": summary}
    # what should not be (core/implausible.py): every position exactly 0 or 1, a reported tau out of [1, B]
    result["flags"] = position_flags(summary["per_position"], measured.drafts, "served per-position acceptance")
    if run is None:
        result["flags"] += tau_flags(measured.reported_tau, None, "the source's own acceptance length")
        return result
    from ...commands.diff import load_side

    side = load_side(run)
    if side.drafter.get("counts") is None:
        raise InputError(side.run_dir, f"drafter {side.name!r} holds sampled estimates, not counts: compare a "
                                       "greedy run (temperature 0)")
    counts = side.counts()
    if counts.steps == 0:
        raise InputError(side.run_dir, f"drafter {side.name!r} has no steps")
    result["offline"] = {"run": str(side.run_dir), "drafter": side.name, "steps": counts.steps,
                         "block_size": counts.block_size,
                         "semantics": (side.drafter.get("spec") or {}).get("semantics")}
    result["flags"] += tau_flags(measured.reported_tau, counts.block_size, "the source's own acceptance length")
    result["gap"] = gap_to_offline(measured, counts.steps, counts.reach_counts, counts.accept_length_histogram)
    result["likely_causes"] = likely_causes(result, side.drafter, side.run.get("provenance") or {})
    category = next((n.removeprefix("AIPerf dataset category: ") for n in measured.notes
                     if n.startswith("AIPerf dataset category: ")), None)
    if category:  # AIPerf's spec_al_* prompts beside the run's (serving/exports/aiperf.harness_parity)
        result["parity"] = served_aiperf.harness_parity(category, side.run.get("provenance") or {})
    return result
