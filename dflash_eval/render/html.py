"""HTML export of a run's report and of a diff: one self-contained file that opens anywhere, offline.

The file is what people attach to a discussion or a training log, so it must not depend on anything but
itself: no CDN script, web font, image or stylesheet is referenced, and a Content-Security-Policy meta tag
(`default-src 'none'`) makes the browser refuse any fetch that might still slip in. The page is built from
Jinja2 templates shipped in the package (`render/templates/`) with autoescaping on: every string from a run
(drafter and prompt names, paths, decoded tokens, warnings) is escaped by the template engine; no HTML is
assembled by string concatenation here. The only markup inserted unescaped (`|safe`) is chart SVG produced
by matplotlib, after `_clean_svg` has removed its XML prolog, DOCTYPE, metadata and comments.
The one inline script (sortable tables, pagination, jump-to-prompt) is a static file of the package; the CSP
allows exactly that script by its sha256, so even an escaping bug could not run an injected `<script>`.

Charts: matplotlib, rendered to inline SVG, rather than plotly.
- File size: a plotly chart needs plotly.js embedded (3.5 MB or more minified) to work offline, before any
  data; matplotlib's SVG of one chart is 30-100 KB (glyphs are defined once per chart and reused), so the
  report of a 164-prompt, 3-drafter, B = 16 run is about 1.8 MB (benchmarks/html_size.py), 80% of it the
  decoded samples, and a small run's is about 0.2 MB.
- Offline: SVG is plain markup in the page, drawn by the browser with no script at all; text is converted
  to paths (`svg.fonttype = "path"`), so no font is referenced and the charts look identical everywhere,
  including in a mail client's or a code-review tool's preview that runs no JavaScript.
- Interactivity: plotly would add hover and zoom. What a reader needs exact values for is in sortable
  tables next to each chart (summary, per slot, per prompt, repetition), and the per-prompt table links to
  the decoded samples of each prompt. That trade is worth the 3.5 MB and the dependency on a script.
- Reproducible: dates are dropped from the SVG metadata and `svg.hashsalt` is fixed, so the same run gives
  the same file byte for byte.
Figures are built with `matplotlib.figure.Figure` directly (never pyplot): no GUI backend, no global state.

Samples stay readable on large runs: per drafter the worst `WORST_BLOCKS` blocks (as `samples.select_blocks`
picks them for the terminal), then one collapsed `<details>` per prompt with its first `PROMPT_BLOCKS`
blocks per drafter, paginated by the inline script (without script, everything is simply listed).
"""

from __future__ import annotations

import base64
import hashlib
import io
import math
import os
import re
import shlex
from functools import lru_cache
from pathlib import Path
from typing import Any

from .. import references
from ..samples import BlockView, select_blocks, visible, walk_blocks
from .terminal import LEGEND, SAMPLE_LEGEND

WORST_BLOCKS = 20  # worst blocks shown per drafter
PROMPT_BLOCKS = 3  # first blocks per drafter in each prompt's collapsed section
PAGE_PROMPTS = 20  # prompts per page in the per-prompt samples
PAGE_ROWS = 25  # rows per page in the per-prompt table

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22", "#17becf")

EXTRA_LEGEND = (
    ("token acceptance rate", "accepted draft tokens / drafted tokens (bonus tokens excluded); vLLM's draft "
                              "acceptance rate"),
    ("per-prompt tau", "one prompt's committed tokens / steps; tau macro is their mean"),
    ("paper tau", "the DFlash paper's tau for this target and prompt set (z-lab drafter, B = 16, greedy, thinking "
                  "off), drawn as a dashed reference on the tau chart when known"),
    ("mean n inside / outside flagged", "mean accepted draft tokens per block, in flagged and in clean blocks"),
    ("delta B - A [95% CI]", "paired over prompts: bootstrap interval of the difference, permutation-test p"),
)


# ----------------------------------------------------------------------------------------------- templates

