"""Tree verification on screen (run --tree-budgets, core/tree.py): per drafter tau at every budget beside the
chain, why steps stop, where tau saturates, recall by depth, and the chain-and-tree speedup table. One data
shape (`tree_view`) feeds the terminal tables here and the HTML section (templates/_trees.html.j2, with a
chart of tau over the budget, the chain as a line); `tree_diff_view` feeds diff's."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from ..core.documents.run_document import RunDocument
from ..core.safe_text import safe

TREE_NOTE = ("DDTree's tree (liranringel/ddtree): per step the best `budget` drafted nodes by summed log-probability "
             "from one drafter pass; tau counts the bonus token; tree and chain taus are not the same quantity: "
             "a tree verifies 1 + budget tokens per step")


def _f(value, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _pct(value) -> str:
    return "–" if value is None else f"{100 * value:.0f}%"


def tree_view(run: RunDocument) -> dict[str, Any] | None:
    """Per drafter with a `tree`: its chain numbers, a row per budget, the saturation budget, recall by depth,
    notes and the speedup table; None when no drafter has one."""
    from .charts import PALETTE

    out = []
    for i, d in enumerate(run.get("drafters", [])):
        tree = d.get("tree")
        if not tree:
            continue
        m = d["metrics"]
        rows = []
        for e in tree["by_budget"]:
            em, f = e["metrics"], e["failures"]
            stopped = f["candidate"] + f["budget"] + f["complete"]
            rows.append({"budget": e["budget"], "tau_macro": em.get("tau_macro"), "ci": em.get("tau_macro_ci"),
                         "tau_micro": em.get("tau_micro"), "steps": em.get("steps"), "gain": e.get("gain_over_chain"),
                         "candidate": f["candidate"] / stopped if stopped else None,
                         "budget_cut": f["budget"] / stopped if stopped else None,
                         "complete": f["complete"] / stopped if stopped else None})
        speed = tree.get("speedup")
        out.append({"name": d["name"], "color": PALETTE[i % len(PALETTE)], "block_size": d["spec"]["block_size"],
                    "chain": {"tau_macro": m.get("tau_macro"), "ci": m.get("tau_macro_ci"),
                              "tau_micro": m.get("tau_micro"), "steps": m.get("steps")},
                    "rows": rows, "saturation": tree["saturation"], "notes": tree.get("notes") or [],
                    "recall": tree["recall_by_depth"], "deep_rows": tree.get("deep_rows", 0),
                    "speedup": speed})
    if not out:
        return None
    return {"drafters": out, "target_note": run["provenance"].get("tree_note"), "note": TREE_NOTE,
            "policy": run["drafters"][0]["tree"]["policy"] if run["drafters"] and run["drafters"][0].get("tree") else "",
            "chart": tree_chart(out)}


def tree_chart(drafters: list[dict[str, Any]]) -> str:
    """tau macro over the budget (log2 axis) per drafter, its 95% interval as a band, the chain's tau macro as
    a dashed line of the same colour."""
    from .breakdown import figure_svg
    from .charts import chart_label, chart_legend, chart_style, clean_svg, new_figure

    with chart_style():
        fig, (ax,) = new_figure(6.4, 3.3)
        budgets = sorted({r["budget"] for d in drafters for r in d["rows"]})
        for d in drafters:
            xs = [r["budget"] for r in d["rows"]]
            ys = [r["tau_macro"] if r["tau_macro"] is not None else float("nan") for r in d["rows"]]
            ax.plot(xs, ys, "o-", color=d["color"], markersize=4, label=chart_label(f"{d['name']}: tree"))
            ci = [(r["budget"], r["ci"]) for r in d["rows"] if r["ci"]]
            if ci:
                ax.fill_between([b for b, _ in ci], [c[0] for _, c in ci], [c[1] for _, c in ci], color=d["color"],
                                alpha=0.12, linewidth=0)
            if d["chain"]["tau_macro"] is not None:
                ax.axhline(d["chain"]["tau_macro"], color=d["color"], linestyle="--", linewidth=1.2,
                           label=chart_label(f"{d['name']}: chain (B = {d['block_size']})"))
        ax.set_xscale("log", base=2)
        ax.set_xticks(budgets, [str(b) for b in budgets])
        ax.set_xlabel("tree budget (drafted nodes per step)")
        ax.set_ylabel("tau macro")
        ax.set_ylim(bottom=0)
        ax.set_title("acceptance under DDTree's tree, per budget; dashed: the chain")
        chart_legend(ax, loc="lower right", fontsize=7)
        return figure_svg(fig, clean_svg, "tau per tree budget chart", "tb-")


def render_trees(console: Console, run: RunDocument) -> None:
    """Terminal: per drafter the tree table (chain first), the saturation budget, recall by depth and, with
    step times, the chain-and-tree speedup table."""
    view = tree_view(run)
    if view is None:
        return
    if view["target_note"]:
        console.print("[yellow]note:[/] " + safe(view["target_note"]))
    for d in view["drafters"]:
        table = Table(title=safe(f"{d['name']}: tree verification (DDTree) per budget, the chain first"),
                      title_justify="left")
        for col in ("verification", "tau macro [95% CI]", "tau micro", "steps", "vs chain", "stop: candidate",
                    "stop: budget", "complete"):
            table.add_column(col, justify="left" if col == "verification" else "right")
        c = d["chain"]
        ci = f" [{_f(c['ci'][0], 2)}, {_f(c['ci'][1], 2)}]" if c["ci"] else ""
        table.add_row(f"chain (B-1 = {d['block_size'] - 1})", _f(c["tau_macro"]) + ci, _f(c["tau_micro"]),
                      str(c["steps"]), "", "", "", "")
        for r in d["rows"]:
            ci = f" [{_f(r['ci'][0], 2)}, {_f(r['ci'][1], 2)}]" if r["ci"] else ""
            gain = "–" if r["gain"] is None else f"{r['gain']:+.3f}"
            table.add_row(f"tree {r['budget']}", _f(r["tau_macro"]) + ci, _f(r["tau_micro"]), str(r["steps"]), gain,
                          _pct(r["candidate"]), _pct(r["budget_cut"]), _pct(r["complete"]))
        console.print(table)
        sat = d["saturation"]["budget"]
        largest = d["rows"][-1]["budget"] if d["rows"] else None
        console.print(safe(f"saturates at budget {sat}" + (" (the largest measured: it may still grow)"
                                                            if sat is not None and sat == largest else "")
                           + f"; {d['saturation']['rule']}"))
        recall = Table(title=safe(f"{d['name']}: recall by depth (the target's token within the drafter's top k, "
                                  "every anchor)"), title_justify="left")
        recall.add_column("depth", justify="right")
        recall.add_column("anchors", justify="right")
        for k in ("1", "4", "16", "64"):
            recall.add_column(f"recall@{k}", justify="right")
        for r in d["recall"]:
            recall.add_row(str(r["depth"]), str(r["anchors"]), *(_f(r["recall"][k]) for k in ("1", "4", "16", "64")))
        console.print(recall)
        for note in d["notes"]:
            console.print("[yellow]note:[/] " + safe(note))
        speed = d["speedup"]
        if speed:
            table = Table(title=safe(f"{d['name']}: expected speedup, chain and tree (a model)"), title_justify="left")
            for col in ("verification", "verify tokens", "tau micro", *(f"batch {b}" for b in speed["batches"])):
                table.add_column(col, justify="left" if col == "verification" else "right")
            for row in speed["rows"]:
                label = f"{row['verification']} {'k = ' if row['verification'] == 'chain' else ''}{row['size']}"
                cells = []
                for b, v in zip(speed["best"], row["speedup"]):
                    text = "–" if v is None else f"{v:.2f}x"
                    mine = (b["verification"], b["size"]) == (row["verification"], row["size"])
                    cells.append(f"[bold]{text}[/bold]" if mine else text)
                table.add_row(label, str(row["verify_tokens"]), _f(row["tokens_per_step"]), *cells)
            console.print(table)
            console.print(safe(f"model: {speed['model']}; inputs: {speed['label']}"))
            console.print(safe("best per batch: " + "; ".join(
                f"batch {b['batch']}: {b['verification']} {b['size']} ({_f(b['speedup'], 2)}x)"
                for b in speed["best"] if b["verification"])))
    console.print(safe(f"trees: {view['note']}"))


def render_tree_diff(console: Console, result: dict) -> None:
    """diff: tau B - A paired by prompt at each budget both sides measured."""
    part = result.get("trees")
    if not part:
        return
    table = Table(title="Per tree budget (DDTree, each side's own tree walk), B - A", header_style="bold")
    for column in ("budget", "tau macro A", "tau macro B", "B - A [95% CI]", "p (permutation)"):
        table.add_column(column, justify="right")
    for p in part["pairs"]:
        d = p["delta_tau_macro"]
        table.add_row(str(p["budget"]), _f(p["tau_macro_a"]), _f(p["tau_macro_b"]),
                      f"{d['estimate']:+.3f} [{_f(d['low'])}, {_f(d['high'])}]", f"{d['p_value']:.3g}")
    console.print(table)
    if part.get("chain"):
        c = part["chain"]
        console.print(safe(f"chain: B - A = {c['estimate']:+.3f} tau macro; at the largest common budget "
                           f"{part['pairs'][-1]['budget']}: {part['pairs'][-1]['delta_tau_macro']['estimate']:+.3f}"))


def tree_diff_view(result: dict) -> dict[str, Any] | None:
    """diff's HTML section: the budget pairs and a chart of tau over the budget for A and B."""
    part = result.get("trees")
    if not part:
        return None
    return {"pairs": part["pairs"], "chart": _diff_tree_chart(part["pairs"], result["a"]["name"], result["b"]["name"])}


