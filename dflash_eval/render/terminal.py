"""Rich rendering for the terminal. Pure presentation: takes library results, prints tables."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from ..core.safe_text import printable, safe


SPARK = " ▁▂▃▄▅▆▇█"


def _fmt(value, digits: int = 3) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def sparkline(counts: list[int]) -> str:
    top = max(counts) if counts else 0
    return "".join(SPARK[round(8 * c / top)] if top else " " for c in counts)


def block_text(block) -> tuple["Text", "Text"]:
    """Two aligned lines: the draft (accepted green, first rejected red, later dim) and the target."""
    from rich.text import Text

    from ..core.samples import visible

    draft, target = Text(), Text()
    rejected = block.first_rejected
    for i, piece in enumerate(block.draft):
        shown = visible(piece)
        ref = visible(block.target[i]) if i < len(block.target) else ""
        width = max(len(shown), len(ref))
        style = ("green" if i < block.accepted else "bold white on red" if i == rejected else "dim")
        draft.append(shown.ljust(width), style=style)
        draft.append("│", style="dim")
        target.append(ref.ljust(width), style="cyan" if i < block.accepted else "")
        target.append("│", style="dim")
    return draft, target


def render_run_summary(console: Console, run: dict) -> None:
    """The end-of-run table: tau macro/micro with interval, steps, histogram, per-slot reach."""
    prov = run["provenance"]
    title = (f"{safe(prov['target']['name'])} | {safe(prov['prompts']['count'])} prompts | max_new_tokens "
             f"{safe(prov['max_new_tokens'])} | thinking {'on' if prov['enable_thinking'] else 'off'}"
             + (" (family default)" if str(prov.get("thinking_source", "")).startswith("family") else "")
             + f" | {safe(prov['mode'])}")
    table = Table(title=title, header_style="bold")
    table.add_column("drafter")
    table.add_column("tau macro [95% CI]\n(z-lab: mean of\nper-prompt means)", justify="right")
    table.add_column("tau micro\n(vLLM: 1 + accepted\n/ steps)", justify="right")
    table.add_column("steps", justify="right")
    table.add_column("histogram of n\n(0 .. B-1)")
    table.add_column("reach r_i, i = 1..B-1\n(share of steps reaching slot i)")
    best = max((d["metrics"]["tau_macro"] or 0) for d in run["drafters"]) if run["drafters"] else 0
    for d in run["drafters"]:
        m = d["metrics"]
        ci = m["tau_macro_ci"]
        tau = (f"{_fmt(m['tau_macro'], 2)} [{_fmt(ci[0], 2)}, {_fmt(ci[1], 2)}]" if ci
               else safe(f"{_fmt(m['tau_macro'], 2)} {m.get('tau_macro_ci_note') or ''}".strip()) or "-")
        if m["tau_macro"] is not None and m["tau_macro"] == best and len(run["drafters"]) > 1:
            tau = f"[bold green]{tau}[/]"
        table.add_row(safe(d["name"]), tau, _fmt(m["tau_micro"], 2), safe(m["steps"]), sparkline(m["histogram"]),
                      " ".join(_fmt(r, 2) for r in m["reach"]))
    console.print(table)
    sc = prov["self_consistency"]
    if sc["total"]:
        console.print(f"self-consistency: {safe(sc['agree'])}/{safe(sc['total'])} continuation tokens equal the full-forward "
                      f"argmax ({100 * sc['agree'] / sc['total']:.2f}%)")
    for warning in prov.get("warnings", []):
        console.print(f"[yellow]warning:[/] {safe(warning)}")


def render_blocks(console: Console, blocks, *, title: str | None = None) -> None:
    """Decoded blocks along the walk: token boundaries (│) and whitespace (· ↵ →) made visible."""
    from rich.text import Text

    from ..core.samples import visible

    if title:
        console.print(f"[bold]{safe(title)}[/]")
    if not blocks:
        console.print("(no blocks match)")
    for block in blocks:
        scored = min(len(block.draft), len(block.target))
        header = Text.assemble((printable(block.prompt_id), "bold"), printable(f" · {block.drafter} · step {block.step} · anchor @{block.anchor_pos} "),
                               (visible(block.anchor), "bold cyan"), printable(f" · accepted {block.accepted}/{scored}"))
        if block.flags:
            header.append(f"  ⚠ repetition: {printable(', '.join(block.flags))}", style="bold yellow")
        draft, target = block_text(block)
        console.print(header)
        console.print(Text("  draft  │", style="dim") + draft)
        console.print(Text("  target │", style="dim") + target)


SAMPLE_LEGEND = ("draft tokens: [green]accepted[/], [bold white on red]first rejected[/], [dim]not reached[/]; "
                 "target row: the target's tokens at the same slots; │ token boundary, · space, ↵ newline, → tab")


LEGEND = (
    ("tau macro", "mean over prompts of each prompt's mean accepted length incl. the bonus token (1..B); "
                  "z-lab's published numbers; [95% CI] = bootstrap over prompts"),
    ("tau micro", "all committed tokens / all steps = 1 + accepted / steps; vLLM's mean acceptance length"),
    ("steps", "speculative-decoding steps of the greedy walk (one target verify each)"),
    ("histogram", "distribution of the accepted length n = 0..B-1 over steps"),
    ("reach r_i", "share of steps whose accepted prefix reaches slot i; vLLM per-position acceptance and "
                  "speculators acceptance_at_pos_i; sum over i = tau micro - 1"),
    ("cond c_i", "r_i / r_(i-1): given slot i-1 was accepted, chance slot i is too (EAGLE style)"),
    ("marg m_i", "share of ALL anchors whose slot i draft is right, regardless of earlier slots (teacher "
                 "forced, speculators' training metric); high m_i with low r_i = errors early in the block"),
    ("flagged blocks", "walk blocks whose draft repeats a token, a short loop, bigrams, or the previous draft "
                       "clearly more than the target's own text at those slots (repetition.py)"),
    ("flagged prompts", "prompts with >= 25% of their blocks flagged; the last column recomputes tau macro "
                        "without them"),
)


def render_per_position(console: Console, run: dict) -> None:
    """Slots as rows, drafters side by side; best value per slot and metric in bold green."""
    drafters = run["drafters"]
    width = max((len(d["metrics"]["reach"]) for d in drafters), default=0)
    table = Table(title="Per position (slot i = i-th drafted token)", header_style="bold")
    table.add_column("slot", justify="right")
    keys = (("reach", "reach r_i"), ("conditional", "cond c_i"), ("marginal", "marg m_i"))
    for d in drafters:
        for _, label in keys:
            table.add_column(f"{safe(d['name'])}\n{label}", justify="right")
    for i in range(width):
        cells = []
        best = {}
        for key, _ in keys:
            values = [d["metrics"][key][i] for d in drafters if i < len(d["metrics"][key]) and d["metrics"][key][i] is not None]
            best[key] = max(values) if values else None
        for d in drafters:
            for key, _ in keys:
                series = d["metrics"][key]
                value = series[i] if i < len(series) else None
                text = _fmt(value)
                if value is not None and len(drafters) > 1 and value == best[key]:
                    text = f"[bold green]{text}[/]"
                fractions = (d["metrics"].get("slot_counts") or {}).get(key) or []
                if value is not None and i < len(fractions):
                    text += f" [dim]({safe(fractions[i][0])}/{safe(fractions[i][1])})[/]"
                cells.append(text)
        table.add_row(str(i + 1), *cells)
    console.print(table)


def render_legend(console: Console) -> None:
    table = Table(title="Legend", show_header=False, box=None, padding=(0, 1))
    table.add_column(style="bold")
    table.add_column()
    for name, meaning in LEGEND:
        table.add_row(name, meaning)
    console.print(table)


def render_report(console: Console, run: dict, rows: list[dict], *, samples_per_drafter: int = 2) -> None:
    """The whole terminal report: summary, per-position table, repetition, a few blocks, legend."""
    from ..core.samples import select_blocks

    if run["provenance"].get("estimate"):
        render_estimate_report(console, run)
        return
    render_run_summary(console, run)
    render_per_position(console, run)
    if any("repetition" in d for d in run["drafters"]):
        render_repetition(console, run)
    for d in run["drafters"]:
        blocks = select_blocks(rows, drafter=d["name"], worst=samples_per_drafter)
        render_blocks(console, blocks, title=f"Worst blocks of {d['name']} (shortest accepted prefix)")
    console.print(SAMPLE_LEGEND)
    render_legend(console)


def render_estimate_report(console: Console, run: dict) -> None:
    """Temperature > 0, offline: the estimate per drafter, labelled as one, with its definition."""
    prov = run["provenance"]
    sampling = prov.get("sampling") or {}
    console.print(f"[bold]ESTIMATE[/] at temperature {sampling.get('temperature')} (top-p {sampling.get('top_p')}, "
                  f"top-k {sampling.get('top_k')}), {sampling.get('samples')} sampled continuations per prompt, "
                  f"{safe(prov['prompts']['count'])} prompts; not the live loop's count (--mode live runs it)")
    table = Table(title="Estimated acceptance (teacher-forced on sampled text)", header_style="bold")
    for column in ("drafter", "draft policy", "tau estimate macro [95% CI]", "tau estimate micro",
                   "E\\[tau] per anchor", "alpha per slot", "alpha 1..3", "expected reach 1..3"):
        table.add_column(column, justify="left" if column in ("drafter", "draft policy", "alpha per slot") else "right")
    for d in run["drafters"]:
        m = d["metrics"]
        ci = m.get("tau_macro_ci")
        alpha = [a for a in m["alpha"] if a is not None]
        table.add_row(safe(d["name"]), safe(d.get("draft_policy", "")),
                      f"{_fmt(m['tau_macro'], 2) or '-'} " + (f"[{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "(n/a)"),
                      _fmt(m["tau_micro"], 2) or "-", _fmt(m["tau_per_anchor"], 2) or "-",
                      sparkline([round(100 * a) for a in alpha]),
                      " ".join(_fmt(a, 2) or "-" for a in m["alpha"][:3]),
                      " ".join(_fmt(r, 2) or "-" for r in m["expected_reach"][:3]))
    console.print(table)
    if run["drafters"]:
        console.print(safe("definition: " + run["drafters"][0]["metrics"]["definition"]))
    from ..formats.references import published_comparison

    for line in published_comparison(prov, [(d.get("spec") or {}).get("block_size", 0) for d in run["drafters"]]):
        console.print(safe(line))


def render_repetition(console: Console, run: dict) -> None:
    """Degenerate drafts: how often, where in the block, and what they cost."""
    table = Table(title="Repetition (each block judged against the target's own tokens at those slots)",
                  header_style="bold")
    table.add_column("drafter")
    table.add_column("flagged blocks", justify="right")
    table.add_column("by detector")
    table.add_column("flagged share by slot")
    table.add_column("mean n inside /\noutside flagged", justify="right")
    table.add_column("flagged\nprompts", justify="right")
    table.add_column("tau macro without\nflagged prompts", justify="right")
    for d in run["drafters"]:
        rep = d.get("repetition")
        if not rep:
            table.add_row(safe(d["name"]), "-", "", "", "", "", "")
            continue
        share = rep["flagged_share"] or 0.0
        style = "bold red" if share >= 0.25 else "yellow" if share >= 0.05 else ""
        detectors = safe(", ".join(f"{k} {v}" for k, v in rep["flagged_by_detector"].items() if v) or "none")
        blocks = safe(f"{rep['flagged_blocks']}/{rep['blocks']} ({100 * share:.1f}%)")
        table.add_row(safe(d["name"]), f"[{style}]{blocks}[/]" if style else blocks, detectors,
                      sparkline([round(100 * x) for x in rep["flagged_share_by_slot"]]),
                      f"{_fmt(rep['accepted_inside_flagged'], 2) or '-'} / {_fmt(rep['accepted_outside_flagged'], 2) or '-'}",
                      safe(len(rep["flagged_prompts"])), _fmt(rep["tau_macro_without_flagged_prompts"], 2) or "-")
    console.print(table)


def render_doctor(console: Console, result: dict) -> None:
    table = Table(title=f"doctor: {safe(result['drafter'])} on {result['prompts']} prompts (one target pass each for "
                        "all these variants; delta = variant - as configured, paired over prompts)", header_style="bold")
    for column in ("variant", "tau macro", "delta [95% CI]", "p", "drafts unchanged"):
        table.add_column(column, justify="left" if column == "variant" else "right")
    for row in result["variants"]:
        d = row.get("delta")
        if d is None:
            table.add_row(f"[bold]{row['variant']}[/]", _fmt(row["tau_macro"], 2), "", "", "")
            continue
        style = "bold green" if d["low"] > 0 and d["p_value"] < 0.05 else ""
        delta = f"{d['estimate']:+.2f} [{d['low']:.2f}, {d['high']:.2f}]"
        table.add_row(row["variant"], _fmt(row["tau_macro"], 2), f"[{style}]{delta}[/]" if style else delta,
                      f"{d['p_value']:.3g}", f"{100 * row['identical_drafts']:.0f}%" if row["identical_drafts"] is not None else "")
    console.print(table)
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
                      f"target passes): tau {_fmt(context['tau_macro'], 2)}, delta {d['estimate']:+.2f} "
                      f"[{d['low']:.2f}, {d['high']:.2f}], p = {d['p_value']:.3g}")
    for name, table_check in (result.get("tables") or {}).items():
        if table_check.get("compared"):
            mark = "[green]ok[/]" if table_check.get("equal") else "[bold red]DIFFERS[/]"
            console.print(f"checkpoint's {name} copy vs the target's: {mark} ({safe(table_check['detail'])})")
    lens = result.get("logit_lens")
    if lens:
        console.print("drafts agreeing with each layer's logit lens: " + ", ".join(
            f"layer {safe(k)} {100 * v:.1f}%" for k, v in lens["agreement"].items()))
    console.print(f"[bold]verdict: {safe(result['verdict'])}[/]")
    gap = result.get("gap")
    if gap:
        g = gap["gap"]
        table = Table(title=f"the gap to {safe(gap['reference'])} (tau {_fmt(gap['reference_tau_macro'], 2)}): "
                            f"{g['estimate']:+.2f} [{g['low']:.2f}, {g['high']:.2f}], p = {g['p_value']:.3g}",
                      header_style="bold")
        for column in ("variant", "closes (delta tau)", "share of the gap [95% CI]"):
            table.add_column(column, justify="left" if column == "variant" else "right")
        for row in sorted(gap["variants"], key=lambda r: -(r["share"] or 0)):
            c, ci = row["closed"], row["share_ci"]
            share = "-" if row["share"] is None else f"{100 * row['share']:.0f}%" + (
                f" [{100 * ci[0]:.0f}%, {100 * ci[1]:.0f}%]" if ci else "")
            style = "bold green" if row["significant"] and (row["share"] or 0) > 0 else ""
            cells = [safe(row["variant"]), f"{c['estimate']:+.2f} [{c['low']:.2f}, {c['high']:.2f}]", share]
            table.add_row(*([f"[{style}]{x}[/]" for x in cells] if style else cells))
        console.print(table)
        console.print(safe(gap["paragraph"]))
