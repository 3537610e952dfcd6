"""`inspect --engines` in the terminal: one column per engine, one row per reading (core/engine_readings.py); each
cell the value the engine uses and, dimmed, the file and function that decide it. A cell that differs from the
checkpoint's own rules is marked (yellow, `*`); one whose deciding code was not read says so."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from ..core.safe_text import safe


def render_engine_readings(console: Console, readings: dict) -> None:
    base = readings["base"]
    table = Table(title=f"How each engine reads this checkpoint ({safe(base['format'])} format; its own rules: "
                        f"{safe(base['semantics'])}); * = differs from them", header_style="bold", show_lines=True)
    table.add_column("reading", no_wrap=True)
    for engine in readings["engines"]:
        table.add_column(safe(engine["name"]), overflow="fold")
    for row in readings["rows"]:
        cells = []
        for engine in readings["engines"]:
            cell = row["cells"][engine["engine"]]
            text = safe(cell["value"]) + (" (code not read)" if not cell["sourced"] else "")
            if cell.get("refused"):
                cells.append(f"[dim]{text}[/]")
                continue
            source = f"\n[dim]{safe(cell['source'])}[/]" if cell["source"] else ""
            cells.append((f"[bold yellow]* {text}[/]" if cell["differs"] else text) + source)
        table.add_row(safe(row["reading"]), *cells)
    console.print(table)
    if readings["unsourced"]:
        console.print("readings whose deciding code was not read: " + "; ".join(
            f"{safe(engine)}: {safe(reading)}" for engine, reading in readings["unsourced"]))
