"""The verdict block in the terminal, first thing every run report prints (core/verdict.py builds it), and
the explanation `run --reference` measured: its variants table (tau, delta, flagged blocks) and its gap table."""

from __future__ import annotations

from rich.console import Console
from rich.panel import Panel
from rich.table import Table

from ..core.compare import Delta
from ..core.implausible import flag_lines
from ..core.safe_text import printable, safe
from .terminal_gap import flagged_cell, render_gap, short_labels


def _tau(row: dict) -> str:
    tau, ci = row.get("tau_macro"), row.get("tau_macro_ci")
    if tau is None:
        return "tau -"
    return f"tau {tau:.2f}" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "")


def verdict_lines(view: dict) -> list[str]:
    """The block's lines as Rich markup (data escaped): taus, paired deltas, the doctor's verdict and share; a
    line about a drafter starts with two spaces (rendered as a hanging indent)."""
    lines = []
    for row in view["drafters"]:
        role = " (reference)" if row["reference"] else " (compared with)" if view["compared_to"] == row["name"] else ""
        lines.append(f"[bold]{safe(row['name'])}[/]{role}: {_tau(row)}"
                     + (" (estimate)" if row.get("estimate") else ""))
        if row.get("line"):
            lines.append(f"  {safe(row['line'])}")
        for band in row.get("bands") or []:  # formats/published.py: the published band of each prompt set
            lines.append(f"  {safe(band['line'])}")
        for line in flag_lines(row.get("flags") or []):  # core/implausible.py
            lines.append(f"  [bold red]{safe(line)}[/]")
        if row.get("serving"):
            lines.append(f"  {safe(row['serving'])}")
        e = row.get("explanation")
        if not e:
            continue
        style = "bold" if e.get("finding") else ""
        text = f"doctor ({e['source']}): {safe(e['verdict'])}"
        lines.append(f"  [{style}]{text}[/]" if style else f"  {text}")
        closing = e.get("closing")
        if e.get("behind") and closing:
            ci = closing.get("share_ci")
            share = f"{100 * closing['share']:.0f}%" + (f" [{100 * ci[0]:.0f}%, {100 * ci[1]:.0f}%]" if ci else "")
            flagged = ""
            if closing.get("flagged_configured") is not None and closing.get("flagged_variant") is not None:
                flagged = (f"; blocks flagged as repetitive: {100 * closing['flagged_configured']:.0f}% as configured, "
                           f"{100 * closing['flagged_variant']:.0f}% evaluated that way")
            lines.append(f"  it closes {share} of the gap to {safe(e['reference'])} over {closing['paired_prompts']} of "
                         f"{closing['prompts']} prompts{flagged}")
            if closing.get("check"):
                lines.append(f"  check {safe(closing['check'])}")
        elif e.get("behind") and e.get("paragraph"):
            lines.append(f"  {safe(e['paragraph'])}")
    return lines


def render_verdict(console: Console, view: dict) -> None:
    """The verdict block (a panel), then the next commands, each on one unbroken line to copy."""
    from rich.console import Group
    from rich.padding import Padding
    from rich.text import Text

    title = f"verdict: {safe(view['title'])}" + (f", {view['prompts']} prompts" if view.get("prompts") else "")
    lines = [Padding(Text.from_markup(line.removeprefix("  ")), (0, 0, 0, 2 if line.startswith("  ") else 0))
             for line in verdict_lines(view)]
    console.print(Panel(Group(*lines), title=title, title_align="left", expand=False))
    if view.get("next"):
        console.print("[bold]next:[/]")
        for step in view["next"]:
            console.print(f"  # {printable(step['why'])}", markup=False, highlight=False)
            console.print("  " + printable(step["command"]), markup=False, highlight=False, soft_wrap=True)


def render_explanation(console: Console, run: dict) -> None:
    """`run --reference`'s explanation of each drafter behind the reference: every variant on the run's own
    trajectories (tau, delta to the configuration, the share of its walk's blocks flagged) and the gap table."""
    for e in run.get("explanation") or []:
        if not e["behind"]:
            console.print(safe(e["verdict"]))
            continue
        table = Table(title=f"Explained: {safe(e['drafter'])} under doctor's variants on this run's trajectories (no "
                            "more target passes; delta = variant - as configured, paired over prompts)",
                      header_style="bold")
        for column in ("variant", "tau\nmacro", "delta [95% CI]", "p", "flagged\nblocks"):
            table.add_column(column, justify="left" if column == "variant" else "right", no_wrap=column != "variant")
        labels, notes = short_labels([row["variant"] for row in e["variants"]])
        for row in e["variants"]:
            d = row.get("delta")
            tau = "" if row["tau_macro"] is None else f"{row['tau_macro']:.2f}"
            cells = [safe(labels[row["variant"]]), tau, "", "", flagged_cell(row["flagged_share"])]
            if d is not None and not Delta(0, 0, 0, 1, d.get("n") or 0).too_few:
                cells[2] = f"{d['estimate']:+.2f} [{d['low']:.2f}, {d['high']:.2f}]"
                cells[3] = "<0.001" if d["p_value"] < 0.001 else f"{d['p_value']:.2g}"
                if row["variant"] == e["finding"]:
                    cells = [f"[bold green]{c}[/]" for c in cells]
            elif d is not None:
                cells[2] = f"{d['estimate']:+.2f} (too few pairs)"
            table.add_row(*cells)
        console.print(table)
        for note in notes:
            console.print(safe(note))
        render_gap(console, e["gap"])
