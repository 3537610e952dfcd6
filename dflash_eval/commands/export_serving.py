"""`export-serving RUN --engine vllm|sglang|dynamo|modelopt [--k K]`: the speculative-decoding settings that make a server
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
- vLLM with `--synthetic length`: `synthetic_acceptance_length` = tau_micro at k instead of the rates; vLLM
  turns a length into its minimum-variance rates (`SpeculativeConfig._acceptance_length_to_rates`: 1.0 for
  the first int(L - 1) slots, the fraction next, 0 after), so the mean is kept and the per-position profile
  is not; vLLM requires 1 <= L <= k + 1 (`_resolve_synthetic_acceptance_rates`).
- Dynamo's mocker (ai-dynamo/dynamo #10436, `--aic-nextn`, `--aic-nextn-accept-rates`, `--aic-mtp-seed`): the
  CONDITIONAL rates c_1..c_k ("Entry i is P(draft i accepted | all earlier drafts were accepted)", its
  `--aic-nextn-accept-rates` help), c_i = r_i / r_(i-1) with 0.0 where r_(i-1) = 0 (never reached, as
  Model-Optimizer writes it); its AIC session takes nextn in 1..=5 only (`AicSession.__init__`) and rates
  finite in [0, 1] (`_pad_nextn_accept_rates`), so k > 5 is refused by name.
- Model-Optimizer (`--engine modelopt`): `speculation_profile.json` v1.0, both conventions, one entry per
  measured k (core/speculation_profile.py, which also says why its "marginal" is our reach, not our m_i).
All simulations accept drafts without checking them: the served text is not the target's (load tests only).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from ..core.documents.results import drafter_named, read_run_document
from ..core.documents.run_document import DrafterDocument, RunDocument
from ..core.errors import InputError

ENGINES = ("vllm", "sglang", "dynamo", "modelopt")
SYNTHETIC = ("rates", "length")
DYNAMO_MAX_NEXTN = 5  # dynamo _internal/aic.py _NEXTN_ACCEPT_RATES_LEN: "nextn must be 1..=5 when set"


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


def _drafter(run: RunDocument, run_dir: Path, name: str | None) -> DrafterDocument:
    return drafter_named(run, run_dir, name, "say which with --drafter-name NAME")


def measured_at(drafter: DrafterDocument, run_dir: Path, k: int | None) -> tuple[int, dict[str, Any]]:
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
        from ..core.checkpoint_defects import draft_length

        raise InputError(run_dir, f"--k {k}: drafter {drafter['name']} drafts at most B - 1 = {B - 1} tokens; "
                                  + draft_length(k, B - 1, "--k")[1])
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


def vllm_length_problems(length: float, num_speculative_tokens: int) -> list[str]:
    """vLLM 0.33 `_resolve_synthetic_acceptance_rates` for a length: `not 1.0 <= length <= float(n + 1)` ->
    "synthetic_acceptance_length must be in [1, n + 1]"."""
    if not 1.0 <= length <= float(num_speculative_tokens + 1):
        return [f"synthetic_acceptance_length {length} is not in [1, {num_speculative_tokens + 1}]"]
    return []


def dynamo_rate_problems(rates: list[float], nextn: int) -> list[str]:
    """Dynamo's own checks, transcribed (components/src/dynamo/_internal/aic.py `AicSession.__init__`: "nextn
    must be 1..=5 when set"; `_pad_nextn_accept_rates`: "aic_nextn_accept_rates must be finite floats in [0, 1]";
    a list longer than 5 is truncated and a shorter one zero-padded, so k entries for nextn k is exact)."""
    problems = []
    if not 1 <= nextn <= DYNAMO_MAX_NEXTN:
        problems.append(f"nextn {nextn} is not in 1..={DYNAMO_MAX_NEXTN}")
    if any(not math.isfinite(r) or not 0.0 <= r <= 1.0 for r in rates):
        problems.append(f"aic_nextn_accept_rates must be finite floats in [0, 1]: {rates}")
    if len(rates) != nextn:
        problems.append(f"{len(rates)} rates for nextn {nextn}")
    return problems


def _conditional(reach: list[float]) -> list[float]:
    """c_i = r_i / r_(i-1), r_0 = 1; 0.0 where r_(i-1) = 0 (Model-Optimizer's convention; never reached)."""
    out, previous = [], 1.0
    for r in reach:
        out.append(r / previous if previous > 0 else 0.0)
        previous = r
    return out


def _head(engine: str, k: int, d: dict, line: str) -> list[str]:
    return [f"# dflash-eval export-serving --engine {engine} --k {k}: accept at drafter {d['name']}'s measured rates",
            f"# {line}",
            "# load tests only: simulated acceptance takes drafts without checking them (the text is not the target's)"]


def _vllm(d: dict, k: int, rates: list[float], tau: float, synthetic: str, head: list[str]) -> dict[str, Any]:
    config = {"method": "dflash", "model": d["path"], "num_speculative_tokens": k,
              "rejection_sample_method": "synthetic"}
    if synthetic == "length":
        config["synthetic_acceptance_length"] = tau
        problems = vllm_length_problems(tau, k)
        note = ("# synthetic_acceptance_length = tau_micro at k (mean tokens per step, bonus included); vLLM spreads "
                "it over the slots by its minimum-variance schedule: the mean is kept, the per-position profile is not")
    else:
        config["synthetic_acceptance_rates"] = rates
        problems = vllm_rate_problems(rates, k)
        note = ("# synthetic_acceptance_rates = reach r_1..r_k (unconditional per-position rates over all steps; "
                "1 + their sum = tau_micro)")
    if problems:  # reach over all steps is non-increasing in [0, 1] and tau in [1, k + 1] by construction
        raise RuntimeError("internal error: exported values break vLLM's rules: " + "; ".join(problems))
    text = "\n".join(head + [note, "# use: vllm serve TARGET --speculative-config \"$(grep -v '^#' THIS_FILE)\"",
                             json.dumps(config)]) + "\n"
    return {"config": config, "convention": "length" if synthetic == "length" else "reach", "text": text}


def _dynamo(run_dir: Path, d: dict, k: int, rates: list[float], head: list[str]) -> dict[str, Any]:
    if k > DYNAMO_MAX_NEXTN:
        raise InputError(run_dir, f"--engine dynamo --k {k}: Dynamo's mocker models at most {DYNAMO_MAX_NEXTN} draft "
                                  f"tokens (--aic-nextn 1..={DYNAMO_MAX_NEXTN}); choose --k <= {DYNAMO_MAX_NEXTN} "
                                  "(measured with run --draft-lengths)")
    conditional = _conditional(rates)
    problems = dynamo_rate_problems(conditional, k)
    if problems:
        raise RuntimeError("internal error: exported rates break Dynamo's rules: " + "; ".join(problems))
    flags = ["--aic-nextn", str(k), "--aic-nextn-accept-rates", ",".join(repr(c) for c in conditional),
             "--aic-mtp-seed", "0"]
    text = "\n".join(head + [
        "# --aic-nextn-accept-rates = conditional rates c_1..c_k: P(draft i accepted | drafts 1..i-1 accepted) = "
        "r_i / r_(i-1) (0.0 where r_(i-1) = 0: never reached)",
        "# use: python -m dynamo.mocker --model-path TARGET --aic-perf-model ... (the --aic-* system flags) "
        "$(grep -v '^#' THIS_FILE)", " ".join(flags)]) + "\n"
    return {"flags": flags, "conditional": conditional, "convention": "conditional", "text": text}


def _modelopt(run: dict, d: dict, k: int) -> dict[str, Any]:
    from ..core import speculation_profile as P
    from ..core.version import __version__

    B = d["spec"]["block_size"]
    by_k = {e["k"]: e["metrics"] for e in d.get("by_draft_length") or []}
    by_k.setdefault(B - 1, d["metrics"])
    prov = run["provenance"]
    target = prov["target"]
    committed = sum(t for _, t in (d.get("counts") or {}).get("per_prompt", {}).values())
    sets = {name: {"mean_accept_length": m["tau_micro"], "mean_accept_length_per_request": m["tau_macro"],
                   "steps": m["steps"]} for name, m in (d.get("by_prompt_set") or {}).items() if m.get("steps")}

    def identity(path: str, snapshot: dict | None, fingerprint: str | None) -> dict[str, Any]:
        return {"id": snapshot["repo"] if snapshot else P.checkpoint_id(path),
                "revision": snapshot["revision"] if snapshot else None, "fingerprint": fingerprint}

    prompts = prov.get("prompts") or {}
    profile = P.build(
        k, by_k, method="dflash2" if d["spec"].get("selector_top_k") is not None else "dflash", block_size=B,
        draft_checkpoint={**identity(d["path"], d.get("snapshot"), d.get("fingerprint")), "format": d.get("format"),
                          "semantics": d["spec"].get("semantics")},
        target_model={**identity(target["path"], target.get("snapshot"), target.get("fingerprint")),
                      "model_type": target.get("model_type")},
        measurement_conditions={
            "producer": f"dflash-eval {__version__} (offline replay of the drafter's own walk per k; "
                        f"{prov.get('mode')} mode)", "dflash_eval": __version__,
            "dataset": prompts.get("source"), "prompts": prompts.get("count"), "prompt_sets": prompts.get("sets"),
            "tokens_scored": committed, "max_new_tokens": prov.get("max_new_tokens"),
            "temperature": prov.get("temperature"), "enable_thinking": prov.get("enable_thinking"),
            "dtype": prov.get("dtype"), "device": prov.get("device"), "concurrency": 1,
            "final_block": (prov.get("final_block_by_drafter") or {}).get(d["name"], prov.get("final_block"))},
        per_category=sets if len(sets) > 1 else None)
    failed = [j for j, e in profile["profiles_by_k"].items()
              if not all(check["passed"] for check in e["validation"].values())]
    if failed:  # reach sums to tau_micro - 1 and never rises, by construction: never expected
        raise RuntimeError(f"internal error: the profile fails its own validation at k = {', '.join(failed)}")
    return {"profile": profile, "convention": "both (conditional c_i and reach r_i)",
            "text": json.dumps(profile, indent=2) + "\n"}


def export_serving(run_dir: Path, engine: str, *, k: int | None = None, drafter: str | None = None,
                   synthetic: str = "rates") -> dict[str, Any]:
    """The settings as text (comment lines start with #; modelopt: the profile's JSON) and as data: {"engine",
    "k", "rates" (reach r_1..r_k), "tau_micro", "convention", and "config" (vLLM speculative_config),
    "environment" (SGLang), "flags" + "conditional" (Dynamo) or "profile" (Model-Optimizer), "text"}."""
    if engine not in ENGINES:
        raise InputError(None, f"--engine {engine!r}: choose {', '.join(ENGINES[:-1])} or {ENGINES[-1]}")
    if synthetic not in SYNTHETIC:
        raise InputError(None, f"--synthetic {synthetic!r}: choose rates or length")
    if synthetic != "rates" and engine != "vllm":
        raise InputError(None, f"--synthetic {synthetic} is vLLM's choice (synthetic_acceptance_length); "
                               f"--engine {engine} takes none")
    if k is not None and k < 1:
        raise InputError(None, f"--k {k}: a draft length is at least 1")
    run = read_run_document(run_dir)
    d = _drafter(run, run_dir, drafter)
    k, metrics = measured_at(d, run_dir, k)
    rates = [float(r) for r in metrics["reach"]]
    tau = float(metrics["tau_micro"])
    line = _measured_line(run, d, k, metrics)
    base = {"engine": engine, "k": k, "rates": rates, "tau_micro": tau}
    if engine == "modelopt":
        return {**base, **_modelopt(run, d, k)}
    head = _head(engine, k, d, line)
    if engine == "vllm":
        return {**base, **_vllm(d, k, rates, tau, synthetic, head)}
    if engine == "dynamo":
        return {**base, **_dynamo(run_dir, d, k, rates, head)}
    environment = {"SGLANG_SIMULATE_ACC_LEN": repr(tau), "SGLANG_SIMULATE_ACC_METHOD": "match-expected"}
    text = "\n".join(head + [
        "# SGLANG_SIMULATE_ACC_LEN = mean tokens committed per step (accepted drafts + bonus) = tau_micro at k;",
        "# SGLang simulates this mean only (no per-position profile)",
        *(f"export {key}={value}" for key, value in environment.items()),
        f"# then: python -m sglang.launch_server --model-path TARGET --speculative-algorithm DFLASH "
        f"--speculative-draft-model-path {d['path']} --speculative-num-draft-tokens {k + 1}"]) + "\n"
    return {**base, "environment": environment, "convention": "mean", "text": text}