@lru_cache(maxsize=1)
def _env():
    from jinja2 import Environment, PackageLoader, StrictUndefined

    env = Environment(loader=PackageLoader("dflash_eval", "render/templates"), autoescape=True,
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["num"] = _num
    env.filters["signed"] = _signed
    env.filters["pct"] = _pct
    return env


def _num(value, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value:.{digits}f}"


def _signed(value, digits: int = 3) -> str:
    return "–" if value is None else f"{value:+.{digits}f}"


def _pct(value, digits: int = 1) -> str:
    return "–" if value is None else f"{100 * value:.{digits}f}%"


def _static(name: str) -> str:
    """A static template (the script): rendered exactly as `{% include %}` puts it into the page."""
    return _env().get_template(name).render()


def _csp() -> str:
    digest = base64.b64encode(hashlib.sha256(_static("report.js").encode()).digest()).decode()
    return (f"default-src 'none'; script-src 'sha256-{digest}'; style-src 'unsafe-inline'; img-src data:; "
            "font-src data:; base-uri 'none'; form-action 'none'")


def _page(template: str, **context) -> str:
    return _env().get_template(template).render(csp=_csp(), legend=_legend(), **context)


def _legend() -> list[tuple[str, str]]:
    return [*LEGEND, *EXTRA_LEGEND]


def _sample_legend() -> str:
    from rich.text import Text

    return Text.from_markup(SAMPLE_LEGEND).plain


def write_html(path: Path, html: str) -> Path:
    """Write beside, then rename (a crash never leaves half a report); creates missing parent folders."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(html, encoding="utf-8")
        tmp.replace(path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return path


# ------------------------------------------------------------------------------------------------- charts

_SVG_DROP = (re.compile(r"<\?xml.*?\?>", re.S), re.compile(r"<!DOCTYPE.*?>", re.S),
             re.compile(r"<metadata>.*?</metadata>", re.S), re.compile(r"<!--.*?-->", re.S),
             re.compile(r"<style[^>]*>.*?</style>", re.S), re.compile(r'\s+xmlns(:\w+)?="[^"]*"'),
             re.compile(r'\s+version="1\.1"'))
_SVG_IDS = re.compile(r'(\bid="|href="#|url\(#)([^")]+)')
_SVG_SIZE = re.compile(r'<svg\s+([^>]*?)width="([\d.]+)pt"\s+height="([\d.]+)pt"')
_CHART_IDS = {"tau": "t", "slots": "s", "hist": "h", "prompts": "p", "repetition": "r", "delta": "d",
              "dslots": "e", "dhist": "f", "curve": "c", "heat": "m", "trep": "q", "alpha": "g"}  # each chart once per page: its letter keeps its ids unique there


def _clean_svg(svg: str, name: str, prefix: str) -> str:
    """matplotlib's SVG made fit to inline: no prolog, DOCTYPE, metadata (it names matplotlib's web site),
    comments or global <style>; ids prefixed per chart so that several charts in one page never collide;
    unreferenced ids dropped; width/height turned into a responsive max-width."""
    for pattern in _SVG_DROP:
        svg = pattern.sub("", svg)
    referenced = set(re.findall(r'(?:href="#|url\(#)([^")]+)', svg))

    def rename(match: re.Match) -> str:
        head, ident = match.groups()
        if head == 'id="' and ident not in referenced and not ident.startswith("dfe-"):
            return 'data-x="'  # placeholder removed below
        return f"{head}{prefix}{ident}"

    svg = _SVG_IDS.sub(rename, svg)
    svg = re.sub(r'\s+data-x="[^"]*"', "", svg)
    svg = _SVG_SIZE.sub(lambda m: (f'<svg class="chart" role="img" aria-label="{name}" {m.group(1)}'
                                   f'style="max-width:{float(m.group(2)) * 4 / 3:.0f}px"'), svg, count=1)
    svg = re.sub(r"\n\s*", "\n", svg).strip()
    if re.search(r"<script|<foreignObject|\son\w+=|javascript:", svg, re.I):
        raise ValueError("refusing to inline an SVG with script content")  # cannot come from matplotlib
    return svg


def _figure(width: float, height: float, ncols: int = 1):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    axes = fig.subplots(1, ncols, squeeze=False)[0]
    for ax in axes:
        ax.grid(True, color="#e5e5e5", linewidth=0.6)
        ax.set_axisbelow(True)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
    return fig, axes


def _svg(fig, name: str) -> str:
    import matplotlib

    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "path", "svg.hashsalt": "dflash-eval", "svg.image_inline": True}):
        fig.savefig(buf, format="svg", metadata={"Date": None})
    return _clean_svg(buf.getvalue(), f"{name} chart", f"{_CHART_IDS[name]}-")


def _rc():
    import matplotlib

    return matplotlib.rc_context({"font.family": "DejaVu Sans", "font.size": 9, "text.parse_math": False,
                                  "axes.titlesize": 10, "legend.fontsize": 8, "legend.frameon": False})


def _label(text: str, limit: int = 40) -> str:
    """A name as a chart label: short, and never read as matplotlib's hidden-label convention."""
    text = text if len(text) <= limit else text[:limit - 1] + "…"
    return " " + text if text.startswith("_") else text


