"""The gap to a reference in the terminal, every figure over the same prompts (core/gap.py): doctor's gap
table and its context-variant table (doctor/views/terminal.py), and the explanation `run --reference`
prints (render/terminal_verdict.py). Variant names too long for a row are shortened, the detail noted below."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from ..core.compare import Delta, paired_figure
from ..core.safe_text import safe


def _two(value) -> str:
    return "" if value is None else f"{value:.2f}"


LABEL_DETAIL = 24  # a variant's parenthesised detail longer than this goes under the table, not in its row


def short_labels(names: list[str]) -> tuple[dict[str, str], list[str]]:
    """Each variant's name for a table row, and the details taken out of it: "RoPE: the target's (default,
    theta 10000000.0, mrope_section 2/1/1, ...)" is a row "RoPE: the target's ¹" and a line "¹ RoPE: the
    target's: default, theta ..." under the table, so that no row takes ten lines at 80 columns."""
    shown, notes = {}, []
    for name in names:
        head, sep, detail = name.partition(" (")
        if sep and len(detail) > LABEL_DETAIL:
            notes.append(f"{len(notes) + 1}. {head}: {detail.removesuffix(')')}")
            shown[name] = f"{head} ({len(notes)})"
        else:
            shown[name] = name
    return shown, notes


def flagged_cell(share: float | None) -> str:
    """A variant's share of walk blocks flagged as repetitive ('-' where not measured: an estimate)."""
    return "-" if share is None else f"{100 * share:.0f}%"


def render_gap(console: Console, gap: dict, *, context: bool = False) -> None:
    """The gap to the reference and the share each variant closes, every figure over the same prompts (core/gap.py);
    `context`: the context variants' table (new continuations), which names its own paired prompts."""
    if gap["gap"] is None:  # no prompt with steps on every side: the paragraph says so
        console.print(safe(gap["paragraph"]))
        return
    g = gap["gap"]
    what = "context variants (new continuations): " if context else ""
    table = Table(title=f"{what}the gap to {safe(gap['reference'])} (tau {_two(gap['reference_tau_macro'])}): "
                        f"{paired_figure(g)}", header_style="bold")
    for column in ("variant", "closes (delta tau)", "share of the gap [95% CI]"):
        table.add_column(column, justify="left" if column == "variant" else "right", no_wrap=column != "variant")
    labels, notes = short_labels([row["variant"] for row in gap["variants"]])
    for row in sorted(gap["variants"], key=lambda r: -(r["share"] or 0)):
        c, ci = row["closed"], row["share_ci"]
        share = "-" if row["share"] is None else f"{100 * row['share']:.0f}%" + (
            f" [{100 * ci[0]:.0f}%, {100 * ci[1]:.0f}%]" if ci else "")
        style = "bold green" if row["significant"] and (row["share"] or 0) > 0 else ""
        closed = "-" if c is None else f"{c['estimate']:+.2f}" + (
            "" if Delta(0, 0, 0, 1, c["n"]).too_few else f" [{c['low']:.2f}, {c['high']:.2f}]")
        cells = [safe(labels[row["variant"]]), closed, share]
        table.add_row(*([f"[{style}]{x}[/]" for x in cells] if style else cells))
    console.print(table)
    for note in notes:
        console.print(safe(note))
    if context:
        console.print(safe(f"paired prompts of this table ({gap['paired_prompts']} of {g.get('total')}): "
                           + (", ".join(gap.get("prompt_ids") or []) or "none")
                           + "; the table above is over every prompt (--no-context-variants skips these variants "
                             "and their target passes)"))
    console.print(safe(gap["paragraph"]))
