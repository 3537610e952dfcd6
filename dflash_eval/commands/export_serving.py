"""`export-serving RUN --engine vllm|sglang [--k K]`: the speculative-decoding settings that make a server
accept at the rates a drafter was measured at, so a serving stack can be load-tested at this drafter's
acceptance before it is deployed.

- vLLM 0.33: `speculative_config` with `rejection_sample_method: "synthetic"` and
  `synthetic_acceptance_rates` = the per-position UNCONDITIONAL rates at draft length k, i.e. our reach
  r_1..r_k (share of all steps whose accepted prefix reaches slot i; 1 + sum = tau_micro), measured by the
  drafter's own walk with a block of k + 1 (`--draft-lengths`), never the full block's walk cut at k.
- SGLang: `SGLANG_SIMULATE_ACC_LEN` = the mean tokens a step commits (accepted drafts + the bonus token,
  clamped by SGLang to [1, k + 1]), with `SGLANG_SIMULATE_ACC_METHOD=match-expected` so that the simulated
  mean equals it; `--speculative-num-draft-tokens` is the DFlash block (k + 1). SGLang simulates a mean
  only, not a per-position profile.
Both simulations accept drafts without checking them: the served text is not the target's (load tests only).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..core.errors import InputError
from ..core.results import drafter_named, interpreting, read_run

ENGINES = ("vllm", "sglang")


def vllm_rate_problems(rates: list[float], num_speculative_tokens: int) -> list[str]:
    """vLLM 0.33's own checks on synthetic rates, transcribed (vllm/config/speculative.py:
    `num_speculative_tokens: int = Field(gt=0)` and `SpeculativeConfig._resolve_synthetic_acceptance_rates`:
    `len(rates) != n` -> "must have length n"; `not all(0.0 <= r <= 1.0)` -> "entries must be in [0, 1]";
    `any(rates[i] > rates[i - 1])` -> "must be non-increasing")."""
    problems = []
    if not num_speculative_tokens > 0:
        problems.append(f"num_speculative_tokens {num_speculative_tokens} is not > 0")
    if len(rates) != num_speculative_tokens:
        problems.append(f"synthetic_acceptance_rates has length {len(rates)}, not {num_speculative_tokens}")
    if not all(isinstance(r, float) and 0.0 <= r <= 1.0 for r in rates):
        problems.append(f"synthetic_acceptance_rates entries must be floats in [0, 1]: {rates}")
    if any(rates[i] > rates[i - 1] for i in range(1, len(rates))):
        problems.append(f"synthetic_acceptance_rates must be non-increasing: {rates}")
    return problems


def _drafter(run: dict, run_dir: Path, name: str | None) -> dict[str, Any]:
    return drafter_named(run, run_dir, name, "say which with --drafter NAME")


def measured_at(drafter: dict[str, Any], run_dir: Path, k: int | None) -> tuple[int, dict[str, Any]]:
    """(k, metrics of the walks at k): the drafter's own block (k = B - 1) or a --draft-lengths replay.
    Without k: the best k at batch 1 of the run's expected speedup, else B - 1."""
    if drafter["metrics"].get("estimate"):
        raise InputError(run_dir, "an offline estimate (temperature > 0, --mode trajectory) has no measured "
                                  "per-position rates; evaluate with --mode live")
    B = drafter["spec"]["block_size"]
    measured = {e["k"]: e["metrics"] for e in drafter.get("by_draft_length") or []}
    measured.setdefault(B - 1, drafter["metrics"])
    if k is None:
        best = [b for b in (drafter.get("speedup") or {}).get("best", []) if b["batch"] == 1 and b["k"] is not None]
        k = best[0]["k"] if best else B - 1
    if k > B - 1:
        raise InputError(run_dir, f"--k {k}: drafter {drafter['name']} drafts at most B - 1 = {B - 1} tokens")
    if k not in measured:
        raise InputError(run_dir, f"drafter {drafter['name']} was not measured at draft length k = {k} (measured: "
                                  f"{', '.join(map(str, sorted(measured)))}); rerun with --draft-lengths {k}: the "
                                  "full block's walk cut at k is not the acceptance at k")
    metrics = measured[k]
    if not metrics.get("steps"):
        raise InputError(run_dir, f"drafter {drafter['name']} has no steps at k = {k}")
    return k, metrics