def _nan(values):
    return [math.nan if v is None else v for v in values]


def _tau_chart(bars: list[dict], groups: list[str], references_by_group: dict[str, float]) -> str:
    """tau macro per drafter (bars, 95% CI as error bars), per prompt set; the paper's tau as a dashed line."""
    with _rc():
        n = max(len(bars), 1)
        fig, (ax,) = _figure(max(4.5, 0.55 * n * len(groups) + 2.2), 3.2)
        width = 0.8 / n
        for k, bar in enumerate(bars):
            xs = [g + (k - (n - 1) / 2) * width for g in range(len(groups))]
            ys = [bar["tau"].get(group) for group in groups]
            lows = [y - bar["ci"][group][0] if y is not None and bar["ci"].get(group) else 0
                    for y, group in zip(ys, groups)]
            highs = [bar["ci"][group][1] - y if y is not None and bar["ci"].get(group) else 0
                     for y, group in zip(ys, groups)]
            ax.bar(xs, _nan(ys), width * 0.92, color=bar["color"], label=_label(bar["name"]),
                   yerr=[lows, highs], capsize=3, error_kw={"elinewidth": 0.9, "ecolor": "#333"})
        for g, group in enumerate(groups):
            tau = references_by_group.get(group)
            if tau is None:
                continue
            line = ax.hlines(tau, g - 0.45, g + 0.45, colors="black", linestyles="--", linewidth=1.2,
                             label="paper tau (DFlash)" if g == min(
                                 i for i, grp in enumerate(groups) if grp in references_by_group) else None)
            line.set_gid(f"dfe-paper-tau-{g}")
            ax.annotate(f"paper {tau:.2f}", (g + 0.45, tau), textcoords="offset points", xytext=(2, 2),
                        fontsize=7, ha="right", va="bottom")
        ax.set_xticks(range(len(groups)), [_label(g, 24) for g in groups])
        ax.set_ylabel("tau macro (accepted length incl. bonus)")
        ax.set_ylim(bottom=0)
        ax.set_title("tau macro by prompt set (95% CI)")
        ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
        return _svg(fig, "tau")


def _slot_chart(drafters: list[dict]) -> str:
    """Reach, conditional and marginal per slot: one panel each, drafters overlaid."""
    with _rc():
        fig, axes = _figure(11.5, 3.3, ncols=3)
        titles = (("reach", "reach r_i (share of steps reaching slot i)"),
                  ("conditional", "conditional c_i = r_i / r_(i-1)"),
                  ("marginal", "marginal m_i (all anchors, teacher forced)"))
        for ax, (key, title) in zip(axes, titles):
            shown = False
            for d in drafters:
                values = d["metrics"].get(key) or []
                if not values:
                    continue
                shown = True
                ax.plot(range(1, len(values) + 1), _nan(values), marker="o", markersize=3, linewidth=1.4,
                        color=d["color"], label=_label(d["name"]))
            if not shown:
                ax.text(0.5, 0.5, "not recorded (live mode)", ha="center", va="center", transform=ax.transAxes)
            ax.set_title(title)
            ax.set_xlabel("slot i (i-th drafted token)")
            ax.set_ylim(-0.02, 1.02)
            ax.xaxis.get_major_locator().set_params(integer=True)
        axes[0].legend(loc="upper right")
        return _svg(fig, "slots")


