"""`report --markdown`: a run's summary (commands/report.py) as GitHub-flavoured markdown, to paste into an
issue or a PR: the verdict block first (core/verdict.py), the settings in one line, the summary table, the per-slot table (each share beside its
counts), the diff verdicts. Text from data (names, paths) is escaped for the table syntax and for the
terminal it may be printed to."""

from __future__ import annotations

from typing import Any

from ..core.implausible import flag_lines
from ..core.safe_text import printable


def cell(value: Any) -> str:
    """A table cell: control characters shown escaped, `|` and newlines that would break the row escaped."""
    return printable(str(value)).replace("|", "\\|").replace("\n", " ")


def _f(value, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _table(header: list[str], rows: list[list[str]], right: set[int]) -> list[str]:
    rule = ["---:" if i in right else "---" for i in range(len(header))]
    return ["| " + " | ".join(header) + " |", "| " + " | ".join(rule) + " |",
            *("| " + " | ".join(r) + " |" for r in rows)]


def _tau(d: dict[str, Any]) -> str:
    ci = d.get("tau_macro_ci")
    if ci:
        return f"{_f(d['tau_macro'], 2)} [{_f(ci[0], 2)}, {_f(ci[1], 2)}]"
    return f"{_f(d['tau_macro'], 2)} ({cell(d.get('tau_macro_ci_note') or 'no interval')})"


def verdict_markdown(view: dict[str, Any]) -> list[str]:
    """The verdict block (core/verdict.py) as markdown: its heading, the taus and paired deltas as a table, the
    doctor's verdict and share per explained drafter, the next commands."""
    out = [f"### Verdict: {cell(view['title'])}" + (f", {cell(view['prompts'])} prompts" if view.get("prompts") else ""), ""]
    versus = f" (vs {cell(view['compared_to'])})" if view.get("compared_to") else ""
    rows = [[cell(d["name"]) + (" (reference)" if d["reference"] else ""), _tau(d), cell(d.get("line") or "")]
            for d in view["drafters"]]
    out += _table(["drafter", "tau macro [95% CI]", f"paired over prompts{versus}"], rows, {1})
    for d in view["drafters"]:  # the published bands (formats/published.py) and implausible numbers
        extra = [band["line"] for band in d.get("bands") or []] + flag_lines(d.get("flags") or [])
        if extra:
            out += ["", *(f"- **{cell(d['name'])}**: {cell(line)}" for line in extra)]
    for d in view["drafters"]:
        if d.get("serving"):  # --serving-target: the drop to the copy served, split (core/serving_split.py)
            out += ["", f"- {cell(d['serving'])}"]
        e = d.get("explanation")
        if not e:
            continue
        line = f"- **{cell(d['name'])}** (doctor, {cell(e['source'])}): {cell(e['verdict'])}"
        c = e.get("closing")
        if e.get("behind") and c:
            ci = c.get("share_ci")
            line += (f"; it closes {100 * c['share']:.0f}%" + (f" [{100 * ci[0]:.0f}%, {100 * ci[1]:.0f}%]" if ci else "")
                     + f" of the gap to {cell(e['reference'])} over {cell(c['paired_prompts'])} of {cell(c['prompts'])} prompts")
            if c.get("flagged_configured") is not None and c.get("flagged_variant") is not None:
                line += (f"; blocks flagged as repetitive: {100 * c['flagged_configured']:.0f}% as configured, "
                         f"{100 * c['flagged_variant']:.0f}% evaluated that way")
            if c.get("check"):
                line += f". Check {cell(c['check'])}"
        elif e.get("behind") and e.get("paragraph"):
            line += f". {cell(e['paragraph'])}"
        out += ["", line]
    if view.get("next"):
        out += ["", "Next:"] + [f"- {cell(step['why'])}: `{printable(step['command'])}`" for step in view["next"]]
    return out + [""]


def summary_markdown(summary: dict[str, Any]) -> str:
    s = summary["settings"]
    drafters = summary["drafters"]
    estimate = any(d["estimate"] for d in drafters)
    out = verdict_markdown(summary["verdict"]) if summary.get("verdict") else []
    out += [f"**dflash-eval run** `{cell(summary['run'])}`: target `{cell(s['target'])}`, {cell(s['prompts'])} prompts "
           f"(`{cell(s['prompt_source'])}`), max_new_tokens {cell(s['max_new_tokens'])}, thinking "
           f"{'on' if s['thinking'] else 'off'}, {cell(s['mode'])}"
           + (f", temperature {cell(s['temperature'])}" if s["temperature"] else "")
           + f", {cell(s['dtype'])} on {cell(s['device'])}"]
    if summary.get("incomplete"):
        state = summary["incomplete"]
        out.append(f"**INCOMPLETE RUN**: {cell(state.get('done'))} of {cell(state.get('total'))} prompts done")
    if estimate:
        out.append("**ESTIMATE** (temperature > 0, teacher-forced on sampled text; not the live loop's count)")
    live = any(d["live"] for d in drafters)
    header = ["drafter", "tau macro [95% CI]", "tau micro", "steps", "token acceptance", "repetition"]
    header += ["tokens/s (live)", "ms / step", "measured speedup"] if live else []
    rows = []
    for d in drafters:
        row = [cell(d["name"]), _tau(d), _f(d["tau_micro"], 2), cell(d["steps"]), _f(d["token_acceptance_rate"]),
               "-" if d["repetition_share"] is None else f"{100 * d['repetition_share']:.1f}%"]
        if live:
            t = d["live"] or {}
            speed = t.get("measured_speedup")
            row += [_f(t.get("tokens_per_second"), 1), _f(t.get("step_ms"), 2),
                    "-" if speed is None else f"{speed:.2f}x"]
        rows.append(row)
    out += ["", *_table(header, rows, set(range(1, len(header))))]
    keys = ("expected_reach", "alpha") if estimate else ("reach", "conditional", "marginal")
    width = max((len(d["slots"]) for d in drafters), default=0)
    header = ["slot"] + [f"{cell(d['name'])} {key}" for d in drafters for key in keys]
    rows = []
    for i in range(width):
        row = [str(i + 1)]
        for d in drafters:
            slot = d["slots"][i] if i < len(d["slots"]) else {}
            for key in keys:
                value, count = slot.get(key), slot.get(f"{key}_count")
                row.append(_f(value) + (f" ({count[0]}/{count[1]})" if value is not None and count else ""))
        rows.append(row)
    out += ["", *_table(header, rows, set(range(len(header))))]
    if summary["verdicts"]:
        out += [""] + [f"- {cell(v['verdict'])}" for v in summary["verdicts"]]
    return "\n".join(out) + "\n"
