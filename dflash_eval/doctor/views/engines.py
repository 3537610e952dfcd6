"""How `doctor --engines` is shown: tau per engine with its paired interval against the checkpoint's own
rules, the refused engines with their reason, and for each engine that differs, the rule responsible."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from ...core.compare import paired_figure
from ...core.safe_text import safe


def _tau(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def render_engines(console: Console, result: dict[str, Any]) -> None:
    base = result["base"]
    console.print(safe(f"drafter {result['drafter']} ({result['format']} format{', DFlash2' if result['dflash2'] else ''}"
                       f"), {result['prompts']} prompts, {result['tap_passes']} target passes; checkpoint's rules: "
                       f"{base['semantics']} ({base['source']}), tau {_tau(base['tau_macro'])}"))
    table = Table(title="one drafter under every engine's reading (same trajectories)")
    for name in ("engine", "tau (macro)", "vs the checkpoint's rules", "rules that differ"):
        table.add_column(name, justify="right" if name.startswith("tau") else "left")
    for row in result["engines"]:
        if "refused" in row:
            table.add_row(safe(row["name"]), "refused", safe(row["refused"]), "")
            continue
        table.add_row(safe(row["name"]), _tau(row["tau_macro"]),
                      safe(paired_figure(row["delta"], 3)) if row.get("delta") else "same rules",
                      safe(", ".join(row["differs"]) or "none"))
    console.print(table)
    for row in result["engines"]:
        if row.get("rules"):
            console.print(safe(row["responsible"]))
            for rule in row["rules"]:
                console.print(safe(f"  - {rule['rule']} alone: tau {_tau(rule['tau_macro'])}, "
                                   f"{paired_figure(rule['delta'], 3)}; {rule['engine_reads']}"))
    for pair in result["pairs"]:
        if {pair["a"], pair["b"]} == {"vllm", "sglang"}:
            console.print(safe(f"SGLang against vLLM: {paired_figure(pair['delta'], 3)}"))