def _histogram_chart(drafters: list[dict]) -> str:
    """Share of steps accepting exactly n drafted tokens, drafters side by side."""
    with _rc():
        size = max((len(d["metrics"]["histogram"]) for d in drafters), default=1)
        fig, (ax,) = _figure(min(11.5, max(6.0, 0.2 * size * max(len(drafters), 1) + 2)), 3.0)
        series = []
        for d in drafters:
            total = sum(d["metrics"]["histogram"]) or 1
            series.append(([c / total for c in d["metrics"]["histogram"]], d["color"], d["name"]))
        _share_bars(ax, series, size, "accepted length n (drafted tokens accepted per step; tokens committed = n + 1)",
                    "acceptance-length histogram")
        return _svg(fig, "hist")


def _share_bars(ax, series: list[tuple[list[float], str, str]], size: int, xlabel: str, title: str) -> None:
    """Grouped bars of shares of steps per accepted length, one colour per (shares, colour, name) series."""
    width = 0.8 / max(len(series), 1)
    for k, (shares, color, name) in enumerate(series):
        offset = (k - (len(series) - 1) / 2) * width
        ax.bar([i + offset for i in range(len(shares))], shares, width * 0.95, color=color, label=_label(name))
    ax.set_xticks(range(size))
    ax.set_xlabel(xlabel)
    ax.set_ylabel("share of steps")
    ax.set_title(title)
    ax.legend(loc="upper center")


def _prompt_chart(drafters: list[dict], per_prompt: dict[str, dict[str, float]]) -> str:
    """Each drafter's per-prompt tau, sorted ascending: outliers sit on the left, far below the rest."""
    with _rc():
        fig, (ax,) = _figure(11.5, 3.2)
        for d in drafters:
            values = sorted(v for v in per_prompt.get(d["name"], {}).values())
            if not values:
                continue
            ax.plot(range(1, len(values) + 1), values, marker="o" if len(values) <= 60 else None,
                    markersize=2.5, linewidth=1.2, color=d["color"], label=_label(d["name"]))
            if d["metrics"].get("tau_macro") is not None:
                ax.axhline(d["metrics"]["tau_macro"], color=d["color"], linestyle=":", linewidth=0.9)
        ax.set_xlabel("prompts, sorted by their tau (rank)")
        ax.set_ylabel("per-prompt tau")
        ax.set_title("per-prompt tau, sorted (dotted: tau macro); the table below names each prompt")
        ax.set_ylim(bottom=0)
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.legend(loc="lower right")
        return _svg(fig, "prompts")


def _repetition_chart(drafters: list[dict]) -> str:
    with _rc():
        fig, (ax,) = _figure(6.5, 2.8)
        for d in drafters:
            shares = (d.get("repetition") or {}).get("flagged_share_by_slot") or []
            if shares:
                ax.plot(range(1, len(shares) + 1), shares, marker="o", markersize=3, color=d["color"],
                        label=_label(d["name"]))
        ax.set_xlabel("slot i")
        ax.set_ylabel("share of blocks")
        ax.set_ylim(-0.02, 1.02)
        ax.set_title("flagged (repetitive) blocks whose pattern covers slot i")
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.legend(loc="upper right")
        return _svg(fig, "repetition")


def _delta_chart(result: dict) -> str:
    """B - A with its 95% interval for tau macro and micro, against zero."""
    with _rc():
        fig, (ax,) = _figure(6.5, 1.9)
        for y, kind in enumerate(("macro", "micro")):
            d = result[f"delta_tau_{kind}"]
            color = "#2ca02c" if d["low"] > 0 else "#d62728" if d["high"] < 0 else "#555555"
            ax.errorbar([d["estimate"]], [y], xerr=[[d["estimate"] - d["low"]], [d["high"] - d["estimate"]]],
                        fmt="o", color=color, capsize=4)
        ax.axvline(0, color="black", linewidth=0.8)
        ax.set_yticks([0, 1], ["tau macro", "tau micro"])
        ax.set_ylim(-0.6, 1.6)
        ax.set_xlabel("B - A (95% CI)")
        span = max(abs(result[f"delta_tau_{k}"][e]) for k in ("macro", "micro") for e in ("low", "high"))
        ax.set_xlim(-max(span, 0.05) * 1.15, max(span, 0.05) * 1.15)
        return _svg(fig, "delta")