def _measured_line(run: dict, drafter: dict, k: int, metrics: dict) -> str:
    prov = run["provenance"]
    prompts = prov.get("prompts") or {}
    block = "its own block" if k == drafter["spec"]["block_size"] - 1 else f"its own replay with a block of {k + 1}"
    return (f"measured: drafter {drafter['name']} (fingerprint {str(drafter.get('fingerprint', '?'))[:12]}) on "
            f"{prompts.get('count', '?')} prompts ({prompts.get('source', '?')}), temperature {prov.get('temperature')}, "
            f"max_new_tokens {prov.get('max_new_tokens')}, mode {prov.get('mode')}; k = {k} ({block}): "
            f"tau_micro {metrics['tau_micro']:.4f} over {metrics['steps']} steps")


def export_serving(run_dir: Path, engine: str, *, k: int | None = None, drafter: str | None = None) -> dict[str, Any]:
    """The settings as text (comment lines start with #) and as data: {"engine", "k", "rates", "tau_micro",
    "config" (vLLM speculative_config) or "environment" (SGLang), "text"}."""
    if engine not in ENGINES:
        raise InputError(None, f"--engine {engine!r}: choose vllm or sglang")
    if k is not None and k < 1:
        raise InputError(None, f"--k {k}: a draft length is at least 1")
    run = read_run(run_dir)
    with interpreting(run_dir):
        d = _drafter(run, run_dir, drafter)
        k, metrics = measured_at(d, run_dir, k)
        rates = [float(r) for r in metrics["reach"]]
        tau = float(metrics["tau_micro"])
        line = _measured_line(run, d, k, metrics)
    head = [f"# dflash-eval export-serving --engine {engine} --k {k}: accept at drafter {d['name']}'s measured rates",
            f"# {line}",
            "# load tests only: simulated acceptance takes drafts without checking them (the text is not the target's)"]
    if engine == "vllm":
        config = {"method": "dflash", "model": d["path"], "num_speculative_tokens": k,
                  "rejection_sample_method": "synthetic", "synthetic_acceptance_rates": rates}
        problems = vllm_rate_problems(rates, k)
        if problems:  # reach over all steps is non-increasing in [0, 1] by construction: never expected
            raise RuntimeError("internal error: exported rates break vLLM's rules: " + "; ".join(problems))
        text = "\n".join(head + [
            "# synthetic_acceptance_rates = reach r_1..r_k (unconditional per-position rates over all steps; "
            "1 + their sum = tau_micro)",
            "# use: vllm serve TARGET --speculative-config \"$(grep -v '^#' THIS_FILE)\"",
            json.dumps(config)]) + "\n"
        return {"engine": engine, "k": k, "rates": rates, "tau_micro": tau, "config": config, "text": text}
    environment = {"SGLANG_SIMULATE_ACC_LEN": repr(tau), "SGLANG_SIMULATE_ACC_METHOD": "match-expected"}
    text = "\n".join(head + [
        "# SGLANG_SIMULATE_ACC_LEN = mean tokens committed per step (accepted drafts + bonus) = tau_micro at k;",
        "# SGLang simulates this mean only (no per-position profile)",
        *(f"export {key}={value}" for key, value in environment.items()),
        f"# then: python -m sglang.launch_server --model-path TARGET --speculative-algorithm DFLASH "
        f"--speculative-draft-model-path {d['path']} --speculative-num-draft-tokens {k + 1}"]) + "\n"
    return {"engine": engine, "k": k, "rates": rates, "tau_micro": tau, "environment": environment, "text": text}
