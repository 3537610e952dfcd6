"""A track's views beyond the totals, in the terminal and in track.html (templates/_track_breakdown.html.j2):

- tau at every draft length k per checkpoint (`track --draft-lengths`: each k its own replay with a block
  of k + 1 on the batch's tap pass), so a team sees which num_speculative_tokens the training is reaching;
- the latest checkpoint by context depth (every row carries its run's `by_depth`), beside the reference
  where both used the same bucket edges: where the newest weights lose acceptance.

Pure presentation over track.jsonl rows (pipeline/track_folder.track_row copies both from the run folders'
run.json); rows without them show nothing.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from ...core.safe_text import safe
from ...core.track_summary import Curve, label

OWN_BLOCK = "*"  # marks the checkpoint's own block (k = B - 1) in the per-k table


def _f(value, digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def draft_length_view(c: Curve) -> dict[str, Any] | None:
    """{"ks", "rows": [{role, step, name, label, cells: [{tau, ci, own} | None per k]}]}, reference first,
    then the checkpoints by step; None when no row has a per-k table."""
    rows = ([c.reference] if c.reference is not None else []) + [p.row for p in c.points]
    ks = sorted({e["k"] for r in rows for e in r.get("by_draft_length") or []})
    if not ks:
        return None
    out = []
    for r in rows:
        at = {e["k"]: e for e in r.get("by_draft_length") or []}
        cells = [{"tau": at[k]["metrics"].get("tau_macro"), "ci": at[k]["metrics"].get("tau_macro_ci"),
                  "own": bool(at[k].get("checkpoint_block"))} if k in at else None for k in ks]
        out.append({"role": r.get("role"), "step": r.get("step"), "name": r["name"], "label": label(r), "cells": cells})
    return {"ks": ks, "rows": out}


def depth_view(c: Curve) -> dict[str, Any] | None:
    """The latest checkpoint's non-empty depth buckets, each beside the reference's same bucket (when the
    reference row has the same edges): steps, tau macro with its 95% CI, the gap; None without a split."""
    latest = c.latest.row if c.latest is not None else None
    if latest is None or not latest.get("by_depth"):
        return None
    ref = c.reference
    if ref is not None and (not ref.get("by_depth") or ref.get("depth_edges") != latest.get("depth_edges")):
        ref = None
    rows = []
    for i, entry in enumerate(latest["by_depth"]):
        m = entry["metrics"]
        r = ref["by_depth"][i]["metrics"] if ref is not None else {}
        if not m.get("steps") and not r.get("steps"):
            continue
        tau, ref_tau = m.get("tau_macro"), r.get("tau_macro")
        rows.append({"bucket": entry["bucket"], "steps": m.get("steps") or 0,
                     "prompts": len(entry["counts"]["per_prompt"]),
                     "tau": tau, "ci": m.get("tau_macro_ci"), "tau_micro": m.get("tau_micro"),
                     "reach_1": (m.get("reach") or [None])[0], "ref_steps": r.get("steps"), "ref_tau": ref_tau,
                     "gap": tau - ref_tau if tau is not None and ref_tau is not None else None})
    if not rows:
        return None
    return {"latest": label(latest), "latest_name": latest["name"], "edges": latest.get("depth_edges"),
            "reference": ref["name"] if ref is not None else None, "rows": rows,
            "other_edges": c.reference is not None and ref is None and bool(c.reference.get("by_depth"))}


def render_track_breakdown(console: Console, c: Curve) -> None:
    """Terminal: tau per draft length per checkpoint, then the latest checkpoint by depth."""
    view = draft_length_view(c)
    if view is not None:
        table = Table(title=f"tau macro per draft length k ({OWN_BLOCK} own block)", title_justify="left",
                      header_style="bold", caption="each k its own replay with a block of k + 1",
                      caption_justify="left")
        table.add_column("step", justify="right")
        table.add_column("checkpoint", overflow="fold")
        for k in view["ks"]:
            table.add_column(f"k={k}", justify="right")
        for row in view["rows"]:
            step = "ref" if row["role"] == "reference" else ("?" if row["step"] is None else str(row["step"]))
            cells = ["" if cell is None else _f(cell["tau"]) + (OWN_BLOCK if cell["own"] else "")
                     for cell in row["cells"]]
            table.add_row(step, safe(row["name"]), *cells, style="dim" if row["role"] == "reference" else None)
        console.print(table)
    depth = depth_view(c)
    if depth is not None:
        table = Table(title=safe(f"latest checkpoint by context depth: {depth['latest']} (anchor position, "
                                 "prompt included)"), title_justify="left", header_style="bold")
        columns = ["depth", "steps", "tau macro [95% CI]", "tau micro", "r_1"]
        if depth["reference"] is not None:
            columns += ["reference tau", "gap to ref"]
        for column in columns:
            table.add_column(column, justify="left" if column == "depth" else "right", no_wrap=True)
        for r in depth["rows"]:
            ci = f" [{_f(r['ci'][0])}, {_f(r['ci'][1])}]" if r["ci"] else ""
            cells = [safe(r["bucket"]), str(r["steps"]), _f(r["tau"]) + ci, _f(r["tau_micro"]), _f(r["reach_1"])]
            if depth["reference"] is not None:
                cells += [_f(r["ref_tau"]), "–" if r["gap"] is None else f"{r['gap']:+.2f}"]
            table.add_row(*cells)
        console.print(table)
        if depth["other_edges"]:
            console.print("the reference was split with other depth edges: not shown beside the latest checkpoint")


# ------------------------------------------------------------------------------------------------ HTML

def _tau_per_k_chart(view: dict[str, Any]) -> str | None:
    """tau macro over training steps, one line per draft length k; the reference's tau at each k dashed."""
    from ...render.breakdown import figure_svg
    from ...render.charts import PALETTE, chart_legend, chart_style, clean_svg, new_figure

    points = [r for r in view["rows"] if r["role"] != "reference" and r["step"] is not None]
    if not points:
        return None
    reference = next((r for r in view["rows"] if r["role"] == "reference"), None)
    with chart_style():
        fig, (ax,) = new_figure(7.5, 3.4)
        for i, k in enumerate(view["ks"]):
            color = PALETTE[i % len(PALETTE)]
            xy = [(r["step"], r["cells"][i]["tau"]) for r in points
                  if r["cells"][i] is not None and r["cells"][i]["tau"] is not None]
            if xy:
                ax.plot([x for x, _ in xy], [y for _, y in xy], "o-", color=color, markersize=3, linewidth=1.2,
                        label=f"k = {k}")
            cell = reference["cells"][i] if reference is not None else None
            if cell is not None and cell["tau"] is not None:
                ax.axhline(cell["tau"], color=color, linestyle="--", linewidth=0.8)
        ax.set_xlabel("training step")
        ax.set_ylabel("tau macro")
        ax.set_ylim(bottom=0)
        ax.set_title("acceptance per draft length k" + (" (dashed: the reference at k)" if reference else ""))
        chart_legend(ax, loc="upper left", bbox_to_anchor=(1.0, 1.0))
        return figure_svg(fig, clean_svg, "tau per draft length chart", "tk-")


def _depth_chart(c: Curve, depth: dict[str, Any], note: bool = False) -> str | None:
    """tau by depth for the latest checkpoint (and the reference with the same edges), with intervals; with
    `note`, why there is no curve when every anchor lies in one bucket."""
    from ...render.breakdown import depth_chart, depth_note

    latest = c.latest.row
    lines = [{"name": f"latest: {depth['latest']}", "by_depth": latest["by_depth"]}]
    if depth["reference"] is not None:
        lines.append({"name": f"reference: {depth['reference']}", "by_depth": c.reference["by_depth"]})
    return depth_note(lines) if note else depth_chart(lines)


def track_breakdown_view(c: Curve) -> dict[str, Any] | None:
    """What track.html's "per draft length" and "latest by depth" sections show; None when neither applies."""
    lengths, depth = draft_length_view(c), depth_view(c)
    if lengths is None and depth is None:
        return None
    return {"lengths": lengths, "lengths_chart": _tau_per_k_chart(lengths) if lengths else None,
            "depth": depth, "depth_chart": _depth_chart(c, depth) if depth else None,
            "depth_note": _depth_chart(c, depth, note=True) if depth else None}
