"""`doctor` in the terminal: the variants with their deltas, the static checks, the verdict and the gap."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from ...core.compare import Delta, paired_figure
from ...core.safe_text import safe
from ...render.terminal import fixed_digits
from ...render.terminal_gap import flagged_cell, render_gap, short_labels
from .windows import render_windows


def _cells(every: bool, *cells: str) -> list[str]:
    """A variants-table row, without its pairs cell (the fifth) when every row pairs all the prompts."""
    return [c for i, c in enumerate(cells) if i != 4 or not every]


def render_doctor(console: Console, result: dict) -> None:
    deltas = [r["delta"] for r in result["variants"] if r.get("delta")]
    # a pairs column only where some row pairs fewer prompts than all (a prompt without steps under a variant)
    every = all(d.get("n") == result["prompts"] and d.get("total") in (None, d.get("n")) for d in deltas)
    paired = f"paired over all {result['prompts']} prompts" if every else "paired over prompts"
    table = Table(title=f"doctor: {safe(result['drafter'])} on {result['prompts']} prompts (one target pass each for "
                        f"all these variants; delta = variant - as configured, {paired}; flagged: the share of the "
                        "walk's blocks flagged as repetitive)", header_style="bold")
    for column in ("variant", "tau\nmacro", "delta [95% CI]", "p", "pairs", "drafts\nunchanged", "flag-\nged"):
        if column != "pairs" or not every:
            table.add_column(column, justify="left" if column == "variant" else "right", no_wrap=column != "variant")
    labels, notes = short_labels([row["variant"] for row in result["variants"]])
    for row in [{**r, "variant": safe(labels[r["variant"]])} for r in result["variants"]]:
        d = row.get("delta")
        flagged = flagged_cell(row.get("flagged_share"))
        if d is None:
            table.add_row(*_cells(every, f"[bold]{row['variant']}[/]", fixed_digits(row["tau_macro"], 2), "", "", "", "",
                                  flagged))
            continue
        # every paired figure says how many prompts it pairs; too few pairs get no interval and no p
        n, total = d.get("n"), d.get("total")
        pairs = f"{n}/{total}" if total is not None and total != n else f"{n}"
        unchanged = f"{100 * row['identical_drafts']:.0f}%" if row["identical_drafts"] is not None else ""
        if Delta(0, 0, 0, 1, n or 0).too_few:
            table.add_row(*_cells(every, row["variant"], fixed_digits(row["tau_macro"], 2),
                                  f"{d['estimate']:+.2f} (too few pairs)", "-", pairs, unchanged, flagged))
            continue
        style = "bold green" if d["low"] > 0 and d["p_value"] < 0.05 else ""
        delta = f"{d['estimate']:+.2f} [{d['low']:.2f}, {d['high']:.2f}]"
        table.add_row(*_cells(every, row["variant"], fixed_digits(row["tau_macro"], 2),
                              f"[{style}]{delta}[/]" if style else delta,
                              "<0.001" if d["p_value"] < 0.001 else f"{d['p_value']:.2g}", pairs, unchanged, flagged))
    console.print(table)
    for note in notes:
        console.print(safe(note))
    from ...render.tree import render_doctor_trees

    render_doctor_trees(console, result)  # --tree-budgets: every variant under DDTree's tree (render/tree.py)
    mask = result["mask_row"]
    console.print(f"MASK embedding row: {'[green]ok[/]' if mask['ok'] else '[bold red]PROBLEM[/]'} ({safe(mask['detail'])})")
    kernels = result["kernels"]
    if kernels["compared"]:
        worst = max(kernels["per_layer"].items(), key=lambda kv: kv[1]["max_rel"])
        console.print(f"fla vs torch fallback: greedy agreement {100 * kernels['greedy_agreement']:.2f}%, largest tap "
                      f"difference at layer {safe(worst[0])}: max rel {worst[1]['max_rel']:.2e}")
    else:
        console.print(f"fla vs torch fallback: not compared ({safe(kernels['detail'])})")
    for context in result.get("context_variants") or []:
        d = context["delta"]
        console.print(f"context variant {safe(context['variant'])} (new continuations, {context['target_passes']} more "
                      f"target passes): tau {fixed_digits(context['tau_macro'], 2)}, {paired_figure(d)}")
    for name, table_check in (result.get("tables") or {}).items():
        if table_check.get("compared"):
            mark = "[green]ok[/]" if table_check.get("equal") else "[bold red]DIFFERS[/]"
            console.print(f"checkpoint's {name} copy vs the target's: {mark} ({safe(table_check['detail'])})")
    lens = result.get("logit_lens")
    if lens:
        console.print("drafts agreeing with each layer's logit lens: " + ", ".join(
            f"layer {safe(k)} {100 * v:.1f}%" for k, v in lens["agreement"].items()))
    norm = result.get("norm_convention")
    if norm:
        measured = (f"; drafts agreeing with the target's argmax under x * (1 + w) {100 * norm['agreement']['right']:.1f}%, "
                    f"under x * w {100 * norm['agreement']['wrong']:.1f}%"
                    + (f" ({paired_figure(norm['wrong_vs_right'], 3)})" if norm.get("wrong_vs_right") else "")
                    if norm.get("measured") else "")
        mark = "[bold red]MIS-SCALED TEACHER[/] " if norm["finding"] and norm["applies"] else ""
        console.print(f"teacher's final norm: {mark}{safe(norm['rule'])}{safe(measured)}")
    render_windows(console, result.get("windows"))  # by depth (views/windows.py)
    if result.get("trained_taps"):  # doctor --trained-taps (terminal_trained_taps.py)
        from ...render.terminal_trained_taps import render_trained_taps

        render_trained_taps(console, result["trained_taps"])
    for dtype, facts in (result.get("fc_range") or {}).items():  # commands/defects.py: lmdeploy #4991
        mark = "[bold red]OVERFLOW[/] " if facts["overflowed"] else ""
        console.print(f"fc output at {dtype}: {mark}{facts['overflowed']} of {facts['values']} values past its range "
                      f"(largest |fc| {facts['max_abs']:.4g})")
    if result.get("serving_target"):  # --serving-target (render/serving_target.py)
        from ...render.serving_target import render_serving_target

        render_serving_target(console, result["serving_target"])
    console.print(f"[bold]verdict: {safe(result['verdict'])}[/]")
    gap = result.get("gap")
    if gap:
        render_gap(console, gap)
        if gap.get("context"):  # the context variants: their own table, over their own paired prompts
            render_gap(console, gap["context"], context=True)
