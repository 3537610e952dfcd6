"""`diff` in the terminal: the paired verdict, per-slot deltas and the prompts that moved most."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..core.safe_text import safe
from .terminal import block_text, fixed_digits, sparkline


def slot_widths(views) -> list[int]:
    """The widest piece at each slot over several blocks' drafts and targets (as shown: whitespace visible)."""
    from ..core.samples import visible

    widths: list[int] = []
    for view in views:
        for row in (view.draft, view.target):
            for i, piece in enumerate(row):
                widths[len(widths):] = [0] * (i + 1 - len(widths))
                widths[i] = max(widths[i], len(visible(piece)))
    return widths


def _signed(value, digits: int = 3) -> str:
    return "" if value is None else f"{value:+.{digits}f}"


def render_estimate_diff(console: Console, result: dict) -> None:
    """Two offline estimates paired by prompt: the verdict and the deltas, labelled as estimates."""
    a, b = result["a"], result["b"]
    if result["forced"]:
        console.print("[bold white on red] UNFAIR COMPARISON (--force): " + safe("; ".join(result["unfair"])) + " [/]")
    console.print(f"[bold]{safe(result['verdict'])}[/]")
    table = Table(title=f"ESTIMATES: A = {safe(a['label'])}   B = {safe(b['label'])}   ({result['prompts']} paired "
                        "prompts, samples pooled)", header_style="bold")
    for column in ("", "A", "B", "B - A [95% CI]", "p (permutation)"):
        table.add_column(column, justify="right" if column else "left")
    for kind in ("macro", "micro"):
        d = result[f"delta_tau_{kind}"]
        table.add_row(f"tau estimate {kind}", fixed_digits(a[f"tau_{kind}"], 3), fixed_digits(b[f"tau_{kind}"], 3),
                      f"{_signed(d['estimate'])} [{_signed(d['low'])}, {_signed(d['high'])}]", f"{d['p_value']:.3g}")
    console.print(table)
    console.print("alpha per slot, B - A: " + " ".join(_signed(x, 2) or "-" for x in result["delta_alpha"]))


def render_diff(console: Console, result: dict) -> None:
    """Verdict first, then the deltas with intervals, per slot, histogram, and where it changed."""
    from ..core.samples import BlockView

    a, b = result["a"], result["b"]
    if result.get("estimate"):
        render_estimate_diff(console, result)
        return
    if result["forced"]:
        console.print("[bold white on red] UNFAIR COMPARISON (--force): " + safe("; ".join(result["unfair"])) + " [/]")
    for warning in result.get("warnings", []):
        console.print(f"[yellow]warning:[/] {safe(warning)}")
    console.print(f"[bold]{safe(result['verdict'])}[/]")
    table = Table(title=f"A = {safe(a['label'])}   B = {safe(b['label'])}   ({result['prompts']} paired prompts)", header_style="bold")
    for column in ("", "A", "B", "B - A [95% CI]", "p (permutation)"):
        table.add_column(column, justify="right" if column else "left")
    for kind in ("macro", "micro"):
        d = result[f"delta_tau_{kind}"]
        table.add_row(f"tau {kind}", fixed_digits(a[f"tau_{kind}"]), fixed_digits(b[f"tau_{kind}"]),
                      f"{_signed(d['estimate'])} [{fixed_digits(d['low'])}, {fixed_digits(d['high'])}]", f"{d['p_value']:.3g}")
    console.print(table)
    console.print(f"sign test over per-prompt differences: p = {result['sign_test_p']:.3g}; continuations: "
                  f"{safe(result['continuations']['differing_tokens'])}/{safe(result['continuations']['total_tokens'])} tokens differ")

    slots = Table(title="Per slot, B - A", header_style="bold")
    for column in ("slot", "reach", "cond", "marg"):
        slots.add_column(column, justify="right")
    deltas = result["slots"]
    for i in range(len(deltas["reach"])):
        marg = deltas["marginal"][i] if deltas["marginal"] and i < len(deltas["marginal"]) else None
        slots.add_row(str(i + 1), _signed(deltas["reach"][i]), _signed(deltas["conditional"][i]), _signed(marg))
    console.print(slots)
    hist = result["histogram"]
    console.print(f"accepted length n: A {sparkline([round(1000 * x) for x in hist['a']])}  "
                  f"B {sparkline([round(1000 * x) for x in hist['b']])}  mean n {_signed(hist['mean_n_difference'], 2)}, "
                  f"total variation {hist['total_variation']:.3f}")
    rep = result["repetition"]
    if rep["flagged_share_a"] is not None and rep["flagged_share_b"] is not None:
        console.print(f"flagged (repetitive) blocks: A {100 * rep['flagged_share_a']:.1f}% -> B {100 * rep['flagged_share_b']:.1f}%")
    from .draft_lengths import render_draft_length_diff

    render_draft_length_diff(console, result)  # --draft-lengths / speedup on both sides
    from .tree import render_tree_diff

    render_tree_diff(console, result)  # --tree-budgets on both sides: tau B - A per budget
    from .breakdown import render_depth_diff

    render_depth_diff(console, result)  # paired by depth bucket
    for set_name, d in result["by_prompt_set"].items():
        console.print(f"prompt set {safe(set_name)}: delta tau macro {_signed(d['estimate'], 2)} [{d['low']:.2f}, {d['high']:.2f}], n = {d['n']}")
    for title, key in (("Regressed most (B worse)", "regressed"), ("Improved most (B better)", "improved")):
        if not result[key]:
            continue
        console.print(f"[bold]{title}[/]")
        for example in result[key]:
            console.print(f"{safe(example['prompt_id'])}: tau A {example['tau_a']:.2f} -> B {example['tau_b']:.2f} "
                          f"({_signed(example['delta'], 2)}), first divergent block:")
            if example["blocks"]:
                views = [BlockView(**{**block, "draft": tuple(block["draft"]), "target": tuple(block["target"]),
                                      "flags": tuple(block.get("flags", ()))}) for block in example["blocks"]]
                widths = slot_widths(views)  # A's draft, B's draft and the target share one column per slot
                for label, view in zip("AB", views):
                    draft, target = block_text(view, widths)
                    console.print(Text(f"  {label} draft │ ", style="dim"), draft, f" (accepted {safe(view.accepted)})", sep="")
                console.print(Text("  target  │ ", style="dim"), target, sep="")
