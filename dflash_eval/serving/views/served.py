"""How `served` is shown: the served tau and per-position acceptance, the gap to an offline run per position
with its interval, and the likely causes; on the terminal and as a self-contained HTML page."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from ...core.implausible import flag_lines
from ...core.safe_text import safe


def _num(value: float | None, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _signed(value: float | None, digits: int = 3) -> str:
    return "–" if value is None else f"{value:+.{digits}f}"


def _interval(row: dict[str, Any]) -> str:
    return "–" if row.get("low") is None else f"[{row['low']:+.3f}, {row['high']:+.3f}]"


def served_lines(result: dict[str, Any]) -> list[str]:
    """The header lines, shared by both renderings."""
    s = result["served"]
    counts = s["counts"]
    lines = [f"served by {s['engine']} ({s['model'] or 'model not named'}), from {s['source']}",
             f"engines pooled: {', '.join(s['series_pooled']) or '–'}"]
    tau = f"served tau (1 + accepted / drafts): {_num(s['tau'])}"
    if counts["drafts"] is not None and counts["draft_tokens"] is None:  # SGLang's counters: no drafted tokens
        tau += (f"  ({counts['accepted']} accepted drafts in {counts['drafts']} verify steps; the server counts no "
                "drafted tokens, so no acceptance rate)")
    elif counts["drafts"] is not None:
        tau += (f"  ({counts['accepted']} accepted of {counts['draft_tokens']} drafted tokens in {counts['drafts']} "
                f"drafts; acceptance rate {_num(s['acceptance_rate'])})")
    lines.append(tau)
    if s.get("reported_tau") is not None and counts["drafts"] is not None:
        lines.append(f"the source's own acceptance length: {_num(s['reported_tau'])}")
    if s.get("tau_definition"):  # core/tau_definitions.py: every tau said with its definition
        d, c = s["tau_definition"], s.get("conversion") or {}
        lines.append(f"tau definition: {d['label']}: {d['formula']}, pooled over {d['pooled']} ({d['source']})")
        lines.append(f"in ours: {c['formula']}" if c.get("formula") else f"in ours: not converted: {c.get('why')}")
    lines.append(f"reference: {s['reference']}")
    return lines


def render_served(console: Console, result: dict[str, Any]) -> None:
    if result.get("kind") == "dflash-eval served speed-bench":  # AIPerf's speed_bench_report.csv
        from .speed_bench import render_speed_bench

        render_speed_bench(console, result)
        return
    for line in served_lines(result):
        console.print(safe(line))
    for note in result["served"]["notes"]:
        console.print(f"[yellow]note:[/] {safe(note)}")
    for line in flag_lines(result.get("flags") or []):  # core/implausible.py
        console.print(f"[bold red]{safe(line)}[/]")
    engines = result["served"].get("per_engine") or []
    if len(engines) > 1:  # each engine alone beside the pooled figure above
        table = Table(title="per engine (label set)")
        for name in ("engine", "tau", "drafts", "accepted"):
            table.add_column(name, justify="left" if name == "engine" else "right")
        for e in engines:
            table.add_row(safe(e["series"]), _num(e["tau"]), str(e["drafts"]), str(e["accepted"]))
        console.print(table)
    gap = result.get("gap")
    if gap is None:
        per_pos = result["per_position"]
        if per_pos:
            table = Table(title="per-position acceptance (accepted at position / drafts)")
            table.add_column("position", justify="right")
            table.add_column("served", justify="right")
            for i, value in enumerate(per_pos, 1):
                table.add_row(str(i), _num(value))
            console.print(table)
        return
    offline = result["offline"]
    console.print(safe(f"offline: {offline['run']} drafter {offline['drafter']} ({offline['steps']} steps, block size "
                       f"{offline['block_size']}, {offline['semantics']} rules)"))
    tau = gap["tau"]
    console.print(safe(f"tau: served {_num(tau['served'])}, offline (micro) {_num(tau['offline'])}, gap "
                       f"{_signed(tau['gap'])} {_interval(tau)}"))
    table = Table(title="per position: served - offline (accepted at slot / steps)")
    for name in ("slot", "served", "offline", "gap", "95% interval"):
        table.add_column(name, justify="right")
    for row in gap["per_position"]:
        table.add_row(str(row["position"]), _num(row["served"]), _num(row["offline"]), _signed(row["gap"]),
                      _interval(row))
    console.print(table)
    console.print(safe(f"interval: {gap['interval']}"))
    for caveat in gap["caveats"]:
        console.print(f"[yellow]caveat:[/] {safe(caveat)}")
    if result.get("parity"):
        console.print(safe(f"harness parity: {result['parity']}"))
    console.print("likely causes:")
    for cause in result["likely_causes"]:
        console.print(f"  - {safe(cause)}")


_TEMPLATE = """{% extends "base.html.j2" %}
{% block nav %}<a href="#served">served</a>{% endblock %}
{% block content %}
<section id="served">
<h2>What the server measured</h2>
{% for line in lines %}<p>{{ line }}</p>{% endfor %}
{% for note in notes %}<div class="warning">note: {{ note }}</div>{% endfor %}
{% if rows %}
<table class="sortable">
<thead><tr><th class="n">slot</th><th class="n">served</th><th class="n">offline</th><th class="n">gap</th><th class="n">95% interval</th></tr></thead>
<tbody>
{% for r in rows %}<tr><td class="n">{{ r.position }}</td><td class="n">{{ r.served }}</td><td class="n">{{ r.offline }}</td><td class="n">{{ r.gap }}</td><td class="n">{{ r.interval }}</td></tr>{% endfor %}
</tbody>
</table>
{% endif %}
{% for c in caveats %}<div class="warning">caveat: {{ c }}</div>{% endfor %}
{% if causes %}<h3>Likely causes</h3><ul>{% for c in causes %}<li>{{ c }}</li>{% endfor %}</ul>{% endif %}
</section>
{% endblock %}
"""


def render_served_html(result: dict[str, Any]) -> str:
    """A self-contained page (the report's base template, styles and legend)."""
    from ...render.html import content_security_policy, run_legend, template_env

    if result.get("kind") == "dflash-eval served speed-bench":
        from .speed_bench import speed_bench_lines

        return template_env().from_string(_TEMPLATE).render(
            csp=content_security_policy(), legend=run_legend(), title="dflash-eval served", lines=speed_bench_lines(result),
            notes=result["notes"], rows=[], caveats=[], causes=[])
    gap = result.get("gap")
    lines = served_lines(result) + flag_lines(result.get("flags") or [])
    if gap is not None:
        tau = gap["tau"]
        lines.append(f"offline: {result['offline']['run']} drafter {result['offline']['drafter']}; tau gap "
                     f"{_signed(tau['gap'])} {_interval(tau)} ({gap['interval']})")
        rows = [{"position": r["position"], "served": _num(r["served"]), "offline": _num(r["offline"]),
                 "gap": _signed(r["gap"]), "interval": _interval(r)} for r in gap["per_position"]]
    else:
        rows = [{"position": i, "served": _num(v), "offline": "–", "gap": "–", "interval": "–"}
                for i, v in enumerate(result["per_position"] or [], 1)]
    return template_env().from_string(_TEMPLATE).render(
        csp=content_security_policy(), legend=run_legend(), title="dflash-eval served", lines=lines, notes=result["served"]["notes"],
        rows=rows, caveats=(gap or {}).get("caveats", []), causes=result.get("likely_causes", []))
