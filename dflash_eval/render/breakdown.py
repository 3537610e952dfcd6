"""Where acceptance is lost, shown: per drafter a terminal table of every split (depth bucket, segment,
token class) and, in the HTML report, tau over context depth as a curve per drafter with its 95% interval,
beside the same tables. Reads run.json's `by_depth` / `by_segment` / `by_token_class` (core/breakdown.py);
a run without them shows nothing."""

from __future__ import annotations

import io
from typing import Any

from rich.console import Console
from rich.table import Table

from ..core.documents.run_document import DrafterDocument, RunDocument
from ..core.safe_text import safe

SPLITS = (("by_depth", "bucket", "depth"), ("by_segment", "segment", "segment"),
          ("by_token_class", "token_class", "token class"))


def _fmt(value, digits: int = 2) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def split_rows(drafter: DrafterDocument) -> list[dict[str, Any]]:
    """The non-empty parts of every split of one drafter, as display rows (numbers, not text)."""
    out = []
    for key, label, split in SPLITS:
        for entry in drafter.get(key) or []:
            m = entry["metrics"]
            if not m.get("steps"):
                continue
            marginal = m.get("marginal") or []
            out.append({"split": split, "part": entry[label], "steps": m["steps"],
                        "prompts": len(entry["counts"]["per_prompt"]), "tau_macro": m.get("tau_macro"),
                        "ci": m.get("tau_macro_ci"), "tau_micro": m.get("tau_micro"),
                        "reach": [r for r in (m.get("reach") or [])],
                        "marginal_1": marginal[0] if marginal else None})
    return out


def has_breakdown(run: RunDocument) -> bool:
    return any(d.get("by_depth") for d in run.get("drafters") or [])


def render_breakdown(console: Console, run: RunDocument) -> None:
    """One table per drafter: each non-empty depth bucket, segment and token class with its steps, tau
    (macro with 95% CI, micro), the reach r_1 and the marginal m_1 (the HTML report has every slot)."""
    if not has_breakdown(run):
        return
    for d in run["drafters"]:
        rows = split_rows(d)
        if not rows:
            continue
        table = Table(title=f"Where acceptance is lost: {safe(d['name'])} (by the anchor's depth; by the segment "
                            "and class of the token slot 1 predicts)", title_justify="left")
        for column in ("split", "part", "steps", "tau macro [95% CI]", "tau micro", "r_1", "m_1"):
            table.add_column(column, justify="left" if column in ("split", "part") else "right",
                             no_wrap=column != "part")
        previous = None
        for r in rows:
            ci = f" [{_fmt(r['ci'][0])}, {_fmt(r['ci'][1])}]" if r["ci"] else ""
            table.add_row(r["split"] if r["split"] != previous else "", safe(r["part"]), str(r["steps"]),
                          _fmt(r["tau_macro"]) + ci, _fmt(r["tau_micro"]),
                          _fmt(r["reach"][0] if r["reach"] else None), _fmt(r["marginal_1"]))
            previous = r["split"]
        console.print(table)


def depth_buckets_with_data(drafters: list[dict[str, Any]]) -> list[str]:
    """The depth buckets in which some drafter has walk steps, in bucket order (run.json keeps every bucket,
    empty ones included, so that runs pair by bucket; a view shows only these)."""
    buckets: list[str] = []
    for d in drafters:
        buckets += [e["bucket"] for e in d.get("by_depth") or []
                    if e["metrics"].get("tau_macro") is not None and e["bucket"] not in buckets]
    order = [e["bucket"] for d in drafters for e in d.get("by_depth") or []]
    return sorted(buckets, key=order.index)


def depth_note(drafters: list[dict[str, Any]]) -> str | None:
    """Why there is no curve: every anchor of the run lies in one bucket (a curve of one point says nothing)."""
    buckets = depth_buckets_with_data(drafters)
    if len(buckets) != 1:
        return None
    return (f"every anchor lies in one depth bucket ({buckets[0]} tokens): no curve over depth; the table gives "
            "its numbers (longer prompts, --max-new-tokens or --depth-buckets with smaller edges split it)")


