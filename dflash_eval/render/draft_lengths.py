"""The serving decision on screen: tau at every draft length k (each from its own replay with a block of
k + 1) and the expected-speedup table k x batch with the best k per batch, labelled as a model with its
inputs. One data shape (`serving_view`) feeds the terminal tables here and the HTML section (run.html.j2);
`draft_length_diff_view` feeds diff.html's (templates/_diff_draft_lengths.html.j2)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from ..core.documents.run_document import RunDocument
from ..core.safe_text import safe
from ..core.speedup import rising_with_batch

SPEEDUP_NOTE = ("a model, not a measurement: tau_micro(k) x t_target(1) / (t_target(k+1) + t_drafter(k+1)); "
                "no scheduling, sampling or cache bookkeeping")


def _f(value, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def serving_view(run: RunDocument) -> list[dict[str, Any]]:
    """Per drafter with a per-k table or a speedup table: the rows both renderers show."""
    out = []
    for d in run.get("drafters", []):
        by_k, table = d.get("by_draft_length"), d.get("speedup")
        if not by_k and not table:
            continue
        lengths = [{"k": e["k"], "block": e["block_size"], "checkpoint": bool(e.get("checkpoint_block")),
                    "tau_macro": e["metrics"].get("tau_macro"), "ci": e["metrics"].get("tau_macro_ci"),
                    "tau_micro": e["metrics"].get("tau_micro"), "steps": e["metrics"].get("steps"),
                    "acceptance": e["metrics"].get("token_acceptance_rate"), "reach": e["metrics"].get("reach") or []}
                   for e in by_k or []]
        speed = None
        if table:
            best = {b["batch"]: b["k"] for b in table["best"]}
            speed = {"label": table["label"], "model": table["model"], "batches": table["batches"],
                     "rows": [{"k": r["k"], "tokens_per_step": r["tokens_per_step"],
                               "cells": [{"value": v, "best": v is not None and best.get(b) == r["k"]}
                                         for b, v in zip(table["batches"], r["speedup"])]}
                              for r in table["rows"]],
                     "best": table["best"], "rising": rising_with_batch(table)}
        out.append({"name": d["name"], "lengths": lengths, "speedup": speed})
    return out


def render_draft_lengths(console: Console, run: RunDocument) -> None:
    """Terminal: per drafter, tau per draft length, then the speedup table (best k per batch in bold)."""
    for view in serving_view(run):
        if view["lengths"]:
            table = Table(title=safe(f"{view['name']}: acceptance per draft length k (own replay, block k + 1)"),
                          title_justify="left")
            for col in ("k", "block", "tau macro [95% CI]", "tau micro", "steps", "token acc.", "reach r_1..r_k"):
                table.add_column(col, justify="left" if col.startswith("reach") else "right")
            for e in view["lengths"]:
                ci = f" [{_f(e['ci'][0], 2)}, {_f(e['ci'][1], 2)}]" if e["ci"] else ""
                table.add_row(str(e["k"]) + (" (B-1)" if e["checkpoint"] else ""), str(e["block"]),
                              _f(e["tau_macro"]) + ci, _f(e["tau_micro"]), str(e["steps"]), _f(e["acceptance"]),
                              " ".join(_f(r, 2) for r in e["reach"]))
            console.print(table)
        speed = view["speedup"]
        if speed:
            table = Table(title=safe(f"{view['name']}: expected speedup"), title_justify="left")
            table.add_column("k", justify="right")
            table.add_column("tau micro", justify="right")
            for b in speed["batches"]:
                table.add_column(f"batch {b}", justify="right")
            for row in speed["rows"]:
                cells = [f"[bold]{_f(c['value'], 2)}x[/bold]" if c["best"] else
                         ("–" if c["value"] is None else f"{_f(c['value'], 2)}x") for c in row["cells"]]
                table.add_row(str(row["k"]), _f(row["tokens_per_step"]), *cells)
            console.print(table)
            console.print(safe(f"model inputs: {speed['label']}; {SPEEDUP_NOTE}"))
            if speed["rising"]:
                console.print("[yellow]note:[/] " + safe(speed["rising"]))
            best = "; ".join(f"batch {b['batch']}: k = {b['k']} ({_f(b['speedup'], 2)}x)" for b in speed["best"]
                             if b["k"] is not None)
            if best:
                console.print(safe(f"best k per batch: {best}"))


def render_draft_length_diff(console: Console, result: dict) -> None:
    """diff: tau B - A paired at each draft length both sides measured, and the best speedups per batch."""
    part = result.get("draft_lengths")
    if not part:
        return
    if part["pairs"]:
        table = Table(title="Per draft length k (each side's own replay at k), B - A", header_style="bold")
        for column in ("k", "tau macro A", "tau macro B", "B - A [95% CI]", "p (permutation)"):
            table.add_column(column, justify="right")
        for p in part["pairs"]:
            d = p["delta_tau_macro"]
            table.add_row(str(p["k"]), _f(p["tau_macro_a"]), _f(p["tau_macro_b"]),
                          f"{d['estimate']:+.3f} [{_f(d['low'])}, {_f(d['high'])}]", f"{d['p_value']:.3g}")
        console.print(table)
    speed = part["speedup"]
    if speed:
        table = Table(title="Expected speedup, best k per batch (a model)", header_style="bold")
        for column in ("batch", "A: k", "A: speedup", "B: k", "B: speedup", "B / A"):
            table.add_column(column, justify="right")
        for row in speed["best"]:
            ratio = (row["speedup_b"] / row["speedup_a"]) if row["speedup_a"] and row["speedup_b"] else None
            table.add_row(str(row["batch"]), str(row["k_a"]), _f(row["speedup_a"], 2), str(row["k_b"]),
                          _f(row["speedup_b"], 2), _f(ratio, 3))
        console.print(table)
        if not speed["same_model"]:
            console.print("[yellow]warning:[/] " + safe(f"the two speedups come from different step times: "
                                                        f"A {speed['label_a']}; B {speed['label_b']}"))


def draft_length_diff_view(result: dict) -> dict[str, Any] | None:
    """diff's HTML section: tau of A and B paired at each draft length k both measured (B - A with its
    paired 95% CI), a chart of tau(k) for both, and the best expected speedup per batch side by side."""
    part = result.get("draft_lengths")
    if not part:
        return None
    speed = None
    if part["speedup"]:
        s = part["speedup"]
        speed = {"label_a": s["label_a"], "label_b": s["label_b"], "same_model": s["same_model"],
                 "best": [{**row, "ratio": row["speedup_b"] / row["speedup_a"]
                           if row["speedup_a"] and row["speedup_b"] else None} for row in s["best"]]}
    return {"pairs": part["pairs"], "speedup": speed, "note": SPEEDUP_NOTE,
            "chart": (_diff_tau_chart(part["pairs"], result["a"]["name"], result["b"]["name"])
                      if part["pairs"] else None)}


def _diff_tau_chart(pairs: list[dict[str, Any]], name_a: str, name_b: str) -> str:
    from .breakdown import figure_svg
    from .charts import PALETTE, chart_label, chart_legend, chart_style, clean_svg, new_figure

    ks = [p["k"] for p in pairs]
    with chart_style():
        fig, (ax,) = new_figure(6.0, 3.0)
        for key, name, color in (("tau_macro_a", f"A: {name_a}", PALETTE[0]),
                                 ("tau_macro_b", f"B: {name_b}", PALETTE[1])):
            ax.plot(ks, [p[key] for p in pairs], "o-", color=color, markersize=4, label=chart_label(name))
        ax.set_xticks(ks, [str(k) for k in ks])
        ax.set_xlabel("draft length k (num_speculative_tokens; block k + 1)")
        ax.set_ylabel("tau macro")
        ax.set_ylim(bottom=0)
        ax.set_title("acceptance per draft length, A and B")
        chart_legend(ax, loc="lower right")
        return figure_svg(fig, clean_svg, "tau per draft length chart", "dk-")
