"""The HTML reports' charts: matplotlib figures drawn to inline SVG with ids made unique per chart, so a
page holds many without collisions and without any external file."""

from __future__ import annotations

import io
import math
import re

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22", "#17becf")


_SVG_DROP = (re.compile(r"<\?xml.*?\?>", re.S), re.compile(r"<!DOCTYPE.*?>", re.S),
             re.compile(r"<metadata>.*?</metadata>", re.S), re.compile(r"<!--.*?-->", re.S),
             re.compile(r"<style[^>]*>.*?</style>", re.S), re.compile(r'\s+xmlns(:\w+)?="[^"]*"'),
             re.compile(r'\s+version="1\.1"'))


_SVG_IDS = re.compile(r'(\bid="|href="#|url\(#)([^")]+)')


_SVG_SIZE = re.compile(r'<svg\s+([^>]*?)width="([\d.]+)pt"\s+height="([\d.]+)pt"')


_CHART_IDS = {"tau": "t", "slots": "s", "hist": "h", "prompts": "p", "repetition": "r", "delta": "d",
              "dslots": "e", "dhist": "f", "curve": "c", "heat": "m", "trep": "q", "alpha": "g"}  # each chart once per page: its letter keeps its ids unique there


def clean_svg(svg: str, name: str, prefix: str) -> str:
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


def new_figure(width: float, height: float, ncols: int = 1):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    axes = fig.subplots(1, ncols, squeeze=False)[0]
    for ax in axes:
        ax.grid(True, color="#e5e5e5", linewidth=0.6)
        ax.set_axisbelow(True)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
    return fig, axes


def figure_to_svg(fig, name: str) -> str:
    import warnings

    import matplotlib

    from ..core.safe_text import printable

    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "path", "svg.hashsalt": "dflash-eval", "svg.image_inline": True}), \
            warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fig.savefig(buf, format="svg", metadata={"Date": None})
    for warning in caught:  # matplotlib's warnings quote labels (a missing glyph): escaped like all our output
        warnings.warn(printable(warning.message), type(warning.message), stacklevel=2)
    return clean_svg(buf.getvalue(), f"{name} chart", f"{_CHART_IDS[name]}-")


def chart_style():
    import matplotlib

    return matplotlib.rc_context({"font.family": "DejaVu Sans", "font.size": 9, "text.parse_math": False,
                                  "axes.titlesize": 10, "legend.fontsize": 8, "legend.frameon": False})


