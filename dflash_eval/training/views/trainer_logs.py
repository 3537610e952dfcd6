"""The trainer's own logged metrics beside the measured tau on track.html.

Why it exists: a training curve that keeps improving says nothing about what a server will accept
(SpecForge #533: 98% in training, 10% served). `track` stores, per checkpoint row, the metrics the trainer
logged at that checkpoint's step (formats/trainer_logs.py); this section draws each of them against the
measured tau of the same checkpoints (one small panel per metric: tau on the left axis, the metric on the
right) and states the flag for a metric that kept improving after measured tau peaked. Pure presentation
over the rows; the terminal's lines are training/views/track.py's `trainer_lines`.
"""

from __future__ import annotations

import io
from typing import Any

MAX_PANELS = 6


def _series(points) -> tuple[list, list[str]]:
    """The checkpoints that carry trainer values (step order) and the metric names they carry."""
    logged = [p for p in points if isinstance(p.row.get("trainer"), dict) and p.row.get("step") is not None]
    names = sorted({k for p in logged for k in (p.row["trainer"].get("values") or {})})
    return logged, names


def _margin(point) -> float | None:
    ci = point.row["metrics"].get("tau_macro_ci")
    return (ci[1] - ci[0]) / 2 if ci and ci[0] is not None else None


def training_section(points) -> dict[str, Any] | None:
    """{"chart": svg, "metrics": [{"name", "flag"}], "sources", "errors", "note"} or None without trainer logs."""
    from ...formats.trainer_logs import eal_note, rising_while_flat

    logged, names = _series(points)
    errors = sorted({p.row["trainer"]["error"] for p in points
                     if isinstance(p.row.get("trainer"), dict) and p.row["trainer"].get("error")})
    if not names and not errors:
        return None
    taus = [p.tau for p in logged]
    margins = [_margin(p) for p in logged]
    metrics = []
    for name in names:
        values = [(p.row["trainer"].get("values") or {}).get(name) for p in logged]
        metrics.append({"name": name, "values": values, "flag": rising_while_flat(name, values, taus, margins)})
    note = eal_note([p.row["trainer"].get("speculators_version") for p in logged]) if any("eal" in n for n in names) else None
    shown = sorted(metrics, key=lambda m: (m["flag"] is None, m["name"]))[:MAX_PANELS]
    return {"chart": _chart(logged, shown) if shown else None,
            "metrics": [{"name": m["name"], "flag": m["flag"]} for m in metrics],
            "flags": [m["flag"] for m in metrics if m["flag"]],
            "sources": sorted({p.row["trainer"].get("source") for p in logged if p.row["trainer"].get("source")}),
            "errors": errors, "note": note, "hidden": max(0, len(metrics) - len(shown))}


def _chart(logged, metrics: list[dict]) -> str:
    import matplotlib
    from matplotlib.figure import Figure

    from ...render.charts import chart_label, chart_style, clean_svg

    steps = [p.row["step"] for p in logged]
    taus = [p.tau for p in logged]
    cols = min(3, len(metrics))
    rows = -(-len(metrics) // cols)
    with chart_style():
        fig = Figure(figsize=(3.4 * cols, 2.5 * rows), layout="constrained")
        for index, metric in enumerate(metrics):
            ax = fig.add_subplot(rows, cols, index + 1)
            ax.grid(True, color="#e5e5e5", linewidth=0.6)
            ax.plot(steps, [t if t is not None else float("nan") for t in taus], "o-", color="#1f77b4",
                    markersize=3.5, linewidth=1.3, label="measured tau")
            ax.set_xlabel("training step")
            ax.set_ylabel("tau macro", color="#1f77b4")
            other = ax.twinx()
            other.plot(steps, [v if v is not None else float("nan") for v in metric["values"]], "s--",
                       color="#d62728" if metric["flag"] else "#ff7f0e", markersize=3.5, linewidth=1.2,
                       label="trainer's " + chart_label(metric["name"], 30))
            other.set_ylabel(chart_label(metric["name"], 30))
            ax.set_title(("DIVERGES: " if metric["flag"] else "") + chart_label(metric["name"], 34),
                         color="#d62728" if metric["flag"] else "black")
        buf = io.StringIO()
        with matplotlib.rc_context({"svg.fonttype": "path", "svg.hashsalt": "dflash-eval"}):
            fig.savefig(buf, format="svg", metadata={"Date": None})
    return clean_svg(buf.getvalue(), "training chart", "tr-")
