"""How `served speed_bench_report.csv` is shown (serving/commands/speed_bench.py builds it): each category's cell
with its definition, beside the offline run's tau micro of the same set, the harness-parity line, the flags."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from ...core.implausible import flag_lines
from ...core.safe_text import safe


def _num(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"


def speed_bench_lines(result: dict[str, Any]) -> list[str]:
    """Plain lines (the renderers escape them)."""
    d = result["definition"]
    lines = [f"AIPerf speed-bench report {result['file']}, model {result['model']}",
             f"tau definition: {d['label']}: {d['formula']} ({d['source']})"]
    offline = result.get("offline")
    if offline:
        lines.append(f"offline: {offline['run']} drafter {offline['drafter']} (block size {offline['block_size']}); "
                     f"{result['comparison']}")
    for row in result["categories"]:
        text = f"{row['category']}: AIPerf {_num(row['reported'])}"
        if row["offline"] is not None:
            o = row["offline"]
            text += (f"; offline {o['set']} tau micro {_num(o['tau_micro'])} (tau macro {_num(o['tau_macro'])})"
                     + (f"; AIPerf - offline micro {row['difference']:+.2f}" if row["difference"] is not None else ""))
        elif offline:
            text += "; no offline prompt set of that name"
        lines.append(text)
        if row.get("parity"):
            lines.append(f"  harness parity: {row['parity']}")
        lines.extend(f"  {line}" for line in flag_lines(row["flags"]))
    lines.append(f"Overall (AIPerf's mean of the categories): {_num(result['overall'])}")
    return lines


def render_speed_bench(console: Console, result: dict[str, Any]) -> None:
    for line in speed_bench_lines(result):
        console.print(safe(line), soft_wrap=True)
    for note in result["notes"]:
        console.print(f"[yellow]note:[/] {safe(note)}")
