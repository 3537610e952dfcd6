"""Rich rendering for the terminal. Pure presentation: takes library results, prints tables."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from ..inspection import Inspection
from ..safe_text import printable, safe


def _yes(ok: bool) -> str:
    return "[green]ok[/]" if ok else "[bold red]FAIL[/]"


def render_inspection(console: Console, result: Inspection) -> None:
    spec = result.spec
    table = Table(title=f"DFlash drafter: {safe(spec.path)}", show_header=True, header_style="bold")
    table.add_column("field")
    table.add_column("value", overflow="fold")

    def row(field: str, value: str) -> None:  # every value may quote the checkpoint's config: escaped
        table.add_row(safe(field), safe(value))

    row("format", spec.format)
    row("target", result.target_note)
    row("taps (output of layer t, z-lab ids)", str(list(spec.taps)))
    row("taps (speculators/vLLM ids = t+1)", str(list(spec.speculators_taps)))
    row("taps (HF output_hidden_states index)", str([t + 1 for t in spec.taps]) + "  (last layer: raw pre-norm output, not HF's last entry)")
    row("fc input width", f"{spec.fc_in_features} = {len(spec.taps)} taps x {spec.target_hidden_size}")
    row("block size B", f"{spec.block_size} (anchor + {spec.block_size - 1} drafted slots)")
    mask = f"{spec.mask_token_id}" + (f"  {result.mask_token_text!r}" if result.mask_token_text is not None else "  (token text: needs a target tokenizer)")
    row("mask token id", mask)
    row("drafter layers", f"{spec.num_layers} x hidden {spec.hidden_size}, heads {spec.num_attention_heads}/{spec.num_key_value_heads} kv, head_dim {spec.head_dim}")
    from ..semantics import RULE_SOURCES, SCALE_SOURCE, describe

    row("rules (semantics)", f"{spec.semantics}: {spec.semantics_source}")
    row("rules follow", RULE_SOURCES.get(spec.semantics, spec.semantics))
    for layer in describe(spec):
        row(f"  layer {layer['layer']}", f"{layer['kind']} attention, {layer['window']}, {layer['in_block']} in block")
    row("in-block causality from", spec.causality_source)
    row("context mask", "p < anchor (strict: the anchor's hidden state is never context)")
    scales = [f"input_embedding_scale {spec.embedding_scale:g}", f"output_multiplier {spec.output_multiplier:g}",
              "final_logit_softcapping " + (f"{spec.logit_softcap:g}" if spec.logit_softcap else "off")]
    declared = {k: v for k, v in vars(spec.scales).items() if v is not None}
    row("scales applied", ", ".join(scales) + (f"  (declared {declared}; {SCALE_SOURCE})" if declared else ""))
    for note in spec.config_notes:
        row("config note", note)
    row("RoPE", ", ".join(f"{k}={v}" for k, v in spec.rope.items()))
    row("embedding", f"{spec.embedding_source}'s table")
    row("lm_head", f"{spec.lm_head_source}'s" + (f", reduced draft vocab {spec.draft_vocab_size} via d2t" if spec.has_d2t else ""))
    if spec.verifier:
        row("recorded verifier", spec.verifier)
    params = result.parameters
    row("parameters", f"{params['body']:,} body" + "".join(
        f" + {params[k]:,} {k}" for k in ("embedding", "lm_head") if params[k]))
    console.print(table)

    checks = Table(title="Validation", header_style="bold")
    checks.add_column("check")
    checks.add_column("result")
    checks.add_column("detail", overflow="fold")
    for check in result.checks:
        checks.add_row(safe(check.name), _yes(check.ok), safe(check.detail))
    console.print(checks)


def _fmt(value, digits: int = 3) -> str:
    return "" if value is None else f"{value:.{digits}f}"


SPARK = " ▁▂▃▄▅▆▇█"


def sparkline(counts: list[int]) -> str:
    top = max(counts) if counts else 0
    return "".join(SPARK[round(8 * c / top)] if top else " " for c in counts)


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


def block_text(block) -> tuple["Text", "Text"]:
    """Two aligned lines: the draft (accepted green, first rejected red, later dim) and the target."""
    from rich.text import Text

    from ..samples import visible

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


def render_blocks(console: Console, blocks, *, title: str | None = None) -> None:
    """Decoded blocks along the walk: token boundaries (│) and whitespace (· ↵ →) made visible."""
    from rich.text import Text

    from ..samples import visible

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
    from ..samples import select_blocks

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
    from ..references import published_comparison

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
        table.add_row(f"tau estimate {kind}", _fmt(a[f"tau_{kind}"], 3), _fmt(b[f"tau_{kind}"], 3),
                      f"{_signed(d['estimate'])} [{_signed(d['low'])}, {_signed(d['high'])}]", f"{d['p_value']:.3g}")
    console.print(table)
    console.print("alpha per slot, B - A: " + " ".join(_signed(x, 2) or "-" for x in result["delta_alpha"]))


def render_diff(console: Console, result: dict) -> None:
    """Verdict first, then the deltas with intervals, per slot, histogram, and where it changed."""
    from ..samples import BlockView

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
        table.add_row(f"tau {kind}", _fmt(a[f"tau_{kind}"]), _fmt(b[f"tau_{kind}"]),
                      f"{_signed(d['estimate'])} [{_fmt(d['low'])}, {_fmt(d['high'])}]", f"{d['p_value']:.3g}")
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
                for label, block in zip("AB", example["blocks"]):
                    view = BlockView(**{**block, "draft": tuple(block["draft"]), "target": tuple(block["target"]),
                                        "flags": tuple(block.get("flags", ()))})
                    draft, target = block_text(view)
                    console.print(f"  {label} draft  │", draft, f" (accepted {safe(view.accepted)})", sep="")
                console.print("  target   │", target, sep="")


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
