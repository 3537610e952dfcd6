"""A track's curve in the terminal (table with a sparkline, best so far, the reference, the gap) and as a
self-contained HTML page (tau per step with intervals and the reference line, a step x slot reach heatmap,
repetition share per step, latest vs best paired). Pure presentation over track.jsonl rows."""

from __future__ import annotations

import math
from typing import Any

from rich.console import Console
from rich.table import Table

from ...core.documents.row_documents import TrackRow
from ...core.safe_text import safe
from ...core.track_summary import Curve, curve, label, sparkline


def _num(value: float | None, digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _signed(value: float | None, digits: int = 2) -> str:
    return "–" if value is None else f"{value:+.{digits}f}"


def _ci(metrics: dict[str, Any]) -> str:
    ci = metrics.get("tau_macro_ci")
    return f"[{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "n/a"


def render_track(console: Console, rows: list[TrackRow], present: dict[str, bool] | None = None,
                 pending: list[tuple[str, str, str]] | None = None, seed: int = 0) -> Curve:
    """The curve as a table; returns the computed curve (the CLI reuses its verdicts)."""
    c = curve(rows, present=present, seed=seed)
    taus = [p.tau for p in c.points]
    if c.points:
        low = min([t for t in taus if t is not None] + ([c.reference_tau] if c.reference_tau is not None else []),
                  default=None)
        high = max([t for t in taus if t is not None] + ([c.reference_tau] if c.reference_tau is not None else []),
                   default=None)
        ref = f"   reference {_num(c.reference_tau)}" if c.reference_tau is not None else ""
        console.print(f"tau macro per step  {sparkline(taus, low, high)}  {_num(low)} .. {_num(high)}{ref}")
    table = Table(title="checkpoints by step", header_style="bold")
    table.add_column("step", justify="right")
    table.add_column("checkpoint", overflow="fold")
    table.add_column("tau macro [95% CI]", justify="right", no_wrap=True)
    table.add_column("best so far", justify="right")
    table.add_column("gap to ref", justify="right")
    table.add_column("repetition", justify="right")
    table.add_column("", overflow="fold")
    if c.reference is not None:
        m = c.reference["metrics"]
        table.add_row("ref", safe(c.reference["name"]), f"{_num(m.get('tau_macro'))} {_ci(m)}", "", "",
                      _share(c.reference.get("repetition_share")), "reference", style="dim")
    for point in c.points:
        m = point.row["metrics"]
        marks = []
        if point.is_best:
            marks.append("[bold green]best[/]")
        if point is c.latest and len(c.points) > 1:
            marks.append("latest")
        if not point.present:
            marks.append("[yellow]folder gone or rewritten[/]")
        table.add_row("?" if point.row.get("step") is None else str(point.row["step"]), safe(point.row["name"]),
                      f"{_num(point.tau)} {_ci(m)}", _num(point.best_so_far), _signed(point.gap),
                      _share(point.row.get("repetition_share")), " ".join(marks))
    console.print(table)
    if any(p.row["metrics"].get("estimate") for p in c.points):
        console.print("ESTIMATE: every tau above is the offline estimate at temperature > 0 (estimates.py), "
                      "teacher-forced on sampled continuations")
    if c.latest_vs_best_verdict:
        style = "bold red" if c.regression else ""
        prefix = "REGRESSION: " if c.regression else "latest vs best: "
        console.print(f"[{style}]{safe(prefix + c.latest_vs_best_verdict)}[/]" if style else safe(prefix + c.latest_vs_best_verdict))
    if c.latest_vs_reference_verdict:
        console.print(safe("latest vs reference: " + c.latest_vs_reference_verdict))
    for note in c.notes:
        console.print(safe(note))
    for line in trainer_lines(c.points):
        console.print(safe(line))
    from .breakdown import render_track_breakdown

    render_track_breakdown(console, c)  # tau per draft length k, the latest checkpoint by depth
    from ...render.tree import render_track_trees

    render_track_trees(console, c)  # --tree-budgets: tau per budget per checkpoint
    for path, status, detail in pending or []:
        console.print(safe(f"not evaluated yet: {path}: {status} ({detail})"))
    return c


def trainer_lines(points) -> list[str]:
    """The trainer's own logged metrics beside the measured tau (formats/trainer_logs.py), and the flags."""
    from ...formats.trainer_logs import eal_note, rising_while_flat

    logged = [p for p in points if isinstance(p.row.get("trainer"), dict)]
    if not logged:
        return []
    lines = [f"trainer log: {e}" for e in {p.row["trainer"]["error"] for p in logged if p.row["trainer"].get("error")}]
    names = sorted({k for p in logged for k in (p.row["trainer"].get("values") or {})})
    for name in names:
        values = [(p.row["trainer"].get("values") or {}).get(name) for p in points if isinstance(p.row.get("trainer"), dict)]
        taus = [p.tau for p in points if isinstance(p.row.get("trainer"), dict)]
        margins = [((p.row["metrics"].get("tau_macro_ci") or [None, None])[1] - p.row["metrics"]["tau_macro_ci"][0]) / 2
                   if (p.row["metrics"].get("tau_macro_ci") or [None])[0] is not None else None
                   for p in points if isinstance(p.row.get("trainer"), dict)]
        lines.append(f"trainer {name} per step: " + ", ".join("–" if v is None else f"{v:.4g}" for v in values)
                     + "  (measured tau: " + ", ".join(_num(t) for t in taus) + ")")
        flag = rising_while_flat(name, values, taus, margins)
        if flag:
            lines.append("TRAINING METRIC DIVERGES: " + flag)
    if any("eal" in n for n in names):
        note = eal_note([p.row["trainer"].get("speculators_version") for p in logged])
        if note:
            lines.append("note: " + note)
    return lines


def _reach(metrics: dict) -> list:
    """Counted reach, or an offline estimate's expected reach (temperature > 0)."""
    return metrics.get("reach") or metrics.get("expected_reach") or []


def _share(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}%"


# ------------------------------------------------------------------------------------------------ HTML

def _curve_chart(c: Curve) -> str | None:
    from ...render.charts import chart_label, chart_legend, chart_style, figure_to_svg, new_figure

    points = [p for p in c.points if p.tau is not None and p.row.get("step") is not None]
    if not points and c.reference_tau is None:
        return None
    with chart_style():
        fig, (ax,) = new_figure(7.5, 3.4)
        steps = [p.row["step"] for p in points]
        taus = [p.tau for p in points]
        lows = [p.tau - (p.row["metrics"].get("tau_macro_ci") or [p.tau, p.tau])[0] for p in points]
        highs = [(p.row["metrics"].get("tau_macro_ci") or [p.tau, p.tau])[1] - p.tau for p in points]
        if points:
            ax.errorbar(steps, taus, yerr=[lows, highs], fmt="o-", color="#1f77b4", capsize=3, linewidth=1.4,
                        markersize=4, label="checkpoint tau macro (95% CI)")
            best = [p for p in points if p.is_best]
            if best:
                ax.plot([best[0].row["step"]], [best[0].tau], marker="*", markersize=13, color="#2ca02c",
                        linestyle="none", label="best")
        if c.reference_tau is not None:
            line = ax.axhline(c.reference_tau, color="black", linestyle="--", linewidth=1.2,
                              label=chart_label(f"reference {c.reference['name']} {c.reference_tau:.2f}"))
            line.set_gid("dfe-reference-line")
            ci = c.reference["metrics"].get("tau_macro_ci")
            if ci:
                ax.axhspan(ci[0], ci[1], color="#999", alpha=0.15, linewidth=0)
        ax.set_xlabel("training step")
        ax.set_ylabel("tau macro")
        ax.set_ylim(bottom=0)
        ax.set_title("acceptance per checkpoint")
        chart_legend(ax, loc="lower right")
        return figure_to_svg(fig, "curve")


def _heatmap(c: Curve) -> str | None:
    from ...render.charts import chart_label, chart_style, figure_to_svg, new_figure

    points = [p for p in c.points if _reach(p.row["metrics"])]
    if not points:
        return None
    estimate = any(p.row["metrics"].get("estimate") for p in points)
    width = max(len(_reach(p.row["metrics"])) for p in points)
    table = [[(v if v is not None else math.nan) for v in _reach(p.row["metrics"])] + [math.nan] * (
        width - len(_reach(p.row["metrics"]))) for p in points]
    with chart_style():
        fig, (ax,) = new_figure(min(11, 2.5 + 0.55 * width), min(9, 1.4 + 0.32 * len(points)))
        image = ax.imshow(table, aspect="auto", cmap="viridis", vmin=0, vmax=1, interpolation="nearest")
        ax.grid(False)
        ax.set_xticks(range(width), [str(i + 1) for i in range(width)])
        ax.set_yticks(range(len(points)), [chart_label(label(p.row)) for p in points])  # a name: escaped
        ax.set_xlabel("slot i (expected reach, teacher forced: ESTIMATE at temperature > 0)" if estimate
                      else "slot i (reach r_i: share of steps accepting at least i drafts)")
        ax.set_title("expected reach per slot and step (estimate)" if estimate else "reach per slot and step")
        if width * len(points) <= 400:
            for y, values in enumerate(table):
                for x, v in enumerate(values):
                    if not math.isnan(v):
                        ax.text(x, y, f"{v:.2f}", ha="center", va="center", fontsize=6,
                                color="white" if v < 0.55 else "black")
        fig.colorbar(image, ax=ax, shrink=0.8)
        return figure_to_svg(fig, "heat")


def _repetition_chart(c: Curve) -> str | None:
    from ...render.charts import chart_legend, chart_style, figure_to_svg, new_figure

    points = [p for p in c.points if p.row.get("repetition_share") is not None and p.row.get("step") is not None]
    if not points:
        return None
    with chart_style():
        fig, (ax,) = new_figure(7.5, 2.6)
        ax.plot([p.row["step"] for p in points], [100 * p.row["repetition_share"] for p in points], "o-",
                color="#d62728", markersize=4, label="checkpoints")
        share = c.reference.get("repetition_share") if c.reference else None
        if share is not None:
            ax.axhline(100 * share, color="black", linestyle="--", linewidth=1.0, label="reference")
        ax.set_xlabel("training step")
        ax.set_ylabel("flagged blocks (%)")
        ax.set_ylim(bottom=0)
        ax.set_title("repetitive drafts per checkpoint (walk blocks flagged by the detectors)")
        chart_legend(ax, loc="upper right")
        return figure_to_svg(fig, "trep")


def render_track_html(rows: list[TrackRow], present: dict[str, bool] | None, settings: dict[str, Any],
                      seed: int = 0) -> str:
    from ...render.html import render_page
    from ...render.tree import track_tree_view
    from .breakdown import track_breakdown_view

    c = curve(rows, present=present, seed=seed)
    table = [{"step": p.row.get("step"), "name": p.row["name"], "m": p.row["metrics"], "best": p.is_best,
              "best_so_far": p.best_so_far, "gap": p.gap, "repetition": p.row.get("repetition_share"),
              "present": p.present, "run": p.row["run"], "fingerprint": p.row["fingerprint"][:12],
              "step_source": p.row.get("step_source")} for p in c.points]
    comparison = None
    if c.latest_vs_best is not None:
        comparison = {"delta": c.latest_vs_best.to_dict(), "verdict": c.latest_vs_best_verdict,
                      "regression": c.regression, "best": label(c.best.row), "latest": label(c.latest.row)}
    vs_reference = None
    if c.latest_vs_reference is not None:
        vs_reference = {"delta": c.latest_vs_reference.to_dict(), "verdict": c.latest_vs_reference_verdict}
    prompts = settings.get("prompts") or []
    context = {"prompts": len(prompts), "target": settings.get("target"), "max_new_tokens": settings.get("max_new_tokens"),
               "thinking": settings.get("thinking")}
    charts = {"curve": _curve_chart(c), "heat": _heatmap(c), "repetition": _repetition_chart(c)}
    from .trainer_logs import training_section

    training = training_section(c.points)
    return render_page("track.html.j2", title="dflash-eval track", c=c, table=table, comparison=comparison,
                 vs_reference=vs_reference, charts=charts, context=context, training=training,
                 reference=c.reference, notes=c.notes, breakdown=track_breakdown_view(c), trees=track_tree_view(c),
                 estimate=any(p.row["metrics"].get("estimate") for p in c.points))
