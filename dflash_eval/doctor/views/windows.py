"""The doctor's window variants by depth in the terminal: tau per depth bucket of each curve (the
configuration, the window variants, the reference) and the section's verdict (doctor/commands/windows.py).
Counts are divided here, as everywhere in render/."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from ...core import metrics as M
from ...core.safe_text import safe


def window_rows(section: dict[str, Any]) -> tuple[list[str], list[tuple[str, list[str]]]]:
    """(bucket labels with steps in some curve, [(curve name, cells)]): a cell 'tau (steps)' or '-'."""
    curves = section.get("curves") or []
    if not curves:
        return [], []
    shown = [i for i in range(len(curves[0]["buckets"])) if any(c["buckets"][i]["steps"] for c in curves)]
    rows = []
    for c in curves:
        cells = []
        for i in shown:
            data = c["buckets"][i]["counts"]
            counts = M.AcceptanceCounts.from_dict(data) if data else None
            cells.append(f"{M.tau_macro(counts):.2f} ({counts.steps})" if counts is not None and counts.steps else "-")
        rows.append((c["name"], cells))
    return [curves[0]["buckets"][i]["bucket"] for i in shown], rows


def render_windows(console: Console, section: dict[str, Any] | None) -> None:
    if not section:
        return
    if "note" in section:
        console.print(f"window variants by depth: {safe(section['note'])}")
        return
    labels, rows = window_rows(section)
    # the title as a line of its own: it wraps at the terminal's width (COLUMNS), not at the narrow table's
    console.print("window variants by depth: tau macro (walk steps) per bucket of the anchor's position, on the "
                  "same trajectories")
    table = Table(header_style="bold")
    table.add_column("curve")
    for label in labels:
        table.add_column(safe(label), justify="right", no_wrap=True)
    for name, cells in rows:
        table.add_row(safe(name), *cells)
    console.print(table)
    console.print(f"[bold]by depth: {safe(section['verdict'])}[/]")