def _diff_slot_chart(slots: dict) -> str:
    with _rc():
        fig, (ax,) = _figure(9.0, 3.0)
        keys = [("reach", "reach"), ("conditional", "conditional"), ("marginal", "marginal")]
        width = 0.27
        for k, (key, label) in enumerate(keys):
            values = slots.get(key) or []
            if not any(v is not None for v in values):
                continue
            ax.bar([i + 1 + (k - 1) * width for i in range(len(values))], _nan(values), width * 0.95,
                   color=PALETTE[k], label=label)
        ax.axhline(0, color="black", linewidth=0.8)
        ax.set_xlabel("slot i")
        ax.set_ylabel("B - A")
        ax.set_title("per-slot deltas (B - A)")
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.legend(loc="best")
        return _svg(fig, "dslots")


def _diff_histogram_chart(hist: dict, name_a: str, name_b: str) -> str:
    with _rc():
        fig, (ax,) = _figure(9.0, 2.8)
        _share_bars(ax, [(hist["a"], PALETTE[0], f"A: {name_a}"), (hist["b"], PALETTE[1], f"B: {name_b}")],
                    len(hist["a"]), "accepted length n", "acceptance-length histogram, A vs B")
        return _svg(fig, "dhist")


# ------------------------------------------------------------------------------------------- view models