def depth_chart(drafters: list[dict[str, Any]]) -> str | None:
    """tau macro per depth bucket that holds steps, one line per drafter with its bootstrap 95% interval as a
    band (buckets without steps left out of that drafter's line); None when fewer than two buckets hold
    steps (`depth_note` says so)."""
    from .charts import PALETTE, chart_label, chart_legend, chart_style, clean_svg, new_figure

    buckets = depth_buckets_with_data(drafters)
    if len(buckets) < 2:
        return None
    top = 0.0
    with chart_style():
        fig, (ax,) = new_figure(max(5.0, 0.7 * len(buckets) + 3.0), 3.2)
        for k, d in enumerate(drafters):
            points = [(buckets.index(e["bucket"]), e["metrics"]) for e in d.get("by_depth") or []
                      if e["metrics"].get("tau_macro") is not None]
            if not points:
                continue
            top = max([top] + [max(m["tau_macro"], *(m.get("tau_macro_ci") or [0])) for _, m in points])
            color = PALETTE[k % len(PALETTE)]
            xs = [x for x, _ in points]
            ax.plot(xs, [m["tau_macro"] for _, m in points], marker="o", color=color, label=chart_label(d["name"]))
            band = [(x, m["tau_macro_ci"]) for x, m in points if m.get("tau_macro_ci")]
            if band:
                ax.fill_between([x for x, _ in band], [c[0] for _, c in band], [c[1] for _, c in band],
                                color=color, alpha=0.18, linewidth=0)
                ax.errorbar([x for x, _ in band], [(c[0] + c[1]) / 2 for _, c in band],
                            yerr=[(c[1] - c[0]) / 2 for _, c in band], fmt="none", ecolor=color, capsize=3,
                            elinewidth=0.8)
        ax.set_xticks(range(len(buckets)), [chart_label(b, 12) for b in buckets])
        ax.set_xlabel("anchor position (tokens of context)")
        ax.set_ylabel("tau macro")
        ax.set_xlim(-0.5, len(buckets) - 0.5)  # no dot against an axis
        ax.set_ylim(0, top * 1.1 or 1)  # nor an interval clipped at the top
        ax.set_title("tau by context depth (95% CI over prompts)")
        chart_legend(ax, loc="upper left", bbox_to_anchor=(1.0, 1.0))
        return figure_svg(fig, clean_svg)


def figure_svg(fig, clean, name: str = "tau by depth chart", prefix: str = "k-") -> str:
    """A figure as inline SVG, its ids prefixed (`prefix`: unique per chart on a page)."""
    import matplotlib

    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "path", "svg.hashsalt": "dflash-eval", "svg.image_inline": True}):
        fig.savefig(buf, format="svg", metadata={"Date": None})
    return clean(buf.getvalue(), name, prefix)


def breakdown_view(run: RunDocument) -> dict[str, Any] | None:
    """What the HTML report's "Where acceptance is lost" section shows (templates/_breakdown.html.j2)."""
    if not has_breakdown(run):
        return None
    drafters = run["drafters"]
    return {"chart": depth_chart(drafters), "chart_note": depth_note(drafters),
            "drafters": [{"name": d["name"], "rows": split_rows(d), "edges": d.get("depth_edges"),
                          "note": d.get("breakdown_note")} for d in drafters if d.get("by_depth")]}


def render_depth_diff(console: Console, result: dict[str, Any]) -> None:
    """`diff`: tau macro of A and B per depth bucket, and the paired delta B - A with its 95% CI."""
    pairs = result.get("by_depth") or []
    if not pairs:
        return
    table = Table(title="By context depth (paired over the prompts with steps in the bucket on both sides)",
                  title_justify="left")
    for column in ("depth", "steps A", "steps B", "tau A", "tau B", "delta B - A [95% CI]", "n"):
        table.add_column(column, justify="left" if column == "depth" else "right")
    for p in pairs:
        d = p.get("delta_tau_macro")
        delta = f"{d['estimate']:+.2f} [{d['low']:+.2f}, {d['high']:+.2f}]" if d else ""
        table.add_row(safe(p["bucket"]), str(p["steps_a"]), str(p["steps_b"]), _fmt(p["tau_macro_a"]),
                      _fmt(p["tau_macro_b"]), delta, str(d["n"]) if d else "")
    console.print(table)
