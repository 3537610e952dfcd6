"""`served speed_bench_report.csv [--run RUN]`: AIPerf's acceptance matrix beside an offline run, category by
category, each cell said with its definition and the prompts it came from.

A cell has no counts behind it (serving/exports/aiperf.py): it is shown, never converted, set beside the
offline run's tau micro of the same set (AIPerf's token-weighted definition pools over steps, as tau micro
does) as an indication with no interval, and the harness-parity line says how AIPerf's spec_al_* prompts
differ from the run's (raw vs chat-wrapped HumanEval, MBPP full's 500 vs the sanitized 257 z-lab draws 128
from). A cell that cannot be an acceptance length (below 1, above the block size) is flagged with what it
usually means (core/implausible.py) and not compared.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...core.implausible import tau_flags
from ...core.tau_definitions import DEFINITIONS, not_convertible
from ..exports.aiperf import harness_parity, read_speed_bench


def _set_key(name: str) -> str:
    return name.lower().replace("-", "").replace("_", "")


def speed_bench(path: Path, text: str, model: str | None, run: str | None) -> dict[str, Any]:
    """The document `served` prints for a speed-bench CSV (module docstring)."""
    table = read_speed_bench(path, text, model)
    side = None
    if run is not None:
        from ...commands.diff import load_side

        side = load_side(run)
    prov = side.run.get("provenance") or {} if side else {}
    block = side.drafter["spec"]["block_size"] if side else None
    sets = list((prov.get("prompts") or {}).get("sets") or {}) if side else []
    rows = []
    for category, value in table["cells"].items():
        row: dict[str, Any] = {"category": category, "reported": value, "flags": [], "offline": None,
                               "difference": None, "parity": None}
        if value is not None:
            row["flags"] = tau_flags(value, block, f"{path.name} {category}")
        if side is not None:
            row["parity"] = harness_parity(category, prov)
            mine = next((s for s in sets if _set_key(s) == _set_key(category)), None)
            by_set = side.drafter.get("by_prompt_set") or {}
            metrics = by_set.get(mine) if mine in by_set else side.drafter.get("metrics") if mine and sets == [mine] \
                else None
            if metrics is not None:
                row["offline"] = {"set": mine, "tau_micro": metrics.get("tau_micro"),
                                  "tau_macro": metrics.get("tau_macro"), "steps": metrics.get("steps")}
                if value is not None and not row["flags"] and metrics.get("tau_micro") is not None:
                    row["difference"] = value - metrics["tau_micro"]
        rows.append(row)
    notes = [f"each cell: {DEFINITIONS['aiperf_speed_bench'].formula}; not converted to ours: "
             f"{not_convertible('aiperf_speed_bench')}",
             "Overall is AIPerf's mean of the categories shown, not a pooled tau"]
    if all(r["reported"] is not None and r["reported"] < 1 for r in rows if r["reported"] is not None) and \
            any(r["reported"] is not None for r in rows):
        notes.append("every cell is below 1: an `aiperf speed-bench-report --metric accept_rate` file (the same file "
                     "name), not acceptance lengths")
    return {"kind": "dflash-eval served speed-bench", "file": str(path), "model": table["model"],
            "definition": DEFINITIONS["aiperf_speed_bench"].to_dict(), "categories": rows, "overall": table["overall"],
            "tau": None, "per_position": None, "notes": notes,
            "offline": None if side is None else {"run": str(side.run_dir), "drafter": side.name, "block_size": block},
            "comparison": "indicative: AIPerf's token-weighted cell beside the offline tau micro of the same set, no "
                          "counts behind the cell, so no interval and no pairing by prompt"}
