"""`report --json` / `report --markdown`: a run's summary for machines and for pasting into an issue or a
PR, the way `vllm bench` prints one table and lm-eval one markdown table.

One document (`run_summary`) feeds both: the verdict block every report opens with (core/verdict.py), the run's
settings, the summary table (tau macro with its 95%
interval, tau micro, steps, histogram, token acceptance rate; live mode's throughput), the per-slot table
(reach, conditional, marginal, each with the counts it is divided from) and the diff verdict of every
drafter against the first one of the run (commands/diff.py: paired over prompts, the same line `diff`
prints). Nothing is recomputed here that run.json does not already hold, except those verdicts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..core.documents.run_document import DrafterDocument, RunDocument
from ..core.speedup import live_throughput

SLOT_KEYS = ("reach", "conditional", "marginal")
ESTIMATE_SLOT_KEYS = ("expected_reach", "alpha")


def _drafter_summary(d: DrafterDocument) -> dict[str, Any]:
    m = d["metrics"]
    keys = ESTIMATE_SLOT_KEYS if m.get("estimate") else SLOT_KEYS
    counts = m.get("slot_counts") or {}
    slots = []
    for i in range(max((len(m.get(k) or []) for k in keys), default=0)):
        entry: dict[str, Any] = {"slot": i + 1}
        for key in keys:
            series = m.get(key) or []
            entry[key] = series[i] if i < len(series) else None
            if key in counts and i < len(counts[key]):
                entry[f"{key}_count"] = list(counts[key][i])
        slots.append(entry)
    return {"name": d["name"], "estimate": bool(m.get("estimate")), "block_size": d["spec"]["block_size"],
            "tau_macro": m.get("tau_macro"), "tau_macro_ci": m.get("tau_macro_ci"),
            "tau_macro_ci_note": m.get("tau_macro_ci_note"), "tau_micro": m.get("tau_micro"), "steps": m.get("steps"),
            "histogram": m.get("histogram"), "token_acceptance_rate": m.get("token_acceptance_rate"),
            "repetition_share": (d.get("repetition") or {}).get("flagged_share"),
            "live": live_throughput(d), "slots": slots}


def run_summary(run_dir: Path, run: RunDocument, *, partial: bool = False, seed: int = 0) -> dict[str, Any]:
    """The summary document of a run folder (already read as `run`)."""
    from .diff import diff

    prov = run["provenance"]
    drafters = run["drafters"]
    verdicts = []
    for other in drafters[1:]:
        a, b = f"{run_dir}:{drafters[0]['name']}", f"{run_dir}:{other['name']}"
        result = diff(a, b, seed=seed, partial=partial, top=0)
        verdicts.append({"a": drafters[0]["name"], "b": other["name"], "verdict": result["verdict"],
                         "delta_tau_macro": result.get("delta_tau_macro"), "prompts": result.get("prompts")})
    from ..core.verdict import verdict_block
    from ..formats.published import bands_for

    return {
        "verdict": verdict_block(run, str(run_dir), bands=bands_for(run)),  # first: what the run says (core/verdict.py)
        "run": str(run_dir), "incomplete": run.get("incomplete"),
        "settings": {"target": prov["target"]["name"], "prompts": prov["prompts"]["count"],
                     "prompt_source": prov["prompts"].get("source"), "max_new_tokens": prov["max_new_tokens"],
                     "thinking": prov["enable_thinking"], "mode": prov["mode"], "temperature": prov.get("temperature", 0),
                     "estimate": bool(prov.get("estimate")), "dtype": prov.get("dtype"), "device": prov.get("device")},
        "drafters": [_drafter_summary(d) for d in drafters],
        "verdicts": verdicts,
    }