def _diff_tree_chart(pairs: list[dict[str, Any]], name_a: str, name_b: str) -> str:
    from .breakdown import figure_svg
    from .charts import PALETTE, chart_label, chart_legend, chart_style, clean_svg, new_figure

    budgets = [p["budget"] for p in pairs]
    with chart_style():
        fig, (ax,) = new_figure(6.0, 3.0)
        for key, name, color in (("tau_macro_a", f"A: {name_a}", PALETTE[0]), ("tau_macro_b", f"B: {name_b}", PALETTE[1])):
            ax.plot(budgets, [p[key] for p in pairs], "o-", color=color, markersize=4, label=chart_label(name))
        ax.set_xscale("log", base=2)
        ax.set_xticks(budgets, [str(b) for b in budgets])
        ax.set_xlabel("tree budget (drafted nodes per step)")
        ax.set_ylabel("tau macro")
        ax.set_ylim(bottom=0)
        ax.set_title("acceptance under DDTree's tree, A and B")
        chart_legend(ax, loc="lower right")
        return figure_svg(fig, clean_svg, "tau per tree budget chart", "dt-")


# ------------------------------------------------------------------------------------------------ track

def track_tree_view(c) -> dict[str, Any] | None:
    """track --tree-budgets: per checkpoint (reference first, then by step) its chain tau and its tau at each
    budget, and its saturation budget; None when no row has a tree."""
    rows = ([c.reference] if c.reference is not None else []) + [p.row for p in c.points]
    budgets = sorted({b for r in rows for b in (r.get("tree") or {}).get("budgets") or []})
    if not budgets:
        return None
    from ..core.track_summary import label

    out = []
    for r in rows:
        tree = r.get("tree") or {}
        at = {e["budget"]: e["metrics"] for e in tree.get("by_budget") or []}
        out.append({"role": r.get("role"), "step": r.get("step"), "name": r["name"], "label": label(r),
                    "chain": r["metrics"].get("tau_macro"),
                    "cells": [{"tau": at[b].get("tau_macro"), "ci": at[b].get("tau_macro_ci")} if b in at else None
                              for b in budgets],
                    "saturation": (tree.get("saturation") or {}).get("budget")})
    return {"budgets": budgets, "rows": out, "latest_vs_reference": _latest_vs_reference(c, budgets)}


