"""How `served --per-request` is shown: per prompt the served text against the offline greedy one (and, with
`--non-speculative`, against the same server's greedy text without speculation), served and offline
tau, the first step where the walks part; the paired delta over prompts, the histogram shift, the prompts
the server falls short on with their offline blocks; on the terminal and as a self-contained HTML page."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from ...core.compare import paired_figure
from ...core.implausible import MEANINGS
from ...core.safe_text import printable, safe
from ...core.samples import visible


def _num(value: float | None, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _signed(value: float | None) -> str:
    return "–" if value is None else f"{value:+.3f}"


def _walk(entry: dict[str, Any]) -> str:
    walk = entry.get("walk")
    if walk is None:
        return "–"
    if walk.get("parted_at") is not None:
        return f"parts at step {walk['parted_at']}"
    return "last step only" if walk.get("last_step") else f"equal ({walk['compared']} steps)"


def summary_lines(result: dict[str, Any]) -> list[str]:
    lines = [f"{result['matched']} of {result['requests']} requests ({', '.join(result['engines']) or '–'}) paired with "
             f"prompts of {result['run']} (drafter {result['drafter']}, block size {result['block_size']})"]
    if result["unmatched"]:
        lines.append(f"{len(result['unmatched'])} requests unmatched: " + "; ".join(
            f"{u['request']}: {u['why']}" for u in result["unmatched"][:5]) + (" ..." if len(result["unmatched"]) > 5 else ""))
    if result["offline_prompts_without_request"]:
        lines.append(f"{len(result['offline_prompts_without_request'])} offline prompts have no request")
    lines.extend(f"note: {n}" for n in result.get("notes", []))
    if result["paired_delta"]:
        lines.append(f"served - offline tau over prompts: {paired_figure(result['paired_delta'], 3)}")
    by_prompt = {e["prompt"]: e for e in result["prompts"]}
    for prompt in result["differs_from_offline"]:
        text = by_prompt[prompt]["text"]
        lines.append(f"differs from the offline greedy text: prompt {prompt}: {text['detail']}")
        if text.get("after_detail"):  # serving/commands/divergence.py: the rest is on another text
            lines.append(f"  {text['after_detail']}")
        before = text.get("before_divergence")
        if before and before["served_tau"] is not None and before["offline_tau"] is not None:
            lines.append(f"  before that token: served tau {before['served_tau']:.3f}, offline {before['offline_tau']:.3f} "
                         f"({before['steps'][0]} and {before['steps'][1]} steps on the same text)")
        if text.get("logit_gap"):
            lines.append(f"  {text['logit_gap']['detail']}")
    if result["differs_from_offline"]:
        lines.append(f"usually: {MEANINGS['text_not_greedy']}")
    plain = result.get("non_speculative")
    if plain is None:
        if result["differs_from_offline"]:
            lines.append("a server's kernels can leave the offline (HF eager) greedy text without speculation: to judge "
                         "losslessness give --non-speculative FILE, the same server's greedy responses to the same "
                         "prompts with speculative decoding off")
    else:
        judged = len(plain["lossless"]) + len(plain["changed"])
        lines.append(f"against the same server without speculation ({plain['file']}): {len(plain['lossless'])} of "
                     f"{judged} prompts lossless (the speculative text is its non-speculative greedy text)"
                     + (f"; {len(plain['requests_without_reference'])} requests have no non-speculative response"
                        if plain["requests_without_reference"] else "")
                     + (f"; {len(plain['unmatched'])} non-speculative responses unmatched" if plain["unmatched"] else ""))
        for prompt in plain["changed"]:
            lines.append(f"CHANGED BY SPECULATION: prompt {prompt}: {by_prompt[prompt]['plain']['detail']}")
    for prompt in result["parted"]:
        lines.append(f"walks part: prompt {prompt}: " + next(e["walk"]["detail"] for e in result["prompts"]
                                                            if e["prompt"] == prompt))
    if result["below_offline"]:
        lines.append("the server accepts less than offline beyond noise on: " + ", ".join(result["below_offline"]))
    for _engine, text in result["definitions"].items():
        lines.append(f"definitions: {text}")
    return lines


def _text(entry: dict[str, Any]) -> str:
    """The text column: against the offline greedy text; with --non-speculative, against the server's own."""
    status = {"greedy": "= offline", "differs": "differs from offline"}.get(entry["text"]["status"],
                                                                          entry["text"]["status"])
    if "plain" not in entry:
        return status
    plain = entry["plain"]
    return f"{status}; " + ("no non-speculative response" if plain is None else
                            {"lossless": "= non-speculative", "changed": "CHANGED by speculation"}.get(
                                plain["status"], plain["status"]))


