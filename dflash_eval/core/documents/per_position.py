"""per_position.csv and per_position_splits.csv (docs/result-documents.md documents their columns): one row per drafter,
speculators-compatible `acceptance_at_pos_i` and the rest, and the splits' rows apart. Every name in a cell
goes through the one escaping rule (core/safe_text.printable): `cat per_position.csv` never drives a terminal.
"""

from __future__ import annotations

import csv
import io
from typing import Any

from ..safe_text import printable


def per_position_csv(drafters: list[dict[str, Any]]) -> str:
    if any(d["metrics"].get("estimate") for d in drafters):
        # temperature > 0 offline: the estimate's columns (estimates.py), never the counted ones' names
        return _slot_csv(drafters, ["tau_macro_estimate", "tau_micro_estimate"],
                         [("expected_reach", "expected_reach_at_pos"), ("alpha", "alpha_at_pos")])
    return _slot_csv(drafters, ["tau_macro", "tau_micro"], COUNTED_SLOTS)


COUNTED_SLOTS = [("reach", "acceptance_at_pos"), ("conditional", "conditional_at_pos"), ("marginal", "marginal_at_pos")]

def per_position_splits_csv(drafters: list[dict[str, Any]]) -> str | None:
    """per_position_splits.csv: each drafter's parts that hold walk steps (each shorter draft length k, depth
    bucket, segment, token class), per_position.csv's columns after drafter, split, part; None without any."""
    from ..breakdown import split_parts

    rows = []
    for d in (d for d in drafters if not d["metrics"].get("estimate")):
        parts = [("draft_length", str(e["k"]), e["metrics"]) for e in d.get("by_draft_length") or []
                 if not e.get("checkpoint_block")] + split_parts(d)
        rows += [{"name": d["name"], "lead": [split, part], "metrics": m} for split, part, m in parts if m.get("steps")]
    return _slot_csv(rows, ["tau_macro", "tau_micro"], COUNTED_SLOTS, ["split", "part"]) if rows else None


def _slot_csv(drafters: list[dict[str, Any]], tau_columns: list[str], slots: list[tuple[str, str]],
              lead: tuple[str, ...] | list[str] = ()) -> str:
    """drafter, [lead columns,] tau macro, tau micro, then one column per slot for each (metrics key, column
    prefix)."""
    width = max((len(d["metrics"][slots[0][0]]) for d in drafters), default=0)
    header = ["drafter", *lead, *tau_columns]
    for _, prefix in slots:
        header += [f"{prefix}_{i}" for i in range(1, width + 1)]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    for d in drafters:
        m = d["metrics"]
        row = [printable(d["name"]), *d.get("lead", []), m["tau_macro"], m["tau_micro"]]  # a name: escaped
        for key, _ in slots:
            values = list(m[key]) + [None] * (width - len(m[key]))
            row += ["" if v is None else f"{v:.6f}" for v in values]
        writer.writerow(row)
    return out.getvalue()