def _latest_vs_reference(c, budgets) -> list[dict[str, Any]] | None:
    """The latest checkpoint against the reference at each budget both measured, paired over prompts
    (core/compare.paired_row on each side's per-prompt tree counts): B = latest, A = reference."""
    from ..core.compare import paired_row

    latest = c.latest.row if c.latest is not None else None
    if latest is None or c.reference is None:
        return None

    def per_prompt(row, budget):
        entry = next((e for e in (row.get("tree") or {}).get("by_budget") or [] if e["budget"] == budget), None)
        return {p: tuple(v) for p, v in entry["counts"]["per_prompt"].items()} if entry else None

    out = []
    for budget in budgets:
        a, b = per_prompt(c.reference, budget), per_prompt(latest, budget)
        row = paired_row(a, b) if a and b else None
        if row is not None:
            out.append({"budget": budget, "delta": row["delta_tau_macro"]})
    return out or None


def render_track_trees(console: Console, c) -> None:
    """Terminal: tau macro per tree budget per checkpoint, the chain first."""
    view = track_tree_view(c)
    if view is None:
        return
    table = Table(title="tau macro under DDTree's tree per budget, per checkpoint (the chain first)",
                  title_justify="left", header_style="bold")
    for column in ("step", "checkpoint", "chain", *(f"tree {b}" for b in view["budgets"]), "saturates at"):
        table.add_column(column, justify="left" if column == "checkpoint" else "right", overflow="fold")
    for row in view["rows"]:
        step = "ref" if row["role"] == "reference" else ("?" if row["step"] is None else str(row["step"]))
        table.add_row(step, safe(row["name"]), _f(row["chain"]),
                      *("" if cell is None else _f(cell["tau"]) for cell in row["cells"]),
                      "–" if row["saturation"] is None else str(row["saturation"]),
                      style="dim" if row["role"] == "reference" else None)
    console.print(table)
    if view["latest_vs_reference"]:
        console.print(safe("latest vs reference per tree budget (paired over prompts): " + "; ".join(
            f"{p['budget']}: {p['delta']['estimate']:+.2f} [{p['delta']['low']:.2f}, {p['delta']['high']:.2f}]"
            for p in view["latest_vs_reference"])))


# ------------------------------------------------------------------------------------------------ doctor

def render_doctor_trees(console: Console, result: dict) -> None:
    """doctor --tree-budgets: every variant's tau macro as a chain and at each budget; with --reference, the
    reference's row and the gap (reference - as configured) per budget beside the chain's."""
    trees = result.get("trees")
    if not trees:
        return
    table = Table(title="doctor under DDTree's tree: tau macro per budget (same trajectories, same drafter pass)",
                  header_style="bold")
    table.add_column("variant", overflow="fold")
    table.add_column("chain", justify="right")
    for b in trees["budgets"]:
        table.add_column(f"tree {b}", justify="right")
    rows = trees["variants"] + ([trees["reference"]] if trees.get("reference") else [])
    for r in rows:
        table.add_row(safe(r["variant"]), _f(r["chain"], 2), *(_f(r["tree"][str(b)], 2) for b in trees["budgets"]))
    gap = trees.get("gap")
    if gap:
        signed = [("–" if v is None else f"{v:+.2f}") for v in [gap["chain"], *(gap["tree"][str(b)] for b in trees["budgets"])]]
        table.add_row("[bold]gap: reference - as configured[/]", *signed)
    console.print(table)