def render_requests(console: Console, result: dict[str, Any]) -> None:
    table = Table(title="per prompt: served request against the offline walk")
    for name in ("prompt", "request", "text", "served tau", "offline tau", "delta", "steps s/o", "walk"):
        table.add_column(name, justify="right" if "tau" in name or name in ("delta", "steps s/o") else "left")
    for e in result["prompts"]:
        table.add_row(safe(e["prompt"]), safe(e["request"]), safe(_text(e)), _num(e["served"]["tau"]),
                      _num(e["offline"]["tau"]), _signed(e["delta"]), f"{e['served']['steps']}/{e['offline']['steps']}",
                      safe(_walk(e)))
    console.print(table)
    shift = result.get("histogram_shift")
    if shift:
        table = Table(title="histogram shift: share of steps by accepted drafts (served - offline, 95% Newcombe)")
        for name in ("accepted", "served", "offline", "gap", "interval"):
            table.add_column(name, justify="right")
        for row in shift:
            s, o = row["served"], row["offline"]
            table.add_row(str(row["accepted"]), f"{s[0]}/{s[1]}", f"{o[0]}/{o[1]}", _signed(row["gap"]),
                          "–" if row["low"] is None else f"[{row['low']:+.3f}, {row['high']:+.3f}]")
        console.print(table)
    for line in summary_lines(result):
        console.print(safe(line))
    for e in result["prompts"]:
        for b in e.get("blocks", []):
            console.print(safe(f"  {e['prompt']} step {b['step']} at {b['anchor_pos']}: draft "
                               f"{' '.join(visible(t) for t in b['draft'])} | target "
                               f"{' '.join(visible(t) for t in b['target'])} (offline accepted {b['offline_accepted']}"
                               + ("" if b["served_accepted"] is None else f", served {b['served_accepted']}") + ")"))


_TEMPLATE = """{% extends "base.html.j2" %}
{% block nav %}<a href="#requests">requests</a>{% endblock %}
{% block content %}
<section id="requests">
<h2>Served requests against the offline run</h2>
{% for line in lines %}<p>{{ line }}</p>{% endfor %}
<table class="sortable">
<thead><tr><th>prompt</th><th>request</th><th>text</th><th class="n">served tau</th><th class="n">offline tau</th><th class="n">delta</th><th class="n">steps s/o</th><th>walk</th></tr></thead>
<tbody>
{% for r in rows %}<tr><td>{{ r.prompt }}</td><td>{{ r.request }}</td><td>{{ r.text }}</td><td class="n">{{ r.served }}</td><td class="n">{{ r.offline }}</td><td class="n">{{ r.delta }}</td><td class="n">{{ r.steps }}</td><td>{{ r.walk }}</td></tr>{% endfor %}
</tbody>
</table>
{% for b in blocks %}<p>{{ b }}</p>{% endfor %}
</section>
{% endblock %}
"""


def render_requests_html(result: dict[str, Any]) -> str:
    """A self-contained page (the report's base template; every text escaped by it and made printable)."""
    from ...render.html import content_security_policy, run_legend, template_env

    rows = [{"prompt": printable(e["prompt"]), "request": printable(e["request"]), "text": printable(_text(e)),
             "served": _num(e["served"]["tau"]), "offline": _num(e["offline"]["tau"]), "delta": _signed(e["delta"]),
             "steps": f"{e['served']['steps']}/{e['offline']['steps']}", "walk": printable(_walk(e))}
            for e in result["prompts"]]
    blocks = [printable(f"{e['prompt']} step {b['step']}: draft {' '.join(visible(t) for t in b['draft'])} | target "
                   f"{' '.join(visible(t) for t in b['target'])}") for e in result["prompts"] for b in e.get("blocks", [])]
    return template_env().from_string(_TEMPLATE).render(csp=content_security_policy(), legend=run_legend(), title="dflash-eval served --per-request",
                                                lines=[printable(x) for x in summary_lines(result)], rows=rows,
                                                blocks=blocks)