def _natural(text: str):
    return [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", text) if part]


_CONTROL = {i: 0x2400 + i for i in range(32)} | {127: 0x2421}  # C0 controls and DEL as their Unicode pictures


def _shown(piece: str) -> str:
    """A token piece as shown: whitespace made visible as in the terminal, control characters as ␀..␟."""
    return visible(piece).translate(_CONTROL)


def _cells(block: BlockView) -> tuple[list[tuple[str, str]], list[tuple[str, str]], str | None]:
    """(draft cells, target cells, note on the first divergence): (text, css class) per slot."""
    rejected = block.first_rejected
    draft = [(_shown(piece), "a" if i < block.accepted else "x" if i == rejected else "u")
             for i, piece in enumerate(block.draft)]
    target = [(_shown(piece), "t" if i < block.accepted else "tx" if i == rejected else "")
              for i, piece in enumerate(block.target)]
    note = None
    if rejected is not None:
        note = (f"first divergence at slot {rejected + 1}: drafted {_shown(block.draft[rejected])!r}, "
                f"target {_shown(block.target[rejected])!r}")
    return draft, target, note


def _block(block: BlockView) -> dict[str, Any]:
    draft, target, note = _cells(block)
    return {"prompt_id": block.prompt_id, "drafter": block.drafter, "step": block.step,
            "anchor_pos": block.anchor_pos, "anchor": _shown(block.anchor), "accepted": block.accepted,
            "scored": min(len(block.draft), len(block.target)), "flags": list(block.flags),
            "rows": [("draft", draft), ("target", target)], "note": note,
            "divergence": block.first_rejected}


def _pair_block(a: BlockView, b: BlockView) -> dict[str, Any]:
    """The first divergent block of a diff: A's and B's drafts over the same target tokens."""
    draft_a, target, note_a = _cells(a)
    draft_b, target_b, note_b = _cells(b)
    if len(target_b) > len(target):
        target = target_b
    target = [(text, "") for text, _ in target]  # accepted by whom differs: leave the target plain
    return {"anchor_pos": a.anchor_pos, "anchor": _shown(a.anchor), "step": a.step,
            "accepted_a": a.accepted, "accepted_b": b.accepted,
            "rows": [("A draft", draft_a), ("B draft", draft_b), ("target", target)],
            "notes": [(f"{side}: {note}", "div") if note else (f"{side}: all scored slots accepted", "muted")
                      for side, note in (("A", note_a), ("B", note_b))]}


def _view_block(data: dict) -> BlockView:
    return BlockView(**{**data, "draft": tuple(data["draft"]), "target": tuple(data["target"]),
                        "flags": tuple(data.get("flags", ()))})


def _per_prompt_tau(drafter: dict, rows: list[dict]) -> dict[str, float]:
    per_prompt = (drafter.get("counts") or {}).get("per_prompt")
    if per_prompt is None:  # older or partial run.json: from the rows' own counts
        per_prompt = {}
        for row in rows:
            if row["drafter"] == drafter["name"]:
                per_prompt.update((row.get("counts") or {}).get("per_prompt") or {})
    return {pid: committed / steps for pid, (steps, committed) in per_prompt.items() if steps}


def _fmt_value(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, dict):
        return ", ".join(f"{k}: {_fmt_value(v)}" for k, v in value.items()) or "none"
    if isinstance(value, (list, tuple)):
        return ", ".join(_fmt_value(v) for v in value) or "none"
    return str(value)


def _agreement(value: dict | None) -> str:
    if not value or not value.get("total"):
        return "–"
    return f"{value['agree']}/{value['total']} ({100 * value['agree'] / value['total']:.2f}%)"


def _provenance(run: dict) -> list[tuple[str, list[tuple[str, str]]]]:
    prov = run["provenance"]
    target = prov.get("target") or {}
    prompts = prov.get("prompts") or {}
    return [
        ("target", [
            ("name", _fmt_value(target.get("name"))), ("path", _fmt_value(target.get("path"))),
            ("model type", _fmt_value(target.get("model_type"))),
            ("shape", f"{target.get('num_layers')} layers, hidden {target.get('hidden_size')}, "
                      f"vocab {target.get('vocab_size')}"),
            ("fingerprint", _fmt_value(target.get("fingerprint"))),
            ("tokenizer hash", _fmt_value(prov.get("tokenizer_hash"))),
            ("chat template hash", _fmt_value(prov.get("chat_template_hash"))),
        ]),
        ("settings", [
            ("prompts", f"{prompts.get('count')} from {prompts.get('source')} "
                        f"({_fmt_value(prompts.get('sets'))})"),
            ("max_new_tokens", _fmt_value(prov.get("max_new_tokens"))),
            ("thinking", _fmt_value(prov.get("enable_thinking"))
                         + (f" ({prov['thinking_source']})" if prov.get("thinking_source") else "")),
            ("temperature", _fmt_value(prov.get("temperature"))),
            ("mode", _fmt_value(prov.get("mode"))), ("final block", _fmt_value(prov.get("final_block"))),
            ("continuations", _fmt_value(prov.get("continuations"))),
            ("dtype, device", f"{prov.get('dtype')}, {prov.get('device')}"),
            ("kernels", _fmt_value(prov.get("kernels")) if prov.get("kernels") else "none (dense target)"),
            ("self-consistency", _agreement(prov.get("self_consistency"))),
            ("responses agreement", _agreement(prov.get("responses_agreement"))),
        ]),
        ("versions", [
            ("dflash-eval", _fmt_value(prov.get("dflash_eval"))), ("git sha", _fmt_value(prov.get("git_sha"))),
            ("torch", _fmt_value(prov.get("torch"))), ("transformers", _fmt_value(prov.get("transformers"))),
            ("python", _fmt_value(prov.get("python"))), ("created", _fmt_value(prov.get("created"))),
            ("command", shlex.join(map(str, prov.get("argv") or [])) or "–"),
            ("work", _fmt_value(prov.get("work"))),
        ]),
    ]


def _paper_taus(prov: dict, sets: list[str]) -> dict[str, float]:
    target = prov.get("target") or {}
    found = {}
    for prompt_set in sets:
        for name in (target.get("name"), target.get("path")):
            tau = references.published_tau(str(name), prompt_set) if name else None
            if tau is not None:
                found[prompt_set] = tau
                break
    return found


def _run_context(run: dict, rows: list[dict], title: str | None) -> dict[str, Any]:
    prov = run["provenance"]
    drafters = [{**d, "color": PALETTE[i % len(PALETTE)]} for i, d in enumerate(run["drafters"])]
    names = [d["name"] for d in drafters]
    sets = list((prov.get("prompts") or {}).get("sets") or {})
    for d in drafters:
        sets += [s for s in d.get("by_prompt_set") or {} if s not in sets]
    paper = _paper_taus(prov, sets)
    best = max((d["metrics"]["tau_macro"] for d in drafters if d["metrics"]["tau_macro"] is not None), default=None)

    summary = [{"name": d["name"], "color": d["color"], "m": d["metrics"],
                "best": len(drafters) > 1 and best is not None and d["metrics"]["tau_macro"] == best,
                "format": d.get("format"), "block_size": (d.get("spec") or {}).get("block_size")} for d in drafters]
    by_set = [{"name": d["name"], "color": d["color"], "set": s, "m": m, "paper": paper.get(s)}
              for d in drafters for s, m in (d.get("by_prompt_set") or {}).items()]

    groups = list(sets) if sets else ["all"]
    if len(sets) > 1:
        groups = ["all", *sets]
    bars = []
    for d in drafters:
        tau, ci = {}, {}
        for group in groups:
            m = d["metrics"] if group == "all" or len(sets) <= 1 else (d.get("by_prompt_set") or {}).get(group)
            if m and m.get("tau_macro") is not None:
                tau[group], ci[group] = m["tau_macro"], m.get("tau_macro_ci")
        bars.append({"name": d["name"], "color": d["color"], "tau": tau, "ci": ci})
    refs = {g: paper[g] for g in groups if g in paper}

    per_prompt = {d["name"]: _per_prompt_tau(d, rows) for d in drafters}
    flagged = {d["name"]: ((d.get("repetition") or {}).get("counts") or {}).get("per_prompt") or {} for d in drafters}
    prompt_set_of = {row["prompt_id"]: row.get("prompt_set", "") for row in rows}
    prompt_ids = sorted({pid for taus in per_prompt.values() for pid in taus} | set(prompt_set_of), key=_natural)
    anchor = {pid: f"p{i}" for i, pid in enumerate(prompt_ids)}
    prompt_rows = []
    for pid in prompt_ids:
        cells = []
        for name in names:
            tau = per_prompt[name].get(pid)
            flag = flagged[name].get(pid)
            share = flag[0] / flag[1] if flag and flag[1] else None
            cells.append({"tau": tau, "flagged": share})
        taus = [c["tau"] for c in cells if c["tau"] is not None]
        prompt_rows.append({"id": pid, "anchor": anchor[pid], "set": prompt_set_of.get(pid, pid.split("/")[0]),
                            "cells": cells, "spread": max(taus) - min(taus) if len(taus) > 1 else None})

    repetition = []
    for d in drafters:
        rep = d.get("repetition")
        repetition.append({"name": d["name"], "color": d["color"], "rep": rep,
                           "detectors": ", ".join(f"{k} {v}" for k, v in (rep or {}).get("flagged_by_detector", {}).items() if v) or "none",
                           "level": "" if not rep else "bad" if (rep.get("flagged_share") or 0) >= 0.25
                           else "warn" if (rep.get("flagged_share") or 0) >= 0.05 else ""})

    by_key = {(row["prompt_id"], row["drafter"]): row for row in rows}
    worst = [{"name": d["name"], "color": d["color"],
              "blocks": [_block(b) for b in select_blocks(rows, drafter=d["name"], worst=WORST_BLOCKS)]}
             for d in drafters]
    prompts = []
    for pid in prompt_ids:
        parts = []
        for d in drafters:
            row = by_key.get((pid, d["name"]))
            if row is None:
                continue
            blocks = walk_blocks(row)
            first_div = next((b.step for b in blocks if b.first_rejected is not None), None)
            shown = blocks[:PROMPT_BLOCKS]
            if first_div is not None and first_div >= PROMPT_BLOCKS:
                shown.append(blocks[first_div])
            parts.append({"name": d["name"], "color": d["color"], "steps": len(blocks),
                          "tau": per_prompt[d["name"]].get(pid), "first_divergence": first_div,
                          "blocks": [_block(b) for b in shown]})
        if parts:
            prompts.append({"id": pid, "anchor": anchor[pid], "set": prompt_set_of.get(pid, ""), "parts": parts})

    charts = {"tau": _tau_chart(bars, groups, refs) if drafters else None,
              "slots": _slot_chart(drafters) if drafters else None,
              "histogram": _histogram_chart(drafters) if drafters else None,
              "prompts": _prompt_chart(drafters, per_prompt) if any(per_prompt.values()) else None,
              "repetition": _repetition_chart(drafters) if any(d.get("repetition") for d in drafters) else None}
    target_name = (prov.get("target") or {}).get("name") or "?"
    doctor = run.get("doctor")  # added by `dflash-eval doctor --out RUN_DIR`
    return {"doctor": doctor,
        "title": title or f"dflash-eval report: {target_name}",
        "provenance": _provenance(run), "warnings": prov.get("warnings") or [],
              "incomplete": run.get("incomplete"),
        "drafters": drafters, "summary": summary, "by_set": by_set, "paper": paper,
        "paper_source": references.published_tau_source() if paper else None,
        "charts": charts, "names": names, "prompt_rows": prompt_rows, "repetition": repetition,
        "worst": worst, "prompts": prompts, "sample_legend": _sample_legend(),
        "page_rows": PAGE_ROWS, "page_prompts": PAGE_PROMPTS, "worst_blocks": WORST_BLOCKS,
        "prompt_blocks": PROMPT_BLOCKS,
    }


def render_run_html(run: dict, rows: list[dict], *, title: str | None = None) -> str:
    """The whole report of a run (run.json as a dict, samples.jsonl rows) as one self-contained HTML page."""
    if run.get("provenance", {}).get("estimate"):
        return render_estimate_html(run, title=title)
    return _page("run.html.j2", **_run_context(run, rows, title))


def _estimate_chart(drafters: list[dict]) -> str:
    """alpha_i and expected reach per slot, drafters overlaid (the estimate's per-slot view)."""
    with _rc():
        fig, axes = _figure(9.5, 3.3, ncols=2)
        for ax, key, title in ((axes[0], "alpha", "alpha_i = sum min(p, q) (teacher forced)"),
                               (axes[1], "expected_reach", "expected reach = E[prod alpha_j, j <= i]")):
            for d in drafters:
                values = d["metrics"][key]
                ax.plot(range(1, len(values) + 1), _nan(values), "o-", color=d["color"], markersize=3,
                        label=_label(d["name"]))
            ax.set_xlabel("slot i")
            ax.set_ylim(0, 1)
            ax.set_title(title)
        axes[1].legend(loc="upper right")
        return _svg(fig, "alpha")


def render_estimate_html(run: dict, *, title: str | None = None) -> str:
    """Temperature > 0, offline: the estimate per drafter, labelled as one, with its definition."""
    from ..references import published_comparison

    drafters = [{**d, "color": PALETTE[i % len(PALETTE)]} for i, d in enumerate(run["drafters"])]
    prov = run["provenance"]
    paper = published_comparison(prov, [(d.get("spec") or {}).get("block_size", 0) for d in drafters])
    return _page("estimate.html.j2", title=title or "dflash-eval estimate at temperature > 0", run=run, prov=prov,
                 drafters=drafters, provenance=_provenance(run), chart=_estimate_chart(drafters), paper=paper,
                 sampling=prov.get("sampling") or {}, warnings=prov.get("warnings") or [])


def render_diff_html(result: dict) -> str:
    """`diffing.diff()`'s result as one self-contained HTML page: verdict, deltas, per slot, prompts."""
    if result.get("estimate"):
        from ..errors import InputError

        raise InputError(None, "diff --html does not draw a comparison of offline estimates yet; the terminal "
                               "and --json outputs show it")
    a, b = result["a"], result["b"]
    examples = {}
    for key in ("regressed", "improved"):
        examples[key] = []
        for example in result[key]:
            pair = None
            if example.get("blocks"):
                pair = _pair_block(_view_block(example["blocks"][0]), _view_block(example["blocks"][1]))
            examples[key].append({**example, "pair": pair})
    slots = result["slots"]
    width = len(slots["reach"])
    slot_rows = [{"slot": i + 1, "reach": slots["reach"][i],
                  "conditional": slots["conditional"][i] if i < len(slots["conditional"]) else None,
                  "marginal": slots["marginal"][i] if slots.get("marginal") and i < len(slots["marginal"]) else None}
                 for i in range(width)]
    charts = {"delta": _delta_chart(result), "slots": _diff_slot_chart(slots),
              "histogram": _diff_histogram_chart(result["histogram"], a["name"], b["name"])}
    macro = result["delta_tau_macro"]  # the colour follows compare.verdict's rule (interval and p < 0.05)
    significant = macro["p_value"] < 0.05
    verdict_class = ("better" if significant and macro["low"] > 0 else "worse" if significant and macro["high"] < 0
                     else "same")
    return _page("diff.html.j2", title=f"dflash-eval diff: {a['label']} vs {b['label']}", r=result, a=a, b=b,
                 examples=examples, slot_rows=slot_rows, charts=charts, verdict_class=verdict_class,
                 sample_legend=_sample_legend())