def chart_legend(ax, **placement) -> None:
    """The axes' legend, when something on them is labelled: a chart with no drafter drawn (no steps, empty
    responses) gets none, and matplotlib no warning on stderr."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(**placement)


def chart_label(text: str, limit: int = 40) -> str:
    """A name as a chart label: short, control characters shown as escapes, and never read as matplotlib's
    hidden-label convention."""
    from ..core.safe_text import printable

    text = printable(text)
    text = text if len(text) <= limit else text[:limit - 1] + "…"
    return " " + text if text.startswith("_") else text


def none_as_nan(values):
    return [math.nan if v is None else v for v in values]


def tau_chart(bars: list[dict], groups: list[str], references_by_group: dict[str, float]) -> str:
    """tau macro per drafter (bars, 95% CI as error bars), per prompt set; the paper's tau as a dashed line."""
    with chart_style():
        n = max(len(bars), 1)
        fig, (ax,) = new_figure(max(4.5, 0.55 * n * len(groups) + 2.2), 3.2)
        width = 0.8 / n
        for k, bar in enumerate(bars):
            xs = [g + (k - (n - 1) / 2) * width for g in range(len(groups))]
            ys = [bar["tau"].get(group) for group in groups]
            lows = [y - bar["ci"][group][0] if y is not None and bar["ci"].get(group) else 0
                    for y, group in zip(ys, groups)]
            highs = [bar["ci"][group][1] - y if y is not None and bar["ci"].get(group) else 0
                     for y, group in zip(ys, groups)]
            ax.bar(xs, none_as_nan(ys), width * 0.92, color=bar["color"], label=chart_label(bar["name"]),
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
        ax.set_xticks(range(len(groups)), [chart_label(g, 24) for g in groups])
        ax.set_ylabel("tau macro (accepted length incl. bonus)")
        ax.set_ylim(bottom=0)
        ax.set_title("tau macro by prompt set (95% CI)")
        chart_legend(ax, loc="upper left", bbox_to_anchor=(1.0, 1.0))
        return figure_to_svg(fig, "tau")


def slot_chart(drafters: list[dict]) -> str:
    """Reach, conditional and marginal per slot: one panel each, drafters overlaid."""
    with chart_style():
        fig, axes = new_figure(11.5, 3.3, ncols=3)
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
                ax.plot(range(1, len(values) + 1), none_as_nan(values), marker="o", markersize=3, linewidth=1.4,
                        color=d["color"], label=chart_label(d["name"]))
            if not shown:
                ax.text(0.5, 0.5, "not recorded (live mode)", ha="center", va="center", transform=ax.transAxes)
            ax.set_title(title)
            ax.set_xlabel("slot i (i-th drafted token)")
            ax.set_ylim(-0.02, 1.02)
            ax.xaxis.get_major_locator().set_params(integer=True)
        chart_legend(axes[0], loc="upper right")
        return figure_to_svg(fig, "slots")


def histogram_chart(drafters: list[dict]) -> str:
    """Share of steps accepting exactly n drafted tokens, drafters side by side."""
    with chart_style():
        size = max((len(d["metrics"]["histogram"]) for d in drafters), default=1)
        fig, (ax,) = new_figure(min(11.5, max(6.0, 0.2 * size * max(len(drafters), 1) + 2)), 3.0)
        series = []
        for d in drafters:
            total = sum(d["metrics"]["histogram"]) or 1
            series.append(([c / total for c in d["metrics"]["histogram"]], d["color"], d["name"]))
        _share_bars(ax, series, size, "accepted length n (drafted tokens accepted per step; tokens committed = n + 1)",
                    "acceptance-length histogram")
        return figure_to_svg(fig, "hist")


def _share_bars(ax, series: list[tuple[list[float], str, str]], size: int, xlabel: str, title: str) -> None:
    """Grouped bars of shares of steps per accepted length, one colour per (shares, colour, name) series."""
    width = 0.8 / max(len(series), 1)
    for k, (shares, color, name) in enumerate(series):
        offset = (k - (len(series) - 1) / 2) * width
        ax.bar([i + offset for i in range(len(shares))], shares, width * 0.95, color=color, label=chart_label(name))
    ax.set_xticks(range(size))
    ax.set_xlabel(xlabel)
    ax.set_ylabel("share of steps")
    ax.set_title(title)
    chart_legend(ax, loc="upper center")


def prompt_chart(drafters: list[dict], per_prompt: dict[str, dict[str, float]]) -> str:
    """Each drafter's per-prompt tau, sorted ascending: outliers sit on the left, far below the rest."""
    with chart_style():
        fig, (ax,) = new_figure(11.5, 3.2)
        for d in drafters:
            values = sorted(v for v in per_prompt.get(d["name"], {}).values())
            if not values:
                continue
            ax.plot(range(1, len(values) + 1), values, marker="o" if len(values) <= 60 else None,
                    markersize=2.5, linewidth=1.2, color=d["color"], label=chart_label(d["name"]))
            if d["metrics"].get("tau_macro") is not None:
                ax.axhline(d["metrics"]["tau_macro"], color=d["color"], linestyle=":", linewidth=0.9)
        ax.set_xlabel("prompts, sorted by their tau (rank)")
        ax.set_ylabel("per-prompt tau")
        ax.set_title("per-prompt tau, sorted (dotted: tau macro); the table below names each prompt")
        ax.set_ylim(bottom=0)
        ax.xaxis.get_major_locator().set_params(integer=True)
        chart_legend(ax, loc="lower right")
        return figure_to_svg(fig, "prompts")


def repetition_chart(drafters: list[dict]) -> str:
    with chart_style():
        fig, (ax,) = new_figure(6.5, 2.8)
        for d in drafters:
            shares = (d.get("repetition") or {}).get("flagged_share_by_slot") or []
            if shares:
                ax.plot(range(1, len(shares) + 1), shares, marker="o", markersize=3, color=d["color"],
                        label=chart_label(d["name"]))
        ax.set_xlabel("slot i")
        ax.set_ylabel("share of blocks")
        ax.set_ylim(-0.02, 1.02)
        ax.set_title("flagged (repetitive) blocks whose pattern covers slot i")
        ax.xaxis.get_major_locator().set_params(integer=True)
        chart_legend(ax, loc="upper right")
        return figure_to_svg(fig, "repetition")


def delta_chart(result: dict) -> str:
    """B - A with its 95% interval for tau macro and micro, against zero."""
    with chart_style():
        fig, (ax,) = new_figure(6.5, 1.9)
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
        return figure_to_svg(fig, "delta")


def diff_slot_chart(slots: dict) -> str:
    with chart_style():
        fig, (ax,) = new_figure(9.0, 3.0)
        keys = [("reach", "reach"), ("conditional", "conditional"), ("marginal", "marginal")]
        width = 0.27
        for k, (key, label) in enumerate(keys):
            values = slots.get(key) or []
            if not any(v is not None for v in values):
                continue
            ax.bar([i + 1 + (k - 1) * width for i in range(len(values))], none_as_nan(values), width * 0.95,
                   color=PALETTE[k], label=label)
        ax.axhline(0, color="black", linewidth=0.8)
        ax.set_xlabel("slot i")
        ax.set_ylabel("B - A")
        ax.set_title("per-slot deltas (B - A)")
        ax.xaxis.get_major_locator().set_params(integer=True)
        chart_legend(ax, loc="best")
        return figure_to_svg(fig, "dslots")


def diff_histogram_chart(hist: dict, name_a: str, name_b: str) -> str:
    with chart_style():
        fig, (ax,) = new_figure(9.0, 2.8)
        _share_bars(ax, [(hist["a"], PALETTE[0], f"A: {name_a}"), (hist["b"], PALETTE[1], f"B: {name_b}")],
                    len(hist["a"]), "accepted length n", "acceptance-length histogram, A vs B")
        return figure_to_svg(fig, "dhist")
