"""Rich rendering for the terminal. Pure presentation: takes library results, prints tables."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from rich.text import Text

from ..core.documents.run_document import RunDocument
from ..core.safe_text import printable, safe

SPARK = " ▁▂▃▄▅▆▇█"


def fixed_digits(value, digits: int = 3) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def sparkline(counts: list[int]) -> str:
    """One bar per value, scaled to the largest; a small non-zero value still draws the lowest bar (blank is
    only ever zero)."""
    top = max(counts) if counts else 0
    return "".join(SPARK[max(1, round(8 * c / top)) if c > 0 else 0] if top else " " for c in counts)


def natural_width(console: Console, table: Table) -> int:
    """The width `table` takes with no cell wrapped (what it needs to print as designed)."""
    from rich.measure import Measurement

    return Measurement.get(console, console.options.update(max_width=10_000), table).maximum


def drafter_column(table: Table, names: list[str], header: str = "drafter") -> None:
    """The drafter column: never narrower than the longest name (up to 40), so no name is cut to `demo-…`;
    a longer one folds onto a second line rather than losing its end."""
    table.add_column(header, min_width=min(40, max([len(n) for n in names] + [len(header)])), overflow="fold")


def letters(names: list[str]) -> tuple[list[str], str]:
    """Short column labels A, B, ... for drafters side by side in a narrow table, and the key naming each."""
    labels = [chr(ord("A") + i) if i < 26 else f"D{i + 1}" for i in range(len(names))]
    return labels, "drafters: " + ", ".join(f"{label} = {safe(name)}" for label, name in zip(labels, names))


def block_text(block, widths: list[int] | None = None) -> tuple["Text", "Text"]:
    """Two aligned lines: the draft (accepted green, first rejected red, later dim) and the target; `widths`
    (cells per slot) aligns them with other blocks over the same slots too (diff's A and B)."""
    from rich.text import Text

    from ..core.samples import visible

    draft, target = Text(), Text()
    rejected = block.first_rejected
    for i, piece in enumerate(block.draft):
        shown = visible(piece)
        ref = visible(block.target[i]) if i < len(block.target) else ""
        width = max(len(shown), len(ref), widths[i] if widths and i < len(widths) else 0)
        style = ("green" if i < block.accepted else "bold white on red" if i == rejected else "dim")
        draft.append(shown.ljust(width), style=style)
        draft.append("│", style="dim")
        target.append(ref.ljust(width), style="cyan" if i < block.accepted else "")
        target.append("│", style="dim")
    return draft, target


def render_run_summary(console: Console, run: RunDocument) -> None:
    """The end-of-run table: tau macro/micro with interval, steps, histogram, per-slot reach."""
    prov = run["provenance"]
    title = (f"{safe(prov['target']['name'])} | {safe(prov['prompts']['count'])} prompts | max_new_tokens "
             f"{safe(prov['max_new_tokens'])} | thinking {'on' if prov['enable_thinking'] else 'off'}"
             + (" (family default)" if str(prov.get("thinking_source", "")).startswith("family") else "")
             + f" | {safe(prov['mode'])}")
    for headers in (SUMMARY_HEADERS, SUMMARY_SHORT, SUMMARY_NARROW):  # the explained headers when they fit,
        table = _summary_table(run, title, headers)  # else short ones (the legend explains each)
        if natural_width(console, table) <= console.width:
            break
    console.print(table)
    sc = prov["self_consistency"]
    if prov.get("responses_agreement"):  # --responses: how greedy the given continuations are, not a check
        ra = prov["responses_agreement"]
        console.print("responses vs the target's greedy choice: " + (  # a share of nothing is not 0.00%
            f"{safe(ra['agree'])}/{safe(ra['total'])} tokens of the given responses equal the target's argmax "
            f"({100 * ra['agree'] / ra['total']:.2f}%)" if ra["total"] else "no response tokens to compare"))
    elif sc["total"]:
        console.print(f"self-consistency: {safe(sc['agree'])}/{safe(sc['total'])} continuation tokens equal the full-forward "
                      f"argmax ({100 * sc['agree'] / sc['total']:.2f}%)")
    render_numerics(console, prov)
    from .live import render_live

    render_live(console, run)  # --mode live: tokens/s, ms per step, measured speedup
    for warning in prov.get("warnings", []):
        console.print(f"[yellow]warning:[/] {safe(warning)}")


def render_numerics(console: Console, prov: dict) -> None:
    """--numerics-check N: how far the results move with the GEMM shapes, counts as run.json holds them."""
    measured = (prov.get("numerics") or {}).get("measured")
    if not measured:
        return
    g = measured["generation"]
    console.print(f"numerics check ({safe(prov.get('dtype'))}, {safe(g['prompts'])} prompts): generated alone vs in "
                  f"its batch: {safe(g['prompts_identical'])}/{safe(g['prompts'])} prompts identical, "
                  f"{safe(g['tokens_before_first_difference'])}/{safe(g['tokens'])} tokens before the first difference")
    for name, a in measured["anchor_batch"].items():
        w = measured["live"].get(name, {})
        d = w.get("delta_tau_live_minus_replay")
        live = (f"tau replay {fixed_digits(w['tau_replay'], 3)} vs live {fixed_digits(w['tau_live'], 3)}, live - replay "
                f"{d['estimate']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}] (paired bootstrap, {safe(d['n'])} prompts)"
                if d else "tau replay vs live: no prompt with steps on both")
        console.print(f"  {safe(name)}: drafts changed at --anchor-batch {safe(a['other'])} vs {safe(a['run'])}: "
                      f"{safe(a['drafts_changed'])}/{safe(a['drafts'])}; {live}; live text = continuation "
                      f"{safe(w.get('texts_equal'))}/{safe(w.get('prompts'))}")


SUMMARY_HEADERS = ("tau macro [95% CI]\n(z-lab: mean of\nper-prompt means)", "tau micro\n(vLLM: 1 + accepted\n/ steps)",
                   "steps", "histogram of n\n(0 .. B-1)", "reach r_i, i = 1..B-1\n(share of steps reaching slot i)")
SUMMARY_SHORT = ("tau macro\n[95% CI]", "tau\nmicro", "steps", "hist n", "reach r_1..r_B-1")
SUMMARY_NARROW = SUMMARY_SHORT[:4]  # reach per slot is in the per-position table below


def _summary_table(run: RunDocument, title: str, headers: tuple[str, ...]) -> Table:
    table = Table(title=title, header_style="bold")
    drafter_column(table, [d["name"] for d in run["drafters"]])
    for header, justify in zip(headers, ("right", "right", "right", "left", "left")):
        # the explained layout keeps reach on one line; the short one lets it wrap within 20 columns
        table.add_column(header, justify=justify, max_width=20 if header == SUMMARY_SHORT[4] else None)
    if len(headers) < 5:
        table.caption = "reach per slot: the per-position table"
    best = max((d["metrics"]["tau_macro"] or 0) for d in run["drafters"]) if run["drafters"] else 0
    for d in run["drafters"]:
        m = d["metrics"]
        ci = m["tau_macro_ci"]
        tau = (f"{fixed_digits(m['tau_macro'], 2)} [{fixed_digits(ci[0], 2)}, {fixed_digits(ci[1], 2)}]" if ci
               else safe(f"{fixed_digits(m['tau_macro'], 2)} {m.get('tau_macro_ci_note') or ''}".strip()) or "-")
        if m["tau_macro"] is not None and m["tau_macro"] == best and len(run["drafters"]) > 1:
            tau = f"[bold green]{tau}[/]"
        table.add_row(*[safe(d["name"]), tau, fixed_digits(m["tau_micro"], 2), safe(m["steps"]), sparkline(m["histogram"]),
                        " ".join(fixed_digits(r, 2) for r in m["reach"])][:1 + len(headers)])
    return table


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


ESTIMATE_PER_ANCHOR = ("1 + the sum over slots of the expected reach, averaged over every position of the sampled "
                       "continuations taken as an anchor (not only where a walk would stop): the expected tokens one "
                       "step commits when it starts at a random position")


def render_per_position(console: Console, run: RunDocument) -> None:
    """Slots as rows, drafters side by side; best value per slot and metric in bold green. When the drafters'
    names do not fit as column headers they become letters with a key above the table; when the counts
    beside each value do not fit on its line they go under it in every cell (never some cells one way and
    some the other), and when even that does not fit they are left out (per_position.csv has them)."""
    names = [d["name"] for d in run["drafters"]]
    short, key = letters(names)
    layouts = [(names, " "), (short, " "), (short, "\n"), (short, None)] if len(names) > 1 else \
              [(names, " "), (names, "\n"), (names, None)]
    for labels, sep in layouts:
        table = _per_position_table(run, labels, sep)
        if natural_width(console, table) <= console.width:
            break
    if labels is short and len(names) > 1:
        console.print(key)
    console.print(table)
    if sep is None:
        console.print("[dim](counts behind each share: widen the terminal, or see per_position.csv)[/]")


def _na(run: RunDocument, key: str) -> str:
    """What an empty cell means: the marginal needs the teacher-forced replay, which the live loop has not."""
    return "n/a" if key == "marginal" and run["provenance"].get("mode") == "live" else "-"


def _per_position_table(run: RunDocument, labels: list[str], sep: str | None) -> Table:
    drafters = run["drafters"]
    width = max((len(d["metrics"]["reach"]) for d in drafters), default=0)
    table = Table(title="Per position (slot i = i-th drafted token)", header_style="bold")
    table.add_column("slot", justify="right")
    keys = (("reach", "reach r_i"), ("conditional", "cond c_i"), ("marginal", "marg m_i"))
    for label in labels:
        for _, metric in keys:
            table.add_column(f"{safe(label)}\n{metric}", justify="right", no_wrap=sep is not None)
    for i in range(width):
        cells = []
        best = {}
        for key, _ in keys:
            values = [d["metrics"][key][i] for d in drafters if i < len(d["metrics"][key] or []) and d["metrics"][key][i] is not None]
            best[key] = max(values) if values else None
        for d in drafters:
            for key, _ in keys:
                series = d["metrics"][key] or []
                value = series[i] if i < len(series) else None
                text = fixed_digits(value) if value is not None else _na(run, key)
                if value is not None and len(drafters) > 1 and value == best[key]:
                    text = f"[bold green]{text}[/]"
                fractions = (d["metrics"].get("slot_counts") or {}).get(key) or []
                if value is not None and i < len(fractions) and sep is not None:
                    text += f"{sep}[dim]({safe(fractions[i][0])}/{safe(fractions[i][1])})[/]"
                cells.append(text)
        table.add_row(str(i + 1), *cells)
    return table


def walk_words(provenance: dict | None) -> str:
    """What a step is in this run: the greedy walk (replay), the live loop, or the loop with sampling."""
    prov = provenance or {}
    temperature = prov.get("temperature") or 0
    if prov.get("mode") == "live":
        return (f"the live loop with rejection sampling at temperature {temperature:g}" if temperature > 0
                else "the live greedy loop")
    return f"the walk over sampled continuations (temperature {temperature:g})" if temperature > 0 else "the greedy walk"


def legend_for(run: RunDocument | None) -> list[tuple[str, str]]:
    """LEGEND in this run's words: steps of its own loop, the marginal n/a in live mode."""
    prov = (run or {}).get("provenance") or {}
    out = []
    for name, meaning in LEGEND:
        if name == "steps":
            meaning = f"speculative-decoding steps of {walk_words(prov)} (one target verify each)"
        if name == "marg m_i" and prov.get("mode") == "live":
            meaning += "; n/a in live mode (it needs the teacher-forced replay of every anchor)"
        out.append((name, meaning))
    return out


def render_legend(console: Console, run: RunDocument | None = None) -> None:
    table = Table(title="Legend", show_header=False, box=None, padding=(0, 1))
    table.add_column(style="bold")
    table.add_column()
    for name, meaning in legend_for(run):
        table.add_row(name, meaning)
    console.print(table)


def render_by_prompt_set(console: Console, run: RunDocument) -> None:
    """tau per drafter and prompt set (run.json's by_prompt_set), as the HTML report shows it."""
    entries = [(d["name"], s, m) for d in run["drafters"] for s, m in (d.get("by_prompt_set") or {}).items()]
    if not entries:
        return
    table = Table(title="By prompt set", header_style="bold")
    drafter_column(table, [d["name"] for d in run["drafters"]])
    for column in ("prompt set", "tau macro [95% CI]", "tau micro", "steps"):
        table.add_column(column, justify="left" if column == "prompt set" else "right")
    for name, prompt_set, m in entries:
        ci = m.get("tau_macro_ci")
        tau = fixed_digits(m.get("tau_macro"), 2) or "-"
        tau += f" [{fixed_digits(ci[0], 2)}, {fixed_digits(ci[1], 2)}]" if ci else (f" {safe(m['tau_macro_ci_note'])}" if m.get("tau_macro_ci_note") else "")
        table.add_row(safe(name), safe(prompt_set), tau, fixed_digits(m.get("tau_micro"), 2) or "-", safe(m.get("steps", "-")))
    console.print(table)


def render_report(console: Console, run: RunDocument, rows: list[dict], *, samples_per_drafter: int = 2,
                  run_dir: str | None = None, program: tuple[str, ...] | None = None) -> None:
    """The whole terminal report: the verdict block first (core/verdict.py; `run_dir` as the user names the
    folder and `program` as this shell calls dflash-eval, for the next commands), summary, the gap's
    explanation, per-position table, repetition, a few blocks, legend."""
    from ..core.samples import select_blocks
    from ..core.verdict import verdict_block
    from ..formats.published import bands_for
    from .terminal_verdict import render_explanation, render_verdict

    render_verdict(console, verdict_block(run, run_dir, *([tuple(program)] if program else []), bands=bands_for(run)))
    if run["provenance"].get("estimate"):
        render_estimate_report(console, run)
        return
    render_run_summary(console, run)
    render_by_prompt_set(console, run)
    render_explanation(console, run)  # `run --reference`: doctor's variants on the run's trajectories
    from .serving_target import render_serving_target

    render_serving_target(console, run.get("serving_target"))  # --serving-target: the drop, split
    render_paper_comparison(console, run)  # the paper's tau beside these, when its table has target and set
    render_per_position(console, run)
    from .draft_lengths import render_draft_lengths

    render_draft_lengths(console, run)  # --draft-lengths and the expected speedup, when the run has them
    from .tree import render_trees

    render_trees(console, run)  # --tree-budgets: tau per budget beside the chain (render/tree.py)
    from .breakdown import render_breakdown

    render_breakdown(console, run)  # where acceptance is lost: by depth, segment, token class
    if any("repetition" in d for d in run["drafters"]):
        render_repetition(console, run)
    for d in run["drafters"]:
        blocks = select_blocks(rows, drafter=d["name"], worst=samples_per_drafter)
        render_blocks(console, blocks, title=f"Worst blocks of {d['name']} (shortest accepted prefix)")
    console.print(SAMPLE_LEGEND)
    render_legend(console, run)


def render_estimate_report(console: Console, run: RunDocument) -> None:
    """Temperature > 0, offline: the estimate per drafter, labelled as one, with its definition."""
    prov = run["provenance"]
    sampling = prov.get("sampling") or {}
    console.print(f"[bold]ESTIMATE[/] at temperature {sampling.get('temperature')} (top-p {sampling.get('top_p')}, "
                  f"top-k {sampling.get('top_k')}), {sampling.get('samples')} sampled continuations per prompt, "
                  f"{safe(prov['prompts']['count'])} prompts; not the live loop's count (--mode live runs it)")
    for headers in (ESTIMATE_HEADERS, ESTIMATE_SHORT, ESTIMATE_NARROW):  # explained headers when they fit, else short
        table = _estimate_table(run, headers)
        if natural_width(console, table) <= console.width:
            break
    console.print(table)
    if run["drafters"]:
        console.print(safe("definition: " + run["drafters"][0]["metrics"]["definition"]))
        console.print(f"E\\[tau] per anchor: {ESTIMATE_PER_ANCHOR}")
    render_paper_comparison(console, run)


ESTIMATE_HEADERS = ("draft policy", "tau estimate macro [95% CI]", "tau estimate micro", "E\\[tau] per anchor",
                    "alpha per slot", "alpha 1..3", "expected reach 1..3")
ESTIMATE_SHORT = ("policy", "tau est.\nmacro", "tau est.\nmicro", "E\\[tau]\n/anchor", "alpha", "alpha\n1..3",
                  "reach\n1..3")
ESTIMATE_NARROW = ESTIMATE_SHORT[:5]  # alpha and reach per slot: per_position.csv, report --json


def _estimate_table(run: RunDocument, headers: tuple[str, ...]) -> Table:
    """The estimate's table; the drafter column never narrower than the longest name (`drafter_column`): at 100
    columns two 20-character names used to print as `drafter_…`."""
    table = Table(title="Estimated acceptance (teacher-forced on sampled text)", header_style="bold")
    drafter_column(table, [d["name"] for d in run["drafters"]])
    for i, column in enumerate(headers):
        table.add_column(column, justify="left" if i in (0, 4) else "right")
    if len(headers) < len(ESTIMATE_HEADERS):
        table.caption = "alpha and reach per slot: per_position.csv, report --json"
    for d in run["drafters"]:
        m = d["metrics"]
        ci = m.get("tau_macro_ci")
        alpha = [a for a in m["alpha"] if a is not None]
        table.add_row(*[safe(d["name"]), safe(d.get("draft_policy", "")),
                        f"{fixed_digits(m['tau_macro'], 2) or '-'} " + (f"[{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "(n/a)"),
                        fixed_digits(m["tau_micro"], 2) or "-", fixed_digits(m["tau_per_anchor"], 2) or "-",
                        sparkline([round(100 * a) for a in alpha]),
                        " ".join(fixed_digits(a, 2) or "-" for a in m["alpha"][:3]),
                        " ".join(fixed_digits(r, 2) or "-" for r in m["expected_reach"][:3])][:1 + len(headers)])
    return table


def render_paper_comparison(console: Console, run: RunDocument) -> None:
    """The DFlash paper's tau for each prompt set of the run it has, and the settings that differ."""
    from ..formats.references import published_comparison

    for line in published_comparison(run["provenance"], [(d.get("spec") or {}).get("block_size", 0)
                                                         for d in run["drafters"]]):
        console.print(safe(line))


REPETITION_HEADERS = ("flagged blocks", "by detector", "flagged share by slot", "mean n inside /\noutside flagged",
                      "flagged\nprompts", "tau macro without\nflagged prompts")
REPETITION_SHORT = ("flagged\nblocks", "by\ndetector", "by\nslot", "mean n\nin / out", "flagged\nprompts",
                    "tau w/o\nflagged")


def render_repetition(console: Console, run: RunDocument) -> None:
    """Degenerate drafts: how often, where in the block, and what they cost. A table when it fits (explained
    headers, else short ones), else one line per drafter: no name or number is ever cut."""
    title = "Repetition (each block judged against the target's own tokens at those slots)"
    rows = [(d["name"], _repetition_cells(d.get("repetition"))) for d in run["drafters"]]
    for headers in (REPETITION_HEADERS, REPETITION_SHORT):
        table = Table(title=title, header_style="bold")
        drafter_column(table, [name for name, _ in rows])
        for header in headers:
            table.add_column(header, justify="left" if "detector" in header or "slot" in header else "right")
        for name, cells in rows:
            table.add_row(safe(name), *cells)
        if natural_width(console, table) <= console.width:
            console.print(table)
            return
    console.print(f"[bold]{title}[/]")
    for name, cells in rows:
        if cells[0] == "-":
            console.print(f"{safe(name)}: not recorded")
            continue
        console.print(f"{safe(name)}: {cells[0]} blocks flagged ({cells[1]}); by slot {cells[2]}; mean n {cells[3]} "
                      f"inside / outside flagged; {cells[4]} flagged prompts; tau macro without them {cells[5]}")


def _repetition_cells(rep: dict | None) -> list[str]:
    if not rep:
        return ["-", "", "", "", "", ""]
    share = rep["flagged_share"] or 0.0
    style = "bold red" if share >= 0.25 else "yellow" if share >= 0.05 else ""
    detectors = safe(", ".join(f"{k} {v}" for k, v in rep["flagged_by_detector"].items() if v) or "none")
    blocks = safe(f"{rep['flagged_blocks']}/{rep['blocks']} ({100 * share:.1f}%)")
    return [f"[{style}]{blocks}[/]" if style else blocks, detectors,
            sparkline([round(100 * x) for x in rep["flagged_share_by_slot"]]),
            f"{fixed_digits(rep['accepted_inside_flagged'], 2) or '-'} / {fixed_digits(rep['accepted_outside_flagged'], 2) or '-'}",
            safe(len(rep["flagged_prompts"])), fixed_digits(rep["tau_macro_without_flagged_prompts"], 2) or "-"]
