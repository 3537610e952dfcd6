"""`--serving-target` in the terminal: the four replays of each drafter, the drop to the serving target and its
two parts (core/serving_split.py), and B's argmax disagreement on A's text."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from ..core.safe_text import safe


def _part(part: dict | None) -> str:
    return "" if part is None else f"{part['estimate']:+.3f} [{part['low']:.3f}, {part['high']:.3f}]"


def render_serving_target(console: Console, section: dict | None) -> None:
    """The table (one row per drafter) and each drafter's verdict line; nothing without the section."""
    if not section:
        return
    identity = section["serving_target"]
    what = identity.get("quantisation", {}).get("scheme") or (
        ", ".join(f"{k} x{v}" for k, v in sorted(identity.get("tensor_types", {}).items())) or identity["kind"])
    table = Table(title=f"Serving target {safe(identity['path'])} ({safe(what)}): tau macro of four replays "
                        "(taps from / text of), the drop AA - BB and its split", header_style="bold")
    for column in ("drafter", "AA", "AB", "BA", "BB", "drop [95% CI]", "target's\ndisagreement", "drafter's\ninputs",
                   "prompts"):
        table.add_column(column, justify="left" if column == "drafter" else "right")
    for row in section["drafters"]:
        tau, drop = row.get("tau") or {}, row.get("drop")
        cells = [f"{tau[c]:.3f}" if c in tau else "" for c in ("AA", "AB", "BA", "BB")]
        table.add_row(safe(row["drafter"]), *cells,
                      "" if drop is None else f"{drop['estimate']:+.3f} [{drop['low']:.3f}, {drop['high']:.3f}]",
                      _part(row.get("target_disagreement")), _part(row.get("drafter_inputs")),
                      f"{row['paired_prompts']} of {row['prompts']}")
    console.print(table)
    flips = section["argmax_disagreement"]
    if flips.get("share") is not None:
        console.print(f"the serving target's argmax differs from the target's at {flips['differ']} of "
                      f"{flips['positions']} positions of the target's text ({100 * flips['share']:.2f}%)")
    for row in section["drafters"]:
        console.print(safe(row["verdict"]))
